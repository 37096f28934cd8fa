#include "kiln/optim/sgd.h"

#include "kiln/core/backend.h"

namespace kiln::optim {

namespace {

enum Buffer : size_t { kMomentumBuffer };

void check(const SGDOptions& o) {
  detail::check_non_negative("SGD", "momentum", o.momentum_);
  detail::check_non_negative("SGD", "weight_decay", o.weight_decay_);
  KILN_CHECK(!o.nesterov_ || (o.momentum_ > 0.0 && o.dampening_ == 0.0), ValueError,
             "SGD: Nesterov momentum requires a momentum > 0 and zero dampening (momentum ",
             o.momentum_, ", dampening ", o.dampening_, ")");
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer("SGD", std::move(params), options.lr_, {"momentum_buffer"}, false),
      options_(options) {
  declare_hypers({{"momentum", &options_.momentum_},
                  {"dampening", &options_.dampening_},
                  {"weight_decay", &options_.weight_decay_},
                  {"nesterov", &options_.nesterov_}},
                 [this] { check(options_); });
}

void SGD::set_momentum(double momentum) {
  change_hypers([&] { options_.momentum_ = momentum; });
}

SgdStep SGD::hypers() const {
  SgdStep h;
  h.lr = lr();
  h.momentum = options_.momentum_;
  h.dampening = options_.dampening_;
  h.weight_decay = options_.weight_decay_;
  h.nesterov = options_.nesterov_;
  return h;
}

void SGD::update(const std::vector<size_t>& active) {
  const bool use_momentum = options_.momentum_ != 0.0;
  // A parameter whose buffer is new takes a different first step (buf = g), so new and
  // existing buffers go to separate calls; after the first step there is one call.
  for (const auto& run : launches(active, [&](size_t i) -> int64_t {
         return use_momentum && !state_buffer(i, kMomentumBuffer).defined();
       })) {
    SgdStep h = hypers();
    std::vector<TensorRef> buffers;
    if (use_momentum) {
      h.init_buffers = !state_buffer(run[0], kMomentumBuffer).defined();
      // empty, not zeros: the kernel writes the first gradient into it
      for (size_t i : run) {
        if (!h.init_buffers) continue;
        check_not_capturing(i, kMomentumBuffer);  // a captured first step would start over at every replay
        state_buffer(i, kMomentumBuffer) = empty_like(parameters()[i]);
      }
      buffers = buffer_refs(run, kMomentumBuffer);
    }
    if (capturing(run[0])) {
      h.next = [this, use_momentum] {
        KILN_CHECK((options_.momentum_ != 0.0) == use_momentum, CaptureError, name(), ": momentum went ",
                   use_momentum ? "to 0" : "from 0", " after the step was captured, which changes the state it "
                   "keeps; capture the step again");
        return hypers();
      };
    }
    std::vector<Tensor> keep;
    const std::vector<TensorRef> grads = grad_refs(run, keep);
    parameters()[run[0]].backend().sgd_step(param_refs(run), grads, buffers, h);
  }
}

Optimizer::Presence SGD::presence(size_t) const {
  return Presence::optional;  // there once the parameter has stepped with momentum
}

}  // namespace kiln::optim
