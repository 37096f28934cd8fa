// SGD with optional momentum, dampening, Nesterov momentum and weight decay: torch.optim.SGD.
//
//   optim::SGD opt(model.parameters(), optim::SGDOptions(0.1).momentum(0.9).weight_decay(5e-4));
//
// The update rule is in core/backend.h (SgdStep). State: "momentum_buffer" per parameter, made
// at the parameter's first step with momentum (it takes that step's gradient, undamped).
#pragma once

#include <optional>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct SGDOptions {
  explicit SGDOptions(double lr) : lr_(lr) {}  // no default, as in PyTorch
  SGDOptions& lr(double v) { lr_ = v; return *this; }
  SGDOptions& momentum(double v) { momentum_ = v; return *this; }
  SGDOptions& dampening(double v) { dampening_ = v; return *this; }
  SGDOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  SGDOptions& nesterov(bool v = true) { nesterov_ = v; return *this; }

  double lr_;
  double momentum_ = 0.0;
  double dampening_ = 0.0;
  double weight_decay_ = 0.0;
  bool nesterov_ = false;
};

class SGD final : public Optimizer {
 public:
  // Throws ValueError as PyTorch does: lr, momentum or weight_decay below 0, or nesterov
  // without momentum > 0 and dampening 0.
  SGD(std::vector<Tensor> params, const SGDOptions& options);

  std::optional<double> momentum() const override { return options_.momentum_; }
  void set_momentum(double momentum) override;

 private:
  void update(const std::vector<size_t>& active) override;
  SgdStep hypers() const;
  Presence presence(size_t buffer) const override;

  SGDOptions options_;  // lr_ as constructed; Optimizer::lr() is the current one
};

}  // namespace kiln::optim
