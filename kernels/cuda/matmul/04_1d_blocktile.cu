// Version 04, 1-D block tiling: each thread computes TM elements of one column of C instead of
// one. Per value of p it reads one value of op(B) from shared memory and reuses it TM times
// against TM values of op(A): shared-memory loads per multiply-add drop from 2 to (1 + TM) / TM.
// Tiles: BM x BN of C per block, BK values of p per slice, BM * BN / TM threads.
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

template <int BM, int BN, int BK, int TM>
__global__ void __launch_bounds__(BM * BN / TM) blocktile_1d_kernel(Args<float> args) {
  constexpr int NT = BM * BN / TM;
  __shared__ float As[BK][BM + 1];  // +1: column writes of a transposing load spread over the banks
  __shared__ float Bs[BK][BN + 1];
  const int tid = threadIdx.x;
  const int tx = tid % BN, ty = tid / BN;  // a warp: 32 neighbouring columns of one row group
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const Panel<float> A = args.panel_a(), B = args.panel_b();
  float acc[TM] = {};
  for (int64_t p0 = 0; p0 < args.k; p0 += BK) {
    load_tile<BK, BM, BM + 1, NT>(A, p0, i0, &As[0][0], tid);
    load_tile<BK, BN, BN + 1, NT>(B, p0, j0, &Bs[0][0], tid);
    __syncthreads();
    for (int p = 0; p < BK; ++p) {
      const float b = Bs[p][tx];  // held in a register, reused TM times
#pragma unroll
      for (int r = 0; r < TM; ++r) acc[r] += As[p][ty * TM + r] * b;  // one address per warp: broadcast
    }
    __syncthreads();
  }
  float* C = args.c_entry();
  const int64_t j = j0 + tx;
  for (int r = 0; r < TM; ++r) {
    const int64_t i = i0 + ty * TM + r;
    if (i < args.m && j < args.n) C[i * args.n + j] = args.epilogue(acc[r], j);
  }
}

}  // namespace

void blocktile_1d(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  constexpr int BM = 64, BN = 64, BK = 8, TM = 8;
  launch_batched(p, a, b, c, e, BM, BN, "matmul 04_1d_blocktile", [&](dim3 grid, const Args<float>& args) {
    blocktile_1d_kernel<BM, BN, BK, TM><<<grid, BM * BN / TM, 0, stream>>>(args);
  });
}

}  // namespace kiln::cuda::matmul
