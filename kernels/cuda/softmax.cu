// softmax and log_softmax on the GPU over the middle axis of contiguous x [outer, n, inner]
// (core views any axis that way; inner == 1 is the usual softmax over the last axis):
//
//   softmax:     out[o, k, i] = exp(x[o, k, i] - m) / s
//   log_softmax: out[o, k, i] = x[o, k, i] - m - log(s)
//   with m = max_k x[o, k, i] and s = sum_k exp(x[o, k, i] - m).
//
// Bench: `kernel-bench --only softmax` (GB/s = bytes read + written per second, against the
// device's copy bandwidth). Figures: kernels/README.md, from kernel-bench.
//
// version 1 (naive): one thread per row, three passes over the row (max; sum of exp; write).
//   Neighbouring threads walk neighbouring rows, n elements apart, so no load is coalesced: the
//   baseline every other version improves on.
// version 2 (warp per row, rows of tens to hundreds of elements): the 32 lanes of a warp
//   stride through one row together (coalesced), each keeping an online (max, sum) state
//   (softmax.cuh: adding an element larger than the max rescales the sum by exp(old - new)), so
//   a single pass gives both; five shuffles combine the lanes without shared memory or
//   __syncthreads, and a second pass writes the row, which is small enough to still be in L1.
// version 3 (block per row, long rows): 512 threads per row with the same online state, loading
//   16 bytes at a time where the row allows it; the warps' states meet in shared memory. Two
//   passes over x instead of three; the second mostly hits L2, since the row was just read.
// version 4 (columns, inner > 1: softmax over a non-last axis): one thread per (outer, inner)
//   column, online state over k then a writing pass. Neighbouring threads own neighbouring i, so
//   at every k a warp reads 32 neighbouring elements: coalesced without any transpose.
// version 5 (rows per warp, n <= 32, e.g. MNIST's n = 10): version 2 leaves 22 of 32 lanes idle
//   at n = 10 (on an H100 80GB HBM3, 2026-11-22, kernel-bench --only softmax: [65536, 10] naive
//   0.0108 ms, version 2 0.0244 ms). Here a group of G lanes (1, 2, 4 or 8, so at most 4 elements
//   a lane) owns a row and a warp takes 32 / G neighbouring rows, which its loads cover together;
//   the elements stay in registers, and shuffles within the group combine the states.
// version 6 (row in registers, long rows): a block per row reads the row once, 16 bytes at a
//   time, and keeps it in registers (up to 1024 threads of 8 packs: n <= 32768 f32; f64 4 packs,
//   n <= 8192, as more would spill);
//   the thread's max, then its exps (kept, so that the write is a multiply), one block combine,
//   then the write: two passes of
//   memory traffic instead of version 3's three (version 3 at [4096, 32768]: 0.548 ms, 65% of
//   copy, same run). Rows that do not fit go to version 3.
// Production (`best`): version 4 when inner > 1, else version 5 for n <= 32, version 2 below
// n = 512, version 6 from there (version 3 where the row does not fit in registers).
// Figures: kernels/README.md, from kernel-bench.
//
// Precision: f32 accumulates in float (f64 in double). The online rescaling keeps every exp in
// (0, 1], and the sum of a row's exps is at least 1, so float keeps about 1e-6 relative error
// even for rows of 10^5 elements; the tests hold it to rtol 1e-5 of the CPU's double path.
// Double exps would cost more than the memory traffic on the large shapes the bench runs.
//
// Special values, as on the CPU: a NaN anywhere in a slice, or a max of +-inf (a row of -inf,
// or a +inf), gives NaN for the whole slice; a -inf among finite values gives 0 (log: -inf).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/layout.cuh"
#include "kernels/cuda/softmax.cuh"

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
    MaxSum<T> a = none<T>();
    for (int64_t k = lane; k < n; k += 32) add(a, row[k]);
    a = finish(warp_combine(a));
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
    MaxSum<T> a = none<T>();
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      Pack<T, V> p = row[j];
#pragma unroll
      for (int e = 0; e < V; ++e) add(a, p.v[e]);
    }
    a = finish(block_combine(a, scratch));
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
  constexpr int R = 32 / G, K = 4;
  const int lane = threadIdx.x % 32, sub = lane % G;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t base = warp * R; base < rows; base += warps * R) {
    const int64_t r = base + lane / G;
    const bool live = r < rows;
    T v[K];
    MaxSum<T> a = none<T>();
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = sub + k * G;
      if (live && c < n) {
        v[k] = x[r * n + c];
        add(a, v[k]);
      }
    }
    a = finish(group_combine<G>(a));
    if (!live) continue;
    const T log_s = log_of(a.s);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = sub + k * G;
      if (c < n) out[r * n + c] = normalised(v[k], a, log_s, log);
    }
  }
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
    Pack<T, V> p[P];
    T m = -INFINITY;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (j < packs) {
        p[i] = row[j];
#pragma unroll
        for (int e = 0; e < V; ++e) m = nan_max(m, p[i].v[e]);
      }
    }
    // softmax keeps e = exp(v - m) in place of v: the write is then e * exp(m - M) / S, one
    // multiply instead of a second exp and a division (log_softmax needs v itself)
    T sum = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (j < packs) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const T ex = shifted_exp(p[i].v[e], m);
          sum += ex;
          if (!log) p[i].v[e] = ex;
        }
      }
    }
    // every thread has read its part of the row before block_combine's barriers: out may alias x
    const MaxSum<T> a = finish(block_combine(MaxSum<T>{m, sum}, scratch));
    const T log_s = log_of(a.s);
    // exp(m - M) / S; a thread whose elements are all -inf (m = -inf) under a finite M scales its
    // 1s to 0. A NaN or infinite M has made S NaN, so every output is NaN.
    const T scale = exp_of(m - a.m) / a.s;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (j < packs) {
#pragma unroll
        for (int e = 0; e < V; ++e) p[i].v[e] = log ? p[i].v[e] - a.m - log_s : p[i].v[e] * scale;
        o[j] = p[i];
      }
    }
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

// Blocks for a kernel that takes one row per block (or per warp): a grid-stride loop covers the
// rest, so the grid stays within what the device schedules at once many times over.
unsigned row_blocks(int64_t units) { return static_cast<unsigned>(std::clamp<int64_t>(units, 1, int64_t{1} << 20)); }

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
  if (packable<T>(n, x, out))
    block_per_row_kernel<T, v><<<row_blocks(rows), kBlock, 0, stream>>>(x, out, rows, n, log);
  else
    block_per_row_kernel<T, 1><<<row_blocks(rows), kBlock, 0, stream>>>(x, out, rows, n, log);
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void rows_per_warp(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  if (n > kSubWarpRowMax) return warp_per_row(x, out, rows, n, log, stream);
  auto launch = [&](auto group) {
    constexpr int g = decltype(group)::value;
    constexpr int64_t rows_per_block = kThreads / 32 * (32 / g);
    rows_per_warp_kernel<T, g><<<row_blocks((rows + rows_per_block - 1) / rows_per_block), kThreads, 0, stream>>>(
        x, out, rows, n, log);
  };
  if (n <= 4) launch(std::integral_constant<int, 1>{});
  else if (n <= 8) launch(std::integral_constant<int, 2>{});
  else if (n <= 16) launch(std::integral_constant<int, 4>{});
  else launch(std::integral_constant<int, 8>{});
  KILN_CUDA_LAUNCH_CHECK(op_name(log));
}

template <class T>
void row_in_registers(const T* x, T* out, int64_t rows, int64_t n, bool log, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  constexpr int v = 16 / sizeof(T);
  const bool packed = packable<T>(n, x, out);
  const RegisterShape shape = register_shape(packed ? n / v : n, sizeof(T) == 8 ? 4 : 8);
  if (shape.per_thread == 0) return block_per_row(x, out, rows, n, log, stream);
  auto launch = [&](auto pack) {
    constexpr int vv = decltype(pack)::value;
    switch (shape.per_thread) {
      case 1: row_in_registers_kernel<T, vv, 1><<<row_blocks(rows), shape.threads, 0, stream>>>(x, out, rows, n, log); break;
      case 2: row_in_registers_kernel<T, vv, 2><<<row_blocks(rows), shape.threads, 0, stream>>>(x, out, rows, n, log); break;
      case 4: row_in_registers_kernel<T, vv, 4><<<row_blocks(rows), shape.threads, 0, stream>>>(x, out, rows, n, log); break;
      default: row_in_registers_kernel<T, vv, 8><<<row_blocks(rows), shape.threads, 0, stream>>>(x, out, rows, n, log); break;
    }
  };
  if (packed) launch(std::integral_constant<int, v>{});
  else launch(std::integral_constant<int, 1>{});
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
  if (inner > 1) columns(x, out, outer, n, inner, log, stream);
  else if (n <= kSubWarpRowMax) rows_per_warp(x, out, outer, n, log, stream);
  else if (n < kRegisterRowMin) warp_per_row(x, out, outer, n, log, stream);
  else row_in_registers(x, out, outer, n, log, stream);  // version 3 where the row does not fit
}

#define KILN_SOFTMAX_INSTANTIATE(T)                                                                        \
  template void naive<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                              \
  template void warp_per_row<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                       \
  template void block_per_row<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                      \
  template void rows_per_warp<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                      \
  template void row_in_registers<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);                   \
  template void columns<T>(const T*, T*, int64_t, int64_t, int64_t, bool, cudaStream_t);                   \
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
