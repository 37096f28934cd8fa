// softmax and log_softmax along any axis (the kernel sees [outer, n, inner]), with their gradients.
#include "kiln/autograd/autocast.h"
#include "kiln/autograd/ops/common.h"

namespace kiln {

namespace {

BackwardFn softmax_gradient(Saves& saved, const Tensor& y, int64_t axis) {
  // dx = y * (g - sum(g * y)) along the axis
  return [y = saved(y), axis](const Tensor& g, const Needed&) -> Grads {
    return {y * (g - sum(g * y, {axis}, true))};
  };
}

BackwardFn log_softmax_gradient(Saves& saved, const Tensor& y, int64_t axis) {
  // dx = g - softmax(x) * sum(g) along the axis, with softmax(x) = exp(y)
  return [y = saved(y), axis](const Tensor& g, const Needed&) -> Grads {
    return {g - exp(y) * sum(g, {axis}, true)};
  };
}

Tensor softmax_impl(const Tensor& x_in, int64_t axis, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  const Tensor x = autocast::widen(x_in);
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
  if (autograd::is_recording({x})) {
    Saves saved;
    BackwardFn backward = log ? log_softmax_gradient(saved, y, a) : softmax_gradient(saved, y, a);
    autograd::record(y, name, {x}, std::move(backward), saved);
  }
  return y;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t axis) { return softmax_impl(x, axis, false); }
Tensor log_softmax(const Tensor& x, int64_t axis) { return softmax_impl(x, axis, true); }

}  // namespace kiln
