// kiln's CPU backend against PyTorch on special values: NaN, +inf and -inf (with ties, zeros and
// huge finite values) in every op family that has a rule for them, forward and backward, in f64
// and f32. The values are tests/data/special_golden.txt, written by
// tests/golden/make_special_golden.py, which says what each case holds; where PyTorch gives NaN
// kiln must give NaN, and an infinity must come out exactly (tests/golden_file.h compares).
//
// The rules these pin down, among others: max and min propagate NaN, and their gradient is NaN
// over a slice whose extremum is NaN, shared evenly between ties otherwise; argmax and argmin
// point at the first NaN, else at the first of tied extremes; max_pool2d takes the last NaN of a
// window (PyTorch's CPU and CUDA kernels test `v > best || isnan(v)`), which then receives the
// window's gradient, and the first of ties; softmax of a row with +inf, or all -inf, is NaN; a
// -inf logit beside the target leaves cross-entropy (and nll_loss) finite; pow's gradients are 0
// at exponent 0 and, for the exponent, at base 0; maximum and minimum give the whole gradient to
// both operands where one is NaN.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "golden_file.h"

using namespace kiln;

namespace {

using golden::Args;
using golden::Context;
using golden::OpCase;

golden::GoldenFile load_fixtures() { return golden::GoldenFile(KILN_TEST_DATA_DIR "/special_golden.txt"); }

std::vector<OpCase> special_cases() {
  auto unary = [](Tensor (*op)(const Tensor&)) {
    return [op](const Args& x, Context&) { return op(x.at(0)); };
  };
  auto binary = [](Tensor (*op)(const Tensor&, const Tensor&)) {
    return [op](const Args& x, Context&) { return op(x.at(0), x.at(1)); };
  };
  auto with_scalar = [](Tensor (*op)(const Tensor&, double), double s) {
    return [op, s](const Args& x, Context&) { return op(x.at(0), s); };
  };
  // axis 0 or 1 of a matrix, or every axis
  auto reduce = [](Tensor (*op)(const Tensor&, const std::vector<int64_t>&, bool), std::vector<int64_t> axes) {
    return [op, axes](const Args& x, Context&) { return op(x.at(0), axes, false); };
  };
  // argmax and argmin of the flattened tensor when axis is -1 (torch.argmax without a dim)
  auto arg = [](Tensor (*op)(const Tensor&, int64_t, bool), int64_t axis) {
    return [op, axis](const Args& x, Context&) { return axis < 0 ? op(reshape(x.at(0), {-1}), 0, false) : op(x.at(0), axis, false); };
  };
  // max_pool2d, its gradient through autograd, and the indices the backend picks
  auto max_pool = [](Pool2dConfig config) {
    return [config](const Args& x, Context& c) {
      c.expect("indices", max_pool2d_with_indices(x.at(0).detach(), config).indices);
      return max_pool2d(x.at(0), config);
    };
  };
  auto cross_entropy_with = [](Reduction reduction, double label_smoothing) {
    return [reduction, label_smoothing](const Args& x, Context& c) {
      return cross_entropy(x.at(0), c.constant("target"), reduction, label_smoothing);
    };
  };
  return {
      {"max_rows", reduce(kiln::max, {1})},
      {"min_rows", reduce(kiln::min, {1})},
      {"max_columns", reduce(kiln::max, {0})},
      {"min_columns", reduce(kiln::min, {0})},
      {"max_axes_0_2", reduce(kiln::max, {0, 2})},
      {"min_axes_0_2", reduce(kiln::min, {0, 2})},
      {"max_all_ties", reduce(kiln::max, {})},
      {"min_all_ties", reduce(kiln::min, {})},
      {"max_all_nan", reduce(kiln::max, {})},
      {"min_all_nan", reduce(kiln::min, {})},
      {"argmax_rows", arg(kiln::argmax, 1)},
      {"argmin_rows", arg(kiln::argmin, 1)},
      {"argmax_columns", arg(kiln::argmax, 0)},
      {"argmin_columns", arg(kiln::argmin, 0)},
      {"argmax_all_ties", arg(kiln::argmax, -1)},
      {"argmin_all_ties", arg(kiln::argmin, -1)},
      {"argmax_all_nan", arg(kiln::argmax, -1)},
      {"argmin_all_nan", arg(kiln::argmin, -1)},
      {"sum_rows", reduce(kiln::sum, {1})},
      {"mean_rows", reduce(kiln::mean, {1})},
      {"sum_all", reduce(kiln::sum, {})},
      {"mean_columns", reduce(kiln::mean, {0})},
      {"max_pool2d_windows", max_pool({{2, 2}, {2, 2}, {0, 0}, true})},
      {"max_pool2d_overlap", max_pool({{3, 3}, {2, 2}, {1, 1}, true})},
      {"avg_pool2d", [](const Args& x, Context&) { return avg_pool2d(x.at(0), {{2, 2}, {2, 2}, {0, 0}, true}); }},
      {"softmax_rows", [](const Args& x, Context&) { return softmax(x.at(0), 1); }},
      {"softmax_columns", [](const Args& x, Context&) { return softmax(x.at(0), 0); }},
      {"log_softmax_rows", [](const Args& x, Context&) { return log_softmax(x.at(0), 1); }},
      {"log_softmax_columns", [](const Args& x, Context&) { return log_softmax(x.at(0), 0); }},
      {"cross_entropy", cross_entropy_with(Reduction::none, 0.0)},
      {"cross_entropy_smoothed", cross_entropy_with(Reduction::none, 0.1)},
      {"cross_entropy_mean", cross_entropy_with(Reduction::mean, 0.0)},
      {"nll_loss",
       [](const Args& x, Context& c) { return nll_loss(x.at(0), c.constant("target"), Reduction::none); }},
      {"mse_loss", [](const Args& x, Context&) { return mse_loss(x.at(0), x.at(1), Reduction::none); }},
      {"relu", unary(kiln::relu)},
      {"leaky_relu", with_scalar(kiln::leaky_relu, 0.1)},
      {"gelu", unary(kiln::gelu)},
      {"tanh", unary(kiln::tanh)},
      {"sigmoid", unary(kiln::sigmoid)},
      {"exp", unary(kiln::exp)},
      {"log", unary(kiln::log)},
      {"sqrt", unary(kiln::sqrt)},
      {"abs", unary(kiln::abs)},
      {"neg", unary(kiln::neg)},
      {"pow_2", with_scalar(kiln::pow, 2.0)},
      {"pow_2_5", with_scalar(kiln::pow, 2.5)},
      {"pow_minus_1", with_scalar(kiln::pow, -1.0)},
      {"pow_0", with_scalar(kiln::pow, 0.0)},
      {"add_scalar", with_scalar(kiln::add, INFINITY)},
      {"mul_scalar_0", with_scalar(kiln::mul, 0.0)},
      {"sign", unary(kiln::sign)},
      {"isfinite", unary(kiln::isfinite)},
      {"add", binary(kiln::add)},
      {"sub", binary(kiln::sub)},
      {"mul", binary(kiln::mul)},
      {"div", binary(kiln::div)},
      {"pow", binary(kiln::pow)},
      {"maximum", binary(kiln::maximum)},
      {"minimum", binary(kiln::minimum)},
      {"eq", binary(kiln::eq)},
      {"ne", binary(kiln::ne)},
      {"gt", binary(kiln::gt)},
      {"ge", binary(kiln::ge)},
      {"lt", binary(kiln::lt)},
      {"le", binary(kiln::le)},
      {"matmul", binary(kiln::matmul)},
      {"conv2d", [](const Args& x, Context&) { return conv2d(x.at(0), x.at(1), x.at(2), {{1, 1}, {1, 1}, {1, 1}, 1}); }},
      {"batch_norm_train",
       [](const Args& x, Context& c) {
         Tensor rm = c.constant("running_mean"), rv = c.constant("running_var");
         c.expect("running_mean_after", rm);  // updated in place by the forward pass
         c.expect("running_var_after", rv);
         return batch_norm(x.at(0), rm, rv, x.at(1), x.at(2), true, 0.1, 1e-5);
       }},
  };
}

}  // namespace

TEST_CASE("every case in special_golden.txt has a kiln counterpart") {
  std::set<std::string> in_file = golden::case_names(load_fixtures());
  CHECK(in_file == golden::case_names(special_cases()));
  CHECK(in_file.size() >= 60);
}

TEST_CASE("special values: f64 matches PyTorch (NaN where it gives NaN, infinities exactly)") {
  golden::run_cases(special_cases(), load_fixtures(), DType::f64, {1e-12, 1e-12});
}

// Every input is exact in f32 (and the finite results are short sums of them), so f32 keeps the
// same special values; its finite values carry f32 rounding.
TEST_CASE("special values: f32 matches PyTorch (NaN where it gives NaN, infinities exactly)") {
  golden::run_cases(special_cases(), load_fixtures(), DType::f32, {1e-5, 1e-6});
}
