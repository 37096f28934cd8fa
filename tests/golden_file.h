// The golden fixture files that tests/golden/*.py write from PyTorch (tests/data/*.txt), the
// element-wise comparison the golden tests share, and the runner of one op's case against them.
//
// Format, per tensor, two lines:
//   <name> <dtype> <rank> <d0> <d1> ...
//   <values in row-major order, space separated; nan, inf and -inf spelled so>
// dtype is f64, or i32 for integer tensors (int64 in PyTorch). Lines starting with '#' are comments.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <set>
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

// How far got lies outside the tolerance around want (<= 0: within it). Where PyTorch gives NaN,
// only NaN matches, and an infinity matches only itself; any other NaN or infinity in got is as
// wrong as it gets (a plain comparison would let a NaN pass).
inline double excess_error(double got, double want, const Tolerance& tol) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : INFINITY;
  if (std::isinf(want)) return got == want ? 0.0 : INFINITY;
  const double err = std::abs(got - want);
  return std::isfinite(err) ? err - (tol.atol + tol.rtol * std::abs(want)) : INFINITY;
}

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
    const double excess = excess_error(v[i], want.values[i], tol);
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

// ---- one op's case against a fixture file ----

// What a case sees besides its inputs: the file's constants, converted to the dtype under test,
// and a way to name extra results to compare after the forward pass.
class Context {
 public:
  Context(const GoldenFile& fixtures, std::string name, DType dtype)
      : fixtures_(fixtures), name_(std::move(name)), dtype_(dtype) {}

  bool has(const std::string& role) const { return fixtures_.has(name_ + "." + role); }

  // A fresh tensor holding the fixture: i32 stays i32, floating values take the tested dtype.
  Tensor constant(const std::string& role) const { return fixtures_.at(name_ + "." + role).tensor(dtype_); }

  void expect(const std::string& role, const Tensor& t) { expected_.emplace_back(role, t); }
  const std::vector<std::pair<std::string, Tensor>>& expected() const { return expected_; }

 private:
  const GoldenFile& fixtures_;
  std::string name_;
  DType dtype_;
  std::vector<std::pair<std::string, Tensor>> expected_;
};

using Args = std::vector<Tensor>;

// One op's case: its name in the file and the kiln call that mirrors the PyTorch one.
struct OpCase {
  std::string name;
  std::function<Tensor(const Args&, Context&)> f;
};

// Runs one case in `dtype` on the CPU: the inputs <name>.in0, in1, ... (requiring grad), the
// output against <name>.out; where the file has <name>.gout (PyTorch differentiated the op),
// backward from it and each input's gradient against <name>.grad<i>; last the
// results the case named with Context::expect.
inline void run_case(const OpCase& oc, const GoldenFile& fixtures, DType dtype, const Tolerance& tol) {
  std::string tag = oc.name + " (" + std::string(dtype_name(dtype)) + ")";
  Context ctx(fixtures, oc.name, dtype);
  Args inputs;
  for (int i = 0; ctx.has("in" + std::to_string(i)); ++i)
    inputs.push_back(ctx.constant("in" + std::to_string(i)).requires_grad_());
  REQUIRE_MESSAGE(!inputs.empty(), tag << ": no inputs in the fixture file");
  Tensor y = oc.f(inputs, ctx);
  compare(tag + " forward", y, fixtures.at(oc.name + ".out"), tol);
  if (ctx.has("gout")) {
    y.backward(ctx.constant("gout"));
    for (size_t i = 0; i < inputs.size(); ++i)
      compare(tag + " gradient of input " + std::to_string(i), inputs[i].grad(),
              fixtures.at(oc.name + ".grad" + std::to_string(i)), tol);
  }
  for (const auto& [role, t] : ctx.expected()) compare(tag + " " + role, t, fixtures.at(oc.name + "." + role), tol);
}

// Every case in `dtype`; an exception fails its case only.
inline void run_cases(const std::vector<OpCase>& cases, const GoldenFile& fixtures, DType dtype, const Tolerance& tol) {
  for (const OpCase& oc : cases) {
    try {
      run_case(oc, fixtures, dtype, tol);
    } catch (const std::exception& e) {
      FAIL_CHECK(oc.name << " (" << dtype << ") threw: " << e.what());
    }
  }
}

// The case names of a file (what comes before the first '.') and of a table: they must agree.
inline std::set<std::string> case_names(const GoldenFile& fixtures) {
  std::set<std::string> names;
  for (const auto& [name, f] : fixtures.entries()) names.insert(name.substr(0, name.find('.')));
  return names;
}
inline std::set<std::string> case_names(const std::vector<OpCase>& cases) {
  std::set<std::string> names;
  for (const OpCase& oc : cases) names.insert(oc.name);
  return names;
}

}  // namespace kiln::golden
