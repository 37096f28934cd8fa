// The optimizers against PyTorch: 5 steps of each configuration of
// tests/golden/make_optim_golden.py in f64 and f32, checkpoints that resume exactly, the
// validation of load_state_dict, and the rules of the base class.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kiln/optim/optim.h"
#include "optim_golden.h"

using namespace kiln;
using optim_test::check_close;
using optim_test::fixture;

namespace {

using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

template <class O, class Options>
Make make(Options options) {
  return [options](std::vector<Tensor> params) { return std::make_unique<O>(std::move(params), options); };
}

struct Case {
  std::string name;
  Make make;
};

// Mirrors OPTIMIZERS in tests/golden/make_optim_golden.py.
const std::vector<Case>& cases() {
  using namespace optim;
  static const std::vector<Case> all = {
      {"sgd_plain", make<SGD>(SGDOptions(0.02))},
      {"sgd_momentum", make<SGD>(SGDOptions(0.02).momentum(0.9).dampening(0.1))},
      {"sgd_nesterov", make<SGD>(SGDOptions(0.02).momentum(0.9).nesterov().weight_decay(0.01))},
      {"sgd_weight_decay", make<SGD>(SGDOptions(0.02).weight_decay(0.1))},
      {"adam", make<Adam>(AdamOptions(0.01))},
      {"adam_weight_decay", make<Adam>(AdamOptions(0.01).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1))},
      {"adam_amsgrad", make<Adam>(AdamOptions(0.01).betas({0.9, 0.6}).amsgrad())},
      {"adamw", make<AdamW>(AdamWOptions(0.01).weight_decay(0.1))},
      {"adamw_amsgrad", make<AdamW>(AdamWOptions(0.01).betas({0.9, 0.6}).weight_decay(0.05).amsgrad())},
      {"adadelta", make<Adadelta>(AdadeltaOptions())},
      {"adadelta_weight_decay", make<Adadelta>(AdadeltaOptions(0.5).rho(0.8).eps(1e-4).weight_decay(0.1))},
      {"rmsprop", make<RMSprop>(RMSpropOptions(0.01))},
      {"rmsprop_momentum", make<RMSprop>(RMSpropOptions(0.01).momentum(0.9).weight_decay(0.1))},
      {"rmsprop_centered",
       make<RMSprop>(RMSpropOptions(0.01).alpha(0.9).eps(1e-6).momentum(0.5).centered())},
  };
  return all;
}

// The script's model: three parameters and the loss's coefficients. With tiles > 1, each
// tensor is repeated along a new leading axis: every element follows the same path as in the
// script (the loss is a sum of per-element terms), and the kernels split the large parameters
// into parallel chunks.
struct Model {
  std::vector<Tensor> params, coef;
  int64_t tiles;

  explicit Model(DType dtype, int64_t tiles_ = 1) : tiles(tiles_) {
    auto load = [&](const std::string& name) {
      Tensor t = optim_test::tensor(name, dtype);
      if (tiles == 1) return t;
      Shape shape = t.shape();
      shape.insert(0, tiles);
      return t.unsqueeze(0).expand(shape).contiguous();
    };
    for (int k = 0; k < 3; ++k) {
      params.push_back(load("init.p" + std::to_string(k)).requires_grad_());
      coef.push_back(load("loss.c" + std::to_string(k)));
    }
  }
  // A copy whose parameters are fresh leaves holding the same values.
  Model clone() const {
    Model m = *this;
    for (Tensor& p : m.params) p = p.detach().clone().requires_grad_();
    return m;
  }

  // Steps first..last (from 1) as the script runs them: p2 gets gradients from step 3 on.
  void train(optim::Optimizer& opt, int first, int last) const {
    for (int t = first; t <= last; ++t) {
      opt.zero_grad();
      Tensor loss = (coef[0] * pow(params[0], 3.0)).sum() + (coef[1] * pow(params[1], 3.0)).sum();
      if (t >= 3) loss = loss + (coef[2] * pow(params[2], 3.0)).sum();
      loss.backward();
      opt.step();
    }
  }
};

struct Tolerance {
  double rtol, atol;
};

// Steps 1..5 of the script on m with opt (after_step1, if given, runs between steps 1 and 2),
// comparing the parameters after steps 3 and 5 and the state after step 5 with the fixtures of
// the configuration `name`.
void check_steps(const std::string& name, optim::Optimizer& opt, const Model& m, DType dtype, Tolerance tol,
                 const std::function<void()>& after_step1 = {}) {
  m.train(opt, 1, 1);
  if (after_step1) after_step1();
  m.train(opt, 2, 3);
  for (int k = 0; k < 3; ++k)
    check_close(name + ".step3.p" + std::to_string(k), m.params[k], tol.rtol, tol.atol, m.tiles);
  m.train(opt, 4, 5);
  for (int k = 0; k < 3; ++k)
    check_close(name + ".step5.p" + std::to_string(k), m.params[k], tol.rtol, tol.atol, m.tiles);

  // The state: the same entries as PyTorch's, with the same values.
  std::set<std::string> ours;
  for (const auto& [key, t] : opt.state_dict()) {
    if (key.rfind("state.", 0) != 0) continue;
    ours.insert(key);
    if (!key.ends_with(".step")) CHECK(t.dtype() == dtype);
    check_close(name + "." + key, t, tol.rtol, tol.atol, key.ends_with(".step") ? 1 : m.tiles);
  }
  std::set<std::string> theirs;
  for (const auto& [fixture_name, f] : optim_test::fixtures().entries())
    if (fixture_name.rfind(name + ".state.", 0) == 0) theirs.insert(fixture_name.substr(name.size() + 1));
  CHECK(ours == theirs);
}

void check_against_pytorch(const Case& c, DType dtype, Tolerance tol, int64_t tiles = 1) {
  Model m(dtype, tiles);
  auto opt = c.make(m.params);
  check_steps(c.name, *opt, m, dtype, tol);
}

// Every entry's key and values, copied: what a later step must leave as it is.
std::vector<std::pair<std::string, std::vector<double>>> snapshot(const optim::StateDict& dict) {
  std::vector<std::pair<std::string, std::vector<double>>> values;
  for (const auto& [key, t] : dict) values.emplace_back(key, t.to_vector<double>());
  return values;
}

bool same_values(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].to_vector<double>() != b[i].to_vector<double>()) return false;
  return true;
}

optim::StateDict without(optim::StateDict dict, const std::string& key) {
  std::erase_if(dict, [&](const auto& entry) { return entry.first == key; });
  return dict;
}

optim::StateDict with(optim::StateDict dict, const std::string& key, const Tensor& value) {
  dict = without(std::move(dict), key);
  dict.emplace_back(key, value);
  return dict;
}

const Tensor& entry(const optim::StateDict& dict, const std::string& key) {
  auto it = std::find_if(dict.begin(), dict.end(), [&](const auto& e) { return e.first == key; });
  REQUIRE_MESSAGE(it != dict.end(), "no key " << key);
  return it->second;
}

double lookup(const optim::StateDict& dict, const std::string& key) { return entry(dict, key).item(); }

}  // namespace

// Measured worst relative errors (x86-64, GCC 12, -O3): 4e-15 in f64, 2e-6 in f32.
TEST_CASE("optimizers match PyTorch over 5 steps in f64") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    check_against_pytorch(c, DType::f64, {1e-12, 1e-14});
  }
}

TEST_CASE("optimizers match PyTorch over 5 steps in f32") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    check_against_pytorch(c, DType::f32, {2e-5, 1e-7});
  }
}

TEST_CASE("large parameters, updated in parallel chunks, match PyTorch element by element") {
  for (const Case& c : cases()) {
    CAPTURE(c.name);
    check_against_pytorch(c, DType::f32, {2e-5, 1e-7}, 20000);  // p0: 120000 elements
  }
}

TEST_CASE("a checkpoint resumes exactly: 3 (or 2) steps, save, load into a fresh optimizer, 2 more") {
  for (const Case& c : cases()) {
    for (int split : {2, 3}) {
      CAPTURE(c.name);
      CAPTURE(split);
      Model straight(DType::f64);
      auto a = c.make(straight.params);
      straight.train(*a, 1, split);

      Model resumed = straight.clone();
      auto b = c.make(resumed.params);
      b->load_state_dict(a->state_dict());
      if (split == 2) {  // p2 had no gradient yet: it has no state, as in PyTorch
        for (const auto& [key, t] : a->state_dict()) CHECK(key.rfind("state.2.", 0) != 0);
      }
      straight.train(*a, split + 1, 5);
      resumed.train(*b, split + 1, 5);
      CHECK(same_values(straight.params, resumed.params));
      const optim::StateDict sa = a->state_dict(), sb = b->state_dict();
      REQUIRE(sa.size() == sb.size());
      for (size_t i = 0; i < sa.size(); ++i) {
        CHECK(sa[i].first == sb[i].first);
        CHECK(sa[i].second.to_vector<double>() == sb[i].second.to_vector<double>());
      }
    }
  }
}

TEST_CASE("state_dict names hyperparameters as PyTorch's param_groups") {
  Model m(DType::f32);
  optim::Adam adam(m.params, optim::AdamOptions(0.01).betas({0.8, 0.9}).amsgrad());
  m.train(adam, 1, 1);
  const optim::StateDict dict = adam.state_dict();
  std::vector<std::string> keys;
  for (const auto& [key, t] : dict) keys.push_back(key);
  const std::vector<std::string> expected = {
      "state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq",
      "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.max_exp_avg_sq",
      "param_groups.0.lr", "param_groups.0.betas", "param_groups.0.eps",
      "param_groups.0.weight_decay", "param_groups.0.amsgrad"};
  CHECK(keys == expected);
  CHECK(lookup(dict, "state.0.step") == 1.0);
  CHECK(lookup(dict, "param_groups.0.lr") == 0.01);
  CHECK(entry(dict, "param_groups.0.betas").to_vector<double>() == std::vector<double>{0.8, 0.9});
  CHECK(lookup(dict, "param_groups.0.eps") == 1e-8);  // PyTorch's default
  CHECK(lookup(dict, "param_groups.0.weight_decay") == 0.0);
  CHECK(lookup(dict, "param_groups.0.amsgrad") == 1.0);
  for (const auto& [key, t] : dict)
    if (key.rfind("param_groups", 0) == 0 || key.ends_with(".step")) CHECK(t.dtype() == DType::f64);
  CHECK(dict[1].second.dtype() == DType::f32);  // state in the parameter's dtype
}

TEST_CASE("load_state_dict rejects bad keys, shapes and values, naming the key") {
  Model m(DType::f64);
  optim::Adam adam(m.params, optim::AdamOptions(0.01).amsgrad());
  m.train(adam, 1, 3);
  const optim::StateDict good = adam.state_dict();
  Model fresh_model = m.clone();
  optim::Adam fresh(fresh_model.params, optim::AdamOptions(0.01).amsgrad());
  const auto as_built = snapshot(fresh.state_dict());

  auto fails_with = [&](const optim::StateDict& dict, const std::string& text) {
    CAPTURE(text);
    bool threw = false;
    try {
      fresh.load_state_dict(dict);
    } catch (const Error& e) {
      threw = true;
      CHECK_MESSAGE(std::string(e.what()).find(text) != std::string::npos, e.what());
    }
    CHECK(threw);
  };
  fails_with(without(good, "state.1.exp_avg_sq"), "missing key 'state.1.exp_avg_sq'");
  fails_with(without(good, "state.0.step"), "missing key 'state.0.step'");
  fails_with(without(good, "param_groups.0.eps"), "missing key 'param_groups.0.eps'");
  fails_with(with(good, "state.0.bogus", zeros({2, 3}, DType::f64)), "unexpected key 'state.0.bogus'");
  fails_with(with(good, "state.7.exp_avg", zeros({2, 3}, DType::f64)), "unexpected key 'state.7.exp_avg'");
  fails_with(with(good, "state.x.exp_avg", zeros({2, 3}, DType::f64)), "unexpected key 'state.x.exp_avg'");
  fails_with(with(good, "param_groups.0.momentum", scalar(0.9, DType::f64)),
             "unexpected key 'param_groups.0.momentum'");
  fails_with(with(good, "model.weight", zeros({2}, DType::f64)), "unexpected key 'model.weight'");
  fails_with(with(good, "state.0.exp_avg", zeros({3}, DType::f64)), "'state.0.exp_avg' has shape [3]");
  fails_with(with(good, "param_groups.0.betas", zeros({3}, DType::f64)), "'param_groups.0.betas' holds 3 values");
  fails_with(with(good, "param_groups.0.betas", from_vector<double>({1.5, 0.9}, {2})), "beta1 1.5");
  fails_with(with(good, "state.0.step", scalar(2.5, DType::f64)), "'state.0.step' holds 2.5");
  optim::StateDict twice = good;
  twice.push_back(good[0]);
  fails_with(twice, "duplicate key 'state.0.step'");
  // amsgrad decides whether max_exp_avg_sq must be there.
  fails_with(with(without(good, "state.0.max_exp_avg_sq"), "param_groups.0.amsgrad", scalar(1, DType::f64)),
             "missing key 'state.0.max_exp_avg_sq'");
  fails_with(with(good, "param_groups.0.amsgrad", scalar(0, DType::f64)),
             "unexpected key 'state.0.max_exp_avg_sq'");

  // Nothing changed: the failed loads left the fresh optimizer as it was built (no state, only
  // the hyperparameters, with their values).
  CHECK(as_built.size() == 5);
  CHECK(snapshot(fresh.state_dict()) == as_built);
  CHECK(fresh.momentum() == 0.9);

  // And the good dict loads, in another dtype too (f32 state becomes the parameters' f64), with
  // its values.
  optim::StateDict as_f32;
  for (const auto& [key, t] : good) as_f32.emplace_back(key, t.to(DType::f32));
  fresh.load_state_dict(as_f32);
  const optim::StateDict loaded = fresh.state_dict();
  CHECK(snapshot(loaded) == snapshot(as_f32));
  for (const auto& [key, t] : loaded) CHECK(t.dtype() == DType::f64);
}

TEST_CASE("loaded state is a copy: training on does not write into the dict") {
  Model m(DType::f64);
  optim::SGD a(m.params, optim::SGDOptions(0.1).momentum(0.9));
  m.train(a, 1, 1);
  optim::StateDict dict;
  for (const auto& [key, t] : a.state_dict()) dict.emplace_back(key, t.clone());
  const std::vector<double> before = dict[0].second.to_vector<double>();
  Model n = m.clone();
  optim::SGD b(n.params, optim::SGDOptions(0.1).momentum(0.9));
  b.load_state_dict(dict);
  n.train(b, 2, 2);
  CHECK(dict[0].second.to_vector<double>() == before);
}

TEST_CASE("constructors check their options as PyTorch does") {
  Model m(DType::f32);
  using namespace optim;
  CHECK_THROWS_AS(SGD({}, SGDOptions(0.1)), ValueError);
  CHECK_THROWS_AS(SGD(m.params, SGDOptions(-0.1)), ValueError);
  CHECK_THROWS_AS(SGD(m.params, SGDOptions(0.1).momentum(-1)), ValueError);
  CHECK_THROWS_AS(SGD(m.params, SGDOptions(0.1).nesterov()), ValueError);
  CHECK_THROWS_AS(SGD(m.params, SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov()), ValueError);
  CHECK_THROWS_AS(Adam(m.params, AdamOptions(0.1).betas({1.0, 0.9})), ValueError);
  CHECK_THROWS_AS(AdamW(m.params, AdamWOptions(0.1).eps(-1)), ValueError);
  CHECK_THROWS_AS(Adadelta(m.params, AdadeltaOptions().rho(1.5)), ValueError);
  CHECK_THROWS_AS(RMSprop(m.params, RMSpropOptions().alpha(-0.5)), ValueError);
  // Parameters are leaves that require grad.
  CHECK_THROWS_AS(SGD({m.params[0] * 2.0}, SGDOptions(0.1)), ValueError);
  CHECK_THROWS_AS(SGD({zeros({2})}, SGDOptions(0.1)), ValueError);
  // PyTorch's defaults.
  CHECK(AdamWOptions().weight_decay_ == 1e-2);
  CHECK(AdamOptions().weight_decay_ == 0.0);
  CHECK(Adadelta(m.params).lr() == 1.0);
  CHECK(RMSprop(m.params).lr() == 1e-2);
  CHECK(Adam(m.params).lr() == 1e-3);
}

TEST_CASE("step skips parameters without a gradient and runs without recording") {
  Model m(DType::f32);
  optim::Adam adam(m.params, optim::AdamOptions(0.1));
  const std::vector<float> p2 = m.params[2].to_vector<float>();
  m.train(adam, 1, 2);  // p2 gets no gradient in steps 1 and 2
  CHECK(m.params[2].to_vector<float>() == p2);
  for (const auto& [key, t] : adam.state_dict()) CHECK(key.rfind("state.2.", 0) != 0);
  CHECK(adam.step_count() == 2);
  for (const Tensor& p : m.params) {
    CHECK(p.is_leaf());
    CHECK(p.requires_grad());
  }
  CHECK(autograd::is_grad_enabled());
  adam.zero_grad();
  for (const Tensor& p : m.params) CHECK_FALSE(p.grad().defined());
  // No gradients at all: nothing moves, neither the parameters nor the state (Adam's averages
  // would decay, and the parameters follow them, if a missing gradient counted as zero).
  std::vector<std::vector<double>> params_before;
  for (const Tensor& p : m.params) params_before.push_back(p.to_vector<double>());
  const auto state_before = snapshot(adam.state_dict());
  adam.step();
  for (size_t k = 0; k < m.params.size(); ++k) CHECK(m.params[k].to_vector<double>() == params_before[k]);
  CHECK(snapshot(adam.state_dict()) == state_before);
  CHECK(adam.step_count() == 3);
}

TEST_CASE("a strided gradient is honoured") {
  Tensor a = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = a.detach().clone().requires_grad_();
  Tensor g = from_vector<double>({1, 2, 3, 4, 5, 6}, {3, 2});
  a.set_grad(g.t());            // a transposed view
  b.set_grad(g.t().contiguous());
  optim::SGD sa({a}, optim::SGDOptions(0.5).momentum(0.5));
  optim::SGD sb({b}, optim::SGDOptions(0.5).momentum(0.5));
  sa.step();
  sb.step();
  CHECK(a.to_vector<double>() == b.to_vector<double>());
  // a - 0.5 * [[1, 3, 5], [2, 4, 6]] (the first momentum step takes the gradient itself)
  CHECK(a.to_vector<double>() == std::vector<double>{0.5, 0.5, 0.5, 3.0, 3.0, 3.0});
}

TEST_CASE("set_lr takes effect at the next step") {
  Tensor p = from_vector<double>({1.0}, {1}).requires_grad_();
  optim::SGD sgd({p}, optim::SGDOptions(0.1));
  p.set_grad(ones({1}, DType::f64));
  sgd.step();
  sgd.set_lr(0.5);
  sgd.step();
  CHECK(p.item() == doctest::Approx(1.0 - 0.1 - 0.5));
  CHECK_THROWS_AS(sgd.set_lr(-1.0), ValueError);
}

TEST_CASE("momentum turned on later (as OneCycleLR does) starts its buffers as PyTorch would") {
  // SGD built without momentum, given 0.9 after step 1: each buffer starts at its parameter's
  // next step, from the gradient itself (p2's at step 3). The parameters after steps 3 and 5 and
  // the buffers after step 5 against PyTorch's (sgd_momentum_later in the script).
  for (DType dtype : {DType::f64, DType::f32}) {
    CAPTURE(dtype);
    Model m(dtype);
    optim::SGD sgd(m.params, optim::SGDOptions(0.02));
    check_steps("sgd_momentum_later", sgd, m, dtype, dtype == DType::f64 ? Tolerance{1e-12, 1e-14} : Tolerance{2e-5, 1e-7},
                [&] { sgd.set_momentum(0.9); });
    CHECK(lookup(sgd.state_dict(), "param_groups.0.momentum") == 0.9);
  }
  Model m(DType::f64);
  CHECK_THROWS_AS(optim::Adadelta(m.params).set_momentum(0.9), ValueError);
}
