// Reductions on the GPU over the middle axis: x [outer, n, inner] (contiguous) -> out [outer, inner].
// sum/mean accumulate in double (int64 for i32), as the CPU does; max/min propagate NaN;
// argmax/argmin return the first index of the extreme (a NaN counts as the extreme, the first
// NaN wins), as the CPU does.
//
// Three versions, picked by the layout:
//   version 1 (inner > 1, short or narrow): one thread per output. Neighbouring threads own
//     neighbouring outputs, so at every step k of the loop a warp reads 32 neighbouring elements:
//     coalesced. But there are only outer * inner threads: a sum over the middle axis of
//     [64, 4096, 256] runs 16384 threads, an eighth of what an H100 holds, each walking 4096
//     elements; it moved 407 GB/s, 13% of the copy bandwidth (H100 80GB HBM3, 2026-11-22,
//     kernel-bench --only softmax).
//   version 3 (inner >= 16 and n >= 16): a block of 32 x 8 threads owns 32 neighbouring outputs;
//     its 8 rows of threads split the reduced axis (row r takes k = r, r + 8, ...), so each warp
//     still reads 32 neighbouring elements and there are 8 times more threads. The 8 partial
//     results are combined in shared memory in a fixed order: deterministic.
//   version 2 (inner == 1, a row per output, e.g. a sum over the last axis or over everything):
//     one block of 256 threads per output. Each thread strides through the row (coalesced across
//     the block), then the block combines the 256 partial results in shared memory. The order of
//     the additions depends only on n and the block size, so results are deterministic.
// Long rows with few outputs (a full reduction) still run on one block; a multi-block split is
// still to come.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/layout.cuh"

namespace kiln::cuda {

namespace {

template <class T>
__device__ bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// Whether (a, ia) beats (b, ib) for max (largest) or min: NaN first, then value, then lower index.
template <class T>
__device__ bool beats(T a, int64_t ia, T b, int64_t ib, bool largest) {
  bool na = is_nan(a), nb = is_nan(b);
  if (na || nb) return na && (!nb || ia < ib);
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

template <class T>
using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T>
__device__ void store(ReduceOp op, T* out, int32_t* out_index, int64_t at, Acc<T> sum, int64_t n, T best, int64_t best_i) {
  switch (op) {
    case ReduceOp::sum: out[at] = static_cast<T>(sum); break;
    case ReduceOp::mean: out[at] = static_cast<T>(static_cast<double>(sum) / static_cast<double>(n)); break;
    case ReduceOp::max:
    case ReduceOp::min: out[at] = best; break;
    case ReduceOp::argmax:
    case ReduceOp::argmin: out_index[at] = static_cast<int32_t>(best_i); break;
  }
}

// Version 1: one thread per output.
template <class T>
__global__ void reduce_columns(ReduceOp op, const T* x, T* out, int32_t* out_index, int64_t outer, int64_t n,
                               int64_t inner) {
  bool largest = op == ReduceOp::max || op == ReduceOp::argmax;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < outer * inner; e += int64_t{gridDim.x} * blockDim.x) {
    int64_t o = e / inner, i = e % inner;
    const T* p = x + o * n * inner + i;
    Acc<T> sum = 0;
    T best = p[0];
    int64_t best_i = 0;
    for (int64_t k = 0; k < n; ++k) {
      T v = p[k * inner];
      sum += static_cast<Acc<T>>(v);
      if (k > 0 && beats(v, k, best, best_i, largest)) best = v, best_i = k;
    }
    store(op, out, out_index, e, sum, n, best, best_i);
  }
}

// Version 3: a block of kColumns x kSplit threads per kColumns neighbouring outputs.
constexpr int kColumns = 32, kSplit = 8;

template <class T>
__global__ void reduce_column_tiles(ReduceOp op, const T* x, T* out, int32_t* out_index, int64_t outer, int64_t n,
                                    int64_t inner) {
  __shared__ Acc<T> sums[kSplit][kColumns];
  __shared__ T bests[kSplit][kColumns];
  __shared__ int64_t best_is[kSplit][kColumns];
  bool largest = op == ReduceOp::max || op == ReduceOp::argmax;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i = blockIdx.x * int64_t{kColumns} + tx;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    Acc<T> sum = 0;
    T best{};
    int64_t best_i = -1;
    if (i < inner) {
      const T* p = x + o * n * inner + i;
      for (int64_t k = ty; k < n; k += kSplit) {
        T v = p[k * inner];
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
      store(op, out, out_index, o * inner + i, sum, n, best, best_i);
    }
    __syncthreads();  // before the next o overwrites the partials
  }
}

// Version 2: one block per output row.
template <class T>
__global__ void reduce_rows(ReduceOp op, const T* x, T* out, int32_t* out_index, int64_t n) {
  __shared__ Acc<T> sums[kThreads];
  __shared__ T bests[kThreads];
  __shared__ int64_t best_is[kThreads];
  bool largest = op == ReduceOp::max || op == ReduceOp::argmax;
  const T* row = x + blockIdx.x * n;
  int t = threadIdx.x;
  Acc<T> sum = 0;
  T best = row[0];
  int64_t best_i = 0;
  for (int64_t k = t; k < n; k += blockDim.x) {
    T v = row[k];
    sum += static_cast<Acc<T>>(v);
    if (beats(v, k, best, best_i, largest)) best = v, best_i = k;
  }
  sums[t] = sum, bests[t] = best, best_is[t] = best_i;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) {
      sums[t] += sums[t + half];
      if (beats(bests[t + half], best_is[t + half], bests[t], best_is[t], largest))
        bests[t] = bests[t + half], best_is[t] = best_is[t + half];
    }
    __syncthreads();
  }
  if (t == 0) store(op, out, out_index, blockIdx.x, sums[0], n, bests[0], best_is[0]);
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const TensorRef& x, const TensorRef& out) {
  const int64_t outer = x.shape[0], n = x.shape[1], inner = x.shape[2];
  const char* name = reduce_op_name(op).data();
  bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  KILN_CHECK(n > 0 || op == ReduceOp::sum || op == ReduceOp::mean, ValueError, "cuda ", name,
             ": cannot reduce an empty axis");
  if (outer * inner == 0) return;
  if (n == 0) {  // sum of nothing is 0; mean of nothing is NaN (0 / 0), as on the CPU
    fill(out, op == ReduceOp::sum ? 0.0 : std::nan(""));
    return;
  }
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    int32_t* index = arg ? out.data<int32_t>() : nullptr;
    T* values = arg ? nullptr : out.data<T>();
    if (inner == 1) {
      KILN_CHECK(outer <= 2147483647, ShapeError, "cuda ", name, ": too many rows");
      reduce_rows<T><<<static_cast<unsigned>(outer), kThreads, 0, stream_>>>(op, x.data<T>(), values, index, n);
    } else if (inner >= 16 && n >= 16) {
      dim3 grid(static_cast<unsigned>((inner + kColumns - 1) / kColumns), static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
      reduce_column_tiles<T><<<grid, dim3(kColumns, kSplit), 0, stream_>>>(op, x.data<T>(), values, index, outer, n,
                                                                           inner);
    } else {
      reduce_columns<T><<<blocks_for(outer * inner), kThreads, 0, stream_>>>(op, x.data<T>(), values, index, outer, n, inner);
    }
  };
  switch (x.dtype) {
    case DType::f32: launch(float{}); break;
    case DType::f64: launch(double{}); break;
    case DType::i32:
      KILN_CHECK(op != ReduceOp::mean, DTypeError, "cuda backend: mean does not take i32");
      launch(int32_t{});
      break;
    default: KILN_FAIL(DTypeError, "cuda backend: ", name, " does not take ", x.dtype);
  }
  KILN_CUDA_LAUNCH_CHECK(name);
}

}  // namespace kiln::cuda
