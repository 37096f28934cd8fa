// The CUDA indexing kernels against the CPU: index_select (gather) along any axis in every dtype,
// its gradient (index_add, repeated indices included), one_hot, and bad indices, which the GPU
// can only report at the next synchronisation.
#include "tests/cuda/cuda_test.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("index_select, its gradient and one_hot match the CPU") {
  if (!have_cuda()) return;
  std::mt19937 rng(6);
  for (int trial = 0; trial < 60; ++trial) {
    Shape s = random_shape(rng);
    int64_t axis = std::uniform_int_distribution<int64_t>(0, s.rank() - 1)(rng);
    int64_t n = s[static_cast<size_t>(axis)];
    bool distinct = trial % 2 == 0;
    int64_t m = distinct ? std::uniform_int_distribution<int64_t>(1, n)(rng)
                         : std::uniform_int_distribution<int64_t>(1, 2 * n + 3)(rng);
    Tensor idx = random_indices(rng, m, n, distinct);
    std::string what = s.str() + " axis " + std::to_string(axis) + " m " + std::to_string(m);
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::u8}) {
      Tensor cpu = (uniform(s, 0, 100)).to(t);
      check_close(index_select(cpu.to(kCuda), axis, idx.to(kCuda)), index_select(cpu, axis, idx), 0, 0,
                  "index_select " + what + " " + std::string(dtype_name(t)));
    }
    Shape gs = s;
    gs[static_cast<size_t>(axis)] = m;
    for (DType t : {DType::f32, DType::f64}) {
      Tensor grad = uniform(gs, -1, 1, t);
      // Distinct indices add each row once: exact. Repeated ones add in a varying order on the GPU.
      double tol = distinct ? 0 : (t == DType::f32 ? 1e-5 : 1e-13);
      check_close(index_select_backward(grad.to(kCuda), axis, idx.to(kCuda), s),
                  index_select_backward(grad, axis, idx, s), tol, tol, "index_select_backward " + what);
    }
    Tensor labels = random_indices(rng, m, n, false);
    check_close(one_hot(labels.to(kCuda), n), one_hot(labels, n), 0, 0, "one_hot " + what);
    check_close(one_hot(labels.to(kCuda), n, DType::u8), one_hot(labels, n, DType::u8), 0, 0, "one_hot u8 " + what);
  }
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
