// The kernels the Vulkan backend does not have yet. Each throws BackendUnavailable naming the
// backend and the op, as core/backend.h promises for a missing kernel: never a silent fallback
// to the host. The list shrinks as the shaders arrive.
#include "core/error.h"
#include "kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {
[[noreturn]] void missing(const char* op) {
  KILN_FAIL(BackendUnavailable, "vulkan ", op, ": the Vulkan backend has no kernel for this op yet "
            "(so far: fill, arange, copy, unary, unary_backward, binary, uniform, normal, dropout, gather, index_add, one_hot, reduce, softmax, cross_entropy, matmul, the optimizer steps); use --device cpu or cuda");
}
}  // namespace

void VulkanBackend::conv2d(const TensorRef&, const TensorRef&, const TensorRef&, const Conv2dParams&,
                           const Epilogue&) {
  missing("conv2d");
}
void VulkanBackend::conv2d_backward_input(const TensorRef&, const TensorRef&, const TensorRef&,
                                          const Conv2dParams&) {
  missing("conv2d_backward_input");
}
void VulkanBackend::conv2d_backward_weight(const TensorRef&, const TensorRef&, const TensorRef&,
                                           const Conv2dParams&) {
  missing("conv2d_backward_weight");
}
void VulkanBackend::max_pool2d(const TensorRef&, const TensorRef&, const TensorRef&, const Pool2dParams&) {
  missing("max_pool2d");
}
void VulkanBackend::max_pool2d_backward(const TensorRef&, const TensorRef&, const TensorRef&, const Pool2dParams&) {
  missing("max_pool2d_backward");
}
void VulkanBackend::avg_pool2d(const TensorRef&, const TensorRef&, const Pool2dParams&) { missing("avg_pool2d"); }
void VulkanBackend::avg_pool2d_backward(const TensorRef&, const TensorRef&, const Pool2dParams&) {
  missing("avg_pool2d_backward");
}
void VulkanBackend::batch_norm_stats(const TensorRef&, const TensorRef&, const TensorRef&) {
  missing("batch_norm_stats");
}
void VulkanBackend::batch_norm_apply(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&,
                                     const TensorRef&, const TensorRef&) {
  missing("batch_norm_apply");
}
void VulkanBackend::batch_norm_backward(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&,
                                        const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&) {
  missing("batch_norm_backward");
}
}  // namespace kiln::vulkan
