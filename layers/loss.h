// Loss modules: forward(input, target) -> the loss, reduced as the options say.
//
//   nn::CrossEntropyLoss criterion(nn::CrossEntropyLossOptions().label_smoothing(0.1));
//   Tensor loss = criterion(logits, labels);   // logits [N, C], labels i32 [N]
#pragma once

#include "kiln/layers/module.h"

namespace kiln::nn {

struct CrossEntropyLossOptions {
  KILN_ARG(Reduction, reduction) = Reduction::mean;
  // The target becomes (1 - s) * one_hot + s / C: a mild regulariser against overconfidence.
  KILN_ARG(double, label_smoothing) = 0.0;
};

// Log-softmax and negative log-likelihood in one op (kiln::cross_entropy).
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(const CrossEntropyLossOptions& options = {});
  using Module::forward;  // the one-tensor form, which throws: a loss needs its target
  // input [N, C] logits, target i32 [N] class indices in [0, C)
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override;
  CrossEntropyLossOptions options;
};

struct MSELossOptions {
  MSELossOptions(Reduction reduction = Reduction::mean) : reduction_(reduction) {}  // NOLINT: MSELoss(Reduction::sum)
  KILN_ARG(Reduction, reduction);
};

// Mean (or summed) squared difference of input and target, which broadcast.
class MSELoss : public Module {
 public:
  explicit MSELoss(const MSELossOptions& options = {});
  using Module::forward;
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override;
  MSELossOptions options;
};

}  // namespace kiln::nn
