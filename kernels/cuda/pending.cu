// The CUDA kernel families still to be written. Each throws BackendUnavailable naming the op, so
// a program that reaches one learns which; there is no silent fallback to the host.
#include "kernels/cuda/cuda_backend.h"

#include "core/error.h"

namespace kiln::cuda {

namespace {
[[noreturn]] void pending(const char* op) {
  KILN_FAIL(BackendUnavailable, "cuda backend: ", op, " has no CUDA kernel yet; run this model with --device cpu");
}
}  // namespace

void CudaBackend::softmax(const TensorRef&, const TensorRef&, bool log) { pending(log ? "log_softmax" : "softmax"); }
void CudaBackend::gather(const TensorRef&, const TensorRef&, const TensorRef&) { pending("gather"); }
void CudaBackend::index_add(const TensorRef&, const TensorRef&, const TensorRef&) { pending("index_add"); }
void CudaBackend::cross_entropy(const TensorRef&, const TensorRef&, const TensorRef&, double) { pending("cross_entropy"); }
void CudaBackend::cross_entropy_backward(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&, double) {
  pending("cross_entropy_backward");
}
void CudaBackend::one_hot(const TensorRef&, const TensorRef&) { pending("one_hot"); }
void CudaBackend::matmul(const TensorRef&, const TensorRef&, const TensorRef&, const MatmulParams&) { pending("matmul"); }
void CudaBackend::conv2d(const TensorRef&, const TensorRef&, const TensorRef&, const TensorRef&, const Conv2dParams&) {
  pending("conv2d");
}
void CudaBackend::conv2d_backward_input(const TensorRef&, const TensorRef&, const TensorRef&, const Conv2dParams&) {
  pending("conv2d_backward_input");
}
void CudaBackend::conv2d_backward_weight(const TensorRef&, const TensorRef&, const TensorRef&, const Conv2dParams&) {
  pending("conv2d_backward_weight");
}
void CudaBackend::max_pool2d(const TensorRef&, const TensorRef&, const TensorRef&, const Pool2dParams&) {
  pending("max_pool2d");
}
void CudaBackend::max_pool2d_backward(const TensorRef&, const TensorRef&, const TensorRef&, const Pool2dParams&) {
  pending("max_pool2d_backward");
}
void CudaBackend::avg_pool2d(const TensorRef&, const TensorRef&, const Pool2dParams&) { pending("avg_pool2d"); }
void CudaBackend::avg_pool2d_backward(const TensorRef&, const TensorRef&, const Pool2dParams&) {
  pending("avg_pool2d_backward");
}
void CudaBackend::sgd_step(std::span<const TensorRef>, std::span<const TensorRef>, std::span<const TensorRef>,
                           const SgdStep&) {
  pending("sgd_step");
}
void CudaBackend::adam_step(std::span<const TensorRef>, std::span<const TensorRef>, std::span<const TensorRef>,
                            std::span<const TensorRef>, std::span<const TensorRef>, const AdamStep&) {
  pending("adam_step");
}
void CudaBackend::adadelta_step(std::span<const TensorRef>, std::span<const TensorRef>, std::span<const TensorRef>,
                                std::span<const TensorRef>, const AdadeltaStep&) {
  pending("adadelta_step");
}
void CudaBackend::rmsprop_step(std::span<const TensorRef>, std::span<const TensorRef>, std::span<const TensorRef>,
                               std::span<const TensorRef>, std::span<const TensorRef>, const RmspropStep&) {
  pending("rmsprop_step");
}

}  // namespace kiln::cuda
