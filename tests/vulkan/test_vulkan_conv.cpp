// The Vulkan conv2d, pooling and batch norm kernels against the CPU: random convolution
// geometries (forward with bias and ReLU, both backwards, autograd through a view), the MNIST
// CNN's layers, max pooling exactly (ties, NaNs, overlapping windows), average pooling with and
// without the padding counted, and batch norm's statistics, running averages and gradients.
#include <cmath>

#include "tests/backend_sweeps.h"
#include "tests/conv_cases.h"
#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

namespace {

void check_conv(const ConvCase& c) {
  Tensor x = uniform(c.x, -1, 1), w = uniform(c.w, -1, 1), gy = uniform(c.y, -1, 1);
  Tensor b = c.bias ? uniform({c.w[0]}, -1, 1) : Tensor();
  const double rtol = rtol_for(DType::f32);
  check_close(conv2d(x.to(kVulkan), w.to(kVulkan), c.bias ? b.to(kVulkan) : Tensor(), c.config),
              conv2d(x, w, b, c.config), rtol, atol_for(DType::f32, c.w[1] * c.w[2] * c.w[3]), "conv2d " + c.str());
  const int64_t og = c.w[0] / c.config.groups;
  check_close(conv2d_backward_input(gy.to(kVulkan), w.to(kVulkan), c.x, c.config),
              conv2d_backward_input(gy, w, c.x, c.config), rtol, atol_for(DType::f32, og * c.w[2] * c.w[3]),
              "conv2d_backward_input " + c.str());
  check_close(conv2d_backward_weight(x.to(kVulkan), gy.to(kVulkan), c.w, c.config),
              conv2d_backward_weight(x, gy, c.w, c.config), rtol, atol_for(DType::f32, c.y[0] * c.y[2] * c.y[3]),
              "conv2d_backward_weight " + c.str());
}

}  // namespace

TEST_CASE("vulkan conv2d forward and backwards match the CPU on random geometries") {
  if (!have_vulkan()) return;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) check_conv(random_conv(rng, trial));
  // channels per group in whole steps of 16: the tap-major order of k (conv2d.comp), with the
  // same strides, paddings, dilations and groups
  for (int trial = 1; trial < 24; trial += trial % 4 == 3 ? 2 : 1) {  // the narrow geometries
    ConvCase c = random_conv(rng, trial);
    const int64_t groups = c.config.groups, cg = trial % 2 ? 16 : 32, og = trial % 3 ? 16 : 48;
    c.x[1] = cg * groups, c.w[0] = og * groups, c.w[1] = cg, c.y[1] = og * groups;
    check_conv(c);
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan conv2d with its fused bias and ReLU, and its gradients through autograd, match the CPU") {
  if (!have_vulkan()) return;
  std::mt19937 rng(13);
  for (int trial = 0; trial < 10; ++trial) {
    ConvCase c = random_conv(rng, trial);
    c.bias = true;
    Tensor x = uniform({c.x[0], c.x[1], c.x[3], c.x[2]}, -1, 1).transpose(2, 3);  // a view: made contiguous first
    Tensor w = uniform(c.w, -1, 1), b = uniform({c.w[0]}, -1, 1), gy = uniform(c.y, -1, 1);
    std::vector<Tensor> grads[2];
    for (int side = 0; side < 2; ++side) {
      const Device dev = side == 0 ? Device::cpu() : kVulkan;
      Tensor xl = x.to(dev).detach().requires_grad_(), wl = w.to(dev).detach().requires_grad_();
      Tensor bl = b.to(dev).detach().requires_grad_();
      (conv2d(xl, wl, bl, c.config, Activation::relu) * gy.to(dev)).sum().backward();
      grads[side] = {xl.grad(), wl.grad(), bl.grad()};
    }
    const int64_t og = c.w[0] / c.config.groups, outputs = c.y[0] * c.y[2] * c.y[3];
    const double rtol = rtol_for(DType::f32);
    check_close(grads[1][0], grads[0][0], rtol, atol_for(DType::f32, og * c.w[2] * c.w[3]), "grad x " + c.str());
    check_close(grads[1][1], grads[0][1], rtol, atol_for(DType::f32, outputs), "grad w " + c.str());
    check_close(grads[1][2], grads[0][2], rtol, atol_for(DType::f32, outputs), "grad bias " + c.str());
  }
  // the MNIST CNN's layers at batch 8
  Tensor x1 = uniform({8, 1, 28, 28}, -1, 1), w1 = uniform({32, 1, 3, 3}, -1, 1), w2 = uniform({64, 32, 3, 3}, -1, 1);
  Tensor y1 = conv2d(x1, w1);
  check_close(conv2d(x1.to(kVulkan), w1.to(kVulkan)), y1, 1e-4, 1e-5 * 9, "conv1");
  check_close(conv2d(y1.to(kVulkan), w2.to(kVulkan)), conv2d(y1, w2), 1e-4, 1e-5 * 288, "conv2");
  check_no_validation_messages();
}

TEST_CASE("vulkan max_pool2d and its backward match the CPU exactly; avg_pool2d with and without padding counted") {
  if (!have_vulkan()) return;
  std::mt19937 rng(15);
  for (int trial = 0; trial < 60; ++trial) {
    const PoolCase c = random_pool(rng);
    // small integers make ties common; some trials sprinkle NaNs
    std::vector<double> values(static_cast<size_t>(c.x.numel()));
    for (double& v : values)
      v = trial % 3 == 0 && pick(rng, 0, 9) == 0 ? std::nan("") : static_cast<double>(pick(rng, -3, 3));
    Tensor x = from_vector<double>(values, c.x).to(DType::f32);
    PoolResult want = max_pool2d_with_indices(x, c.config);
    PoolResult got = max_pool2d_with_indices(x.to(kVulkan), c.config);
    check_close(got.values, want.values, 0, 0, "max_pool2d " + c.str());
    check_close(got.indices, want.indices, 0, 0, "max_pool2d indices " + c.str());
    Tensor gy = uniform(want.values.shape(), -1, 1);
    check_close(max_pool2d_backward(gy.to(kVulkan), got.indices, c.x, c.config),
                max_pool2d_backward(gy, want.indices, c.x, c.config), 1e-6, 1e-6, "max_pool2d_backward " + c.str());
    Tensor u = uniform(c.x, -1, 1);
    check_close(avg_pool2d(u.to(kVulkan), c.config), avg_pool2d(u, c.config), 1e-6, 1e-6, "avg_pool2d " + c.str());
    Tensor ga = uniform(avg_pool2d(u, c.config).shape(), -1, 1);
    check_close(avg_pool2d_backward(ga.to(kVulkan), c.x, c.config), avg_pool2d_backward(ga, c.x, c.config), 1e-6, 1e-6,
                "avg_pool2d_backward " + c.str());
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan batch_norm matches the CPU: statistics, running averages and gradients") {
  if (!have_vulkan()) return;
  batch_norm_sweep(kVulkan, {DType::f32});
  check_no_validation_messages();
}
