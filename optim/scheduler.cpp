#include "kiln/optim/scheduler.h"

#include <cmath>
#include <map>
#include <numbers>
#include <vector>

namespace kiln::optim {

LRScheduler::LRScheduler(Optimizer& optimizer, double base_lr)
    : optimizer_(optimizer), base_lr_(base_lr) {}

void LRScheduler::step() {
  ++last_epoch_;
  last_lr_ = compute_lr();
  optimizer_.set_lr(last_lr_);
}

StateDict LRScheduler::state_dict() const {
  return {{"last_epoch", scalar(static_cast<double>(last_epoch_), DType::f64)},
          {"base_lrs", from_vector<double>({base_lr_}, Shape{1})},
          {"_last_lr", from_vector<double>({last_lr_}, Shape{1})}};
}

void LRScheduler::load_state_dict(const StateDict& dict) {
  std::map<std::string, double> values;
  for (const auto& [key, t] : dict) {
    KILN_CHECK(key == "last_epoch" || key == "base_lrs" || key == "_last_lr", ValueError,
               "scheduler load_state_dict: unexpected key '", key,
               "' (expected last_epoch, base_lrs and _last_lr)");
    KILN_CHECK(t.defined() && t.numel() == 1, ShapeError, "scheduler load_state_dict: key '", key,
               "' must hold one value (one parameter group)");
    KILN_CHECK(values.emplace(key, t.item()).second, ValueError,
               "scheduler load_state_dict: duplicate key '", key, "'");
  }
  for (const char* key : {"last_epoch", "base_lrs", "_last_lr"})
    KILN_CHECK(values.count(key) != 0, ValueError, "scheduler load_state_dict: missing key '", key, "'");
  const double epoch = values["last_epoch"];
  KILN_CHECK(epoch >= -1 && epoch == std::floor(epoch), ValueError,
             "scheduler load_state_dict: key 'last_epoch' holds ", epoch, ", expected a whole number >= -1");
  last_epoch_ = static_cast<int64_t>(epoch);
  base_lr_ = values["base_lrs"];
  last_lr_ = values["_last_lr"];
}

// ---- StepLR ----

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, optimizer.lr()), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, ValueError, "StepLR: step_size must be > 0, got ", step_size);
  initial_step();
}

double StepLR::compute_lr() {
  const double lr = optimizer_.lr();
  if (last_epoch() == 0 || last_epoch() % step_size_ != 0) return lr;
  return lr * gamma_;
}

// ---- CosineAnnealingLR ----

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer, optimizer.lr()), t_max_(T_max), eta_min_(eta_min) {
  KILN_CHECK(T_max > 0, ValueError, "CosineAnnealingLR: T_max must be > 0, got ", T_max);
  initial_step();
}

// The ratio of consecutive closed-form values, applied to the current lr. At the cosine's
// bottom that ratio is 0 / 0, so the step out of it adds the closed form's increment instead.
double CosineAnnealingLR::compute_lr() {
  const double lr = optimizer_.lr();
  const int64_t e = last_epoch();
  const double pi = std::numbers::pi;
  const auto t_max = static_cast<double>(t_max_);
  if (e == 0) return lr;
  if ((e - 1 - t_max_) % (2 * t_max_) == 0)
    return lr + (base_lr() - eta_min_) * (1.0 - std::cos(pi / t_max)) / 2.0;
  const auto x = static_cast<double>(e);
  return (1.0 + std::cos(pi * x / t_max)) / (1.0 + std::cos(pi * (x - 1.0) / t_max)) *
             (lr - eta_min_) + eta_min_;
}

// ---- LinearLR ----

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer, optimizer.lr()), start_factor_(start_factor), end_factor_(end_factor),
      total_iters_(total_iters) {
  // A start factor of 0 would make the recursive form divide by 0 at epoch 1.
  KILN_CHECK(start_factor > 0.0 && start_factor <= 1.0, ValueError,
             "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  KILN_CHECK(end_factor >= 0.0 && end_factor <= 1.0, ValueError,
             "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  KILN_CHECK(total_iters > 0, ValueError, "LinearLR: total_iters must be > 0, got ", total_iters);
  initial_step();
}

// Epoch 0 scales by start_factor; each later epoch up to total_iters multiplies by the ratio
// of consecutive factors, so the lr follows the line while staying chainable.
double LinearLR::compute_lr() {
  const double lr = optimizer_.lr();
  const int64_t e = last_epoch();
  if (e == 0) return lr * start_factor_;
  if (e > total_iters_) return lr;
  const double slope = end_factor_ - start_factor_;
  return lr * (1.0 + slope / (static_cast<double>(total_iters_) * start_factor_ +
                              static_cast<double>(e - 1) * slope));
}

// ---- OneCycleLR ----

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options)
    : LRScheduler(optimizer, options.max_lr_ / options.div_factor_), options_(options),
      initial_lr_(options.max_lr_ / options.div_factor_),
      min_lr_(initial_lr_ / options.final_div_factor_) {
  KILN_CHECK(options.total_steps_ > 0, ValueError,
             "OneCycleLR: expected a positive total_steps, got ", options.total_steps_);
  KILN_CHECK(options.pct_start_ >= 0.0 && options.pct_start_ <= 1.0, ValueError,
             "OneCycleLR: pct_start must be in [0, 1], got ", options.pct_start_);
  if (options.cycle_momentum_) {
    KILN_CHECK(optimizer.momentum().has_value(), ValueError, "OneCycleLR: ", optimizer.name(),
               " has no momentum to cycle (SGD, RMSprop and Adam have); pass cycle_momentum(false)");
    optimizer.set_momentum(options.max_momentum_);
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy_ == Anneal::linear) return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
}

double OneCycleLR::compute_lr() {
  const OneCycleLROptions& o = options_;
  const int64_t step = last_epoch();
  KILN_CHECK(step <= o.total_steps_, ValueError, "OneCycleLR: tried to step ", step + 1,
             " times; the specified number of total steps is ", o.total_steps_);
  struct Phase {
    double end_step, start_lr, end_lr, start_momentum, end_momentum;
  };
  const double total = static_cast<double>(o.total_steps_);
  const double up_end = o.pct_start_ * total - 1.0;
  const double hi = o.max_momentum_, lo = o.base_momentum_;
  std::vector<Phase> phases;
  if (o.three_phase_) {
    phases = {{up_end, initial_lr_, o.max_lr_, hi, lo},
              {2.0 * o.pct_start_ * total - 2.0, o.max_lr_, initial_lr_, lo, hi},
              {total - 1.0, initial_lr_, min_lr_, hi, hi}};
  } else {
    phases = {{up_end, initial_lr_, o.max_lr_, hi, lo}, {total - 1.0, o.max_lr_, min_lr_, lo, hi}};
  }
  // The phase that holds `step` (the last one takes everything after), and where in it.
  const auto s = static_cast<double>(step);
  double start_step = 0.0;
  for (size_t i = 0; i < phases.size(); ++i) {
    const Phase& ph = phases[i];
    if (s <= ph.end_step || i + 1 == phases.size()) {
      const double pct = (s - start_step) / (ph.end_step - start_step);
      if (o.cycle_momentum_) optimizer_.set_momentum(anneal(ph.start_momentum, ph.end_momentum, pct));
      return anneal(ph.start_lr, ph.end_lr, pct);
    }
    start_step = ph.end_step;
  }
  return optimizer_.lr();  // not reached: the last phase takes every step
}

}  // namespace kiln::optim
