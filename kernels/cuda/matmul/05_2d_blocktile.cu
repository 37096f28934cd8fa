// Version 05, 2-D block tiling: each thread computes a TM x TN tile of C, an outer product per
// value of p: TM values of op(A) and TN of op(B) go into registers and make TM * TN multiply-adds,
// so shared-memory loads per multiply-add drop to (TM + TN) / (TM * TN) = 1/4 for 8 x 8. A
// 128 x 128 block tile with 256 threads also halves the global traffic per flop against 04.
// Left for 06: the register loads are scalar, and Bs[p][tx * TN + c] puts the 16 threads of a
// half-warp 8 words apart, 4 to a bank (a 4-way conflict).
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__(BM * BN / (TM * TN)) blocktile_2d_kernel(Args<float> args) {
  constexpr int NT = BM * BN / (TM * TN);
  __shared__ float As[BK][BM + 1];  // +1: column writes of a transposing load spread over the banks
  __shared__ float Bs[BK][BN + 1];
  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const Panel<float> A = args.panel_a(), B = args.panel_b();
  float acc[TM][TN] = {};
  float a_reg[TM], b_reg[TN];
  for (int64_t p0 = 0; p0 < args.k; p0 += BK) {
    load_tile<BK, BM, BM + 1, NT>(A, p0, i0, &As[0][0], tid);
    load_tile<BK, BN, BN + 1, NT>(B, p0, j0, &Bs[0][0], tid);
    __syncthreads();
#pragma unroll
    for (int p = 0; p < BK; ++p) {
#pragma unroll
      for (int r = 0; r < TM; ++r) a_reg[r] = As[p][ty * TM + r];
#pragma unroll
      for (int c = 0; c < TN; ++c) b_reg[c] = Bs[p][tx * TN + c];
#pragma unroll
      for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int c = 0; c < TN; ++c) acc[r][c] += a_reg[r] * b_reg[c];
    }
    __syncthreads();
  }
  float* C = args.c_entry();
  for (int r = 0; r < TM; ++r) {
    const int64_t i = i0 + ty * TM + r;
    if (i >= args.m) break;
    for (int c = 0; c < TN; ++c) {
      const int64_t j = j0 + tx * TN + c;
      if (j < args.n) C[i * args.n + j] = args.epilogue(acc[r][c], j);
    }
  }
}

}  // namespace

void blocktile_2d(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  launch_batched(p, a, b, c, e, BM, BN, "matmul 05_2d_blocktile", [&](dim3 grid, const Args<float>& args) {
    blocktile_2d_kernel<BM, BN, BK, TM, TN><<<grid, BM * BN / (TM * TN), 0, stream>>>(args);
  });
}

}  // namespace kiln::cuda::matmul
