// Activation modules: each wraps the functional op of the same name (core/ops.h), for use in a
// Sequential or as a named child.
#pragma once

#include "kiln/layers/module.h"

namespace kiln::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double slope = 0.01) : negative_slope(slope) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double negative_slope;
};

class GELU : public Module {  // the exact (erf) form, PyTorch's default
 public:
  Tensor forward(const Tensor& x) override;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
};

}  // namespace kiln::nn
