// Cross-entropy of logits [N, C] against i32 targets [N], log-softmax fused in, per sample:
//
//   losses[i] = (1 - s) * -log p[i, t_i] + s * mean_c(-log p[i, c]),   p = softmax(logits[i])
//   grad_logits[i, c] = grad_losses[i] * (p[i, c] - (1 - s) * [c == t_i] - s / C)
//
// with s the label smoothing (PyTorch's definition: the target distribution is (1 - s) one-hot
// plus s spread uniformly over the C classes). With lse = log sum_c exp(logits[i, c]),
// -log p[i, c] = lse - logits[i, c], so the smoothing term is lse - mean_c(logits[i, c]) and one
// pass over the row gives everything. lse subtracts the row's max first (no overflow) and sums in
// double. one_hot builds [N, C] from i32 indices.
//
// Special values, as PyTorch: a -inf logit off the target has probability 0 and leaves the loss
// finite (with smoothing, its -log p is +inf, and so is the loss); the target at -inf gives +inf;
// a row holding +inf or NaN, or only -inf, gives NaN, loss and gradient.
//
// A target outside [0, C) would read past the row; the CPU checks every target before any work
// and throws ValueError naming the sample, its value and C. (ignore_index is not supported.)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kGrain = 16 * 1024;  // logits per parallel chunk (each costs an exp or two)

// Rows of at least one grain's worth of elements each.
int64_t rows_per_chunk(int64_t row_length) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, row_length));
}

// Every entry of `indices` (what the op calls a `noun`) must lie in [0, classes).
void check_indices(const char* op, const char* noun, const TensorRef& indices, int64_t classes) {
  KILN_CHECK(indices.dtype == DType::i32, DTypeError, "cpu ", op, ": ", noun,
             " must be i32, got ", indices.dtype);
  const int32_t* t = indices.data<int32_t>();
  for (int64_t i = 0; i < indices.numel(); ++i)
    KILN_CHECK(t[i] >= 0 && t[i] < classes, ValueError, "cpu ", op, ": ", noun, " ", t[i],
               " of sample ", i, " is outside [0, ", classes, ")");
}

// log sum_c exp(row[c]), shifted by the row's max so that no exp overflows.
template <class T>
double log_sum_exp(const T* row, int64_t classes) {
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < classes; ++c) max = std::max<double>(max, row[c]);
  double sum = 0;
  for (int64_t c = 0; c < classes; ++c) sum += std::exp(row[c] - max);
  return max + std::log(sum);
}

template <class T>
void cross_entropy_kernel(const TensorRef& logits, const TensorRef& targets,
                          const TensorRef& losses, double s) {
  const int64_t n = logits.shape[0], classes = logits.shape[1];
  const T* x = logits.data<T>();
  const int32_t* t = targets.data<int32_t>();
  T* loss = losses.data<T>();
  parallel_for(n, rows_per_chunk(classes), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * classes;  // logits[i, :]
      const double lse = log_sum_exp(row, classes);
      double total = 0;
      for (int64_t c = 0; c < classes; ++c) total += row[c];
      const double nll = lse - row[t[i]];                                 // -log p[i, t_i]
      const double smooth = lse - total / static_cast<double>(classes);  // mean_c(-log p[i, c])
      // Without smoothing the term is left out, not multiplied by 0: a -inf logit off the target
      // makes it +inf, and 0 * inf would turn a finite loss into NaN (PyTorch adds it only for s > 0).
      loss[i] = static_cast<T>(s > 0 ? (1.0 - s) * nll + s * smooth : nll);
    }
  });
}

template <class T>
void cross_entropy_backward_kernel(const TensorRef& logits, const TensorRef& targets,
                                   const TensorRef& grad_losses, const TensorRef& grad_logits,
                                   double s) {
  const int64_t n = logits.shape[0], classes = logits.shape[1];
  const T* x = logits.data<T>();
  const int32_t* t = targets.data<int32_t>();
  const T* gl = grad_losses.data<T>();
  T* gx = grad_logits.data<T>();
  const double uniform = s / static_cast<double>(classes);
  parallel_for(n, rows_per_chunk(classes), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T* row = x + i * classes;
      const double lse = log_sum_exp(row, classes);
      const double g = gl[i];
      for (int64_t c = 0; c < classes; ++c) {
        const double target = (c == t[i] ? 1.0 - s : 0.0) + uniform;
        gx[i * classes + c] = static_cast<T>(g * (std::exp(row[c] - lse) - target));
      }
    }
  });
}

}  // namespace

void CpuBackend::cross_entropy(const TensorRef& logits, const TensorRef& targets,
                               const TensorRef& losses, double label_smoothing) {
  KILN_CHECK(logits.shape.size() == 2, ShapeError, "cpu cross_entropy: logits must be [N, C], got ",
             logits.shape);
  check_indices("cross_entropy", "target", targets, logits.shape[1]);
  visit_arithmetic(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
      cross_entropy_kernel<T>(logits, targets, losses, label_smoothing);
    else KILN_FAIL(DTypeError, "cpu backend: cross_entropy does not take ", logits.dtype);
  });
}

void CpuBackend::cross_entropy_backward(const TensorRef& logits, const TensorRef& targets,
                                        const TensorRef& grad_losses, const TensorRef& grad_logits,
                                        double label_smoothing) {
  KILN_CHECK(logits.shape.size() == 2, ShapeError,
             "cpu cross_entropy_backward: logits must be [N, C], got ", logits.shape);
  check_indices("cross_entropy_backward", "target", targets, logits.shape[1]);
  visit_arithmetic(logits.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
      cross_entropy_backward_kernel<T>(logits, targets, grad_losses, grad_logits, label_smoothing);
    else KILN_FAIL(DTypeError, "cpu backend: cross_entropy_backward does not take ", logits.dtype);
  });
}

// indices [N] -> out [N, C]: zero everywhere, then a 1 per row.
void CpuBackend::one_hot(const TensorRef& indices, const TensorRef& out) {
  const int64_t classes = out.shape.empty() ? 0 : out.shape.back();
  check_indices("one_hot", "index", indices, classes);
  const int32_t* idx = indices.data<int32_t>();
  visit_arithmetic(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    std::fill(o, o + out.numel(), T(0));
    for (int64_t i = 0; i < indices.numel(); ++i) o[i * classes + idx[i]] = T(1);
  });
}

}  // namespace kiln::cpu
