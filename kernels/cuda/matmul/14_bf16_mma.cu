// Version 14, bf16 tensor cores: the matmul of mixed precision (autograd/autocast.h). Operands and
// result are bf16; every product of two bf16 values is exact in f32 and the sums accumulate in f32
// (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: a 16 x 16 tile of A times a 16 x 8 tile
// of B into a 16 x 8 tile of C across the warp's lanes), and each element of C is rounded to bf16
// once, after the epilogue (bias and activation added in f32). So its result differs from the
// CPU's reference (f32 products of the widened operands, rounded: kernels/cpu/widen.cpp) only by
// the order of the f32 sums: at most an ulp of bf16 where that order tips a rounding.
//
// 08's block and warp structure (128 x 128 block tiles, 8 warps of 64 x 32, register-staged
// double buffering over slices of BK = 32), with the shared tiles stored K-major, [x][k]: the
// fragments of m16n8k16 hold pairs of neighbouring k values in one 32-bit register (a0 is row g,
// k 2t and 2t + 1, for lane = 4g + t), so each fragment register is one 32-bit shared load. A row
// of BK + 8 bf16 (20 words) puts the 8 rows a warp reads 20 words apart: 32 distinct banks.
// Operands stored K-major in memory (A plain, B transposed) copy 16-byte chunks of 8 k values
// straight into a tile row; MN-major ones (A^T, B plain) load 8 values along the row and store
// them down a column of the tile, 2 bytes at a time (the transpose this layout needs).
#include <cstdint>

#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::matmul {
namespace {

// Eight bf16 of a panel (common.cuh) starting at (p, x): along k when the panel is K-major (memory
// runs along p), else along x. One 16-byte load when the chunk lies inside the matrix and `vec`
// (16-byte aligned base, ld and batch stride multiples of 8), else eight guarded loads, zero
// outside.
__device__ inline uint4 fetch8(const Panel<bf16>& P, bool vec, int64_t p, int64_t x) {
  const uint16_t* raw = reinterpret_cast<const uint16_t*>(P.data);
  if (P.x_contiguous) {
    if (vec && p < P.k && x + 7 < P.x) return *reinterpret_cast<const uint4*>(raw + p * P.ld + x);
  } else if (vec && x < P.x && p + 7 < P.k) {
    return *reinterpret_cast<const uint4*>(raw + x * P.ld + p);
  }
  uint16_t v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int64_t pe = P.x_contiguous ? p : p + e, xe = P.x_contiguous ? x + e : x;
    v[e] = pe < P.k && xe < P.x ? (P.x_contiguous ? raw[pe * P.ld + xe] : raw[xe * P.ld + pe]) : uint16_t{0};
  }
  return make_uint4(v[0] | uint32_t{v[1]} << 16, v[2] | uint32_t{v[3]} << 16, v[4] | uint32_t{v[5]} << 16,
                    v[6] | uint32_t{v[7]} << 16);
}

template <int BM, int BN, int BK, int WM, int WN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32) bf16_mma_kernel(Args<bf16> args) {
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int MI = WM / 16, NI = WN / 8;  // mma tiles per warp tile
  constexpr int LDK = BK + 8;               // bf16 per tile row: conflict-free fragment loads (above)
  constexpr int CHUNKS_A = BM * BK / 8 / NT, CHUNKS_B = BN * BK / 8 / NT;
  static_assert(CHUNKS_A * NT * 8 == BM * BK && CHUNKS_B * NT * 8 == BN * BK, "slices split evenly");
  static_assert(BK % 16 == 0 && LDK % 8 == 0, "k-steps of 16, 16-byte tile rows");
  __shared__ __align__(16) uint16_t As[2][BM * LDK];  // bf16 bits, [x][k]
  __shared__ __align__(16) uint16_t Bs[2][BN * LDK];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wm0 = warp / (BN / WN) * WM, wn0 = warp % (BN / WN) * WN;
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const Panel<bf16> A = args.panel_a(), B = args.panel_b();

  // Chunk c of a BX x BK tile: 8 values along k (K-major) or along x (MN-major) from (p, x).
  auto coords = [](bool x_contiguous, int c, int bx, int& p, int& x) {
    if (x_contiguous) p = c / (bx / 8), x = c % (bx / 8) * 8;
    else x = c / (BK / 8), p = c % (BK / 8) * 8;
  };
  auto put = [](uint16_t* S, bool x_contiguous, int p, int x, uint4 v) {
    if (!x_contiguous) {
      *reinterpret_cast<uint4*>(S + x * LDK + p) = v;
      return;
    }
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) S[(x + e) * LDK + p] = static_cast<uint16_t>(w[e / 2] >> (e % 2 * 16));
  };

  uint4 a_next[CHUNKS_A], b_next[CHUNKS_B];
  auto fetch = [&](int64_t p0) {
#pragma unroll
    for (int s = 0; s < CHUNKS_A; ++s) {
      int p, x;
      coords(A.x_contiguous, tid + s * NT, BM, p, x);
      a_next[s] = fetch8(A, args.vec_a, p0 + p, i0 + x);
    }
#pragma unroll
    for (int s = 0; s < CHUNKS_B; ++s) {
      int p, x;
      coords(B.x_contiguous, tid + s * NT, BN, p, x);
      b_next[s] = fetch8(B, args.vec_b, p0 + p, j0 + x);
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int s = 0; s < CHUNKS_A; ++s) {
      int p, x;
      coords(A.x_contiguous, tid + s * NT, BM, p, x);
      put(As[buf], A.x_contiguous, p, x, a_next[s]);
    }
#pragma unroll
    for (int s = 0; s < CHUNKS_B; ++s) {
      int p, x;
      coords(B.x_contiguous, tid + s * NT, BN, p, x);
      put(Bs[buf], B.x_contiguous, p, x, b_next[s]);
    }
  };

  float acc[MI][NI][4] = {};
  const int64_t slices = (args.k + BK - 1) / BK;
  fetch(0);
  store(0);
  __syncthreads();
  for (int64_t s = 0; s < slices; ++s) {
    const int cur = static_cast<int>(s & 1);
    if (s + 1 < slices) fetch((s + 1) * BK);
    const uint16_t* as = As[cur];
    const uint16_t* bs = Bs[cur];
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t a[MI][4], b[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const uint16_t* row = as + (wm0 + mi * 16 + g) * LDK + kk + 2 * t;
        a[mi][0] = *reinterpret_cast<const uint32_t*>(row);
        a[mi][1] = *reinterpret_cast<const uint32_t*>(row + 8 * LDK);
        a[mi][2] = *reinterpret_cast<const uint32_t*>(row + 8);
        a[mi][3] = *reinterpret_cast<const uint32_t*>(row + 8 * LDK + 8);
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const uint16_t* col = bs + (wn0 + ni * 8 + g) * LDK + kk + 2 * t;
        b[ni][0] = *reinterpret_cast<const uint32_t*>(col);
        b[ni][1] = *reinterpret_cast<const uint32_t*>(col + 8);
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) mma_bf16_16x8x16(acc[mi][ni], a[mi], b[ni]);
    }
    if (s + 1 < slices) store(cur ^ 1);
    __syncthreads();
  }

  // the epilogue in f32 (bias, activation), then one rounding to bf16; pairs of columns as one
  // 4-byte store where C's rows allow (vec_c)
  store_mma_tiles(args, acc, i0, j0, wm0, wn0, lane);
}

}  // namespace

void bf16_mma(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c, const DeviceEpilogue<bf16>& e,
              cudaStream_t stream) {
  constexpr int BM = 128, BN = 128, BK = 32, WM = 64, WN = 32;
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  launch_batched(p, a, b, c, e, BM, BN, "matmul 14_bf16_mma", [&](dim3 grid, const Args<bf16>& args) {
    bf16_mma_kernel<BM, BN, BK, WM, WN><<<grid, NT, 0, stream>>>(args);
  });
}

}  // namespace kiln::cuda::matmul
