// BatchNorm1d and BatchNorm2d: normalise each channel with the batch's statistics in training
// (updating running estimates) and with the running estimates in evaluation, as PyTorch.
// LayerNorm and GroupNorm: normalise each sample over its last dimensions, or over groups of its
// channels, the same in training and evaluation.
#pragma once

#include <vector>

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

// ---- LayerNorm and GroupNorm ----
// Both are kiln's ops put together (mean, subtract, square, sqrt, divide; the statistics biased,
// as PyTorch's), so they run and differentiate on every backend that has those ops.

// x normalised over its last normalized_shape.size() dimensions, which must equal
// normalized_shape: (x - mean) / sqrt(var + eps), then * weight + bias (each of normalized_shape,
// or undefined to skip). PyTorch's layer_norm.
Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// x [N, C, *] with its C channels in num_groups groups (C a multiple of it), each sample's group
// normalised over its channels and positions, then * weight + bias per channel ([C] or
// undefined). PyTorch's group_norm.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);

struct LayerNormOptions {
  LayerNormOptions(std::vector<int64_t> normalized_shape)  // NOLINT: LayerNorm({512})
      : normalized_shape_(std::move(normalized_shape)) {}
  KILN_ARG(std::vector<int64_t>, normalized_shape);
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(bool, elementwise_affine) = true;  // learn a weight (ones) and a bias (zeros) of that shape
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& options_);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  void reset_parameters();
  LayerNormOptions options;
  Tensor weight, bias;  // normalized_shape; undefined without elementwise_affine
};

struct GroupNormOptions {
  GroupNormOptions(int64_t num_groups, int64_t num_channels) : num_groups_(num_groups), num_channels_(num_channels) {}
  KILN_ARG(int64_t, num_groups);
  KILN_ARG(int64_t, num_channels);
  KILN_ARG(double, eps) = 1e-5;
  KILN_ARG(bool, affine) = true;  // learn a per-channel weight (ones) and bias (zeros)
};

class GroupNorm : public Module {
 public:
  explicit GroupNorm(const GroupNormOptions& options_);
  GroupNorm(int64_t num_groups, int64_t num_channels) : GroupNorm(GroupNormOptions(num_groups, num_channels)) {}
  Tensor forward(const Tensor& x) override;  // [N, C, *] -> the same
  std::string extra_repr() const override;
  void reset_parameters();
  GroupNormOptions options;
  Tensor weight, bias;  // [C]; undefined without affine
};

}  // namespace kiln::nn
