// matmul on the GPU: C[b] = op(A[b]) * op(B[b]) for b in [0, batch), C contiguous [batch, m, n],
// op(A) m x k, op(B) k x n, either operand transposed, with row strides and batch strides (0
// broadcasts one matrix over the batch): MatmulParams in core/backend.h. f32 and f64.
//
// Bench: `kernel-bench --only matmul` times every version against cuBLAS SGEMM (FP32 and TF32)
// after checking each against cuBLAS's result. Figures: kernels/README.md, from kernel-bench.
//
// The versions are a ladder, one file each in kernels/cuda/matmul/ (after siboehm/SGEMM_CUDA),
// all taking any shape and layout: every operand is read as a "panel" (matmul/common.cuh), so
// that loads stay coalesced whichever way memory runs, and edge tiles load zeros.
//   01_naive: one thread per element of C, reading A and B from global memory; a warp spans
//     32 rows, so its accesses are scattered.
//   02_coalesced: the same with a warp spanning 32 columns: coalesced reads of B and writes of C.
//   03_smem_tiling: 32 x 32 tiles of A and B staged in shared memory; each global value is read
//     once per block instead of once per thread. Also the f64 kernel.
//   04_1d_blocktile: each thread computes 8 elements of a column, reusing one value of B 8 times.
//   05_2d_blocktile: 128 x 128 block tiles, an 8 x 8 outer product per thread and per p.
//   06_vectorized: float4 global loads and stores, A stored transposed (k-major) in shared memory
//     so that the inner loop reads both operands with 16-byte loads.
//   07_warptile: warps own 64 x 32 tiles with lanes laid out for conflict-free shared loads,
//     plus register-staged double buffering: the best FP32 (SIMT) version.
//   08_tf32_mma: tensor cores through mma.sync m16n8k8 TF32, on 07's structure.
//
// The production path (CudaBackend::matmul) picks: 08 when kiln::allow_tf32() and f32; else 07
// when the product has enough 128 x 128 tiles to fill the GPU, and 03 otherwise (small products,
// such as the MNIST MLP's 64 x 128 x 784, would leave most SMs idle with 128 x 128 tiles);
// f64 always runs 03.
#include <algorithm>

#include "core/precision.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda {

namespace matmul {

std::span<const NamedVersion> versions() {
  static const NamedVersion all[] = {
      {"01_naive", naive, false},           {"02_coalesced", coalesced, false},
      {"03_smem_tiling", smem_tiling, false}, {"04_1d_blocktile", blocktile_1d, false},
      {"05_2d_blocktile", blocktile_2d, false}, {"06_vectorized", vectorized, false},
      {"07_warptile", warptile, false},     {"08_tf32_mma", tf32_mma, true},
  };
  return all;
}

}  // namespace matmul

void CudaBackend::matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& p) {
  KILN_CHECK(a.dtype == out.dtype && b.dtype == out.dtype, DTypeError,
             "cuda backend: matmul needs one dtype, got ", a.dtype, ", ", b.dtype, " -> ", out.dtype);
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  if (out.dtype == DType::f64) {
    matmul::smem_tiling_f64(p, a.data<double>(), b.data<double>(), out.data<double>(), stream_);
    return;
  }
  KILN_CHECK(out.dtype == DType::f32, DTypeError, "cuda backend: matmul does not support dtype ", out.dtype);
  const float* A = a.data<float>();
  const float* B = b.data<float>();
  float* C = out.data<float>();
  if (allow_tf32()) return matmul::tf32_mma(p, A, B, C, stream_);
  // Big tiles pay when there are at least as many as SMs; below that, 32 x 32 tiles spread the
  // work over more of the GPU. (Threshold to be tuned from kernel-bench.)
  int sms = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
  const int64_t big_tiles = p.batch * ((p.m + 127) / 128) * ((p.n + 127) / 128);
  if (big_tiles >= sms) return matmul::warptile(p, A, B, C, stream_);
  matmul::smem_tiling(p, A, B, C, stream_);
}

}  // namespace kiln::cuda
