// The Vulkan reductions against the CPU: sum, mean, max, min, argmax and argmin over any axes
// (core stages them into middle-axis reductions), NaN and ties included; with subgroup
// operations and with the fallback.
#include <cmath>

#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

namespace {

void check_reductions(int trials) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < trials; ++trial) {
    Shape s = random_shape(rng);
    std::vector<int64_t> axes;  // a random subset of axes (none: all of them)
    for (int64_t a = 0; a < s.rank(); ++a)
      if (std::uniform_int_distribution<int>(0, 1)(rng)) axes.push_back(a);
    bool keepdim = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    for (DType t : {DType::f32, DType::i32}) {
      Tensor cpu = (uniform(s, -50, 50) * (t == DType::i32 ? 1.0 : 0.1)).to(t);
      if (t == DType::f32) cpu = (cpu * 4.0).to(DType::i32).to(DType::f32);  // ties, to test the first-index rule
      Tensor dev = cpu.to(kVulkan);
      std::string what = s.str() + " " + std::string(dtype_name(t)) + (keepdim ? " keepdim" : "");
      check_close(sum(dev, axes, keepdim), sum(cpu, axes, keepdim), 1e-5, 1e-5, "sum " + what);
      if (t != DType::i32) check_close(mean(dev, axes, keepdim), mean(cpu, axes, keepdim), 1e-5, 1e-5, "mean " + what);
      check_close(max(dev, axes, keepdim), max(cpu, axes, keepdim), 0, 0, "max " + what);
      check_close(min(dev, axes, keepdim), min(cpu, axes, keepdim), 0, 0, "min " + what);
      int64_t axis = std::uniform_int_distribution<int64_t>(0, s.rank() - 1)(rng);
      check_close(argmax(dev, axis, keepdim), argmax(cpu, axis, keepdim), 0, 0, "argmax " + what);
      check_close(argmin(dev, axis, keepdim), argmin(cpu, axis, keepdim), 0, 0, "argmin " + what);
    }
  }
  Tensor with_nan = from_vector<float>({1, NAN, 3, NAN, 2, 5, NAN, 1, NAN}, {3, 3});
  for (int64_t axis : {0, 1}) {
    check_close(max(with_nan.to(kVulkan), {axis}), max(with_nan, {axis}), 0, 0, "max with NaN");
    check_close(min(with_nan.to(kVulkan), {axis}), min(with_nan, {axis}), 0, 0, "min with NaN");
    check_close(argmax(with_nan.to(kVulkan), axis), argmax(with_nan, axis), 0, 0, "argmax with NaN (the first)");
    check_close(argmin(with_nan.to(kVulkan), axis), argmin(with_nan, axis), 0, 0, "argmin with NaN (the first)");
  }
  // one long row (the workgroup-per-row variant) in float against the CPU's double
  Tensor big = uniform({3000000}, -1, 1);
  check_close(sum(big.to(kVulkan)), sum(big), 1e-5, 1e-2, "sum of 3M");
  check_close(max(big.to(kVulkan)), max(big), 0, 0, "max of 3M");
  // more rows than a dispatch's workgroups (65535): the row variant loops
  Tensor tall = uniform({70000, 17}, -1, 1);
  check_close(sum(tall.to(kVulkan), {1}), sum(tall, {1}), 1e-5, 1e-5, "sum of the rows of [70000, 17]");
  check_close(argmax(tall.to(kVulkan), 1), argmax(tall, 1), 0, 0, "argmax of the rows of [70000, 17]");
  // more groups of 32 columns than a dispatch's workgroups (400 x 219): the column variant loops
  Tensor wide = uniform({400, 2, 7000}, -1, 1);
  check_close(sum(wide.to(kVulkan), {1}), sum(wide, {1}), 1e-5, 1e-5, "sum over the middle axis of [400, 2, 7000]");
  check_close(argmin(wide.to(kVulkan), 1), argmin(wide, 1), 0, 0, "argmin over the middle axis of [400, 2, 7000]");
  // empty axes: sum 0, mean NaN, max refused
  Tensor empty_axis = zeros({3, 0}, TensorOptions().device(kVulkan));
  check_close(sum(empty_axis, {1}), zeros({3}), 0, 0, "sum of an empty axis");
  CHECK(std::isnan(mean(empty_axis, {1}).to_vector<float>()[0]));
  CHECK_THROWS_AS((void)max(empty_axis, {1}), ValueError);
}

}  // namespace

TEST_CASE("vulkan reductions over any axes match the CPU, NaN and ties included") {
  if (!have_vulkan()) return;
  MESSAGE("subgroup operations: " << std::string(vk().subgroups() ? "yes" : "no"));
  check_reductions(60);  // with subgroup shuffles where the device has them
  if (vk().subgroups()) {  // and the shared-memory fallback of devices without
    vk().use_subgroups(false);
    check_reductions(20);
    vk().use_subgroups(true);
  }
  check_no_validation_messages();
}
