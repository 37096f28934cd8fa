// The implicit GEMM of conv2d on the tensor cores: each operand as a gather of "taps", the tile
// loader feeding matmul's cp.async pipeline, and the kernel in TF32 or 3xTF32 (forward and
// backward input version 5, backward weight version 3; kernels/cuda/conv2d.cu gives their
// figures, kernels/cuda/NOTES.md their story). Included by conv2d.cu only.
#pragma once

#include <cstdint>

#include "kiln/kernels/cuda/conv2d/common.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::conv2d {

namespace {

// ---- the implicit GEMM on the tensor cores ----
//
// The tensor-core kernels describe each operand of the GEMM as a gather. Element (x, k) of an
// operand (x: its row m of A, or its column n of B) sits at data[tap(x).off + tap(k).off], and
// exists (else it reads as zero: padding, or past the matrix) when 0 <= tap(x).dy + tap(k).dy < h
// and 0 <= tap(x).dx + tap(k).dx < w. For the image operands the dy and dx are the row and column
// of the input pixel (h, w the input's size), so one test covers the padding; for the weights and
// grad_y, h = w = 1 and the taps carry dy = dx = 0. A row or k past the matrix gets dy = kOutside,
// which no bound accepts. So a load costs two adds, two unsigned compares and an address.
struct Tap {
  int64_t off;
  int dy, dx;
};
constexpr int kOutside = -(1 << 29);
constexpr Tap kOutsideTap = {0, kOutside, 0};

// The math of a tensor-core conv kernel. tf32: the f32 inputs truncated to TF32, all of K summed
// on the tensor cores (allow_tf32). tf32x3: every product from three TF32 products (matmul version
// 12), f32 accuracy. bf16: every 32-bit element of the operands is a pair of bf16 values
// neighbouring in k, multiplied by mma m16n8k16 (matmul::mma_slice says why the TF32 tiles and
// loads serve unchanged); the caller pairs the operands first (conv2d.cu's bf16 section).
enum class Mma { tf32, tf32x3, bf16 };

// The three GEMMs as gathers (see "The GEMM view" at the top). g: the group; split: the K split
// (backward weight).
struct TapForward {  // A = im2col(x) (m-fast), B = w (k-fast), C = y, plus the epilogue
  static constexpr bool a_k_fast = false, b_k_fast = true;
  const float* a_data;  // x
  const float* b_data;  // w
  DeviceEpilogue<float> epilogue;
  float* c;  // y
  Dims d;
  int64_t M, N, K;
  int a_h, a_w;  // the input's size
  static constexpr int b_h = 1, b_w = 1;

  __device__ Tap a_x(int64_t g, int64_t m) const {
    if (m >= M) return kOutsideTap;
    const int64_t img = m / d.ohw, r = m % d.ohw;
    const int dy = static_cast<int>(r / d.ow) * d.sh - d.ph, dx = static_cast<int>(r % d.ow) * d.sw - d.pw;
    return {(img * d.c + g * d.cg) * d.hw + int64_t{dy} * d.w + dx, dy, dx};
  }
  __device__ Tap a_k(int64_t, int64_t k) const {
    if (k >= K) return kOutsideTap;
    const int64_t c = k / d.khkw, r = k % d.khkw;
    const int dy = static_cast<int>(r / d.kw) * d.dh, dx = static_cast<int>(r % d.kw) * d.dw;
    return {c * d.hw + int64_t{dy} * d.w + dx, dy, dx};
  }
  __device__ Tap b_x(int64_t g, int64_t n) const { return n < N ? Tap{(g * d.og + n) * K, 0, 0} : kOutsideTap; }
  __device__ Tap b_k(int64_t, int64_t k) const { return k < K ? Tap{k, 0, 0} : kOutsideTap; }
  // C(m, n) is c[c_row(m) + n * c_col]; nullptr rows are past M.
  static constexpr bool has_epilogue = true;
  __device__ float* c_row(int64_t g, int64_t, int64_t m) const {
    if (m >= M) return nullptr;
    const int64_t img = m / d.ohw, r = m % d.ohw;
    return c + (img * d.o + g * d.og) * d.ohw + r;
  }
  __device__ int64_t c_col() const { return d.ohw; }
};

struct TapWeight {  // A = grad_y (k-fast), B = im2col(x)^T (k-fast), C = the split's partial grad_w
  static constexpr bool a_k_fast = true, b_k_fast = true;
  const float* a_data;  // grad_y
  const float* b_data;  // x
  float* c;             // grad_w, or the workspace [splits, O, C/G*KH*KW]
  Dims d;
  int64_t M, N, K;
  static constexpr int a_h = 1, a_w = 1;
  int b_h, b_w;  // the input's size

  __device__ Tap a_x(int64_t g, int64_t m) const { return m < M ? Tap{(g * d.og + m) * d.ohw, 0, 0} : kOutsideTap; }
  __device__ Tap a_k(int64_t, int64_t k) const {
    if (k >= K) return kOutsideTap;
    return {(k / d.ohw) * d.o * d.ohw + k % d.ohw, 0, 0};
  }
  __device__ Tap b_x(int64_t g, int64_t n) const {
    if (n >= N) return kOutsideTap;
    const int64_t c = n / d.khkw, r = n % d.khkw;
    const int dy = static_cast<int>(r / d.kw) * d.dh - d.ph, dx = static_cast<int>(r % d.kw) * d.dw - d.pw;
    return {(g * d.cg + c) * d.hw + int64_t{dy} * d.w + dx, dy, dx};
  }
  __device__ Tap b_k(int64_t, int64_t k) const {
    if (k >= K) return kOutsideTap;
    const int64_t img = k / d.ohw, r = k % d.ohw;
    const int dy = static_cast<int>(r / d.ow) * d.sh, dx = static_cast<int>(r % d.ow) * d.sw;
    return {img * d.c * d.hw + int64_t{dy} * d.w + dx, dy, dx};
  }
  static constexpr bool has_epilogue = false;
  __device__ float* c_row(int64_t g, int64_t split, int64_t m) const {
    return m < M ? c + (split * d.o + g * d.og + m) * N : nullptr;
  }
  __device__ int64_t c_col() const { return 1; }
};

__device__ inline bool inside(const Tap& x, const Tap& k, int h, int w) {
  return static_cast<unsigned>(x.dy + k.dy) < static_cast<unsigned>(h) &&
         static_cast<unsigned>(x.dx + k.dx) < static_cast<unsigned>(w);
}

// Queues the copies of one operand's BK x BX tile for matmul::cp_async_pipeline, element by
// element (a gather has no 16-byte runs to count on), the k taps read from a table in shared
// memory. KC (k-fast): neighbouring threads take neighbouring k, each thread a fixed k position
// and BX*BK/NT fixed rows, whose taps it keeps in registers; otherwise neighbouring rows, each
// thread one fixed row and BX*BK/NT values of k. Tiles are matmul::Tile's layouts (KC: rows of k).
template <int BK, int BX, int NT, bool KC>
struct GatherTileLoader {
  using T = matmul::Tile<BK, BX, KC>;
  static constexpr int LOADS = BX * BK / NT;
  static_assert((BX * BK) % NT == 0 && (KC ? NT % BK == 0 : NT % BX == 0), "tiles split evenly into loads");

  const float* data;
  const Tap* k_taps;  // the block's K range, padded to whole slices with kOutsideTap
  int h, w;
  int xi0, ki0;  // this thread's first tile position
  Tap x_taps[KC ? LOADS : 1];

  template <class XTap>
  __device__ GatherTileLoader(const float* data_, const Tap* k_taps_, int h_, int w_, int64_t x0, int tid,
                              XTap x_tap)
      : data(data_), k_taps(k_taps_), h(h_), w(w_) {
    xi0 = KC ? tid / BK : tid % BX;
    ki0 = KC ? tid % BK : tid / BX;
#pragma unroll
    for (int r = 0; r < (KC ? LOADS : 1); ++r) x_taps[r] = x_tap(x0 + xi0 + r * (NT / BK));
  }

  // The tile of k positions [p0, p0 + BK) of the block's range into S. A KC thread's one k tap is
  // read before the copies (cp.async's memory clobber would otherwise have it read again for each).
  __device__ void load(int64_t p0, float* S) const {
    const Tap k0 = k_taps[p0 + ki0];
#pragma unroll
    for (int r = 0; r < LOADS; ++r) {
      const int xi = KC ? xi0 + r * (NT / BK) : xi0, ki = KC ? ki0 : ki0 + r * (NT / BX);
      const Tap& x = x_taps[KC ? r : 0];
      const Tap k = KC || r == 0 ? k0 : k_taps[p0 + ki];
      const bool valid = inside(x, k, h, w);
      matmul::cp_async4(S + T::at(ki, xi), valid ? data + x.off + k.off : data, valid);
    }
  }
};

// C(m, n) over the K range [k_begin, k_end) as a plain f32 dot product of the taps that exist: the
// 3xTF32 kernel's answer for results that came out NaN. An inf input splits into inf + NaN; and a
// padding zero times an infinite weight is NaN inside the mma, where the convolution (the CPU's
// too) has no such term at all.
template <class P>
__device__ float dot_f32(const P& p, int64_t g, int64_t m, int64_t n, int64_t k_begin, int64_t k_end) {
  const Tap am = p.a_x(g, m), bn = p.b_x(g, n);
  float sum = 0;
  for (int64_t k = k_begin; k < k_end; ++k) {
    const Tap ak = p.a_k(g, k), bk = p.b_k(g, k);
    if (inside(am, ak, p.a_h, p.a_w) && inside(bn, bk, p.b_h, p.b_w))
      sum = fmaf(p.a_data[am.off + ak.off], p.b_data[bn.off + bk.off], sum);
  }
  return sum;
}

// The tile shape of a tensor-core conv GEMM: BM x BN block tiles of 32 x 32 warp tiles, slices of
// 16 values of k through STAGES shared-memory stages, the K range's taps in a table after them.
template <int BM_, int BN_, class P>
struct TcGemm {
  static constexpr int BM = BM_, BN = BN_, BK = kSliceK, WM = 32, WN = 32, STAGES = 3;
  static constexpr int THREADS = (BM / WM) * (BN / WN) * 32, MI = WM / 16, NI = WN / 8;
  using LA = GatherTileLoader<BK, BM, THREADS, P::a_k_fast>;
  using LB = GatherTileLoader<BK, BN, THREADS, P::b_k_fast>;
  static constexpr int STAGE_BYTES = STAGES * (LA::T::SIZE + LB::T::SIZE) * static_cast<int>(sizeof(float));
  // The dynamic shared memory for a K range of k_range values: the stages, then two tap tables.
  static int64_t smem_bytes(int64_t k_range) {
    const int64_t padded = (k_range + BK - 1) / BK * BK;
    return STAGE_BYTES + 2 * padded * static_cast<int64_t>(sizeof(Tap));
  }
};

// One block computes the BM x BN tile (blockIdx.x, blockIdx.y) of C for group blockIdx.z / splits
// over the K range of split blockIdx.z % splits, on the tensor cores: first the K range's taps of
// A and B into shared memory (a few divisions per k, once per block), then matmul version 12's
// cp.async pipeline (3 stages, one barrier per slice) fed by the gather loaders, and the mma of
// the warp's 32 x 32 tile per slice, at math M. tf32x3 (matmul/tensor_core.cuh): the slice's sum
// on the tensor cores from zero, slices added in f32, NaN results recomputed in f32. bf16: the
// data are pairs of bf16 along k (k, k_per_split and the taps count pairs).
template <class G, Mma M, class P>
__global__ void __launch_bounds__(G::THREADS) implicit_gemm_tc_kernel(P p, int64_t k_per_split, int64_t splits) {
  constexpr int MI = G::MI, NI = G::NI;
  extern __shared__ __align__(16) float smem_conv_tc[];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int wm0 = warp / (G::BN / G::WN) * G::WM, wn0 = warp % (G::BN / G::WN) * G::WN;
  const int64_t group = blockIdx.z / splits, split = blockIdx.z % splits;
  const int64_t m0 = int64_t{blockIdx.x} * G::BM, n0 = int64_t{blockIdx.y} * G::BN;
  const int64_t k_begin = split * k_per_split, k_end = p.K < k_begin + k_per_split ? p.K : k_begin + k_per_split;
  const int64_t k_range = k_end > k_begin ? k_end - k_begin : 0, padded = (k_range + G::BK - 1) / G::BK * G::BK;

  Tap* a_taps = reinterpret_cast<Tap*>(reinterpret_cast<char*>(smem_conv_tc) + G::STAGE_BYTES);
  Tap* b_taps = a_taps + padded;
  for (int64_t i = tid; i < padded; i += G::THREADS) {
    a_taps[i] = i < k_range ? p.a_k(group, k_begin + i) : kOutsideTap;
    b_taps[i] = i < k_range ? p.b_k(group, k_begin + i) : kOutsideTap;
  }
  __syncthreads();
  const typename G::LA load_a(p.a_data, a_taps, p.a_h, p.a_w, m0, tid, [&](int64_t m) { return p.a_x(group, m); });
  const typename G::LB load_b(p.b_data, b_taps, p.b_h, p.b_w, n0, tid, [&](int64_t n) { return p.b_x(group, n); });

  float acc[MI][NI][4] = {};
  matmul::cp_async_pipeline<G::STAGES>(load_a, load_b, k_range, smem_conv_tc, [&](const float* as, const float* bs) {
    using TA = typename G::LA::T;
    using TB = typename G::LB::T;
    if constexpr (M == Mma::tf32x3) {
      matmul::mma_3xtf32_add_slice<TA, TB>(acc, as, bs, wm0, wn0, lane);
    } else {
      matmul::mma_slice<TA, TB, M == Mma::bf16>(acc, as, bs, wm0, wn0, lane);
    }
  });

  // The mma accumulator layout: rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8 tile.
  const int g = lane / 4, t = lane % 4;
  const int64_t c_col = p.c_col();
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t m = m0 + wm0 + mi * 16 + g + half * 8;
      float* row = p.c_row(group, split, m);
      if (row == nullptr) continue;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t n = n0 + wn0 + ni * 8 + 2 * t + e;
          if (n >= p.N) continue;
          float v = acc[mi][ni][half * 2 + e];
          if (M == Mma::tf32x3 && v != v) v = dot_f32(p, group, m, n, k_begin, k_end);
          if constexpr (P::has_epilogue) v = p.epilogue(v, group * p.d.og + n);
          row[n * c_col] = v;
        }
    }
}

}  // namespace

}  // namespace kiln::cuda::conv2d
