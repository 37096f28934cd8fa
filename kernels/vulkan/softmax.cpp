// softmax, log_softmax and cross-entropy of the Vulkan backend (shaders/softmax.comp,
// shaders/cross_entropy.comp).
#include <algorithm>
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

constexpr int64_t kMaxGroups = 65535;  // workgroups of a dispatch (rows and column groups beyond loop)

void check_f32(const TensorRef& t, const char* op) {
  KILN_CHECK(t.dtype == DType::f32, DTypeError, "vulkan ", op, ": ", t.dtype,
             " is not supported by the Vulkan backend yet (f32 so far)");
}

struct SoftmaxParams {  // softmax.comp's
  int32_t outer = 0, n = 0, inner = 0, x_offset = 0, out_offset = 0;
};

struct CrossEntropyParams {  // cross_entropy.comp's
  int32_t rows = 0, classes = 0, x_offset = 0, target_offset = 0, g_offset = 0, out_offset = 0;
  float smoothing = 0;
  int32_t fault_op = 0;
};

CrossEntropyParams cross_entropy_params(const TensorRef& logits, const TensorRef& targets, double smoothing,
                                        const char* op) {
  check_f32(logits, op);
  KILN_CHECK(logits.shape.size() == 2 && targets.dtype == DType::i32 && targets.numel() == logits.shape[0], ShapeError,
             "vulkan ", op, ": logits must be [N, C] and targets i32 [N], got ", logits.shape, " and ", targets.shape);
  CrossEntropyParams p;
  p.rows = index32(logits.shape[0], op);
  p.classes = index32(logits.shape[1], op);
  index32(logits.numel(), op);
  p.x_offset = index32(logits.offset, op);
  p.target_offset = index32(targets.offset, op);
  p.smoothing = static_cast<float>(smoothing);
  return p;
}

}  // namespace

void VulkanBackend::softmax(const TensorRef& x, const TensorRef& out, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  KILN_CHECK(x.shape.size() == 3, ShapeError, "vulkan ", op, ": x must be [outer, n, inner], got ", x.shape);
  check_f32(x, op);
  SoftmaxParams p;
  p.outer = index32(x.shape[0], op);
  p.n = index32(x.shape[1], op);
  p.inner = index32(x.shape[2], op);
  index32(x.numel(), op);
  p.x_offset = index32(x.offset, op);
  p.out_offset = index32(out.offset, op);
  const std::vector<const Allocation*> buffers{allocation(x), allocation(out)};
  if (p.inner == 1)
    record({"softmax_rows", {log}, &p, sizeof p, buffers, std::min<int64_t>(p.outer, kMaxGroups) * kWorkgroupSize});
  else
    record({"softmax_columns", {log}, &p, sizeof p, buffers,  // a workgroup per 32 adjacent columns
            std::min<int64_t>(int64_t{p.outer} * ((p.inner + 31) / 32), kMaxGroups) * kWorkgroupSize});
}

void VulkanBackend::cross_entropy(const TensorRef& logits, const TensorRef& targets, const TensorRef& losses,
                                  double label_smoothing) {
  CrossEntropyParams p = cross_entropy_params(logits, targets, label_smoothing, "cross_entropy");
  p.out_offset = index32(losses.offset, "cross_entropy");
  p.fault_op = static_cast<int32_t>(FaultOp::cross_entropy);
  record({"cross_entropy_forward", {}, &p, sizeof p, {allocation(logits), allocation(targets), allocation(losses), fault_slot()},
          std::min<int64_t>(p.rows, kMaxGroups) * kWorkgroupSize});
}

void VulkanBackend::cross_entropy_backward(const TensorRef& logits, const TensorRef& targets,
                                           const TensorRef& grad_losses, const TensorRef& grad_logits,
                                           double label_smoothing) {
  CrossEntropyParams p = cross_entropy_params(logits, targets, label_smoothing, "cross_entropy_backward");
  check_f32(grad_losses, "cross_entropy_backward");
  p.g_offset = index32(grad_losses.offset, "cross_entropy_backward");
  p.out_offset = index32(grad_logits.offset, "cross_entropy_backward");
  p.fault_op = static_cast<int32_t>(FaultOp::cross_entropy_backward);
  record({"cross_entropy_backward", {}, &p, sizeof p,
          {allocation(logits), allocation(targets), allocation(grad_losses), allocation(grad_logits), fault_slot()},
          std::min<int64_t>(p.rows, kMaxGroups) * kWorkgroupSize});
}

}  // namespace kiln::vulkan
