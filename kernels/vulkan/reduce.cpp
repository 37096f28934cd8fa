// Reductions of the Vulkan backend (shaders/reduce.comp): sum, mean, max, min, argmax and argmin
// over the middle axis of contiguous x [outer, n, inner].
#include <algorithm>
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

struct Params {  // reduce.comp's
  int32_t outer = 0, n = 0, inner = 0;
  int32_t x_offset = 0, out_offset = 0;
};

constexpr int64_t kMaxGroups = 65535;  // workgroups of a dispatch (rows and column groups beyond loop)

}  // namespace

void VulkanBackend::reduce(ReduceOp op, const TensorRef& x, const TensorRef& out) {
  const std::string_view name = reduce_op_name(op);
  KILN_CHECK(x.shape.size() == 3, ShapeError, "vulkan reduce ", name, ": x must be [outer, n, inner], got ", x.shape);
  const bool is_arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  KILN_CHECK(out.dtype == (is_arg ? DType::i32 : x.dtype), DTypeError, "vulkan reduce ", name, ": out is ", out.dtype,
             ", expected ", is_arg ? DType::i32 : x.dtype);
  KILN_CHECK(x.dtype == DType::f32 || (x.dtype == DType::i32 && op != ReduceOp::mean), DTypeError, "vulkan reduce ",
             name, ": ", x.dtype, " is not supported by the Vulkan backend yet (f32, and i32 but for mean, so far)");
  KILN_CHECK(x.shape[1] > 0 || op == ReduceOp::sum || op == ReduceOp::mean, ValueError, "vulkan reduce ", name,
             ": cannot reduce an empty axis (x ", x.shape, " as [outer, n, inner])");
  KILN_CHECK(x.numel() < (int64_t{1} << 31) && out.numel() < (int64_t{1} << 31) && x.offset < (int64_t{1} << 31) &&
                 out.offset < (int64_t{1} << 31),
             ShapeError, "vulkan reduce ", name, ": ", x.numel(), " elements exceed the 32-bit indices of the Vulkan kernels");
  Params p;
  p.outer = static_cast<int32_t>(x.shape[0]);
  p.n = static_cast<int32_t>(x.shape[1]);
  p.inner = static_cast<int32_t>(x.shape[2]);
  p.x_offset = static_cast<int32_t>(x.offset);
  p.out_offset = static_cast<int32_t>(out.offset);
  const std::vector<int32_t> constants{static_cast<int32_t>(op), x.dtype == DType::i32};
  const std::vector<const Allocation*> buffers{static_cast<const Allocation*>(x.buffer),
                                               static_cast<const Allocation*>(out.buffer)};
  if (p.inner == 1)  // a workgroup per row: as many invocations as the workgroups' threads
    record({subgroups() ? "reduce_rows_subgroup" : "reduce_rows", constants, &p, sizeof p, buffers,
            std::min<int64_t>(p.outer, kMaxGroups) * kWorkgroupSize});
  else  // a workgroup per 32 adjacent outputs
    record({"reduce_columns", constants, &p, sizeof p, buffers,
            std::min<int64_t>(int64_t{p.outer} * ((p.inner + 31) / 32), kMaxGroups) * kWorkgroupSize});
}

}  // namespace kiln::vulkan
