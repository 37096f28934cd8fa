// Elementwise ops: unary math, activations, broadcasting arithmetic and comparisons, each with its
// gradient. A broadcast operand receives the gradient summed over the axes it was repeated along
// (sum_to).
#include <cmath>

#include "kiln/autograd/autocast.h"
#include "kiln/autograd/ops/common.h"

namespace kiln {

namespace {

const char* name_of(BinaryOp op) { return binary_op_name(op).data(); }
const char* name_of(UnaryOp op) { return unary_op_name(op).data(); }

bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq; }

Tensor run_binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in) {
  const char* name = name_of(op);
  const auto [a, b] = autocast::promote(a_in, b_in);
  detail::check_same_device(name, a, b);
  KILN_CHECK(a.dtype() == b.dtype(), DTypeError, name, ": operands of dtypes ", a.dtype(), " and ",
             b.dtype(), " (shapes ", a.shape(), " and ", b.shape(), "); convert one with .to(dtype)");
  KILN_CHECK(a.dtype() != DType::u8 || is_comparison(op), DTypeError, name, ": u8 tensors take "
             "comparisons only; convert with .to(DType::f32) or .to(DType::i32) first");
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor y = empty_as(shape, a);
  a.backend().binary(op, broadcast_ref(a, shape), broadcast_ref(b, shape), y.ref());
  return y;
}

Tensor run_unary(UnaryOp op, const Tensor& x, double alpha = 0.0) {
  bool integer_ok = op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::sign ||
                    op == UnaryOp::relu || op == UnaryOp::add_scalar || op == UnaryOp::mul_scalar ||
                    op == UnaryOp::isfinite;
  KILN_CHECK(is_floating(x.dtype()) || (integer_ok && x.dtype() == DType::i32), DTypeError,
             name_of(op), ": takes ", integer_ok ? "f32, f64, bf16 or i32" : "f32, f64 or bf16",
             " tensors, got ", x.dtype(), " of shape ", x.shape());
  KILN_CHECK(is_floating(x.dtype()) || alpha == std::trunc(alpha), ValueError, name_of(op), ": ",
             x.dtype(), " tensors take whole-number scalars, got ", alpha, "; convert with .to(DType::f32)");
  Tensor y = empty_as(x.shape(), x);
  x.backend().unary(op, x.ref(), y.ref(), alpha);
  return y;
}

// The gradient of y = op(a, b), given a, b and y; what it reads of them goes through `saved`.
using BinaryGradient = BackwardFn (*)(Saves& saved, const Tensor& a, const Tensor& b, const Tensor& y);

// Binary ops that have a gradient.
Tensor arithmetic(BinaryOp op, const Tensor& a_in, const Tensor& b_in, BinaryGradient gradient) {
  const auto [a, b] = autocast::promote(a_in, b_in);  // recorded with the operands the kernel saw
  Tensor y = run_binary(op, a, b);
  if (autograd::is_recording({a, b})) {
    Saves saved;
    BackwardFn backward = gradient(saved, a, b, y);
    autograd::record(y, name_of(op), {a, b}, std::move(backward), saved);
  }
  return y;
}

BackwardFn add_gradient(Saves&, const Tensor& a, const Tensor& b, const Tensor&) {
  return [as = a.shape(), bs = b.shape()](const Tensor& g, const Needed& need) -> Grads {
    return {need[0] ? sum_to(g, as) : Tensor(), need[1] ? sum_to(g, bs) : Tensor()};
  };
}

BackwardFn sub_gradient(Saves&, const Tensor& a, const Tensor& b, const Tensor&) {
  return [as = a.shape(), bs = b.shape()](const Tensor& g, const Needed& need) -> Grads {
    return {need[0] ? sum_to(g, as) : Tensor(), need[1] ? sum_to(neg(g), bs) : Tensor()};
  };
}

BackwardFn mul_gradient(Saves& saved, const Tensor& a, const Tensor& b, const Tensor&) {
  // a is read for b's gradient only, and b for a's
  return [a = saved(for_grad_of(b, a)), b = saved(for_grad_of(a, b)), a_shape = a.shape(),
          b_shape = b.shape()](const Tensor& g, const Needed& need) -> Grads {
    return {need[0] ? sum_to(g * b, a_shape) : Tensor(), need[1] ? sum_to(g * a, b_shape) : Tensor()};
  };
}

BackwardFn div_gradient(Saves& saved, const Tensor& a, const Tensor& b, const Tensor& y) {
  // y = a / b: dy/da = 1 / b, dy/db = -a / b^2 = -y / b
  return [a_shape = a.shape(), b = saved(b), y = saved(for_grad_of(b, y))](const Tensor& g,
                                                                           const Needed& need) -> Grads {
    Tensor g_over_b = g / b;
    return {need[0] ? sum_to(g_over_b, a_shape) : Tensor(),
            need[1] ? sum_to(-(g_over_b * y), b.shape()) : Tensor()};
  };
}

BackwardFn pow_gradient(Saves& saved, const Tensor& a, const Tensor& b, const Tensor& y) {
  // y = a^b: dy/da = b a^(b-1), dy/db = y ln a. PyTorch makes the first 0 where b = 0 (else
  // 0 * a^-1 is NaN at a = 0 or NaN) and the second 0 where a = 0 and b >= 0 (else y ln 0 is NaN or
  // -inf). Without a select op, the masks go into the arguments: a^0 = 1 and ln 1 = 0 for any a.
  return [a = saved(a), b = saved(b), y = saved(for_grad_of(b, y))](const Tensor& g, const Needed& need) -> Grads {
    Tensor grad_a, grad_b;
    if (need[0]) grad_a = sum_to(g * b * pow(a, b - 1.0 + eq(b, 0.0)), a.shape());
    if (need[1]) grad_b = sum_to(g * y * log(a + eq(a, 0.0) * ge(b, 0.0)), b.shape());
    return {grad_a, grad_b};
  };
}

// maximum/minimum: the gradient goes to the operand that won; ties split it evenly; where either
// is NaN (no winner), each gets all of it, as in PyTorch (the gradient masked out of the loser only).
BackwardFn extremum_gradient(Saves& saved, const Tensor& a, const Tensor& b, bool largest) {
  return [a = saved(a), b = saved(b), largest](const Tensor& g, const Needed& need) -> Grads {
    Tensor half_tie = eq(a, b) * 0.5;
    Tensor a_lost = largest ? lt(a, b) : gt(a, b), b_lost = largest ? gt(a, b) : lt(a, b);
    return {need[0] ? sum_to(g * (1.0 - a_lost - half_tie), a.shape()) : Tensor(),
            need[1] ? sum_to(g * (1.0 - b_lost - half_tie), b.shape()) : Tensor()};
  };
}
BackwardFn maximum_gradient(Saves& saved, const Tensor& a, const Tensor& b, const Tensor&) {
  return extremum_gradient(saved, a, b, true);
}
BackwardFn minimum_gradient(Saves& saved, const Tensor& a, const Tensor& b, const Tensor&) {
  return extremum_gradient(saved, a, b, false);
}

// Records y = op(x) when x needs a gradient, the gradient being formula(g, read): `read` is x or y,
// whichever the formula is written with, saved (detached: a closure that held y itself would keep
// the graph alive through a cycle); undefined, and nothing saved, when the formula reads neither.
template <class F>
void record_unary(Tensor& y, std::string_view op, const Tensor& x, const Tensor& read, F formula) {
  if (!autograd::is_recording({x})) return;
  Saves saved;
  autograd::record(y, op, {x}, [read = saved(read), formula](const Tensor& g, const Needed&) -> Grads {
    return {formula(g, read)};
  }, saved);
}

}  // namespace

// ---- binary ----

Tensor add(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::add, a, b, add_gradient); }
Tensor sub(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::sub, a, b, sub_gradient); }
Tensor mul(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::mul, a, b, mul_gradient); }
Tensor div(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::div, a, b, div_gradient); }
Tensor pow(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::pow, a, b, pow_gradient); }
Tensor maximum(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::maximum, a, b, maximum_gradient); }
Tensor minimum(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::minimum, a, b, minimum_gradient); }

Tensor eq(const Tensor& a, const Tensor& b) { return run_binary(BinaryOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return run_binary(BinaryOp::ne, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return run_binary(BinaryOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return run_binary(BinaryOp::ge, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return run_binary(BinaryOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return run_binary(BinaryOp::le, a, b); }

namespace {
Tensor scalar_like(double value, const Tensor& like) {
  return scalar(value, TensorOptions(like.dtype()).device(like.device()));
}
}  // namespace

Tensor eq(const Tensor& a, double b) { return eq(a, scalar_like(b, a)); }
Tensor gt(const Tensor& a, double b) { return gt(a, scalar_like(b, a)); }
Tensor lt(const Tensor& a, double b) { return lt(a, scalar_like(b, a)); }
Tensor ne(const Tensor& a, double b) { return ne(a, scalar_like(b, a)); }
Tensor ge(const Tensor& a, double b) { return ge(a, scalar_like(b, a)); }
Tensor le(const Tensor& a, double b) { return le(a, scalar_like(b, a)); }

// ---- with a scalar ----

Tensor add(const Tensor& a, double b) {
  Tensor y = run_unary(UnaryOp::add_scalar, a, b);
  record_unary(y, "add", a, Tensor(), [](const Tensor& g, const Tensor&) { return g; });
  return y;
}

Tensor mul(const Tensor& a, double b) {
  Tensor y = run_unary(UnaryOp::mul_scalar, a, b);
  record_unary(y, "mul", a, Tensor(), [b](const Tensor& g, const Tensor&) { return g * b; });
  return y;
}

Tensor pow(const Tensor& a_in, double exponent) {
  const Tensor a = autocast::widen(a_in);
  Tensor y = run_unary(UnaryOp::pow, a, exponent);
  // d(x^0)/dx is 0 for every x, as in PyTorch (the formula's 0 * x^-1 would be NaN at 0 and NaN)
  if (exponent == 0.0) {
    record_unary(y, "pow", a, Tensor(), [](const Tensor& g, const Tensor&) { return zeros_like(g); });
    return y;
  }
  record_unary(y, "pow", a, a, [exponent](const Tensor& g, const Tensor& in) {
    return g * pow(in, exponent - 1.0) * exponent;
  });
  return y;
}

// ---- unary math and activations (`in` is the op's input, `out` its output) ----

Tensor neg(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::neg, x);
  record_unary(y, "neg", x, Tensor(), [](const Tensor& g, const Tensor&) { return -g; });
  return y;
}

Tensor exp(const Tensor& x_in) {
  const Tensor x = autocast::widen(x_in);
  Tensor y = run_unary(UnaryOp::exp, x);
  record_unary(y, "exp", x, y, [](const Tensor& g, const Tensor& out) { return g * out; });
  return y;
}

Tensor log(const Tensor& x_in) {
  const Tensor x = autocast::widen(x_in);
  Tensor y = run_unary(UnaryOp::log, x);
  record_unary(y, "log", x, x, [](const Tensor& g, const Tensor& in) { return g / in; });
  return y;
}

Tensor sqrt(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::sqrt, x);
  record_unary(y, "sqrt", x, y, [](const Tensor& g, const Tensor& out) { return g / out * 0.5; });
  return y;
}

Tensor abs(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::abs, x);
  record_unary(y, "abs", x, x, [](const Tensor& g, const Tensor& in) { return g * sign(in); });
  return y;
}

Tensor sign(const Tensor& x) { return run_unary(UnaryOp::sign, x); }

// Not differentiable, as the comparisons. u8, which no backend's unary kernel takes, holds no
// NaN or infinity: all ones, without a kernel.
Tensor isfinite(const Tensor& x) {
  if (x.dtype() == DType::u8) return ones_like(x);
  return run_unary(UnaryOp::isfinite, x);
}

int64_t count_nonfinite(const Tensor& x) {
  if (!is_floating(x.dtype()) || x.numel() == 0) return 0;
  NoGradGuard no_grad;
  if (kiln::min(isfinite(x)).item() == 1) return 0;
  Tensor finite = isfinite(x.to(Device::cpu())).to(DType::i32).sum();  // exact, however many
  return x.numel() - static_cast<int64_t>(finite.item());
}

// The activations' gradients are fused kernels (relu_backward, ... below). relu's reads its output
// (the same mask as its input's, NaN included), which the op after it may then apply for it
// (autograd::Needed: may_mask_relu).
Tensor relu(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::relu, x);
  if (autograd::is_recording({x})) {
    Saves saved;
    autograd::record(y, "relu", {x}, [y = saved(y)](const Tensor& g, const Needed& need) -> Grads {
      return {need.grad_masked() ? g : relu_backward(y, g)};
    }, saved);
    detail::mark_relu_output(y);
  }
  return y;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  Tensor y = run_unary(UnaryOp::leaky_relu, x, negative_slope);
  record_unary(y, "leaky_relu", x, x, [negative_slope](const Tensor& g, const Tensor& in) {
    return leaky_relu_backward(in, g, negative_slope);
  });
  return y;
}

Tensor gelu(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::gelu, x);
  record_unary(y, "gelu", x, x, [](const Tensor& g, const Tensor& in) { return gelu_backward(in, g); });
  return y;
}

Tensor tanh(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::tanh, x);
  record_unary(y, "tanh", x, y, [](const Tensor& g, const Tensor& out) { return g * (1.0 - out * out); });
  return y;
}

Tensor sigmoid(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::sigmoid, x);
  record_unary(y, "sigmoid", x, y, [](const Tensor& g, const Tensor& out) { return g * out * (1.0 - out); });
  return y;
}

// ---- fused activation gradients ----

namespace {
Tensor activation_backward(UnaryOp op, const Tensor& x, const Tensor& grad, double alpha) {
  const char* name = name_of(op);
  detail::check_same_device(name, x, grad);
  KILN_CHECK(x.shape() == grad.shape() && x.dtype() == grad.dtype(), ShapeError, name,
             "_backward: gradient ", grad.shape(), " ", grad.dtype(), " for input ", x.shape(), " ",
             x.dtype());
  detail::check_floating(name, x);
  Tensor y = empty_as(x.shape(), x);
  x.backend().unary_backward(op, x.ref(), grad.ref(), y.ref(), alpha);
  return y;
}
}  // namespace

Tensor relu_backward(const Tensor& x, const Tensor& grad) {
  return activation_backward(UnaryOp::relu, x, grad, 0.0);
}
Tensor leaky_relu_backward(const Tensor& x, const Tensor& grad, double negative_slope) {
  return activation_backward(UnaryOp::leaky_relu, x, grad, negative_slope);
}
Tensor gelu_backward(const Tensor& x, const Tensor& grad) {
  return activation_backward(UnaryOp::gelu, x, grad, 0.0);
}

// ---- operators ----

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(a, b), b); }

}  // namespace kiln
