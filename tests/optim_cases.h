// The optimizer configurations the device backends' tests step against the CPU (every rule, with
// momentum, Nesterov, weight decay, amsgrad, AdamW's decoupled decay, centering), and the steps
// themselves: test_backend_ops's optimizer row, and test_cuda's parameter lists that spill over
// several launches.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/optim/optim.h"
#include "tests/backend_ops.h"

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

// Five steps of every rule on parameters of `shapes`, on the CPU and on the device from the same
// values and gradients, in every dtype taken. The same operations run in the same order on both
// sides (no fused multiply-adds on either): only the math library's last bits may differ.
// `place` puts a gradient on the device (default: a tensor of its own there).
inline void optimizer_cases(const Run& r, const std::vector<Shape>& shapes,
                            const std::function<Tensor(const Tensor&)>& place = {}) {
  for (const Take& k : r.takes)
    for (const auto& [name, make_opt] : optimizer_rules()) {
      std::vector<Tensor> cpu, dev;
      for (size_t i = 0; i < shapes.size(); ++i) {
        Generator gen(100 + i);
        cpu.push_back(uniform(shapes[i], -1, 1, k.dtype, &gen).requires_grad_());
        dev.push_back(cpu.back().detach().to(r.device).requires_grad_());
      }
      auto opt_cpu = make_opt(cpu), opt_dev = make_opt(dev);
      for (int step = 0; step < 5; ++step) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          Generator gen(1000 * step + i);
          Tensor g = uniform(shapes[i], -2, 2, k.dtype, &gen);
          cpu[i].set_grad(g);
          dev[i].set_grad(place ? place(g) : g.to(r.device));
        }
        opt_cpu->step();
        opt_dev->step();
      }
      for (size_t i = 0; i < shapes.size(); ++i)
        r.check(dev[i].detach(), cpu[i].detach(), k.tol,
                std::string(name) + " " + std::string(dtype_name(k.dtype)) + " tensor " + std::to_string(i));
    }
}

}  // namespace kiln::test
