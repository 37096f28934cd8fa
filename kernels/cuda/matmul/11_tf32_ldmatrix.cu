// Version 11, TF32 with 64 x 64 warp tiles and ldmatrix: 10's cp.async pipeline and shared-memory
// layouts, with the changes that let its tensor cores be fed from shared memory fast enough.
// - Warp tiles of 64 x 64 (4 x 8 mma tiles) instead of 64 x 32. Per k-step of 8 a warp reads
//   64 x 8 values of A and 8 x 64 of B (4 KB) for 32 mma (64K flops): 16 flops per byte of shared
//   memory read, where 10 read 3 KB for 16 mma (10.7). With the cp.async writes counted too, 10
//   needed about 1,400 flops per clock out of shared memory's 128 bytes per clock per SM, close
//   to what mma.sync delivers on an H100: both units were near their limit. A thread now holds
//   128 accumulators, so a 128 x 256 block tile of 8 warps runs one block per SM.
// - ldmatrix for operands stored with k along their rows (A not transposed, B transposed): one
//   ldmatrix.x4 loads a whole A fragment, or the B fragments of two 8-column tiles (tensor_core.cuh
//   says why a b16 "matrix" row is 4 floats of a fragment), where 32-bit loads took 4. Operands
//   stored k-major keep 10's conflict-free 32-bit loads: ldmatrix's transposing form moves 16-bit
//   halves, which would split a float.
// - Inputs truncated to TF32 as in 10 (raw f32 bits into mma). Rounding them first (cvt.rna,
//   as 08; error 2.8e-4 of max|C| instead of 7.1e-4 at 4096^3) measured 12% slower: 0.954 ms
//   against 0.841 (H100 80GB HBM3, 2026-11-22, kernel-bench).
// - B's fragments for a k-step are loaded first, then A's one 16-row tile at a time, so that a
//   thread holds 16 + 4 fragment registers beside its accumulators; with the tile loader's
//   addresses worked out once (AsyncTileLoader), nothing spills.
// - Two block tiles: 128 x 256 (8 warps, one block per SM) for large products, 128 x 128 (4 warps,
//   two blocks per SM) where 128 x 256 tiles would not fill the GPU twice over: 1024^3 has 32 such
//   tiles for 132 SMs and ran at 0.054 ms against 0.033 with 128 x 128 (same run).
//   Tried and dropped (4096^3, inputs rounded, same GPU and day): BK = 16 with 5 stages (1.130 ms
//   against 0.954), 4 stages of 32 (0.952), 256 x 128 tiles (0.982).
// BK = 32, 3 stages. Needs 16-byte aligned operands for cp.async (async_applies); else runs 08.
// Figures: kernels/README.md, from kernel-bench.
#include <cstdint>

#include "kernels/cuda/matmul/common.cuh"
#include "kernels/cuda/matmul/matmul.cuh"
#include "kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::matmul {
namespace {

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int MIN_BLOCKS, bool A_KC, bool B_KC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MIN_BLOCKS) tf32_ldmatrix_kernel(Args<float> args) {
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int MI = WM / 16, NI = WN / 8;
  static_assert(BK % 8 == 0 && NI % 2 == 0, "k-steps of 8, B fragments in pairs of tiles");
  using LA = AsyncTileLoader<BK, BM, NT, A_KC>;
  using LB = AsyncTileLoader<BK, BN, NT, B_KC>;
  extern __shared__ __align__(16) float smem_tf32_ldmatrix[];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm0 = warp / (BN / WN) * WM, wn0 = warp % (BN / WN) * WN;
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const LA load_a(args.panel_a(), i0, tid);
  const LB load_b(args.panel_b(), j0, tid);

  float acc[MI][NI][4] = {};
  cp_async_pipeline<STAGES>(load_a, load_b, args.k, smem_tf32_ldmatrix, [&](const float* as, const float* bs) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      uint32_t b[NI][2];  // raw f32 bits, truncated to TF32 by mma (as in 10)
#pragma unroll
      for (int ni = 0; ni < NI; ni += 2)
        load_b_fragments<typename LB::T, true>(b[ni], b[ni + 1], bs, kk, wn0 + ni * 8, lane);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        uint32_t a[4];
        load_a_fragment<typename LA::T, true>(a, as, kk, wm0 + mi * 16, lane);
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) mma_16x8x8(acc[mi][ni], a, b[ni]);
      }
    }
  });
  store_mma_tiles(args, acc, i0, j0, wm0, wn0, lane);
}

template <int BM, int BN, int MIN_BLOCKS>
void run(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream, const char* name) {
  if (!async_applies(p, a, b)) return tf32_mma(p, a, b, c, stream);
  constexpr int BK = 32, WM = 64, WN = 64, STAGES = 3, NT = (BM / WM) * (BN / WN) * 32;
  launch_batched(p, a, b, c, BM, BN, name, [&](dim3 grid, const Args<float>& args) {
    by_layout(args, [&]<bool A_KC, bool B_KC>() {
      constexpr int bytes = STAGES * (Tile<BK, BM, A_KC>::SIZE + Tile<BK, BN, B_KC>::SIZE) * sizeof(float);
      launch_dynamic_smem(tf32_ldmatrix_kernel<BM, BN, BK, WM, WN, STAGES, MIN_BLOCKS, A_KC, B_KC>, grid, NT,
                          bytes, stream, args);
    });
  });
}

}  // namespace

void tf32_ldmatrix(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream) {
  run<128, 256, 1>(p, a, b, c, stream, "matmul 11_tf32_ldmatrix");
}
void tf32_ldmatrix_128x128(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream) {
  run<128, 128, 2>(p, a, b, c, stream, "matmul 11_tf32_ldmatrix_128x128");
}

}  // namespace kiln::cuda::matmul
