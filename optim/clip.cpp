#include "kiln/optim/clip.h"

#include <cmath>

#include "kiln/autograd/node.h"
#include "kiln/core/backend.h"

namespace kiln::optim {

namespace {

// The norm of order p of every element of x, as a one-element tensor.
Tensor norm(const Tensor& x, double p) {
  if (std::isinf(p)) return max(abs(x));
  if (p == 1.0) return sum(abs(x));
  if (p == 2.0) return sqrt(sum(x * x));
  return pow(sum(pow(abs(x), p)), 1.0 / p);
}

}  // namespace

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type,
                      bool error_if_nonfinite) {
  KILN_CHECK(norm_type > 0.0, ValueError, "clip_grad_norm: norm_type must be > 0 (or inf), got ",
             norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return scalar(0.0);

  // One norm per gradient, then the norm of those: the same value as the norm of all the
  // elements together, without concatenating them.
  const Tensor& first = grads[0];
  std::vector<Tensor> norms;
  for (const Tensor& g : grads) {
    Tensor n = norm(g, norm_type);
    if (n.device() != first.device()) n = n.to(first.device());
    if (n.dtype() != first.dtype()) n = n.to(first.dtype());
    norms.push_back(n);
  }
  Tensor total = norms.size() == 1 ? norms[0] : norm(stack(norms), norm_type);

  if (error_if_nonfinite) {
    const double value = total.item();
    KILN_CHECK(std::isfinite(value), ValueError, "clip_grad_norm: the total norm of order ",
               norm_type, " of the gradients is ", value, " (non-finite), so they cannot be "
               "clipped; pass error_if_nonfinite=false to scale them by it anyway");
  }

  // min(max_norm / (total + 1e-6), 1) stays on the device; each gradient is multiplied by it
  // in place (the elementwise kernel may write over an input of the same layout).
  const Tensor one = full({}, 1.0, TensorOptions(total.dtype()).device(total.device()));
  const Tensor coef = minimum(max_norm / (total + 1e-6), one);
  for (const Tensor& g : grads) {
    Tensor c = coef;
    if (c.device() != g.device()) c = c.to(g.device());
    if (c.dtype() != g.dtype()) c = c.to(g.dtype());
    c = c.expand(g.shape());  // stride 0: one value for every element
    g.backend().binary(BinaryOp::mul, g.ref(), c.ref(), g.ref());
    g.storage()->bump_version();
  }
  return total;
}

}  // namespace kiln::optim
