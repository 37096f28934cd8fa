// batch_norm: the batch's statistics in training (and the running averages updated in place), the
// running ones in evaluation; its fused training-mode backward as an op.
#include "kiln/autograd/autocast.h"
#include "kiln/autograd/ops/common.h"

namespace kiln {

namespace {

// y = batch_norm(x) with x seen as [N, C, S] = nc_s; x (contiguous), mean and invstd the values the
// forward used. Training: the fused backward (the statistics depend on x); evaluation: the
// statistics are constants, so grad_x = g * weight * invstd.
BackwardFn batch_norm_gradient(Saves& saved, const Tensor& x, const Tensor& mean, const Tensor& invstd,
                               const Tensor& weight, bool has_bias, bool training, const Shape& nc_s) {
  return [x = saved(x), mean = saved(mean), invstd = saved(invstd), weight = saved(weight), has_bias, training,
          nc_s](const Tensor& g, const Needed& need) -> Grads {
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
            has_weight && need[1] ? sum(g * ((x - mean.reshape(channel_shape)) * r), axes) : Tensor(),
            has_bias && need[2] ? sum(g, axes) : Tensor()};
  };
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  const Tensor x = autocast::widen(x_in);
  detail::check_floating("batch_norm", x);
  KILN_CHECK(x.dim() >= 2, ShapeError, "batch_norm: input must be [N, C] or [N, C, ...], got ", x.shape());
  int64_t channels = x.size(1);
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias}) {
    if (!t->defined()) continue;
    detail::check_same_device("batch_norm", x, *t);
    KILN_CHECK(t->shape() == Shape{channels} && t->dtype() == x.dtype(), ShapeError, "batch_norm: ",
               "per-channel tensors must be [", channels, "] ", x.dtype(), " for input ", x.shape(),
               ", got ", t->shape(), " ", t->dtype());
  }
  KILN_CHECK(training || (running_mean.defined() && running_var.defined()), ValueError,
             "batch_norm: evaluation mode needs running_mean and running_var");
  // x as [N, C, S], S the product of the axes after C: the kernels' view
  const int64_t count = x.numel() / std::max<int64_t>(channels, 1);
  const Shape nc_s{x.size(0), channels, count / std::max<int64_t>(x.size(0), 1)};
  Tensor xc = x.contiguous().detach();
  TensorRef x3 = xc.ref();
  x3.shape = nc_s;
  x3.strides = contiguous_strides(nc_s);
  Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  const TensorRef w_ref = wc.defined() ? wc.ref() : TensorRef{}, b_ref = bc.defined() ? bc.ref() : TensorRef{};
  Tensor y = empty_as(x.shape(), x);
  TensorRef y3 = y.ref();
  y3.shape = nc_s;
  y3.strides = x3.strides;
  Tensor mu, invstd;
  {
    NoGradGuard no_grad;  // the statistics are differentiated by the node below, not op by op
    if (training) {
      KILN_CHECK(count > 1, ValueError, "batch_norm: training needs more than one value per channel, "
                 "input ", x.shape(), " has ", count);
      mu = empty_as(Shape{channels}, x);
      invstd = empty_as(Shape{channels}, x);
      Tensor var = empty_as(Shape{channels}, x);
      x.backend().batch_norm_train(x3, w_ref, b_ref, eps, y3, mu.ref(), var.ref(), invstd.ref());
      if (running_mean.defined() && running_var.defined()) {
        Tensor unbiased = mul(var, static_cast<double>(count) / static_cast<double>(count - 1));
        Tensor(running_mean).copy_(add(mul(running_mean, 1.0 - momentum), mul(mu, momentum)));
        Tensor(running_var).copy_(add(mul(running_var, 1.0 - momentum), mul(unbiased, momentum)));
      }
    } else {
      mu = running_mean.detach().clone();  // kept for the gradient: a later update must not reach it
      invstd = pow(add(running_var.detach(), eps), -0.5);
      x.backend().batch_norm_apply(x3, mu.ref(), invstd.ref(), w_ref, b_ref, y3);
    }
  }
  if (autograd::is_recording({x, weight, bias})) {
    Saves saved;
    BackwardFn backward = batch_norm_gradient(saved, xc, mu, invstd, wc, bias.defined(), training, nc_s);
    autograd::record(y, "batch_norm", {x, weight, bias}, std::move(backward), saved);
  }
  return y;
}

std::vector<Tensor> batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& mean,
                                        const Tensor& invstd, const Tensor& weight, const Shape& nc_s) {
  auto as3 = [&](const Tensor& t) {
    TensorRef r = t.ref();
    r.shape = nc_s;
    r.strides = contiguous_strides(nc_s);
    return r;
  };
  Tensor xc = x.contiguous(), g = grad.contiguous();
  Tensor grad_x = empty_as(x.shape(), x);
  Tensor grad_weight = empty_as(Shape{nc_s[1]}, x), grad_bias = empty_as(Shape{nc_s[1]}, x);
  x.backend().batch_norm_backward(as3(xc), as3(g), mean.ref(), invstd.ref(),
                                  weight.defined() ? weight.ref() : TensorRef{}, as3(grad_x), grad_weight.ref(),
                                  grad_bias.ref());
  return {grad_x, grad_weight, grad_bias};
}

}  // namespace kiln
