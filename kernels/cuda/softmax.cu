// softmax and log_softmax on the GPU over the middle axis of contiguous x [outer, n, inner]
// (core views any axis that way; inner == 1 is the usual softmax over the last axis):
//
//   softmax:     out[o, k, i] = exp(x[o, k, i] - m) / s
//   log_softmax: out[o, k, i] = x[o, k, i] - m - log(s)
//   with m = max_k x[o, k, i] and s = sum_k exp(x[o, k, i] - m).
//
// Bench: `kernel-bench --only softmax` (GB/s = bytes read + written per second, against the
// device's copy bandwidth). The row passes the versions share (and cross_entropy.cu with them) are
// in softmax.cuh; how the versions came to be, with the attempts dropped on the way:
// kernels/cuda/NOTES.md. Figures below: ms and share of the copy bandwidth, f32 (H100 80GB HBM3,
// kernel-bench, docs/runs/2026-11-26-h100; every row: kernels/README.md).
//
// Rows (inner == 1):
// version 1 (naive): a thread per row, three passes (max; sum of exp; write). Neighbouring threads
//   walk rows n elements apart, so no load coalesces: the baseline. [65536, 10]
//   0.0107 ms [fig cuda.softmax.v1.65536x10.ms], 16% [fig cuda.softmax.v1.65536x10.pct-copy].
// version 2 (warp per row): the 32 lanes stride through the row together (coalesced), each keeping
//   an online (max, sum) state (softmax.cuh: an element above the max rescales the sum by
//   exp(old - new)), so one pass gives both; five shuffles combine the lanes, and a second pass
//   writes the row from L1. [32768, 256] 0.0453 ms [fig cuda.softmax.v2.32768x256.ms],
//   49% [fig cuda.softmax.v2.32768x256.pct-copy].
// version 3 (block per row): 512 threads per row with the same state, 16-byte loads where the row
//   allows, the warps' states combined through shared memory. [4096, 32768]
//   0.5481 ms [fig cuda.softmax.v3.4096x32768.ms], 65% [fig cuda.softmax.v3.4096x32768.pct-copy].
// version 5 (rows per warp, n <= 32): version 2 with a group of 1, 2, 4 or 8 lanes per row and
//   32 / G neighbouring rows per warp, the elements in registers. [65536, 10]
//   0.0058 ms [fig cuda.softmax.v5.65536x10.ms], 30% [fig cuda.softmax.v5.65536x10.pct-copy].
// version 6 (row in registers): version 3 reading the row once into registers (up to 1024 threads
//   of 8 packs: n <= 32768 f32, 8192 f64), the thread's max, its exps kept, one block combine as a
//   tree of shuffles, then one multiply per element. [4096, 32768]
//   0.3654 ms [fig cuda.softmax.v6.4096x32768.ms], 98% [fig cuda.softmax.v6.4096x32768.pct-copy].
// version 7 (warps per row, 32 < n <= 4096 f32): version 6's arithmetic with G = 1, 2 or 4 warps
//   per row and 8 / G rows per block of 256, every lane's packs loaded before any is used. One
//   warp: [8192, 1024] 0.0261 ms [fig cuda.softmax.v7.8192x1024.ms],
//   86% [fig cuda.softmax.v7.8192x1024.pct-copy]; [32768, 256]
//   0.0264 ms [fig cuda.softmax.v7.32768x256.ms], 85% [fig cuda.softmax.v7.32768x256.pct-copy]
//   (2 warps 74% [fig cuda.softmax.v7-2warps.32768x256.pct-copy], 4 warps
//   43% [fig cuda.softmax.v7-4warps.32768x256.pct-copy]).
// Columns (inner > 1):
// version 4 (columns): a thread per (outer, inner) column, neighbouring threads on neighbouring
//   columns (coalesced without a transpose). [32, 21, 16384]
//   0.0532 ms [fig cuda.softmax.v4.32x21x16384.ms], 55% [fig cuda.softmax.v4.32x21x16384.pct-copy];
//   [64, 1024, 256] 5% [fig cuda.softmax.v4.64x1024x256.pct-copy].
// version 8 (column packs): tiles of 8 lanes x 16 bytes of neighbouring columns per block of 256,
//   its rows of threads splitting n, 4 packs in flight per thread; a second pass reads the tile
//   again and writes it. [64, 1024, 256] 0.0912 ms [fig cuda.softmax.v8.64x1024x256.ms],
//   49% [fig cuda.softmax.v8.64x1024x256.pct-copy].
// version 9 (column tile on chip): version 8's tile held in registers and shared memory (cp.async),
//   so x is read once, then version 6's arithmetic per column. [64, 1024, 256], 8 lanes:
//   0.0577 ms [fig cuda.softmax.v9-8lanes.64x1024x256.ms],
//   77% [fig cuda.softmax.v9-8lanes.64x1024x256.pct-copy] (4 lanes
//   78% [fig cuda.softmax.v9-4lanes.64x1024x256.pct-copy], 16 lanes
//   67% [fig cuda.softmax.v9-16lanes.64x1024x256.pct-copy]); [32, 21, 16384]
//   0.0339 ms [fig cuda.softmax.v9-8lanes.32x21x16384.ms],
//   87% [fig cuda.softmax.v9-8lanes.32x21x16384.pct-copy].
// Production (`best`): version 9 when inner > 1 (version 8 where the tile does not fit), else
// version 5 for n <= 32, version 7 (one warp a row, more where the row needs them) up to
// n = 1024, version 6 from there (version 3 where the row does not fit in registers).
//
// Precision: f32 accumulates in float (f64 in double). The online rescaling keeps every exp in
// (0, 1], and the sum of a row's exps is at least 1, so float keeps about 1e-6 relative error
// even for rows of 10^5 elements; the tests hold it to rtol 1e-5 of the CPU's double path.
// Double exps would cost more than the memory traffic on the large shapes the bench runs.
//
// Special values, as on the CPU: a NaN anywhere in a slice, or a max of +-inf (a row of -inf,
// or a +inf), gives NaN for the whole slice; a -inf among finite values gives 0 (log: -inf).
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/softmax.cuh"

namespace kiln::cuda::softmax {

using namespace detail;

namespace {

template <class T>
__device__ inline T normalised(T v, const MaxSum<T>& a, T log_s, bool log) {
  return log ? v - a.m - log_s : exp_of(v - a.m) / a.s;
}

// Version 1: a thread per row, three passes.
template <class T>
__global__ void naive_kernel(const T* x, T* out, int64_t rows, int64_t n, bool log) {
  KILN_GRID_STRIDE(r, rows) {
    const T* row = x + r * n;
    T* o = out + r * n;
    T m = -INFINITY;
    for (int64_t k = 0; k < n; ++k)
      if (row[k] > m || row[k] != row[k]) m = row[k];
    T s = 0;
    for (int64_t k = 0; k < n; ++k) s += exp_of(row[k] - m);
    MaxSum<T> a = finish(MaxSum<T>{m, s});
    T log_s = log_of(a.s);
    for (int64_t k = 0; k < n; ++k) o[k] = normalised(row[k], a, log_s, log);
  }
}

// Version 2: a warp per row; blockDim.x is a multiple of 32 and every lane of a warp runs the
// same rows, so the full-mask shuffles are safe.
template <class T>
__global__ void warp_per_row_kernel(const T* x, T* out, int64_t rows, int64_t n, bool log) {
  const int lane = threadIdx.x % 32;
  const int64_t warps_per_block = blockDim.x / 32;
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / 32; r < rows; r += gridDim.x * warps_per_block) {
    const T* row = x + r * n;
    T* o = out + r * n;
    const MaxSum<T> a = warp_row_state(row, n);
    T log_s = log_of(a.s);
    for (int64_t k = lane; k < n; k += 32) o[k] = normalised(row[k], a, log_s, log);
  }
}

// Version 3: a block per row, in packs of V elements (V = 1, or 16 bytes' worth when the rows
// are aligned). The row loop is uniform across the block, so block_combine's barriers are too.
template <class T, int V>
__global__ void block_per_row_kernel(const T* x, T* out, int64_t rows, int64_t n, bool log) {
  __shared__ MaxSum<T> scratch[kBlock / 32];
  const int64_t packs = n / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto* row = reinterpret_cast<const Pack<T, V>*>(x + r * n);
    auto* o = reinterpret_cast<Pack<T, V>*>(out + r * n);
    const MaxSum<T> a = block_row_state(row, packs, scratch);
    T log_s = log_of(a.s);
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      Pack<T, V> p = row[j];
#pragma unroll
      for (int e = 0; e < V; ++e) p.v[e] = normalised(p.v[e], a, log_s, log);
      o[j] = p;
    }
  }
}

// Version 5: rows of n <= 4G elements, G lanes per row, 32 / G rows per warp; each lane keeps
// its (at most 4) elements in registers. The loop runs per warp, so every lane reaches the
// shuffles; lanes past the last row carry an empty state.
template <class T, int G>
__global__ void rows_per_warp_kernel(const T* x, T* out, int64_t rows, int64_t n, bool log) {
  for_each_group_row<G>(rows, [&](const GroupRow& at) {
    T v[kGroupValues];
    const MaxSum<T> a = group_row_state<G>(x, n, at, v);
    if (!at.live) return;
    const T log_s = log_of(a.s);
#pragma unroll
    for (int k = 0; k < kGroupValues; ++k) {
      const int64_t c = at.sub + k * G;
      if (c < n) out[at.r * n + c] = normalised(v[k], a, log_s, log);
    }
  });
}

// Version 6: a block per row, the row held in registers: P packs of V elements per thread, read
// once; the thread's max m, then its sum of exps, then one block combine (M, S), then the write.
template <class T, int V, int P>
__global__ void __launch_bounds__(1024) row_in_registers_kernel(const T* x, T* out, int64_t rows, int64_t n, bool log) {
  __shared__ MaxSum<T> scratch[32];
  const int64_t packs = n / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto* row = reinterpret_cast<const Pack<T, V>*>(x + r * n);
    auto* o = reinterpret_cast<Pack<T, V>*>(out + r * n);
    // softmax keeps e = exp(v - m) in place of v: the write is then e * exp(m - M) / S, one
    // multiply instead of a second exp and a division (log_softmax needs v itself)
    Pack<T, V> p[P];
    const MaxSum<T> own = load_row_in_registers(row, packs, p, !log);
    // every thread has read its part of the row before block_combine's barriers: out may alias x
    const MaxSum<T> a = finish(block_combine(own, scratch));
    const T log_s = log_of(a.s);
    // exp(m - M) / S; a thread whose elements are all -inf (m = -inf) under a finite M scales its
    // ones to 0. A NaN or infinite M has made S NaN, so every output is NaN.
    const T scale = exp_of(own.m - a.m) / a.s;
    store_row_in_registers(o, packs, p, [&](T v, int64_t) { return log ? v - a.m - log_s : v * scale; });
  }
}

// Version 7: G warps per row, the row in registers: each lane holds P packs of V elements
// (pack j of the row at lane j % (32 G), slot j / (32 G)). A block of kThreads threads takes
// kThreads / (32 G) neighbouring rows. The row's numbers are those of version 6: the thread's
// max, its exps kept, one combine, one multiply per element.
template <class T, int V, int P, int G>
__global__ void __launch_bounds__(kThreads) warps_per_row_kernel(const T* x, T* out, int64_t rows, int64_t n, bool log) {
  constexpr int kWarps = kThreads / 32, kRows = kWarps / G, kGroup = 32 * G;
  // one state per warp; a group's warps meet here when G > 1 (two copies: one barrier a row)
  __shared__ MaxSum<T> scratch[2][kWarps];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / G, t = threadIdx.x % kGroup;
  const int64_t packs = n / V;
  int parity = 0;
  // the loop's trip count is the same for every thread of the block, so its barrier is safe;
  // a group past the last row carries an empty state and writes nothing
  for (int64_t base = int64_t{blockIdx.x} * kRows; base < rows; base += int64_t{gridDim.x} * kRows, parity ^= 1) {
    const int64_t r = base + group;
    const bool live = r < rows;
    const auto* row = reinterpret_cast<const Pack<T, V>*>(x + (live ? r : 0) * n);
    auto* o = reinterpret_cast<Pack<T, V>*>(out + (live ? r : 0) * n);
    auto has = [&](int i) { return live && t + i * kGroup < packs; };
    // every load is issued before the first use
    Pack<T, V> p[P];
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (has(i)) p[i] = row[t + i * kGroup];
    T m = -INFINITY;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (has(i))
#pragma unroll
        for (int e = 0; e < V; ++e) m = max_of(m, p[i].v[e]);
    T sum = 0;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (has(i))
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const T ex = shifted_exp(p[i].v[e], m);
          sum += ex;
          if (!log) p[i].v[e] = ex;
        }
    MaxSum<T> a = warp_combine(MaxSum<T>{m, sum});
    if constexpr (G > 1) {
      // scratch[parity] is written again two rows on, after the next row's barrier, which no
      // thread passes before every thread has read it here
      if (lane == 0) scratch[parity][warp] = a;
      __syncthreads();
      a = scratch[parity][group * G];
#pragma unroll
      for (int w = 1; w < G; ++w) a = combine(a, scratch[parity][group * G + w]);
    }
    a = finish(a);
    const T log_s = log_of(a.s);
    const T scale = exp_of(m - a.m) / a.s;  // as in version 6
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (has(i)) {
#pragma unroll
        for (int e = 0; e < V; ++e) p[i].v[e] = log ? p[i].v[e] - a.m - log_s : p[i].v[e] * scale;
        o[t + i * kGroup] = p[i];
      }
  }
}

// ---- the middle axis in column tiles (versions 8 and 9) ----
// A block of (L, R) threads owns a tile of L packs of V neighbouring columns of one outer index:
// thread (tx, ty) the pack at column c = tile start + tx * V, and rows ty, ty + R, ... of it.
// threadIdx.x + L * threadIdx.y numbers the threads, so a warp holds 32 / L rows of the tile
// (L * 16 contiguous bytes each), and the lanes of one column are L apart in the warp.
constexpr int kColumnThreads = 512;

// The states of a tile's R row threads combined, per column: shuffles within each warp, then the
// warps' states through `scratch` (in dynamic shared memory: warps * L * V states, then L * V
// more for the results). The warps' states of one column are combined once, by one thread, in a
// fixed order, and every thread of the column reads that result, so all hold the same bits. (Each
// thread combining them itself, as this did first, cost every thread warps * V combines, each an
// exp: as many instructions as the tile's own exps.) Three barriers: before scratch is written
// (the last tile's readers are done), before the warps' states are read, before the results are.
template <class T, int V>
__device__ inline void column_combine(MaxSum<T> (&a)[V], MaxSum<T>* scratch) {
  const int lanes = blockDim.x, tx = threadIdx.x, threads = lanes * blockDim.y;
  const int linear = tx + lanes * threadIdx.y, lane = linear % 32, warp = linear / 32;
  const int warps = threads / 32, columns = lanes * V;  // column c = tx * V + e
  for (int offset = lanes; offset < 32; offset *= 2)
#pragma unroll
    for (int e = 0; e < V; ++e) {
      MaxSum<T> b;
      b.m = __shfl_xor_sync(0xffffffffu, a[e].m, offset);
      b.s = __shfl_xor_sync(0xffffffffu, a[e].s, offset);
      a[e] = combine(a[e], b);
    }
  __syncthreads();
  if (lane < lanes)  // the warp's first row of threads: lane == tx
#pragma unroll
    for (int e = 0; e < V; ++e) scratch[warp * columns + tx * V + e] = a[e];
  __syncthreads();
  MaxSum<T>* total = scratch + warps * columns;
  for (int c = linear; c < columns; c += threads) {
    MaxSum<T> t = scratch[c];
    for (int w = 1; w < warps; ++w) t = combine(t, scratch[w * columns + c]);
    total[c] = finish(t);
  }
  __syncthreads();
#pragma unroll
  for (int e = 0; e < V; ++e) a[e] = total[tx * V + e];
}

// The bytes of column_combine's scratch for a block of `block` threads, in packs of v.
template <class T>
size_t column_scratch_bytes(const dim3& block, int v) {
  return (block.x * block.y / 32 + 1) * block.x * v * sizeof(MaxSum<T>);
}

// Where a tile-walking block's thread is: its column's first element (of row 0) in x, and
// whether the column exists (inner % V == 0: a pack is all in or all out).
struct ColumnAt {
  int64_t offset;
  bool live;
};
template <int V>
__device__ inline ColumnAt column_at(int64_t tile, int64_t n, int64_t inner) {
  const int64_t width = int64_t{blockDim.x} * V, tiles_per_outer = (inner + width - 1) / width;
  const int64_t o = tile / tiles_per_outer, c = (tile % tiles_per_outer) * width + threadIdx.x * V;
  return {c < inner ? o * n * inner + c : 0, c < inner};
}


// Version 8: column tiles in two passes. The first keeps an online state per column, U packs
// in flight per thread: each step takes the max of its U loads, rescales the running sum once and
// adds U exps (cross_entropy.cu's unrolled forward, without add()'s branch per element). fmax
// drops a NaN, but its exp makes the sum NaN, and finish() makes the sum NaN where the max is
// infinite, so such a column is NaN, as on the CPU. The second pass reads the tile again and
// writes it. Dynamic shared memory: the combine's scratch.
constexpr int kColumnUnroll = 4;

constexpr int kColumnPackThreads = 256, kColumnPackLanes = 8;  // 128 bytes of a row per warp row

template <class T, int V>
__global__ void __launch_bounds__(kColumnPackThreads)
    column_packs_kernel(const T* x, T* out, int64_t tiles, int64_t n, int64_t inner, bool log) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  auto* scratch = reinterpret_cast<MaxSum<T>*>(shared_bytes);
  constexpr int U = kColumnUnroll;
  const int64_t rows = blockDim.y, ty = threadIdx.y;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const ColumnAt at = column_at<V>(tile, n, inner);
    // The packs of rows k0, k0 + rows, ... (U of them, those below n) of the tile, all loads issued
    // before any is used.
    auto load = [&](int64_t k0, Pack<T, V> (&p)[U]) {
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (k0 + u * rows < n) p[u] = *reinterpret_cast<const Pack<T, V>*>(x + at.offset + (k0 + u * rows) * inner);
    };
    T m[V], sum[V];
#pragma unroll
    for (int e = 0; e < V; ++e) m[e] = -INFINITY, sum[e] = 0;
    if (at.live)
      for (int64_t k0 = ty; k0 < n; k0 += rows * U) {
        Pack<T, V> p[U];
        load(k0, p);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          T step = m[e];
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (k0 + u * rows < n) step = max_of(step, p[u].v[e]);
          sum[e] *= shifted_exp(m[e], step);
          m[e] = step;
#pragma unroll
          for (int u = 0; u < U; ++u)
            if (k0 + u * rows < n) sum[e] += shifted_exp(p[u].v[e], step);
        }
      }
    MaxSum<T> a[V];
#pragma unroll
    for (int e = 0; e < V; ++e) a[e] = MaxSum<T>{m[e], sum[e]};
    column_combine<T, V>(a, scratch);
    T log_s[V];
#pragma unroll
    for (int e = 0; e < V; ++e) log_s[e] = log_of(a[e].s);
    if (at.live)
      for (int64_t k0 = ty; k0 < n; k0 += rows * U) {
        Pack<T, V> p[U];
        load(k0, p);
#pragma unroll
        for (int u = 0; u < U; ++u)
          if (k0 + u * rows < n) {
#pragma unroll
            for (int e = 0; e < V; ++e) p[u].v[e] = normalised(p[u].v[e], a[e], log_s[e], log);
            *reinterpret_cast<Pack<T, V>*>(out + at.offset + (k0 + u * rows) * inner) = p[u];
          }
      }
  }
}

// Version 9: the column tile held on chip, so x is read once: P packs a thread in registers
// (rows ty + i R, i < P), and q more in shared memory (rows ty + (P + i) R), copied there by
// cp.async, which holds no register while in flight. Then version 6's arithmetic per column: the
// thread's max, its exps kept in place, the combine, one multiply per element. Each thread reads
// back only the shared slots it filled, so no barrier guards them. At 64 registers a thread (512
// threads, P = 8 f32, 4 f64) two blocks share an SM: one tile's loads run while the other
// combines and writes. Dynamic shared memory: the q slots of every thread, then the scratch.
template <class T>
constexpr int kColumnRegisterPacks = sizeof(T) == 8 ? 4 : 8;

template <class T, int V, int P>
__global__ void __launch_bounds__(kColumnThreads, 2)
    column_tiles_kernel(const T* x, T* out, int64_t tiles, int64_t n, int64_t inner, int q, bool log) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  const int threads = blockDim.x * blockDim.y, id = threadIdx.x + blockDim.x * threadIdx.y;
  auto* stash = reinterpret_cast<Pack<T, V>*>(shared_bytes) + id;  // slot i at stash[i * threads]
  auto* scratch = reinterpret_cast<MaxSum<T>*>(reinterpret_cast<Pack<T, V>*>(shared_bytes) + int64_t{q} * threads);
  const int64_t rows = blockDim.y, ty = threadIdx.y;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const ColumnAt at = column_at<V>(tile, n, inner);
    // the slots that hold a row of the tile: rows ty, ty + R, ... below n
    const int held = at.live && ty < n ? static_cast<int>((n - 1 - ty) / rows + 1) : 0;
    auto has = [&](int i) { return i < held; };
    // slot i's pack: one base and one stride, so that no address is kept per slot
    const int64_t first = at.offset + ty * inner, stride = rows * inner;
    auto pack = [&](int i) { return reinterpret_cast<const Pack<T, V>*>(x + first + i * stride); };
    for (int i = 0; i < q; ++i)
      if (has(P + i)) __pipeline_memcpy_async(&stash[i * threads], pack(P + i), sizeof(Pack<T, V>));
    __pipeline_commit();
    Pack<T, V> p[P];
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (has(i)) p[i] = *pack(i);
    T m[V];
#pragma unroll
    for (int e = 0; e < V; ++e) m[e] = -INFINITY;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (has(i))
#pragma unroll
        for (int e = 0; e < V; ++e) m[e] = max_of(m[e], p[i].v[e]);
    __pipeline_wait_prior(0);
    for (int i = 0; i < q; ++i)
      if (has(P + i)) {
        const Pack<T, V> w = stash[i * threads];
#pragma unroll
        for (int e = 0; e < V; ++e) m[e] = max_of(m[e], w.v[e]);
      }
    // softmax keeps exp(v - m) in place of v (log_softmax needs v itself), as version 6
    MaxSum<T> a[V];
#pragma unroll
    for (int e = 0; e < V; ++e) a[e] = MaxSum<T>{m[e], T(0)};
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (has(i))
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const T ex = shifted_exp(p[i].v[e], m[e]);
          a[e].s += ex;
          if (!log) p[i].v[e] = ex;
        }
    for (int i = 0; i < q; ++i)
      if (has(P + i)) {
        Pack<T, V> w = stash[i * threads];
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const T ex = shifted_exp(w.v[e], m[e]);
          a[e].s += ex;
          if (!log) w.v[e] = ex;
        }
        stash[i * threads] = w;
      }
    // every thread has read its part of the tile before column_combine's barriers: out may alias x
    column_combine<T, V>(a, scratch);
    // softmax: e * c1 with c1 = exp(m - M) / S, as version 6; log_softmax: v - c1 - c2 with c1 = M,
    // c2 = log S (subtracting M first keeps the digits of a result near 0 beside logits of 1e3)
    T c1[V], c2[V];
#pragma unroll
    for (int e = 0; e < V; ++e) {
      c1[e] = log ? a[e].m : exp_of(m[e] - a[e].m) / a[e].s;
      c2[e] = log ? log_of(a[e].s) : T(0);
    }
    auto write = [&](int i, Pack<T, V> w) {
#pragma unroll
      for (int e = 0; e < V; ++e) w.v[e] = log ? w.v[e] - c1[e] - c2[e] : w.v[e] * c1[e];
      *reinterpret_cast<Pack<T, V>*>(out + first + i * stride) = w;
    };
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (has(i)) write(i, p[i]);
    for (int i = 0; i < q; ++i)
      if (has(P + i)) write(P + i, stash[i * threads]);
  }
}

// Version 4: a thread per (outer, inner) column of [outer, n, inner].
template <class T>
__global__ void columns_kernel(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool log) {
  KILN_GRID_STRIDE(e, outer * inner) {
    const int64_t o = e / inner, i = e % inner;
    const T* col = x + o * n * inner + i;  // x[o, :, i], stride inner
    T* oc = out + o * n * inner + i;
    MaxSum<T> a = none<T>();
    for (int64_t k = 0; k < n; ++k) add(a, col[k * inner]);
    a = finish(a);
    T log_s = log_of(a.s);
    for (int64_t k = 0; k < n; ++k) oc[k * inner] = normalised(col[k * inner], a, log_s, log);
  }
}

const char* op_name(bool log) { return log ? "log_softmax" : "softmax"; }

// The shape of a column-tile block of `threads` threads: `lanes` across inner (a power of two up
// to 32, fewer where inner has fewer packs) and threads / lanes along n, each taking per_thread
// rows at a time. Short columns trade row threads for lanes (a wider tile) while the row threads
// still cover n, then drop the row threads they cannot use, keeping whole warps.
dim3 column_block(int64_t n, int64_t inner, int v, int lanes, int per_thread, int threads) {
  int max_lanes = 1;
  while (max_lanes < 32 && int64_t{max_lanes} * v < inner) max_lanes *= 2;
  int l = 1;
  while (l < std::min(lanes, max_lanes)) l *= 2;
  int r = threads / l;
  while (l < max_lanes && int64_t{r / 2} * per_thread >= n) l *= 2, r /= 2;
  while (l * r >= 64 && int64_t{r / 2} * per_thread >= n) r /= 2;
  return dim3(static_cast<unsigned>(l), static_cast<unsigned>(r));
}

int64_t column_tile_count(int64_t outer, int64_t inner, const dim3& block, int v) {
  const int64_t width = int64_t{block.x} * v;
  return outer * ((inner + width - 1) / width);
}

}  // namespace

template <class T>
void naive(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  naive_kernel<T><<<blocks_for(rows), kThreads, 0, stream>>>(x, out, rows, n, log);
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void warp_per_row(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  constexpr int warps = kThreads / 32;
  warp_per_row_kernel<T><<<row_blocks((rows + warps - 1) / warps), kThreads, 0, stream>>>(x, out, rows, n, log);
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void block_per_row(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  constexpr int v = 16 / sizeof(T);
  dispatch<1, v>(packable<T>(n, x, out) ? v : 1, [&](auto pack) {
    block_per_row_kernel<T, pack()><<<row_blocks(rows), kBlock, 0, stream>>>(x, out, rows, n, log);
  });
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void rows_per_warp(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  if (n > kSubWarpRowMax) return warp_per_row(x, out, rows, n, log, stream);
  dispatch<1, 2, 4, 8>(lane_group(n), [&](auto group) {
    constexpr int64_t rows_per_block = kThreads / 32 * (32 / group());
    rows_per_warp_kernel<T, group()><<<row_blocks((rows + rows_per_block - 1) / rows_per_block), kThreads, 0,
                                       stream>>>(x, out, rows, n, log);
  });
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void row_in_registers(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  constexpr int v = 16 / sizeof(T);
  const bool packed = packable<T>(n, x, out);
  const RegisterShape shape = register_shape(packed ? n / v : n, sizeof(T) == 8 ? 4 : 8);
  if (shape.per_thread == 0) return block_per_row(x, out, rows, n, log, stream);
  dispatch<1, v>(packed ? v : 1, [&](auto pack) {
    dispatch<1, 2, 4, 8>(shape.per_thread, [&](auto per_thread) {
      row_in_registers_kernel<T, pack(), per_thread()><<<row_blocks(rows), shape.threads, 0, stream>>>(x, out, rows, n,
                                                                                                      log);
    });
  });
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void warps_per_row(const T* x, T* out, int64_t rows, int64_t n, bool log, int warps, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  constexpr int v = 16 / sizeof(T);
  const bool packed = packable<T>(n, x, out);
  const int64_t packs = packed ? n / v : n;
  // 1, 2 or 4 warps, more where 8 packs a lane do not hold the row; then the fewest packs a lane
  int g = warps <= 1 ? 1 : warps <= 2 ? 2 : 4;
  while (g < 4 && packs > int64_t{32} * g * 8) g *= 2;
  if (packs > int64_t{32} * g * 8) return row_in_registers(x, out, rows, n, log, stream);
  int p = 1;
  while (int64_t{32} * g * p < packs) p *= 2;
  dispatch<1, v>(packed ? v : 1, [&](auto pack) {
    dispatch<1, 2, 4>(g, [&](auto group) {
      dispatch<1, 2, 4, 8>(p, [&](auto per_lane) {
        constexpr int vv = decltype(pack)::value, gg = decltype(group)::value, pp = decltype(per_lane)::value;
        constexpr int64_t rows_per_block = kThreads / 32 / gg;
        warps_per_row_kernel<T, vv, pp, gg><<<row_blocks((rows + rows_per_block - 1) / rows_per_block), kThreads, 0,
                                              stream>>>(x, out, rows, n, log);
      });
    });
  });
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void column_packs(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool log, cudaStream_t stream) {
  if (outer * inner == 0 || n == 0) return;
  constexpr int v = 16 / sizeof(T);
  const int vv = packable<T>(inner, x, out) ? v : 1;
  const dim3 block = column_block(n, inner, vv, kColumnPackLanes, kColumnUnroll, kColumnPackThreads);
  const int64_t tiles = column_tile_count(outer, inner, block, vv);
  const size_t bytes = column_scratch_bytes<T>(block, vv);
  dispatch<1, v>(vv, [&](auto pack) {
    column_packs_kernel<T, decltype(pack)::value><<<row_blocks(tiles), block, bytes, stream>>>(x, out, tiles, n, inner, log);
  });
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void column_tiles(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool log, int lanes, cudaStream_t stream) {
  if (outer * inner == 0 || n == 0) return;
  constexpr int v = 16 / sizeof(T), P = kColumnRegisterPacks<T>;
  const int vv = packable<T>(inner, x, out) ? v : 1;
  const dim3 block = column_block(n, inner, vv, lanes, P, kColumnThreads);
  const int threads = static_cast<int>(block.x * block.y);
  const int64_t q = std::max<int64_t>(0, (n + block.y - 1) / block.y - P);  // shared slots a thread
  const size_t bytes = static_cast<size_t>(q) * threads * vv * sizeof(T) + column_scratch_bytes<T>(block, vv);
  const int limit = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  if (bytes > static_cast<size_t>(limit)) return column_packs(x, out, outer, n, inner, log, stream);
  const int64_t tiles = column_tile_count(outer, inner, block, vv);
  dispatch<1, v>(vv, [&](auto pack) {
    auto kernel = column_tiles_kernel<T, decltype(pack)::value, P>;
    // above 48 KiB a block's dynamic shared memory must be asked for
    allow_dynamic_smem(kernel, bytes);
    kernel<<<row_blocks(tiles), block, bytes, stream>>>(x, out, tiles, n, inner, static_cast<int>(q), log);
  });
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void columns(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool log, cudaStream_t stream) {
  if (outer * inner == 0 || n == 0) return;
  columns_kernel<T><<<blocks_for(outer * inner), kThreads, 0, stream>>>(x, out, outer, n, inner, log);
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void best(const T* x, T* out, int64_t outer, int64_t n, int64_t inner, bool log, cudaStream_t stream) {
  if (outer * n * inner == 0) return;
  if (inner > 1) column_tiles(x, out, outer, n, inner, log, kColumnLanes, stream);  // version 8 where the tile does not fit
  else if (n <= kSubWarpRowMax) rows_per_warp(x, out, outer, n, log, stream);
  else if (n <= kWarpsRowMax) warps_per_row(x, out, outer, n, log, kRowWarps, stream);
  else row_in_registers(x, out, outer, n, log, stream);  // version 3 where the row does not fit
}

#define KILN_SOFTMAX_INSTANTIATE(T)                                                                        \
  template void naive<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                              \
  template void warp_per_row<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                       \
  template void block_per_row<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                      \
  template void rows_per_warp<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                      \
  template void row_in_registers<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                   \
  template void columns<T>(const T*, T*, int64_t, int64_t, int64_t, bool, cudaStream_t);                   \
  template void warps_per_row<T>(const T*, T*, int64_t, int64_t, bool, int, cudaStream_t);                 \
  template void column_packs<T>(const T*, T*, int64_t, int64_t, int64_t, bool, cudaStream_t);              \
  template void column_tiles<T>(const T*, T*, int64_t, int64_t, int64_t, bool, int, cudaStream_t);         \
  template void best<T>(const T*, T*, int64_t, int64_t, int64_t, bool, cudaStream_t);
KILN_SOFTMAX_INSTANTIATE(float)
KILN_SOFTMAX_INSTANTIATE(double)
#undef KILN_SOFTMAX_INSTANTIATE

}  // namespace kiln::cuda::softmax

namespace kiln::cuda {

void CudaBackend::softmax(const TensorRef& x, const TensorRef& out, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  KILN_CHECK(x.shape.size() == 3, ShapeError, "cuda ", op, ": x must be [outer, n, inner], got ", x.shape);
  KILN_CHECK(out.dtype == x.dtype, DTypeError, "cuda ", op, ": out is ", out.dtype, ", x is ", x.dtype);
  visit_floating(x.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    cuda::softmax::best<T>(x.data<T>(), out.data<T>(), x.shape[0], x.shape[1], x.shape[2], log, stream_);
  });
}

}  // namespace kiln::cuda
