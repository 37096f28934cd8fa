// clip_grad_norm against torch.nn.utils.clip_grad_norm_, and its non-finite check.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/optim/optim.h"
#include "optim_golden.h"

using namespace kiln;

namespace {

// Two parameters whose gradients are the fixture's clip.g0 and clip.g1.
std::vector<Tensor> params_with_grads(DType dtype) {
  std::vector<Tensor> params;
  for (const char* g : {"clip.g0", "clip.g1"}) {
    Tensor grad = optim_test::tensor(g, dtype);
    Tensor p = zeros(grad.shape(), dtype).requires_grad_();
    p.set_grad(grad);
    params.push_back(p);
  }
  return params;
}

struct Case {
  std::string name;
  double max_norm, norm_type;
};

// Mirrors CLIPS in tests/golden/make_optim_golden.py.
const std::vector<Case> kCases = {
    {"clip_l2", 1.0, 2.0},   {"clip_l1", 1.0, 1.0},     {"clip_inf", 0.5, optim::kInfNorm},
    {"clip_l3", 2.0, 3.0},   {"clip_none", 100.0, 2.0},
};

struct NonFiniteCase {
  std::string name;
  double max_norm, norm_type, bad;  // bad replaces clip.g1[1]
};

// Mirrors NONFINITE in tests/golden/make_optim_golden.py.
const std::vector<NonFiniteCase> kNonFinite = {
    {"clip_l2_inf_grad", 1.0, 2.0, std::numeric_limits<double>::infinity()},
    {"clip_l2_nan_grad", 1.0, 2.0, std::nan("")},
    {"clip_inf_nan_grad", 0.5, optim::kInfNorm, std::nan("")},
};

// params_with_grads, with clip.g1[1] replaced by `bad`.
std::vector<Tensor> params_with_bad_grad(DType dtype, double bad) {
  std::vector<Tensor> params = params_with_grads(dtype);
  std::vector<double> g1 = params[1].grad().to_vector<double>();
  g1[1] = bad;
  params[1].set_grad(from_vector<double>(g1, params[1].grad().shape()).to(dtype));
  return params;
}

// Every gradient's values; NaN compares equal to NaN.
bool same_grads(const std::vector<Tensor>& params, const std::vector<std::vector<double>>& want) {
  for (size_t k = 0; k < params.size(); ++k) {
    const std::vector<double> got = params[k].grad().to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i)
      if (!(got[i] == want[k][i] || (std::isnan(got[i]) && std::isnan(want[k][i])))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("clip_grad_norm matches PyTorch") {
  for (DType dtype : {DType::f64, DType::f32}) {
    const double rtol = dtype == DType::f64 ? 1e-14 : 1e-6;
    for (const Case& c : kCases) {
      CAPTURE(c.name);
      CAPTURE(dtype);
      std::vector<Tensor> params = params_with_grads(dtype);
      Tensor total = optim::clip_grad_norm(params, c.max_norm, c.norm_type);
      CHECK(total.dtype() == dtype);
      optim_test::check_close(c.name + ".total", total, rtol, 0.0);
      optim_test::check_close(c.name + ".g0", params[0].grad(), rtol, 0.0);
      optim_test::check_close(c.name + ".g1", params[1].grad(), rtol, 0.0);
    }
  }
}

TEST_CASE("clip_grad_norm skips parameters without a gradient; none at all gives 0") {
  std::vector<Tensor> params = params_with_grads(DType::f64);
  params.push_back(zeros({4}, DType::f64).requires_grad_());
  optim_test::check_close("clip_l2.total", optim::clip_grad_norm(params, 1.0), 1e-13, 0.0);
  optim_test::check_close("clip_l2.g0", params[0].grad(), 1e-13, 0.0);
  optim_test::check_close("clip_l2.g1", params[1].grad(), 1e-13, 0.0);
  CHECK_FALSE(params[2].grad().defined());
  CHECK(optim::clip_grad_norm({params[2]}, 1.0).item() == 0.0);
}

TEST_CASE("a non-finite norm throws when asked, naming it, and leaves the gradients alone") {
  for (const NonFiniteCase& c : kNonFinite) {
    CAPTURE(c.name);
    std::vector<Tensor> params = params_with_bad_grad(DType::f32, c.bad);
    std::vector<std::vector<double>> before;
    for (const Tensor& p : params) before.push_back(p.grad().to_vector<double>());
    CHECK_THROWS_WITH_AS(optim::clip_grad_norm(params, c.max_norm, c.norm_type, true),
                         doctest::Contains(std::isnan(c.bad) ? "is nan" : "is inf"), ValueError);
    CHECK(same_grads(params, before));
  }
  CHECK_THROWS_AS(optim::clip_grad_norm(params_with_grads(DType::f64), 1.0, 0.0), ValueError);
}

TEST_CASE("without the check, a non-finite norm scales the gradients as PyTorch does") {
  // An inf norm makes the coefficient 0: finite gradients become 0 and the inf NaN. A NaN norm
  // makes every gradient NaN.
  for (DType dtype : {DType::f64, DType::f32}) {
    for (const NonFiniteCase& c : kNonFinite) {
      CAPTURE(c.name);
      CAPTURE(dtype);
      std::vector<Tensor> params = params_with_bad_grad(dtype, c.bad);
      optim_test::check_close(c.name + ".total", optim::clip_grad_norm(params, c.max_norm, c.norm_type), 0.0, 0.0);
      optim_test::check_close(c.name + ".g0", params[0].grad(), 0.0, 0.0);
      optim_test::check_close(c.name + ".g1", params[1].grad(), 0.0, 0.0);
    }
  }
}
