// The golden fixture files that tests/golden/*.py write from PyTorch (tests/data/*.txt), and the
// element-wise comparison the golden tests share.
//
// Format, per tensor, two lines:
//   <name> <dtype> <rank> <d0> <d1> ...
//   <values in row-major order, space separated>
// dtype is f64, or i32 for integer tensors (int64 in PyTorch). Lines starting with '#' are comments.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

namespace kiln::golden {

struct Fixture {
  DType dtype = DType::f64;  // f64 or i32
  Shape shape;
  std::vector<double> values;

  // A fresh tensor holding the values: i32 stays i32, floating values take `floating`.
  Tensor tensor(DType floating = DType::f64) const {
    if (dtype == DType::i32) return from_vector<int32_t>(std::vector<int32_t>(values.begin(), values.end()), shape);
    return from_vector<double>(values, shape).to(floating);
  }
};

class GoldenFile {
 public:
  explicit GoldenFile(const std::string& path) : path_(path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "cannot open " << path);
    std::string header, data;
    while (std::getline(in, header)) {
      if (header.empty() || header[0] == '#') continue;
      REQUIRE_MESSAGE(std::getline(in, data), path << ": no values after '" << header << "'");
      std::istringstream h(header);
      std::string name, dtype;
      int64_t rank = 0;
      h >> name >> dtype >> rank;
      Fixture f;
      REQUIRE_MESSAGE((dtype == "f64" || dtype == "i32"), path << ": unknown dtype in '" << header << "'");
      f.dtype = dtype == "f64" ? DType::f64 : DType::i32;
      for (int64_t i = 0; i < rank; ++i) {
        int64_t d = 0;
        h >> d;
        f.shape.push_back(d);
      }
      std::istringstream v(data);
      std::string token;
      while (v >> token) f.values.push_back(std::stod(token));
      REQUIRE_MESSAGE(static_cast<int64_t>(f.values.size()) == f.shape.numel(),
                      path << ": " << name << " has " << f.values.size() << " values for shape " << f.shape);
      REQUIRE_MESSAGE(index_.emplace(name, entries_.size()).second, path << ": " << name << " appears twice");
      entries_.emplace_back(name, std::move(f));
    }
  }

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  const Fixture& at(const std::string& name) const {
    auto it = index_.find(name);
    REQUIRE_MESSAGE(it != index_.end(), path_ << " has no entry " << name);
    return entries_[it->second].second;
  }
  // Every entry in file order.
  const std::vector<std::pair<std::string, Fixture>>& entries() const { return entries_; }

 private:
  std::string path_;
  std::vector<std::pair<std::string, Fixture>> entries_;
  std::map<std::string, size_t> index_;
};

struct Tolerance {
  double rtol, atol;
};

// Compares got with the fixture element by element; one failure message per tensor, naming the
// worst element.
inline void compare(const std::string& what, const Tensor& got, const Fixture& want, const Tolerance& tol) {
  REQUIRE_MESSAGE(got.defined(), what << ": undefined");
  CHECK_MESSAGE(got.shape() == want.shape, what << ": shape " << got.shape() << ", expected " << want.shape);
  if (got.shape() != want.shape) return;
  std::vector<double> v = got.to_vector<double>();
  double worst = 0.0;
  size_t at = 0;
  bool ok = true;
  for (size_t i = 0; i < v.size(); ++i) {
    double err = std::abs(v[i] - want.values[i]);
    // A NaN is as wrong as it gets (a plain comparison would let it pass).
    double excess = std::isnan(err) ? INFINITY : err - (tol.atol + tol.rtol * std::abs(want.values[i]));
    if (excess > 0 && (ok || excess > worst)) {
      worst = excess;
      at = i;
      ok = false;
    }
  }
  if (ok) return;
  std::ostringstream msg;
  msg.precision(17);
  msg << what << ": element " << at << " is " << v[at] << ", PyTorch gives " << want.values[at] << " (rtol "
      << tol.rtol << ", atol " << tol.atol << ")";
  FAIL_CHECK(msg.str());
}

}  // namespace kiln::golden
