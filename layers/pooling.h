// MaxPool2d and AvgPool2d over NCHW input. The stride defaults to the kernel size, as in PyTorch.
// AdaptiveAvgPool2d: an output size rather than a kernel.
#pragma once

#include "kiln/layers/module.h"

namespace kiln::nn {

struct MaxPool2dOptions {
  MaxPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  KILN_ARG(ExpandingArray<2>, kernel_size);
  KILN_ARG(ExpandingArray<2>, stride);
  KILN_ARG(ExpandingArray<2>, padding) = 0;
};

struct AvgPool2dOptions {
  AvgPool2dOptions(ExpandingArray<2> kernel_size) : kernel_size_(kernel_size), stride_(kernel_size) {}  // NOLINT
  KILN_ARG(ExpandingArray<2>, kernel_size);
  KILN_ARG(ExpandingArray<2>, stride);
  KILN_ARG(ExpandingArray<2>, padding) = 0;
  // Whether the padded zeros count in each window's divisor.
  KILN_ARG(bool, count_include_pad) = true;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(const MaxPool2dOptions& options_) : options(options_) {}
  explicit MaxPool2d(ExpandingArray<2> kernel_size) : MaxPool2d(MaxPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& x) override;  // [N, C, H, W] -> [N, C, OH, OW]
  std::string extra_repr() const override;
  MaxPool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(const AvgPool2dOptions& options_) : options(options_) {}
  explicit AvgPool2d(ExpandingArray<2> kernel_size) : AvgPool2d(AvgPool2dOptions(kernel_size)) {}
  Tensor forward(const Tensor& x) override;  // [N, C, H, W] -> [N, C, OH, OW]
  std::string extra_repr() const override;
  AvgPool2dOptions options;
};

// x [N, C, H, W] averaged into an output_size grid, as PyTorch's adaptive_avg_pool2d: output
// cell (i, j) averages rows floor(i H / OH) to ceil((i + 1) H / OH) and the columns likewise.
// Where OH divides H and OW divides W the cells tile x and it is one avg_pool2d; otherwise (cells
// of different sizes, or overlapping) a mean per cell, which suits the small grids it is used for.
Tensor adaptive_avg_pool2d(const Tensor& x, ExpandingArray<2> output_size);

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(ExpandingArray<2> output_size_) : output_size(output_size_) {}
  Tensor forward(const Tensor& x) override;  // [N, C, H, W] -> [N, C, OH, OW]
  std::string extra_repr() const override;
  ExpandingArray<2> output_size;
};

}  // namespace kiln::nn
