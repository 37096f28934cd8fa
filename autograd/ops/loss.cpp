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

// bf16 logits are read as they are and the loss computed in f32: the values autocast's cast to f32
// would give, without the cast's pass (nor its gradient's, since the gradient is written in bf16
// where the cast's backward would round an f32 one). A mean or sum is taken in the same backend
// call (one kernel for a batch on CUDA), and its gradient reads the one incoming value per row;
// where `count` is given (a reduced loss), add_correct's count too.
namespace {
Tensor cross_entropy_loss(const char* op, const Tensor& logits, const Tensor& targets, const Tensor* count,
                          Reduction reduction, double label_smoothing) {
  check_class_targets(op, logits, targets);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, ValueError,
             op, ": label_smoothing must be in [0, 1], got ", label_smoothing);
  Tensor x = logits.contiguous(), t = targets.contiguous();
  const DType wide = compute_dtype(x.dtype());
  Tensor loss;
  if (reduction == Reduction::none) {
    loss = empty_as({x.size(0)}, x, wide);
    x.backend().cross_entropy(x.ref(), t.ref(), loss.ref(), label_smoothing);
  } else {
    loss = empty_as({}, x, wide);
    const bool mean = reduction == Reduction::mean;
    if (!count) {
      x.backend().cross_entropy_reduced(x.ref(), t.ref(), loss.ref(), label_smoothing, mean);
    } else {
      x.backend().cross_entropy_reduced_counting(x.ref(), t.ref(), loss.ref(), label_smoothing, mean, count->ref());
      count->storage()->bump_version();
    }
  }
  if (autograd::is_recording({logits})) {
    // the fused backward kernel: softmax(x) - the (smoothed) one-hot target, times each loss's gradient
    Saves saved;
    auto gradient = [x = saved(x), t = saved(t, "targets"), label_smoothing, reduction](const Tensor& g,
                                                                                      const Needed&) -> Grads {
      return {cross_entropy_backward(x, t, g, label_smoothing, reduction)};
    };
    autograd::record(loss, "cross_entropy", {logits}, gradient, saved);
  }
  // outside autocast an op runs in its input's dtype: a bf16 loss for bf16 logits
  const bool keep_wide = autograd::is_autocast_enabled() || wide == x.dtype();
  return keep_wide ? loss : to_dtype(loss, x.dtype());
}
}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, Reduction reduction, double label_smoothing) {
  return cross_entropy_loss("cross_entropy", logits, targets, nullptr, reduction, label_smoothing);
}

Tensor cross_entropy_counting(const Tensor& logits, const Tensor& targets, const Tensor& count, Reduction reduction,
                              double label_smoothing) {
  KILN_CHECK(reduction != Reduction::none, ValueError, "cross_entropy_counting: reduction must be mean or sum "
             "(for each row's loss, call cross_entropy and add_correct)");
  KILN_CHECK(logits.dim() != 2 || logits.size(1) > 0, ShapeError, "cross_entropy_counting: expects logits of shape "
             "[N, C] with C > 0, got ", logits.shape());
  detail::check_correct_count("cross_entropy_counting", count, logits);
  return cross_entropy_loss("cross_entropy_counting", logits, targets, &count, reduction, label_smoothing);
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                              double label_smoothing, Reduction reduction) {
  check_class_targets("cross_entropy_backward", logits, targets);
  Tensor x = logits.contiguous(), t = targets.contiguous(), g = grad.contiguous();
  const Shape expected = reduction == Reduction::none ? Shape{x.size(0)} : Shape{};
  KILN_CHECK(g.shape() == expected && g.dtype() == compute_dtype(x.dtype()), ShapeError,
             "cross_entropy_backward: gradient ", g.shape(), " ", g.dtype(), " for ", x.size(0), " samples of ",
             x.dtype(), " logits (expected ", expected, " ", compute_dtype(x.dtype()), ")");
  Tensor grad_logits = empty_as(x.shape(), x);
  if (reduction == Reduction::none)
    x.backend().cross_entropy_backward(x.ref(), t.ref(), g.ref(), grad_logits.ref(), label_smoothing);
  else
    x.backend().cross_entropy_reduced_backward(x.ref(), t.ref(), g.ref(), grad_logits.ref(), label_smoothing,
                                               reduction == Reduction::mean);
  return grad_logits;
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
