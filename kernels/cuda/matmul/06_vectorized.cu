// Version 06, vectorized: 05's tiling with 16-byte memory operations. Global loads move 4 floats
// per instruction (float4) where the chunk is aligned and inside the matrix, with a scalar
// fallback at the edges and for strides that are not multiples of 4. op(A) is stored transposed
// in shared memory (As[p][i], k-major), so that a thread's TM values of A for one p are adjacent
// and come in two LDS.128, like its TN values of B: 4 shared loads per 64 multiply-adds.
// C is written with float4 stores where n allows.
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__(BM * BN / (TM * TN)) vectorized_kernel(Args<float> args) {
  static_assert(TM % 4 == 0 && TN % 4 == 0, "thread tiles are read as float4");
  constexpr int NT = BM * BN / (TM * TN);
  // Row length BM + 4 keeps rows 16-byte aligned for float4 and, for the column writes of a
  // transposing load (chunks along p), shifts each row by 4 banks: with BK = 8 the 32 writes of
  // a warp land in 32 different banks.
  constexpr int LDA = BM + 4, LDB = BN + 4;
  __shared__ __align__(16) float As[BK * LDA];
  __shared__ __align__(16) float Bs[BK * LDB];
  const int tid = threadIdx.x;
  const int tx = tid % (BN / TN), ty = tid / (BN / TN);
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const Panel<float> A = args.panel_a(), B = args.panel_b();
  float acc[TM][TN] = {};
  float a_reg[TM], b_reg[TN];
  for (int64_t p0 = 0; p0 < args.k; p0 += BK) {
    for (int c = tid; c < BK * BM / 4; c += NT) {
      int p, x;
      chunk_coords<BK, BM>(A.x_contiguous, c, p, x);
      put4<LDA>(As, A.x_contiguous, p, x, fetch4(A, args.vec_a, p0 + p, i0 + x));
    }
    for (int c = tid; c < BK * BN / 4; c += NT) {
      int p, x;
      chunk_coords<BK, BN>(B.x_contiguous, c, p, x);
      put4<LDB>(Bs, B.x_contiguous, p, x, fetch4(B, args.vec_b, p0 + p, j0 + x));
    }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < BK; ++p) {
#pragma unroll
      for (int r = 0; r < TM; r += 4) unpack4(a_reg + r, *reinterpret_cast<const float4*>(&As[p * LDA + ty * TM + r]));
#pragma unroll
      for (int c = 0; c < TN; c += 4) unpack4(b_reg + c, *reinterpret_cast<const float4*>(&Bs[p * LDB + tx * TN + c]));
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
    for (int c = 0; c < TN; c += 4) store4(C + i * args.n, args.vec_c, j0 + tx * TN + c, args.n, &acc[r][c], args.epilogue);
  }
}

}  // namespace

void vectorized(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
  launch_batched(p, a, b, c, e, BM, BN, "matmul 06_vectorized", [&](dim3 grid, const Args<float>& args) {
    vectorized_kernel<BM, BN, BK, TM, TN><<<grid, BM * BN / (TM * TN), 0, stream>>>(args);
  });
}

}  // namespace kiln::cuda::matmul
