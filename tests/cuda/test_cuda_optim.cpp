// The fused multi-tensor optimizer steps of the CUDA backend against the CPU: every rule of
// tests/optim_cases.h, five steps, f32 and f64, on a parameter list that spills over several
// launches (more tensors and more chunks than one launch's table holds) and includes empty and
// one-element tensors; and with misaligned gradients, which the kernel walks one element at a
// time where aligned tensors go 16 bytes a load. (The rules on small lists on every backend:
// test_backend_ops's "optimizer" row.)
#include "tests/cuda/cuda_test.h"
#include "tests/optim_cases.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("optimizer steps on the GPU match the CPU's for every rule, over several launches") {
  // 300 tensors (more than one launch's 256) holding 5M elements (more chunks of 4096 than a
  // launch's 1024 blocks, so blocks walk several), with an empty and a one-element tensor among them.
  std::vector<Shape> shapes = {{4200000}, {0}, {1}, {3, 7}, {16385}, {100, 31}};
  for (int i = 0; shapes.size() < 300; ++i) shapes.push_back({(i * 7919) % 5000 + 1});
  optimizer_cases({.device = kCuda, .takes = {{DType::f32, 2e-5}, {DType::f64, 1e-12}}}, shapes);
}

TEST_CASE("optimizer steps on the GPU match the CPU's with gradients that are misaligned views") {
  // Each gradient one element into a buffer of its own: its operands are not 16-byte aligned, so
  // the kernel takes it one element at a time, beside aligned parameters and states.
  auto misaligned = [](const Tensor& g) {
    Tensor buffer = zeros({g.numel() + 1}, TensorOptions(g.dtype()).device(kCuda));
    Tensor view = buffer.slice(0, 1, g.numel() + 1).view(g.shape());
    view.copy_(g.to(kCuda));
    return view;
  };
  optimizer_cases({.device = kCuda, .takes = {{DType::f32, 2e-5}, {DType::f64, 1e-12}}},
                  {{4099}, {1}, {3, 7}, {8192}, {5000, 3}}, misaligned);
}
