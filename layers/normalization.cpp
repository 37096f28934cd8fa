#include "kiln/layers/normalization.h"

#include "kiln/layers/init.h"

namespace kiln::nn {

BatchNormBase::BatchNormBase(const BatchNormOptions& options_, int64_t min_rank, int64_t max_rank,
                             const char* layout)
    : options(options_), min_rank_(min_rank), max_rank_(max_rank), layout_(layout) {
  int64_t c = options.num_features();
  KILN_CHECK(c > 0, ValueError, "BatchNorm: num_features must be positive, got ", c);
  KILN_CHECK(options.momentum() >= 0.0 && options.momentum() <= 1.0 && options.eps() > 0.0, ValueError, "BatchNorm",
             ": momentum must be in [0, 1] and eps positive, got ", options.momentum(), " and ", options.eps());
  if (options.affine()) {
    weight = register_parameter("weight", empty({c}));
    bias = register_parameter("bias", empty({c}));
  }
  if (options.track_running_stats()) {
    running_mean = register_buffer("running_mean", empty({c}));
    running_var = register_buffer("running_var", empty({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", empty({}, DType::i32));
  }
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!options.track_running_stats()) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  init::ones_(weight);
  init::zeros_(bias);
}

Tensor BatchNormBase::forward(const Tensor& x) {
  KILN_CHECK(x.dim() >= min_rank_ && x.dim() <= max_rank_, ShapeError, name(), ": expects input ", layout_,
             ", got ", x.shape());
  KILN_CHECK(x.size(1) == options.num_features(), ShapeError, name(), ": input ", x.shape(), " has ", x.size(1),
             " channels, the layer ", options.num_features());
  if (is_training() && options.track_running_stats()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1.0);
  }
  // Without running statistics there is nothing else to normalise with: batch statistics always.
  bool use_batch_stats = is_training() || !options.track_running_stats();
  return batch_norm(x, running_mean, running_var, weight, bias, use_batch_stats, options.momentum(),
                    options.eps());
}

std::string BatchNormBase::extra_repr() const {
  return detail::concat(options.num_features(), ", eps=", options.eps(), ", momentum=", options.momentum(),
                        ", affine=", options.affine() ? "true" : "false",
                        ", track_running_stats=", options.track_running_stats() ? "true" : "false");
}

// ---- LayerNorm and GroupNorm ----

namespace {

// (x - mean) / sqrt(var + eps) over `axes`, the statistics biased.
Tensor normalized(const Tensor& x, const std::vector<int64_t>& axes, double eps) {
  const Tensor centred = x - mean(x, axes, true);
  return centred / sqrt(mean(centred * centred, axes, true) + eps);
}

}  // namespace

Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const int64_t d = static_cast<int64_t>(normalized_shape.size());
  bool fits = d >= 1 && x.dim() >= d;
  for (int64_t i = 0; fits && i < d; ++i) fits = x.size(x.dim() - d + i) == normalized_shape[static_cast<size_t>(i)];
  KILN_CHECK(fits, ShapeError, "layer_norm: input ", x.shape(), " does not end in the normalized shape ",
             Shape(normalized_shape));
  KILN_CHECK(eps >= 0, ValueError, "layer_norm: eps must be >= 0, got ", eps);
  for (const Tensor& t : {weight, bias})
    KILN_CHECK(!t.defined() || t.shape() == Shape(normalized_shape), ShapeError, "layer_norm: weight and bias must be ",
               Shape(normalized_shape), ", got ", t.shape());
  std::vector<int64_t> axes;
  for (int64_t i = x.dim() - d; i < x.dim(); ++i) axes.push_back(i);
  Tensor y = normalized(x, axes, eps);
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  KILN_CHECK(x.dim() >= 2, ShapeError, "group_norm: input must be [N, C, *], got ", x.shape());
  const int64_t n = x.size(0), c = x.size(1);
  KILN_CHECK(num_groups > 0 && c % num_groups == 0, ValueError, "group_norm: ", c,
             " channels do not split into ", num_groups, " groups (the channels must be a multiple of the groups)");
  KILN_CHECK(eps >= 0, ValueError, "group_norm: eps must be >= 0, got ", eps);
  for (const Tensor& t : {weight, bias})
    KILN_CHECK(!t.defined() || t.shape() == Shape{c}, ShapeError, "group_norm: weight and bias must be [", c, "], got ",
               t.shape());
  Tensor y = x.numel() == 0 ? x : normalized(x.reshape({n, num_groups, -1}), {2}, eps).reshape(x.shape());
  Shape per_channel{c};  // [C, 1, ...]: broadcast over [N, C, *]
  for (int64_t i = 2; i < x.dim(); ++i) per_channel.push_back(1);
  if (weight.defined()) y = y * weight.reshape(per_channel);
  if (bias.defined()) y = y + bias.reshape(per_channel);
  return y;
}

LayerNorm::LayerNorm(const LayerNormOptions& options_) : options(options_) {
  const std::vector<int64_t>& shape = options.normalized_shape();
  bool positive = !shape.empty();
  for (int64_t size : shape) positive = positive && size > 0;
  KILN_CHECK(positive, ValueError, "LayerNorm: normalized_shape must be one or more positive sizes, got ",
             Shape(shape));
  if (options.elementwise_affine()) {
    weight = register_parameter("weight", empty(Shape(shape)));
    bias = register_parameter("bias", empty(Shape(shape)));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, options.normalized_shape(), weight, bias, options.eps());
}

std::string LayerNorm::extra_repr() const {
  std::string shape = "(";
  for (size_t i = 0; i < options.normalized_shape().size(); ++i)
    shape += (i ? ", " : "") + std::to_string(options.normalized_shape()[i]);
  shape += options.normalized_shape().size() == 1 ? ",)" : ")";
  return detail::concat(shape, ", eps=", options.eps(),
                        ", elementwise_affine=", options.elementwise_affine() ? "true" : "false");
}

GroupNorm::GroupNorm(const GroupNormOptions& options_) : options(options_) {
  KILN_CHECK(options.num_groups() > 0 && options.num_channels() > 0 &&
                 options.num_channels() % options.num_groups() == 0,
             ValueError, "GroupNorm: ", options.num_channels(), " channels do not split into ", options.num_groups(),
             " groups (both positive, the channels a multiple of the groups)");
  if (options.affine()) {
    weight = register_parameter("weight", empty({options.num_channels()}));
    bias = register_parameter("bias", empty({options.num_channels()}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& x) {
  KILN_CHECK(x.dim() >= 2 && x.size(1) == options.num_channels(), ShapeError, "GroupNorm: input must be [N, ",
             options.num_channels(), ", *], got ", x.shape());
  return group_norm(x, options.num_groups(), weight, bias, options.eps());
}

std::string GroupNorm::extra_repr() const {
  return detail::concat(options.num_groups(), ", ", options.num_channels(), ", eps=", options.eps(),
                        ", affine=", options.affine() ? "true" : "false");
}

}  // namespace kiln::nn
