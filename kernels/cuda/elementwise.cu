// Elementwise kernels on the GPU: fill, arange, copy (with dtype conversion), unary,
// unary_backward, binary. Every operand is walked through a Layout (layout.cuh), so views and
// broadcasts need no copy; when all operands are contiguous the index is the offset itself.
//
// One thread per element in a grid-stride loop. These kernels are bound by memory bandwidth:
// each element is read once per input and written once, so the work per byte is small and the
// launch configuration matters little beyond filling the GPU. The formulas match the CPU
// backend's (kernels/cpu/elementwise.cpp) operation by operation; results agree up to the last
// bits of the math library's exp/log/tanh/erf.
#include <cmath>
#include <cstdint>

#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda {

namespace {

template <class Fn>
void visit(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::i32: return fn(int32_t{});
    case DType::u8: return fn(uint8_t{});
    case DType::bf16: return fn(bf16{});
  }
  KILN_FAIL(DTypeError, "cuda ", op, ": unknown dtype");
}

template <class T>
__global__ void fill_kernel(T* out, Layout lo, int64_t n, T value) {
  KILN_GRID_STRIDE(i, n) out[lo.at(i)] = value;
}

template <class T>
__global__ void arange_kernel(T* out, int64_t offset, int64_t n, double start, double step) {
  // __dadd_rn/__dmul_rn round each step as the CPU does; a fused multiply-add would differ.
  KILN_GRID_STRIDE(i, n) out[offset + i] = cast<T>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
}

// The conversion rules are cast's (layout.cuh): the CPU's, bf16 through f32.
template <class S, class D>
__global__ void copy_kernel(const S* src, Layout ls, D* out, Layout lo, int64_t n) {
  KILN_GRID_STRIDE(i, n) out[lo.at(i)] = cast<D>(src[ls.at(i)]);
}

template <class T>
__device__ T normal_cdf(T v) { return T(0.5) * (T(1) + erf(v * T(0.70710678118654752440))); }
template <class T>
__device__ T normal_pdf(T v) { return T(0.39894228040143267794) * exp(T(-0.5) * v * v); }

// Whether v is finite: its exponent bits are not all ones (NaN and the infinities have them all
// set). A test of the bits rather than isfinite(v) or v - v == 0, which a compiler allowed to
// assume finite math (-use_fast_math, say) may fold to true.
__device__ bool finite_bits(float v) { return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u; }
__device__ bool finite_bits(double v) {
  return (static_cast<unsigned long long>(__double_as_longlong(v)) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

template <class T>
__device__ T apply_unary(UnaryOp op, T v, T alpha) {
  switch (op) {
    case UnaryOp::neg: return -v;
    case UnaryOp::exp: return exp(v);
    case UnaryOp::log: return log(v);
    case UnaryOp::sqrt: return sqrt(v);
    case UnaryOp::abs: return fabs(v);
    case UnaryOp::sign: return static_cast<T>((T(0) < v) - (v < T(0)));
    case UnaryOp::relu: return v < T(0) ? T(0) : v;
    case UnaryOp::leaky_relu: return v > T(0) ? v : alpha * v;
    case UnaryOp::gelu: return v * normal_cdf(v);
    case UnaryOp::tanh: return tanh(v);
    case UnaryOp::sigmoid: return T(1) / (T(1) + exp(-v));
    case UnaryOp::pow: return pow(v, alpha);
    case UnaryOp::add_scalar: return v + alpha;
    case UnaryOp::mul_scalar: return v * alpha;
    case UnaryOp::isfinite: return finite_bits(v) ? T(1) : T(0);
  }
  return v;
}

// i32: arithmetic in 64 bits, wrapped back to 32 bits as on the CPU.
__device__ int32_t apply_unary_int(UnaryOp op, int32_t v, int64_t alpha) {
  switch (op) {
    case UnaryOp::neg: return static_cast<int32_t>(-int64_t{v});
    case UnaryOp::abs: return static_cast<int32_t>(v < 0 ? -int64_t{v} : int64_t{v});
    case UnaryOp::sign: return (0 < v) - (v < 0);
    case UnaryOp::relu: return v < 0 ? 0 : v;
    case UnaryOp::add_scalar: return static_cast<int32_t>(int64_t{v} + alpha);
    case UnaryOp::mul_scalar: return static_cast<int32_t>(int64_t{v} * alpha);
    case UnaryOp::isfinite: return 1;  // every integer is finite
    default: return v;
  }
}

// Floating kernels compute in C = compute_t<T> (float for bf16) and round once at the store.
template <class T>
__global__ void unary_kernel(UnaryOp op, const T* x, Layout lx, T* out, Layout lo, int64_t n, double alpha) {
  using C = compute_t<T>;
  KILN_GRID_STRIDE(i, n) {
    if constexpr (std::is_floating_point_v<C>)
      out[lo.at(i)] = cast<T>(apply_unary<C>(op, cast<C>(x[lx.at(i)]), static_cast<C>(alpha)));
    else out[lo.at(i)] = apply_unary_int(op, x[lx.at(i)], static_cast<int64_t>(alpha));
  }
}

template <class T>
__global__ void unary_backward_kernel(UnaryOp op, const T* x, Layout lx, const T* g, Layout lg, T* out, Layout lo,
                                      int64_t n, compute_t<T> alpha) {
  using C = compute_t<T>;
  KILN_GRID_STRIDE(i, n) {
    C v = cast<C>(x[lx.at(i)]), gv = cast<C>(g[lg.at(i)]), r = gv;
    if (op == UnaryOp::relu) r = v <= C(0) ? C(0) : gv;
    else if (op == UnaryOp::leaky_relu) r = v > C(0) ? gv : gv * alpha;
    else if (op == UnaryOp::gelu) r = gv * (normal_cdf(v) + v * normal_pdf(v));
    out[lo.at(i)] = cast<T>(r);
  }
}

__device__ int32_t int_pow(int32_t base, int32_t e) {
  int64_t result = 1, b = base;
  while (e > 0) {
    if (e & 1) result = static_cast<int32_t>(result * b);
    b = static_cast<int32_t>(b * b);
    e >>= 1;
  }
  return static_cast<int32_t>(result);
}

template <class T>
__device__ T apply_binary(BinaryOp op, T x, T y) {
  using W = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
  switch (op) {
    case BinaryOp::add: return static_cast<T>(W{x} + W{y});
    case BinaryOp::sub: return static_cast<T>(W{x} - W{y});
    case BinaryOp::mul: return static_cast<T>(W{x} * W{y});
    case BinaryOp::div:
      if constexpr (std::is_integral_v<T>) return y == 0 ? T(0) : static_cast<T>(W{x} / W{y});  // the CPU throws
      else return x / y;
    case BinaryOp::pow:
      if constexpr (std::is_same_v<T, int32_t>) return y < 0 ? T(0) : int_pow(x, y);  // the CPU throws on y < 0
      else if constexpr (std::is_integral_v<T>) return static_cast<T>(int_pow(x, y));
      else return pow(x, y);
    case BinaryOp::maximum: return x != x || x > y ? x : y;  // NaN wins, as on the CPU
    case BinaryOp::minimum: return x != x || x < y ? x : y;
    case BinaryOp::eq: return static_cast<T>(x == y);
    case BinaryOp::ne: return static_cast<T>(x != y);
    case BinaryOp::gt: return static_cast<T>(x > y);
    case BinaryOp::ge: return static_cast<T>(x >= y);
    case BinaryOp::lt: return static_cast<T>(x < y);
    case BinaryOp::le: return static_cast<T>(x <= y);
  }
  return x;
}

template <class T>
__global__ void binary_kernel(BinaryOp op, const T* a, Layout la, const T* b, Layout lb, T* out, Layout lo, int64_t n) {
  using C = compute_t<T>;
  KILN_GRID_STRIDE(i, n) out[lo.at(i)] = cast<T>(apply_binary<C>(op, cast<C>(a[la.at(i)]), cast<C>(b[lb.at(i)])));
}

}  // namespace

void CudaBackend::fill(const TensorRef& out, double value) {
  int64_t n = out.numel();
  if (n == 0) return;
  visit(out.dtype, "fill", [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<blocks_for(n), kThreads, 0, stream_>>>(static_cast<T*>(out.buffer), layout_of(out, "fill"), n,
                                                            cast<T>(value));
  });
  KILN_CUDA_LAUNCH_CHECK("fill");
}

void CudaBackend::arange(const TensorRef& out, double start, double step) {
  int64_t n = out.numel();
  if (n == 0) return;
  visit(out.dtype, "arange", [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<blocks_for(n), kThreads, 0, stream_>>>(static_cast<T*>(out.buffer), out.offset, n, start, step);
  });
  KILN_CUDA_LAUNCH_CHECK("arange");
}

void CudaBackend::copy(const TensorRef& src, const TensorRef& out) {
  KILN_CHECK(src.numel() == out.numel(), ShapeError, "cuda copy: src ", src.shape, " and out ", out.shape,
             " hold different numbers of elements");
  int64_t n = out.numel();
  if (n == 0) return;
  Layout ls = layout_of(src, "copy"), lo = layout_of(out, "copy");
  visit(src.dtype, "copy", [&](auto s) {
    visit(out.dtype, "copy", [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      copy_kernel<S, D><<<blocks_for(n), kThreads, 0, stream_>>>(static_cast<const S*>(src.buffer), ls,
                                                                 static_cast<D*>(out.buffer), lo, n);
    });
  });
  KILN_CUDA_LAUNCH_CHECK("copy");
}

void CudaBackend::unary(UnaryOp op, const TensorRef& x, const TensorRef& out, double alpha) {
  int64_t n = out.numel();
  if (n == 0) return;
  const char* name = unary_op_name(op).data();
  visit(x.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, uint8_t>) {
      KILN_FAIL(DTypeError, "cuda backend: unary ", name, " does not take u8");
    } else {
      unary_kernel<T><<<blocks_for(n), kThreads, 0, stream_>>>(op, static_cast<const T*>(x.buffer), layout_of(x, name),
                                                               static_cast<T*>(out.buffer), layout_of(out, name), n, alpha);
    }
  });
  KILN_CUDA_LAUNCH_CHECK(name);
}

void CudaBackend::unary_backward(UnaryOp op, const TensorRef& x, const TensorRef& grad, const TensorRef& out,
                                 double alpha) {
  KILN_CHECK(op == UnaryOp::relu || op == UnaryOp::leaky_relu || op == UnaryOp::gelu, ValueError,
             "cuda unary_backward: ", unary_op_name(op), " has a composed formula, not a fused kernel");
  int64_t n = out.numel();
  if (n == 0) return;
  visit(x.dtype, "unary_backward", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_floating_point_v<compute_t<T>>) {
      KILN_FAIL(DTypeError, "cuda backend: unary_backward takes f32, f64 or bf16");
    } else {
      unary_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream_>>>(
          op, static_cast<const T*>(x.buffer), layout_of(x, "unary_backward"), static_cast<const T*>(grad.buffer),
          layout_of(grad, "unary_backward"), static_cast<T*>(out.buffer), layout_of(out, "unary_backward"), n,
          static_cast<compute_t<T>>(alpha));
    }
  });
  KILN_CUDA_LAUNCH_CHECK("unary_backward");
}

void CudaBackend::binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  int64_t n = out.numel();
  if (n == 0) return;
  const char* name = binary_op_name(op).data();
  visit(a.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, uint8_t>) {
      if (op < BinaryOp::eq) KILN_FAIL(DTypeError, "cuda backend: binary ", name, " does not take u8");
      binary_kernel<T><<<blocks_for(n), kThreads, 0, stream_>>>(op, static_cast<const T*>(a.buffer), layout_of(a, name),
                                                                static_cast<const T*>(b.buffer), layout_of(b, name),
                                                                static_cast<T*>(out.buffer), layout_of(out, name), n);
    } else {
      binary_kernel<T><<<blocks_for(n), kThreads, 0, stream_>>>(op, static_cast<const T*>(a.buffer), layout_of(a, name),
                                                                static_cast<const T*>(b.buffer), layout_of(b, name),
                                                                static_cast<T*>(out.buffer), layout_of(out, name), n);
    }
  });
  KILN_CUDA_LAUNCH_CHECK(name);
}

}  // namespace kiln::cuda
