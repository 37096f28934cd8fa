// Adam and AdamW, with optional amsgrad: torch.optim.Adam and torch.optim.AdamW.
//
//   optim::AdamW opt(model.parameters(), optim::AdamWOptions(1e-3).betas({0.9, 0.95}));
//
// The update rule is in core/backend.h (AdamStep). The two differ only in weight decay: Adam
// adds weight_decay * p to the gradient (an L2 penalty, then scaled by the adaptive step like
// the rest of it); AdamW shrinks p by lr * weight_decay directly ("decoupled" decay).
// State per parameter: "step", "exp_avg", "exp_avg_sq" and, with amsgrad, "max_exp_avg_sq".
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

struct AdamOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  AdamOptions& lr(double v) { lr_ = v; return *this; }
  AdamOptions& betas(std::pair<double, double> v) { betas_ = v; return *this; }
  AdamOptions& eps(double v) { eps_ = v; return *this; }
  AdamOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  AdamOptions& amsgrad(bool v = true) { amsgrad_ = v; return *this; }

  double lr_;
  std::pair<double, double> betas_{0.9, 0.999};
  double eps_ = 1e-8;
  double weight_decay_ = 0.0;
  bool amsgrad_ = false;
};

// AdamW's options: Adam's, with PyTorch's AdamW default weight_decay of 1e-2.
struct AdamWOptions : AdamOptions {
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { weight_decay_ = 1e-2; }
};

class Adam : public Optimizer {
 public:
  // Throws ValueError as PyTorch does: lr, eps or weight_decay below 0, a beta outside [0, 1).
  Adam(std::vector<Tensor> params, const AdamOptions& options = AdamOptions());

  std::optional<double> momentum() const override { return options_.betas_.first; }
  void set_momentum(double beta1) override;  // OneCycleLR cycles beta1

 protected:
  Adam(std::string_view name, std::vector<Tensor> params, const AdamOptions& options,
       bool decoupled_weight_decay);

 private:
  void update(const std::vector<size_t>& active) override;
  AdamStep hypers(double step) const;
  Presence presence(size_t buffer) const override;

  AdamOptions options_;  // lr_ as constructed; Optimizer::lr() is the current one
  bool decoupled_weight_decay_;
};

class AdamW final : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamOptions& options = AdamWOptions());
};

}  // namespace kiln::optim
