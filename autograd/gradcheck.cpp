#include "kiln/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "kiln/autograd/node.h"
#include "kiln/core/backend.h"
#include "kiln/autograd/ops.h"
#include "kiln/core/random.h"

namespace kiln::autograd {

namespace {

void check_inputs(const std::vector<Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    KILN_CHECK(x.is_leaf() && x.is_contiguous(), ValueError, "gradcheck: input ", i,
               " must be a contiguous leaf; build views inside the checked function");
  }
}

// L = sum(f(inputs) * r) in double.
double objective(const CheckedFn& f, const std::vector<Tensor>& inputs, const Tensor& r) {
  NoGradGuard no_grad;
  return sum(f(inputs) * r).item();
}

void write_element(const Tensor& x, int64_t i, double value) {
  visit_dtype(x.dtype(), [&](auto tag) {
    auto v = static_cast<decltype(tag)>(value);
    x.backend().write(x.storage()->data(), static_cast<size_t>(x.offset() + i) * sizeof(v), &v, sizeof(v));
  });
  x.storage()->bump_version();
}

// Runs backward of L and returns each input's gradient (undefined where none is wanted).
std::vector<Tensor> analytic(const CheckedFn& f, const std::vector<Tensor>& inputs, Tensor& r,
                             uint64_t seed) {
  for (const Tensor& x : inputs)
    if (x.defined()) x.zero_grad();
  Tensor y = f(inputs);
  Generator gen(seed);
  r = uniform(y.shape(), -1.0, 1.0, TensorOptions(y.dtype()).device(y.device()), &gen);
  sum(y * r).backward();
  std::vector<Tensor> grads;
  for (const Tensor& x : inputs) {
    Tensor g = x.defined() && x.requires_grad() ? x.grad() : Tensor();
    // An input that the output does not depend on has a zero gradient.
    if (x.defined() && x.requires_grad() && !g.defined()) g = zeros_like(x);
    grads.push_back(g);
  }
  return grads;
}

bool close(double numeric, double analytic_value, const GradcheckOptions& o) {
  return std::abs(numeric - analytic_value) <= o.atol + o.rtol * std::abs(numeric);
}

}  // namespace

GradcheckResult gradcheck(const CheckedFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  check_inputs(inputs);
  Tensor r;
  std::vector<Tensor> grads = analytic(f, inputs, r, options.seed);
  GradcheckResult result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!grads[i].defined()) continue;
    std::vector<double> values = x.to_vector<double>();
    std::vector<double> expected = grads[i].to_vector<double>();
    for (size_t j = 0; j < values.size(); ++j) {
      auto at = static_cast<int64_t>(j);
      write_element(x, at, values[j] + options.eps);
      double plus = objective(f, inputs, r);
      write_element(x, at, values[j] - options.eps);
      double minus = objective(f, inputs, r);
      write_element(x, at, values[j]);
      double numeric = (plus - minus) / (2.0 * options.eps);
      double error = std::abs(numeric - expected[j]);
      result.max_abs_error = std::max(result.max_abs_error, error);
      if (result.ok && !close(numeric, expected[j], options)) {
        std::ostringstream msg;
        msg << "gradcheck: input " << i << " " << x.shape() << ", element " << j
            << ": backprop gives " << expected[j] << ", finite differences " << numeric
            << " (|error| " << error << " > atol " << options.atol << " + rtol " << options.rtol
            << " * |numeric|)";
        result.ok = false;
        result.message = msg.str();
      }
    }
  }
  return result;
}

GradcheckResult gradcheck_directional(const CheckedFn& f, const std::vector<Tensor>& inputs,
                                      const GradcheckOptions& options) {
  check_inputs(inputs);
  Tensor r;
  std::vector<Tensor> grads = analytic(f, inputs, r, options.seed);
  // One random direction per input; the directional derivative of L along all of them at once.
  Generator gen(options.seed + 1);
  std::vector<Tensor> base, direction;
  double expected = 0.0;
  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!grads[i].defined()) {
      base.emplace_back();
      direction.emplace_back();
      continue;
    }
    const Tensor& x = inputs[i];
    base.push_back(x.clone());
    direction.push_back(uniform(x.shape(), -1.0, 1.0, TensorOptions(x.dtype()).device(x.device()), &gen));
    expected += sum(grads[i] * direction.back()).item();
  }
  auto shift = [&](double step) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (base[i].defined()) Tensor(inputs[i]).copy_(base[i] + direction[i] * step);
  };
  shift(options.eps);
  double plus = objective(f, inputs, r);
  shift(-options.eps);
  double minus = objective(f, inputs, r);
  shift(0.0);
  double numeric = (plus - minus) / (2.0 * options.eps);
  GradcheckResult result;
  result.max_abs_error = std::abs(numeric - expected);
  if (!close(numeric, expected, options)) {
    std::ostringstream msg;
    msg << "gradcheck_directional: backprop gives " << expected << ", finite differences "
        << numeric << " (|error| " << result.max_abs_error << " > atol " << options.atol
        << " + rtol " << options.rtol << " * |numeric|)";
    result.ok = false;
    result.message = msg.str();
  }
  return result;
}

}  // namespace kiln::autograd
