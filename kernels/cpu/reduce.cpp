// Reductions over the middle axis: x [outer, n, inner] (contiguous) -> out [outer, inner].
// Core turns any set of reduced axes into this form, so one kernel serves sum(x, {1, 2}) and
// argmax(x, -1) alike.
//
//   sum, mean     f32/f64 accumulate in double; sum also takes i32 (64-bit sum, wrapped to i32).
//                 An empty axis (n == 0) sums to 0; its mean is NaN (0 / 0, as PyTorch).
//   max, min      f32/f64/i32. NaN wins: any NaN in the slice makes the result NaN.
//   argmax/argmin i32 index in [0, n) of the first extreme; a NaN counts as the extreme, and the
//                 first NaN wins (as PyTorch). max/min/argmax/argmin of an empty axis throw.
//
// Memory order: for each outer row, a tile of up to kTile neighbouring outputs accumulates
// together while k walks the axis, so every read x[p, k, q0 .. q0 + kTile) is contiguous even
// when inner > 1 (a naive loop per output would stride by `inner` through memory). The tiles
// are split over threads; each output is summed in the same order whatever the thread count.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kGrain = 32 * 1024;  // elements of x per parallel chunk
constexpr int64_t kTile = 64;          // outputs reduced side by side

template <class T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// The smallest and largest values of T, infinities for floating types.
template <class T>
constexpr T lowest() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <class T>
constexpr T highest() {
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}

// Each reduction is a small struct: Acc is the running state of one output, init() its start,
// step(acc, value, k) folds in x[p, k, q], and result(acc, n) is what out receives.

template <class T>
struct Sum {
  using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  Acc init() const { return 0; }
  void step(Acc& acc, T v, int64_t) const { acc += v; }
  T result(Acc acc, int64_t) const { return static_cast<T>(acc); }
};

template <class T>
struct Mean {
  using Acc = double;
  Acc init() const { return 0; }
  void step(Acc& acc, T v, int64_t) const { acc += v; }
  T result(Acc acc, int64_t n) const {
    if (n == 0) return std::numeric_limits<T>::quiet_NaN();  // 0 / 0, as PyTorch
    return static_cast<T>(acc / static_cast<double>(n));
  }
};

template <class T, bool kMax>
struct Extreme {
  using Acc = T;
  Acc init() const { return kMax ? lowest<T>() : highest<T>(); }
  void step(Acc& acc, T v, int64_t) const {
    if (is_nan(v) || (kMax ? v > acc : v < acc)) acc = v;  // once acc is NaN, nothing beats it
  }
  T result(Acc acc, int64_t) const { return acc; }
};

template <class T, bool kMax>
struct ArgExtreme {
  struct Acc {
    T best;
    int32_t index;
  };
  // Index 0 with the identity value: a slice of all -inf (or all INT_MIN) answers 0.
  Acc init() const { return {kMax ? lowest<T>() : highest<T>(), 0}; }
  void step(Acc& acc, T v, int64_t k) const {
    if (is_nan(acc.best)) return;  // the first NaN stays
    if (is_nan(v) || (kMax ? v > acc.best : v < acc.best)) acc = {v, static_cast<int32_t>(k)};
  }
  int32_t result(const Acc& acc, int64_t) const { return acc.index; }
};

// out[p, q] = R over k of x[p, k, q]
template <class T, class R>
void reduce_kernel(const TensorRef& x, const TensorRef& out, R r) {
  using Out = decltype(r.result(r.init(), 0));
  const int64_t n = x.shape[1], inner = x.shape[2];
  const T* px = x.data<T>();
  Out* po = out.data<Out>();
  parallel_tiles(x.shape[0], n, inner, kTile, kGrain, [&](int64_t p, int64_t q0, int64_t width) {
    const T* slice = px + p * n * inner + q0;  // x[p, :, q0:q0 + width]
    if (width == 1) {  // a single column (always, when inner == 1): keep its state in a register
      typename R::Acc a = r.init();
      for (int64_t k = 0; k < n; ++k) r.step(a, slice[k * inner], k);
      po[p * inner + q0] = r.result(a, n);
      return;
    }
    std::array<typename R::Acc, kTile> acc;
    std::fill(acc.begin(), acc.begin() + width, r.init());
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < width; ++j) r.step(acc[j], slice[k * inner + j], k);
    for (int64_t j = 0; j < width; ++j) po[p * inner + q0 + j] = r.result(acc[j], n);
  });
}

[[noreturn]] void unsupported(ReduceOp op, DType dtype) {
  KILN_FAIL(DTypeError, "cpu backend: reduce ", reduce_op_name(op), " does not take ", dtype);
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const TensorRef& x, const TensorRef& out) {
  KILN_CHECK(x.shape.size() == 3, ShapeError, "cpu reduce ", reduce_op_name(op),
             ": x must be [outer, n, inner], got ", x.shape);
  const bool is_arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  KILN_CHECK(out.dtype == (is_arg ? DType::i32 : x.dtype), DTypeError, "cpu reduce ",
             reduce_op_name(op), ": out is ", out.dtype, ", expected ",
             is_arg ? DType::i32 : x.dtype);
  KILN_CHECK(x.shape[1] > 0 || op == ReduceOp::sum || op == ReduceOp::mean, ValueError,
             "cpu reduce ", reduce_op_name(op), ": cannot reduce an empty axis (x ", x.shape,
             " as [outer, n, inner])");
  KILN_CHECK(x.shape[1] <= std::numeric_limits<int32_t>::max() || !is_arg, ValueError,
             "cpu reduce ", reduce_op_name(op), ": axis of ", x.shape[1],
             " elements is too long for i32 indices");

  visit_arithmetic(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr bool floating = std::is_floating_point_v<T>;
    constexpr bool i32 = std::is_same_v<T, int32_t>;
    switch (op) {
      case ReduceOp::sum:
        if constexpr (floating || i32) return reduce_kernel<T>(x, out, Sum<T>{});
        break;
      case ReduceOp::mean:
        if constexpr (floating) return reduce_kernel<T>(x, out, Mean<T>{});
        break;
      case ReduceOp::max:
        if constexpr (floating || i32) return reduce_kernel<T>(x, out, Extreme<T, true>{});
        break;
      case ReduceOp::min:
        if constexpr (floating || i32) return reduce_kernel<T>(x, out, Extreme<T, false>{});
        break;
      case ReduceOp::argmax:
        if constexpr (floating || i32) return reduce_kernel<T>(x, out, ArgExtreme<T, true>{});
        break;
      case ReduceOp::argmin:
        if constexpr (floating || i32) return reduce_kernel<T>(x, out, ArgExtreme<T, false>{});
        break;
    }
    unsupported(op, x.dtype);
  });
}

}  // namespace kiln::cpu
