// The fused multi-tensor optimizer steps on the GPU against the CPU: every configuration of the
// optimizer tests (SGD with momentum/Nesterov/decay, Adam, AdamW, amsgrad, Adadelta, RMSprop
// centered and with momentum), five steps from the same parameters and gradients, in f32 and f64,
// on a parameter list that spills over several launches (more tensors and more chunks than one
// launch's table holds) and includes empty and one-element tensors.
#include "kiln/optim/optim.h"
#include "tests/cuda/cuda_test.h"
#include "tests/optim_cases.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("optimizer steps on the GPU match the CPU's for every rule") {
  if (!have_cuda()) return;
  const auto rules = optimizer_rules();
  // 30 tensors (more than one launch's 24) holding 5M elements (more than one launch's 256 chunks
  // of 16384), with an empty and a one-element tensor among them.
  std::vector<Shape> shapes = {{4200000}, {0}, {1}, {3, 7}, {16385}, {100, 31}};
  for (int i = 0; shapes.size() < 30; ++i) shapes.push_back({(i * 7919) % 5000 + 1});
  for (DType t : {DType::f32, DType::f64}) {
    for (const auto& [name, make_opt] : rules) {
      std::vector<Tensor> cpu, gpu;
      for (size_t i = 0; i < shapes.size(); ++i) {
        Generator gen(100 + i);
        cpu.push_back(uniform(shapes[i], -1, 1, t, &gen).requires_grad_());
        gpu.push_back(cpu.back().detach().to(kCuda).requires_grad_());
      }
      auto opt_cpu = make_opt(cpu), opt_gpu = make_opt(gpu);
      for (int step = 0; step < 5; ++step) {
        for (size_t i = 0; i < shapes.size(); ++i) {
          Generator gen(1000 * step + i);
          Tensor g = uniform(shapes[i], -2, 2, t, &gen);
          cpu[i].set_grad(g);
          gpu[i].set_grad(g.to(kCuda));
        }
        opt_cpu->step();
        opt_gpu->step();
      }
      // The same operations in the same order on both sides (optim.cu is built without fused
      // multiply-adds): only the math library's last bits may differ.
      double tol = t == DType::f32 ? 2e-5 : 1e-12;
      for (size_t i = 0; i < shapes.size(); ++i)
        check_close(gpu[i].detach(), cpu[i].detach(), tol, tol,
                    std::string(name) + " " + std::string(dtype_name(t)) + " tensor " + std::to_string(i));
    }
  }
}
