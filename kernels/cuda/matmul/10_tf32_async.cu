// Version 10, TF32 tensor cores fed by cp.async: 08's arithmetic (mma.sync m16n8k8 TF32, a 128 x
// 128 block tile, 8 warps of 64 x 32, 4 x 4 mma tiles per warp and k-step of 8) with the data path
// rebuilt so that the tensor cores wait less:
// - Global -> shared by cp.async.cg (16 bytes, bypassing L1 and the registers): 08 staged every
//   chunk through registers and converted it there, which costs registers and issue slots and
//   serialises load and store. Here a thread only issues copies.
// - A 3-stage ring of BK = 32 slices (08: 2 stages of 16): while the warps multiply slice s,
//   slices s + 1 and s + 2 are in flight (cp.async.commit_group / wait_group 1; the loop is
//   cp_async_pipeline in tensor_core.cuh, shared with 11 and 12). 110.6 KB of dynamic shared
//   memory per block, 2 blocks per SM on an H100.
// - Shared tiles are kept in the layout memory already has, so cp.async copies straight through
//   with no transpose: an operand that runs along k (A not transposed, B transposed) is stored
//   x-major S[x][p] with rows of BK + 4 floats, one that runs along x is stored k-major S[p][x]
//   with rows of BX + 8. Either padding puts the 32 lanes of a fragment load (lane = 4g + t
//   reads (p0 + t, x0 + g)) on 32 different banks: 4g + t for rows of 36, 8t + g for rows of 136.
//   Fragments are plain 32-bit shared loads (ldmatrix has no 32-bit transposing form for tf32).
// - Precision: fragments go to mma as raw f32 bits. The tensor core reads the top 19 bits (sign,
//   exponent, 10 mantissa bits), so each input is truncated toward zero to TF32 rather than
//   rounded (08: cvt.rna): up to 2^-10 relative per input instead of 2^-11, still ~1e-3 relative
//   on a product (core/precision.h), f32 accumulation. Used only when kiln::allow_tf32() is on.
// - Edges: a chunk that crosses the edge of its operand copies only its valid bytes (cp.async's
//   src-size operand, the rest zero-filled), a chunk outside copies none, so any m, n and k work.
// The fast path needs 16-byte cp.async sources: both base pointers 16-byte aligned and lda, ldb
// and both batch strides multiples of 4 (async_applies); any transposes. Otherwise it runs
// 08. Figures: kernels/README.md, from kernel-bench.
#include <cstdint>

#include "kernels/cuda/matmul/common.cuh"
#include "kernels/cuda/matmul/matmul.cuh"
#include "kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::matmul {
namespace {

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool A_KC, bool B_KC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 2) tf32_async_kernel(Args<float> args) {
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int MI = WM / 16, NI = WN / 8;
  static_assert(BK % 8 == 0 && NI % 2 == 0, "k-steps of 8, B fragments in pairs of tiles");
  using LA = AsyncTileLoader<BK, BM, NT, A_KC>;
  using LB = AsyncTileLoader<BK, BN, NT, B_KC>;
  extern __shared__ __align__(16) float smem_tf32_async[];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm0 = warp / (BN / WN) * WM, wn0 = warp % (BN / WN) * WN;
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const LA load_a(args.panel_a(), i0, tid);
  const LB load_b(args.panel_b(), j0, tid);

  float acc[MI][NI][4] = {};
  cp_async_pipeline<STAGES>(load_a, load_b, args.k, smem_tf32_async, [&](const float* as, const float* bs) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      // Raw f32 bits straight into mma: truncated to TF32.
      uint32_t a[MI][4], b[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) load_a_fragment<typename LA::T, false>(a[mi], as, kk, wm0 + mi * 16, lane);
#pragma unroll
      for (int ni = 0; ni < NI; ni += 2)
        load_b_fragments<typename LB::T, false>(b[ni], b[ni + 1], bs, kk, wn0 + ni * 8, lane);
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) mma_16x8x8(acc[mi][ni], a[mi], b[ni]);
    }
  });
  store_mma_tiles(args, acc, i0, j0, wm0, wn0, lane);
}

}  // namespace

void tf32_async(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream) {
  if (!async_applies(p, a, b)) return tf32_mma(p, a, b, c, stream);
  constexpr int BM = 128, BN = 128, BK = 32, WM = 64, WN = 32, STAGES = 3, NT = (BM / WM) * (BN / WN) * 32;
  launch_batched(p, a, b, c, BM, BN, "matmul 10_tf32_async", [&](dim3 grid, const Args<float>& args) {
    by_layout(args, [&]<bool A_KC, bool B_KC>() {
      constexpr int bytes = STAGES * (Tile<BK, BM, A_KC>::SIZE + Tile<BK, BN, B_KC>::SIZE) * sizeof(float);
      launch_dynamic_smem(tf32_async_kernel<BM, BN, BK, WM, WN, STAGES, A_KC, B_KC>, grid, NT, bytes, stream, args);
    });
  });
}

}  // namespace kiln::cuda::matmul
