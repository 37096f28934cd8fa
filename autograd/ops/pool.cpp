// max_pool2d (with the indices of its maxima), max_pool2d_dropout and avg_pool2d, and their backward kernels as ops.
#include "kiln/autograd/ops/common.h"
#include "kiln/core/random.h"

namespace kiln {

namespace {

Pool2dParams pool_params(const Pool2dConfig& c) {
  Pool2dParams p;
  p.kernel_h = c.kernel[0], p.kernel_w = c.kernel[1];
  p.stride_h = c.stride[0] ? c.stride[0] : c.kernel[0];
  p.stride_w = c.stride[1] ? c.stride[1] : c.kernel[1];
  p.pad_h = c.padding[0], p.pad_w = c.padding[1];
  p.count_include_pad = c.count_include_pad;
  return p;
}

Shape pool_output_shape(const char* op, const Shape& x, const Pool2dParams& p) {
  KILN_CHECK(x.size() == 4, ShapeError, op, ": input must be [N, C, H, W], got ", x);
  KILN_CHECK(p.kernel_h > 0 && p.kernel_w > 0 && p.stride_h > 0 && p.stride_w > 0, ValueError, op,
             ": kernel and stride must be positive");
  KILN_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w,
             ValueError, op, ": padding (", p.pad_h, ", ", p.pad_w,
             ") must be non-negative and at most half the kernel (", p.kernel_h, ", ", p.kernel_w, ")");
  int64_t oh = (x[2] + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1;
  int64_t ow = (x[3] + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1;
  KILN_CHECK(x[2] + 2 * p.pad_h >= p.kernel_h && x[3] + 2 * p.pad_w >= p.kernel_w, ShapeError, op,
             ": the kernel ", p.kernel_h, "x", p.kernel_w, " is larger than the padded input ",
             x[2] + 2 * p.pad_h, "x", x[3] + 2 * p.pad_w);
  return {x[0], x[1], oh, ow};
}

}  // namespace

PoolResult max_pool2d_with_indices(const Tensor& x, const Pool2dConfig& config) {
  detail::check_floating("max_pool2d", x);
  Pool2dParams p = pool_params(config);
  Shape y_shape = pool_output_shape("max_pool2d", x.shape(), p);
  Tensor xc = x.contiguous();
  Tensor y = empty_as(y_shape, x);
  Tensor indices = empty_as(y_shape, x, DType::i32);
  x.backend().max_pool2d(xc.ref(), y.ref(), indices.ref(), p);
  if (autograd::is_recording({x})) {
    // each window's gradient goes to the position of its maximum; where a relu made x, taken back
    // through it in the same pass, read from y (a quarter of x's size at 2 x 2)
    const bool after_relu = x.grad_fn() && autograd::node_of(x)->relu_output;
    Saves saved;
    auto gradient = [indices = saved(indices, "indices"), relu_y = saved(after_relu ? y : Tensor()),
                     x_shape = x.shape(), config](const Tensor& g, Needed& need) -> Grads {
      if (!relu_y.defined() || !need.may_mask_relu(0)) return {max_pool2d_backward(g, indices, x_shape, config)};
      need.masked_relu(0);
      return {max_pool2d_backward(g, indices, x_shape, config, relu_y)};
    };
    autograd::record(y, "max_pool2d", {x}, gradient, saved);
  }
  return {y, indices};
}

Tensor max_pool2d(const Tensor& x, const Pool2dConfig& config) {
  return max_pool2d_with_indices(x, config).values;
}

Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& indices, const Shape& x_shape,
                           const Pool2dConfig& config, const Tensor& relu_y) {
  Pool2dParams p = pool_params(config);
  Shape y_shape = pool_output_shape("max_pool2d_backward", x_shape, p);
  KILN_CHECK(grad_y.shape() == y_shape && indices.shape() == y_shape && indices.dtype() == DType::i32,
             ShapeError, "max_pool2d_backward: gradient ", grad_y.shape(), " and indices ",
             indices.shape(), " for an output of shape ", y_shape);
  Tensor g = grad_y.contiguous(), idx = indices.contiguous();
  Tensor grad_x = empty_as(x_shape, g);
  if (relu_y.defined()) {
    detail::check_same_device("max_pool2d_backward", g, relu_y);
    KILN_CHECK(relu_y.shape() == y_shape && relu_y.dtype() == g.dtype(), ShapeError,
               "max_pool2d_backward: relu_y ", relu_y.shape(), " ", relu_y.dtype(), " for an output ", y_shape, " ",
               g.dtype());
    g.backend().max_pool2d_backward_relu(g.ref(), idx.ref(), relu_y.contiguous().ref(), grad_x.ref(), p);
  } else {
    g.backend().max_pool2d_backward(g.ref(), idx.ref(), grad_x.ref(), p);
  }
  return grad_x;
}

Tensor max_pool2d_dropout(const Tensor& x, const Pool2dConfig& config, double p, bool training,
                          Generator* generator) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "max_pool2d_dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0.0 || p == 1.0) return dropout(max_pool2d(x, config), p, training, generator);
  detail::check_floating("max_pool2d_dropout", x);
  Pool2dParams pp = pool_params(config);
  Shape y_shape = pool_output_shape("max_pool2d_dropout", x.shape(), pp);
  // the draw dropout would take of the pool's output: the same key, so the same mask
  Generator& gen = generator ? *generator : default_generator();
  const philox::Key key = gen.reserve(static_cast<uint64_t>(y_shape.numel()), x.backend());
  Tensor xc = x.contiguous();
  Tensor y = empty_as(y_shape, x);
  Tensor codes = empty_as(y_shape, x, DType::u8);
  if (!x.backend().max_pool2d_dropout(xc.ref(), y.ref(), codes.ref(), pp, p, key))
    return detail::dropout_at(max_pool2d(x, config), p, key);  // no kernel for this pool here: two passes
  if (autograd::is_recording({x})) {
    const bool after_relu = x.grad_fn() && autograd::node_of(x)->relu_output;
    Saves saved;
    auto gradient = [codes = saved(codes, "codes"), x_shape = x.shape(), pp, p, after_relu](const Tensor& g,
                                                                                              Needed& need) -> Grads {
      const bool relu = after_relu && need.may_mask_relu(0);
      if (relu) need.masked_relu(0);
      Tensor gc = g.contiguous();
      Tensor grad_x = empty_as(x_shape, gc);
      gc.backend().max_pool2d_dropout_backward(gc.ref(), codes.ref(), grad_x.ref(), pp, p, relu);
      return {grad_x};
    };
    autograd::record(y, "max_pool2d_dropout", {x}, gradient, saved);
  }
  return y;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dConfig& config) {
  detail::check_floating("avg_pool2d", x);
  Pool2dParams p = pool_params(config);
  Tensor xc = x.contiguous();
  Tensor y = empty_as(pool_output_shape("avg_pool2d", x.shape(), p), x);
  x.backend().avg_pool2d(xc.ref(), y.ref(), p);
  if (autograd::is_recording({x})) {
    autograd::record(y, "avg_pool2d", {x}, [x_shape = x.shape(), config](const Tensor& g, const Needed&) -> Grads {
      return {avg_pool2d_backward(g, x_shape, config)};
    });
  }
  return y;
}

Tensor avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape, const Pool2dConfig& config) {
  Pool2dParams p = pool_params(config);
  Shape y_shape = pool_output_shape("avg_pool2d_backward", x_shape, p);
  KILN_CHECK(grad_y.shape() == y_shape, ShapeError, "avg_pool2d_backward: gradient ", grad_y.shape(),
             " for an output of shape ", y_shape);
  Tensor g = grad_y.contiguous();
  Tensor grad_x = empty_as(x_shape, g);
  g.backend().avg_pool2d_backward(g.ref(), grad_x.ref(), p);
  return grad_x;
}

}  // namespace kiln
