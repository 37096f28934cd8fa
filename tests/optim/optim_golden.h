// The fixture of tests/optim/: PyTorch's values in tests/data/optim_golden.txt (written by
// tests/golden/make_optim_golden.py, which describes its contents), and a tolerant comparison.
// The file is read by tests/golden_file.h, as every fixture of kiln's tests.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/golden_file.h"

namespace optim_test {

using kiln::golden::Fixture;

// tests/data/optim_golden.txt, parsed once (the format of tests/golden_file.h).
inline const kiln::golden::GoldenFile& fixtures() {
  static const kiln::golden::GoldenFile file(KILN_TEST_DATA_DIR "/optim_golden.txt");
  return file;
}

inline bool has_fixture(const std::string& name) { return fixtures().has(name); }
inline const Fixture& fixture(const std::string& name) { return fixtures().at(name); }

// The fixture as a fresh tensor of `dtype`.
inline kiln::Tensor tensor(const std::string& name, kiln::DType dtype) {
  const Fixture& f = fixture(name);
  return kiln::from_vector<double>(f.values, f.shape).to(dtype);
}

// Every element of `actual` within atol + rtol * |expected| of the fixture (NaN where it holds
// NaN, its infinities exactly), and the same shape; or, with tiles > 1, `actual` is
// [tiles, fixture's shape...] and each tile must match.
inline void check_close(const std::string& name, const kiln::Tensor& actual, double rtol, double atol,
                        int64_t tiles = 1) {
  const Fixture& f = fixture(name);
  kiln::Shape shape = f.shape;
  if (tiles > 1) shape.insert(0, tiles);
  REQUIRE_MESSAGE(actual.shape() == shape, name << ": shape " << actual.shape() << ", expected " << shape);
  const std::vector<double> got = actual.to_vector<double>();
  double worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = kiln::golden::excess_error(got[i], f.values[i % f.values.size()], {rtol, atol});
    if (i == 0 || excess > worst) {
      worst = excess;
      at = i;
    }
  }
  CHECK_MESSAGE(worst <= 0.0, name << ": element " << at << " is " << got[at] << ", expected "
                                   << f.values[at % f.values.size()] << " (rtol " << rtol
                                   << ", atol " << atol << ")");
}

}  // namespace optim_test
