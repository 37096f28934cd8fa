// Version 12, f32 accuracy from TF32 tensor cores ("3xTF32"). Every input x is split into a TF32
// head hi = tf32(x) (rounded) and the rest lo = x - hi (exact in f32; the tensor core reads its
// top 11 bits), and each product a * b is formed as lo_a * hi_b + hi_a * lo_b + hi_a * hi_b, three
// mma instead of one. What is left out (lo_a * lo_b, and lo's truncation) is about 2^-21 of the
// product, where f32's own rounding is 2^-24: with errors of either sign over a sum of k products
// the result lands within a few f32 roundings of the exact one (tests/cuda/test_cuda_matmul.cpp
// measures it against 07 on every layout). Three mma still cost less than the FFMA they replace.
// Two things keep it there:
// - Short sums on the tensor cores. mma adds into its accumulator rounding toward zero, a bias of
//   up to an ulp per addition that grows with k: accumulating a whole 4096-long k in the mma
//   registers measured 3.1e-5 of max|C| against cuBLAS FP32 (H100, 2026-11-22), linear in k.
//   So the mma sum only one slice (BK = 32 values of k, 12 mma per tile, the first with a zero
//   accumulator), and each slice's partial joins the running sum through an ordinary, correctly
//   rounded f32 add: 3.7e-6 at 4096 (same run). That takes a second set of accumulators, so warp
//   tiles are 64 x 32 (as in 10): with 3 mma per fragment load, shared memory is not the limit.
// - Infinities and NaN. inf splits into hi = inf and lo = inf - inf = NaN, so a row or column that
//   holds an inf comes out NaN where f32 gives inf. Guarding every split would cost the hot loop a
//   third of its instructions; instead the epilogue recomputes any NaN result as a plain f32 dot
//   product of its row and column (recompute_nan), which gives f32's inf, or NaN where f32 does
//   too. Finite data never takes that path; data full of infinities takes it often and slowly.
// Otherwise 11's data path: cp.async pipeline (3 stages), ldmatrix for KC tiles. Without 16-byte
// aligned operands it runs 07 (f32 on the CUDA cores). Figures: kernels/README.md.
#include <cstdint>

#include "kernels/cuda/matmul/common.cuh"
#include "kernels/cuda/matmul/matmul.cuh"
#include "kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::matmul {
namespace {

// x (f32 bits) -> hi = tf32(x) and lo = x - hi, both as f32 bits.
__device__ inline void split(uint32_t x, uint32_t& hi, uint32_t& lo) {
  const float f = __uint_as_float(x);
  hi = to_tf32(f);
  lo = __float_as_uint(f - __uint_as_float(hi));
}

// C(i, j) in plain f32, for the results that came out NaN (see above).
struct RecomputeNan {
  Panel<float> a, b;
  __device__ float operator()(float v, int64_t i, int64_t j) const {
    if (v == v) return v;
    float sum = 0;
    for (int64_t p = 0; p < a.k; ++p) sum = fmaf(a.get(p, i), b.get(p, j), sum);
    return sum;
  }
};

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool A_KC, bool B_KC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 1) split_tf32x3_kernel(Args<float> args) {
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int MI = WM / 16, NI = WN / 8;
  static_assert(BK % 8 == 0 && NI % 2 == 0, "k-steps of 8, B fragments in pairs of tiles");
  using LA = AsyncTileLoader<BK, BM, NT, A_KC>;
  using LB = AsyncTileLoader<BK, BN, NT, B_KC>;
  extern __shared__ __align__(16) float smem_split_tf32x3[];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm0 = warp / (BN / WN) * WM, wn0 = warp % (BN / WN) * WN;
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const LA load_a(args.panel_a(), i0, tid);
  const LB load_b(args.panel_b(), j0, tid);

  float acc[MI][NI][4] = {};
  cp_async_pipeline<STAGES>(load_a, load_b, args.k, smem_split_tf32x3, [&](const float* as, const float* bs) {
    float part[MI][NI][4];  // this slice's sum, on the tensor cores
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      uint32_t b_hi[NI][2], b_lo[NI][2];
#pragma unroll
      for (int ni = 0; ni < NI; ni += 2) {
        uint32_t b[2][2];
        load_b_fragments<typename LB::T, true>(b[0], b[1], bs, kk, wn0 + ni * 8, lane);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int r = 0; r < 2; ++r) split(b[h][r], b_hi[ni + h][r], b_lo[ni + h][r]);
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        uint32_t a[4], a_hi[4], a_lo[4];
        load_a_fragment<typename LA::T, true>(a, as, kk, wm0 + mi * 16, lane);
#pragma unroll
        for (int r = 0; r < 4; ++r) split(a[r], a_hi[r], a_lo[r]);
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {  // the small terms first
          if (kk == 0) mma_16x8x8_first(part[mi][ni], a_lo, b_hi[ni]);
          else mma_16x8x8(part[mi][ni], a_lo, b_hi[ni]);
          mma_16x8x8(part[mi][ni], a_hi, b_lo[ni]);
          mma_16x8x8(part[mi][ni], a_hi, b_hi[ni]);
        }
      }
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mi][ni][r] += part[mi][ni][r];
  });
  store_mma_tiles(args, acc, i0, j0, wm0, wn0, lane, RecomputeNan{args.panel_a(), args.panel_b()});
}

}  // namespace

void split_tf32x3(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream) {
  if (!async_applies(p, a, b)) return warptile(p, a, b, c, stream);
  constexpr int BM = 128, BN = 128, BK = 32, WM = 64, WN = 32, STAGES = 3, NT = (BM / WM) * (BN / WN) * 32;
  launch_batched(p, a, b, c, BM, BN, "matmul 12_3xtf32", [&](dim3 grid, const Args<float>& args) {
    by_layout(args, [&]<bool A_KC, bool B_KC>() {
      constexpr int bytes = STAGES * (Tile<BK, BM, A_KC>::SIZE + Tile<BK, BN, B_KC>::SIZE) * sizeof(float);
      launch_dynamic_smem(split_tf32x3_kernel<BM, BN, BK, WM, WN, STAGES, A_KC, B_KC>, grid, NT, bytes, stream, args);
    });
  });
}

}  // namespace kiln::cuda::matmul
