#include "kiln/optim/adam.h"

#include <cmath>

#include "kiln/core/backend.h"

namespace kiln::optim {

namespace {

enum Buffer : size_t { kExpAvg, kExpAvgSq, kMaxExpAvgSq };

void check(std::string_view name, const AdamOptions& o) {
  detail::check_non_negative(name, "epsilon", o.eps_);
  detail::check_in_range(name, "beta1", o.betas_.first, 0.0, 1.0, false);
  detail::check_in_range(name, "beta2", o.betas_.second, 0.0, 1.0, false);
  detail::check_non_negative(name, "weight_decay", o.weight_decay_);
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam("Adam", std::move(params), options, false) {}

Adam::Adam(std::string_view name, std::vector<Tensor> params, const AdamOptions& options,
           bool decoupled_weight_decay)
    : Optimizer(name, std::move(params), options.lr_, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"},
                true),
      options_(options), decoupled_weight_decay_(decoupled_weight_decay) {
  declare_hypers({{"betas", &options_.betas_},
                  {"eps", &options_.eps_},
                  {"weight_decay", &options_.weight_decay_},
                  {"amsgrad", &options_.amsgrad_}},
                 [this] { check(this->name(), options_); });
}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& options)
    : Adam("AdamW", std::move(params), options, true) {}

void Adam::set_momentum(double beta1) {
  change_hypers([&] { options_.betas_.first = beta1; });
}

// The step's hyperparameters for parameters at step t (step() has counted this step).
AdamStep Adam::hypers(double t) const {
  AdamStep h;
  h.lr = lr();
  h.beta1 = options_.betas_.first;
  h.beta2 = options_.betas_.second;
  h.eps = options_.eps_;
  h.weight_decay = options_.weight_decay_;
  h.decoupled_weight_decay = decoupled_weight_decay_;
  h.amsgrad = options_.amsgrad_;
  h.bias_correction1 = 1.0 - std::pow(h.beta1, t);
  h.bias_correction2 = 1.0 - std::pow(h.beta2, t);
  return h;
}

void Adam::update(const std::vector<size_t>& active) {
  for (size_t i : active) {
    zero_buffer(i, kExpAvg);
    zero_buffer(i, kExpAvgSq);
    if (options_.amsgrad_) zero_buffer(i, kMaxExpAvgSq);
  }
  // The bias corrections depend on the step count, so parameters that missed steps (no
  // gradient) go to a call of their own.
  for (const auto& run : launches(active, [&](size_t i) { return param_step(i); })) {
    AdamStep h = hypers(static_cast<double>(param_step(run[0])));
    if (capturing(run[0])) {
      h.next = [this, first = run[0], amsgrad = h.amsgrad] {
        KILN_CHECK(options_.amsgrad_ == amsgrad, CaptureError, name(), ": amsgrad changed after the step was "
                   "captured, which changes the state it keeps; capture the step again");
        return hypers(static_cast<double>(param_step(first)));
      };
    }
    std::vector<Tensor> keep;
    const std::vector<TensorRef> grads = grad_refs(run, keep);
    parameters()[run[0]].backend().adam_step(
        param_refs(run), grads, buffer_refs(run, kExpAvg), buffer_refs(run, kExpAvgSq),
        h.amsgrad ? buffer_refs(run, kMaxExpAvgSq) : std::vector<TensorRef>{}, h);
  }
}

Optimizer::Presence Adam::presence(size_t buffer) const {
  if (buffer != kMaxExpAvgSq) return Presence::required;
  return options_.amsgrad_ ? Presence::required : Presence::absent;
}

}  // namespace kiln::optim
