// The Vulkan softmax family against the CPU: softmax and log_softmax over any axis, cross-entropy
// and its gradient (autograd and the op), special values (-inf, NaN, +inf, logits of 1e3, empty
// axes) and out-of-range targets, in f32 (accumulated in float; the CPU's in double).
#include <limits>

#include "tests/backend_sweeps.h"
#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

namespace {
constexpr double kRtol = 1e-5, kAtol = 1e-6;
}  // namespace

TEST_CASE("vulkan softmax and log_softmax match the CPU over any axis") {
  if (!have_vulkan()) return;
  softmax_sweep(kVulkan, {DType::f32});
  // more groups of 32 columns than a dispatch's workgroups (400 x 219): the column variant loops
  Tensor wide = uniform({400, 2, 7000}, -3, 3);
  check_close(softmax(wide.to(kVulkan), 1), softmax(wide, 1), 1e-5, 1e-7, "softmax over the middle axis of [400, 2, 7000]");
  check_no_validation_messages();
}

TEST_CASE("vulkan softmax's special values match the CPU: -inf, NaN, +inf, huge logits, empty axes") {
  if (!have_vulkan()) return;
  for (int64_t n : {3, 40, 2000}) {
    Tensor cpu = softmax_special_rows(n).to(DType::f32);
    for (int64_t axis : {1, 0}) {
      check_close(softmax(cpu.to(kVulkan), axis), softmax(cpu, axis), kRtol, kAtol * 1e-1, "softmax special " + std::to_string(n));
      check_close(log_softmax(cpu.to(kVulkan), axis), log_softmax(cpu, axis), kRtol, kAtol * 10, "log_softmax special " + std::to_string(n));
    }
  }
  for (const Shape& s : {Shape{3, 0}, Shape{0, 5}, Shape{2, 0, 4}}) {
    Tensor cpu = zeros(s);
    for (int64_t axis = 0; axis < s.rank(); ++axis) {
      check_close(softmax(cpu.to(kVulkan), axis), softmax(cpu, axis), 0, 0, "softmax empty " + s.str());
      check_close(log_softmax(cpu.to(kVulkan), axis), log_softmax(cpu, axis), 0, 0, "log_softmax empty " + s.str());
    }
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan cross_entropy, its autograd gradient and cross_entropy_backward match the CPU") {
  if (!have_vulkan()) return;
  std::mt19937 rng(12);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t classes = random_length(rng);
    int64_t rows = std::uniform_int_distribution<int64_t>(1, 300)(rng);
    rows = std::max<int64_t>(1, std::min<int64_t>(rows, 300000 / classes));
    const double scale = random_scale(rng), smoothing = trial % 2 ? 0.1 : 0.0;
    Tensor targets = random_targets(rng, rows, classes);
    const std::string name = "cross_entropy [" + std::to_string(rows) + ", " + std::to_string(classes) + "] scale " +
                             std::to_string(scale) + " smoothing " + std::to_string(smoothing);
    Tensor cpu = uniform({rows, classes}, -scale, scale);
    Tensor dev = cpu.to(kVulkan), dev_targets = targets.to(kVulkan);
    check_close(cross_entropy(dev, dev_targets, Reduction::none, smoothing),
                cross_entropy(cpu, targets, Reduction::none, smoothing), kRtol, kAtol * 10, name);
    Tensor cpu_leaf = cpu.detach().requires_grad_(), dev_leaf = dev.detach().requires_grad_();
    cross_entropy(cpu_leaf, targets, Reduction::mean, smoothing).backward();
    cross_entropy(dev_leaf, dev_targets, Reduction::mean, smoothing).backward();
    check_close(dev_leaf.grad(), cpu_leaf.grad(), kRtol, kAtol, name + " autograd");
    Tensor g = uniform({rows}, -2, 2);
    check_close(cross_entropy_backward(dev, dev_targets, g.to(kVulkan), smoothing),
                cross_entropy_backward(cpu, targets, g, smoothing), kRtol, kAtol * 2, name + " backward");
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan cross_entropy's special values match the CPU; an out-of-range target throws at the next read") {
  if (!have_vulkan()) return;
  for (int64_t classes : {5, 10, 3000}) {
    Tensor targets = cross_entropy_special_targets();
    Tensor cpu = cross_entropy_special_rows(classes).to(DType::f32);
    for (double smoothing : {0.0, 0.1}) {
      const std::string name = "cross_entropy special " + std::to_string(classes) + " smoothing " + std::to_string(smoothing);
      check_close(cross_entropy(cpu.to(kVulkan), targets.to(kVulkan), Reduction::none, smoothing),
                  cross_entropy(cpu, targets, Reduction::none, smoothing), kRtol, kAtol * 10, name);
      Tensor g = full({6}, 0.5);
      check_close(cross_entropy_backward(cpu.to(kVulkan), targets.to(kVulkan), g.to(kVulkan), smoothing),
                  cross_entropy_backward(cpu, targets, g, smoothing), kRtol, kAtol, name + " backward");
    }
  }
  for (int64_t classes : {10, 3000}) {
    Tensor logits = uniform({4, classes}, -1, 1, kVulkan);
    Tensor bad = from_vector<int32_t>({0, static_cast<int32_t>(classes), 1, -1}, {4}).to(kVulkan);
    // rows 1 and 3 are bad: the slot keeps whichever reached it first
    CHECK_THROWS_WITH_AS(cross_entropy(logits, bad, Reduction::none).to_vector<float>(),
                         doctest::Contains("cross_entropy: index"), ValueError);
    CHECK_THROWS_AS(cross_entropy_backward(logits, bad, ones({4}, kVulkan), 0.0).to_vector<float>(), ValueError);
    std::vector<float> losses =
        cross_entropy(logits, from_vector<int32_t>({0, 1, 2, 3}, {4}).to(kVulkan), Reduction::none).to_vector<float>();
    CHECK(std::isfinite(losses[0]));  // the fault was cleared: the device goes on
  }
  check_no_validation_messages();
}
