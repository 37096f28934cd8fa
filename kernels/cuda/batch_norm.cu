// Batch normalisation on the GPU over x [N, C, S] per channel c, M = N * S values a channel
// (core/backend.h; the CPU oracle is kernels/cpu/batch_norm.cpp, with the same formulas):
//   stats     mean[c] = sum x / M, var[c] = sum (x - mean[c])^2 / M
//   apply     y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]
//   backward  grad_bias[c] = sum g, grad_weight[c] = sum g * xhat, xhat = (x - mean[c]) * invstd[c],
//             grad_x = weight[c] * invstd[c] * (g - (grad_bias[c] + xhat * grad_weight[c]) / M)
//
// The sums. A channel of the MNIST-sized [64, 32, 26, 26] is 43,264 values and there are only 32
// channels: a block per channel would leave most of an H100's 132 SMs idle, each block waiting on
// one load per thread at a time (a first version did that: kernels/cuda/NOTES.md).
// So each channel is cut into `parts` runs of planes (about four blocks per SM in all), a block
// per (part, channel) sums its run in double, and a small kernel adds the parts of each channel in
// a fixed order (a run repeats its bits). A block's threads are rows of ts threads along s, so a
// warp reads along a plane (coalesced), and short planes put several in one block row at a time.
// The variance comes from sums of (x - x0) and (x - x0)^2 with x0 the channel's first value: one
// pass, and in double the shift keeps the digits a plain sum of squares would lose to a large mean.
// The backward sums g and g * xhat the same way, then an elementwise kernel writes grad_x; apply
// is elementwise too, one channel lookup per plane. Two passes over x forward, two over x and the
// gradient backward, where the composed ops batch_norm used to run took about a dozen.
// Bench: `kernel-bench --only batch_norm`. Measured (H100 80GB HBM3, kernel-bench,
// docs/runs/2026-11-26-h100, f32 training): [64, 32, 26, 26] forward
// 0.019 ms [fig cuda.batch_norm.fwd.64x32x26x26.ms], backward
// 0.022 ms [fig cuda.batch_norm.bwd.64x32x26x26.ms]; [128, 64, 56, 56] forward
// 0.193 ms [fig cuda.batch_norm.fwd.128x64x56x56.ms], backward
// 0.264 ms [fig cuda.batch_norm.bwd.128x64x56x56.ms],
// 35% [fig cuda.batch_norm.fwd.128x64x56x56.pct-copy] and
// 39% [fig cuda.batch_norm.bwd.128x64x56x56.pct-copy] of the copy bandwidth in the bench's bytes (x
// and y; x, g and grad_x), which leave out the second read of x.
#include <algorithm>
#include <cstdint>

#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda {

namespace {

constexpr int kBlock = 256;

struct Dims {
  int64_t n, c, s;
  int ts, tn;     // a block's threads as tn rows of ts along s (ts: s rounded up to a power of two, <= kBlock)
  int64_t parts;  // runs of planes a channel is cut into (one block each)
};

// The sum of v over the block, in every thread; `scratch` holds a value per warp. Every thread
// calls it (two barriers: before reading the warps' sums, and before `scratch` is written again).
__device__ double block_sum(double v, double* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < warps; ++w) total += scratch[w];  // the same order in every thread
  __syncthreads();
  return total;
}

// Calls fn(e) for this thread's elements of part `part` of channel c: planes i in the part's run,
// thread (tk, ti) taking s = tk, tk + ts, ... of planes ti, ti + tn, ... (no division per element).
template <class Fn>
__device__ inline void for_part(const Dims& d, int64_t c, int64_t part, Fn&& fn) {
  const int64_t per = (d.n + d.parts - 1) / d.parts, i1 = std::min(d.n, (part + 1) * per);
  const int tk = static_cast<int>(threadIdx.x) % d.ts, ti = static_cast<int>(threadIdx.x) / d.ts;
  for (int64_t i = part * per + ti; i < i1; i += d.tn) {
    const int64_t plane = (i * d.c + c) * d.s;
    for (int64_t k = tk; k < d.s; k += d.ts) fn(plane + k);
  }
}

// The block's two sums of this part of channel c, into partial[(c * parts + part) * 2 + {0, 1}].
__device__ void store_part(double a, double b, double* partial, const Dims& d, int64_t c, double* scratch) {
  a = block_sum(a, scratch);
  b = block_sum(b, scratch);
  if (threadIdx.x == 0) partial[(c * d.parts + blockIdx.x) * 2] = a, partial[(c * d.parts + blockIdx.x) * 2 + 1] = b;
}

// Per (part, channel) block: partial[(c * parts + part) * 2 + {0, 1}] = sums of (x - x0), (x - x0)^2.
template <class T>
__global__ void __launch_bounds__(kBlock) stats_parts_kernel(const T* x, double* partial, Dims d) {
  __shared__ double scratch[kBlock / 32];
  for (int64_t c = blockIdx.y; c < d.c; c += gridDim.y) {
    const double x0 = x[c * d.s];  // plane 0's first value
    double s1 = 0, s2 = 0;
    for_part(d, c, blockIdx.x, [&](int64_t e) {
      const double v = static_cast<double>(x[e]) - x0;
      s1 += v;
      s2 += v * v;
    });
    store_part(s1, s2, partial, d, c, scratch);
  }
}

// A thread per channel adds its parts in order: mean = x0 + S1 / M, var = (S2 - S1^2 / M) / M.
template <class T>
__global__ void stats_finish_kernel(const T* x, const double* partial, T* mean, T* var, Dims d) {
  KILN_GRID_STRIDE(c, d.c) {
    double s1 = 0, s2 = 0;
    for (int64_t p = 0; p < d.parts; ++p) s1 += partial[(c * d.parts + p) * 2], s2 += partial[(c * d.parts + p) * 2 + 1];
    const double m = static_cast<double>(d.n * d.s);
    mean[c] = static_cast<T>(static_cast<double>(x[c * d.s]) + s1 / m);
    var[c] = static_cast<T>(std::max((s2 - s1 * s1 / m) / m, 0.0));
  }
}

// y = (x - mean) * invstd * weight + bias, block rows of ts threads walking a plane each.
template <class T>
__global__ void apply_kernel(const T* x, const T* mean, const T* invstd, const T* weight, const T* bias, T* y,
                             Dims d) {
  const int tk = static_cast<int>(threadIdx.x) % d.ts, ti = static_cast<int>(threadIdx.x) / d.ts;
  const int64_t planes = d.n * d.c;
  for (int64_t p = int64_t{blockIdx.x} * d.tn + ti; p < planes; p += int64_t{gridDim.x} * d.tn) {
    const int64_t c = p % d.c;
    const T m = mean[c], r = invstd[c], w = weight ? weight[c] : T(1), b = bias ? bias[c] : T(0);
    for (int64_t k = tk; k < d.s; k += d.ts) {
      T v = (x[p * d.s + k] - m) * r;
      if (weight) v *= w;
      if (bias) v += b;
      y[p * d.s + k] = v;
    }
  }
}

// Per (part, channel) block: partial sums of g and g * xhat.
template <class T>
__global__ void __launch_bounds__(kBlock)
    backward_parts_kernel(const T* x, const T* g, const T* mean, const T* invstd, double* partial, Dims d) {
  __shared__ double scratch[kBlock / 32];
  for (int64_t c = blockIdx.y; c < d.c; c += gridDim.y) {
    const double mu = mean[c], r = invstd[c];
    double sum_g = 0, sum_gx = 0;
    for_part(d, c, blockIdx.x, [&](int64_t e) {
      sum_g += g[e];
      sum_gx += static_cast<double>(g[e]) * ((static_cast<double>(x[e]) - mu) * r);
    });
    store_part(sum_g, sum_gx, partial, d, c, scratch);
  }
}

// A thread per channel: the parts in order, into grad_bias, grad_weight and totals[c] (double).
template <class T>
__global__ void backward_finish_kernel(const double* partial, double* totals, T* grad_weight, T* grad_bias, Dims d) {
  KILN_GRID_STRIDE(c, d.c) {
    double sum_g = 0, sum_gx = 0;
    for (int64_t p = 0; p < d.parts; ++p)
      sum_g += partial[(c * d.parts + p) * 2], sum_gx += partial[(c * d.parts + p) * 2 + 1];
    grad_bias[c] = static_cast<T>(sum_g);
    grad_weight[c] = static_cast<T>(sum_gx);
    totals[c * 2] = sum_g, totals[c * 2 + 1] = sum_gx;
  }
}

template <class T>
__global__ void grad_x_kernel(const T* x, const T* g, const T* mean, const T* invstd, const T* weight,
                              const double* totals, T* grad_x, Dims d) {
  const int tk = static_cast<int>(threadIdx.x) % d.ts, ti = static_cast<int>(threadIdx.x) / d.ts;
  const int64_t planes = d.n * d.c;
  const double m = static_cast<double>(d.n * d.s);
  for (int64_t p = int64_t{blockIdx.x} * d.tn + ti; p < planes; p += int64_t{gridDim.x} * d.tn) {
    const int64_t c = p % d.c;
    const double mu = mean[c], r = invstd[c], scale = (weight ? static_cast<double>(weight[c]) : 1.0) * r;
    const double mean_g = totals[c * 2] / m, mean_gx = totals[c * 2 + 1] / m;
    for (int64_t k = tk; k < d.s; k += d.ts) {
      const int64_t e = p * d.s + k;
      const double xhat = (static_cast<double>(x[e]) - mu) * r;
      grad_x[e] = static_cast<T>(scale * (g[e] - mean_g - xhat * mean_gx));
    }
  }
}

Dims dims_of(const char* op, const TensorRef& x, int sms) {
  KILN_CHECK(x.shape.size() == 3 && x.is_contiguous(), ShapeError, "cuda ", op,
             ": x must be a contiguous [N, C, S], got ", x.shape);
  Dims d{x.shape[0], x.shape[1], x.shape[2], 1, kBlock, 1};
  while (d.ts < kBlock && d.ts < d.s) d.ts *= 2;
  d.tn = kBlock / d.ts;
  // about four blocks per SM in all, and no part without a plane
  d.parts = std::clamp<int64_t>((4 * int64_t{sms} + d.c - 1) / std::max<int64_t>(d.c, 1), 1, std::max<int64_t>(d.n, 1));
  return d;
}

dim3 parts_grid(const Dims& d) {
  return dim3(static_cast<unsigned>(d.parts), static_cast<unsigned>(std::min<int64_t>(d.c, 65535)));
}

unsigned plane_blocks(const Dims& d) {
  return static_cast<unsigned>(std::clamp<int64_t>((d.n * d.c + d.tn - 1) / d.tn, 1, 65535 * 16));
}

template <class T>
const T* data_or_null(const TensorRef& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

void CudaBackend::batch_norm_stats(const TensorRef& x, const TensorRef& mean, const TensorRef& var) {
  const Dims d = dims_of("batch_norm_stats", x, device_attribute(cudaDevAttrMultiProcessorCount, device_));
  if (d.c == 0 || d.n * d.s == 0) return;
  // Freed right after queuing: the pool is stream-ordered
  auto* partial = static_cast<double*>(allocate(sizeof(double) * static_cast<size_t>(2 * d.c * d.parts)));
  visit_floating(x.dtype, "batch_norm_stats", [&](auto tag) {
    using T = decltype(tag);
    stats_parts_kernel<T><<<parts_grid(d), kBlock, 0, stream_>>>(x.data<T>(), partial, d);
    KILN_CUDA_LAUNCH_CHECK("batch_norm_stats");
    stats_finish_kernel<T><<<blocks_for(d.c), kThreads, 0, stream_>>>(x.data<T>(), partial, mean.data<T>(),
                                                                      var.data<T>(), d);
    KILN_CUDA_LAUNCH_CHECK("batch_norm_stats");
  });
  deallocate(partial);
}

void CudaBackend::batch_norm_apply(const TensorRef& x, const TensorRef& mean, const TensorRef& invstd,
                                   const TensorRef& weight, const TensorRef& bias, const TensorRef& y) {
  const Dims d = dims_of("batch_norm_apply", x, device_attribute(cudaDevAttrMultiProcessorCount, device_));
  if (d.n * d.c * d.s == 0) return;
  visit_floating(x.dtype, "batch_norm_apply", [&](auto tag) {
    using T = decltype(tag);
    apply_kernel<T><<<plane_blocks(d), kBlock, 0, stream_>>>(x.data<T>(), mean.data<T>(), invstd.data<T>(),
                                                             data_or_null<T>(weight), data_or_null<T>(bias),
                                                             y.data<T>(), d);
  });
  KILN_CUDA_LAUNCH_CHECK("batch_norm_apply");
}

void CudaBackend::batch_norm_backward(const TensorRef& x, const TensorRef& grad, const TensorRef& mean,
                                      const TensorRef& invstd, const TensorRef& weight, const TensorRef& grad_x,
                                      const TensorRef& grad_weight, const TensorRef& grad_bias) {
  const Dims d = dims_of("batch_norm_backward", x, device_attribute(cudaDevAttrMultiProcessorCount, device_));
  if (d.c == 0 || d.n * d.s == 0) return;
  // the parts' sums, then each channel's totals
  auto* partial = static_cast<double*>(allocate(sizeof(double) * static_cast<size_t>(2 * d.c * (d.parts + 1))));
  double* totals = partial + 2 * d.c * d.parts;
  visit_floating(x.dtype, "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    backward_parts_kernel<T><<<parts_grid(d), kBlock, 0, stream_>>>(x.data<T>(), grad.data<T>(), mean.data<T>(),
                                                                    invstd.data<T>(), partial, d);
    KILN_CUDA_LAUNCH_CHECK("batch_norm_backward");
    backward_finish_kernel<T><<<blocks_for(d.c), kThreads, 0, stream_>>>(partial, totals, grad_weight.data<T>(),
                                                                         grad_bias.data<T>(), d);
    KILN_CUDA_LAUNCH_CHECK("batch_norm_backward");
    grad_x_kernel<T><<<plane_blocks(d), kBlock, 0, stream_>>>(x.data<T>(), grad.data<T>(), mean.data<T>(),
                                                              invstd.data<T>(), data_or_null<T>(weight), totals,
                                                              grad_x.data<T>(), d);
    KILN_CUDA_LAUNCH_CHECK("batch_norm_backward");
  });
  deallocate(partial);
}

}  // namespace kiln::cuda
