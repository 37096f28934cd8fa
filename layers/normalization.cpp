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

}  // namespace kiln::nn
