// Reductions on the GPU over the middle axis: x [outer, n, inner] (contiguous) -> out [outer, inner].
// f32, f64, bf16 and i32. sum/mean accumulate in double (int64 for i32), as the CPU does (bf16
// values converted exactly, the result rounded once); max/min propagate NaN;
// argmax/argmin return the first index of the extreme (a NaN counts as the extreme, the first
// NaN wins), as the CPU does.
//
// Bench: `kernel-bench --only reduce` (GB/s against the copy bandwidth).
// reduce.cuh exposes versions 3 and 4 on raw pointers for the bench and the tests.
//
// Five versions, picked by the op and the layout:
//   version 1 (inner > 1, short or narrow): one thread per output. Neighbouring threads own
//     neighbouring outputs, so at every step k of the loop a warp reads 32 neighbouring elements:
//     coalesced. But there are only outer * inner threads: a sum over the middle axis of
//     [64, 4096, 256] runs 16384 threads, an eighth of what an H100 holds, each walking 4096
//     elements: too few to keep the memory busy (history: NOTES.md).
//   version 3 (inner >= 16 and n >= 16): a block of 32 x 8 threads owns 32 neighbouring outputs;
//     its 8 rows of threads split the reduced axis (row r takes k = r, r + 8, ...), so each warp
//     still reads 32 neighbouring elements and there are 8 times more threads. The 8 partial
//     results are combined in shared memory in a fixed order: deterministic. On [64, 4096, 256] it
//     moves 2128 GB/s [fig cuda.reduce.v3.64x4096x256.gbs],
//     71% [fig cuda.reduce.v3.64x4096x256.pct-copy] of the copy bandwidth (H100 80GB HBM3,
//     kernel-bench, docs/runs/2026-11-26-h100): each thread has one 4-byte load in flight, and only
//     512 blocks of 256 threads run.
//   version 4 (sum and mean, inner > 1 and n >= 16): version 3's tile, with each thread owning a
//     16-byte pack of neighbouring outputs (4 f32, 2 f64, 4 i32) and issuing kPackUnroll loads of
//     it before adding any: a warp reads 512 contiguous bytes per row, and every thread keeps
//     64 bytes in flight instead of 4. When outer * inner gives too few tiles to fill the GPU,
//     the reduced axis is also cut into S chunks (blockIdx.z), each block writes its partial
//     sums (double) to a workspace, and a second kernel adds the S partials of each output in
//     order. S comes from the shape alone (column_packs_splits), so the order of every addition
//     depends only on the shape and on whether the rows are 16-byte aligned: deterministic, and
//     the same bits on any GPU. Rows that are not (inner not a multiple of the pack, or an offset
//     view) take 1-element packs. max, min, argmax and argmin stay on version 3.
//     On [64, 4096, 256] (S = 4) it moves 2724 GB/s [fig cuda.reduce.v4.64x4096x256.gbs],
//     91% [fig cuda.reduce.v4.64x4096x256.pct-copy] of the copy bandwidth, and the production path
//     2694 GB/s [fig cuda.reduce.production.64x4096x256.gbs]
//     (90% [fig cuda.reduce.production.64x4096x256.pct-copy]), against version 3's
//     71% [fig cuda.reduce.v3.64x4096x256.pct-copy] in the same run. Its tiles are 32 packs wide:
//     an inner size just over a multiple of that (160 f32: tiles of 128 and 32 columns) leaves
//     lanes idle, and version 3's 32-column tiles can then be faster.
//   version 2 (inner == 1, a row per output, e.g. a sum over the last axis or over everything):
//     one block of 256 threads per output. Each thread strides through the row (coalesced across
//     the block), then the block combines the 256 partial results in shared memory. The order of
//     the additions depends only on n and the block size, so results are deterministic.
//   version 5 (inner == 1, n <= 2048): version 2 with one warp per row instead of a block, the
//     lanes combined by shuffles: a conv layer's bias gradient sums rows of H*W (576 at MNIST's
//     conv2), where version 2's block spent more on its eight barrier rounds than on the row
//     (history: NOTES.md).
//   version 6 (inner == 1, rows longer than version 5 takes and too few of them to fill the GPU: a
//     full reduction, a mean loss): version 2 with each row cut into chunks (row_chunk, from the
//     shape alone), one block per chunk writing its partial result to a workspace, and a block per
//     row combining its partials in a fixed order: deterministic. The sum of 16M floats moves
//     1775 GB/s [fig cuda.reduce.v6.full.gbs], 59% [fig cuda.reduce.v6.full.pct-copy] of the copy
//     bandwidth (H100 80GB HBM3, kernel-bench, docs/runs/2026-11-26-h100-ddp-step). Before it,
//     version 2 gave a whole MSE loss one block, the largest kernel of dist-bench ddp's step
//     (history: NOTES.md).
//
// A sum over several axes that are not adjacent (a conv layer's bias gradient: N, H and W of NCHW)
// runs as two of these reductions (autograd/ops/reduce.cpp), the leading run of axes first where it
// spans 16 or more elements: version 4 then reads whole rows of the rest in 16-byte packs, where
// taking H W first reads N*C short rows of H W with version 5, a warp a row, one element a lane a
// load. At batch 512 the MNIST CNN's two bias gradients took
// 16.8 [fig cuda.reduce.bias.conv1.b512.bf16.n-first.us] and
// 23.6 µs [fig cuda.reduce.bias.conv2.b512.bf16.n-first.us] in bf16 with N first, against
// 29.2 [fig cuda.reduce.bias.conv1.b512.bf16.hw-first.us] and
// 49.6 [fig cuda.reduce.bias.conv2.b512.bf16.hw-first.us] with H W first (f32:
// 26.3 [fig cuda.reduce.bias.conv1.b512.f32.n-first.us] and
// 39.7 [fig cuda.reduce.bias.conv2.b512.f32.n-first.us] against
// 31.7 [fig cuda.reduce.bias.conv1.b512.f32.hw-first.us] and
// 48.7 [fig cuda.reduce.bias.conv2.b512.f32.hw-first.us]); at batch 64 the orders were within a
// microsecond of each other (conv1 bf16 9.1 [fig cuda.reduce.bias.conv1.b64.bf16.n-first.us]
// against 9.3 [fig cuda.reduce.bias.conv1.b64.bf16.hw-first.us], conv2
// 9.4 [fig cuda.reduce.bias.conv2.b64.bf16.n-first.us] against
// 10.6 [fig cuda.reduce.bias.conv2.b64.bf16.hw-first.us]; kernel-bench --only reduce, H100 80GB
// HBM3, docs/runs/2026-11-27-h100-conv1-rows, the reductions as they are now). Between the stages a bf16 sum keeps f32: the first
// stage writes f32 from bf16 and the second bf16 from f32, rounded once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/kernels/cuda/argmax.cuh"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/reduce.cuh"

namespace kiln::cuda {

namespace {

// count += the rows whose argmax is their target (Backend::count_correct), a classifier's correct
// predictions, in one launch where argmax, eq, sum and an add took four: a warp a row, each lane
// the best of its elements, the lanes' bests combined by beats() in five shuffles (a total order,
// so every lane ends with argmax's answer), then one shared-memory add a hit and one atomicAdd a
// block. Integer adds: the count is exact in any order.
constexpr int kCountThreads = 256;

template <class T>
__global__ void count_correct_kernel(const T* x, const int32_t* targets, int32_t* count, int64_t rows,
                                     int64_t classes) {
  __shared__ int hits;
  if (threadIdx.x == 0) hits = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32; r < rows; r += warps) {
    const T* row = x + r * classes;
    compute_t<T> best{};
    int64_t best_i = -1;
    for (int64_t c = lane; c < classes; c += 32) {
      const compute_t<T> v = cast<compute_t<T>>(row[c]);
      if (best_i < 0 || beats(v, c, best, best_i, true)) best = v, best_i = c;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      const compute_t<T> v = __shfl_xor_sync(0xffffffffu, best, offset);
      const int64_t i = __shfl_xor_sync(0xffffffffu, best_i, offset);
      if (i >= 0 && (best_i < 0 || beats(v, i, best, best_i, true))) best = v, best_i = i;
    }
    if (lane == 0 && best_i == targets[r]) atomicAdd(&hits, 1);
  }
  __syncthreads();
  if (threadIdx.x == 0 && hits > 0) atomicAdd(count, hits);
}

// What sums accumulate in; values and extremes are compared in compute_t<T> (float for bf16).
template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;

// Out is T, or for a sum or mean f32 from bf16 or bf16 from f32 (a stage of a reduction over
// several axes, whose intermediate stays f32: CudaBackend::reduce).
template <class T, class Out>
__device__ void store(ReduceOp op, Out* out, int32_t* out_index, int64_t at, Acc<T> sum, int64_t n, compute_t<T> best,
                      int64_t best_i) {
  switch (op) {
    case ReduceOp::sum: out[at] = cast<Out>(sum); break;
    case ReduceOp::mean: out[at] = cast<Out>(static_cast<double>(sum) / static_cast<double>(n)); break;
    case ReduceOp::max:
    case ReduceOp::min: out[at] = cast<Out>(best); break;
    case ReduceOp::argmax:
    case ReduceOp::argmin: out_index[at] = static_cast<int32_t>(best_i); break;
  }
}

// Version 1: one thread per output.
template <class T, class Out = T>
__global__ void reduce_columns(ReduceOp op, const T* x, Out* out, int32_t* out_index, int64_t outer, int64_t n,
                               int64_t inner) {
  bool largest = op == ReduceOp::max || op == ReduceOp::argmax;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < outer * inner; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t o = e / inner, i = e % inner;
    const T* p = x + o * n * inner + i;
    Acc<T> sum = 0;
    compute_t<T> best = cast<compute_t<T>>(p[0]);
    int64_t best_i = 0;
    for (int64_t k = 0; k < n; ++k) {
      const compute_t<T> v = cast<compute_t<T>>(p[k * inner]);
      sum += static_cast<Acc<T>>(v);
      if (k > 0 && beats(v, k, best, best_i, largest)) best = v, best_i = k;
    }
    store<T>(op, out, out_index, e, sum, n, best, best_i);
  }
}

// Version 3: a block of kColumns x kSplit threads per kColumns neighbouring outputs.
constexpr int kColumns = 32, kSplit = 8;

template <class T, class Out = T>
__global__ void reduce_column_tiles(ReduceOp op, const T* x, Out* out, int32_t* out_index, int64_t outer, int64_t n,
                                    int64_t inner) {
  __shared__ Acc<T> sums[kSplit][kColumns];
  __shared__ compute_t<T> bests[kSplit][kColumns];
  __shared__ int64_t best_is[kSplit][kColumns];
  bool largest = op == ReduceOp::max || op == ReduceOp::argmax;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i = blockIdx.x * int64_t{kColumns} + tx;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    Acc<T> sum = 0;
    compute_t<T> best{};
    int64_t best_i = -1;
    if (i < inner) {
      const T* p = x + o * n * inner + i;
      for (int64_t k = ty; k < n; k += kSplit) {
        const compute_t<T> v = cast<compute_t<T>>(p[k * inner]);
        sum += static_cast<Acc<T>>(v);
        if (best_i < 0 || beats(v, k, best, best_i, largest)) best = v, best_i = k;
      }
    }
    sums[ty][tx] = sum, bests[ty][tx] = best, best_is[ty][tx] = best_i;
    __syncthreads();
    if (ty == 0 && i < inner) {
      // Rows in order 1..7: the sum's order depends only on n, so results are deterministic.
      for (int r = 1; r < kSplit; ++r) {
        sum += sums[r][tx];
        if (best_is[r][tx] >= 0 && beats(bests[r][tx], best_is[r][tx], best, best_i, largest))
          best = bests[r][tx], best_i = best_is[r][tx];
      }
      store<T>(op, out, out_index, o * inner + i, sum, n, best, best_i);
    }
    __syncthreads();  // before the next o overwrites the partials
  }
}

// Version 4: blocks of kPackThreads threads, blockDim (L, kPackThreads / L): thread (tx, ty) owns
// the V outputs from (blockIdx.x * L + tx) * V and the rows k = k0 + ty, k0 + ty + R, ... of chunk
// blockIdx.z of the reduced axis.
constexpr int kPackThreads = 256, kPackUnroll = 4;
// Fewer tiles than kPackFillBlocks cut the reduced axis into S = kPackFillBlocks / tiles chunks
// (rounded down: up to kPackFillBlocks blocks), of at least kPackMinChunk rows. An H100 holds about
// 660 of these blocks at once (5 per SM at 48 registers a thread): up to 512 all run in one wave,
// where 1024 leave a second wave half empty. On [64, 4096, 256] (128 tiles), S = 4 moved more than
// S = 8 (history: NOTES.md).
constexpr int64_t kPackFillBlocks = 512, kPackMinChunk = 128;

template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <class T, int V, class Out = T>
__global__ void __launch_bounds__(kPackThreads)
    reduce_column_packs(ReduceOp op, const T* x, Out* out, Acc<T>* partial, int64_t outer, int64_t n, int64_t inner,
                        int64_t chunk) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  __shared__ Acc<T> sums[kPackThreads * V];
  const int lanes = blockDim.x, rows = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = (blockIdx.x * int64_t{lanes} + tx) * V;
  const int64_t k0 = blockIdx.z * chunk, k1 = k0 + chunk < n ? k0 + chunk : n;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    Acc<T> acc[V] = {};
    if (col < inner) {  // inner % V == 0: a pack is all in or all out
      const T* base = x + o * n * inner + col;
      for (int64_t k = k0 + ty; k < k1; k += int64_t{rows} * kPackUnroll) {
        // every load of the step is issued before the first add needs one
        Pack<T, V> p[kPackUnroll];
#pragma unroll
        for (int u = 0; u < kPackUnroll; ++u)
          if (k + u * rows < k1) p[u] = *reinterpret_cast<const Pack<T, V>*>(base + (k + u * rows) * inner);
#pragma unroll
        for (int u = 0; u < kPackUnroll; ++u)
          if (k + u * rows < k1)
#pragma unroll
            for (int e = 0; e < V; ++e) acc[e] += cast<Acc<T>>(p[u].v[e]);
      }
    }
#pragma unroll
    for (int e = 0; e < V; ++e) sums[(ty * lanes + tx) * V + e] = acc[e];
    __syncthreads();
    // thread c < lanes * V finishes output c of the tile: rows 0..R-1 in order (deterministic)
    const int c = ty * lanes + tx;
    const int64_t at = blockIdx.x * int64_t{lanes} * V + c;
    if (c < lanes * V && at < inner) {
      Acc<T> total = 0;
      for (int r = 0; r < rows; ++r) total += sums[r * lanes * V + c];
      if (gridDim.z == 1) store<T>(op, out, nullptr, o * inner + at, total, n, compute_t<T>{}, 0);
      else partial[(blockIdx.z * outer + o) * inner + at] = total;
    }
    __syncthreads();  // before the next o overwrites the partials
  }
}

// Version 4's second pass: each output adds its `splits` partials in order.
template <class T, class Out = T>
__global__ void reduce_column_splits(ReduceOp op, const Acc<T>* partial, Out* out, int64_t outputs, int64_t n,
                                     int64_t splits) {
  KILN_GRID_STRIDE(e, outputs) {
    Acc<T> total = 0;
    for (int64_t z = 0; z < splits; ++z) total += partial[z * outputs + e];
    store<T>(op, out, nullptr, e, total, n, compute_t<T>{}, 0);
  }
}

// Threads across the outputs: 32 packs, or the fewest powers of two that cover narrower rows.
int pack_lanes(int64_t inner, int v) {
  int lanes = 1;
  while (lanes < 32 && int64_t{lanes} * v < inner) lanes *= 2;
  return lanes;
}

// Version 6's partial result of one chunk of a row.
template <class T>
struct RowPartial {
  Acc<T> sum;
  compute_t<T> best;
  int64_t best_i;
};

// The (sum, best, best index) of every thread of a block of kThreads combined in shared memory in a
// fixed order (deterministic); thread 0 gets the block's.
template <class T>
__device__ void combine_block(Acc<T>& sum, compute_t<T>& best, int64_t& best_i, bool largest) {
  __shared__ Acc<T> sums[kThreads];
  __shared__ compute_t<T> bests[kThreads];
  __shared__ int64_t best_is[kThreads];
  const int t = threadIdx.x;
  sums[t] = sum, bests[t] = best, best_is[t] = best_i;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      sums[t] += sums[t + half];
      if (beats(bests[t + half], best_is[t + half], bests[t], best_is[t], largest))
        bests[t] = bests[t + half], best_is[t] = best_is[t + half];
    }
    __syncthreads();
  }
  sum = sums[0], best = bests[0], best_i = best_is[0];
}

// Version 2: one block per output row. Version 6: one block per chunk of `chunk` elements of a
// row (block b: row b / splits, chunk b % splits), its result to partial[b] instead of out.
template <class T, class Out = T>
__global__ void __launch_bounds__(kThreads) reduce_rows(ReduceOp op, const T* x, Out* out, int32_t* out_index, int64_t n,
                                                        int64_t chunk, int64_t splits, RowPartial<T>* partial) {
  const bool largest = op == ReduceOp::max || op == ReduceOp::argmax;
  const int64_t r = blockIdx.x / splits, begin = blockIdx.x % splits * chunk, end = std::min(n, begin + chunk);
  const T* row = x + r * n;
  Acc<T> sum = 0;
  compute_t<T> best = cast<compute_t<T>>(row[begin]);
  int64_t best_i = begin;
  for (int64_t k = begin + threadIdx.x; k < end; k += kThreads) {
    const compute_t<T> v = cast<compute_t<T>>(row[k]);
    sum += static_cast<Acc<T>>(v);
    if (beats(v, k, best, best_i, largest)) best = v, best_i = k;
  }
  combine_block<T>(sum, best, best_i, largest);
  if (threadIdx.x != 0) return;
  if (partial) partial[blockIdx.x] = {sum, best, best_i};
  else store<T>(op, out, out_index, r, sum, n, best, best_i);
}

// Version 6's second pass: a block per row combines its `splits` partials, each thread walking
// every kThreads-th of them in order, then the block in a fixed order.
template <class T, class Out = T>
__global__ void __launch_bounds__(kThreads) reduce_row_splits(ReduceOp op, const RowPartial<T>* partial, Out* out,
                                                              int32_t* out_index, int64_t n, int64_t splits) {
  const bool largest = op == ReduceOp::max || op == ReduceOp::argmax;
  const RowPartial<T>* p = partial + blockIdx.x * splits;
  Acc<T> sum = 0;
  compute_t<T> best = p[0].best;
  int64_t best_i = p[0].best_i;
  for (int64_t z = threadIdx.x; z < splits; z += kThreads) {
    sum += p[z].sum;
    if (beats(p[z].best, p[z].best_i, best, best_i, largest)) best = p[z].best, best_i = p[z].best_i;
  }
  combine_block<T>(sum, best, best_i, largest);
  if (threadIdx.x == 0) store<T>(op, out, out_index, blockIdx.x, sum, n, best, best_i);
}

// Version 5: one warp per output row, for rows up to kWarpRowMax (inner == 1): each lane strides
// through the row, kRowUnroll loads in flight before it adds them in order, then five shuffles
// combine the lanes in a fixed order (deterministic). One load at a time, a few rows of 676 (conv1's
// bias gradient after its sum over N: 32 rows) were a chain of 22 round trips to memory a lane:
// 7 µs [nofig] in the bf16 step's profile (ncu, docs/runs/2026-11-27-h100-fc1-split).
constexpr int64_t kWarpRowMax = 2048;
constexpr int kRowUnroll = 8;
template <class T, class Out = T>
__global__ void reduce_rows_warp(ReduceOp op, const T* x, Out* out, int32_t* out_index, int64_t rows, int64_t n) {
  const bool largest = op == ReduceOp::max || op == ReduceOp::argmax;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < rows; r += warps) {
    const T* row = x + r * n;
    Acc<T> sum = 0;
    compute_t<T> best = cast<compute_t<T>>(row[0]);
    int64_t best_i = 0;
    for (int64_t k0 = lane; k0 < n; k0 += 32 * kRowUnroll) {
      compute_t<T> v[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u)
        if (k0 + 32 * u < n) v[u] = cast<compute_t<T>>(row[k0 + 32 * u]);
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int64_t k = k0 + 32 * u;
        if (k >= n) break;
        sum += static_cast<Acc<T>>(v[u]);
        if (beats(v[u], k, best, best_i, largest)) best = v[u], best_i = k;
      }
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      const compute_t<T> other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int64_t other_i = __shfl_xor_sync(0xffffffffu, best_i, offset);
      if (beats(other, other_i, best, best_i, largest)) best = other, best_i = other_i;
    }
    if (lane == 0) store<T>(op, out, out_index, r, sum, n, best, best_i);
  }
}

}  // namespace

namespace reduce {

// Version 6's chunks: rows of more than kWarpRowMax elements, too few to give kRowFillBlocks
// blocks, are cut into chunks of at least kRowMinChunk elements (32 per thread of a block), as
// many as bring the blocks to about kRowFillBlocks. From the shape alone: deterministic.
constexpr int64_t kRowFillBlocks = 512, kRowMinChunk = 8192;

int64_t row_chunk(int64_t rows, int64_t n) {
  const int64_t splits = std::max<int64_t>(1, std::min(kRowFillBlocks / std::max<int64_t>(rows, 1), n / kRowMinChunk));
  return (n + splits - 1) / splits;
}

template <class T, class Out>
void column_tiles(ReduceOp op, const T* x, Out* values, int32_t* index, int64_t outer, int64_t n, int64_t inner,
                  cudaStream_t stream) {
  if (outer * inner == 0) return;
  dim3 grid(static_cast<unsigned>((inner + kColumns - 1) / kColumns), static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
  reduce_column_tiles<T, Out><<<grid, dim3(kColumns, kSplit), 0, stream>>>(op, x, values, index, outer, n, inner);
  KILN_CUDA_LAUNCH_CHECK(reduce_op_name(op).data());
}

int64_t column_packs_splits(int64_t outer, int64_t n, int64_t inner) {
  // The tile count of aligned f32 rows, whatever the dtype and alignment: the split, and so the
  // order of the additions, depends on the shape alone.
  const int lanes = pack_lanes(inner, 4);
  const int64_t tiles = outer * ((inner + lanes * 4 - 1) / (lanes * 4));
  return std::max<int64_t>(1, std::min(kPackFillBlocks / tiles, n / kPackMinChunk));
}

template <class T>
size_t column_packs_workspace_bytes(int64_t outer, int64_t inner, int64_t splits) {
  return splits > 1 ? static_cast<size_t>(splits * outer * inner) * sizeof(Acc<T>) : 0;
}

template <class T, class Out>
void column_packs(ReduceOp op, const T* x, Out* values, int64_t outer, int64_t n, int64_t inner, int64_t splits,
                  void* workspace, cudaStream_t stream) {
  KILN_CHECK(op == ReduceOp::sum || op == ReduceOp::mean, ValueError, "cuda ", reduce_op_name(op),
             ": the column-pack version sums only");
  if (outer * inner == 0) return;
  splits = std::clamp<int64_t>(splits, 1, std::min<int64_t>(n, 65535));
  const int64_t chunk = (n + splits - 1) / splits;
  auto* partial = static_cast<Acc<T>*>(workspace);
  auto launch = [&](auto pack) {
    constexpr int v = decltype(pack)::value;
    const int lanes = pack_lanes(inner, v);
    dim3 grid(static_cast<unsigned>((inner + lanes * v - 1) / (lanes * v)), static_cast<unsigned>(std::min<int64_t>(outer, 65535)),
              static_cast<unsigned>(splits));
    launch_dependent(reduce_column_packs<T, v, Out>, grid, dim3(lanes, kPackThreads / lanes), 0, stream, op, x, values,
                     partial, outer, n, inner, chunk);
  };
  constexpr int v = 16 / sizeof(T);
  if (inner % v == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) launch(std::integral_constant<int, v>{});
  else launch(std::integral_constant<int, 1>{});
  if (splits > 1)
    reduce_column_splits<T, Out><<<blocks_for(outer * inner), kThreads, 0, stream>>>(op, partial, values, outer * inner, n, splits);
  KILN_CUDA_LAUNCH_CHECK(reduce_op_name(op).data());
}

#define KILN_REDUCE_INSTANTIATE(T, Out)                                                                            \
  template void column_tiles<T, Out>(ReduceOp, const T*, Out*, int32_t*, int64_t, int64_t, int64_t, cudaStream_t); \
  template void column_packs<T, Out>(ReduceOp, const T*, Out*, int64_t, int64_t, int64_t, int64_t, void*, cudaStream_t);
KILN_REDUCE_INSTANTIATE(float, float)
KILN_REDUCE_INSTANTIATE(double, double)
KILN_REDUCE_INSTANTIATE(int32_t, int32_t)
KILN_REDUCE_INSTANTIATE(bf16, bf16)
KILN_REDUCE_INSTANTIATE(bf16, float)
KILN_REDUCE_INSTANTIATE(float, bf16)
#undef KILN_REDUCE_INSTANTIATE
template size_t column_packs_workspace_bytes<float>(int64_t, int64_t, int64_t);
template size_t column_packs_workspace_bytes<double>(int64_t, int64_t, int64_t);
template size_t column_packs_workspace_bytes<int32_t>(int64_t, int64_t, int64_t);
template size_t column_packs_workspace_bytes<bf16>(int64_t, int64_t, int64_t);

}  // namespace reduce

void CudaBackend::reduce(ReduceOp op, const TensorRef& x, const TensorRef& out) {
  const int64_t outer = x.shape[0], n = x.shape[1], inner = x.shape[2];
  const char* name = reduce_op_name(op).data();
  bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  const bool sums = op == ReduceOp::sum || op == ReduceOp::mean;
  const bool widened = sums && ((x.dtype == DType::bf16 && out.dtype == DType::f32) ||
                                (x.dtype == DType::f32 && out.dtype == DType::bf16));
  KILN_CHECK(out.dtype == (arg ? DType::i32 : x.dtype) || widened, DTypeError, "cuda ", name, ": out is ", out.dtype,
             " for x in ", x.dtype, " (a sum or mean may also go from bf16 to f32 or back)");
  KILN_CHECK(n > 0 || sums, ValueError, "cuda ", name, ": cannot reduce an empty axis");
  if (outer * inner == 0) return;
  if (n == 0) {  // sum of nothing is 0; mean of nothing is NaN (0 / 0), as on the CPU
    fill(out, op == ReduceOp::sum ? 0.0 : std::nan(""));
    return;
  }
  auto launch = [&](auto tag, auto out_tag) {
    using T = decltype(tag);
    using Out = decltype(out_tag);
    int32_t* index = arg ? out.data<int32_t>() : nullptr;
    Out* values = arg ? nullptr : out.data<Out>();
    if (inner == 1) {
      KILN_CHECK(outer <= 2147483647, ShapeError, "cuda ", name, ": too many rows");
      if (n <= kWarpRowMax) {
        reduce_rows_warp<T, Out><<<blocks_for(outer * 32), kThreads, 0, stream_>>>(op, x.data<T>(), values, index,
                                                                                   outer, n);
        return;
      }
      const int64_t chunk = reduce::row_chunk(outer, n), splits = (n + chunk - 1) / chunk;
      if (splits == 1) {
        reduce_rows<T, Out><<<static_cast<unsigned>(outer), kThreads, 0, stream_>>>(op, x.data<T>(), values, index, n,
                                                                                    n, 1, nullptr);
        return;
      }
      // Freed right after queuing, as version 4's below.
      const size_t bytes = static_cast<size_t>(outer * splits) * sizeof(RowPartial<T>);
      auto* partial = static_cast<RowPartial<T>*>(allocate(bytes));
      reduce_rows<T, Out><<<static_cast<unsigned>(outer * splits), kThreads, 0, stream_>>>(op, x.data<T>(), values,
                                                                                           index, n, chunk, splits,
                                                                                           partial);
      reduce_row_splits<T, Out><<<static_cast<unsigned>(outer), kThreads, 0, stream_>>>(op, partial, values, index, n,
                                                                                        splits);
      deallocate(partial);
    } else if (sums && n >= 16) {
      const int64_t splits = reduce::column_packs_splits(outer, n, inner);
      const size_t bytes = reduce::column_packs_workspace_bytes<T>(outer, inner, splits);
      // Freed right after queuing: the pool is stream-ordered, so the memory is not reused before
      // the kernels on this stream are done with it.
      void* workspace = bytes > 0 ? allocate(bytes) : nullptr;
      reduce::column_packs<T, Out>(op, x.data<T>(), values, outer, n, inner, splits, workspace, stream_);
      if (workspace) deallocate(workspace);
    } else if (inner >= 16 && n >= 16) {
      reduce::column_tiles<T, Out>(op, x.data<T>(), values, index, outer, n, inner, stream_);
    } else {
      reduce_columns<T, Out><<<blocks_for(outer * inner), kThreads, 0, stream_>>>(op, x.data<T>(), values, index,
                                                                                  outer, n, inner);
    }
  };
  if (widened) {
    if (x.dtype == DType::bf16) launch(bf16{}, float{});
    else launch(float{}, bf16{});
    KILN_CUDA_LAUNCH_CHECK(name);
    return;
  }
  switch (x.dtype) {
    case DType::f32: launch(float{}, float{}); break;
    case DType::f64: launch(double{}, double{}); break;
    case DType::bf16: launch(bf16{}, bf16{}); break;
    case DType::i32:
      KILN_CHECK(op != ReduceOp::mean, DTypeError, "cuda backend: mean does not take i32");
      launch(int32_t{}, int32_t{});
      break;
    default: KILN_FAIL(DTypeError, "cuda backend: ", name, " does not take ", x.dtype);
  }
  KILN_CUDA_LAUNCH_CHECK(name);
}

void CudaBackend::count_correct(const TensorRef& logits, const TensorRef& targets, const TensorRef& count) {
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  if (!is_floating(logits.dtype)) return Backend::count_correct(logits, targets, count);  // i32 scores
  if (rows == 0) return;
  const int64_t blocks = std::min<int64_t>((rows + kCountThreads / 32 - 1) / (kCountThreads / 32), 4096);
  visit_floating_bf16(logits.dtype, "count_correct", [&](auto tag) {
    using T = decltype(tag);
    count_correct_kernel<T><<<static_cast<unsigned>(blocks), kCountThreads, 0, stream_>>>(
        logits.data<T>(), targets.data<int32_t>(), count.data<int32_t>(), rows, classes);
  });
  KILN_CUDA_LAUNCH_CHECK("count_correct");
}

}  // namespace kiln::cuda
