// The cases of test_backend_ops's whole-model rows: directional gradchecks of every op family on
// the device, and training steps of a small CNN with every layer kind mnist-train's models use,
// on the CPU and the device from one seed.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/autograd/gradcheck.h"
#include "kiln/kiln.h"
#include "kiln/layers/nn.h"
#include "kiln/optim/optim.h"
#include "tests/backend_ops.h"

namespace kiln::test {

// Directional gradchecks on the device of every op family, in f32: sums carry ~1e-7 relative
// noise per term, so a large eps keeps the difference quotient above it, and the row's
// tolerance (~1e-2) judges the result, as the CPU's f32 directional checks.
inline void gradcheck_cases(const Run& r) {
  const Device dev = r.device;
  autograd::GradcheckOptions options;
  options.eps = 1e-2;
  options.atol = r.tol(DType::f32).atol;
  options.rtol = r.tol(DType::f32).rtol;
  Generator gen(901);
  auto leaf = [&](const Shape& s, double scale) {
    return uniform(s, -scale, scale, TensorOptions(DType::f32).device(dev).requires_grad(), &gen);
  };
  // Values 0.05 apart in a random order: a perturbation of eps = 1e-2 cannot swap the winner of
  // a max (or a max pool's window), so its gradient is defined at this point.
  auto distinct = [&](const Shape& s) {
    std::vector<float> v(static_cast<size_t>(s.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05f * static_cast<float>(i) - 10.0f;
    std::shuffle(v.begin(), v.end(), std::mt19937(3));
    return from_vector<float>(v, s).to(dev).requires_grad_();
  };
  auto targets = [&](int64_t n, int64_t classes) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 7) % static_cast<size_t>(classes));
    return from_vector<int32_t>(t, {n}).to(dev);
  };
  using Args = std::vector<Tensor>;
  struct Case {
    std::string name;
    autograd::CheckedFn f;
    Args inputs;
  };
  const Case cases[] = {
      {"matmul 130x97 @ 97x81", [](const Args& x) { return matmul(x[0], x[1]); }, {leaf({130, 97}, 1), leaf({97, 81}, 1)}},
      {"matmul transposed, batched", [](const Args& x) { return matmul(x[0].transpose(1, 2), x[1]); },
       {leaf({3, 40, 33}, 1), leaf({3, 40, 17}, 1)}},
      {"conv2d 3x3 pad 1", [](const Args& x) { return conv2d(x[0], x[1], x[2], {{1, 1}, {1, 1}, {1, 1}, 1}); },
       {leaf({4, 8, 12, 12}, 1), leaf({16, 8, 3, 3}, 0.3), leaf({16}, 0.1)}},
      {"conv2d stride 2, dilation 2, groups 2",
       [](const Args& x) { return conv2d(x[0], x[1], x[2], {{2, 2}, {1, 1}, {2, 2}, 2}); },
       {leaf({3, 6, 13, 11}, 1), leaf({4, 3, 3, 3}, 0.3), leaf({4}, 0.1)}},
      {"max_pool2d and avg_pool2d",
       [](const Args& x) { return max_pool2d(x[0], {.kernel = {2, 2}}) + avg_pool2d(x[0], {.kernel = {2, 2}}); },
       {distinct({2, 3, 8, 10})}},
      {"softmax and log_softmax", [](const Args& x) { return softmax(x[0], 1) * log_softmax(x[0], 0); },
       {leaf({17, 33}, 2)}},
      {"cross_entropy with smoothing",
       [&](const Args& x) { return cross_entropy(x[0], targets(64, 10), Reduction::mean, 0.1); }, {leaf({64, 10}, 3)}},
      {"batch_norm", [](const Args& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true); },
       {leaf({16, 5, 4, 4}, 1), leaf({5}, 1), leaf({5}, 1)}},
      {"sum, mean, max over axes", [](const Args& x) { return sum(x[0], {0}) * mean(x[0], {0}) + max(x[0], {0}); },
       {distinct({9, 31})}},
      {"index_select with repeats",
       [dev](const Args& x) { return index_select(x[0], 0, from_vector<int32_t>({2, 0, 2, 4}, {4}).to(dev)); },
       {leaf({5, 7}, 1)}},
  };
  for (const Case& c : cases) {
    auto result = autograd::gradcheck_directional(c.f, c.inputs, options);
    CHECK_MESSAGE(result.ok, c.name << ": " << result.message);
  }
}

// A small CNN with every layer kind mnist-train's models use, and batch norm.
struct SmallNet : nn::Module {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Linear> fc;
  SmallNet() : nn::Module("SmallNet") {
    // No bias before batch norm: its gradient is zero up to rounding, and Adam would turn that
    // noise into full-size steps that differ between backends.
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 8, 3).bias(false)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(8));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(8, 16, 3));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.25));
    fc = register_module("fc", std::make_shared<nn::Linear>(16 * 5 * 5, 10));
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = relu(bn->forward(conv1->forward(input)));          // [N, 8, 12, 12]
    x = max_pool2d(relu(conv2->forward(x)), {.kernel = {2, 2}});  // [N, 16, 5, 5]
    return fc->forward(drop->forward(x).flatten(1));             // [N, 10]
  }
};

// Five Adam steps of SmallNet on the CPU and on the device from the same seed, the same data and
// the same dropout masks: the losses (1e-4 relative), the parameters (the row's tolerance) and
// batch norm's buffers (1e-4, 1e-5) agree up to float rounding.
inline void training_steps_cases(const Run& r) {
  manual_seed(7);
  auto cpu = std::make_shared<SmallNet>();
  auto on_dev = std::make_shared<SmallNet>();
  on_dev->load_state_dict(cpu->state_dict());
  on_dev->to(r.device);
  optim::Adam opt_cpu(cpu->parameters(), optim::AdamOptions(1e-2));
  optim::Adam opt_dev(on_dev->parameters(), optim::AdamOptions(1e-2));
  Generator data(8);
  for (int step = 0; step < 5; ++step) {
    Tensor x = uniform({32, 1, 14, 14}, -1, 1, DType::f32, &data);
    Tensor y = (uniform({32}, 0, 10, DType::f32, &data)).to(DType::i32);
    double losses[2];
    for (int side = 0; side < 2; ++side) {
      manual_seed(100 + step);  // the same dropout masks on both sides
      auto& model = side == 0 ? *cpu : *on_dev;
      auto& opt = side == 0 ? static_cast<optim::Optimizer&>(opt_cpu) : opt_dev;
      const Device d = side == 0 ? Device::cpu() : r.device;
      opt.zero_grad();
      Tensor loss = cross_entropy(model.forward(x.to(d)), y.to(d));
      loss.backward();
      opt.step();
      losses[side] = loss.item();
    }
    CHECK_MESSAGE(std::abs(losses[1] - losses[0]) <= 1e-4 * std::abs(losses[0]),
                  "step " << step << ": loss " << losses[1] << " on " << r.device << ", " << losses[0] << " on cpu");
  }
  auto pc = cpu->named_parameters(), pd = on_dev->named_parameters();
  REQUIRE(pc.size() == pd.size());
  for (size_t i = 0; i < pc.size(); ++i)
    r.check(pd[i].second.detach(), pc[i].second.detach(), r.tol(DType::f32), "parameter " + pc[i].first);
  auto bc = cpu->named_buffers(), bd = on_dev->named_buffers();
  REQUIRE(bc.size() == bd.size());
  for (size_t i = 0; i < bc.size(); ++i) r.check(bd[i].second, bc[i].second, {1e-4, 1e-5}, "buffer " + bc[i].first);
}

}  // namespace kiln::test
