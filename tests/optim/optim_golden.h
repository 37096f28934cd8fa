// The fixture of tests/optim/: PyTorch's values in tests/data/optim_golden.txt (written by
// tests/golden/make_optim_golden.py, which describes its contents), and a tolerant comparison.
// The format is golden.txt's; this parser is a copy of tests/test_golden.cpp's, kept here so
// that each test can change on its own.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/kiln.h"

namespace optim_test {

struct Fixture {
  kiln::Shape shape;
  std::vector<double> values;
};

inline const std::map<std::string, Fixture>& fixtures() {
  static const std::map<std::string, Fixture> all = [] {
    std::ifstream in(KILN_TEST_DATA_DIR "/optim_golden.txt");
    REQUIRE_MESSAGE(in.good(), "cannot open " KILN_TEST_DATA_DIR "/optim_golden.txt");
    std::map<std::string, Fixture> out;
    std::string header, data;
    while (std::getline(in, header)) {
      if (header.empty() || header[0] == '#') continue;
      REQUIRE_MESSAGE(std::getline(in, data), "optim_golden.txt: no values after '" << header << "'");
      std::istringstream h(header);
      std::string name, dtype;
      int64_t rank = 0;
      h >> name >> dtype >> rank;
      REQUIRE_MESSAGE(dtype == "f64", "optim_golden.txt: unknown dtype in '" << header << "'");
      Fixture f;
      for (int64_t i = 0; i < rank; ++i) {
        int64_t d = 0;
        h >> d;
        f.shape.push_back(d);
      }
      std::istringstream v(data);
      std::string token;
      while (v >> token) f.values.push_back(std::stod(token));
      REQUIRE_MESSAGE(static_cast<int64_t>(f.values.size()) == f.shape.numel(),
                      "optim_golden.txt: " << name << " has " << f.values.size()
                                           << " values for shape " << f.shape);
      out[name] = std::move(f);
    }
    return out;
  }();
  return all;
}

inline bool has_fixture(const std::string& name) { return fixtures().count(name) != 0; }

inline const Fixture& fixture(const std::string& name) {
  auto it = fixtures().find(name);
  REQUIRE_MESSAGE(it != fixtures().end(), "optim_golden.txt has no '" << name << "'");
  return it->second;
}

// The fixture as a fresh tensor of `dtype`.
inline kiln::Tensor tensor(const std::string& name, kiln::DType dtype) {
  const Fixture& f = fixture(name);
  return kiln::from_vector<double>(f.values, f.shape).to(dtype);
}

// Every element of `actual` within atol + rtol * |expected| of the fixture, and the same shape;
// or, with tiles > 1, `actual` is [tiles, fixture's shape...] and each tile must match.
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
    const double want = f.values[i % f.values.size()];
    double excess = std::abs(got[i] - want) - (atol + rtol * std::abs(want));
    if (std::isnan(excess)) excess = INFINITY;
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
