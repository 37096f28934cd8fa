// kiln against PyTorch: forward outputs and gradients of one representative case per op family,
// recomputed in f64 and in f32 and compared with the values PyTorch computed in float64
// (tests/data/golden.txt, written by tests/golden/make_golden.py; format in tests/golden_file.h).
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
using golden::GoldenFile;
using golden::OpCase;
using golden::Tolerance;

GoldenFile load_fixtures() { return GoldenFile(KILN_TEST_DATA_DIR "/golden.txt"); }

Tensor unary_input(const Args& x) { return x.at(0); }

std::vector<OpCase> golden_cases() {
  auto unary = [](Tensor (*op)(const Tensor&)) {
    return [op](const Args& x, Context&) { return op(unary_input(x)); };
  };
  auto binary = [](Tensor (*op)(const Tensor&, const Tensor&)) {
    return [op](const Args& x, Context&) { return op(x.at(0), x.at(1)); };
  };
  Pool2dConfig pool{{3, 3}, {2, 2}, {1, 1}, true};
  Pool2dConfig pool_excl{{3, 3}, {2, 2}, {1, 1}, false};
  return {
      {"add", binary(kiln::add)},
      {"mul", binary(kiln::mul)},
      {"div", binary(kiln::div)},
      {"pow", binary(kiln::pow)},
      {"pow_scalar", [](const Args& x, Context&) { return pow(x[0], 2.5); }},
      {"exp", unary(kiln::exp)},
      {"log", unary(kiln::log)},
      {"sqrt", unary(kiln::sqrt)},
      {"abs", unary(kiln::abs)},
      {"tanh", unary(kiln::tanh)},
      {"sigmoid", unary(kiln::sigmoid)},
      {"relu", unary(kiln::relu)},
      {"leaky_relu", [](const Args& x, Context&) { return leaky_relu(x[0], 0.1); }},
      {"gelu", unary(kiln::gelu)},
      {"sum", [](const Args& x, Context&) { return sum(x[0], {0, 2}, true); }},
      {"mean", [](const Args& x, Context&) { return mean(x[0], {1}, false); }},
      {"amax", [](const Args& x, Context&) { return max(x[0], {1, 2}, true); }},
      {"amin", [](const Args& x, Context&) { return min(x[0], {0}, false); }},
      {"matmul", binary(kiln::matmul)},
      {"softmax", [](const Args& x, Context&) { return softmax(x[0], 1); }},
      {"log_softmax", [](const Args& x, Context&) { return log_softmax(x[0], -1); }},
      {"cross_entropy",
       [](const Args& x, Context& c) {
         return cross_entropy(x[0], c.constant("target"), Reduction::mean, 0.1);
       }},
      {"nll_loss",
       [](const Args& x, Context& c) { return nll_loss(x[0], c.constant("target"), Reduction::mean); }},
      {"mse_loss", [](const Args& x, Context&) { return mse_loss(x[0], x[1], Reduction::mean); }},
      {"conv2d", [](const Args& x, Context&) { return conv2d(x[0], x[1], x[2], {{2, 2}, {1, 1}, {1, 1}, 2}); }},
      {"conv2d_dilated",
       [](const Args& x, Context&) { return conv2d(x[0], x[1], x[2], {{1, 1}, {1, 1}, {2, 2}, 1}); }},
      {"max_pool2d", [=](const Args& x, Context&) { return max_pool2d(x[0], pool); }},
      {"avg_pool2d_exclude_pad", [=](const Args& x, Context&) { return avg_pool2d(x[0], pool_excl); }},
      {"avg_pool2d_include_pad", [=](const Args& x, Context&) { return avg_pool2d(x[0], pool); }},
      {"batch_norm_train",
       [](const Args& x, Context& c) {
         Tensor rm = c.constant("running_mean"), rv = c.constant("running_var");
         c.expect("running_mean_after", rm);  // updated in place by the forward pass
         c.expect("running_var_after", rv);
         return batch_norm(x[0], rm, rv, x[1], x[2], true, 0.1, 1e-5);
       }},
      {"batch_norm_eval",
       [](const Args& x, Context& c) {
         Tensor rm = c.constant("running_mean"), rv = c.constant("running_var");
         c.expect("running_mean", rm);  // eval leaves them alone
         c.expect("running_var", rv);
         return batch_norm(x[0], rm, rv, x[1], x[2], false, 0.1, 1e-5);
       }},
  };
}

void run_all(DType dtype, const Tolerance& tol) {
  golden::run_cases(golden_cases(), load_fixtures(), dtype, tol);
}

}  // namespace

TEST_CASE("every case in golden.txt has a kiln counterpart") {
  std::set<std::string> in_file = golden::case_names(load_fixtures());
  CHECK(in_file == golden::case_names(golden_cases()));
  CHECK(in_file.size() >= 30);
}

TEST_CASE("golden: f64 matches PyTorch to ~1e-10") { run_all(DType::f64, {1e-10, 1e-12}); }

// f32 inputs are the f64 values rounded: errors of ~1e-7 relative per value and per operation.
TEST_CASE("golden: f32 matches PyTorch to ~1e-4") { run_all(DType::f32, {1e-4, 1e-5}); }
