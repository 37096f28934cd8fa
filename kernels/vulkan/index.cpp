// Indexing kernels of the Vulkan backend (shaders/index.comp): gather, index_add and one_hot.
#include <cstdint>

#include "core/error.h"
#include "kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

// index.comp's Params
struct Params {
  int32_t total = 0, outer = 0, n = 0, m = 0, inner = 0;
  int32_t x_offset = 0, idx_offset = 0, out_offset = 0;
  int32_t fault_op = 0;
};

int32_t narrow(int64_t v, const char* op) {
  KILN_CHECK(v >= 0 && v < (int64_t{1} << 31), ShapeError, "vulkan ", op, ": ", v,
             " does not fit the 32-bit indices of the Vulkan kernels");
  return static_cast<int32_t>(v);
}

void check_indices(const char* op, const TensorRef& indices) {
  KILN_CHECK(indices.dtype == DType::i32 && indices.is_contiguous(), DTypeError, "vulkan ", op,
             " takes contiguous i32 indices, got ", indices.dtype);
}

const Allocation* allocation(const TensorRef& t) { return static_cast<const Allocation*>(t.buffer); }

}  // namespace

void VulkanBackend::gather(const TensorRef& x, const TensorRef& indices, const TensorRef& out) {
  check_indices("gather", indices);
  KILN_CHECK(x.dtype != DType::f64, DTypeError, "vulkan gather: f64 is not supported by the Vulkan backend yet");
  Params p;
  p.outer = narrow(x.shape[0], "gather");
  p.n = narrow(x.shape[1], "gather");
  p.inner = narrow(x.shape[2], "gather");
  p.m = narrow(indices.numel(), "gather");
  p.total = narrow(out.numel(), "gather");
  p.x_offset = narrow(x.offset, "gather");
  p.idx_offset = narrow(indices.offset, "gather");
  p.out_offset = narrow(out.offset, "gather");
  p.fault_op = static_cast<int32_t>(FaultOp::gather);
  record({"index_gather", {x.dtype == DType::u8}, &p, sizeof p,
          {allocation(indices), allocation(x), allocation(out), fault_slot()}, p.total});
}

void VulkanBackend::index_add(const TensorRef& src, const TensorRef& indices, const TensorRef& out) {
  check_indices("index_add", indices);
  KILN_CHECK(out.dtype == DType::f32 || out.dtype == DType::i32, DTypeError, "vulkan index_add: ", out.dtype,
             " is not supported by the Vulkan backend yet (f32 and i32 so far)");
  Params p;
  p.outer = narrow(out.shape[0], "index_add");
  p.n = narrow(out.shape[1], "index_add");
  p.inner = narrow(out.shape[2], "index_add");
  p.m = narrow(indices.numel(), "index_add");
  p.total = narrow(out.numel(), "index_add");
  p.x_offset = narrow(src.offset, "index_add");
  p.idx_offset = narrow(indices.offset, "index_add");
  p.out_offset = narrow(out.offset, "index_add");
  p.fault_op = static_cast<int32_t>(FaultOp::index_add);
  record({"index_index_add", {0, out.dtype == DType::i32}, &p, sizeof p,
          {allocation(indices), allocation(src), allocation(out), fault_slot()}, p.total});
}

void VulkanBackend::one_hot(const TensorRef& indices, const TensorRef& out) {
  check_indices("one_hot", indices);
  KILN_CHECK(out.dtype != DType::f64, DTypeError, "vulkan one_hot: f64 is not supported by the Vulkan backend yet");
  Params p;
  p.n = narrow(out.shape.empty() ? 0 : out.shape.back(), "one_hot");
  p.outer = narrow(indices.numel(), "one_hot");
  p.total = narrow(out.numel(), "one_hot");
  p.idx_offset = narrow(indices.offset, "one_hot");
  p.out_offset = narrow(out.offset, "one_hot");
  p.m = out.dtype == DType::f32 ? 0x3f800000 : 1;  // the bits of 1 in out's dtype
  p.fault_op = static_cast<int32_t>(FaultOp::one_hot);
  record({"index_one_hot", {out.dtype == DType::u8}, &p, sizeof p, {allocation(indices), allocation(out), fault_slot()},
          p.total});
}

}  // namespace kiln::vulkan
