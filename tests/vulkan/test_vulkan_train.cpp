// Training on the Vulkan backend against the CPU: every optimizer rule over five steps, and whole
// training steps of a small CNN (tests/backend_sweeps.h: conv, batch norm, pooling, dropout,
// Linear, cross-entropy, Adam) from the same seed, agreeing up to float rounding.
#include <memory>

#include "kiln/layers/nn.h"
#include "kiln/optim/optim.h"
#include "tests/backend_sweeps.h"
#include "tests/optim_cases.h"
#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

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

TEST_CASE("vulkan training steps of a small CNN from the same seed agree with the CPU up to float rounding") {
  if (!have_vulkan()) return;
  training_steps_agree(kVulkan);
  check_no_validation_messages();
}
