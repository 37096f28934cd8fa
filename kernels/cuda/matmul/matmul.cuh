// The versions of CUDA matmul (the tutorial ladder in kernels/cuda/matmul/, one file each), callable
// on raw device pointers by kernel-bench and the tests. CudaBackend::matmul (kernels/cuda/matmul.cu)
// is the production path and picks among them.
//
// Every version computes C[b] = op(A[b]) * op(B[b]) exactly as MatmulParams (core/backend.h)
// describes, for any m, n, k, both transposes, any row strides and batch strides (0 broadcasts):
// `a` and `b` point at the first element of batch entry 0, `c` is contiguous [batch, m, n]. Each
// element goes through the epilogue `e` as it is stored (the bias of its column, then the
// activation; DeviceEpilogue{} stores the product as it is). The kernels are queued on `stream`;
// nothing synchronises.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "kiln/core/backend.h"
#include "kiln/kernels/cuda/cuda_backend.h"

namespace kiln::cuda::matmul {

using Version = void (*)(const MatmulParams&, const float*, const float*, float*, const DeviceEpilogue<float>&,
                         cudaStream_t);

void naive(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);         // 01
void coalesced(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);     // 02
void smem_tiling(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);   // 03
void blocktile_1d(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);  // 04
void blocktile_2d(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);  // 05
void vectorized(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);    // 06
void warptile(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);      // 07
// 07 compiled for 1 block per SM (__launch_bounds__(256, 1)) instead of 2: no spills, less occupancy.
void warptile_lb1(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
// 08: inputs rounded to TF32 (cvt.rna), products on the tensor cores, f32 accumulation.
void tf32_mma(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
// 09: k cut into S chunks, one 64 x 64 partial tile per chunk, then a fixed-order sum of the S
// partials (deterministic). split_k picks S for the current device (split_k_splits) and takes its
// workspace from cudaMallocAsync on `stream`; the production path calls split_k_run with
// a workspace from the backend's allocator.
// 10: 08's tensor-core tiles fed by a 3-stage cp.async pipeline, inputs truncated to TF32 (raw
// f32 bits into mma). Runs 08 where async_applies is false (a cp.async source not 16-byte
// aligned: a base pointer, lda, ldb or a batch stride not a multiple of 4 floats).
void tf32_async(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
// Whether the cp.async versions (10, 11, 12) can read these operands: 16-byte aligned base
// pointers, and lda, ldb and both batch strides multiples of 4 floats.
bool async_applies(const MatmulParams& p, const float* a, const float* b);
// 11: 10's pipeline with 64 x 64 warp tiles and ldmatrix, on 128 x 256 block tiles (one block per
// SM); 11_tf32_ldmatrix_128x128 on 128 x 128 tiles (two per SM). Inputs truncated to TF32 as in
// 10. Run 08 where async_applies is false.
void tf32_ldmatrix(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
void tf32_ldmatrix_128x128(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
// 12: every input split into two TF32 values, three mma per product, short sums on the tensor
// cores: f32 accuracy at tensor-core speed. Runs 07 where async_applies is false.
void split_tf32x3(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
// 13: Hopper's wgmma (warpgroup tensor-core products straight from shared memory) fed by TMA
// copies, inputs truncated to TF32 as in 10, on 128 x 256 block tiles (tf32_wgmma), 128 x 128 or
// 128 x 64. Operands that are not K-major with 16-byte rows (B not transposed, A transposed, odd
// strides) are first packed K-major into a workspace. The versions run 11 where
// tf32_wgmma_applies is false, and take their workspace from cudaMallocAsync on `stream`; the
// production path calls tf32_wgmma_run with tile_n 0 (13 picks the width by counting waves) and
// tf32_wgmma_workspace(p, a, b) bytes (0: none needed, may be null) from the backend's allocator.
void tf32_wgmma(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
void tf32_wgmma_128x128(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
void tf32_wgmma_128x64(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
// Whether 13 runs this product on `device`: an sm_90 GPU (compute capability 9.0 exactly: wgmma
// is sm_90a code) and m, n, k under 2^31 (TMA coordinates are 32-bit). Asked once per device.
bool tf32_wgmma_applies(const MatmulParams& p, int device);
size_t tf32_wgmma_workspace(const MatmulParams& p, const float* a, const float* b);
void tf32_wgmma_run(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
                    int tile_n, void* workspace, cudaStream_t stream);
void split_k(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream);
// S for this product on a GPU of `sms` SMs: about two blocks per SM, no chunk under 64 values of k.
int64_t split_k_splits(const MatmulParams& p, int sms);
// Runs with at most `splits` chunks (fewer when k is short); `workspace` holds splits * m * n
// floats, unused (may be null) when it comes to one chunk. Batch entries run one after another.
void split_k_run(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
                 int64_t splits, float* workspace, cudaStream_t stream);
// 09 on bf16 operands and result (each element widened as it loads, f32 partials, each element of
// C rounded once after the epilogue): production bf16's long, thin products and misaligned small
// ones. The workspace is still splits * m * n floats.
void split_k_run(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c, const DeviceEpilogue<bf16>& e,
                 int64_t splits, float* workspace, cudaStream_t stream);
// 14: bf16 operands and result (mixed precision), f32 accumulation on mma.sync m16n8k16, 08's
// 128 x 128 tiles; each element rounded to bf16 once, after the epilogue. Any shape and layout.
void bf16_mma(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c, const DeviceEpilogue<bf16>& e,
              cudaStream_t stream);
// 15: 13's kernel on bf16 tiles (wgmma m64nNk16, f32 accumulation), each operand read from shared
// memory as it lies, K-major or MN-major; one TMA cannot read in place (rows not 16-byte aligned)
// is first packed. Where tf32_wgmma_applies; bf16_wgmma runs 14 elsewhere
// and takes its workspace from cudaMallocAsync, picking the tile width as the production path does
// (bf16_wgmma_run with tile_n 0 and bf16_wgmma_workspace(p, a, b) bytes).
void bf16_wgmma(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c, const DeviceEpilogue<bf16>& e,
                cudaStream_t stream);
size_t bf16_wgmma_workspace(const MatmulParams& p, const bf16* a, const bf16* b);
void bf16_wgmma_run(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c, const DeviceEpilogue<bf16>& e,
                    int tile_n, void* workspace, cudaStream_t stream);
// 16: 15's kernel with k split into chunks of at least 256 (one tile and one chunk a block, as
// many chunks as fill the SMs once: bf16_wgmma_split_k_splits), each block's f32 sums added in
// order by 09's reduce kernel, which applies the epilogue and rounds once: production bf16's
// products of a few tiles and a long k. One product (batch 1); where tf32_wgmma_applies. Run with
// `splits` chunks at most and bf16_wgmma_split_k_workspace(p, a, b, splits) bytes.
int64_t bf16_wgmma_split_k_splits(const MatmulParams& p, int sms);
size_t bf16_wgmma_split_k_workspace(const MatmulParams& p, const bf16* a, const bf16* b, int64_t splits);
void bf16_wgmma_split_k_run(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c,
                            const DeviceEpilogue<bf16>& e, int64_t splits, void* workspace, cudaStream_t stream);
// 17: 3xTF32 (12's f32 accuracy) on 13's kernel, 128 x 64 tiles, k split into chunks where the
// tiles are few (tf32x3_wgmma_splits: as many as fill the SMs once; one product at a time), each
// block's f32 sums added in order by 09's reduce kernel. Run with `splits` chunks at most and
// tf32x3_wgmma_workspace(p, a, b, splits) bytes (packed operands, partial sums; 0: may be null),
// where tf32_wgmma_applies. tf32x3_wgmma, the ladder's entry, picks its splits, takes its
// workspace from cudaMallocAsync, and runs 12 elsewhere.
int64_t tf32x3_wgmma_splits(const MatmulParams& p, const float* a, const float* b, int sms);
size_t tf32x3_wgmma_workspace(const MatmulParams& p, const float* a, const float* b, int64_t splits);
void tf32x3_wgmma_run(const MatmulParams& p, const float* a, const float* b, float* c,
                      const DeviceEpilogue<float>& e, int64_t splits, void* workspace, cudaStream_t stream);
void tf32x3_wgmma(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
                  cudaStream_t stream);
// 18: L lanes a element of C (L the power of two that leaves each lane at most 4 of k's pairs),
// every load of a round in flight at once, the lanes' sums added by shuffles in a fixed order:
// tiny products (a C of thousands over a short k) in one launch and one round trip to memory.
void dots(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
          cudaStream_t stream);
// 09's second kernel: c[i][j] = epilogue(sum over s, in order, of partials[s][i][j]), rounded
// once to C's type; partials [splits, m, n].
void split_k_reduce(const float* partials, bf16* c, int64_t m, int64_t n, int64_t splits,
                    const DeviceEpilogue<bf16>& e, cudaStream_t stream);
void split_k_reduce(const float* partials, float* c, int64_t m, int64_t n, int64_t splits,
                    const DeviceEpilogue<float>& e, cudaStream_t stream);
// f64 (gradchecks): 03's shared-memory tiling in double.
void smem_tiling_f64(const MatmulParams& p, const double* a, const double* b, double* c, const DeviceEpilogue<double>& e, cudaStream_t stream);

struct NamedVersion {
  const char* name;  // "01_naive", ..., "13_tf32_wgmma"
  Version run;
  bool tf32;         // rounds its inputs to TF32: judge it with TF32 tolerances
};
// The f32 ladder in order, 01 to 13 (with variants of a version after it).
std::span<const NamedVersion> versions();

}  // namespace kiln::cuda::matmul
