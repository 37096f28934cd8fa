// The implicit GEMM of conv2d on the CUDA cores: the three problems (forward, backward input,
// backward weight) as gathers, the slice loader and the kernel (versions 2-4 of the forward, 2 of
// the backward input, 1-2 of the backward weight; kernels/cuda/conv2d.cu gives their figures,
// kernels/cuda/NOTES.md their story). Included by conv2d.cu only.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kiln/kernels/cuda/conv2d/common.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda::conv2d {

namespace {

// ---- the implicit GEMM kernel and its three problems ----
//
// A problem P describes C[M, N] = A[M, K] . B[K, N] for one group without storing A or B:
//   a_row(g, m) / b_row(g, n): what a thread needs about its fixed row of A (column of B),
//     decoded once before the K loop; a_col(g, k) / b_col(g, k): what every row needs about
//     column k of A (row k of B), decoded once per K slice into a shared table;
//   a(row, col) / b(row, col): the element (0 outside the matrix or in the padding);
//   c_row(g, split, m) and store(row, n, v): where C[m, n] goes.
// a_k_fast / b_k_fast: which index neighbouring threads take when loading a slice (the one along
// which memory is contiguous, for coalescing); c_m_fast: likewise for the register tiles and the
// stores. V is the arithmetic's type, compute_t<T>: T itself, or f32 for bf16 data (a load widens
// each element, a store rounds each result once; the weight gradient's partials stay in V).

template <class T>
struct ForwardProblem {
  using V = compute_t<T>;
  static constexpr bool a_k_fast = false, b_k_fast = true, c_m_fast = true;
  const T* x;
  const T* w;
  DeviceEpilogue<T> epilogue;  // of the forward (none when backward input runs as a forward)
  T* y;
  Dims d;
  int64_t M, N, K;

  struct ARow { const T* base; int64_t ih0, iw0; bool valid; };
  struct ACol { int64_t off, dy, dx; bool valid; };
  struct BRow { const T* p; bool valid; };
  struct BCol { int64_t k; bool valid; };
  struct CRow { T* p; int64_t channel; bool valid; };  // channel: of column n = 0

  __device__ ARow a_row(int64_t g, int64_t m) const {
    if (m >= M) return {nullptr, 0, 0, false};
    const int64_t img = m / d.ohw, r = m % d.ohw;
    return {x + (img * d.c + g * d.cg) * d.hw, (r / d.ow) * d.sh - d.ph, (r % d.ow) * d.sw - d.pw, true};
  }
  __device__ ACol a_col(int64_t, int64_t k, int64_t k_end) const {
    if (k >= k_end) return {0, 0, 0, false};
    const int64_t c = k / d.khkw, r = k % d.khkw;
    const int64_t dy = (r / d.kw) * d.dh, dx = (r % d.kw) * d.dw;
    return {c * d.hw + dy * d.w + dx, dy, dx, true};
  }
  __device__ V a(const ARow& r, const ACol& c) const {
    const int64_t ih = r.ih0 + c.dy, iw = r.iw0 + c.dx;
    if (!r.valid || !c.valid || ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) return V(0);
    return static_cast<V>(r.base[c.off + r.ih0 * d.w + r.iw0]);
  }
  __device__ BRow b_row(int64_t g, int64_t n) const {
    if (n >= N) return {nullptr, false};
    return {w + (g * d.og + n) * K, true};
  }
  __device__ BCol b_col(int64_t, int64_t k, int64_t k_end) const { return {k, k < k_end}; }
  __device__ V b(const BRow& r, const BCol& c) const { return r.valid && c.valid ? static_cast<V>(r.p[c.k]) : V(0); }
  __device__ CRow c_row(int64_t g, int64_t, int64_t m) const {
    if (m >= M) return {nullptr, 0, false};
    const int64_t img = m / d.ohw, r = m % d.ohw;
    return {y + (img * d.o + g * d.og) * d.ohw + r, g * d.og, true};
  }
  __device__ void store(const CRow& r, int64_t n, V v) const {
    if (r.valid && n < N) r.p[n * d.ohw] = cast<T>(epilogue(v, r.channel + n));
  }
};

template <class T>
struct BackwardInputProblem {
  using V = compute_t<T>;
  static constexpr bool a_k_fast = false, b_k_fast = true, c_m_fast = true;
  const T* gy;
  const T* w;
  T* gx;
  Dims d;
  int64_t M, N, K;

  struct ARow { const T* base; int64_t ty, tx; bool valid; };  // ty = ih + ph, tx = iw + pw
  struct ACol { int64_t off, dy, dx; bool valid; };
  struct BRow { const T* p; bool valid; };
  struct BCol { int64_t off; bool valid; };
  struct CRow { T* p; bool valid; };

  __device__ ARow a_row(int64_t g, int64_t m) const {
    if (m >= M) return {nullptr, 0, 0, false};
    const int64_t img = m / d.hw, r = m % d.hw;
    return {gy + (img * d.o + g * d.og) * d.ohw, r / d.w + d.ph, r % d.w + d.pw, true};
  }
  __device__ ACol a_col(int64_t, int64_t k, int64_t k_end) const {
    if (k >= k_end) return {0, 0, 0, false};
    const int64_t o = k / d.khkw, r = k % d.khkw;
    return {o * d.ohw, (r / d.kw) * d.dh, (r % d.kw) * d.dw, true};
  }
  // The output pixel (oi, oj) whose tap (ky, kx) reads this input pixel: oi*sh + ky*dh = ih + ph.
  __device__ V a(const ARow& r, const ACol& c) const {
    if (!r.valid || !c.valid) return V(0);
    const int64_t ny = r.ty - c.dy, nx = r.tx - c.dx;
    if (ny < 0 || nx < 0 || ny % d.sh != 0 || nx % d.sw != 0) return V(0);
    const int64_t oi = ny / d.sh, oj = nx / d.sw;
    if (oi >= d.oh || oj >= d.ow) return V(0);
    return static_cast<V>(r.base[c.off + oi * d.ow + oj]);
  }
  __device__ BRow b_row(int64_t g, int64_t n) const {
    if (n >= N) return {nullptr, false};
    return {w + (g * d.og * d.cg + n) * d.khkw, true};  // w[g*og, n]
  }
  __device__ BCol b_col(int64_t, int64_t k, int64_t k_end) const {
    if (k >= k_end) return {0, false};
    return {(k / d.khkw) * d.cg * d.khkw + k % d.khkw, true};  // w[+o, n, kh, kw]
  }
  __device__ V b(const BRow& r, const BCol& c) const { return r.valid && c.valid ? static_cast<V>(r.p[c.off]) : V(0); }
  __device__ CRow c_row(int64_t g, int64_t, int64_t m) const {
    if (m >= M) return {nullptr, false};
    const int64_t img = m / d.hw, r = m % d.hw;
    return {gx + (img * d.c + g * d.cg) * d.hw + r, true};
  }
  __device__ void store(const CRow& r, int64_t n, V v) const {
    if (r.valid && n < N) r.p[n * d.hw] = cast<T>(v);
  }
};

template <class T>
struct BackwardWeightProblem {
  using V = compute_t<T>;
  static constexpr bool a_k_fast = true, b_k_fast = true, c_m_fast = false;
  const T* x;
  const T* gy;
  V* out;  // grad_w, or the workspace [splits, O, C/G*KH*KW]
  Dims d;
  int64_t M, N, K;

  struct ARow { const T* p; bool valid; };
  struct ACol { int64_t off; bool valid; };
  struct BRow { const T* base; int64_t dy, dx; bool valid; };  // dy = kh*dh - ph
  struct BCol { int64_t off, ih0, iw0; bool valid; };
  struct CRow { V* p; bool valid; };

  __device__ ARow a_row(int64_t g, int64_t m) const {
    if (m >= M) return {nullptr, false};
    return {gy + (g * d.og + m) * d.ohw, true};
  }
  __device__ ACol a_col(int64_t, int64_t k, int64_t k_end) const {
    if (k >= k_end) return {0, false};
    return {(k / d.ohw) * d.o * d.ohw + k % d.ohw, true};
  }
  __device__ V a(const ARow& r, const ACol& c) const { return r.valid && c.valid ? static_cast<V>(r.p[c.off]) : V(0); }
  __device__ BRow b_row(int64_t g, int64_t n) const {
    if (n >= N) return {nullptr, 0, 0, false};
    const int64_t c = n / d.khkw, r = n % d.khkw;
    return {x + (g * d.cg + c) * d.hw, (r / d.kw) * d.dh - d.ph, (r % d.kw) * d.dw - d.pw, true};
  }
  __device__ BCol b_col(int64_t, int64_t k, int64_t k_end) const {
    if (k >= k_end) return {0, 0, 0, false};
    const int64_t img = k / d.ohw, r = k % d.ohw;
    return {img * d.c * d.hw, (r / d.ow) * d.sh, (r % d.ow) * d.sw, true};
  }
  __device__ V b(const BRow& r, const BCol& c) const {
    const int64_t ih = c.ih0 + r.dy, iw = c.iw0 + r.dx;
    if (!r.valid || !c.valid || ih < 0 || ih >= d.h || iw < 0 || iw >= d.w) return V(0);
    return static_cast<V>(r.base[c.off + ih * d.w + iw]);
  }
  __device__ CRow c_row(int64_t g, int64_t split, int64_t m) const {
    if (m >= M) return {nullptr, false};
    return {out + (split * d.o + g * d.og + m) * N, true};
  }
  __device__ void store(const CRow& r, int64_t n, V v) const {
    if (r.valid && n < N) r.p[n] = v;
  }
};

// Loads one BK slice of A and B for the implicit GEMM kernels, through registers: fetch reads the
// slice's elements from global memory into registers (the gathers of the problem P), stash writes
// them to the block's shared tiles, so that a kernel can have the next slice's loads in flight
// while it computes on the current one. kT threads; each owns fixed rows of A (columns of B),
// decoded once here, and the per-column decode of a slice (P::a_col, P::b_col) goes through
// tables in shared memory that threads 0 .. BK-1 fill (decode), read by every thread in fetch.
// Neighbouring threads take neighbouring k where memory runs along k (P::a_k_fast, b_k_fast),
// else neighbouring m (n), so the gathers coalesce.
template <class T, int BM, int BN, int BK, int kT, class P>
struct SliceLoader {
  static_assert(kT % BK == 0 && (BM * BK) % kT == 0 && (BN * BK) % kT == 0, "slice loads must divide evenly");
  static_assert(P::a_k_fast || kT % BM == 0, "an m-fast load needs the threads to cover BM");
  static_assert(P::b_k_fast || kT % BN == 0, "an n-fast load needs the threads to cover BN");
  static constexpr int kLoadsA = BM * BK / kT, kLoadsB = BN * BK / kT;  // elements per thread per slice
  using ACol = typename P::ACol;
  using BCol = typename P::BCol;
  using V = typename P::V;

  const P& p;
  int tid;
  int64_t group, k_end;
  typename P::ARow arow[P::a_k_fast ? kLoadsA : 1];
  typename P::BRow brow[P::b_k_fast ? kLoadsB : 1];
  V ra[kLoadsA], rb[kLoadsB];

  __device__ SliceLoader(const P& p_, int tid_, int64_t group_, int64_t m0, int64_t n0, int64_t k_end_)
      : p(p_), tid(tid_), group(group_), k_end(k_end_) {
    if constexpr (P::a_k_fast) {
      for (int r = 0; r < kLoadsA; ++r) arow[r] = p.a_row(group, m0 + tid / BK + r * (kT / BK));
    } else {
      arow[0] = p.a_row(group, m0 + tid % BM);
    }
    if constexpr (P::b_k_fast) {
      for (int r = 0; r < kLoadsB; ++r) brow[r] = p.b_row(group, n0 + tid / BK + r * (kT / BK));
    } else {
      brow[0] = p.b_row(group, n0 + tid % BN);
    }
  }

  // Where this thread's r-th element of a slice sits in the tile (k index, m or n index).
  __device__ void a_at(int r, int& ki, int& mi) const {
    if constexpr (P::a_k_fast) ki = tid % BK, mi = tid / BK + r * (kT / BK);
    else mi = tid % BM, ki = tid / BM + r * (kT / BM);
  }
  __device__ void b_at(int r, int& ki, int& ni) const {
    if constexpr (P::b_k_fast) ki = tid % BK, ni = tid / BK + r * (kT / BK);
    else ni = tid % BN, ki = tid / BN + r * (kT / BN);
  }
  // The column tables of the slice at k0; a barrier must follow before any thread fetches.
  __device__ void decode(ACol* acol, BCol* bcol, int64_t k0) const {
    if (tid < BK) {
      acol[tid] = p.a_col(group, k0 + tid, k_end);
      bcol[tid] = p.b_col(group, k0 + tid, k_end);
    }
  }
  // Global memory -> registers.
  __device__ void fetch(const ACol* acol, const BCol* bcol) {
#pragma unroll
    for (int r = 0; r < kLoadsA; ++r) {
      int ki, mi;
      a_at(r, ki, mi);
      ra[r] = p.a(arow[P::a_k_fast ? r : 0], acol[ki]);
    }
#pragma unroll
    for (int r = 0; r < kLoadsB; ++r) {
      int ki, ni;
      b_at(r, ki, ni);
      rb[r] = p.b(brow[P::b_k_fast ? r : 0], bcol[ki]);
    }
  }
  // Registers -> shared tiles: store_a(k, m, value), store_b(k, n, value).
  template <class StoreA, class StoreB>
  __device__ void stash(StoreA&& store_a, StoreB&& store_b) const {
#pragma unroll
    for (int r = 0; r < kLoadsA; ++r) {
      int ki, mi;
      a_at(r, ki, mi);
      store_a(ki, mi, ra[r]);
    }
#pragma unroll
    for (int r = 0; r < kLoadsB; ++r) {
      int ki, ni;
      b_at(r, ki, ni);
      store_b(ki, ni, rb[r]);
    }
  }
};

// One block computes the BM x BN tile (blockIdx.x, blockIdx.y) of C for group
// blockIdx.z / splits over the K range of split blockIdx.z % splits.
// kPrefetch = false: each K slice is loaded, then computed (three barriers per slice, and the
// slice's global loads stall the block). kPrefetch = true: the next slice's elements are loaded
// into registers before the current slice is computed, so their latency hides behind its FMAs,
// and are written to the shared tiles after it (two barriers per slice, same shared memory).
template <class T, int BM, int BN, int BK, int TM, int TN, bool kPrefetch, class P>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    implicit_gemm_kernel(P p, int64_t k_per_split, int64_t splits) {
  constexpr int kT = (BM / TM) * (BN / TN);  // threads
  static_assert(BM % TM == 0 && BN % TN == 0, "thread tiles must divide the block tile");

  // +1 column: a k-fast load writes a column of the tile, and the padding puts its 16 elements
  // in 16 different banks.
  using V = typename P::V;
  __shared__ V as[BK][BM + 1];
  __shared__ V bs[BK][BN + 1];
  __shared__ typename P::ACol acol[BK];
  __shared__ typename P::BCol bcol[BK];

  const int tid = threadIdx.x;
  const int64_t group = blockIdx.z / splits, split = blockIdx.z % splits;
  const int64_t m0 = int64_t{blockIdx.x} * BM, n0 = int64_t{blockIdx.y} * BN;
  const int64_t k_begin = split * k_per_split, k_end = p.K < k_begin + k_per_split ? p.K : k_begin + k_per_split;

  SliceLoader<T, BM, BN, BK, kT, P> load(p, tid, group, m0, n0, k_end);
  auto stash = [&] {
    load.stash([&](int k, int m, V v) { as[k][m] = v; }, [&](int k, int n, V v) { bs[k][n] = v; });
  };

  // This thread's register tile: rows ty + i*(BM/TM), columns tx + j*(BN/TN).
  const int ty = P::c_m_fast ? tid % (BM / TM) : tid / (BN / TN);
  const int tx = P::c_m_fast ? tid / (BM / TM) : tid % (BN / TN);
  V acc[TM][TN] = {};
  auto compute = [&] {
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      V a[TM], b[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) a[i] = as[kk][ty + i * (BM / TM)];
#pragma unroll
      for (int j = 0; j < TN; ++j) b[j] = bs[kk][tx + j * (BN / TN)];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
    }
  };

  if constexpr (!kPrefetch) {
    for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
      load.decode(acol, bcol, k0);
      __syncthreads();
      load.fetch(acol, bcol);
      stash();
      __syncthreads();
      compute();
      __syncthreads();  // the next slice overwrites the tiles and tables
    }
  } else {
    if (k_begin < k_end) {
      load.decode(acol, bcol, k_begin);
      __syncthreads();
      load.fetch(acol, bcol);
      __syncthreads();  // everyone has read the tables before the loop decodes the next slice
    }
    for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
      // Invariant: slice k0 is in registers; everyone is done with the tiles (the previous
      // compute) and the tables (the previous fetch), both behind the last barrier.
      stash();
      const bool next = k0 + BK < k_end;  // the same in every thread of the block
      if (next) load.decode(acol, bcol, k0 + BK);
      __syncthreads();
      if (next) load.fetch(acol, bcol);  // in flight while the FMAs below run
      compute();
      __syncthreads();
    }
  }

#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const typename P::CRow row = p.c_row(group, split, m0 + ty + i * (BM / TM));
#pragma unroll
    for (int j = 0; j < TN; ++j) p.store(row, n0 + tx + j * (BN / TN), acc[i][j]);
  }
}

}  // namespace

}  // namespace kiln::cuda::conv2d
