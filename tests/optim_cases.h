// The optimizer configurations the device backends' tests step against the CPU: every rule, with
// momentum, Nesterov, weight decay, amsgrad, AdamW's decoupled decay, centering.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kiln/optim/optim.h"

namespace kiln::test {

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

template <class O, class Options>
MakeOptimizer make_optimizer(Options options) {
  return [options](std::vector<Tensor> params) { return std::make_unique<O>(std::move(params), options); };
}

inline std::vector<std::pair<const char*, MakeOptimizer>> optimizer_rules() {
  using namespace optim;
  return {
      {"sgd_plain", make_optimizer<SGD>(SGDOptions(0.02))},
      {"sgd_momentum", make_optimizer<SGD>(SGDOptions(0.02).momentum(0.9).dampening(0.1))},
      {"sgd_nesterov", make_optimizer<SGD>(SGDOptions(0.02).momentum(0.9).nesterov().weight_decay(0.01))},
      {"adam", make_optimizer<Adam>(AdamOptions(0.01))},
      {"adam_weight_decay", make_optimizer<Adam>(AdamOptions(0.01).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1))},
      {"adam_amsgrad", make_optimizer<Adam>(AdamOptions(0.01).betas({0.9, 0.6}).amsgrad())},
      {"adamw_amsgrad", make_optimizer<AdamW>(AdamWOptions(0.01).betas({0.9, 0.6}).weight_decay(0.05).amsgrad())},
      {"adadelta", make_optimizer<Adadelta>(AdadeltaOptions(0.5).rho(0.8).eps(1e-4).weight_decay(0.1))},
      {"rmsprop_momentum", make_optimizer<RMSprop>(RMSpropOptions(0.01).momentum(0.9).weight_decay(0.1))},
      {"rmsprop_centered",
       make_optimizer<RMSprop>(RMSpropOptions(0.01).alpha(0.9).eps(1e-6).momentum(0.5).centered())},
  };
}

}  // namespace kiln::test
