// Version 07, warp tiling: the 256 threads of a 128 x 128 block form 8 warps, each owning a
// WM x WN = 64 x 32 tile of C; inside it a thread owns WMITER x WNITER = 2 x 2 slivers of 4 x 4,
// spaced 32 rows and 16 columns apart (8 x 8 = 64 results per thread, as in 06). The spacing is
// the point: for one p, the 8 lanes that differ in row read 8 neighbouring float4 of As (128
// contiguous bytes, no bank conflict) and the 4 lanes that differ in column 4 neighbouring float4
// of Bs, where 06's contiguous 8 x 8 tiles put lanes 8 words apart (a 2-way conflict).
// Double buffering: while the block computes on one pair of shared tiles, the next slice of A and
// B travels from global memory into registers, then goes to the other pair; one __syncthreads per
// slice instead of two, and the loads' latency hides behind the arithmetic.
// Occupancy, a template parameter the bench compares: warptile asks for 2 blocks per SM
// (__launch_bounds__(256, 2): at most 128 registers a thread, and ptxas spills ~60 bytes to fit);
// warptile_lb1 for 1 (up to 255 registers, no spills, but one block per SM has no other block's
// arithmetic to cover its __syncthreads).
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

template <int BM, int BN, int BK, int WM, int WN, int WMITER, int WNITER, int MIN_BLOCKS>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, MIN_BLOCKS) warptile_kernel(Args<float> args) {
  dependent_kernel_start();  // launch.cuh: launched by launch_dependent
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int LANES_M = WM / (WMITER * 4), LANES_N = WN / (WNITER * 4);  // 8 x 4 lanes
  static_assert(LANES_M * LANES_N == 32, "a warp's lanes must tile its warp tile");
  constexpr int LDA = BM + 4, LDB = BN + 4;  // why + 4: see 06
  constexpr int CHUNKS_A = BK * BM / 4 / NT, CHUNKS_B = BK * BN / 4 / NT;  // float4 per thread per slice
  static_assert(CHUNKS_A * NT * 4 == BK * BM && CHUNKS_B * NT * 4 == BK * BN, "slices split evenly");
  __shared__ __align__(16) float As[2][BK * LDA];
  __shared__ __align__(16) float Bs[2][BK * LDB];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm0 = warp / (BN / WN) * WM, wn0 = warp % (BN / WN) * WN;  // the warp's tile in the block
  const int lm = lane / LANES_N, ln = lane % LANES_N;
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const Panel<float> A = args.panel_a(), B = args.panel_b();

  float4 a_next[CHUNKS_A], b_next[CHUNKS_B];  // the slice in flight
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
      put4<LDA>(As[buf], A.x_contiguous, p, x, a_next[s]);
    }
#pragma unroll
    for (int s = 0; s < CHUNKS_B; ++s) {
      int p, x;
      chunk_coords<BK, BN>(B.x_contiguous, tid + s * NT, p, x);
      put4<LDB>(Bs[buf], B.x_contiguous, p, x, b_next[s]);
    }
  };

  float acc[WMITER * 4][WNITER * 4] = {};
  float a_reg[WMITER * 4], b_reg[WNITER * 4];
  const int64_t slices = (args.k + BK - 1) / BK;
  fetch(0);
  put(0);
  __syncthreads();
  for (int64_t s = 0; s < slices; ++s) {
    const int cur = static_cast<int>(s & 1);
    if (s + 1 < slices) fetch((s + 1) * BK);  // issued now, consumed after the arithmetic below
    const float* as = As[cur];
    const float* bs = Bs[cur];
#pragma unroll
    for (int p = 0; p < BK; ++p) {
#pragma unroll
      for (int mi = 0; mi < WMITER; ++mi)
        unpack4(a_reg + mi * 4, *reinterpret_cast<const float4*>(&as[p * LDA + wm0 + mi * (WM / WMITER) + lm * 4]));
#pragma unroll
      for (int ni = 0; ni < WNITER; ++ni)
        unpack4(b_reg + ni * 4, *reinterpret_cast<const float4*>(&bs[p * LDB + wn0 + ni * (WN / WNITER) + ln * 4]));
#pragma unroll
      for (int r = 0; r < WMITER * 4; ++r)
#pragma unroll
        for (int c = 0; c < WNITER * 4; ++c) acc[r][c] += a_reg[r] * b_reg[c];
    }
    // The other buffer was last read before the previous __syncthreads: safe to overwrite.
    if (s + 1 < slices) put(cur ^ 1);
    __syncthreads();
  }

  float* C = args.c_entry();
#pragma unroll
  for (int mi = 0; mi < WMITER; ++mi)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = i0 + wm0 + mi * (WM / WMITER) + lm * 4 + r;
      if (i >= args.m) continue;
#pragma unroll
      for (int ni = 0; ni < WNITER; ++ni)
        store4(C + i * args.n, args.vec_c, j0 + wn0 + ni * (WN / WNITER) + ln * 4, args.n, &acc[mi * 4 + r][ni * 4],
               args.epilogue);
    }
}

template <int MIN_BLOCKS>
void run(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream, const char* name) {
  constexpr int BM = 128, BN = 128, BK = 8, WM = 64, WN = 32, WMITER = 2, WNITER = 2;
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  launch_batched(p, a, b, c, e, BM, BN, name, [&](dim3 grid, const Args<float>& args) {
    launch_dependent(warptile_kernel<BM, BN, BK, WM, WN, WMITER, WNITER, MIN_BLOCKS>, grid, NT, 0, stream, args);
  });
}

}  // namespace

void warptile(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  run<2>(p, a, b, c, e, stream, "matmul 07_warptile");
}

void warptile_lb1(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  run<1>(p, a, b, c, e, stream, "matmul 07_warptile_lb1");
}

}  // namespace kiln::cuda::matmul
