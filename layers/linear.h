// Linear: y = x W^T + b, PyTorch's layout (weight [out_features, in_features]) and default init.
#pragma once

#include "kiln/layers/module.h"

namespace kiln::nn {

// x [*, in], weight [out, in], bias [out] or undefined -> activation([*, out]). The weight is handed
// to matmul as a transposed view, which the kernel reads in place; the bias and the activation are
// the product's epilogue (no pass of their own).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              Activation activation = Activation::none);

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  KILN_ARG(int64_t, in_features);
  KILN_ARG(int64_t, out_features);
  KILN_ARG(bool, bias) = true;
};

class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(int64_t in_features, int64_t out_features, bool with_bias = true)
      : Linear(LinearOptions(in_features, out_features).bias(with_bias)) {}

  Tensor forward(const Tensor& x) override;
  // The layer and then `activation` in one kernel: forward(x, Activation::relu) is relu(forward(x)).
  Tensor forward(const Tensor& x, Activation activation);
  std::string extra_repr() const override;
  // weight ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming_uniform_ with a = sqrt(5)), bias likewise.
  void reset_parameters();

  LinearOptions options;
  Tensor weight;  // [out_features, in_features]
  Tensor bias;    // [out_features]; undefined without bias
};

}  // namespace kiln::nn
