// Random draws on the GPU: the Philox4x32-10 stream of core/philox.h, exactly as the CPU draws
// it. One thread computes one Philox block (four elements): element i of a draw is a pure
// function of (seed, offset, i), so no state is shared between threads, and a draw of the same
// seed and offset gives the CPU's numbers (uniform: the same bits; normal: up to the last bits
// of the math library's log, sin and cos). Dropout draws its mask the same way, fused with the
// multiply (the CPU's bits: x * (T(u) > T(p) ? T(1 / (1 - p)) : 0)), for its forward and, from the
// same seed and offset, its backward.
#include <cstdint>
#include <type_traits>

#include "kiln/core/philox.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda {

namespace {

template <class T>
__global__ void uniform_kernel(T* out, int64_t n, double low, double high, philox::Key key) {
  const philox::Key at = key.resolve();
  const uint64_t seed = at.seed, offset = at.offset;
  int64_t blocks = (n + 3) / 4;
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks; b += int64_t{gridDim.x} * blockDim.x) {
    philox::Block words = philox::block(seed, offset + static_cast<uint64_t>(b));
    for (int r = 0; r < 4 && 4 * b + r < n; ++r)
      out[4 * b + r] = static_cast<T>(low + (high - low) * static_cast<double>(philox::to_unit(words[r])));
  }
}

template <class T>
__global__ void normal_kernel(T* out, int64_t n, double mean, double stddev, philox::Key key) {
  const philox::Key at = key.resolve();
  const uint64_t seed = at.seed, offset = at.offset;
  int64_t blocks = (n + 3) / 4;
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks; b += int64_t{gridDim.x} * blockDim.x) {
    philox::Block words = philox::block(seed, offset + static_cast<uint64_t>(b));
    // Box-Muller on the block's two pairs of uniforms; an odd n drops the last sine.
    for (int pair = 0; pair < 2; ++pair) {
      int64_t i = 4 * b + 2 * pair;
      if (i >= n) break;
      double r = sqrt(-2.0 * log(static_cast<double>(philox::to_unit(words[2 * pair]))));
      double theta = 2.0 * 3.14159265358979323846 * static_cast<double>(philox::to_unit(words[2 * pair + 1]));
      out[i] = static_cast<T>(mean + stddev * r * cos(theta));
      if (i + 1 < n) out[i + 1] = static_cast<T>(mean + stddev * r * sin(theta));
    }
  }
}

// A thread per Philox block: its four elements move as 16-byte loads and stores (one float4, or two
// double2) when x and out are 16-byte aligned; 4-byte loads left much of the bandwidth unused
// (history: NOTES.md). On [8192, 8192] f32 it moves
// 99% [fig cuda.dropout.kernel.8192x8192.pct-copy] of the copy bandwidth (H100 80GB HBM3,
// kernel-bench, docs/runs/2026-11-26-h100). bf16 compares, scales and multiplies in f32 (C) and
// rounds the product, as the CPU's widened f32 kernel does, four elements at a time (8 bytes).
// relu_x (or null): dropout's backward through the relu that made its input, 0 where relu_x <= 0.
template <class T>
__global__ void dropout_kernel(const T* x, const T* relu_x, T* out, int64_t n, compute_t<T> threshold,
                               compute_t<T> scale, philox::Key key, bool vec) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  using C = compute_t<T>;
  const philox::Key at = key.resolve();
  const uint64_t seed = at.seed, offset = at.offset;  // in a captured step, read from its replay value
  using V = std::conditional_t<sizeof(T) == 2, uint2, std::conditional_t<sizeof(T) == 4, float4, double2>>;
  constexpr int kPerVector = sizeof(V) / sizeof(T);
  int64_t blocks = (n + 3) / 4;
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < blocks; b += int64_t{gridDim.x} * blockDim.x) {
    philox::Block words = philox::block(seed, offset + static_cast<uint64_t>(b));
    C mask[4];
    for (int r = 0; r < 4; ++r) mask[r] = static_cast<C>(philox::to_unit(words[r])) > threshold ? scale : C(0);
    const int64_t i = 4 * b;
    if (vec && i + 3 < n) {
#pragma unroll
      for (int h = 0; h < 4 / kPerVector; ++h) {
        V v = *reinterpret_cast<const V*>(x + i + h * kPerVector);
        T* e = reinterpret_cast<T*>(&v);
#pragma unroll
        for (int r = 0; r < kPerVector; ++r) e[r] = cast<T>(cast<C>(e[r]) * mask[h * kPerVector + r]);
        if (relu_x) {
          const V rv = *reinterpret_cast<const V*>(relu_x + i + h * kPerVector);
          const T* re = reinterpret_cast<const T*>(&rv);
#pragma unroll
          for (int r = 0; r < kPerVector; ++r)
            if (cast<C>(re[r]) <= C(0)) e[r] = T{};
        }
        *reinterpret_cast<V*>(out + i + h * kPerVector) = v;
      }
    } else {
      for (int r = 0; r < 4 && i + r < n; ++r)
        out[i + r] = relu_x && cast<C>(relu_x[i + r]) <= C(0) ? T{} : cast<T>(cast<C>(x[i + r]) * mask[r]);
    }
  }
}

template <class Fn>
void visit_floating(const TensorRef& out, const char* op, Fn&& fn) {
  KILN_CHECK(out.is_contiguous(), ValueError, "cuda ", op, ": writes a contiguous tensor");
  if (out.dtype == DType::f32) return fn(float{});
  if (out.dtype == DType::f64) return fn(double{});
  KILN_FAIL(DTypeError, "cuda backend: ", op, " does not take ", out.dtype, " (random draws are f32 or f64)");
}

}  // namespace

void CudaBackend::uniform(const TensorRef& out, double low, double high, const philox::Key& key) {
  int64_t n = out.numel();
  if (n == 0) return;
  visit_floating(out, "uniform", [&](auto tag) {
    using T = decltype(tag);
    uniform_kernel<T><<<blocks_for((n + 3) / 4), kThreads, 0, stream_>>>(out.data<T>(), n, low, high, key);
  });
  KILN_CUDA_LAUNCH_CHECK("uniform");
}

void CudaBackend::normal(const TensorRef& out, double mean, double stddev, const philox::Key& key) {
  int64_t n = out.numel();
  if (n == 0) return;
  visit_floating(out, "normal", [&](auto tag) {
    using T = decltype(tag);
    normal_kernel<T><<<blocks_for((n + 3) / 4), kThreads, 0, stream_>>>(out.data<T>(), n, mean, stddev, key);
  });
  KILN_CUDA_LAUNCH_CHECK("normal");
}

void CudaBackend::dropout(const TensorRef& x, const TensorRef& out, double p, const philox::Key& key) {
  dropout_relu(x, TensorRef{}, out, p, key);
}

void CudaBackend::dropout_relu(const TensorRef& x, const TensorRef& relu_x, const TensorRef& out, double p,
                               const philox::Key& key) {
  KILN_CHECK(x.is_contiguous() && x.dtype == out.dtype && x.numel() == out.numel(), ValueError,
             "cuda backend: dropout takes contiguous x and out of one dtype and size");
  KILN_CHECK(!relu_x.defined() || (relu_x.is_contiguous() && relu_x.dtype == x.dtype && relu_x.numel() == x.numel()),
             ValueError, "cuda backend: dropout's relu_x must be contiguous, of x's dtype and size");
  int64_t n = out.numel();
  if (n == 0) return;
  KILN_CHECK(out.is_contiguous(), ValueError, "cuda dropout: writes a contiguous tensor");
  visit_floating_bf16(out.dtype, "dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const size_t align = 4 * sizeof(T) < 16 ? 4 * sizeof(T) : 16;
    const T* mask = relu_x.defined() ? relu_x.data<T>() : nullptr;
    const bool vec = reinterpret_cast<uintptr_t>(x.data<T>()) % align == 0 &&
                     reinterpret_cast<uintptr_t>(out.data<T>()) % align == 0 &&
                     reinterpret_cast<uintptr_t>(mask) % align == 0;
    launch_dependent(dropout_kernel<T>, blocks_for((n + 3) / 4), kThreads, 0, stream_, x.data<T>(), mask, out.data<T>(),
                     n, static_cast<C>(p), static_cast<C>(1.0 / (1.0 - p)), key, vec);
  });
  KILN_CUDA_LAUNCH_CHECK("dropout");
}

}  // namespace kiln::cuda
