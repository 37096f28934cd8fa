// matmul on the GPU: C[b] = op(A[b]) * op(B[b]) for b in [0, batch), C contiguous [batch, m, n],
// op(A) m x k, op(B) k x n, either operand transposed, with row strides and batch strides (0
// broadcasts one matrix over the batch): MatmulParams in core/backend.h. f32, f64 and bf16.
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
//     plus register-staged double buffering: the best FP32 (SIMT) version. 07_warptile_lb1 is
//     the same kernel compiled for one block per SM instead of two (no register spills).
//   08_tf32_mma: tensor cores through mma.sync m16n8k8 TF32, on 07's structure.
//   09_split_k: for few output tiles and a long k (an MLP layer's 64 x 128 x 9216): k cut into S
//     chunks, a 64 x 64 partial tile per chunk and per block, then a second kernel adding the S
//     partials in a fixed order (deterministic; no atomics). Workspace [S, m, n].
//   10_tf32_async: 08's tensor-core tiles fed by cp.async in a 3-stage pipeline of BK = 32 slices,
//     shared tiles kept in memory's own layout (no transpose, padded for conflict-free fragment
//     loads), inputs truncated to TF32 (raw f32 bits into mma). Needs 16-byte aligned operands
//     (base, lda, ldb, batch strides % 4 floats); else runs 08.
//   11_tf32_ldmatrix: 10 with 64 x 64 warp tiles (a third fewer shared-memory bytes per mma),
//     ldmatrix for tiles whose rows run along k, addresses of the cp.async copies worked out once.
//   12_3xtf32: f32 accuracy from the tensor cores: each input split into a TF32 head and tail,
//     three mma per product, the tensor cores' sums kept to one slice of k (they round toward
//     zero as they add), NaN results recomputed in f32 (so infinities come out as in f32).
//   13_tf32_wgmma: Hopper only (sm_90a code): warpgroup tensor-core products (wgmma) read
//     straight from shared memory, fed by the copy engine (TMA) in a warp-specialized pipeline;
//     an operand not stored K-major (B in the plain product, A^T) is loaded from shared memory
//     into registers, where wgmma takes its first operand (when both are, one is first packed
//     K-major). Tiles of 128 x 256, 128 x 128 or 128 x 64. Inputs truncated to TF32 as in 10.
//     Runs 11 on other GPUs.
//   14_bf16_mma: bf16 operands and result (mixed precision), f32 accumulation: mma.sync m16n8k16
//     on 08's structure, shared tiles K-major so that each fragment register is one shared load.
//   15_bf16_wgmma: 13's kernel on bf16 tiles (in 13's file): wgmma m64nNk16 from shared memory,
//     MN-major operands read in place through wgmma's transpose (16-bit types have one).
//   16_bf16_wgmma_split_k: 15 with k cut into chunks, one tile and one chunk a block, their f32
//     sums added in order by 09's reduce kernel (in 13's file): few tiles and a long k.
//   17_3xtf32_wgmma: 12's 3xTF32 on 13's kernel (in 13's file), the rows operand split in
//     registers and B's tile in shared memory once it lands, 128 x 64 tiles, k split as 16 does
//     where the tiles are few. Runs 12 on other GPUs.
//   18_dots: tiny products (a C of thousands over a short k: the CNN's last layer): a few lanes a
//     element of C, all their loads in flight at once, their sums added by shuffles in a fixed
//     order; one launch and one round trip to memory where 03 walks k slice by slice.
//
// The production path (CudaBackend::matmul) picks by the number of 128 x 128 output tiles T:
//   - T >= SMs / 4, f32 on an sm_90 GPU: 17, unless it would first pack an operand for a k under
//     256 (as 13 below). On an H200 (docs/runs/2026-11-28-h200-3xtf32-regs) 17 ran 4096^3 in
//     1.69 ms [fig cuda.matmul.x3.4096.17.ms] against 12's 2.51 [fig cuda.matmul.x3.4096.12.ms]
//     and cuBLAS SGEMM's 2.68 [fig cuda.matmul.x3.4096.cublas-fp32.ms], the CNN's fc1 input
//     gradient at batch 512 (512 x 9216 x 128) in 40.8 µs [fig cuda.matmul.x3.dx-b512.17.us]
//     against 07's 68.0 [fig cuda.matmul.x3.dx-b512.07.us]; its weight gradient at batch 64
//     (9216 x 128 x 64 A^T, both operands MN-major: one packed) stays on 07 (below):
//     17 took 18.5 µs [fig cuda.matmul.nan-out-of-line.dw-b64.17.new.us] there, 07
//     13.0 [fig cuda.matmul.nan-out-of-line.dw-b64.07.new.us].
//   - T >= SMs / 4, f32 elsewhere: 12 (3xTF32: f32 accuracy on the tensor cores) when its operands are
//     16-byte aligned for cp.async and k >= 256, else 07. At 4096^3 12 ran
//     1.40x [fig cuda.matmul.12-over-07.4096] faster than 07 (2.52 ms [fig cuda.matmul.12.4096.ms]
//     against 3.52 [fig cuda.matmul.07.4096.ms]), at 1024^3
//     1.51x [fig cuda.matmul.12-over-07.1024] (H100, kernel-bench, docs/runs/2026-11-26-h100). With
//     its NaN recomputation out of line (tensor_core.cuh's RecomputeNan), kernel-bench has 12 the
//     faster at k = 64 too: fc1's weight gradient at batch 64 (9216 x 128 x 64 A^T)
//     10.5 µs [fig cuda.matmul.nan-out-of-line.dw-b64.12.new.us] against 07's
//     13.0 [fig cuda.matmul.nan-out-of-line.dw-b64.07.new.us] (H200,
//     docs/runs/2026-11-29-h200-nan-out-of-line). But in the CNN's step it was the slower, cold
//     (docs/runs/2026-11-29-h200-relu-weight) and warm: 15.4 µs [fig cuda.matmul.window-ncu.step-dw.12.us]
//     against 07's 13.7 [fig cuda.matmul.window-ncu.step-dw.07.us] (ncu, L2 as the step leaves it,
//     docs/runs/2026-11-29-h200-window-ncu), not yet explained, so short products stay on 07.
//   - T >= SMs / 4, allow_tf32: on an sm_90 GPU (H100, H200), 13, on the tile width it picks
//     (128 x 256 where such tiles fill the GPU, 128 x 128 or 128 x 64 where they would leave SMs
//     idle), unless it would first pack an operand (both run along m and n, or rows not 16-byte
//     aligned) for a k under 256, where the packing pass costs more than 11 takes for the whole
//     product. Elsewhere 11 on 128 x 256 tiles when they fill the GPU
//     twice (2 x SMs tiles), else 11 on 128 x 128 tiles; 08 when the operands are not aligned for
//     cp.async. (1024^3 has 64 tiles of 128 x 128 on 132 SMs and 07 on them still ran
//     3x [fig cuda.matmul.07-over-03.1024] faster than 03, so they pay well before they fill every
//     SM.)
//   - else, a tiny product (m n k <= 2^20, each batch entry): 18 (the CNN's last layer; figures in
//     18_dots.cu);
//   - else, one batch entry and a split into S >= 4 chunks (split_k_splits: about two blocks per
//     SM, chunks of >= 64, so k >= 256): 09, or in f32 on an sm_90 GPU with k >= 2048, 17 split
//     into its own chunks (the CNN's fc1 at batch 512, 512 x 128 x 9216:
//     26.8 µs [fig cuda.matmul.x3.fc1-b512.17.us] against 09's 93.1 [fig cuda.matmul.x3.fc1-b512.09.us]; at
//     batch 64 15.2 [fig cuda.matmul.x3.fc1-b64.17.us] against 18.5 [fig cuda.matmul.x3.fc1-b64.09.us];
//     the MLP's 64 x 128 x 784 stays on 09, 11.6 µs [fig cuda.matmul.x3.mlp-fc1.09.us] against 17's
//     12.3 [fig cuda.matmul.x3.mlp-fc1.17.us]). Splitting pays when each of the few tiles would
//     otherwise walk a long k alone; below 4 chunks the second launch costs about what it saves;
//   - else 03 (small products: 784 x 128 x 64).
// f64 always runs 03. bf16 runs 16 on long, thin products (a few tiles, k >= 2048) on an sm_90
// GPU, else 15 there (but for a misaligned operand with k < 256), else 09 on a few tiles, else 14
// (the reasons, with their figures: CudaBackend::matmul). The SM count is asked once per device
// (device_attribute).
//
// The epilogue (core/backend.h): every version stores each element of C through it, so a Linear
// layer's bias and ReLU cost no pass of their own: 03-05 and 01-02 as they store an element,
// 06-07 in store4, 08 and 10-13 in store_mma_tiles (after 12's NaN recompute), 09 in its reduce
// kernel (or its one chunk's store). Measured (H100 80GB HBM3, kernel-bench,
// docs/runs/2026-11-26-h100, production f32 path): bias + ReLU in the epilogue add at most
// 4% [fig cuda.matmul.epilogue.max-pct] to the product's time
// (16% [fig cuda.matmul.epilogue.9216x128x64At.pct] at 9216 x 128 x 64 A^T), while the same two as
// passes of their own after it take 8-111% [fig cuda.matmul.passes.pct-range] longer than the fused
// product (784 x 128 x 64: 0.0061 ms [fig cuda.matmul.epilogue.784x128x64.ms] fused,
// 0.0128 ms [fig cuda.matmul.passes.784x128x64.ms] with passes). Earlier measurements and open
// questions: kernels/cuda/NOTES.md.
#include <algorithm>

#include "kiln/core/precision.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda {

namespace matmul {

// Products of at most this many multiply-adds (each batch entry) that few tiles cover run 18.
constexpr int64_t kTinyProduct = int64_t{1} << 20;

std::span<const NamedVersion> versions() {
  static const NamedVersion all[] = {
      {"01_naive", naive, false},           {"02_coalesced", coalesced, false},
      {"03_smem_tiling", smem_tiling, false}, {"04_1d_blocktile", blocktile_1d, false},
      {"05_2d_blocktile", blocktile_2d, false}, {"06_vectorized", vectorized, false},
      {"07_warptile", warptile, false},     {"07_warptile_lb1", warptile_lb1, false},
      {"08_tf32_mma", tf32_mma, true},      {"09_split_k", split_k, false},
      {"10_tf32_async", tf32_async, true},  {"11_tf32_ldmatrix", tf32_ldmatrix, true},
      {"11_tf32_ldmatrix_128x128", tf32_ldmatrix_128x128, true},
      {"12_3xtf32", split_tf32x3, false},   {"13_tf32_wgmma", tf32_wgmma, true},
      {"13_tf32_wgmma_128x128", tf32_wgmma_128x128, true},
      {"13_tf32_wgmma_128x64", tf32_wgmma_128x64, true},
      {"17_3xtf32_wgmma", tf32x3_wgmma, false},
      {"18_dots", dots, false},
  };
  return all;
}

bool async_applies(const MatmulParams& p, const float* a, const float* b) {
  return aligned16(a, p.lda, p.batch_stride_a) && aligned16(b, p.ldb, p.batch_stride_b);
}

}  // namespace matmul

void CudaBackend::matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& p,
                         const Epilogue& epilogue) {
  KILN_CHECK(a.dtype == out.dtype && b.dtype == out.dtype, DTypeError,
             "cuda backend: matmul needs one dtype, got ", a.dtype, ", ", b.dtype, " -> ", out.dtype);
  KILN_CHECK(!epilogue.bias.defined() || (epilogue.bias.dtype == out.dtype && epilogue.bias.numel() == p.n),
             ShapeError, "cuda backend: matmul's bias must be [", p.n, "] ", out.dtype, ", got ", epilogue.bias.shape,
             " ", epilogue.bias.dtype);
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  if (out.dtype == DType::f64) {
    matmul::smem_tiling_f64(p, a.data<double>(), b.data<double>(), out.data<double>(),
                            device_epilogue<double>(epilogue), stream_);
    return;
  }
  const int sms = device_attribute(cudaDevAttrMultiProcessorCount, device_);
  const int64_t big_tiles = p.batch * ((p.m + 127) / 128) * ((p.n + 127) / 128);
  const bool few_tiles = big_tiles < std::max(sms / 4, 1);
  const int64_t splits = few_tiles && p.batch == 1 ? matmul::split_k_splits(p, sms) : 1;
  // 09's workspace, freed right after queuing: the pool is stream-ordered, so the memory is not
  // reused before the kernels on this stream are done with it.
  auto split_k = [&](const auto* A, const auto* B, auto* C, const auto& e) {
    float* workspace =
        splits > 1 ? static_cast<float*>(allocate(static_cast<size_t>(splits * p.m * p.n) * sizeof(float))) : nullptr;
    matmul::split_k_run(p, A, B, C, e, splits, workspace, stream_);
    if (workspace) deallocate(workspace);
  };
  if (out.dtype == DType::bf16) {
    const bf16 *A = a.data<bf16>(), *B = b.data<bf16>();
    bf16* C = out.data<bf16>();
    const DeviceEpilogue<bf16> e = device_epilogue<bf16>(epilogue);
    // 15 on its narrow tiles ran the MNIST MLP's products faster than 14 and than cuBLAS
    // (kernel-bench), but a long k on a few tiles is walked by a few blocks alone: the CNN's
    // 64 x 128 x 9216 took 35.3 µs [fig cuda.matmul.15.64x128x9216.us] there, 09 in f32
    // 18.0 [fig cuda.matmul.09.64x128x9216.us], so from k >= 2048 those go to 16, which splits k
    // over 15's kernel (64 x 128 x 784 stays on 15: 6.6 µs [fig cuda.matmul.15.64x128x784.us]
    // against 09's f32 11.5 [fig cuda.matmul.09.64x128x784.us]). 09 on bf16 had taken the CNN's fc1
    // in 20.2 µs [fig cuda.matmul.bf16.64x128x9216.production.us] (docs/runs/2026-11-27-h100-bf16-kernels);
    // through 16 it takes 9.4 µs [fig cuda.matmul.production-bf16.64x128x9216.split.us], and
    // 14.2 [fig cuda.matmul.production-bf16.512x128x9216.split.us] at batch 512
    // (docs/runs/2026-11-27-h100-split-k). A misaligned operand that 15 would pack for a short k
    // goes to 09 on a few tiles (it reads any layout), else to 14.
    const bool long_k = few_tiles && splits >= 4 && p.k >= 2048;
    if (long_k && matmul::tf32_wgmma_applies(p, device_)) {
      const int64_t chunks = matmul::bf16_wgmma_split_k_splits(p, sms);
      void* workspace = allocate(matmul::bf16_wgmma_split_k_workspace(p, A, B, chunks));
      matmul::bf16_wgmma_split_k_run(p, A, B, C, e, chunks, workspace, stream_);
      deallocate(workspace);
      return;
    }
    if (!long_k && matmul::tf32_wgmma_applies(p, device_)) {
      const size_t bytes = matmul::bf16_wgmma_workspace(p, A, B);
      if (bytes == 0 || p.k >= 256) {  // as for TF32: packing a short product costs more than 14 takes
        void* workspace = bytes > 0 ? allocate(bytes) : nullptr;
        matmul::bf16_wgmma_run(p, A, B, C, e, 0, workspace, stream_);
        if (workspace) deallocate(workspace);
        return;
      }
    }
    if (few_tiles) return split_k(A, B, C, e);
    matmul::bf16_mma(p, A, B, C, e, stream_);
    return;
  }
  KILN_CHECK(out.dtype == DType::f32, DTypeError, "cuda backend: matmul does not support dtype ", out.dtype);
  const float* A = a.data<float>();
  const float* B = b.data<float>();
  float* C = out.data<float>();
  const DeviceEpilogue<float> e = device_epilogue<float>(epilogue);
  // 17 with its workspace (packed operands, partial sums) from the pool, freed right after queuing.
  auto run_17 = [&](int64_t chunks) {
    const size_t bytes = matmul::tf32x3_wgmma_workspace(p, A, B, chunks);
    void* workspace = bytes > 0 ? allocate(bytes) : nullptr;
    matmul::tf32x3_wgmma_run(p, A, B, C, e, chunks, workspace, stream_);
    if (workspace) deallocate(workspace);
  };
  if (!few_tiles) {
    // 11 and 12 fall back to 08 and 07 themselves where cp.async cannot read the operands.
    if (allow_tf32()) {
      // 13 unless it would pack an operand for a short k, where the packing pass costs more than
      // 11 takes for the whole product.
      const bool wgmma = matmul::tf32_wgmma_applies(p, device_);
      const size_t bytes = wgmma ? matmul::tf32_wgmma_workspace(p, A, B) : 0;
      if (wgmma && (bytes == 0 || p.k >= 256)) {
        // Freed right after queuing, as split-K's below.
        void* workspace = bytes > 0 ? allocate(bytes) : nullptr;
        matmul::tf32_wgmma_run(p, A, B, C, e, 0, workspace, stream_);
        if (workspace) deallocate(workspace);
        return;
      }
      const int64_t wide_tiles = p.batch * ((p.m + 127) / 128) * ((p.n + 255) / 256);
      return wide_tiles >= 2 * sms ? matmul::tf32_ldmatrix(p, A, B, C, e, stream_)
                                   : matmul::tf32_ldmatrix_128x128(p, A, B, C, e, stream_);
    }
    // 17 on an sm_90 GPU, unless it would first pack an operand for a k under 256 (as for 13).
    if (matmul::tf32_wgmma_applies(p, device_) && (p.k >= 256 || matmul::tf32_wgmma_workspace(p, A, B) == 0))
      return run_17(1);
    return p.k >= 256 ? matmul::split_tf32x3(p, A, B, C, e, stream_) : matmul::warptile(p, A, B, C, e, stream_);
  }
  // Too few big tiles: exact f32 even under allow_tf32 (which permits TF32, not requires it). A tiny
  // product goes to 18, a long k to 17 split into chunks on an sm_90 GPU, as bf16's goes to 16.
  if (p.m * p.n * p.k <= matmul::kTinyProduct) return matmul::dots(p, A, B, C, e, stream_);
  if (splits >= 4 && p.k >= 2048 && matmul::tf32_wgmma_applies(p, device_))
    return run_17(matmul::tf32x3_wgmma_splits(p, A, B, sms));
  if (splits >= 4) return split_k(A, B, C, e);
  matmul::smem_tiling(p, A, B, C, e, stream_);
}

}  // namespace kiln::cuda
