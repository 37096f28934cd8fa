// What the tests of every device backend (CUDA, Vulkan) share: random shapes that are not
// multiples of anything, broadcastable partners, and an elementwise comparison of a device tensor
// against its CPU counterpart (NaNs equal, rtol and atol as numpy's allclose).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::test {

// A random shape of rank 1..4 with sizes from {1, 2, 3, 5, 7, 13, 31, 64, 100}.
inline Shape random_shape(std::mt19937& rng, int max_rank = 4) {
  static const int64_t sizes[] = {1, 2, 3, 5, 7, 13, 31, 64, 100};
  int rank = std::uniform_int_distribution<int>(1, max_rank)(rng);
  Shape s;
  for (int i = 0; i < rank; ++i) s.push_back(sizes[std::uniform_int_distribution<int>(0, 8)(rng)]);
  // At most 200000 elements: axes drop to 1 from the first on (dropping only the first could
  // leave 100 x 100 x 64 and loop forever).
  for (size_t i = 0; s.numel() > 200000; ++i) s[i] = 1;
  return s;
}

// Drops some of `shape`'s axes to 1 so that it broadcasts against `shape`.
inline Shape broadcastable(std::mt19937& rng, const Shape& shape) {
  Shape s = shape;
  for (size_t i = 0; i < s.size(); ++i)
    if (std::uniform_int_distribution<int>(0, 2)(rng) == 0) s[i] = 1;
  if (s.size() > 1 && std::uniform_int_distribution<int>(0, 2)(rng) == 0) s.erase(0);
  return s;
}

// Values of `shape` in steps of 1/4 in [-1, 1]: products and sums of them are exact in f32 (and
// TF32) while they fit 24 bits, so a device and the CPU agree to the bit, whatever their order.
inline Tensor quarters(const Shape& shape, DType t) { return uniform(shape, -5, 5).to(DType::i32).to(t) * 0.25; }

// m indices in [0, n); with `distinct`, a prefix of a permutation (m <= n).
inline Tensor random_indices(std::mt19937& rng, int64_t m, int64_t n, bool distinct) {
  std::vector<int32_t> v;
  if (distinct) {
    std::vector<int32_t> all(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::shuffle(all.begin(), all.end(), rng);
    v.assign(all.begin(), all.begin() + m);
  } else {
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(n - 1));
    for (int64_t j = 0; j < m; ++j) v.push_back(pick(rng));
  }
  return from_vector<int32_t>(v, {m});
}

// ---- matmul's cases ----

// matmul sizes: 1, primes, and non-multiples (and multiples) of every tile.
inline int64_t pick(std::mt19937& rng) {
  static const int64_t sizes[] = {1, 2, 3, 5, 7, 8, 13, 17, 31, 32, 33, 64, 65, 97, 127, 128, 129, 200, 257};
  return sizes[std::uniform_int_distribution<int>(0, 18)(rng)];
}

// A [.., rows, cols] operand with a random layout: contiguous, a transposed view of a
// [.., cols, rows] tensor, or a column slice of a wider tensor (row stride > cols). The base is
// made once; view() takes the same view of it on either device, so the device's kernel receives
// the trans flags and row strides themselves, not a contiguous copy.
struct Operand {
  Tensor base;
  int layout = 0;
  int64_t cols = 0;
  Tensor view(const Tensor& on) const {
    if (layout == 1) return on.transpose(-1, -2);
    if (layout == 2) return on.slice(-1, 0, cols);
    return on;
  }
  Tensor cpu() const { return view(base); }
  Tensor on(const Device& device) const { return view(base.to(device)); }
};

inline Operand operand(std::mt19937& rng, Shape batch, int64_t rows, int64_t cols, DType t, std::string& how) {
  Operand op;
  op.layout = std::uniform_int_distribution<int>(0, 2)(rng);
  op.cols = cols;
  Shape s = batch;
  if (op.layout == 1) {
    s.push_back(cols), s.push_back(rows);
    how += " T";
  } else {
    s.push_back(rows), s.push_back(cols + (op.layout == 2 ? 3 : 0));
    if (op.layout == 2) how += " ld+3";
  }
  op.base = uniform(s, -1, 1, t);
  return op;
}

// ---- the softmax family's cases ----

// Row lengths from 1 to 6000, with the warp/block boundary (1024) and odd sizes around it.
// Also the thresholds of the CUDA versions (softmax.cuh): the lane groups of rows_per_warp (4, 8,
// 16, 32), kRegisterRowMin (512) and the register shapes (packs per thread 1/2/4/8).
inline int64_t random_length(std::mt19937& rng) {
  static const int64_t lengths[] = {1, 2, 3, 4, 5, 7, 8, 9, 10, 16, 17, 31, 32, 33, 100, 255, 511, 512, 513, 1000,
                                    1023, 1024, 1025, 1500, 2047, 4099, 5003, 6000};
  return lengths[std::uniform_int_distribution<size_t>(0, std::size(lengths) - 1)(rng)];
}

// Logits spread: 1 (typical), 30 (peaked rows) and 1e3 (exp overflows without the max shift).
inline double random_scale(std::mt19937& rng) {
  static const double scales[] = {1, 30, 1e3};
  return scales[std::uniform_int_distribution<int>(0, 2)(rng)];
}

inline Tensor random_targets(std::mt19937& rng, int64_t rows, int64_t classes) {
  std::vector<int32_t> t(static_cast<size_t>(rows));
  for (auto& v : t) v = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(classes - 1))(rng);
  return from_vector<int32_t>(t, {rows});
}

// Six rows of n logits with the special values: a -inf among finite values, all -inf, a NaN, a
// +inf, logits of 1e3 (exp overflows without the max shift) and of -3e4, as [6, n] in f64.
inline Tensor softmax_special_rows(int64_t n) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v(static_cast<size_t>(6 * n));
  std::mt19937 rng(static_cast<unsigned>(n));
  for (auto& e : v) e = std::uniform_real_distribution<double>(-5, 5)(rng);
  v[0] = -inf;
  std::fill(v.begin() + n, v.begin() + 2 * n, -inf);
  v[static_cast<size_t>(2 * n + n / 2)] = nan;
  v[static_cast<size_t>(3 * n + n - 1)] = inf;
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(4 * n + k)] = 1e3 * (k % 2 ? 1 : -1) + static_cast<double>(k);
  for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(5 * n + k)] = -3e4 + 0.5 * static_cast<double>(k);
  return from_vector<double>(v, {6, n});
}

// Six rows of logits for cross-entropy with targets {0, 1, 0, 4, 2, 0}: a -inf logit (not the
// target), all -inf, a NaN, a +inf, 1e3-sized logits, the target at -inf; [6, classes] in f64.
inline Tensor cross_entropy_special_rows(int64_t classes) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v(static_cast<size_t>(6 * classes));
  std::mt19937 rng(static_cast<unsigned>(classes));
  for (auto& e : v) e = std::uniform_real_distribution<double>(-3, 3)(rng);
  v[1] = -inf;
  std::fill(v.begin() + classes, v.begin() + 2 * classes, -inf);
  v[static_cast<size_t>(2 * classes + 2)] = nan;
  v[static_cast<size_t>(3 * classes + 3)] = inf;
  for (int64_t c = 0; c < classes; ++c) v[static_cast<size_t>(4 * classes + c)] = 1e3 + 0.01 * static_cast<double>(c);
  v[static_cast<size_t>(5 * classes)] = -inf;
  return from_vector<double>(v, {6, classes});
}
inline Tensor cross_entropy_special_targets() { return from_vector<int32_t>({0, 1, 0, 4, 2, 0}, {6}); }

inline void check_close_on(const Device& device, const Tensor& gpu, const Tensor& cpu, double rtol, double atol,
                           const std::string& what) {
  REQUIRE_MESSAGE(gpu.device() == device, what);
  REQUIRE_MESSAGE(gpu.shape() == cpu.shape(), what << ": shape " << gpu.shape() << " vs " << cpu.shape());
  std::vector<double> g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    bool both_nan = std::isnan(g[i]) && std::isnan(c[i]);
    bool ok = both_nan || g[i] == c[i] || std::abs(g[i] - c[i]) <= atol + rtol * std::abs(c[i]);
    if (!ok) {
      CHECK_MESSAGE(ok, what << ": element " << i << " is " << g[i] << " on " << device << ", " << c[i] << " on cpu");
      return;
    }
  }
}

}  // namespace kiln::test
