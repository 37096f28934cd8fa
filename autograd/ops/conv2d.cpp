// conv2d with a fused bias and activation, and its two backward kernels (input and weight
// gradients) as ops.
#include "kiln/autograd/autocast.h"
#include "kiln/autograd/ops/common.h"

#include <utility>

namespace kiln {

namespace {

Conv2dParams conv_params(const Conv2dConfig& c) {
  Conv2dParams p;
  p.stride_h = c.stride[0], p.stride_w = c.stride[1];
  p.pad_h = c.padding[0], p.pad_w = c.padding[1];
  p.dilation_h = c.dilation[0], p.dilation_w = c.dilation[1];
  p.groups = c.groups;
  return p;
}

int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// Checks x [N, C, H, W] against w [O, C / groups, KH, KW] and returns y's shape.
Shape conv_output_shape(const char* op, const Shape& x, const Shape& w, const Conv2dConfig& c) {
  KILN_CHECK(x.size() == 4, ShapeError, op, ": input must be [N, C, H, W], got ", x);
  KILN_CHECK(w.size() == 4, ShapeError, op, ": weight must be [O, C/groups, KH, KW], got ", w);
  for (int i = 0; i < 2; ++i) {
    KILN_CHECK(c.stride[i] > 0 && c.dilation[i] > 0 && c.padding[i] >= 0, ValueError, op,
               ": stride and dilation must be positive and padding non-negative");
  }
  KILN_CHECK(c.groups > 0 && x[1] % c.groups == 0 && w[0] % c.groups == 0, ShapeError, op,
             ": groups = ", c.groups, " must divide the input channels (", x[1],
             ") and the output channels (", w[0], ")");
  KILN_CHECK(w[1] * c.groups == x[1], ShapeError, op, ": input ", x, " has ", x[1],
             " channels but weight ", w, " expects ", w[1] * c.groups, " (", w[1], " per group x ",
             c.groups, " groups)");
  int64_t oh = conv_out_size(x[2], w[2], c.stride[0], c.padding[0], c.dilation[0]);
  int64_t ow = conv_out_size(x[3], w[3], c.stride[1], c.padding[1], c.dilation[1]);
  KILN_CHECK(oh > 0 && ow > 0, ShapeError, op, ": the kernel ", w[2], "x", w[3], " (dilation ",
             c.dilation[0], "x", c.dilation[1], ") does not fit the padded input ", x[2] + 2 * c.padding[0],
             "x", x[3] + 2 * c.padding[1]);
  return {x[0], w[0], oh, ow};
}

// The weight's and the bias's gradients from one pass over grad_y where the backend has a kernel
// for it (Backend::conv2d_backward_weight_and_bias), else conv2d_backward_weight and a sum. Where
// relu_y is defined, grad_y is the gradient of that relu's output, taken back through it by the
// same kernel where the backend has one, else by a pass of its own first.
std::pair<Tensor, Tensor> weight_and_bias_grads(const Tensor& x, const Tensor& grad_y, const Shape& weight_shape,
                                                const Conv2dConfig& config, const Tensor& relu_y = {}) {
  Tensor xc = x.contiguous(), g = grad_y.contiguous();
  Tensor grad_w = empty_as(weight_shape, g), grad_b = empty_as({weight_shape[0]}, g);
  Backend& be = g.backend();
  if (relu_y.defined()) {
    const Tensor r = relu_y.contiguous();
    if (be.conv2d_backward_weight_and_bias(xc.ref(), g.ref(), grad_w.ref(), grad_b.ref(), conv_params(config), r.ref()))
      return {grad_w, grad_b};
    g = relu_backward(r, g);
  }
  if (!be.conv2d_backward_weight_and_bias(xc.ref(), g.ref(), grad_w.ref(), grad_b.ref(), conv_params(config), {})) {
    g.backend().conv2d_backward_weight(xc.ref(), g.ref(), grad_w.ref(), conv_params(config));
    grad_b = sum(g, {0, 2, 3});
  }
  return {grad_w, grad_b};
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const Conv2dConfig& config,
              Activation activation) {
  const Tensor x = autocast::lower(x_in, "conv2d"), weight = autocast::lower(weight_in, "conv2d"),
               bias = autocast::lower(bias_in, "conv2d");
  detail::check_same_device("conv2d", x, weight);
  detail::check_floating("conv2d", x);
  KILN_CHECK(x.dtype() == weight.dtype(), DTypeError, "conv2d: input ", x.dtype(), " and weight ",
             weight.dtype());
  Shape y_shape = conv_output_shape("conv2d", x.shape(), weight.shape(), config);
  if (bias.defined()) {
    detail::check_same_device("conv2d", x, bias);
    KILN_CHECK(bias.shape() == Shape{weight.size(0)} && bias.dtype() == x.dtype(), ShapeError,
               "conv2d: bias ", bias.shape(), " ", bias.dtype(), " for ", weight.size(0),
               " output channels (expected [", weight.size(0), "] ", x.dtype(), ")");
  }
  Tensor xc = x.contiguous(), wc = weight.contiguous();
  Tensor bc = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = empty_as(y_shape, x);
  x.backend().conv2d(xc.ref(), wc.ref(), y.ref(), conv_params(config),
                     Epilogue{bc.defined() ? bc.ref() : TensorRef{}, activation});
  if (autograd::is_recording({x, weight, bias})) {
    // the gradient before the activation (read from y, kept only then), then the two backward
    // kernels (x read for the weight's gradient, the weight for x's) and the bias's sum; x's
    // gradient taken back through the relu that made x, when one did, x is kept anyway and the
    // backend does it in the kernel that writes x's gradient. A first layer (no gradient for x)
    // hands its relu's gradient to the weight's kernel, which may take it as it reads.
    Saves saved;
    auto gradient = [x = saved(for_grad_of(weight, xc)), w = saved(for_grad_of(x, wc)), x_shape = x.shape(),
                     w_shape = weight.shape(), has_bias = bias.defined(), config, activation,
                     y = saved(activation == Activation::none ? Tensor() : y)](const Tensor& g,
                                                                               Needed& need) -> Grads {
      const bool relu_to_weight =
          activation == Activation::relu && !need.grad_masked() && !need[0] && need[1] && has_bias && need[2];
      if (relu_to_weight) {
        auto [gw, gb] = weight_and_bias_grads(x, g, w_shape, config, y);
        return {Tensor(), gw, gb};
      }
      const Tensor gz = detail::before_activation(activation, y, g, need);
      Tensor gx;
      if (need[0] && x.defined() && need.may_mask_relu(0) &&
          gz.backend().conv2d_backward_input_relu_fused(gz.ref(), w.ref(), x.ref(), conv_params(config))) {
        gx = conv2d_backward_input(gz, w, x_shape, config, x);
        need.masked_relu(0);
      } else if (need[0]) {
        gx = conv2d_backward_input(gz, w, x_shape, config);
      }
      if (need[1] && has_bias && need[2]) {
        auto [gw, gb] = weight_and_bias_grads(x, gz, w_shape, config);
        return {gx, gw, gb};
      }
      return {gx, need[1] ? conv2d_backward_weight(x, gz, w_shape, config) : Tensor(),
              has_bias && need[2] ? sum(gz, {0, 2, 3}) : Tensor()};
    };
    autograd::record(y, "conv2d", {x, weight, bias}, gradient, saved);
    detail::mark_relu_output(y, activation == Activation::relu);
  }
  return y;
}

Tensor conv2d_backward_input(const Tensor& grad_y, const Tensor& weight, const Shape& x_shape,
                             const Conv2dConfig& config, const Tensor& relu_x) {
  Shape y_shape = conv_output_shape("conv2d_backward_input", x_shape, weight.shape(), config);
  KILN_CHECK(grad_y.shape() == y_shape, ShapeError, "conv2d_backward_input: gradient ",
             grad_y.shape(), " for an output of shape ", y_shape);
  Tensor g = grad_y.contiguous(), w = weight.contiguous();
  Tensor grad_x = empty_as(x_shape, g);
  if (relu_x.defined()) {
    detail::check_same_device("conv2d_backward_input", g, relu_x);
    KILN_CHECK(relu_x.shape() == x_shape && relu_x.dtype() == g.dtype(), ShapeError,
               "conv2d_backward_input: relu_x ", relu_x.shape(), " ", relu_x.dtype(), " for an input ", x_shape,
               " ", g.dtype());
    g.backend().conv2d_backward_input_relu(g.ref(), w.ref(), relu_x.contiguous().ref(), grad_x.ref(),
                                           conv_params(config));
  } else {
    g.backend().conv2d_backward_input(g.ref(), w.ref(), grad_x.ref(), conv_params(config));
  }
  return grad_x;
}

Tensor conv2d_backward_weight(const Tensor& x, const Tensor& grad_y, const Shape& weight_shape,
                              const Conv2dConfig& config) {
  Shape y_shape = conv_output_shape("conv2d_backward_weight", x.shape(), weight_shape, config);
  KILN_CHECK(grad_y.shape() == y_shape, ShapeError, "conv2d_backward_weight: gradient ",
             grad_y.shape(), " for an output of shape ", y_shape);
  Tensor xc = x.contiguous(), g = grad_y.contiguous();
  Tensor grad_w = empty_as(weight_shape, g);
  g.backend().conv2d_backward_weight(xc.ref(), g.ref(), grad_w.ref(), conv_params(config));
  return grad_w;
}

}  // namespace kiln
