// Learning-rate schedulers: StepLR, CosineAnnealingLR, LinearLR (warm-up) and OneCycleLR, with
// torch.optim.lr_scheduler's semantics and values.
//
//   optim::SGD opt(model.parameters(), optim::SGDOptions(0.1).momentum(0.9));
//   optim::CosineAnnealingLR sched(opt, /*T_max=*/epochs);
//   for (epoch...) { train(opt); sched.step(); }
//
// A scheduler sets its optimizer's lr as a function of an epoch counter, last_epoch. The
// constructor sets epoch 0's lr (last_epoch = 0) and each step() moves to the next epoch, as in
// PyTorch. Like PyTorch's step(), each computes the new lr from the optimizer's current one
// (the "chainable" form: StepLR multiplies by gamma), so values match PyTorch's to rounding.
// The lr is a host value passed to the step kernels: no device work, no synchronisation.
#pragma once

#include <cstdint>

#include "kiln/optim/optimizer.h"

namespace kiln::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();  // last_epoch + 1, and sets the optimizer's lr (and momentum, for OneCycleLR)
  double get_last_lr() const { return last_lr_; }  // the lr the last step (or the constructor) set
  int64_t last_epoch() const { return last_epoch_; }
  double base_lr() const { return base_lr_; }

  // "last_epoch", "base_lrs" [1] and "_last_lr" [1], f64 (PyTorch's names). The schedule's own
  // settings (step_size, T_max, ...) come from the constructor; the optimizer's lr and
  // momentum from the optimizer's state_dict.
  StateDict state_dict() const;
  // Throws ValueError naming the key on a missing, unexpected or malformed one.
  void load_state_dict(const StateDict& dict);

 protected:
  // base_lr: PyTorch's initial_lr, the optimizer's lr for all but OneCycleLR.
  LRScheduler(Optimizer& optimizer, double base_lr);
  // Subclass constructors call this last (PyTorch's _initial_step): epoch 0's lr.
  void initial_step() { step(); }
  // The lr for last_epoch (already advanced).
  virtual double compute_lr() = 0;

  Optimizer& optimizer_;

 private:
  double base_lr_;
  int64_t last_epoch_ = -1;
  double last_lr_ = 0.0;
};

// Multiplies the lr by gamma every step_size epochs.
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 private:
  double compute_lr() override;
  int64_t step_size_;
  double gamma_;
};

// Anneals the lr from its initial value to eta_min along half a cosine over T_max epochs,
//   lr(e) = eta_min + (lr_0 - eta_min) * (1 + cos(pi * e / T_max)) / 2,
// computed recursively as PyTorch does; past T_max the cosine goes on (back up to lr_0 at 2 T_max).
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 private:
  double compute_lr() override;
  int64_t t_max_;
  double eta_min_;
};

// Scales the lr by a factor that goes linearly from start_factor (epoch 0) to end_factor
// (epoch total_iters), then stays: the usual linear warm-up (PyTorch's LinearLR).
class LinearLR final : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);

 private:
  double compute_lr() override;
  double start_factor_, end_factor_;
  int64_t total_iters_;
};
using LinearWarmup = LinearLR;

enum class Anneal : uint8_t { cos, linear };

struct OneCycleLROptions {
  OneCycleLROptions(double max_lr, int64_t total_steps) : max_lr_(max_lr), total_steps_(total_steps) {}
  OneCycleLROptions& pct_start(double v) { pct_start_ = v; return *this; }
  OneCycleLROptions& anneal_strategy(Anneal v) { anneal_strategy_ = v; return *this; }
  OneCycleLROptions& cycle_momentum(bool v) { cycle_momentum_ = v; return *this; }
  OneCycleLROptions& base_momentum(double v) { base_momentum_ = v; return *this; }
  OneCycleLROptions& max_momentum(double v) { max_momentum_ = v; return *this; }
  OneCycleLROptions& div_factor(double v) { div_factor_ = v; return *this; }
  OneCycleLROptions& final_div_factor(double v) { final_div_factor_ = v; return *this; }
  OneCycleLROptions& three_phase(bool v = true) { three_phase_ = v; return *this; }

  double max_lr_;
  int64_t total_steps_;
  double pct_start_ = 0.3;
  Anneal anneal_strategy_ = Anneal::cos;
  bool cycle_momentum_ = true;
  double base_momentum_ = 0.85;
  double max_momentum_ = 0.95;
  double div_factor_ = 25.0;
  double final_div_factor_ = 1e4;
  bool three_phase_ = false;
};

// The 1cycle policy (Smith & Topin): the lr rises from max_lr / div_factor to max_lr over the
// first pct_start of total_steps, then falls to max_lr / div_factor / final_div_factor; the
// momentum (SGD's and RMSprop's momentum, Adam's beta1) moves the opposite way between
// max_momentum and base_momentum. three_phase: up, back down to the initial lr symmetrically,
// then down to the minimum. Meant to step once per batch; a step past total_steps throws.
class OneCycleLR final : public LRScheduler {
 public:
  // Throws ValueError as PyTorch does (total_steps <= 0, pct_start outside [0, 1],
  // cycle_momentum with an optimizer that has no momentum).
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);

 private:
  double compute_lr() override;
  double anneal(double start, double end, double pct) const;

  OneCycleLROptions options_;
  double initial_lr_, min_lr_;
};

}  // namespace kiln::optim
