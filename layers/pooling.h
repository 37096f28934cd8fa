// MaxPool2d and AvgPool2d over NCHW input. The stride defaults to the kernel size, as in PyTorch.
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

}  // namespace kiln::nn
