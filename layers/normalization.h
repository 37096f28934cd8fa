// BatchNorm1d and BatchNorm2d: normalise each channel with the batch's statistics in training
// (updating running estimates) and with the running estimates in evaluation, as PyTorch.
#pragma once

#include "kiln/layers/module.h"

namespace kiln::nn {

struct BatchNormOptions {
  BatchNormOptions(int64_t num_features) : num_features_(num_features) {}  // NOLINT: BatchNorm2d(32)
  KILN_ARG(int64_t, num_features);
  KILN_ARG(double, eps) = 1e-5;
  // running = (1 - momentum) * running + momentum * batch statistic. (PyTorch's momentum=None,
  // a cumulative average, would need the step count on the host: not supported.)
  KILN_ARG(double, momentum) = 0.1;
  KILN_ARG(bool, affine) = true;               // learn a per-channel weight and bias
  KILN_ARG(bool, track_running_stats) = true;  // without: batch statistics in evaluation too
};

// What BatchNorm1d and BatchNorm2d share; they differ only in the input ranks they accept.
// Parameters weight [C] (ones) and bias [C] (zeros) when affine; buffers running_mean [C]
// (zeros), running_var [C] (ones) and num_batches_tracked when track_running_stats.
// num_batches_tracked is a rank-0 i32 tensor (PyTorch's is int64: kiln has no 64-bit integer
// dtype, and 2^31 training steps is beyond any run); it counts the forward passes in training.
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_running_stats();
  void reset_parameters();  // also resets the running statistics

  BatchNormOptions options;
  Tensor weight, bias;
  Tensor running_mean, running_var, num_batches_tracked;

 protected:
  BatchNormBase(const BatchNormOptions& options, int64_t min_rank, int64_t max_rank, const char* layout);

 private:
  int64_t min_rank_, max_rank_;
  const char* layout_;  // the accepted input shapes, for errors
};

class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(const BatchNormOptions& options_) : BatchNormBase(options_, 2, 3, "[N, C] or [N, C, L]") {}
};

class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(const BatchNormOptions& options_) : BatchNormBase(options_, 4, 4, "[N, C, H, W]") {}
};

}  // namespace kiln::nn
