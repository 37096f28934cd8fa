// Cross-entropy on the GPU, log-softmax fused in: logits [N, C], targets i32 [N], per sample
//
//   losses[i] = (1 - s) * -log p[i, t_i] + s * mean_c(-log p[i, c]),   p = softmax(logits[i])
//   grad_logits[i, c] = grad_losses[i] * (p[i, c] - (1 - s) * [c == t_i] - s / C)
//
// with s the label smoothing. With m the row's max and S = sum_c exp(logits[i, c] - m),
// -log p[i, c] = (m - logits[i, c]) + log S, so one pass over the row (the online (max, sum)
// state of softmax.cuh, plus the plain sum of the logits for the smoothing term) gives the loss.
//
// Bench: `kernel-bench --only softmax` (GB/s against the copy bandwidth). Figures:
// kernels/README.md, from kernel-bench.
//
// warp per row (C <= 1024): the lanes stride through the row together and
//   combine their states with shuffles; lane 0 writes the loss. The backward kernel recomputes
//   (m, S) the same way, then the lanes write p - target times the incoming gradient.
// block per row (C > 1024: a language model's vocabulary): 512 threads per row, 16-byte loads
//   where the row allows, the warps' states combined in shared memory.
// rows per warp (C <= 32): softmax.cu's version 5, a group of 1 to 8 lanes per row, several rows
//   per warp, forward and backward.
// backward, row in registers (C >= 512, up to 32768 f32, 8192 f64): softmax.cu's version 6,
//   the logits read once and the gradient written once (the block version reads them twice).
// Production picks by C: rows per warp up to 32, then warp per row; the forward uses the block
//   version above 1024, the backward the registers version from 512 (block where it does not fit).
//
// Precision: the (max, sum) state accumulates in the working type (float for f32, as softmax.cu
// explains); the loss itself is assembled in double from m, the target's logit and log S, and
// the logits' sum runs in double, so a loss that is the small difference of large logits
// (1e3 and up) keeps its digits, as on the CPU.
//
// A target outside [0, C) cannot throw from a kernel: its loss (its row of gradient) is NaN,
// and the kernel records the fault, which the host throws as a ValueError at the next
// synchronisation (fault.cuh), where the CPU throws at once. Non-finite logits give what the CPU
// gives: a NaN or +inf in the row, or a row of -inf, makes its loss and gradient NaN.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/fault.cuh"
#include "kernels/cuda/layout.cuh"
#include "kernels/cuda/softmax.cuh"

namespace kiln::cuda::softmax {

using namespace detail;

namespace {

__device__ inline bool valid(int32_t t, int64_t classes) { return t >= 0 && t < classes; }

// The loss of one row from its state a (finished), the target's logit and the sum of its logits.
template <class T>
__device__ inline T row_loss(const MaxSum<T>& a, T target_logit, double total, int64_t classes, double s) {
  const double m = a.m, log_s = log_of(static_cast<double>(a.s));
  const double nll = (m - static_cast<double>(target_logit)) + log_s;       // -log p[i, t_i]
  const double smooth = (m - total / static_cast<double>(classes)) + log_s;  // mean_c(-log p[i, c])
  return static_cast<T>((1.0 - s) * nll + s * smooth);
}

// grad_losses[i] * (p[i, c] - target[c]) for one element.
template <class T>
__device__ inline T grad_of(T v, const MaxSum<T>& a, T g, bool is_target, T on, T off) {
  return g * (exp_of(v - a.m) / a.s - (is_target ? on : off));
}

template <class T>
__global__ void cross_entropy_warp_kernel(const T* x, const int32_t* targets, T* losses, int64_t rows,
                                          int64_t classes, double s, DeviceFault* fault) {
  const int lane = threadIdx.x % 32;
  const int64_t warps_per_block = blockDim.x / 32;
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / 32; r < rows; r += gridDim.x * warps_per_block) {
    const T* row = x + r * classes;
    MaxSum<T> a = none<T>();
    double total = 0;
    for (int64_t c = lane; c < classes; c += 32) {
      add(a, row[c]);
      total += static_cast<double>(row[c]);
    }
    a = finish(warp_combine(a));
    total = warp_sum(total);
    if (lane == 0) {
      const int32_t t = targets[r];
      if (valid(t, classes)) {
        losses[r] = row_loss(a, row[t], total, classes, s);
      } else {
        losses[r] = T(NAN);
        if (fault) report_fault(fault, FaultOp::cross_entropy, t, r, classes);
      }
    }
  }
}

template <class T, int V>
__global__ void cross_entropy_block_kernel(const T* x, const int32_t* targets, T* losses, int64_t rows,
                                           int64_t classes, double s, DeviceFault* fault) {
  __shared__ MaxSum<T> scratch[kBlock / 32];
  __shared__ double totals[kBlock / 32];
  const int64_t packs = classes / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * classes;
    const auto* packed = reinterpret_cast<const Pack<T, V>*>(row);
    MaxSum<T> a = none<T>();
    double total = 0;
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      Pack<T, V> p = packed[j];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        add(a, p.v[e]);
        total += static_cast<double>(p.v[e]);
      }
    }
    total = warp_sum(total);
    if (threadIdx.x % 32 == 0) totals[threadIdx.x / 32] = total;
    a = finish(block_combine(a, scratch));  // its first barrier also publishes totals
    if (threadIdx.x == 0) {
      total = 0;
      for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += totals[w];
      const int32_t t = targets[r];
      if (valid(t, classes)) {
        losses[r] = row_loss(a, row[t], total, classes, s);
      } else {
        losses[r] = T(NAN);
        if (fault) report_fault(fault, FaultOp::cross_entropy, t, r, classes);
      }
    }
    __syncthreads();  // thread 0 has read totals before the next row overwrites it
  }
}

template <class T>
__global__ void cross_entropy_backward_warp_kernel(const T* x, const int32_t* targets, const T* grad_losses,
                                                   T* grad_x, int64_t rows, int64_t classes, double s,
                                                   DeviceFault* fault) {
  const int lane = threadIdx.x % 32;
  const int64_t warps_per_block = blockDim.x / 32;
  const T on = static_cast<T>(1.0 - s + s / static_cast<double>(classes)), off = static_cast<T>(s / static_cast<double>(classes));
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / 32; r < rows; r += gridDim.x * warps_per_block) {
    const T* row = x + r * classes;
    T* gx = grad_x + r * classes;
    MaxSum<T> a = none<T>();
    for (int64_t c = lane; c < classes; c += 32) add(a, row[c]);
    a = finish(warp_combine(a));
    const int32_t t = targets[r];
    if (!valid(t, classes)) {
      a.s = NAN;  // the whole row of gradient is NaN
      if (lane == 0 && fault) report_fault(fault, FaultOp::cross_entropy_backward, t, r, classes);
    }
    const T g = grad_losses[r];
    for (int64_t c = lane; c < classes; c += 32) gx[c] = grad_of(row[c], a, g, c == t, on, off);
  }
}

template <class T, int V>
__global__ void cross_entropy_backward_block_kernel(const T* x, const int32_t* targets, const T* grad_losses,
                                                    T* grad_x, int64_t rows, int64_t classes, double s,
                                                    DeviceFault* fault) {
  __shared__ MaxSum<T> scratch[kBlock / 32];
  const T on = static_cast<T>(1.0 - s + s / static_cast<double>(classes)), off = static_cast<T>(s / static_cast<double>(classes));
  const int64_t packs = classes / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto* row = reinterpret_cast<const Pack<T, V>*>(x + r * classes);
    auto* gx = reinterpret_cast<Pack<T, V>*>(grad_x + r * classes);
    MaxSum<T> a = none<T>();
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      Pack<T, V> p = row[j];
#pragma unroll
      for (int e = 0; e < V; ++e) add(a, p.v[e]);
    }
    a = finish(block_combine(a, scratch));
    const int32_t t = targets[r];
    if (!valid(t, classes)) {
      a.s = NAN;
      if (threadIdx.x == 0 && fault) report_fault(fault, FaultOp::cross_entropy_backward, t, r, classes);
    }
    const T g = grad_losses[r];
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      Pack<T, V> p = row[j];
#pragma unroll
      for (int e = 0; e < V; ++e) p.v[e] = grad_of(p.v[e], a, g, j * V + e == t, on, off);
      gx[j] = p;
    }
  }
}

// Rows of C <= 4G classes, G lanes per row, 32 / G rows per warp (softmax.cu's version 5); the
// group's first lane writes the loss.
template <class T, int G>
__global__ void cross_entropy_rows_per_warp_kernel(const T* x, const int32_t* targets, T* losses, int64_t rows,
                                                   int64_t classes, double s, DeviceFault* fault) {
  constexpr int R = 32 / G, K = 4;
  const int lane = threadIdx.x % 32, sub = lane % G;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t base = warp * R; base < rows; base += warps * R) {
    const int64_t r = base + lane / G;
    const bool live = r < rows;
    MaxSum<T> a = none<T>();
    double total = 0;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = sub + k * G;
      if (live && c < classes) {
        const T v = x[r * classes + c];
        add(a, v);
        total += static_cast<double>(v);
      }
    }
    a = finish(group_combine<G>(a));
    total = group_sum<G>(total);
    if (live && sub == 0) {
      const int32_t t = targets[r];
      if (valid(t, classes)) {
        losses[r] = row_loss(a, x[r * classes + t], total, classes, s);
      } else {
        losses[r] = T(NAN);
        if (fault) report_fault(fault, FaultOp::cross_entropy, t, r, classes);
      }
    }
  }
}

template <class T, int G>
__global__ void cross_entropy_backward_rows_per_warp_kernel(const T* x, const int32_t* targets, const T* grad_losses,
                                                            T* grad_x, int64_t rows, int64_t classes, double s,
                                                            DeviceFault* fault) {
  constexpr int R = 32 / G, K = 4;
  const T on = static_cast<T>(1.0 - s + s / static_cast<double>(classes)), off = static_cast<T>(s / static_cast<double>(classes));
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
      if (live && c < classes) {
        v[k] = x[r * classes + c];
        add(a, v[k]);
      }
    }
    a = finish(group_combine<G>(a));
    if (!live) continue;
    const int32_t t = targets[r];
    if (!valid(t, classes)) {
      a.s = NAN;
      if (sub == 0 && fault) report_fault(fault, FaultOp::cross_entropy_backward, t, r, classes);
    }
    const T g = grad_losses[r];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = sub + k * G;
      if (c < classes) grad_x[r * classes + c] = grad_of(v[k], a, g, c == t, on, off);
    }
  }
}

// The row in registers (softmax.cu's version 6): logits read once, the gradient written once.
template <class T, int V, int P>
__global__ void __launch_bounds__(1024)
    cross_entropy_backward_registers_kernel(const T* x, const int32_t* targets, const T* grad_losses, T* grad_x,
                                            int64_t rows, int64_t classes, double s, DeviceFault* fault) {
  __shared__ MaxSum<T> scratch[32];
  const T on = static_cast<T>(1.0 - s + s / static_cast<double>(classes)), off = static_cast<T>(s / static_cast<double>(classes));
  const int64_t packs = classes / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto* row = reinterpret_cast<const Pack<T, V>*>(x + r * classes);
    auto* gx = reinterpret_cast<Pack<T, V>*>(grad_x + r * classes);
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
    T sum = 0;
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (j < packs) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          p[i].v[e] = shifted_exp(p[i].v[e], m);  // e = exp(v - m) replaces v, as in softmax.cu
          sum += p[i].v[e];
        }
      }
    }
    MaxSum<T> a = finish(block_combine(MaxSum<T>{m, sum}, scratch));
    const int32_t t = targets[r];
    if (!valid(t, classes)) {
      a.s = NAN;
      if (threadIdx.x == 0 && fault) report_fault(fault, FaultOp::cross_entropy_backward, t, r, classes);
    }
    const T g = grad_losses[r];
    const T scale = exp_of(m - a.m) / a.s;  // p = e * exp(m - M) / S; NaN where the row is
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (j < packs) {
#pragma unroll
        for (int e = 0; e < V; ++e) p[i].v[e] = g * (p[i].v[e] * scale - (j * V + e == t ? on : off));
        gx[j] = p[i];
      }
    }
  }
}

unsigned row_blocks(int64_t units) { return static_cast<unsigned>(std::clamp<int64_t>(units, 1, int64_t{1} << 20)); }
constexpr int kWarps = kThreads / 32;

}  // namespace

template <class T>
void cross_entropy_warp(const T* logits, const int32_t* targets, T* losses, int64_t rows, int64_t classes,
                        double label_smoothing, DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_warp_kernel<T><<<row_blocks((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      logits, targets, losses, rows, classes, label_smoothing, fault);
  KILN_CUDA_LAUNCH_CHECK("cross_entropy");
}

template <class T>
void cross_entropy_block(const T* logits, const int32_t* targets, T* losses, int64_t rows, int64_t classes,
                         double label_smoothing, DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  constexpr int v = 16 / sizeof(T);
  if (packable<T>(classes, logits, logits))
    cross_entropy_block_kernel<T, v><<<row_blocks(rows), kBlock, 0, stream>>>(logits, targets, losses, rows, classes,
                                                                                label_smoothing, fault);
  else
    cross_entropy_block_kernel<T, 1><<<row_blocks(rows), kBlock, 0, stream>>>(logits, targets, losses, rows, classes,
                                                                                label_smoothing, fault);
  KILN_CUDA_LAUNCH_CHECK("cross_entropy");
}

template <class T>
void cross_entropy_backward_warp(const T* logits, const int32_t* targets, const T* grad_losses, T* grad_logits,
                                 int64_t rows, int64_t classes, double label_smoothing, DeviceFault* fault,
                                 cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_backward_warp_kernel<T><<<row_blocks((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault);
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

template <class T>
void cross_entropy_backward_block(const T* logits, const int32_t* targets, const T* grad_losses, T* grad_logits,
                                  int64_t rows, int64_t classes, double label_smoothing, DeviceFault* fault,
                                  cudaStream_t stream) {
  if (rows == 0) return;
  constexpr int v = 16 / sizeof(T);
  if (packable<T>(classes, logits, grad_logits))
    cross_entropy_backward_block_kernel<T, v><<<row_blocks(rows), kBlock, 0, stream>>>(
        logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault);
  else
    cross_entropy_backward_block_kernel<T, 1><<<row_blocks(rows), kBlock, 0, stream>>>(
        logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault);
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

template <class T>
void cross_entropy_rows_per_warp(const T* logits, const int32_t* targets, T* losses, int64_t rows, int64_t classes,
                                 double label_smoothing, DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  if (classes > kSubWarpRowMax || classes == 0)
    return cross_entropy_warp(logits, targets, losses, rows, classes, label_smoothing, fault, stream);
  auto launch = [&](auto group) {
    constexpr int g = decltype(group)::value;
    constexpr int64_t rows_per_block = kWarps * (32 / g);
    cross_entropy_rows_per_warp_kernel<T, g><<<row_blocks((rows + rows_per_block - 1) / rows_per_block), kThreads, 0,
                                               stream>>>(logits, targets, losses, rows, classes, label_smoothing, fault);
  };
  if (classes <= 4) launch(std::integral_constant<int, 1>{});
  else if (classes <= 8) launch(std::integral_constant<int, 2>{});
  else if (classes <= 16) launch(std::integral_constant<int, 4>{});
  else launch(std::integral_constant<int, 8>{});
  KILN_CUDA_LAUNCH_CHECK("cross_entropy");
}

template <class T>
void cross_entropy_backward_rows_per_warp(const T* logits, const int32_t* targets, const T* grad_losses,
                                          T* grad_logits, int64_t rows, int64_t classes, double label_smoothing,
                                          DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  if (classes > kSubWarpRowMax || classes == 0)
    return cross_entropy_backward_warp(logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault,
                                       stream);
  auto launch = [&](auto group) {
    constexpr int g = decltype(group)::value;
    constexpr int64_t rows_per_block = kWarps * (32 / g);
    cross_entropy_backward_rows_per_warp_kernel<T, g>
        <<<row_blocks((rows + rows_per_block - 1) / rows_per_block), kThreads, 0, stream>>>(
            logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault);
  };
  if (classes <= 4) launch(std::integral_constant<int, 1>{});
  else if (classes <= 8) launch(std::integral_constant<int, 2>{});
  else if (classes <= 16) launch(std::integral_constant<int, 4>{});
  else launch(std::integral_constant<int, 8>{});
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

template <class T>
void cross_entropy_backward_registers(const T* logits, const int32_t* targets, const T* grad_losses, T* grad_logits,
                                      int64_t rows, int64_t classes, double label_smoothing, DeviceFault* fault,
                                      cudaStream_t stream) {
  if (rows == 0) return;
  constexpr int v = 16 / sizeof(T);
  const bool packed = packable<T>(classes, logits, grad_logits);
  const RegisterShape shape = register_shape(packed ? classes / v : classes, sizeof(T) == 8 ? 4 : 8);
  if (shape.per_thread == 0 || classes == 0)
    return cross_entropy_backward_block(logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing,
                                        fault, stream);
  auto launch = [&](auto pack) {
    constexpr int vv = decltype(pack)::value;
    const unsigned blocks = row_blocks(rows);
    switch (shape.per_thread) {
      case 1: cross_entropy_backward_registers_kernel<T, vv, 1><<<blocks, shape.threads, 0, stream>>>(logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault); break;
      case 2: cross_entropy_backward_registers_kernel<T, vv, 2><<<blocks, shape.threads, 0, stream>>>(logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault); break;
      case 4: cross_entropy_backward_registers_kernel<T, vv, 4><<<blocks, shape.threads, 0, stream>>>(logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault); break;
      default: cross_entropy_backward_registers_kernel<T, vv, 8><<<blocks, shape.threads, 0, stream>>>(logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault); break;
    }
  };
  if (packed) launch(std::integral_constant<int, v>{});
  else launch(std::integral_constant<int, 1>{});
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

#define KILN_CROSS_ENTROPY_INSTANTIATE(T)                                                                        \
  template void cross_entropy_warp<T>(const T*, const int32_t*, T*, int64_t, int64_t, double, DeviceFault*,      \
                                      cudaStream_t);                                                             \
  template void cross_entropy_block<T>(const T*, const int32_t*, T*, int64_t, int64_t, double, DeviceFault*,     \
                                       cudaStream_t);                                                            \
  template void cross_entropy_backward_warp<T>(const T*, const int32_t*, const T*, T*, int64_t, int64_t, double, \
                                               DeviceFault*, cudaStream_t);                                      \
  template void cross_entropy_backward_block<T>(const T*, const int32_t*, const T*, T*, int64_t, int64_t,        \
                                                double, DeviceFault*, cudaStream_t);
#define KILN_CROSS_ENTROPY_INSTANTIATE_NEW(T)                                                                   \
  template void cross_entropy_rows_per_warp<T>(const T*, const int32_t*, T*, int64_t, int64_t, double, DeviceFault*, \
                                               cudaStream_t);                                                    \
  template void cross_entropy_backward_rows_per_warp<T>(const T*, const int32_t*, const T*, T*, int64_t, int64_t,  \
                                                        double, DeviceFault*, cudaStream_t);                     \
  template void cross_entropy_backward_registers<T>(const T*, const int32_t*, const T*, T*, int64_t, int64_t,      \
                                                    double, DeviceFault*, cudaStream_t);
KILN_CROSS_ENTROPY_INSTANTIATE_NEW(float)
KILN_CROSS_ENTROPY_INSTANTIATE_NEW(double)
#undef KILN_CROSS_ENTROPY_INSTANTIATE_NEW
KILN_CROSS_ENTROPY_INSTANTIATE(float)
KILN_CROSS_ENTROPY_INSTANTIATE(double)
#undef KILN_CROSS_ENTROPY_INSTANTIATE

}  // namespace kiln::cuda::softmax

namespace kiln::cuda {

void CudaBackend::cross_entropy(const TensorRef& logits, const TensorRef& targets, const TensorRef& losses,
                                double label_smoothing) {
  KILN_CHECK(logits.shape.size() == 2, ShapeError, "cuda cross_entropy: logits must be [N, C], got ", logits.shape);
  KILN_CHECK(targets.dtype == DType::i32, DTypeError, "cuda cross_entropy: targets must be i32, got ", targets.dtype);
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  visit_floating(logits.dtype, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    auto version = classes <= cuda::softmax::kSubWarpRowMax ? cuda::softmax::cross_entropy_rows_per_warp<T>
                   : classes <= cuda::softmax::kWarpRowMax ? cuda::softmax::cross_entropy_warp<T>
                                                           : cuda::softmax::cross_entropy_block<T>;
    version(logits.data<T>(), targets.data<int32_t>(), losses.data<T>(), rows, classes, label_smoothing, fault_, stream_);
  });
}

void CudaBackend::cross_entropy_backward(const TensorRef& logits, const TensorRef& targets,
                                         const TensorRef& grad_losses, const TensorRef& grad_logits,
                                         double label_smoothing) {
  KILN_CHECK(logits.shape.size() == 2, ShapeError, "cuda cross_entropy_backward: logits must be [N, C], got ",
             logits.shape);
  KILN_CHECK(targets.dtype == DType::i32, DTypeError, "cuda cross_entropy_backward: targets must be i32, got ",
             targets.dtype);
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  visit_floating(logits.dtype, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    // the registers version falls back to the block version where the row does not fit
    auto version = classes <= cuda::softmax::kSubWarpRowMax ? cuda::softmax::cross_entropy_backward_rows_per_warp<T>
                   : classes < cuda::softmax::kRegisterRowMin ? cuda::softmax::cross_entropy_backward_warp<T>
                                                              : cuda::softmax::cross_entropy_backward_registers<T>;
    version(logits.data<T>(), targets.data<int32_t>(), grad_losses.data<T>(), grad_logits.data<T>(), rows, classes,
            label_smoothing, fault_, stream_);
  });
}

}  // namespace kiln::cuda
