// Batch normalisation over x [N, C, S] per channel c, M = N * S values a channel (S: the axes
// after C, 1 for [N, C]):
//   stats     mean[c] = sum x / M, var[c] = sum (x - mean[c])^2 / M (biased), two passes in double
//   apply     y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]
//   backward  xhat = (x - mean[c]) * invstd[c]; grad_bias[c] = sum g, grad_weight[c] = sum g * xhat,
//             grad_x = weight[c] * invstd[c] * (g - (grad_bias[c] + xhat * grad_weight[c]) / M)
// (core/backend.h). The sums accumulate in double, in one fixed order per channel; channels are
// independent, so they split over threads. The two-pass variance keeps its digits when the mean
// is large against the spread (a sum of squares minus the squared mean would not).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

namespace {

struct Dims {
  int64_t n, c, s;
};

Dims dims_of(const char* op, const TensorRef& x) {
  KILN_CHECK(x.shape.size() == 3 && x.is_contiguous(), ShapeError, "cpu ", op,
             ": x must be a contiguous [N, C, S], got ", x.shape);
  return {x.shape[0], x.shape[1], x.shape[2]};
}

// fn(T{}) for f32 and f64; other dtypes are refused, naming the op.
template <class Fn>
void visit_floating(const char* op, DType t, Fn&& fn) {
  visit_arithmetic(t, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) fn(T{});
    else KILN_FAIL(DTypeError, "cpu backend: ", op, " does not take ", t);
  });
}

// Calls fn(e) for the offset e of each of channel c's M values, plane by plane.
template <class Fn>
void for_values(const Dims& d, int64_t c, Fn&& fn) {
  for (int64_t i = 0; i < d.n; ++i)
    for (int64_t k = 0; k < d.s; ++k) fn((i * d.c + c) * d.s + k);
}

// Calls fn(c) for each channel, spread over the thread pool (a channel is M values of work).
template <class Fn>
void for_channels(const Dims& d, Fn&& fn) {
  const int64_t grain = std::max<int64_t>(1, 64 * 1024 / std::max<int64_t>(d.n * d.s, 1));
  parallel_for(d.c, grain, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) fn(c);
  });
}

}  // namespace

void CpuBackend::batch_norm_stats(const TensorRef& x, const TensorRef& mean, const TensorRef& var) {
  const Dims d = dims_of("batch_norm_stats", x);
  visit_floating("batch_norm_stats", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data<T>();
    T* m = mean.data<T>();
    T* v = var.data<T>();
    const double count = static_cast<double>(d.n * d.s);
    for_channels(d, [&](int64_t c) {
      double sum = 0;
      for_values(d, c, [&](int64_t e) { sum += xs[e]; });
      const double mu = sum / count;
      double squares = 0;
      for_values(d, c, [&](int64_t e) {
        const double centred = xs[e] - mu;
        squares += centred * centred;
      });
      m[c] = static_cast<T>(mu);
      v[c] = static_cast<T>(squares / count);
    });
  });
}

void CpuBackend::batch_norm_apply(const TensorRef& x, const TensorRef& mean, const TensorRef& invstd,
                                  const TensorRef& weight, const TensorRef& bias, const TensorRef& y) {
  const Dims d = dims_of("batch_norm_apply", x);
  visit_floating("batch_norm_apply", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data<T>();
    const T* m = mean.data<T>();
    const T* r = invstd.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    T* ys = y.data<T>();
    for_channels(d, [&](int64_t c) {
      for_values(d, c, [&](int64_t e) {
        T v = (xs[e] - m[c]) * r[c];
        if (w) v *= w[c];
        if (b) v += b[c];
        ys[e] = v;
      });
    });
  });
}

void CpuBackend::batch_norm_backward(const TensorRef& x, const TensorRef& grad, const TensorRef& mean,
                                     const TensorRef& invstd, const TensorRef& weight, const TensorRef& grad_x,
                                     const TensorRef& grad_weight, const TensorRef& grad_bias) {
  const Dims d = dims_of("batch_norm_backward", x);
  visit_floating("batch_norm_backward", x.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = x.data<T>();
    const T* g = grad.data<T>();
    const T* m = mean.data<T>();
    const T* r = invstd.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    T* gx = grad_x.data<T>();
    T* gw = grad_weight.data<T>();
    T* gb = grad_bias.data<T>();
    const double count = static_cast<double>(d.n * d.s);
    for_channels(d, [&](int64_t c) {
      double sum_g = 0, sum_gx = 0;
      for_values(d, c, [&](int64_t e) {
        sum_g += g[e];
        sum_gx += static_cast<double>(g[e]) * ((static_cast<double>(xs[e]) - m[c]) * r[c]);
      });
      gb[c] = static_cast<T>(sum_g);
      gw[c] = static_cast<T>(sum_gx);
      const double scale = (w ? static_cast<double>(w[c]) : 1.0) * r[c];
      const double mean_g = sum_g / count, mean_gx = sum_gx / count;
      for_values(d, c, [&](int64_t e) {
        const double xhat = (static_cast<double>(xs[e]) - m[c]) * r[c];
        gx[e] = static_cast<T>(scale * (g[e] - mean_g - xhat * mean_gx));
      });
    });
  });
}

}  // namespace kiln::cpu
