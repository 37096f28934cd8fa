// The Vulkan indexing kernels against the CPU: index_select (gather) along any axis in f32, i32
// and u8, its gradient (index_add, repeated indices included: the CPU's order of additions, so
// exact), one_hot, and bad indices, which the device reports at the host's next wait.
#include "tests/backend_sweeps.h"
#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("vulkan index_select, its gradient and one_hot match the CPU") {
  if (!have_vulkan()) return;
  index_sweep(kVulkan, {DType::f32, DType::i32, DType::u8}, {DType::f32});
  std::mt19937 rng(6);
  // The loader's case: a batch of 64 drawn from 60000 images held on the device as u8 (47 MB), and
  // from 30000 as f32 (94 MB: lavapipe binds at most 128 MiB to a shader, maxStorageBufferRange).
  Tensor images = uniform({60000, 784}, 0, 255);
  Tensor order = random_indices(rng, 64, 60000, true);
  Tensor bytes = images.to(DType::u8);
  check_close(index_select(bytes.to(kVulkan), 0, order.to(kVulkan)), index_select(bytes, 0, order), 0, 0, "a u8 batch");
  Tensor half = images.slice(0, 0, 30000).contiguous();
  Tensor some = random_indices(rng, 64, 30000, true);
  check_close(index_select(half.to(kVulkan), 0, some.to(kVulkan)), index_select(half, 0, some), 0, 0, "an f32 batch");
  check_no_validation_messages();
}

TEST_CASE("vulkan: an index out of range is reported at the next wait, naming the op") {
  if (!have_vulkan()) return;
  Tensor x = uniform({5, 3}, 0, 1).to(kVulkan);
  Tensor bad = from_vector<int32_t>({0, 4, 5, 1}, {4}).to(kVulkan);
  Tensor y = index_select(x, 0, bad);  // recorded: the shader cannot throw
  CHECK_THROWS_WITH_AS(y.to(Device::cpu()), doctest::Contains("gather: index 5 at position 2 is outside [0, 5)"),
                       ValueError);
  // The fault is cleared once reported: the device goes on working.
  Tensor good = from_vector<int32_t>({4, 0}, {2}).to(kVulkan);
  check_close(index_select(x, 0, good), index_select(x.to(Device::cpu()), 0, good.to(Device::cpu())), 0, 0, "after");
  CHECK_THROWS_WITH_AS(one_hot(from_vector<int32_t>({1, -1}, {2}).to(kVulkan), 3).to(Device::cpu()),
                       doctest::Contains("one_hot: index -1 at position 1"), ValueError);
  CHECK_THROWS_WITH_AS(
      index_select_backward(ones({2, 3}, kVulkan), 0, from_vector<int32_t>({0, 7}, {2}).to(kVulkan), {5, 3})
          .to(Device::cpu()),
      doctest::Contains("index_add: index 7"), ValueError);
  check_no_validation_messages();
}
