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
  CHECK_FALSE(params[2].grad().defined());
  CHECK(optim::clip_grad_norm({params[2]}, 1.0).item() == 0.0);
}

TEST_CASE("a non-finite norm throws when asked, naming it, and leaves the gradients alone") {
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    std::vector<Tensor> params = params_with_grads(DType::f32);
    Tensor g = from_vector<double>({1.0, bad, 2.0, 0.5, 0.0}, {5}).to(DType::f32);
    params[1].set_grad(g);
    const std::vector<float> before = g.to_vector<float>();
    CHECK_THROWS_WITH_AS(optim::clip_grad_norm(params, 1.0, 2.0, true),
                         doctest::Contains(std::isnan(bad) ? "is nan" : "is inf"), ValueError);
    CHECK(std::isnan(before[1]) == std::isnan(params[1].grad().to_vector<float>()[1]));
    CHECK(params[1].grad().to_vector<float>()[0] == before[0]);
    // Without the check the gradients are scaled by the non-finite norm, as PyTorch does.
    Tensor total = optim::clip_grad_norm(params, 1.0);
    CHECK_FALSE(std::isfinite(total.item()));
  }
  CHECK_THROWS_AS(optim::clip_grad_norm(params_with_grads(DType::f64), 1.0, 0.0), ValueError);
}
