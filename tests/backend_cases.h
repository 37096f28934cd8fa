// What the tests of every device backend (CUDA, Vulkan) share: random shapes that are not
// multiples of anything, broadcastable partners, and an elementwise comparison of a device tensor
// against its CPU counterpart (NaNs equal, rtol and atol as numpy's allclose).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/kiln.h"

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
