// random_translate: every sample is its own shifted copy, within the bound, reproducibly.
#include <doctest/doctest.h>

#include <set>

#include "kiln/kiln.h"
#include "kiln/datasets/augment.h"

using namespace kiln;

TEST_CASE("random_translate shifts each sample by at most max_shift, the fill value moving in") {
  const int64_t n = 64, c = 2, h = 5, w = 7, s = 2;
  Tensor x = arange(1, 1 + static_cast<double>(n * c * h * w)).reshape({n, c, h, w});
  Generator gen(9);
  Tensor y = data::random_translate(x, s, -1.0, &gen);
  CHECK(y.shape() == x.shape());
  std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
  auto at = [&](const std::vector<float>& v, int64_t i, int64_t k, int64_t r, int64_t q) {
    return v[static_cast<size_t>(((i * c + k) * h + r) * w + q)];
  };
  std::set<std::pair<int64_t, int64_t>> shifts;
  for (int64_t i = 0; i < n; ++i) {
    // Find the shift that explains sample i: out[r, q] = in[r + dy, q + dx], 0 outside.
    int matches = 0;
    for (int64_t dy = -s; dy <= s; ++dy)
      for (int64_t dx = -s; dx <= s; ++dx) {
        bool ok = true;
        for (int64_t k = 0; k < c && ok; ++k)
          for (int64_t r = 0; r < h && ok; ++r)
            for (int64_t q = 0; q < w && ok; ++q) {
              int64_t sr = r + dy, sq = q + dx;
              float want = sr >= 0 && sr < h && sq >= 0 && sq < w ? at(xv, i, k, sr, sq) : -1.0f;
              ok = at(yv, i, k, r, q) == want;
            }
        if (ok) {
          ++matches;
          shifts.insert({dy, dx});
        }
      }
    CHECK_MESSAGE(matches == 1, "sample ", i);
  }
  CHECK(shifts.size() > 15);  // of the 25 possible, most appear over 64 samples
  Generator again(9);
  CHECK(data::random_translate(x, s, -1.0, &again).to_vector<float>() == yv);
  CHECK(data::random_translate(x, 0).storage() == x.storage());
  CHECK_THROWS_AS(data::random_translate(x.flatten(1), 2), ShapeError);
}
