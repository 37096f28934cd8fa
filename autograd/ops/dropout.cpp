// dropout: a Philox mask drawn on the device, applied and scaled in one kernel.
#include "kiln/autograd/ops/common.h"
#include "kiln/core/random.h"

namespace kiln {

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "dropout: p must be in [0, 1], got ", p);
  detail::check_floating("dropout", x);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);
  // Keep an element when its Philox uniform exceeds p: probability 1 - p. The draw is the one
  // uniform(x.shape(), 0, 1) would take from the generator: the same numbers and the same advance.
  Generator& gen = generator ? *generator : default_generator();
  return detail::dropout_at(x, p, gen.reserve(static_cast<uint64_t>(x.numel()), x.backend()));
}

namespace detail {

Tensor dropout_at(const Tensor& x, double p, const philox::Key& key) {
  Tensor xc = x.contiguous();
  Tensor y = empty_as(x.shape(), x);
  x.backend().dropout(xc.ref(), y.ref(), p, key);
  if (autograd::is_recording({x})) {
    // the gradient takes the same mask, drawn again from the same key rather than stored; where a
    // relu made x (whose node keeps x for its own formula), taken back through it in the same pass
    const bool after_relu = x.grad_fn() && autograd::node_of(x)->relu_output;
    Saves saved;
    auto gradient = [p, key, relu_x = saved(after_relu ? xc : Tensor())](const Tensor& g, Needed& need) -> Grads {
      if (!relu_x.defined() || !need.may_mask_relu(0)) return {dropout_backward(g, p, key)};
      need.masked_relu(0);
      return {dropout_backward(g, p, key, relu_x)};
    };
    autograd::record(y, "dropout", {x}, gradient, saved);
  }
  return y;
}

}  // namespace detail

Tensor dropout_backward(const Tensor& grad, double p, const philox::Key& key, const Tensor& relu_x) {
  Tensor g = grad.contiguous();
  Tensor out = empty_as(g.shape(), g);
  if (relu_x.defined()) {
    detail::check_same_device("dropout_backward", g, relu_x);
    KILN_CHECK(relu_x.shape() == g.shape() && relu_x.dtype() == g.dtype(), ShapeError, "dropout_backward: relu_x ",
               relu_x.shape(), " ", relu_x.dtype(), " for a gradient ", g.shape(), " ", g.dtype());
    g.backend().dropout_relu(g.ref(), relu_x.contiguous().ref(), out.ref(), p, key);
  } else {
    g.backend().dropout(g.ref(), out.ref(), p, key);
  }
  return out;
}

}  // namespace kiln
