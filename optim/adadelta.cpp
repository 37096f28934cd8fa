#include "kiln/optim/adadelta.h"

#include "kiln/core/backend.h"

namespace kiln::optim {

namespace {

enum Buffer : size_t { kSquareAvg, kAccDelta };

void check(const AdadeltaOptions& o) {
  detail::check_in_range("Adadelta", "rho", o.rho_, 0.0, 1.0, true);
  detail::check_non_negative("Adadelta", "epsilon", o.eps_);
  detail::check_non_negative("Adadelta", "weight_decay", o.weight_decay_);
}

}  // namespace

Adadelta::Adadelta(std::vector<Tensor> params, const AdadeltaOptions& options)
    : Optimizer("Adadelta", std::move(params), options.lr_, {"square_avg", "acc_delta"}, true),
      options_(options) {
  declare_hypers({{"rho", &options_.rho_}, {"eps", &options_.eps_}, {"weight_decay", &options_.weight_decay_}},
                 [this] { check(options_); });
}

AdadeltaStep Adadelta::hypers() const {
  AdadeltaStep h;
  h.lr = lr();
  h.rho = options_.rho_;
  h.eps = options_.eps_;
  h.weight_decay = options_.weight_decay_;
  return h;
}

void Adadelta::update(const std::vector<size_t>& active) {
  for (size_t i : active) {
    zero_buffer(i, kSquareAvg);
    zero_buffer(i, kAccDelta);
  }
  for (const auto& run : launches(active, [](size_t) { return int64_t{0}; })) {
    AdadeltaStep h = hypers();
    if (capturing(run[0])) h.next = [this] { return hypers(); };
    std::vector<Tensor> keep;
    const std::vector<TensorRef> grads = grad_refs(run, keep);
    parameters()[run[0]].backend().adadelta_step(param_refs(run), grads, buffer_refs(run, kSquareAvg),
                                                 buffer_refs(run, kAccDelta), h);
  }
}

Optimizer::Presence Adadelta::presence(size_t) const { return Presence::required; }

}  // namespace kiln::optim
