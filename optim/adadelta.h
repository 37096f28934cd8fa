// Adadelta: torch.optim.Adadelta.
//
//   optim::Adadelta opt(model.parameters(), optim::AdadeltaOptions().rho(0.95));
//
// The update rule is in core/backend.h (AdadeltaStep). State per parameter: "step",
// "square_avg" and "acc_delta". No momentum, so OneCycleLR needs cycle_momentum(false).
#pragma once

#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdadeltaOptions {
  explicit AdadeltaOptions(double lr = 1.0) : lr_(lr) {}
  AdadeltaOptions& lr(double v) { lr_ = v; return *this; }
  AdadeltaOptions& rho(double v) { rho_ = v; return *this; }
  AdadeltaOptions& eps(double v) { eps_ = v; return *this; }
  AdadeltaOptions& weight_decay(double v) { weight_decay_ = v; return *this; }

  double lr_;
  double rho_ = 0.9;
  double eps_ = 1e-6;
  double weight_decay_ = 0.0;
};

class Adadelta final : public Optimizer {
 public:
  // Throws ValueError as PyTorch does: lr, eps or weight_decay below 0, rho outside [0, 1].
  Adadelta(std::vector<Tensor> params, const AdadeltaOptions& options = AdadeltaOptions());

 private:
  void update(const std::vector<size_t>& active) override;
  AdadeltaStep hypers() const;
  Presence presence(size_t buffer) const override;

  AdadeltaOptions options_;  // lr_ as constructed; Optimizer::lr() is the current one
};

}  // namespace kiln::optim
