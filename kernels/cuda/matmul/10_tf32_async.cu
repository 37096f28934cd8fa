// Version 10, TF32 tensor cores fed by cp.async: 08's arithmetic (mma.sync m16n8k8 TF32, a 128 x
// 128 block tile, 8 warps of 64 x 32, 4 x 4 mma tiles per warp and k-step of 8) with the data path
// rebuilt so that the tensor cores wait less:
// - Global -> shared by cp.async.cg (16 bytes, bypassing L1 and the registers): 08 staged every
//   chunk through registers and converted it there, which costs registers and issue slots and
//   serialises load and store. Here a thread only issues copies.
// - A 3-stage ring of BK = 32 slices (08: 2 stages of 16): while the warps multiply slice s,
//   slices s + 1 and s + 2 are in flight (cp.async.commit_group / wait_group 1). 110.6 KB of
//   dynamic shared memory per block, 2 blocks per SM on an H100.
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
// and both batch strides multiples of 4 (tf32_async_applies); any transposes. Otherwise it runs
// 08. Figures: kernels/README.md, from kernel-bench.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/matmul/common.cuh"
#include "kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

// Copies `bytes` (0..16) from global `src` to shared `dst` and zero-fills the rest of the 16.
__device__ inline void cp_async16(float* dst, const float* src, int bytes) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// d += a * b for one 16 x 8 x 8 tile; fragment layout as in 08 (PTX ISA, mma.m16n8k8 .tf32), with
// g = lane / 4, t = lane % 4:  a0 (g, t)  a1 (g + 8, t)  a2 (g, t + 4)  a3 (g + 8, t + 4);
// b0 (k = t, n = g)  b1 (k = t + 4, n = g);  d0, d1 (g, 2t + {0, 1})  d2, d3 (g + 8, 2t + {0, 1}).
__device__ inline void mma_16x8x8(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One stage's BK x BX tile of an operand in shared memory. KC (k-contiguous): memory runs along p,
// stored S[x * LD + p]; else S[p * LD + x]. Both LDs keep every row 16-byte aligned.
template <int BK, int BX, bool KC>
struct Tile {
  static constexpr int LD = KC ? BK + 4 : BX + 8;
  static constexpr int SIZE = KC ? BX * LD : BK * LD;  // floats
  static_assert(LD % 4 == 0 && SIZE % 4 == 0, "16-byte aligned rows and stages");
  __device__ static int at(int p, int x) { return KC ? x * LD + p : p * LD + x; }
};

// Queues the copies of the BK x BX tile of P at (p0, x0) into S: NT threads, 16-byte chunks along
// memory's direction (chunk_coords: neighbouring threads on neighbouring chunks, coalesced).
template <int BK, int BX, int NT, bool KC>
__device__ void load_tile_async(const Panel<float>& P, int64_t p0, int64_t x0, float* S, int tid) {
  constexpr int CHUNKS = BK * BX / 4 / NT;
  static_assert(CHUNKS * NT * 4 == BK * BX, "tiles split evenly");
#pragma unroll
  for (int s = 0; s < CHUNKS; ++s) {
    int p, x;
    chunk_coords<BK, BX>(!KC, tid + s * NT, p, x);
    const int64_t gp = p0 + p, gx = x0 + x;
    const float* src = P.data;  // a valid address even when nothing is read
    int bytes = 0;
    if (gp < P.k && gx < P.x) {
      // The chunk runs along memory from (gp, gx); only its part inside the matrix is read.
      const int64_t left = KC ? P.k - gp : P.x - gx;
      bytes = 4 * static_cast<int>(std::min<int64_t>(left, 4));
      src = KC ? P.data + gx * P.ld + gp : P.data + gp * P.ld + gx;
    }
    cp_async16(S + Tile<BK, BX, KC>::at(p, x), src, bytes);
  }
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool A_KC, bool B_KC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32, 2) tf32_async_kernel(Args<float> args) {
  constexpr int NT = (BM / WM) * (BN / WN) * 32;
  constexpr int MI = WM / 16, NI = WN / 8;
  using TA = Tile<BK, BM, A_KC>;
  using TB = Tile<BK, BN, B_KC>;
  constexpr int STAGE = TA::SIZE + TB::SIZE;
  static_assert(BK % 8 == 0 && STAGES >= 2, "k-steps of 8, at least double buffering");
  extern __shared__ __align__(16) float smem_tf32_async[];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int wm0 = warp / (BN / WN) * WM, wn0 = warp % (BN / WN) * WN;
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const Panel<float> A = args.panel_a(), B = args.panel_b();
  const int64_t slices = (args.k + BK - 1) / BK;

  // Slice s into stage s % STAGES; always one commit group per call (empty past the end), so that
  // wait_group's count of pending groups means the same in every iteration.
  auto load = [&](int64_t s) {
    if (s < slices) {
      float* st = smem_tf32_async + static_cast<int>(s % STAGES) * STAGE;
      load_tile_async<BK, BM, NT, A_KC>(A, s * BK, i0, st, tid);
      load_tile_async<BK, BN, NT, B_KC>(B, s * BK, j0, st + TA::SIZE, tid);
    }
    cp_async_commit();
  };

  float acc[MI][NI][4] = {};
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) load(s);
  for (int64_t s = 0; s < slices; ++s) {
    // Slice s has landed (at most STAGES - 2 later groups pending) for this thread; the barrier
    // makes it so for every thread, and also says every warp is done with slice s - 1, whose
    // stage the next line refills.
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    load(s + STAGES - 1);
    const float* as = smem_tf32_async + static_cast<int>(s % STAGES) * STAGE;
    const float* bs = as + TA::SIZE;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 8) {
      uint32_t a[MI][4], b[NI][2];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        const int row = wm0 + mi * 16 + g;
        a[mi][0] = __float_as_uint(as[TA::at(kk + t, row)]);
        a[mi][1] = __float_as_uint(as[TA::at(kk + t, row + 8)]);
        a[mi][2] = __float_as_uint(as[TA::at(kk + t + 4, row)]);
        a[mi][3] = __float_as_uint(as[TA::at(kk + t + 4, row + 8)]);
      }
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = wn0 + ni * 8 + g;
        b[ni][0] = __float_as_uint(bs[TB::at(kk + t, col)]);
        b[ni][1] = __float_as_uint(bs[TB::at(kk + t + 4, col)]);
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) mma_16x8x8(acc[mi][ni], a[mi], b[ni]);
    }
  }
  cp_async_wait<0>();  // nothing useful is pending (only empty groups); leave none behind

  float* C = args.c_entry();
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t i = i0 + wm0 + mi * 16 + g + half * 8;
      if (i >= args.m) continue;
      float* row = C + i * args.n;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int64_t j = j0 + wn0 + ni * 8 + 2 * t;
        const float v0 = acc[mi][ni][half * 2], v1 = acc[mi][ni][half * 2 + 1];
        if (args.vec_c && j + 1 < args.n) {
          *reinterpret_cast<float2*>(row + j) = make_float2(v0, v1);  // j even, n % 4 == 0: aligned
        } else {
          if (j < args.n) row[j] = v0;
          if (j + 1 < args.n) row[j + 1] = v1;
        }
      }
    }
}

constexpr int kBM = 128, kBN = 128, kBK = 32, kWM = 64, kWN = 32, kStages = 3;
constexpr int kThreadsPerBlock = (kBM / kWM) * (kBN / kWN) * 32;

template <bool A_KC, bool B_KC>
void launch_async(dim3 grid, const Args<float>& args, cudaStream_t stream) {
  constexpr int stage = Tile<kBK, kBM, A_KC>::SIZE + Tile<kBK, kBN, B_KC>::SIZE;
  constexpr int bytes = kStages * stage * static_cast<int>(sizeof(float));
  auto* kernel = tf32_async_kernel<kBM, kBN, kBK, kWM, kWN, kStages, A_KC, B_KC>;
  // Over 48 KB of dynamic shared memory needs an opt-in, per device; setting it is cheap and
  // idempotent, so it is set at every launch rather than cached per device.
  KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  kernel<<<grid, kThreadsPerBlock, bytes, stream>>>(args);
}

}  // namespace

bool tf32_async_applies(const MatmulParams& p, const float* a, const float* b) {
  return aligned16(a, p.lda, p.batch_stride_a) && aligned16(b, p.ldb, p.batch_stride_b);
}

void tf32_async(const MatmulParams& p, const float* a, const float* b, float* c, cudaStream_t stream) {
  if (!tf32_async_applies(p, a, b)) return tf32_mma(p, a, b, c, stream);
  launch_batched(p, a, b, c, kBM, kBN, "matmul 10_tf32_async", [&](dim3 grid, const Args<float>& args) {
    // A's panel runs along k when A is not transposed; B's when B is.
    if (!args.trans_a && args.trans_b) return launch_async<true, true>(grid, args, stream);
    if (!args.trans_a) return launch_async<true, false>(grid, args, stream);
    if (args.trans_b) return launch_async<false, true>(grid, args, stream);
    return launch_async<false, false>(grid, args, stream);
  });
}

}  // namespace kiln::cuda::matmul
