// The versions of the softmax family (softmax.cu, cross_entropy.cu) on raw device pointers, for
// kernel-bench and the tests. CudaBackend::softmax and cross_entropy(_backward) are the
// production path; they call `best` and the cross-entropy version that fits the row length.
//
// Every function queues its kernel on `stream` and returns; f32 and f64 are instantiated (and bf16
// logits for the cross-entropy versions that take S). Buffers are contiguous. out may alias x (each
// element is read before it is written).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda::softmax {

// ---- softmax over the last axis: x [rows, n] -> out [rows, n]; log_softmax when `log` ----
template <class T> void naive(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream);          // version 1
template <class T> void warp_per_row(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream);   // version 2
template <class T> void block_per_row(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream);  // version 3
// version 5: several rows per warp, a group of 1 to 8 lanes per row (n <= kSubWarpRowMax; longer
// rows go to version 2)
template <class T> void rows_per_warp(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream);
// version 6: a block per row that keeps the row in registers, reading it once (f32: up to 8192
// packs of 16 bytes, n <= 32768 when aligned, 8192 otherwise; f64: n <= 8192 aligned, 4096
// otherwise; longer rows go to version 3)
template <class T> void row_in_registers(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream);
// version 7: 1, 2 or 4 warps per row (`warps`, more where the row needs them), each lane holding
// up to 8 packs of 16 bytes in registers (32 * warps * 8 packs: n <= 4096 f32 aligned with 4
// warps; longer rows go to version 6)
template <class T>
void warps_per_row(const T* x, T* out, int64_t rows, int64_t n, bool log, int warps, cudaStream_t stream);
constexpr int64_t kSubWarpRowMax = 32;   // rows up to this long go to the rows-per-warp versions
constexpr int64_t kRegisterRowMin = 512;  // cross_entropy backward: rows from this long use the register version
constexpr int64_t kWarpsRowMax = 1024;    // softmax: longer rows than this go to version 6, shorter to version 7
constexpr int kRowWarps = 1;              // softmax: version 7's warps per row in production

// ---- softmax over the middle axis of [outer, n, inner] ----
template <class T>  // version 4: a thread per (outer, inner) column
void columns(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool log, cudaStream_t stream);
template <class T>  // version 8: column tiles of 16-byte packs, two passes over x (any n)
void column_packs(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool log, cudaStream_t stream);
// version 9: the column tile held in registers and shared memory, x read once; `lanes` (1 to 32)
// threads of 16-byte packs across inner (fewer where inner is narrower, more for short columns).
// Columns too long for the shared memory of a block go to version 8.
template <class T>
void column_tiles(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool log, int lanes, cudaStream_t stream);
constexpr int kColumnLanes = 8;  // version 9's lanes in production
template <class T>  // the production pick among the versions, by n and inner
void best(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool log, cudaStream_t stream);

// ---- cross-entropy: logits [rows, C], targets i32 [rows], losses [rows] ----
// A target outside [0, C) gives a NaN loss (a NaN gradient row) and is recorded in `fault`
// (may be null), which CudaBackend throws at its next synchronisation.
constexpr int64_t kWarpRowMax = 1024;  // cross_entropy forward: rows up to this long use the warp version
constexpr int64_t kSplitRowMin = 2048;  // cross_entropy backward: rows from this long use the split version
// The versions that take S read logits of any storage type (f32, f64, bf16) and compute in
// compute_t<S>: the losses and their gradients are f32 for bf16 logits, the logits' gradient is S.
// Their backward takes RowGrads: each row's gradient, or one for every row.
template <class T>
struct RowGrads {
  const T* values;
  int64_t stride;  // 1: values[r] for row r; 0: values[0] for every row (the gradient of the losses' sum)
  T scale;         // times this (1 / rows for a mean)
  RowGrads(const T* v, int64_t stride_ = 1, T scale_ = T(1)) : values(v), stride(stride_), scale(scale_) {}  // NOLINT
#if defined(__CUDACC__)
  __device__ T operator[](int64_t r) const { return values[r * stride] * scale; }
#endif
};
template <class S>  // version 2: a warp a row
void cross_entropy_warp(const S* logits, const int32_t* targets, compute_t<S>* losses, int64_t rows, int64_t classes,
                        double label_smoothing, DeviceFault* fault, cudaStream_t stream);
template <class T>
void cross_entropy_block(const T* logits, const int32_t* targets, T* losses, int64_t rows, int64_t classes,
                         double label_smoothing, DeviceFault* fault, cudaStream_t stream);
template <class S>  // version 5: C <= kSubWarpRowMax (longer rows go to cross_entropy_warp)
void cross_entropy_rows_per_warp(const S* logits, const int32_t* targets, compute_t<S>* losses, int64_t rows,
                                 int64_t classes, double label_smoothing, DeviceFault* fault, cudaStream_t stream);
template <class S>  // C <= kSubWarpRowMax (longer rows go to cross_entropy_backward_warp)
void cross_entropy_backward_rows_per_warp(const S* logits, const int32_t* targets, RowGrads<compute_t<S>> grad_losses,
                                          S* grad_logits, int64_t rows, int64_t classes, double label_smoothing,
                                          DeviceFault* fault, cudaStream_t stream);
// version 8: out[0] = the rows' losses summed (divided by rows where `mean`), in one block; with a
// count (not null), count[0] += the rows whose argmax is their target, as count_correct adds.
// Returns false, queuing nothing, where rows * C > kReducedMaxElements or C > kWarpRowMax (or C == 0).
constexpr int64_t kReducedMaxElements = int64_t{1} << 16;
template <class S>
bool cross_entropy_reduced(const S* logits, const int32_t* targets, compute_t<S>* out, int32_t* count, int64_t rows,
                           int64_t classes, double label_smoothing, bool mean, DeviceFault* fault, cudaStream_t stream);
template <class T>  // the row in registers, as row_in_registers (too long: cross_entropy_backward_block)
void cross_entropy_backward_registers(const T* logits, const int32_t* targets, const T* grad_losses, T* grad_logits,
                                      int64_t rows, int64_t classes, double label_smoothing, DeviceFault* fault,
                                      cudaStream_t stream);
template <class T>  // the block version with several 16-byte loads in flight per thread, one barrier per row
void cross_entropy_block_unrolled(const T* logits, const int32_t* targets, T* losses, int64_t rows, int64_t classes,
                                  double label_smoothing, DeviceFault* fault, cudaStream_t stream);
template <class T>  // the row split between registers and shared memory, two rows per SM (too long: block)
void cross_entropy_backward_split(const T* logits, const int32_t* targets, const T* grad_losses, T* grad_logits,
                                  int64_t rows, int64_t classes, double label_smoothing, DeviceFault* fault,
                                  cudaStream_t stream);
template <class S>
void cross_entropy_backward_warp(const S* logits, const int32_t* targets, RowGrads<compute_t<S>> grad_losses,
                                 S* grad_logits, int64_t rows, int64_t classes, double label_smoothing,
                                 DeviceFault* fault, cudaStream_t stream);
template <class T>
void cross_entropy_backward_block(const T* logits, const int32_t* targets, const T* grad_losses, T* grad_logits,
                                  int64_t rows, int64_t classes, double label_smoothing, DeviceFault* fault,
                                  cudaStream_t stream);

}  // namespace kiln::cuda::softmax

#if defined(__CUDACC__)
// ---- device pieces shared by softmax.cu and cross_entropy.cu ----
#include <algorithm>
#include <cmath>

#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda::softmax::detail {

constexpr int kBlock = 512;  // threads of the block-per-row kernels (16 warps)

__device__ inline float exp_of(float v) { return expf(v); }  // the accurate expf, not __expf
__device__ inline double exp_of(double v) { return ::exp(v); }
__device__ inline float log_of(float v) { return logf(v); }
__device__ inline double log_of(double v) { return ::log(v); }

// The online softmax state of a run of elements: their max m and s = sum exp(x - m). Adding an
// element larger than m rescales s by exp(m_old - m_new) instead of needing a first pass for the
// max. A NaN becomes the max and sticks (as on the CPU); a slice whose max is not finite ends
// with s = NaN (finish), so every output of that slice is NaN, as on the CPU.
template <class T>
struct MaxSum {  // no initialisers, so that it may live in __shared__ memory: start from none()
  T m, s;
};

template <class T>
__device__ inline MaxSum<T> none() {
  return {T(-INFINITY), T(0)};
}

// exp(v - m), but 1 when v == m: two -inf (or +inf) would give exp(NaN). A select, not a branch:
// exp(0) is exactly 1, and the loops that call this per element stay free of branches.
template <class T>
__device__ inline T shifted_exp(T v, T m) {
  return exp_of(v == m ? T(0) : v - m);
}

template <class T>
__device__ inline void add(MaxSum<T>& a, T v) {
  if (v > a.m || v != v) {
    a.s = a.s * shifted_exp(a.m, v) + T(1);
    a.m = v;
  } else {
    a.s += shifted_exp(v, a.m);
  }
}

template <class T>
__device__ inline MaxSum<T> combine(MaxSum<T> a, MaxSum<T> b) {
  if (b.m > a.m || b.m != b.m) {
    MaxSum<T> t = a;
    a = b;
    b = t;
  }
  // a.m is now the max (or a NaN): b's sum rescales to it. An empty b (m = -inf, s = 0) adds 0.
  a.s += b.s * shifted_exp(b.m, a.m);
  return a;
}

template <class T>
__device__ inline MaxSum<T> finish(MaxSum<T> a) {
  if (!isfinite(a.m)) a.s = NAN;
  return a;
}

// The states of aligned groups of G lanes combined (G a power of two <= 32): each group gets its
// own result, in log2(G) shuffle steps. Every lane of the warp must call it (full-mask shuffles);
// xor offsets below G stay in the group.
template <int G, class T>
__device__ inline MaxSum<T> group_combine(MaxSum<T> a) {
#pragma unroll
  for (int offset = G / 2; offset > 0; offset /= 2) {
    MaxSum<T> b;
    b.m = __shfl_xor_sync(0xffffffffu, a.m, offset);
    b.s = __shfl_xor_sync(0xffffffffu, a.s, offset);
    a = combine(a, b);
  }
  return a;
}

// The 32 lanes' states combined; every lane gets the result.
template <class T>
__device__ inline MaxSum<T> warp_combine(MaxSum<T> a) {
  return group_combine<32>(a);
}

template <int G, class T>
__device__ inline T group_sum(T v) {
#pragma unroll
  for (int offset = G / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// The max of a and b in one instruction. fmax drops a NaN, but the NaN's exp(v - m) then makes
// the sum NaN, and finish() makes the sum NaN where the max is infinite, so a slice with a NaN is
// NaN as on the CPU; add() keeps the NaN in the max instead, at the cost of a branch.
__device__ inline float max_of(float a, float b) { return fmaxf(a, b); }
__device__ inline double max_of(double a, double b) { return fmax(a, b); }

// The lanes per row of a rows-per-warp kernel (n <= kSubWarpRowMax): 1, 2, 4 or 8, the fewest
// whose lanes hold at most 4 values each.
inline int lane_group(int64_t n) { return n <= 4 ? 1 : n <= 8 ? 2 : n <= 16 ? 4 : 8; }

// The launch shape of a row-in-registers kernel: each of `threads` threads (a multiple of 32, at
// most 1024) holds `per_thread` packs (1, 2, 4 or 8, at most max_per_thread) of a row of `packs`
// packs; per_thread 0 when the row does not fit. f64 stops at 4 packs a thread: at 8 (32 doubles)
// the 64 registers that 1024 threads leave each one spill (ptxas -v).
struct RegisterShape {
  int per_thread, threads;
};
inline RegisterShape register_shape(int64_t packs, int max_per_thread) {
  if (packs > int64_t{max_per_thread} * 1024) return {0, 0};
  const int p = packs <= 1024 ? 1 : packs <= 2048 ? 2 : packs <= 4096 ? 4 : 8;
  const int64_t threads = ((packs + p - 1) / p + 31) / 32 * 32;
  return {p, static_cast<int>(threads)};
}

template <class T>
__device__ inline T warp_sum(T v) {
  return group_sum<32>(v);
}

// The block's states combined as a tree; every thread gets the result. Each warp writes its
// state to `scratch` (one per warp); every warp reads them all into its first lanes, combines
// them in log2(warps) shuffle steps and broadcasts lane 0's result. (Combining the warps' states
// one after another in every thread cost warps - 1 dependent combines a thread, each an exp: 31
// in a block of 1024, as many instructions as a row's own exps there.) combine() gives the same
// bits either way round, and every warp combines the same states in the same order, so every
// thread gets the same bits. Called by every thread of the block; two barriers (before the
// states are read, and before `scratch` may be written again).
template <class T>
__device__ inline MaxSum<T> block_combine(MaxSum<T> a, MaxSum<T>* scratch) {
  a = warp_combine(a);
  const int lane = threadIdx.x % 32, warps = static_cast<int>(blockDim.x / 32);
  if (lane == 0) scratch[threadIdx.x / 32] = a;
  __syncthreads();
  a = lane < warps ? scratch[lane] : none<T>();
  for (int offset = 1; offset < warps; offset *= 2) {
    MaxSum<T> b;
    b.m = __shfl_xor_sync(0xffffffffu, a.m, offset);
    b.s = __shfl_xor_sync(0xffffffffu, a.s, offset);
    a = combine(a, b);
  }
  a.m = __shfl_sync(0xffffffffu, a.m, 0);  // the lanes past the warps' count combined only none()s
  a.s = __shfl_sync(0xffffffffu, a.s, 0);
  __syncthreads();
  return a;
}

// V neighbouring elements, loaded and stored as one 16-byte access when V * sizeof(T) == 16.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// Whether rows of n elements starting at these pointers can be walked in 16-byte packs.
template <class T>
inline bool packable(int64_t n, const void* a, const void* b) {
  constexpr int64_t v = 16 / sizeof(T);
  return n % v == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && reinterpret_cast<uintptr_t>(b) % 16 == 0;
}

// Blocks for a kernel that takes one row per block (or per warp): a grid-stride loop covers the
// rest, so the grid stays within what the device schedules at once many times over.
inline unsigned row_blocks(int64_t units) {
  return static_cast<unsigned>(std::clamp<int64_t>(units, 1, int64_t{1} << 20));
}

// ---- the passes over a row that the softmax versions and cross-entropy share ----
// Each returns the row's online state; `each(v)` sees every element a thread adds, for what
// cross-entropy sums beside the state (its logits' plain sum). Softmax passes nothing. Versions 2
// and 5 read a row of any storage type S (cross-entropy's bf16 logits) and compute in compute_t<S>.
struct NoEach {
  template <class T>
  __device__ void operator()(T) const {}
};

// Version 2: the 32 lanes of a warp walk a row of n elements together (lane k takes elements
// k, k + 32, ...: coalesced); five shuffles combine their states. Every lane gets the finished state.
template <class S, class Each = NoEach, class T = compute_t<S>>
__device__ inline MaxSum<T> warp_row_state(const S* row, int64_t n, Each each = {}) {
  MaxSum<T> a = none<T>();
  for (int64_t k = threadIdx.x % 32; k < n; k += 32) {
    const T v = row[k];
    add(a, v);
    each(v);
  }
  return finish(warp_combine(a));
}

// Version 3: the threads of a block walk a row of `packs` packs of V elements together (thread t
// takes packs t, t + blockDim.x, ...); this is one thread's state, not yet combined.
template <class T, int V, class Each = NoEach>
__device__ inline MaxSum<T> thread_row_state(const Pack<T, V>* row, int64_t packs, Each each = {}) {
  MaxSum<T> a = none<T>();
  for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
    Pack<T, V> p = row[j];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      add(a, p.v[e]);
      each(p.v[e]);
    }
  }
  return a;
}

// The same, combined across the block (block_combine: two barriers; every thread gets the
// finished state). The row loop around it must be uniform across the block.
template <class T, int V>
__device__ inline MaxSum<T> block_row_state(const Pack<T, V>* row, int64_t packs, MaxSum<T>* scratch) {
  return finish(block_combine(thread_row_state(row, packs), scratch));
}

// Version 5: rows of n <= 4G elements, a group of G lanes per row and 32 / G neighbouring rows per
// warp, which its loads cover together. f(GroupRow) runs once per row for every lane of the warp
// (the group's shuffles need them all): `live` is false past the last row.
struct GroupRow {
  int64_t r;  // the row
  bool live;  // r < rows
  int sub;    // the lane's place in its group
};
template <int G, class F>
__device__ inline void for_each_group_row(int64_t rows, F f) {
  constexpr int R = 32 / G;
  const int lane = threadIdx.x % 32;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t base = warp * R; base < rows; base += warps * R) {
    const int64_t r = base + lane / G;
    f(GroupRow{r, r < rows, lane % G});
  }
}

constexpr int kGroupValues = 4;  // the elements a lane holds at most in version 5 (lane_group)

// Version 5's pass over row `at.r` of x [rows, n]: the lane keeps its elements sub, sub + G, ... in
// v (registers); shuffles within the group combine the states. A lane past the last row carries
// an empty state.
template <int G, class S, class T, class Each = NoEach>
__device__ inline MaxSum<T> group_row_state(const S* x, int64_t n, const GroupRow& at, T (&v)[kGroupValues],
                                            Each each = {}) {
  MaxSum<T> a = none<T>();
#pragma unroll
  for (int k = 0; k < kGroupValues; ++k) {
    const int64_t c = at.sub + k * G;
    if (at.live && c < n) {
      v[k] = x[at.r * n + c];
      add(a, v[k]);
      each(v[k]);
    }
  }
  return finish(group_combine<G>(a));
}

// Version 6: a block per row of `packs` packs of V elements, held in registers: the thread loads
// its packs j = threadIdx.x + i * blockDim.x (i < P) into p, taking their max m as they land, then
// sums exp(v - m) over them, replacing each v by exp(v - m) where `keep_exps` (the write is then
// one multiply: exp(v - M) / S = e * exp(m - M) / S). Returns the thread's {m, sum}, not yet
// combined. Force-inlined: p must stay in registers.
template <class T, int V, int P>
__device__ __forceinline__ MaxSum<T> load_row_in_registers(const Pack<T, V>* row, int64_t packs, Pack<T, V> (&p)[P],
                                                           bool keep_exps) {
  T m = -INFINITY;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (j < packs) {
      p[i] = row[j];
#pragma unroll
      for (int e = 0; e < V; ++e) m = max_of(m, p[i].v[e]);
    }
  }
  T sum = 0;
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (j < packs) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const T ex = shifted_exp(p[i].v[e], m);
        sum += ex;
        if (keep_exps) p[i].v[e] = ex;
      }
    }
  }
  return {m, sum};
}

// Version 6's write: each element of the thread's packs becomes f(v, c), c its index in the row,
// and the packs are stored to out's row.
template <class T, int V, int P, class F>
__device__ __forceinline__ void store_row_in_registers(Pack<T, V>* out, int64_t packs, Pack<T, V> (&p)[P], F f) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (j < packs) {
#pragma unroll
      for (int e = 0; e < V; ++e) p[i].v[e] = f(p[i].v[e], j * V + e);
      out[j] = p[i];
    }
  }
}

}  // namespace kiln::cuda::softmax::detail
#endif
