// The versions of CUDA matmul (the tutorial ladder in kernels/cuda/matmul/, one file each), callable
// on raw device pointers by kernel-bench and the tests. CudaBackend::matmul (kernels/cuda/matmul.cu)
// is the production path and picks among them.
//
// Every version computes C[b] = op(A[b]) * op(B[b]) exactly as MatmulParams (core/backend.h)
// describes, for any m, n, k, both transposes, any row strides and batch strides (0 broadcasts):
// `a` and `b` point at the first element of batch entry 0, `c` is contiguous [batch, m, n]. The
// kernels are queued on `stream`; nothing synchronises.
#pragma once

#include <cuda_runtime.h>

#include <span>

#include "core/backend.h"

namespace kiln::cuda::matmul {

void naive(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream);         // 01
void coalesced(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream);     // 02
void smem_tiling(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream);   // 03
void blocktile_1d(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream);  // 04
void blocktile_2d(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream);  // 05
void vectorized(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream);    // 06
void warptile(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream);      // 07
// 08: inputs rounded to TF32 (cvt.rna), products on the tensor cores, f32 accumulation.
void tf32_mma(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream);
// f64 (gradchecks): 03's shared-memory tiling in double.
void smem_tiling_f64(const MatmulParams& p, const double* a, const double* b, double* c, cudaStream_t stream);

using Version = void (*)(const MatmulParams&, const float*, const float*, float*, cudaStream_t);
struct NamedVersion {
  const char* name;  // "01_naive", ..., "08_tf32_mma"
  Version run;
  bool tf32;         // rounds its inputs to TF32: judge it with TF32 tolerances
};
// The f32 ladder in order, 01 to 08.
std::span<const NamedVersion> versions();

}  // namespace kiln::cuda::matmul
