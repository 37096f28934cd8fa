// Dropout: in training, zeroes each element with probability p and scales the rest by
// 1 / (1 - p); in evaluation, the identity. Draws from the default generator (kiln::manual_seed).
#pragma once

#include "kiln/layers/module.h"

namespace kiln::nn {

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  double p;
};

}  // namespace kiln::nn
