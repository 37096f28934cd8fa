// Batch normalisation's training passes on CUDA, by any of the three ways batch_norm.cu explains,
// for the tests (each way against the CPU) and kernel-bench (each way timed). Backend calls take
// Path::automatic.
#pragma once

#include "kiln/kernels/cuda/cuda_backend.h"

namespace kiln::cuda::batch_norm {

// cluster: a channel's runs on the blocks of one thread-block cluster (sm_90), which hold them in
// registers and shared memory and add their sums through distributed shared memory; what they cannot
// hold they read again, from L2 where it still is. Any size; on sm_90 GPUs.
// one_kernel: one cooperative launch; x (and the gradient) stay in registers across a grid-wide
// barrier, so each is read once. Only for inputs the GPU's resident threads can hold at once.
// two_passes: the sums in one kernel, then the output in a second that reads x (and the
// gradient) again, the second walking each block's run backwards so that it starts on what the
// first left in L2. Any size.
enum class Path { automatic, cluster, one_kernel, two_passes };

// Whether one_kernel can take x [N, C, S] on b's device, for the forward or the backward (which
// holds twice as much a thread): its grid fits on the GPU at once.
bool one_kernel_fits(CudaBackend& b, const TensorRef& x, bool backward);

// Whether cluster runs on b's device for x's dtype: an sm_90 GPU and the kernels built for it.
bool cluster_available(CudaBackend& b, const TensorRef& x);

// Backend::batch_norm_train and Backend::batch_norm_backward by `path` (one_kernel where it does
// not fit, or cluster where the GPU lacks it, is an error; automatic takes cluster where the GPU has
// it, else one_kernel where it fits, else two_passes).
void train(CudaBackend& b, const TensorRef& x, const TensorRef& weight, const TensorRef& bias, double eps,
           const TensorRef& y, const TensorRef& mean, const TensorRef& var, const TensorRef& invstd,
           Path path = Path::automatic);
void backward(CudaBackend& b, const TensorRef& x, const TensorRef& grad, const TensorRef& mean,
              const TensorRef& invstd, const TensorRef& weight, const TensorRef& grad_x,
              const TensorRef& grad_weight, const TensorRef& grad_bias, Path path = Path::automatic);

}  // namespace kiln::cuda::batch_norm
