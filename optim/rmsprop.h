// RMSprop, optionally centered and with momentum: torch.optim.RMSprop.
//
//   optim::RMSprop opt(model.parameters(), optim::RMSpropOptions(1e-3).momentum(0.9).centered());
//
// The update rule is in core/backend.h (RmspropStep). State per parameter: "step",
// "square_avg", "momentum_buffer" (when momentum > 0) and "grad_avg" (when centered).
#pragma once

#include <optional>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct RMSpropOptions {
  explicit RMSpropOptions(double lr = 1e-2) : lr_(lr) {}
  RMSpropOptions& lr(double v) { lr_ = v; return *this; }
  RMSpropOptions& alpha(double v) { alpha_ = v; return *this; }
  RMSpropOptions& eps(double v) { eps_ = v; return *this; }
  RMSpropOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  RMSpropOptions& momentum(double v) { momentum_ = v; return *this; }
  RMSpropOptions& centered(bool v = true) { centered_ = v; return *this; }

  double lr_;
  double alpha_ = 0.99;
  double eps_ = 1e-8;
  double weight_decay_ = 0.0;
  double momentum_ = 0.0;
  bool centered_ = false;
};

class RMSprop final : public Optimizer {
 public:
  // Throws ValueError as PyTorch does: lr, eps, momentum, weight_decay or alpha below 0.
  RMSprop(std::vector<Tensor> params, const RMSpropOptions& options = RMSpropOptions());

  std::optional<double> momentum() const override { return options_.momentum_; }
  void set_momentum(double momentum) override;

 private:
  void update(const std::vector<size_t>& active) override;
  RmspropStep hypers() const;
  Presence presence(size_t buffer) const override;

  RMSpropOptions options_;  // lr_ as constructed; Optimizer::lr() is the current one
};

}  // namespace kiln::optim
