#include "kiln/optim/rmsprop.h"

#include "kiln/core/backend.h"

namespace kiln::optim {

namespace {

enum Buffer : size_t { kSquareAvg, kMomentumBuffer, kGradAvg };

void check(const RMSpropOptions& o) {
  detail::check_non_negative("RMSprop", "epsilon", o.eps_);
  detail::check_non_negative("RMSprop", "momentum", o.momentum_);
  detail::check_non_negative("RMSprop", "weight_decay", o.weight_decay_);
  detail::check_non_negative("RMSprop", "alpha", o.alpha_);
}

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, const RMSpropOptions& options)
    : Optimizer("RMSprop", std::move(params), options.lr_,
                {"square_avg", "momentum_buffer", "grad_avg"}, true),
      options_(options) {
  declare_hypers({{"alpha", &options_.alpha_},
                  {"eps", &options_.eps_},
                  {"weight_decay", &options_.weight_decay_},
                  {"momentum", &options_.momentum_},
                  {"centered", &options_.centered_}},
                 [this] { check(options_); });
}

void RMSprop::set_momentum(double momentum) {
  change_hypers([&] { options_.momentum_ = momentum; });
}

RmspropStep RMSprop::hypers() const {
  RmspropStep h;
  h.lr = lr();
  h.alpha = options_.alpha_;
  h.eps = options_.eps_;
  h.weight_decay = options_.weight_decay_;
  h.momentum = options_.momentum_;
  h.centered = options_.centered_;
  return h;
}

void RMSprop::update(const std::vector<size_t>& active) {
  const bool use_momentum = options_.momentum_ > 0.0;
  for (size_t i : active) {
    zero_buffer(i, kSquareAvg);
    // Zeros, as PyTorch starts them; a buffer first needed later (OneCycleLR raised the
    // momentum from 0) starts from zeros too.
    if (use_momentum) zero_buffer(i, kMomentumBuffer);
    if (options_.centered_) zero_buffer(i, kGradAvg);
  }
  for (const auto& run : launches(active, [](size_t) { return int64_t{0}; })) {
    RmspropStep h = hypers();
    if (capturing(run[0])) {
      h.next = [this, use_momentum, centered = h.centered] {
        KILN_CHECK((options_.momentum_ > 0.0) == use_momentum && options_.centered_ == centered, CaptureError,
                   name(), ": momentum or centered changed after the step was captured, which changes the state "
                   "it keeps; capture the step again");
        return hypers();
      };
    }
    std::vector<Tensor> keep;
    const std::vector<TensorRef> grads = grad_refs(run, keep);
    parameters()[run[0]].backend().rmsprop_step(
        param_refs(run), grads, buffer_refs(run, kSquareAvg),
        use_momentum ? buffer_refs(run, kMomentumBuffer) : std::vector<TensorRef>{},
        h.centered ? buffer_refs(run, kGradAvg) : std::vector<TensorRef>{}, h);
  }
}

Optimizer::Presence RMSprop::presence(size_t buffer) const {
  switch (buffer) {
    case kSquareAvg: return Presence::required;
    case kMomentumBuffer: return Presence::optional;  // made when momentum is first > 0
    default: return options_.centered_ ? Presence::required : Presence::absent;
  }
}

}  // namespace kiln::optim
