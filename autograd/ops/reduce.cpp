// Reductions over any set of axes. The backend reduces the middle axis of a contiguous
// [outer, n, inner] tensor; here any request is brought to that form: without a copy when the
// reduced axes are adjacent in a contiguous tensor, in stages of adjacent axes when they are not
// (sum, mean, max, min), else by moving them last first. The gradients sit after the kernel path.
#include <algorithm>
#include <utility>

#include "kiln/autograd/autocast.h"
#include "kiln/autograd/ops/common.h"

namespace kiln {

namespace {

// Runs `op` of the backend over `axes` (normalised) and returns the result with keepdim = true, in
// `to` (the input's dtype; f32 or bf16 for a stage of a sum or mean, see below).
Tensor reduce_keepdim(ReduceOp op, const Tensor& input, const std::vector<int64_t>& axes, DType to) {
  Tensor x = input.detach();  // the layout changes below are not part of the graph
  const Shape shape = x.shape();  // a copy: x is rebound below
  bool adjacent = axes.empty() || axes.back() - axes.front() + 1 == static_cast<int64_t>(axes.size());
  const bool staged = op != ReduceOp::argmax && op != ReduceOp::argmin;
  if (!adjacent && x.is_contiguous() && staged) {
    // One run of adjacent axes, then the rest: each stage reduces a contiguous tensor in place of
    // a copy of the whole input. Sums, means (of equal parts), maxima and minima compose. The
    // first run goes first where it spans 16 or more elements (a conv layer's bias gradient sums
    // NCHW over N, then H and W): that pass reads whole rows of the rest in 16-byte packs and
    // leaves a sixteenth or less of the input, where reducing the last run first reads short rows
    // (H W) a warp a row: at batch 512 N first took the MNIST CNN's bias gradients in about half
    // the time in bf16, and about the same at batch 64 (kernels/cuda/reduce.cu has the
    // figures). With fewer, the last run goes first (the first would leave most of the input to
    // read again). A bf16 sum or mean keeps its partial results in f32 and is rounded once, at
    // the end, as one kernel over all the axes would: partials rounded to bf16 (8 bits) lose what
    // cancels between them (a bias gradient of 1.5 from partials of 1001.5 and -1000 came out 0).
    size_t i = 1;  // the first run: axes [0, i)
    while (i < axes.size() && axes[i] == axes[i - 1] + 1) ++i;
    int64_t extent = 1;
    for (size_t k = 0; k < i; ++k) extent *= shape[static_cast<size_t>(axes[k])];
    size_t j = axes.size() - 1;  // the last run: axes [j, end)
    while (j > 0 && axes[j - 1] == axes[j] - 1) --j;
    const bool first_run_first = extent >= 16;
    const auto cut = axes.begin() + static_cast<std::ptrdiff_t>(first_run_first ? i : j);
    std::vector<int64_t> first(axes.begin(), cut), second(cut, axes.end());
    if (!first_run_first) std::swap(first, second);
    const bool sums = op == ReduceOp::sum || op == ReduceOp::mean;
    const DType partial = sums && (x.dtype() == DType::bf16 || to == DType::bf16) ? DType::f32 : x.dtype();
    return reduce_keepdim(op, reduce_keepdim(op, x, first, partial), second, to);
  }
  if (!adjacent || !x.is_contiguous()) {
    // Move kept axes first and reduced axes last, then reduce one trailing block.
    std::vector<int64_t> order;
    for (int64_t i = 0; i < x.dim(); ++i)
      if (std::find(axes.begin(), axes.end(), i) == axes.end()) order.push_back(i);
    size_t kept = order.size();
    order.insert(order.end(), axes.begin(), axes.end());
    x = permute(x, order).contiguous();
    std::vector<int64_t> moved(axes.size());
    for (size_t i = 0; i < axes.size(); ++i) moved[i] = static_cast<int64_t>(kept + i);
    Tensor y = reduce_keepdim(op, x, moved, to);
    return y.reshape(detail::reduced_shape(shape, axes, true));
  }
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    int64_t d = shape[static_cast<size_t>(i)];
    if (axes.empty() || i < axes.front()) outer *= d;
    else if (i <= axes.back()) n *= d;
    else inner *= d;
  }
  if (axes.empty()) outer = 1, n = x.numel(), inner = 1;
  bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
  Tensor y = empty_as(detail::reduced_shape(shape, axes, true), x, arg ? DType::i32 : to);
  TensorRef in = x.ref();
  in.shape = {outer, n, inner};
  in.strides = contiguous_strides(in.shape);
  TensorRef out = y.ref();
  out.shape = {outer, inner};
  out.strides = contiguous_strides(out.shape);
  x.backend().reduce(op, in, out);
  return y;
}

Tensor drop_axes(const Tensor& y, const Shape& x_shape, const std::vector<int64_t>& axes, bool keepdim) {
  if (keepdim) return y;
  Tensor flat = y.detach();
  return make_view(flat, detail::reduced_shape(x_shape, axes, false),
                   contiguous_strides(detail::reduced_shape(x_shape, axes, false)), flat.offset());
}

// ---- gradients ----

// The gradient shaped back to a reduction's input axes (keepdim), ready to broadcast.
Tensor keep_axes(const Tensor& g, const Shape& x_shape, const std::vector<int64_t>& axes, bool keepdim) {
  if (keepdim) return g;
  Shape kept = x_shape;
  for (int64_t a : axes) kept[static_cast<size_t>(a)] = 1;
  return reshape(g, kept);
}

// Below this many elements a mean's gradient is written out whole (see sum_gradient).
constexpr int64_t kSmallMeanGradient = 1 << 16;

// sum and mean: each input element gets the gradient of its sum, scaled by 1/n for a mean. The
// gradient is a broadcast view of g where it can be; a small mean's (a loss over a batch) is
// scaled into a tensor of its own in one kernel instead, since the op before it (cross_entropy's
// backward, say) would copy the view out in a launch of its own, and for that few elements the
// launch, not the bytes, is the cost. The same products either way, the same bits.
BackwardFn sum_gradient(const Shape& x_shape, const std::vector<int64_t>& axes, bool keepdim, double scale) {
  return [=](const Tensor& g, const Needed&) -> Grads {
    Tensor kept = keep_axes(g, x_shape, axes, keepdim);
    if (scale == 1.0) return {expand(kept, x_shape)};
    if (x_shape.numel() <= kSmallMeanGradient) return {expand(kept, x_shape) * scale};
    return {expand(kept * scale, x_shape)};
  };
}

// max and min: every element equal to the extremum shares the gradient evenly.
BackwardFn extremum_gradient(Saves& saved, const Tensor& x, const Tensor& y, const std::vector<int64_t>& axes,
                             bool keepdim) {
  return [x = saved(x), y = saved(y), axes, keepdim](const Tensor& g, const Needed&) -> Grads {
    Tensor winners = eq(x, keep_axes(y, x.shape(), axes, keepdim));
    Tensor count = sum(winners, axes, true);
    return {keep_axes(g, x.shape(), axes, keepdim) * winners / count};
  };
}

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& axes_in, bool keepdim) {
  const char* name = reduce_op_name(op).data();
  std::vector<int64_t> axes = detail::normalize_axes(axes_in, x.dim(), name);
  if (x.dim() == 0) axes.clear();
  bool floating_only = op == ReduceOp::mean;
  KILN_CHECK(is_floating(x.dtype()) || (!floating_only && x.dtype() == DType::i32), DTypeError,
             name, ": takes ", floating_only ? "f32, f64 or bf16" : "f32, f64, bf16 or i32", " tensors, got ",
             x.dtype(), " of shape ", x.shape());
  Tensor y = drop_axes(reduce_keepdim(op, x, axes, x.dtype()), x.shape(), axes, keepdim);
  if (!autograd::is_recording({x})) return y;
  switch (op) {
    case ReduceOp::sum: autograd::record(y, name, {x}, sum_gradient(x.shape(), axes, keepdim, 1.0)); break;
    case ReduceOp::mean: {
      int64_t n = 1;  // the elements of each mean
      for (int64_t a : axes) n *= x.shape()[static_cast<size_t>(a)];
      if (axes.empty()) n = x.numel();
      double inv = 1.0 / static_cast<double>(std::max<int64_t>(n, 1));
      autograd::record(y, name, {x}, sum_gradient(x.shape(), axes, keepdim, inv));
      break;
    }
    case ReduceOp::max:
    case ReduceOp::min: {
      Saves saved;
      BackwardFn backward = extremum_gradient(saved, x, y, axes, keepdim);
      autograd::record(y, name, {x}, std::move(backward), saved);
      break;
    }
    default: break;  // argmax, argmin: not differentiable
  }
  return y;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::sum, autocast::widen(x), axes, keepdim);
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::mean, autocast::widen(x), axes, keepdim);
}
Tensor max(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::max, x, axes, keepdim);
}
Tensor min(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return reduce(ReduceOp::min, x, axes, keepdim);
}
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim) {
  return reduce(ReduceOp::argmax, x, {normalize_axis(axis, x.dim(), "argmax")}, keepdim);
}
Tensor argmin(const Tensor& x, int64_t axis, bool keepdim) {
  return reduce(ReduceOp::argmin, x, {normalize_axis(axis, x.dim(), "argmin")}, keepdim);
}

void add_correct(const Tensor& count, const Tensor& scores, const Tensor& targets) {
  detail::check_same_device("add_correct", scores, targets);
  KILN_CHECK(scores.dim() == 2 && scores.size(1) > 0, ShapeError, "add_correct: expects scores of shape [N, C] "
             "with C > 0, got ", scores.shape());
  KILN_CHECK(scores.dtype() != DType::u8, DTypeError, "add_correct: u8 scores take no argmax; convert them first");
  KILN_CHECK(targets.dtype() == DType::i32 && targets.shape() == Shape{scores.size(0)}, ShapeError,
             "add_correct: targets must be i32 [", scores.size(0), "] for scores of shape ", scores.shape(), ", got ",
             targets.dtype(), " ", targets.shape());
  detail::check_correct_count("add_correct", count, scores);
  const Tensor x = scores.detach().contiguous(), t = targets.contiguous();
  x.backend().count_correct(x.ref(), t.ref(), count.ref());
  count.storage()->bump_version();
}

}  // namespace kiln
