// Version 08, TF32 tensor cores: 07's block and warp structure (128 x 128 block tile, 8 warps of
// 64 x 32, register-staged double buffering), but the warp's arithmetic is done by
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: one instruction multiplies a 16 x 8 tile
// of A by an 8 x 8 tile of B into a 16 x 8 tile of C held across the warp's 32 lanes. A warp tile
// of 64 x 32 is 4 x 4 such tiles; per k-step of 8 it issues 16 mma.
// Precision: each input is rounded once, as it goes into shared memory, to TF32 (10-bit mantissa,
// cvt.rna: to nearest, ties away from zero); products and sums stay in f32. Relative error ~1e-3
// (core/precision.h); used only when kiln::allow_tf32() is on.
// Shared tiles stay k-major as in 06/07 (As[p][i], Bs[p][j]); the fragment loads then read
// As[p0 + t][row + g] for lane = 4g + t: with a row length of BM + 8 (8 banks of shift per row)
// the 32 lanes hit 32 different banks. Not done here: cp.async (the transposing store into k-major
// tiles needs the registers anyway) and ldmatrix; the column stores of operands that run along p
// conflict 4-way (BK = 16 puts 4 chunks of a row in one warp).
#include <cstdint>

#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::matmul {
namespace {

__device__ inline uint4 to_tf32x4(float4 v) { return make_uint4(to_tf32(v.x), to_tf32(v.y), to_tf32(v.z), to_tf32(v.w)); }

template <int BM, int BN, int BK, int WM, int WN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32) tf32_mma_kernel(Args<float> args) {
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int MI = WM / 16, NI = WN / 8;  // mma tiles per warp tile
  constexpr int LDA = BM + 8, LDB = BN + 8;  // + 8: conflict-free fragment loads (see above)
  constexpr int CHUNKS_A = BK * BM / 4 / NT, CHUNKS_B = BK * BN / 4 / NT;
  static_assert(CHUNKS_A * NT * 4 == BK * BM && CHUNKS_B * NT * 4 == BK * BN, "slices split evenly");
  static_assert(BK % 8 == 0, "k-steps of 8");
  __shared__ __align__(16) uint32_t As[2][BK * LDA];  // TF32 bit patterns
  __shared__ __align__(16) uint32_t Bs[2][BK * LDB];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wm0 = warp / (BN / WN) * WM, wn0 = warp % (BN / WN) * WN;
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const Panel<float> A = args.panel_a(), B = args.panel_b();

  float4 a_next[CHUNKS_A], b_next[CHUNKS_B];
  auto fetch = [&](int64_t p0) {
#pragma unroll
    for (int s = 0; s < CHUNKS_A; ++s) {
      int p, x;
      chunk_coords<BK, BM>(A.x_contiguous, tid + s * NT, p, x);
      a_next[s] = fetch4(A, args.vec_a, p0 + p, i0 + x);
    }
#pragma unroll
    for (int s = 0; s < CHUNKS_B; ++s) {
      int p, x;
      chunk_coords<BK, BN>(B.x_contiguous, tid + s * NT, p, x);
      b_next[s] = fetch4(B, args.vec_b, p0 + p, j0 + x);
    }
  };
  auto put = [&](int buf) {
#pragma unroll
    for (int s = 0; s < CHUNKS_A; ++s) {
      int p, x;
      chunk_coords<BK, BM>(A.x_contiguous, tid + s * NT, p, x);
      put4<LDA>(As[buf], A.x_contiguous, p, x, to_tf32x4(a_next[s]));
    }
#pragma unroll
    for (int s = 0; s < CHUNKS_B; ++s) {
      int p, x;
      chunk_coords<BK, BN>(B.x_contiguous, tid + s * NT, p, x);
      put4<LDB>(Bs[buf], B.x_contiguous, p, x, to_tf32x4(b_next[s]));
    }
  };

  float acc[MI][NI][4] = {};
  const int64_t slices = (args.k + BK - 1) / BK;
  fetch(0);
  put(0);
  __syncthreads();
  for (int64_t s = 0; s < slices; ++s) {
    const int cur = static_cast<int>(s & 1);
    if (s + 1 < slices) fetch((s + 1) * BK);
    const uint32_t* as = As[cur];
    const uint32_t* bs = Bs[cur];
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      uint32_t a[MI][4], b[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int row = wm0 + mi * 16 + g;
        a[mi][0] = as[(kk + t) * LDA + row];
        a[mi][1] = as[(kk + t) * LDA + row + 8];
        a[mi][2] = as[(kk + t + 4) * LDA + row];
        a[mi][3] = as[(kk + t + 4) * LDA + row + 8];
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = wn0 + ni * 8 + g;
        b[ni][0] = bs[(kk + t) * LDB + col];
        b[ni][1] = bs[(kk + t + 4) * LDB + col];
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) mma_16x8x8(acc[mi][ni], a[mi], b[ni]);
    }
    if (s + 1 < slices) put(cur ^ 1);
    __syncthreads();
  }

  store_mma_tiles(args, acc, i0, j0, wm0, wn0, lane);
}

}  // namespace

void tf32_mma(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  constexpr int BM = 128, BN = 128, BK = 16, WM = 64, WN = 32;
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  launch_batched(p, a, b, c, e, BM, BN, "matmul 08_tf32_mma", [&](dim3 grid, const Args<float>& args) {
    tf32_mma_kernel<BM, BN, BK, WM, WN><<<grid, NT, 0, stream>>>(args);
  });
}

}  // namespace kiln::cuda::matmul
