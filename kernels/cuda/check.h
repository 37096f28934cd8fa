// Every CUDA runtime call goes through KILN_CUDA_CHECK: a failure throws with the call, the
// error's name and text, and file:line. KILN_CUDA_LAUNCH_CHECK(op) checks a kernel launch and
// names the op that launched it.
#pragma once

#include <cuda_runtime.h>

#include "kiln/core/error.h"

#define KILN_CUDA_CHECK(call)                                                                     \
  do {                                                                                            \
    cudaError_t kiln_err_ = (call);                                                               \
    KILN_CHECK(kiln_err_ == cudaSuccess, ::kiln::Error, "CUDA call ", #call, " failed: ",          \
               cudaGetErrorName(kiln_err_), " (", cudaGetErrorString(kiln_err_), ")");           \
  } while (0)

#define KILN_CUDA_LAUNCH_CHECK(op)                                                                \
  do {                                                                                            \
    cudaError_t kiln_err_ = cudaGetLastError();                                                   \
    KILN_CHECK(kiln_err_ == cudaSuccess, ::kiln::Error, "cuda ", op, ": kernel launch failed: ",    \
               cudaGetErrorName(kiln_err_), " (", cudaGetErrorString(kiln_err_), ")");           \
  } while (0)

namespace kiln::cuda {

// Lets `kernel` launch with `bytes` of dynamic shared memory (above 48 KiB an opt-in, per kernel
// and device), never lowering what an earlier launch was allowed: a CUDA graph keeps the launches
// it captured, and a smaller launch of the same kernel later in the step must not take the limit
// below one of them (Nsight Compute, replaying a graph's kernels one by one, stopped with
// LaunchFailed on conv2's bf16 weight gradient at batch 512 when conv1's had lowered it).
template <class Kernel>
void allow_dynamic_smem(Kernel* kernel, size_t bytes) {
  cudaFuncAttributes attributes{};
  KILN_CUDA_CHECK(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(kernel)));
  if (static_cast<size_t>(attributes.maxDynamicSharedSizeBytes) < bytes)
    KILN_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace kiln::cuda
