// Indexing kernels of the Vulkan backend (shaders/index.comp): gather, index_add and one_hot.
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

// index.comp's Params
struct Params {
  int32_t total = 0, outer = 0, n = 0, m = 0, inner = 0;
  int32_t x_offset = 0, idx_offset = 0, out_offset = 0;
  int32_t fault_op = 0;
};

void check_indices(const char* op, const TensorRef& indices) {
  KILN_CHECK(indices.dtype == DType::i32 && indices.is_contiguous(), DTypeError, "vulkan ", op,
             " takes contiguous i32 indices, got ", indices.dtype);
}

}  // namespace

namespace {

// gather and index_add alike: `axis` is the [outer, n, inner] tensor the indices point into, src
// and out the tensors read and written, one invocation per element of out
Params axis_params(const TensorRef& axis, const TensorRef& indices, const TensorRef& src, const TensorRef& out,
                   const char* op, FaultOp fault) {
  check_indices(op, indices);
  Params p;
  p.outer = index32(axis.shape[0], op);
  p.n = index32(axis.shape[1], op);
  p.inner = index32(axis.shape[2], op);
  p.m = index32(indices.numel(), op);
  p.total = index32(out.numel(), op);
  p.x_offset = index32(src.offset, op);
  p.idx_offset = index32(indices.offset, op);
  p.out_offset = index32(out.offset, op);
  p.fault_op = static_cast<int32_t>(fault);
  return p;
}

}  // namespace

void VulkanBackend::gather(const TensorRef& x, const TensorRef& indices, const TensorRef& out) {
  KILN_CHECK(x.dtype == DType::f32 || x.dtype == DType::i32 || x.dtype == DType::u8, DTypeError, "vulkan gather: ",
             x.dtype, " is not supported by the Vulkan backend yet (f32, i32 and u8 so far)");
  const Params p = axis_params(x, indices, x, out, "gather", FaultOp::gather);
  record({"index_gather", {x.dtype == DType::u8}, &p, sizeof p,
          {allocation(indices), allocation(x), allocation(out), fault_slot()}, p.total});
}

void VulkanBackend::index_add(const TensorRef& src, const TensorRef& indices, const TensorRef& out) {
  KILN_CHECK(out.dtype == DType::f32 || out.dtype == DType::i32, DTypeError, "vulkan index_add: ", out.dtype,
             " is not supported by the Vulkan backend yet (f32 and i32 so far)");
  const Params p = axis_params(out, indices, src, out, "index_add", FaultOp::index_add);
  record({"index_index_add", {0, out.dtype == DType::i32}, &p, sizeof p,
          {allocation(indices), allocation(src), allocation(out), fault_slot()}, p.total});
}

void VulkanBackend::one_hot(const TensorRef& indices, const TensorRef& out) {
  check_indices("one_hot", indices);
  KILN_CHECK(out.dtype == DType::f32 || out.dtype == DType::i32 || out.dtype == DType::u8, DTypeError,
             "vulkan one_hot: ", out.dtype, " is not supported by the Vulkan backend yet (f32, i32 and u8 so far)");
  Params p;
  p.n = index32(out.shape.empty() ? 0 : out.shape.back(), "one_hot");
  p.outer = index32(indices.numel(), "one_hot");
  p.total = index32(out.numel(), "one_hot");
  p.idx_offset = index32(indices.offset, "one_hot");
  p.out_offset = index32(out.offset, "one_hot");
  p.m = out.dtype == DType::f32 ? 0x3f800000 : 1;  // the bits of 1 in out's dtype
  p.fault_op = static_cast<int32_t>(FaultOp::one_hot);
  record({"index_one_hot", {out.dtype == DType::u8}, &p, sizeof p, {allocation(indices), allocation(out), fault_slot()},
          p.total});
}

}  // namespace kiln::vulkan
