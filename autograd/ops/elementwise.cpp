// Elementwise ops: unary math, activations, broadcasting arithmetic and comparisons.
#include <cmath>

#include "kiln/autograd/ops/common.h"

namespace kiln {

namespace af = autograd::formulas;
using detail::empty_as;

namespace {

const char* name_of(BinaryOp op) { return binary_op_name(op).data(); }
const char* name_of(UnaryOp op) { return unary_op_name(op).data(); }

bool is_comparison(BinaryOp op) { return op >= BinaryOp::eq; }

Tensor run_binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = name_of(op);
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
                    op == UnaryOp::relu || op == UnaryOp::add_scalar || op == UnaryOp::mul_scalar;
  KILN_CHECK(is_floating(x.dtype()) || (integer_ok && x.dtype() == DType::i32), DTypeError,
             name_of(op), ": takes ", integer_ok ? "f32, f64 or i32" : "f32 or f64",
             " tensors, got ", x.dtype(), " of shape ", x.shape());
  KILN_CHECK(is_floating(x.dtype()) || alpha == std::trunc(alpha), ValueError, name_of(op), ": ",
             x.dtype(), " tensors take whole-number scalars, got ", alpha, "; convert with .to(DType::f32)");
  Tensor y = empty_as(x.shape(), x);
  x.backend().unary(op, x.ref(), y.ref(), alpha);
  return y;
}

// Binary ops that have a gradient.
Tensor arithmetic(BinaryOp op, const Tensor& a, const Tensor& b, autograd::BackwardFn (*formula)(
                      const Tensor&, const Tensor&, const Tensor&)) {
  Tensor y = run_binary(op, a, b);
  if (autograd::is_recording({a, b})) autograd::record(y, name_of(op), {a, b}, formula(a, b, y.detach()));
  return y;
}

}  // namespace

// ---- binary ----

Tensor add(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::add, a, b, af::add); }
Tensor sub(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::sub, a, b, af::sub); }
Tensor mul(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::mul, a, b, af::mul); }
Tensor div(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::div, a, b, af::div); }
Tensor pow(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::pow, a, b, af::pow); }
Tensor maximum(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::maximum, a, b, af::maximum); }
Tensor minimum(const Tensor& a, const Tensor& b) { return arithmetic(BinaryOp::minimum, a, b, af::minimum); }

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

// ---- with a scalar ----

Tensor add(const Tensor& a, double b) {
  Tensor y = run_unary(UnaryOp::add_scalar, a, b);
  if (autograd::is_recording({a})) autograd::record(y, "add", {a}, af::identity());
  return y;
}

Tensor mul(const Tensor& a, double b) {
  Tensor y = run_unary(UnaryOp::mul_scalar, a, b);
  if (autograd::is_recording({a})) autograd::record(y, "mul", {a}, af::scale(b));
  return y;
}

Tensor pow(const Tensor& a, double exponent) {
  Tensor y = run_unary(UnaryOp::pow, a, exponent);
  if (autograd::is_recording({a})) autograd::record(y, "pow", {a}, af::pow_scalar(a, exponent));
  return y;
}

// ---- unary math and activations ----

Tensor neg(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::neg, x);
  if (autograd::is_recording({x})) autograd::record(y, "neg", {x}, af::scale(-1.0));
  return y;
}

Tensor exp(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::exp, x);
  if (autograd::is_recording({x})) autograd::record(y, "exp", {x}, af::exp(y.detach()));
  return y;
}

Tensor log(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::log, x);
  if (autograd::is_recording({x})) autograd::record(y, "log", {x}, af::log(x));
  return y;
}

Tensor sqrt(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::sqrt, x);
  if (autograd::is_recording({x})) autograd::record(y, "sqrt", {x}, af::sqrt(y.detach()));
  return y;
}

Tensor abs(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::abs, x);
  if (autograd::is_recording({x})) autograd::record(y, "abs", {x}, af::abs(x));
  return y;
}

Tensor sign(const Tensor& x) { return run_unary(UnaryOp::sign, x); }

Tensor relu(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::relu, x);
  if (autograd::is_recording({x})) autograd::record(y, "relu", {x}, af::relu(x));
  return y;
}

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  Tensor y = run_unary(UnaryOp::leaky_relu, x, negative_slope);
  if (autograd::is_recording({x}))
    autograd::record(y, "leaky_relu", {x}, af::leaky_relu(x, negative_slope));
  return y;
}

Tensor gelu(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::gelu, x);
  if (autograd::is_recording({x})) autograd::record(y, "gelu", {x}, af::gelu(x));
  return y;
}

Tensor tanh(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::tanh, x);
  if (autograd::is_recording({x})) autograd::record(y, "tanh", {x}, af::tanh(y.detach()));
  return y;
}

Tensor sigmoid(const Tensor& x) {
  Tensor y = run_unary(UnaryOp::sigmoid, x);
  if (autograd::is_recording({x})) autograd::record(y, "sigmoid", {x}, af::sigmoid(y.detach()));
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
