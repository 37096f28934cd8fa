// Linear algebra and neural-network ops: matmul, softmax, losses, conv2d, pooling, batch norm,
// dropout.
#include <cmath>

#include "kiln/autograd/ops/common.h"
#include "kiln/core/random.h"

namespace kiln {

namespace af = autograd::formulas;
using detail::empty_as;

// ---- matmul ----

namespace {

// How the kernel reads one operand of a (batched) matmul: the last two axes are a matrix read
// row-major (or, when `trans`, column-major, which is a transposed view); the batch axes must
// collapse into one stride. Operands that fit neither are copied to contiguous first.
struct Operand {
  Tensor t;
  bool trans = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

Operand as_operand(const Tensor& x, const Shape& batch) {
  Shape full = batch;
  full.push_back(x.size(-2));
  full.push_back(x.size(-1));
  TensorRef r = broadcast_ref(x, full);
  size_t rank = full.size();
  int64_t rows = full[rank - 2], cols = full[rank - 1];
  int64_t rs = r.strides[rank - 2], cs = r.strides[rank - 1];
  Operand op{x, false, 0, 0};
  bool matrix_ok = false;
  if (cs == 1 || cols == 1) {
    op.ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    matrix_ok = op.ld >= cols;
  }
  if (!matrix_ok && (rs == 1 || rows == 1)) {
    op.trans = true;
    op.ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    matrix_ok = op.ld >= rows;
  }
  // One stride must step through every batch index: true when all batch strides are 0
  // (a broadcast matrix) or they nest like a contiguous layout.
  bool batch_ok = true;
  int64_t step = -1;
  int64_t expected = 0;
  for (size_t i = rank - 2; i-- > 0;) {
    if (full[i] == 1) continue;
    if (step < 0) {
      step = r.strides[i];
      expected = step * full[i];
    } else {
      batch_ok = batch_ok && r.strides[i] == (step == 0 ? 0 : expected);
      expected *= full[i];
    }
  }
  if (!matrix_ok || !batch_ok) {
    Tensor c = expand(x.detach(), full).contiguous();
    return {c, false, cols, batch.numel() > 1 ? rows * cols : 0};
  }
  op.batch_stride = step < 0 ? 0 : step;
  return op;
}

}  // namespace

namespace {

// The product of a and b (rank >= 2, leading dimensions broadcast) through the backend, the
// epilogue applied to each element as it is stored; no autograd record. Both matmul ops call it.
Tensor matmul_kernel(const Tensor& a, const Tensor& b, const Epilogue& epilogue) {
  KILN_CHECK(a.dtype() == b.dtype(), DTypeError, "matmul: operands of dtypes ", a.dtype(), " and ",
             b.dtype());
  detail::check_floating("matmul", a);
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  KILN_CHECK(b.size(-2) == k, ShapeError, "matmul: shapes ", a.shape(), " and ", b.shape(),
             " do not multiply (", k, " columns against ", b.size(-2), " rows)");
  Shape batch_a(std::vector<int64_t>(a.shape().begin(), a.shape().end() - 2));
  Shape batch_b(std::vector<int64_t>(b.shape().begin(), b.shape().end() - 2));
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");

  Operand oa = as_operand(a, batch), ob = as_operand(b, batch);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor y = empty_as(out_shape, a);
  MatmulParams p;
  p.batch = batch.numel();
  p.m = m, p.n = n, p.k = k;
  p.trans_a = oa.trans, p.trans_b = ob.trans;
  p.lda = oa.ld, p.ldb = ob.ld;
  p.batch_stride_a = oa.batch_stride, p.batch_stride_b = ob.batch_stride;
  a.backend().matmul(oa.t.ref(), ob.t.ref(), y.ref(), p, epilogue);
  return y;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  detail::check_same_device("matmul", a, b);
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "matmul: operands of shapes ", a.shape(),
             " and ", b.shape(), "; scalars cannot be multiplied with matmul, use mul");
  // Vectors become matrices and the added axis is dropped from the result, as in torch.matmul.
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), b.dim() == 1 ? -1 : -2);
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);
  Tensor y = matmul_kernel(a, b, Epilogue{});
  if (autograd::is_recording({a, b})) autograd::record(y, "matmul", {a, b}, af::matmul(a, b));
  return y;
}

Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias, Activation activation) {
  detail::check_same_device("matmul", a, b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, "matmul with an epilogue: operands must be 2-D, got ",
             a.shape(), " and ", b.shape());
  Tensor bc;
  if (bias.defined()) {
    detail::check_same_device("matmul", a, bias);
    const int64_t n = b.size(1);
    KILN_CHECK(bias.shape() == Shape{n} && bias.dtype() == a.dtype(), ShapeError, "matmul: bias ", bias.shape(),
               " ", bias.dtype(), " for ", n, " output columns (expected [", n, "] ", a.dtype(), ")");
    bc = bias.contiguous();
  }
  Tensor y = matmul_kernel(a, b, Epilogue{bc.defined() ? bc.ref() : TensorRef{}, activation});
  if (autograd::is_recording({a, b, bias}))
    autograd::record(y, "matmul_epilogue", {a, b, bias}, af::matmul_epilogue(a, b, bias.defined(), activation, y));
  return y;
}

// ---- softmax ----

namespace {
Tensor softmax_impl(const Tensor& x, int64_t axis, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  detail::check_floating(name, x);
  int64_t a = normalize_axis(axis, x.dim(), name);
  Tensor c = x.detach().contiguous();
  int64_t outer = 1, n = x.dim() ? x.shape()[static_cast<size_t>(a)] : 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < a) outer *= x.shape()[static_cast<size_t>(i)];
    if (i > a) inner *= x.shape()[static_cast<size_t>(i)];
  }
  Tensor y = empty_as(x.shape(), x);
  TensorRef in = c.ref(), out = y.ref();
  in.shape = out.shape = {outer, n, inner};
  in.strides = out.strides = contiguous_strides(in.shape);
  x.backend().softmax(in, out, log);
  if (autograd::is_recording({x}))
    autograd::record(y, name, {x}, log ? af::log_softmax(y.detach(), a) : af::softmax(y.detach(), a));
  return y;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) { return softmax_impl(x, axis, false); }
Tensor log_softmax(const Tensor& x, int64_t axis) { return softmax_impl(x, axis, true); }

// ---- losses ----

namespace {

Tensor apply_reduction(const Tensor& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return losses;
    case Reduction::mean: return mean(losses);
    case Reduction::sum: return sum(losses);
  }
  return losses;
}

void check_class_targets(const char* op, const Tensor& scores, const Tensor& targets) {
  detail::check_same_device(op, scores, targets);
  detail::check_floating(op, scores);
  KILN_CHECK(scores.dim() == 2, ShapeError, op, ": expects scores of shape [N, C], got ", scores.shape());
  KILN_CHECK(targets.dtype() == DType::i32, DTypeError, op, ": targets must be i32 class indices, got ",
             targets.dtype());
  KILN_CHECK(targets.dim() == 1 && targets.size(0) == scores.size(0), ShapeError, op,
             ": targets of shape ", targets.shape(), " for scores of shape ", scores.shape(),
             " (expected [", scores.size(0), "])");
}

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction,
                     double label_smoothing) {
  check_class_targets("cross_entropy", logits, targets);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError,
             "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  Tensor x = logits.contiguous(), t = targets.contiguous();
  Tensor losses = empty_as({x.size(0)}, x);
  x.backend().cross_entropy(x.ref(), t.ref(), losses.ref(), label_smoothing);
  if (autograd::is_recording({logits}))
    autograd::record(losses, "cross_entropy", {logits}, af::cross_entropy(x.detach(), t, label_smoothing));
  return apply_reduction(losses, reduction);
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad_losses,
                              double label_smoothing) {
  check_class_targets("cross_entropy_backward", logits, targets);
  Tensor x = logits.contiguous(), t = targets.contiguous(), g = grad_losses.contiguous();
  KILN_CHECK(g.shape() == Shape{x.size(0)} && g.dtype() == x.dtype(), ShapeError,
             "cross_entropy_backward: gradient ", g.shape(), " for ", x.size(0), " samples");
  Tensor grad = empty_as(x.shape(), x);
  x.backend().cross_entropy_backward(x.ref(), t.ref(), g.ref(), grad.ref(), label_smoothing);
  return grad;
}

Tensor one_hot(const Tensor& indices, int64_t classes, DType dtype) {
  KILN_CHECK(indices.dtype() == DType::i32 && indices.dim() == 1, ShapeError,
             "one_hot: expects i32 indices of shape [N], got ", indices.dtype(), " ", indices.shape());
  KILN_CHECK(classes > 0, ValueError, "one_hot: classes must be positive, got ", classes);
  Tensor idx = indices.contiguous();
  Tensor y = empty_as({idx.size(0), classes}, idx, dtype);
  idx.backend().one_hot(idx.ref(), y.ref());
  return y;
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction) {
  check_class_targets("nll_loss", log_probs, targets);
  Tensor mask = one_hot(targets, log_probs.size(1), log_probs.dtype());
  return apply_reduction(neg(sum(mul(log_probs, mask), {1})), reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  KILN_CHECK(input.shape() == target.shape(), ShapeError, "mse_loss: input ", input.shape(),
             " and target ", target.shape(), " must have the same shape");
  Tensor d = sub(input, target);
  return apply_reduction(mul(d, d), reduction);
}

// ---- conv2d ----

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

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dConfig& config,
              Activation activation) {
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
  if (autograd::is_recording({x, weight, bias}))
    autograd::record(y, "conv2d", {x, weight, bias},
                     af::conv2d(xc.detach(), wc.detach(), bias.defined(), config, activation, y));
  return y;
}

Tensor conv2d_backward_input(const Tensor& grad_y, const Tensor& weight, const Shape& x_shape,
                             const Conv2dConfig& config) {
  Shape y_shape = conv_output_shape("conv2d_backward_input", x_shape, weight.shape(), config);
  KILN_CHECK(grad_y.shape() == y_shape, ShapeError, "conv2d_backward_input: gradient ",
             grad_y.shape(), " for an output of shape ", y_shape);
  Tensor g = grad_y.contiguous(), w = weight.contiguous();
  Tensor grad_x = empty_as(x_shape, g);
  g.backend().conv2d_backward_input(g.ref(), w.ref(), grad_x.ref(), conv_params(config));
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

// ---- pooling ----

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
  if (autograd::is_recording({x}))
    autograd::record(y, "max_pool2d", {x}, af::max_pool2d(indices, x.shape(), config));
  return {y, indices};
}

Tensor max_pool2d(const Tensor& x, const Pool2dConfig& config) {
  return max_pool2d_with_indices(x, config).values;
}

Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& indices, const Shape& x_shape,
                           const Pool2dConfig& config) {
  Pool2dParams p = pool_params(config);
  Shape y_shape = pool_output_shape("max_pool2d_backward", x_shape, p);
  KILN_CHECK(grad_y.shape() == y_shape && indices.shape() == y_shape && indices.dtype() == DType::i32,
             ShapeError, "max_pool2d_backward: gradient ", grad_y.shape(), " and indices ",
             indices.shape(), " for an output of shape ", y_shape);
  Tensor g = grad_y.contiguous(), idx = indices.contiguous();
  Tensor grad_x = empty_as(x_shape, g);
  g.backend().max_pool2d_backward(g.ref(), idx.ref(), grad_x.ref(), p);
  return grad_x;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dConfig& config) {
  detail::check_floating("avg_pool2d", x);
  Pool2dParams p = pool_params(config);
  Tensor xc = x.contiguous();
  Tensor y = empty_as(pool_output_shape("avg_pool2d", x.shape(), p), x);
  x.backend().avg_pool2d(xc.ref(), y.ref(), p);
  if (autograd::is_recording({x})) autograd::record(y, "avg_pool2d", {x}, af::avg_pool2d(x.shape(), config));
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

// ---- batch norm ----

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
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
  Tensor mu, invstd;
  {
    NoGradGuard no_grad;  // the statistics are differentiated by the node below, not op by op
    if (training) {
      KILN_CHECK(count > 1, ValueError, "batch_norm: training needs more than one value per channel, "
                 "input ", x.shape(), " has ", count);
      mu = empty_as(Shape{channels}, x);
      Tensor var = empty_as(Shape{channels}, x);
      x.backend().batch_norm_stats(x3, mu.ref(), var.ref());
      if (running_mean.defined() && running_var.defined()) {
        Tensor unbiased = mul(var, static_cast<double>(count) / static_cast<double>(count - 1));
        Tensor(running_mean).copy_(add(mul(running_mean, 1.0 - momentum), mul(mu, momentum)));
        Tensor(running_var).copy_(add(mul(running_var, 1.0 - momentum), mul(unbiased, momentum)));
      }
      invstd = pow(add(var, eps), -0.5);
    } else {
      mu = running_mean.detach().clone();  // kept for the gradient: a later update must not reach it
      invstd = pow(add(running_var.detach(), eps), -0.5);
    }
  }
  Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor y = empty_as(x.shape(), x);
  TensorRef y3 = y.ref();
  y3.shape = nc_s;
  y3.strides = x3.strides;
  x.backend().batch_norm_apply(x3, mu.ref(), invstd.ref(), wc.defined() ? wc.ref() : TensorRef{},
                               bc.defined() ? bc.ref() : TensorRef{}, y3);
  if (autograd::is_recording({x, weight, bias}))
    autograd::record(y, "batch_norm", {x, weight, bias},
                     af::batch_norm(xc, mu, invstd, wc, bias.defined(), training, nc_s));
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

// ---- dropout ----

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: p must be in [0, 1], got ", p);
  detail::check_floating("dropout", x);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  // Keep an element when its Philox uniform exceeds p: probability 1 - p. The draw is the one
  // uniform(x.shape(), 0, 1) would take from the generator: the same numbers and the same advance.
  Generator& g = generator ? *generator : default_generator();
  const uint64_t offset = g.advance(static_cast<uint64_t>(x.numel())), seed = g.seed();
  Tensor xc = x.contiguous();
  Tensor y = empty_as(x.shape(), x);
  x.backend().dropout(xc.ref(), y.ref(), p, seed, offset);
  if (autograd::is_recording({x})) autograd::record(y, "dropout", {x}, af::dropout(p, seed, offset));
  return y;
}

Tensor dropout_backward(const Tensor& grad, double p, uint64_t seed, uint64_t offset) {
  Tensor g = grad.contiguous();
  Tensor out = empty_as(g.shape(), g);
  g.backend().dropout(g.ref(), out.ref(), p, seed, offset);
  return out;
}

}  // namespace kiln
