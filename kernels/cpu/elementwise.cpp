// Elementwise kernels: fill, arange, copy (with dtype conversion), unary, unary_backward, binary.
//
// Inputs take any strides (0 along broadcast dimensions), so views and broadcasts need no copy.
// One helper, for_each_row, walks a strided layout shared by the output and its inputs: it drops
// size-1 dimensions and merges neighbouring dimensions that lie back to back in every operand.
// Contiguous tensors thus become one flat row (the fast path: a plain loop the compiler
// vectorises) and only real broadcasts and views pay for an N-d index. The output may alias an
// input of the same layout (in-place ops): each element is read before it is written.
//
// Choices:
// - f32 is computed in float, as the GPU kernels do; double only where a sum is long (none here).
// - i32 arithmetic runs in 64 bits and wraps back to 32, so overflow is defined (as on the GPU)
//   instead of being undefined behaviour. Integer division truncates toward zero, as in C++;
//   division by zero and negative integer powers throw ValueError.
// - The scalar alpha of unary ops is first converted to the tensor's dtype (truncated for i32).
// - NaN: maximum/minimum propagate it (as PyTorch); sign(NaN) is 0 (as PyTorch).
// - isfinite writes 1 or 0 in x's dtype, through std::isfinite: kiln is built without -ffast-math
//   (whose finite-math assumption would let the compiler fold it to 1). Integers are all finite.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

namespace {

// Elements per parallel chunk: enough work to pay for handing a chunk to another thread.
constexpr int64_t kGrain = 32 * 1024;

[[noreturn]] void unsupported(std::string_view kernel, std::string_view op, DType dtype) {
  KILN_FAIL(DTypeError, "cpu backend: ", kernel, " ", op, " does not take ", dtype);
}

// ---- the strided walk ----

// Element offsets into each of K operands (operand 0 is the output).
template <size_t K>
using Offsets = std::array<int64_t, K>;

// Calls row(at, step, len) for runs of consecutive elements along the innermost (merged)
// dimension, in parallel chunks that together cover every element of ts[0]'s shape once:
// operand k's elements are data_k[at[k] + j * step[k]] for j in [0, len).
template <size_t K, class Row>
void for_each_row(const std::array<const TensorRef*, K>& ts, const Row& row) {
  const Shape& shape = ts[0]->shape;
  const int64_t numel = shape.numel();
  if (numel == 0) return;

  // Collapse the layout, innermost dimension first. Dimension d merges into the one inside it
  // when, in every operand, stepping once along d equals stepping across the whole inner one.
  std::vector<int64_t> dims;
  std::array<std::vector<int64_t>, K> strides;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;  // its stride never matters
    bool merge = !dims.empty();
    for (size_t k = 0; k < K && merge; ++k)
      merge = ts[k]->strides[d] == strides[k].back() * dims.back();
    if (merge) {
      dims.back() *= shape[d];
      continue;
    }
    dims.push_back(shape[d]);
    for (size_t k = 0; k < K; ++k) strides[k].push_back(ts[k]->strides[d]);
  }
  if (dims.empty()) {  // a scalar, or every size is 1
    dims.push_back(1);
    for (auto& s : strides) s.push_back(0);
  }
  Offsets<K> step;
  for (size_t k = 0; k < K; ++k) step[k] = strides[k][0];

  parallel_for(numel, kGrain, [&](int64_t begin, int64_t end) {
    // The N-d index of element `begin`, innermost dimension first.
    std::vector<int64_t> index(dims.size());
    int64_t rest = begin;
    for (size_t d = 0; d < dims.size(); ++d) {
      index[d] = rest % dims[d];
      rest /= dims[d];
    }
    for (int64_t pos = begin; pos < end;) {
      Offsets<K> at{};
      for (size_t k = 0; k < K; ++k)
        for (size_t d = 0; d < dims.size(); ++d) at[k] += index[d] * strides[k][d];
      const int64_t len = std::min(dims[0] - index[0], end - pos);
      row(at, step, len);
      pos += len;
      // Advance the index past the row, carrying into outer dimensions like an odometer.
      index[0] += len;
      for (size_t d = 0; d + 1 < dims.size() && index[d] == dims[d]; ++d) {
        index[d] = 0;
        ++index[d + 1];
      }
    }
  });
}

// out[i] = f()
template <class O, class F>
void map0(const TensorRef& out, F f) {
  O* o = out.data<O>();
  for_each_row<1>({&out}, [&](const Offsets<1>& at, const Offsets<1>& step, int64_t len) {
    O* ro = o + at[0];
    for (int64_t j = 0; j < len; ++j) ro[j * step[0]] = f();
  });
}

// out[i] = f(a[i])
template <class O, class A, class F>
void map1(const TensorRef& out, const TensorRef& a, F f) {
  O* o = out.data<O>();
  const A* pa = a.data<A>();
  for_each_row<2>({&out, &a}, [&](const Offsets<2>& at, const Offsets<2>& step, int64_t len) {
    O* ro = o + at[0];
    const A* ra = pa + at[1];
    if (step[0] == 1 && step[1] == 1) {
      for (int64_t j = 0; j < len; ++j) ro[j] = f(ra[j]);  // contiguous: vectorises
    } else {
      for (int64_t j = 0; j < len; ++j) ro[j * step[0]] = f(ra[j * step[1]]);
    }
  });
}

// out[i] = f(a[i], b[i])
template <class O, class A, class B, class F>
void map2(const TensorRef& out, const TensorRef& a, const TensorRef& b, F f) {
  O* o = out.data<O>();
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  for_each_row<3>({&out, &a, &b}, [&](const Offsets<3>& at, const Offsets<3>& step, int64_t len) {
    O* ro = o + at[0];
    const A* ra = pa + at[1];
    const B* rb = pb + at[2];
    if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
      for (int64_t j = 0; j < len; ++j) ro[j] = f(ra[j], rb[j]);
    } else {
      for (int64_t j = 0; j < len; ++j) ro[j * step[0]] = f(ra[j * step[1]], rb[j * step[2]]);
    }
  });
}

// ---- scalar helpers ----

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// The type i32 arithmetic runs in before it wraps back (see the top of the file).
template <class T>
using Wide = std::conditional_t<std::is_integral_v<T>, int64_t, T>;

// Phi(v), the standard normal CDF, and phi(v), its density.
template <class T>
T normal_cdf(T v) {
  return T(0.5) * (T(1) + std::erf(v / std::numbers::sqrt2_v<T>));
}
template <class T>
T normal_pdf(T v) {
  return std::exp(T(-0.5) * v * v) * (std::numbers::inv_sqrtpi_v<T> / std::numbers::sqrt2_v<T>);
}

// x ** y for i32 by repeated squaring in unsigned arithmetic: exact, and wraps on overflow.
int32_t int_pow(int32_t x, int32_t y) {
  KILN_CHECK(y >= 0, ValueError, "cpu binary pow: integers to negative integer powers (", x,
             " ** ", y, ") are not allowed; convert to a floating dtype first");
  uint32_t result = 1, base = static_cast<uint32_t>(x);
  for (uint32_t e = static_cast<uint32_t>(y); e != 0; e >>= 1) {
    if (e & 1u) result *= base;
    base *= base;
  }
  return static_cast<int32_t>(result);
}

// ---- unary ----

template <class T>
void unary_floating(UnaryOp op, const TensorRef& x, const TensorRef& out, T alpha) {
  auto run = [&](auto f) { map1<T, T>(out, x, f); };
  switch (op) {
    case UnaryOp::neg: return run([](T v) { return -v; });
    case UnaryOp::exp: return run([](T v) { return std::exp(v); });
    case UnaryOp::log: return run([](T v) { return std::log(v); });
    case UnaryOp::sqrt: return run([](T v) { return std::sqrt(v); });
    case UnaryOp::abs: return run([](T v) { return std::abs(v); });
    case UnaryOp::sign: return run([](T v) { return static_cast<T>((T(0) < v) - (v < T(0))); });
    case UnaryOp::relu: return run([](T v) { return v < T(0) ? T(0) : v; });  // NaN passes
    case UnaryOp::leaky_relu: return run([alpha](T v) { return v > T(0) ? v : alpha * v; });
    case UnaryOp::gelu: return run([](T v) { return v * normal_cdf(v); });
    case UnaryOp::tanh: return run([](T v) { return std::tanh(v); });
    // exp(-v) overflows to inf for v < -88 (f32), which still gives the right limit, 0.
    case UnaryOp::sigmoid: return run([](T v) { return T(1) / (T(1) + std::exp(-v)); });
    case UnaryOp::pow: return run([alpha](T v) { return std::pow(v, alpha); });
    case UnaryOp::add_scalar: return run([alpha](T v) { return v + alpha; });
    case UnaryOp::mul_scalar: return run([alpha](T v) { return v * alpha; });
    case UnaryOp::isfinite: return run([](T v) { return static_cast<T>(std::isfinite(v)); });
  }
}

// i32 takes the ops that stay integers.
void unary_i32(UnaryOp op, const TensorRef& x, const TensorRef& out, int32_t alpha) {
  using W = Wide<int32_t>;
  auto run = [&](auto f) { map1<int32_t, int32_t>(out, x, f); };
  auto wrap = [](W v) { return static_cast<int32_t>(v); };
  switch (op) {
    case UnaryOp::neg: return run([&](int32_t v) { return wrap(-W{v}); });
    case UnaryOp::abs: return run([&](int32_t v) { return wrap(v < 0 ? -W{v} : W{v}); });
    case UnaryOp::sign: return run([](int32_t v) { return (0 < v) - (v < 0); });
    case UnaryOp::relu: return run([](int32_t v) { return v < 0 ? 0 : v; });
    case UnaryOp::add_scalar: return run([&](int32_t v) { return wrap(W{v} + alpha); });
    case UnaryOp::mul_scalar: return run([&](int32_t v) { return wrap(W{v} * alpha); });
    case UnaryOp::isfinite: return run([](int32_t) { return 1; });
    default: unsupported("unary", unary_op_name(op), DType::i32);
  }
}

// out = grad * f'(x)
template <class T>
void unary_backward_floating(UnaryOp op, const TensorRef& x, const TensorRef& grad,
                             const TensorRef& out, T alpha) {
  auto run = [&](auto f) { map2<T, T, T>(out, x, grad, f); };
  switch (op) {
    // As PyTorch: the gradient at exactly 0 is 0 for relu and alpha for leaky_relu.
    case UnaryOp::relu: return run([](T v, T g) { return v <= T(0) ? T(0) : g; });
    case UnaryOp::leaky_relu: return run([alpha](T v, T g) { return v > T(0) ? g : g * alpha; });
    // d/dv [v * Phi(v)] = Phi(v) + v * phi(v)
    case UnaryOp::gelu:
      return run([](T v, T g) { return g * (normal_cdf(v) + v * normal_pdf(v)); });
    default:
      KILN_FAIL(ValueError, "cpu backend: unary_backward has no kernel for ", unary_op_name(op),
                " (only relu, leaky_relu and gelu; the others are compositions of ops)");
  }
}

// ---- binary ----

template <class T>
void binary_kernel(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  using W = Wide<T>;
  auto run = [&](auto f) { map2<T, T, T>(out, a, b, f); };
  switch (op) {
    case BinaryOp::add: return run([](T x, T y) { return static_cast<T>(W{x} + W{y}); });
    case BinaryOp::sub: return run([](T x, T y) { return static_cast<T>(W{x} - W{y}); });
    case BinaryOp::mul: return run([](T x, T y) { return static_cast<T>(W{x} * W{y}); });
    case BinaryOp::div:
      return run([](T x, T y) {
        if constexpr (std::is_integral_v<T>)
          KILN_CHECK(y != 0, ValueError, "cpu binary div: integer division by zero");
        return static_cast<T>(W{x} / W{y});  // in 64 bits, INT_MIN / -1 wraps instead of trapping
      });
    case BinaryOp::pow:
      return run([](T x, T y) {
        if constexpr (std::is_integral_v<T>) return int_pow(x, y);
        else return std::pow(x, y);
      });
    case BinaryOp::maximum: return run([](T x, T y) { return is_nan(x) || x > y ? x : y; });
    case BinaryOp::minimum: return run([](T x, T y) { return is_nan(x) || x < y ? x : y; });
    case BinaryOp::eq: return run([](T x, T y) { return static_cast<T>(x == y); });
    case BinaryOp::ne: return run([](T x, T y) { return static_cast<T>(x != y); });
    case BinaryOp::gt: return run([](T x, T y) { return static_cast<T>(x > y); });
    case BinaryOp::ge: return run([](T x, T y) { return static_cast<T>(x >= y); });
    case BinaryOp::lt: return run([](T x, T y) { return static_cast<T>(x < y); });
    case BinaryOp::le: return run([](T x, T y) { return static_cast<T>(x <= y); });
  }
}

}  // namespace

void CpuBackend::fill(const TensorRef& out, double value) {
  visit_arithmetic(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = static_cast<T>(value);
    map0<T>(out, [v] { return v; });
  });
}

// out is contiguous: element i is start + i * step, computed in double so that long f32 ranges
// do not drift.
void CpuBackend::arange(const TensorRef& out, double start, double step) {
  visit_arithmetic(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    parallel_for(out.numel(), kGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        o[i] = static_cast<T>(start + static_cast<double>(i) * step);
    });
  });
}

namespace {
// A value of dtype S as dtype O. Floating to integer truncates toward zero to 64 bits and then
// wraps to O's width, as PyTorch does (-4.0 -> u8 252), so every backend agrees where a plain C++
// cast would be undefined; out-of-range values beyond 64 bits stay undefined.
template <class O, class S>
O convert(S v) {
  if constexpr (std::is_floating_point_v<S> && std::is_integral_v<O>)
    return static_cast<O>(static_cast<int64_t>(v));
  else
    return static_cast<O>(v);
}
}  // namespace

void CpuBackend::copy(const TensorRef& src, const TensorRef& out) {
  KILN_CHECK(src.numel() == out.numel(), ShapeError, "cpu copy: src ", src.shape, " has ",
             src.numel(), " elements but out ", out.shape, " has ", out.numel());
  // out[i] = src[i] in row-major order. When the shapes differ (a reshaping copy), lay the
  // contiguous side out in the other's shape so that one walk serves both.
  TensorRef s = src, o = out;
  if (src.shape != out.shape) {
    if (src.is_contiguous()) {
      s.shape = out.shape;
      s.strides = contiguous_strides(out.shape);
    } else {
      KILN_CHECK(out.is_contiguous(), ShapeError, "cpu copy: src ", src.shape, " and out ",
                 out.shape, " differ in shape and neither is contiguous");
      o.shape = src.shape;
      o.strides = contiguous_strides(src.shape);
    }
  }
  visit_arithmetic(s.dtype, [&](auto src_tag) {
    visit_arithmetic(o.dtype, [&](auto out_tag) {
      using S = decltype(src_tag);
      using O = decltype(out_tag);
      map1<O, S>(o, s, [](S v) { return convert<O>(v); });
    });
  });
}

void CpuBackend::unary(UnaryOp op, const TensorRef& x, const TensorRef& out, double alpha) {
  visit_arithmetic(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
      unary_floating<T>(op, x, out, static_cast<T>(alpha));
    else if constexpr (std::is_same_v<T, int32_t>)
      unary_i32(op, x, out, static_cast<int32_t>(alpha));
    else unsupported("unary", unary_op_name(op), x.dtype);
  });
}

void CpuBackend::unary_backward(UnaryOp op, const TensorRef& x, const TensorRef& grad,
                                const TensorRef& out, double alpha) {
  KILN_CHECK(grad.dtype == x.dtype && out.dtype == x.dtype, DTypeError, "cpu unary_backward ",
             unary_op_name(op), ": x ", x.dtype, ", grad ", grad.dtype, " and out ", out.dtype,
             " must share one dtype");
  visit_arithmetic(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
      unary_backward_floating<T>(op, x, grad, out, static_cast<T>(alpha));
    else unsupported("unary_backward", unary_op_name(op), x.dtype);
  });
}

void CpuBackend::binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  KILN_CHECK(a.dtype == out.dtype && b.dtype == out.dtype, DTypeError, "cpu binary ",
             binary_op_name(op), ": a ", a.dtype, ", b ", b.dtype, " and out ", out.dtype,
             " must share one dtype");
  visit_arithmetic(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T> || std::is_same_v<T, int32_t>)
      binary_kernel<T>(op, a, b, out);
    else unsupported("binary", binary_op_name(op), out.dtype);
  });
}

}  // namespace kiln::cpu
