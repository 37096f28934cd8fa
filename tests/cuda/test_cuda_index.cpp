// The CUDA indexing kernels against the CPU: index_select (gather) along any axis in every dtype,
// its gradient (index_add, repeated indices included), one_hot, and bad indices, which the GPU
// can only report at the next synchronisation.
#include "tests/backend_sweeps.h"
#include "tests/cuda/cuda_test.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("index_select, its gradient and one_hot match the CPU") {
  if (!have_cuda()) return;
  index_sweep(kCuda, {DType::f32, DType::f64, DType::i32, DType::u8}, {DType::f32, DType::f64});
  std::mt19937 rng(6);
  // The loader's case: a batch of 64 drawn from 60000 images held on the device.
  Tensor images = uniform({60000, 784}, 0, 1);
  Tensor order = random_indices(rng, 64, 60000, true);
  check_close(index_select(images.to(kCuda), 0, order.to(kCuda)), index_select(images, 0, order), 0, 0, "a batch");
}

TEST_CASE("an index out of range on the GPU is reported at the next synchronisation, naming the op") {
  if (!have_cuda()) return;
  Tensor x = uniform({5, 3}, 0, 1).to(kCuda);
  Tensor bad = from_vector<int32_t>({0, 4, 5, 1}, {4}).to(kCuda);
  Tensor y = index_select(x, 0, bad);  // queued: the kernel cannot throw
  CHECK_THROWS_WITH_AS(y.to(Device::cpu()), doctest::Contains("gather: index 5 at position 2 is outside [0, 5)"),
                       ValueError);
  // The fault is cleared once reported: the device goes on working.
  Tensor good = from_vector<int32_t>({4, 0}, {2}).to(kCuda);
  check_close(index_select(x, 0, good), index_select(x.to(Device::cpu()), 0, good.to(Device::cpu())), 0, 0, "after");
  CHECK_THROWS_WITH_AS(one_hot(from_vector<int32_t>({1, -1}, {2}).to(kCuda), 3).to(Device::cpu()),
                       doctest::Contains("one_hot: index -1 at position 1"), ValueError);
  CHECK_THROWS_WITH_AS(index_select_backward(ones({2, 3}, kCuda), 0, from_vector<int32_t>({0, 7}, {2}).to(kCuda), {5, 3})
                           .to(Device::cpu()),
                       doctest::Contains("index_add: index 7"), ValueError);
}
