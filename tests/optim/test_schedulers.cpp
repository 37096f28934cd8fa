// The learning-rate schedulers against PyTorch's values over 20-25 epochs, their checkpoints
// and their errors.
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim/optim.h"
#include "optim_golden.h"

using namespace kiln;

namespace {

struct Case {
  std::string name;
  std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make_optimizer;
  std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)> make_scheduler;
};

// Mirrors SCHEDULERS in tests/golden/make_optim_golden.py.
std::vector<Case> cases() {
  using namespace optim;
  auto sgd = [](double momentum) {
    return [momentum](std::vector<Tensor> p) {
      return std::make_unique<SGD>(std::move(p), SGDOptions(0.1).momentum(momentum));
    };
  };
  return {
      {"step_lr", sgd(0), [](Optimizer& o) { return std::make_unique<StepLR>(o, 3, 0.5); }},
      {"cosine", sgd(0), [](Optimizer& o) { return std::make_unique<CosineAnnealingLR>(o, 6, 0.001); }},
      {"linear", sgd(0), [](Optimizer& o) { return std::make_unique<LinearWarmup>(o, 0.25, 1.0, 8); }},
      {"one_cycle", sgd(0.9),
       [](Optimizer& o) { return std::make_unique<OneCycleLR>(o, OneCycleLROptions(0.5, 20)); }},
      {"one_cycle_three_phase",
       [](std::vector<Tensor> p) { return std::make_unique<Adam>(std::move(p), AdamOptions(1e-3)); },
       [](Optimizer& o) {
         return std::make_unique<OneCycleLR>(o, OneCycleLROptions(0.01, 25)
                                                    .pct_start(0.25)
                                                    .anneal_strategy(Anneal::linear)
                                                    .three_phase()
                                                    .div_factor(10)
                                                    .final_div_factor(100)
                                                    .base_momentum(0.8)
                                                    .max_momentum(0.9));
       }},
  };
}

std::vector<Tensor> one_param() { return {zeros({1}, DType::f64).requires_grad_()}; }

}  // namespace

TEST_CASE("schedulers set PyTorch's learning rates (and OneCycleLR's momentum)") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    auto opt = c.make_optimizer(one_param());
    auto sched = c.make_scheduler(*opt);
    const int64_t epochs = optim_test::fixture(c.name + ".lr").shape.numel();
    const bool has_momentum = optim_test::has_fixture(c.name + ".momentum");
    std::vector<double> lrs, momenta;
    for (int64_t epoch = 0; epoch < epochs; ++epoch) {
      if (epoch > 0) sched->step();
      CHECK(sched->last_epoch() == epoch);
      CHECK(sched->get_last_lr() == opt->lr());
      lrs.push_back(opt->lr());
      if (has_momentum) momenta.push_back(*opt->momentum());
    }
    const Shape shape{epochs};
    optim_test::check_close(c.name + ".lr", from_vector<double>(lrs, shape), 1e-14, 0.0);
    if (has_momentum)
      optim_test::check_close(c.name + ".momentum", from_vector<double>(momenta, shape), 1e-14, 0.0);
  }
}

TEST_CASE("a scheduler resumes from its state_dict and the optimizer's") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    auto opt = c.make_optimizer(one_param());
    auto sched = c.make_scheduler(*opt);
    for (int i = 0; i < 7; ++i) sched->step();
    const optim::StateDict opt_state = opt->state_dict(), sched_state = sched->state_dict();

    auto opt2 = c.make_optimizer(one_param());
    auto sched2 = c.make_scheduler(*opt2);  // sets epoch 0's lr: the loads below replace it
    opt2->load_state_dict(opt_state);
    sched2->load_state_dict(sched_state);
    CHECK(sched2->last_epoch() == 7);
    CHECK(sched2->get_last_lr() == sched->get_last_lr());
    CHECK(sched2->base_lr() == sched->base_lr());
    for (int i = 0; i < 5; ++i) {
      sched->step();
      sched2->step();
      CHECK(opt2->lr() == opt->lr());
      CHECK(opt2->momentum() == opt->momentum());
    }
  }
}

TEST_CASE("scheduler errors") {
  optim::SGD sgd(one_param(), optim::SGDOptions(0.1));
  CHECK_THROWS_AS(optim::StepLR(sgd, 0), ValueError);
  CHECK_THROWS_AS(optim::CosineAnnealingLR(sgd, 0), ValueError);
  CHECK_THROWS_AS(optim::LinearLR(sgd, 0.0), ValueError);
  CHECK_THROWS_AS(optim::LinearLR(sgd, 0.5, 1.5), ValueError);
  CHECK_THROWS_AS(optim::OneCycleLR(sgd, optim::OneCycleLROptions(0.1, 0)), ValueError);
  CHECK_THROWS_AS(optim::OneCycleLR(sgd, optim::OneCycleLROptions(0.1, 10).pct_start(1.5)), ValueError);

  optim::Adadelta adadelta(one_param());
  CHECK_THROWS_WITH_AS(optim::OneCycleLR(adadelta, optim::OneCycleLROptions(0.1, 10)),
                       doctest::Contains("has no momentum"), ValueError);
  optim::OneCycleLR no_momentum(adadelta, optim::OneCycleLROptions(0.1, 10).cycle_momentum(false));

  optim::OneCycleLR sched(sgd, optim::OneCycleLROptions(0.1, 4));
  for (int i = 0; i < 4; ++i) sched.step();  // epochs 1..4: the last one is total_steps
  CHECK_THROWS_WITH_AS(sched.step(), doctest::Contains("tried to step 6 times"), ValueError);

  optim::StepLR step_lr(sgd, 2);
  optim::StateDict dict = step_lr.state_dict();
  dict.emplace_back("gamma", scalar(0.5, DType::f64));
  CHECK_THROWS_WITH_AS(step_lr.load_state_dict(dict), doctest::Contains("unexpected key 'gamma'"), ValueError);
  dict = step_lr.state_dict();
  dict.erase(dict.begin());
  CHECK_THROWS_WITH_AS(step_lr.load_state_dict(dict), doctest::Contains("missing key 'last_epoch'"), ValueError);
}
