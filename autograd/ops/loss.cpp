// Losses: cross-entropy (log-softmax and NLL in one kernel, with its fused backward), NLL and mean
// squared error (written with other ops, so their gradients come with them).
#include <cstdint>
#include <limits>

#include "kiln/autograd/autocast.h"
#include "kiln/autograd/ops/common.h"

namespace kiln {

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

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets, Reduction reduction,
                     double label_smoothing) {
  const Tensor logits = autocast::widen(logits_in);
  check_class_targets("cross_entropy", logits, targets);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError,
             "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  Tensor x = logits.contiguous(), t = targets.contiguous();
  Tensor losses = empty_as({x.size(0)}, x);
  x.backend().cross_entropy(x.ref(), t.ref(), losses.ref(), label_smoothing);
  if (autograd::is_recording({logits})) {
    // the fused backward kernel: softmax(x) - the (smoothed) one-hot target, times each loss's gradient
    Saves saved;
    auto gradient = [x = saved(x), t = saved(t, "targets"), label_smoothing](const Tensor& g, const Needed&) -> Grads {
      return {cross_entropy_backward(x, t, g, label_smoothing)};
    };
    autograd::record(losses, "cross_entropy", {logits}, gradient, saved);
  }
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

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& targets, Reduction reduction) {
  const Tensor log_probs = autocast::widen(log_probs_in);
  check_class_targets("nll_loss", log_probs, targets);
  // -log_probs[i, targets[i]], gathered from the flattened scores (a product with a one-hot mask
  // would make a -inf score off the target -inf * 0 = NaN, where PyTorch's loss is finite)
  const int64_t n = log_probs.size(0), classes = log_probs.size(1);
  KILN_CHECK(n * classes <= std::numeric_limits<int32_t>::max(), ShapeError, "nll_loss: scores of shape ",
             log_probs.shape(), " have more than 2^31 - 1 elements, past the i32 indices of a gather");
  if (n > 0)  // a target outside [0, C) is a device fault, named with its sample, as any gather's index
    index_select(log_probs.slice(0, 0, 1).detach(), 1, targets);
  const TensorOptions i32 = TensorOptions(DType::i32).device(log_probs.device());
  Tensor flat_index = arange(0, static_cast<double>(n * classes), static_cast<double>(classes), i32) + targets;
  return apply_reduction(neg(index_select(log_probs.reshape({n * classes}), 0, flat_index)), reduction);
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const Tensor input = autocast::widen(input_in), target = autocast::widen(target_in);
  KILN_CHECK(input.shape() == target.shape(), ShapeError, "mse_loss: input ", input.shape(),
             " and target ", target.shape(), " must have the same shape");
  Tensor d = sub(input, target);
  return apply_reduction(mul(d, d), reduction);
}

}  // namespace kiln
