// Training on the Vulkan backend against the CPU: every optimizer rule over five steps, and whole
// training steps of an MLP (Linear + ReLU fused in matmul's epilogue, dropout, cross-entropy,
// Adam) from the same seed, agreeing up to float rounding.
#include <memory>

#include "layers/nn.h"
#include "optim/optim.h"
#include "tests/optim_cases.h"
#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

namespace {

struct SmallMlp : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
  SmallMlp() : nn::Module("SmallMlp") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(196, 64));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.25));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(64, 10));
  }
  Tensor forward(const Tensor& input) override { return fc2->forward(drop->forward(relu(fc1->forward(input)))); }
};

}  // namespace

TEST_CASE("vulkan optimizer steps match the CPU's for every rule") {
  if (!have_vulkan()) return;
  const auto rules = optimizer_rules();
  const std::vector<Shape> shapes = {{70000}, {0}, {1}, {3, 7}, {16385}, {100, 31}};
  for (const auto& [name, make_opt] : rules) {
    std::vector<Tensor> cpu, dev;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Generator gen(100 + i);
      cpu.push_back(uniform(shapes[i], -1, 1, DType::f32, &gen).requires_grad_());
      dev.push_back(cpu.back().detach().to(kVulkan).requires_grad_());
    }
    auto opt_cpu = make_opt(cpu), opt_dev = make_opt(dev);
    for (int step = 0; step < 5; ++step) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        Generator gen(1000 * step + i);
        Tensor g = uniform(shapes[i], -2, 2, DType::f32, &gen);
        cpu[i].set_grad(g);
        dev[i].set_grad(g.to(kVulkan));
      }
      opt_cpu->step();
      opt_dev->step();
    }
    // the same operations in the same order (no fused multiply-adds on either side); Vulkan's sqrt
    // and division may differ from the CPU's in their last bits
    for (size_t i = 0; i < shapes.size(); ++i)
      check_close(dev[i].detach(), cpu[i].detach(), 2e-5, 2e-5, std::string(name) + " tensor " + std::to_string(i));
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan training steps of an MLP from the same seed agree with the CPU up to float rounding") {
  if (!have_vulkan()) return;
  manual_seed(7);
  auto cpu = std::make_shared<SmallMlp>();
  auto dev = std::make_shared<SmallMlp>();
  dev->load_state_dict(cpu->state_dict());
  dev->to(kVulkan);
  optim::Adam opt_cpu(cpu->parameters(), optim::AdamOptions(1e-2));
  optim::Adam opt_dev(dev->parameters(), optim::AdamOptions(1e-2));
  Generator data(8);
  for (int step = 0; step < 5; ++step) {
    Tensor x = uniform({32, 196}, -1, 1, DType::f32, &data);
    Tensor y = (uniform({32}, 0, 10, DType::f32, &data)).to(DType::i32);
    double losses[2];
    for (int side = 0; side < 2; ++side) {
      manual_seed(100 + step);  // the same dropout masks on both sides
      auto& model = side == 0 ? *cpu : *dev;
      auto& opt = side == 0 ? static_cast<optim::Optimizer&>(opt_cpu) : opt_dev;
      Device d = side == 0 ? Device::cpu() : kVulkan;
      opt.zero_grad();
      Tensor loss = cross_entropy(model.forward(x.to(d)), y.to(d));
      loss.backward();
      opt.step();
      losses[side] = loss.item();
    }
    CHECK_MESSAGE(std::abs(losses[1] - losses[0]) <= 1e-4 * std::abs(losses[0]),
                  "step " << step << ": loss " << losses[1] << " on vulkan, " << losses[0] << " on cpu");
  }
  auto pc = cpu->named_parameters(), pd = dev->named_parameters();
  REQUIRE(pc.size() == pd.size());
  for (size_t i = 0; i < pc.size(); ++i)
    check_close(pd[i].second.detach(), pc[i].second.detach(), 2e-3, 2e-4, "parameter " + pc[i].first);
  check_no_validation_messages();
}
