#include "kiln/autograd/formulas.h"

#include <numeric>

namespace kiln::autograd::formulas {

namespace {
// The gradient shaped back to a reduction's input axes (keepdim), ready to broadcast.
Tensor keep_axes(const Tensor& g, const Shape& x_shape, const std::vector<int64_t>& axes, bool keepdim) {
  if (keepdim) return g;
  Shape kept = x_shape;
  for (int64_t a : axes) kept[static_cast<size_t>(a)] = 1;
  return kiln::reshape(g, kept);
}
}  // namespace

// ---- views and copies ----

BackwardFn identity() {
  return [](const Tensor& g, const std::vector<bool>&) -> Grads { return {g}; };
}

BackwardFn reshape(const Shape& x_shape) {
  return [x_shape](const Tensor& g, const std::vector<bool>&) -> Grads { return {kiln::reshape(g, x_shape)}; };
}

BackwardFn transpose(int64_t a, int64_t b) {
  return [a, b](const Tensor& g, const std::vector<bool>&) -> Grads { return {kiln::transpose(g, a, b)}; };
}

BackwardFn permute(const std::vector<int64_t>& order) {
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  return [inverse](const Tensor& g, const std::vector<bool>&) -> Grads { return {kiln::permute(g, inverse)}; };
}

BackwardFn slice(const Shape& x_shape, int64_t axis, int64_t start, int64_t end, int64_t step) {
  return [=](const Tensor& g, const std::vector<bool>&) -> Grads {
    Tensor grad = zeros(x_shape, TensorOptions(g.dtype()).device(g.device()));
    kiln::slice(grad, axis, start, end, step).copy_(g);
    return {grad};
  };
}

BackwardFn expand(const Shape& x_shape) {
  return [x_shape](const Tensor& g, const std::vector<bool>&) -> Grads { return {sum_to(g, x_shape)}; };
}

BackwardFn to_dtype(DType from) {
  return [from](const Tensor& g, const std::vector<bool>&) -> Grads { return {kiln::to_dtype(g, from)}; };
}

BackwardFn to_device(const Device& from) {
  return [from](const Tensor& g, const std::vector<bool>&) -> Grads { return {kiln::to_device(g, from)}; };
}

BackwardFn concat(const std::vector<int64_t>& sizes, int64_t axis) {
  return [sizes, axis](const Tensor& g, const std::vector<bool>&) -> Grads {
    Grads grads;
    int64_t at = 0;
    for (int64_t n : sizes) {
      grads.push_back(kiln::slice(g, axis, at, at + n));
      at += n;
    }
    return grads;
  };
}

BackwardFn index_select(const Shape& x_shape, int64_t axis, const Tensor& indices) {
  return [x_shape, axis, indices](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {index_select_backward(g, axis, indices, x_shape)};
  };
}

// ---- elementwise ----
// A broadcast operand receives the gradient summed over the axes it was repeated along.

BackwardFn add(const Tensor& a, const Tensor& b, const Tensor&) {
  return [as = a.shape(), bs = b.shape()](const Tensor& g, const std::vector<bool>& need) -> Grads {
    return {need[0] ? sum_to(g, as) : Tensor(), need[1] ? sum_to(g, bs) : Tensor()};
  };
}

BackwardFn sub(const Tensor& a, const Tensor& b, const Tensor&) {
  return [as = a.shape(), bs = b.shape()](const Tensor& g, const std::vector<bool>& need) -> Grads {
    return {need[0] ? sum_to(g, as) : Tensor(), need[1] ? sum_to(neg(g), bs) : Tensor()};
  };
}

BackwardFn mul(const Tensor& a, const Tensor& b, const Tensor&) {
  return [a = a.detach(), b = b.detach()](const Tensor& g, const std::vector<bool>& need) -> Grads {
    return {need[0] ? sum_to(g * b, a.shape()) : Tensor(), need[1] ? sum_to(g * a, b.shape()) : Tensor()};
  };
}

BackwardFn div(const Tensor& a, const Tensor& b, const Tensor& y) {
  // y = a / b: dy/da = 1 / b, dy/db = -a / b^2 = -y / b
  return [a_shape = a.shape(), b = b.detach(), y](const Tensor& g, const std::vector<bool>& need) -> Grads {
    Tensor g_over_b = g / b;
    return {need[0] ? sum_to(g_over_b, a_shape) : Tensor(),
            need[1] ? sum_to(-(g_over_b * y), b.shape()) : Tensor()};
  };
}

BackwardFn pow(const Tensor& a, const Tensor& b, const Tensor& y) {
  // y = a^b: dy/da = b a^(b-1), dy/db = y ln a
  return [a = a.detach(), b = b.detach(), y](const Tensor& g, const std::vector<bool>& need) -> Grads {
    return {need[0] ? sum_to(g * b * kiln::pow(a, b - 1.0), a.shape()) : Tensor(),
            need[1] ? sum_to(g * y * kiln::log(a), b.shape()) : Tensor()};
  };
}

namespace {
// maximum/minimum: the gradient goes to the operand that won; ties split it evenly (as PyTorch).
BackwardFn extremum_binary(const Tensor& a, const Tensor& b, bool largest) {
  return [a = a.detach(), b = b.detach(), largest](const Tensor& g, const std::vector<bool>& need) -> Grads {
    Tensor share_a = (largest ? gt(a, b) : lt(a, b)) + eq(a, b) * 0.5;
    return {need[0] ? sum_to(g * share_a, a.shape()) : Tensor(),
            need[1] ? sum_to(g * (1.0 - share_a), b.shape()) : Tensor()};
  };
}
}  // namespace

BackwardFn maximum(const Tensor& a, const Tensor& b, const Tensor&) { return extremum_binary(a, b, true); }
BackwardFn minimum(const Tensor& a, const Tensor& b, const Tensor&) { return extremum_binary(a, b, false); }

BackwardFn scale(double factor) {
  return [factor](const Tensor& g, const std::vector<bool>&) -> Grads { return {g * factor}; };
}

BackwardFn pow_scalar(const Tensor& x, double exponent) {
  return [x = x.detach(), exponent](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {g * kiln::pow(x, exponent - 1.0) * exponent};
  };
}

BackwardFn exp(const Tensor& y) {
  return [y](const Tensor& g, const std::vector<bool>&) -> Grads { return {g * y}; };
}

BackwardFn log(const Tensor& x) {
  return [x = x.detach()](const Tensor& g, const std::vector<bool>&) -> Grads { return {g / x}; };
}

BackwardFn sqrt(const Tensor& y) {
  return [y](const Tensor& g, const std::vector<bool>&) -> Grads { return {g / y * 0.5}; };
}

BackwardFn abs(const Tensor& x) {
  return [x = x.detach()](const Tensor& g, const std::vector<bool>&) -> Grads { return {g * sign(x)}; };
}

BackwardFn relu(const Tensor& x) {
  return [x = x.detach()](const Tensor& g, const std::vector<bool>&) -> Grads { return {relu_backward(x, g)}; };
}

BackwardFn leaky_relu(const Tensor& x, double negative_slope) {
  return [x = x.detach(), negative_slope](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {leaky_relu_backward(x, g, negative_slope)};
  };
}

BackwardFn gelu(const Tensor& x) {
  return [x = x.detach()](const Tensor& g, const std::vector<bool>&) -> Grads { return {gelu_backward(x, g)}; };
}

BackwardFn tanh(const Tensor& y) {
  return [y](const Tensor& g, const std::vector<bool>&) -> Grads { return {g * (1.0 - y * y)}; };
}

BackwardFn sigmoid(const Tensor& y) {
  return [y](const Tensor& g, const std::vector<bool>&) -> Grads { return {g * y * (1.0 - y)}; };
}

// ---- reductions ----

BackwardFn sum(const Shape& x_shape, const std::vector<int64_t>& axes, bool keepdim) {
  return [=](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {kiln::expand(keep_axes(g, x_shape, axes, keepdim), x_shape)};
  };
}

BackwardFn mean(const Shape& x_shape, const std::vector<int64_t>& axes, bool keepdim) {
  int64_t n = 1;
  for (int64_t a : axes) n *= x_shape[static_cast<size_t>(a)];
  if (axes.empty()) n = x_shape.numel();
  double inv = 1.0 / static_cast<double>(std::max<int64_t>(n, 1));
  return [=](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {kiln::expand(keep_axes(g, x_shape, axes, keepdim) * inv, x_shape)};
  };
}

BackwardFn extremum(const Tensor& x, const Tensor& y, const std::vector<int64_t>& axes, bool keepdim) {
  return [x = x.detach(), y, axes, keepdim](const Tensor& g, const std::vector<bool>&) -> Grads {
    // Every element equal to the extremum shares the gradient evenly.
    Tensor winners = eq(x, keep_axes(y, x.shape(), axes, keepdim));
    Tensor count = kiln::sum(winners, axes, true);
    return {keep_axes(g, x.shape(), axes, keepdim) * winners / count};
  };
}

// ---- neural-network ops ----

BackwardFn matmul(const Tensor& a, const Tensor& b) {
  // y = a b: da = g b^T, db = a^T g, each summed over the batch axes its operand was broadcast on.
  return [a = a.detach(), b = b.detach()](const Tensor& g, const std::vector<bool>& need) -> Grads {
    return {need[0] ? sum_to(kiln::matmul(g, kiln::transpose(b, -1, -2)), a.shape()) : Tensor(),
            need[1] ? sum_to(kiln::matmul(kiln::transpose(a, -1, -2), g), b.shape()) : Tensor()};
  };
}

namespace {
// The gradient before the epilogue's activation, read from its output y (relu: y > 0 exactly where
// the input was; relu_backward(y, g) == relu_backward(x, g), NaN included).
Tensor before_activation(Activation activation, const Tensor& y, const Tensor& g) {
  return activation == Activation::relu ? relu_backward(y, g) : g;
}
}  // namespace

BackwardFn matmul_epilogue(const Tensor& a, const Tensor& b, bool has_bias, Activation activation,
                           const Tensor& y) {
  Tensor saved = activation == Activation::none ? Tensor() : y.detach();  // only the activation reads y
  return [a = a.detach(), b = b.detach(), has_bias, activation, saved](const Tensor& g,
                                                                      const std::vector<bool>& need) -> Grads {
    const Tensor gz = before_activation(activation, saved, g);
    return {need[0] ? kiln::matmul(gz, b.t()) : Tensor(), need[1] ? kiln::matmul(a.t(), gz) : Tensor(),
            has_bias && need[2] ? kiln::sum(gz, {0}) : Tensor()};
  };
}

BackwardFn softmax(const Tensor& y, int64_t axis) {
  // dx = y * (g - sum(g * y)) along the axis
  return [y, axis](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {y * (g - kiln::sum(g * y, {axis}, true))};
  };
}

BackwardFn log_softmax(const Tensor& y, int64_t axis) {
  // dx = g - softmax(x) * sum(g) along the axis, with softmax(x) = exp(y)
  return [y, axis](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {g - kiln::exp(y) * kiln::sum(g, {axis}, true)};
  };
}

BackwardFn cross_entropy(const Tensor& logits, const Tensor& targets, double label_smoothing) {
  return [logits, targets, label_smoothing](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {cross_entropy_backward(logits, targets, g, label_smoothing)};
  };
}

BackwardFn conv2d(const Tensor& x, const Tensor& weight, bool has_bias, const Conv2dConfig& config,
                  Activation activation, const Tensor& y) {
  // y is kept only when the activation needs it
  Tensor saved = activation == Activation::none ? Tensor() : y.detach();
  return [x, weight, has_bias, config, activation, saved](const Tensor& g, const std::vector<bool>& need) -> Grads {
    const Tensor gz = before_activation(activation, saved, g);
    return {need[0] ? conv2d_backward_input(gz, weight, x.shape(), config) : Tensor(),
            need[1] ? conv2d_backward_weight(x, gz, weight.shape(), config) : Tensor(),
            has_bias && need[2] ? kiln::sum(gz, {0, 2, 3}) : Tensor()};
  };
}

BackwardFn batch_norm(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      bool has_bias, bool training, const Shape& nc_s) {
  return [=](const Tensor& g, const std::vector<bool>& need) -> Grads {
    const bool has_weight = weight.defined();
    if (training) {
      std::vector<Tensor> grads = batch_norm_backward(x, g, mean, invstd, weight, nc_s);
      return {need[0] ? grads[0] : Tensor(), has_weight && need[1] ? grads[1] : Tensor(),
              has_bias && need[2] ? grads[2] : Tensor()};
    }
    // evaluation: y = x * a + b per channel with constants a = weight * invstd
    Shape channel_shape{1, nc_s[1]};
    for (int64_t i = 2; i < x.dim(); ++i) channel_shape.push_back(1);
    std::vector<int64_t> axes{0};
    for (int64_t i = 2; i < x.dim(); ++i) axes.push_back(i);
    const Tensor r = invstd.reshape(channel_shape);
    const Tensor a = has_weight ? r * weight.reshape(channel_shape) : r;
    return {need[0] ? g * a : Tensor(),
            has_weight && need[1] ? kiln::sum(g * ((x - mean.reshape(channel_shape)) * r), axes) : Tensor(),
            has_bias && need[2] ? kiln::sum(g, axes) : Tensor()};
  };
}

BackwardFn dropout(double p, uint64_t seed, uint64_t offset) {
  return [=](const Tensor& g, const std::vector<bool>&) -> Grads { return {dropout_backward(g, p, seed, offset)}; };
}

BackwardFn max_pool2d(const Tensor& indices, const Shape& x_shape, const Pool2dConfig& config) {
  return [indices, x_shape, config](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {max_pool2d_backward(g, indices, x_shape, config)};
  };
}

BackwardFn avg_pool2d(const Shape& x_shape, const Pool2dConfig& config) {
  return [x_shape, config](const Tensor& g, const std::vector<bool>&) -> Grads {
    return {avg_pool2d_backward(g, x_shape, config)};
  };
}

}  // namespace kiln::autograd::formulas
