// Conv2d over NCHW input, PyTorch's layout (weight [out, in / groups, kh, kw]) and default init.
// Zero padding only (PyTorch's padding_mode="zeros").
#pragma once

#include "kiln/layers/module.h"

namespace kiln::nn {

struct Conv2dOptions {
  // kernel_size, stride, padding and dilation take one number or a pair: {3, 5}.
  Conv2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  KILN_ARG(int64_t, in_channels);
  KILN_ARG(int64_t, out_channels);
  KILN_ARG(ExpandingArray<2>, kernel_size);
  KILN_ARG(ExpandingArray<2>, stride) = 1;
  KILN_ARG(ExpandingArray<2>, padding) = 0;
  KILN_ARG(ExpandingArray<2>, dilation) = 1;
  KILN_ARG(int64_t, groups) = 1;
  KILN_ARG(bool, bias) = true;
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options);
  Conv2d(int64_t in_channels, int64_t out_channels, ExpandingArray<2> kernel_size)
      : Conv2d(Conv2dOptions(in_channels, out_channels, kernel_size)) {}

  // x [N, in, H, W] -> [N, out, OH, OW]
  Tensor forward(const Tensor& x) override;
  // The layer and then `activation` in one kernel: forward(x, Activation::relu) is relu(forward(x)).
  Tensor forward(const Tensor& x, Activation activation);
  std::string extra_repr() const override;
  // weight ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in / groups * kh * kw; bias likewise.
  void reset_parameters();

  Conv2dOptions options;
  Tensor weight;  // [out, in / groups, kh, kw]
  Tensor bias;    // [out]; undefined without bias
};

}  // namespace kiln::nn
