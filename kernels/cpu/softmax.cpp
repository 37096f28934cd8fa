// softmax and log_softmax over the middle axis: x [outer, n, inner] (contiguous) -> out, same
// shape. Core moves the softmax axis to the middle by viewing x as [outer, n, inner].
//
//   softmax:     out[p, k, q] = exp(x[p, k, q] - m) / s
//   log_softmax: out[p, k, q] = x[p, k, q] - m - log(s)
//   with m = max_k x[p, k, q] and s = sum_k exp(x[p, k, q] - m).
//
// Subtracting the max keeps every exp() in (0, 1], so nothing overflows however large the logits;
// exp and the sum run in double. Three passes over the axis (max; exp and sum; normalise), each
// reading a tile of up to kTile neighbouring columns at once so that reads stay contiguous when
// inner > 1 (the same layout trick as reduce.cpp). softmax rounds exp to T once before dividing
// (at most one more rounding than an all-double path, and half the exp calls). A slice whose
// max is +-inf or NaN gives NaN, as in PyTorch. out may alias x: each element is read before it
// is written.
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

constexpr int64_t kGrain = 16 * 1024;  // elements of x per parallel chunk (an exp each)
constexpr int64_t kTile = 64;          // columns q handled side by side

template <class T>
void softmax_kernel(const TensorRef& x, const TensorRef& out, bool log) {
  const int64_t n = x.shape[1], inner = x.shape[2];
  const T* px = x.data<T>();
  T* po = out.data<T>();
  parallel_tiles(x.shape[0], n, inner, kTile, kGrain, [&](int64_t p, int64_t q0, int64_t width) {
    std::array<double, kTile> max, sum;
    const T* xs = px + p * n * inner + q0;  // x[p, :, q0:q0 + width]
    T* os = po + p * n * inner + q0;

    std::fill(max.begin(), max.begin() + width, -std::numeric_limits<double>::infinity());
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < width; ++j) {
        const double v = xs[k * inner + j];
        if (v > max[j] || std::isnan(v)) max[j] = v;  // a NaN sticks: v > NaN is false
      }

    // softmax keeps each exp in out for the last pass, so every element costs one exp.
    std::fill(sum.begin(), sum.begin() + width, 0.0);
    for (int64_t k = 0; k < n; ++k)
      for (int64_t j = 0; j < width; ++j) {
        const double e = std::exp(xs[k * inner + j] - max[j]);
        sum[j] += e;
        if (!log) os[k * inner + j] = static_cast<T>(e);
      }

    if (log) {
      for (int64_t j = 0; j < width; ++j) sum[j] = std::log(sum[j]);
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < width; ++j) os[k * inner + j] = static_cast<T>(xs[k * inner + j] - max[j] - sum[j]);
    } else {
      for (int64_t k = 0; k < n; ++k)
        for (int64_t j = 0; j < width; ++j) os[k * inner + j] = static_cast<T>(os[k * inner + j] / sum[j]);
    }
  });
}

}  // namespace

void CpuBackend::softmax(const TensorRef& x, const TensorRef& out, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  KILN_CHECK(x.shape.size() == 3, ShapeError, "cpu ", op, ": x must be [outer, n, inner], got ",
             x.shape);
  KILN_CHECK(out.dtype == x.dtype, DTypeError, "cpu ", op, ": out is ", out.dtype, ", x is ",
             x.dtype);
  visit_arithmetic(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) softmax_kernel<T>(x, out, log);
    else KILN_FAIL(DTypeError, "cpu backend: ", op, " does not take ", x.dtype);
  });
}

}  // namespace kiln::cpu
