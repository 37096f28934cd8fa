// What the rows of test_backend_ops's table are made of (tests/test_backend_ops.cpp): an op (or
// op family), the dtypes it takes on each device backend with a tolerance for each, and the cases
// that draw its inputs and compare the backend's results against the CPU's. A case function is
// written once and runs on every backend; what differs between backends is data in the row.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/kiln.h"
#include "tests/backend_cases.h"

namespace kiln::test {

// A tolerance as numpy's allclose: |got - want| <= atol + rtol * |want|. Tol(x): both x.
struct Tol {
  double rtol = 0, atol = 0;
  constexpr Tol() = default;
  constexpr Tol(double both) : rtol(both), atol(both) {}  // NOLINT: implicit, so that rows read {f32, 1e-5}
  constexpr Tol(double r, double a) : rtol(r), atol(a) {}
  // atol times k: a tolerance per term of a sum, scaled by the sum's length
  constexpr Tol atol_times(double k) const { return {rtol, atol * k}; }
  constexpr Tol times(double k) const { return {rtol * k, atol * k}; }
};

// A dtype an op takes on a backend, and the tolerance of its results in that dtype.
struct Take {
  DType dtype;
  Tol tol;
};
using Takes = std::vector<Take>;

// One row on one backend: the device, what the op takes there, and the comparison.
struct Run {
  Device device;
  Takes takes;
  int64_t max_binding_bytes = std::numeric_limits<int64_t>::max();  // the most one kernel argument may hold

  bool has(DType t) const {
    for (const Take& k : takes)
      if (k.dtype == t) return true;
    return false;
  }
  Tol tol(DType t) const {
    for (const Take& k : takes)
      if (k.dtype == t) return k.tol;
    FAIL("the row takes no " << dtype_name(t));
    return {};
  }
  // The floating dtypes among those taken.
  std::vector<DType> floats() const {
    std::vector<DType> out;
    for (const Take& k : takes)
      if (is_floating(k.dtype)) out.push_back(k.dtype);
    return out;
  }
  // `got` (on the device) against `want` (the CPU's), elementwise; NaNs equal.
  void check(const Tensor& got, const Tensor& want, Tol t, const std::string& what) const {
    check_close_on(device, got, want, t.rtol, t.atol, what);
  }
};

// A row of the table. `cuda` and `vulkan`: the dtypes the op takes on that backend with their
// tolerances (empty: the row does not run there); `cases` runs on each.
struct Row {
  std::string op;
  Takes cuda, vulkan;
  std::function<void(const Run&)> cases;

  const Takes& on(std::string_view backend) const { return backend == "cuda" ? cuda : vulkan; }
};

}  // namespace kiln::test
