// Custom ops (autograd/function.h, libtorch's torch::autograd::Function): a forward and a backward
// of the program's own, recorded like kiln's ops. Their gradients against finite differences
// (and a wrong backward caught), inputs that need no gradient, what backward is told, and the
// errors kiln's own ops give: a saved tensor written in place, a backward of the wrong count or
// shape, each naming the op.
#include <doctest/doctest.h>

#include <any>
#include <string>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
using autograd::Context;
using autograd::Grads;

namespace {

// y = x * w * scale: two inputs and a number passed through.
struct ScaledMul : autograd::Function<ScaledMul> {
  static constexpr const char* name = "scaled_mul";
  static Tensor forward(Context& ctx, const Tensor& x, const Tensor& w, double scale) {
    ctx.save_for_backward({x, w});
    ctx.data["scale"] = scale;
    return x * w * scale;
  }
  static Grads backward(Context& ctx, const Tensor& grad) {
    const Tensor& x = ctx.saved()[0];
    const Tensor& w = ctx.saved()[1];
    const double scale = std::any_cast<double>(ctx.data.at("scale"));
    calls.push_back({ctx.needs_input_grad(0), ctx.needs_input_grad(1)});
    return {ctx.needs_input_grad(0) ? grad * w * scale : Tensor(), ctx.needs_input_grad(1) ? grad * x * scale : Tensor()};
  }
  static inline std::vector<std::vector<bool>> calls;  // what each backward was told
};

// exp with a wrong gradient (exp(x) + 0.01 x): what gradcheck must catch. No name of its own.
struct WrongExp : autograd::Function<WrongExp> {
  static Tensor forward(Context& ctx, const Tensor& x) {
    Tensor y = exp(x);
    ctx.save_for_backward({x, y});
    return y;
  }
  static Grads backward(Context& ctx, const Tensor& grad) { return {grad * (ctx.saved()[1] + ctx.saved()[0] * 0.01)}; }
};

// Returns its input as it is: the output must still be a tensor of its own.
struct Identity : autograd::Function<Identity> {
  static constexpr const char* name = "identity";
  static Tensor forward(Context&, const Tensor& x) { return x; }
  static Grads backward(Context&, const Tensor& grad) { return {grad}; }
};

// Backwards that break the rules.
struct TwoGradients : autograd::Function<TwoGradients> {
  static constexpr const char* name = "two_gradients";
  static Tensor forward(Context&, const Tensor& x) { return x * 2.0; }
  static Grads backward(Context&, const Tensor& grad) { return {grad, grad}; }
};
struct WrongShape : autograd::Function<WrongShape> {
  static constexpr const char* name = "wrong_shape";
  static Tensor forward(Context&, const Tensor& x) { return x * 2.0; }
  static Grads backward(Context&, const Tensor& grad) { return {grad.sum()}; }
};

Tensor leaf(const Shape& shape, double lo, double hi) { return uniform(shape, lo, hi, DType::f64).requires_grad_(); }
// Whether a and b agree within tol everywhere.
bool close(const Tensor& a, const Tensor& b, double tol = 1e-12) { return abs(a - b).max().item() <= tol; }

}  // namespace

TEST_CASE("a custom op's backward passes gradcheck, and a wrong one fails it") {
  manual_seed(3);
  auto f = [](const std::vector<Tensor>& in) { return ScaledMul::apply(in[0], in[1], 0.75); };
  const autograd::GradcheckResult good = autograd::gradcheck(f, {leaf({3, 5}, -1, 1), leaf({3, 5}, -1, 1)});
  CHECK_MESSAGE(good.ok, good.message);
  // broadcast inside the op is the user's to handle: here both inputs have the same shape

  auto wrong = [](const std::vector<Tensor>& in) { return WrongExp::apply(in[0]); };
  const autograd::GradcheckResult bad = autograd::gradcheck(wrong, {leaf({4}, -1, 1)});
  CHECK_FALSE(bad.ok);
  CHECK(bad.max_abs_error > 1e-3);
}

TEST_CASE("a custom op records a node only where an input requires grad, and tells backward which") {
  manual_seed(4);
  const Tensor x = uniform({2, 3}, -1, 1, DType::f64), w = leaf({2, 3}, -1, 1);
  Tensor y = ScaledMul::apply(x, w, 2.0);
  CHECK(y.requires_grad());
  REQUIRE(y.grad_fn());
  CHECK(y.grad_fn()->op == "scaled_mul");
  ScaledMul::calls.clear();
  y.sum().backward();
  REQUIRE(ScaledMul::calls.size() == 1);
  CHECK(ScaledMul::calls[0] == std::vector<bool>{false, true});
  CHECK(close(w.grad(), x * 2.0));

  const Tensor y2 = ScaledMul::apply(x, x, 2.0);  // nothing requires grad
  CHECK_FALSE(y2.requires_grad());
  CHECK_FALSE(y2.grad_fn());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(ScaledMul::apply(x, w, 2.0).requires_grad());
  }
  CHECK(close(y2, x * x * 2.0));
}

TEST_CASE("a custom op's forward records nothing inside, and returning an input leaves the input a leaf") {
  const Tensor x = leaf({4}, -1, 1);
  Tensor y = Identity::apply(x);
  CHECK(y.grad_fn());
  CHECK(y.grad_fn()->op == "identity");
  CHECK_FALSE(x.grad_fn());  // still the leaf it was
  (y * 3.0).sum().backward();
  CHECK(close(x.grad(), full({4}, 3.0, DType::f64)));
  CHECK(WrongExp::apply(leaf({2}, 0, 1)).grad_fn()->op == "custom function");
}

TEST_CASE("a custom op chains with kiln's ops and layers, and its gradient reaches the parameters") {
  manual_seed(5);
  nn::Linear fc(3, 2);
  const Tensor x = uniform({4, 3}, -1, 1);
  const Tensor scale = uniform({4, 2}, 0.5, 1.5);
  Tensor out = ScaledMul::apply(fc(x), scale, 0.5);
  Tensor loss = (out * out).mean();
  loss.backward();
  // the same through kiln's own ops
  Tensor weight = fc.weight.detach().requires_grad_(), bias = fc.bias.detach().requires_grad_();
  Tensor want_out = nn::linear(x, weight, bias) * scale * 0.5;
  Tensor want = (want_out * want_out).mean();
  want.backward();
  CHECK(close(fc.weight.grad(), weight.grad(), 1e-6));
  CHECK(close(fc.bias.grad(), bias.grad(), 1e-6));
}

TEST_CASE("a custom op's errors name it: a saved input written in place, a backward of the wrong count or shape") {
  Tensor x = leaf({3}, -1, 1);
  Tensor a = x * 1.0;  // not a leaf, so it can be written in place
  Tensor y = ScaledMul::apply(a, x, 1.0);
  {
    NoGradGuard no_grad;
    a.fill_(2.0);
  }
  CHECK_THROWS_WITH_AS(y.sum().backward(),
                       doctest::Contains("one of the tensors saved by 'scaled_mul' for its backward (its input 0, [3] "
                                         "f64) was modified in place: version 1, expected 0"),
                       AutogradError);
  try {
    ScaledMul::apply(a, x, 1.0).sum().backward();  // a fresh graph: fine
  } catch (const Error& e) {
    FAIL(e.what());
  }

  CHECK_THROWS_WITH_AS(TwoGradients::apply(leaf({3}, -1, 1)).sum().backward(),
                       doctest::Contains("backward of 'two_gradients' returned 2 gradients for 1 inputs"), AutogradError);
  CHECK_THROWS_WITH_AS(WrongShape::apply(leaf({3}, -1, 1)).sum().backward(), doctest::Contains("'wrong_shape'"),
                       AutogradError);
}
