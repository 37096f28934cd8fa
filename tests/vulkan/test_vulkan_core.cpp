// What only the Vulkan backend has: its memory (blocks shared and reused, transfers at byte
// offsets, errors), the shaders' division by multiply-and-shift, frames in flight and the barriers
// between kernels, timestamps, the dtypes it lacks, and the arithmetic faults it reports at the
// next wait. (The ops against the CPU on every backend: test_backend_ops.)
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("vulkan memory: blocks are shared and reused, transfers keep every byte, errors name the rule") {
  MESSAGE("device: " << vk().description());
  std::mt19937 rng(1);
  // tensors of many sizes, written and read back exactly, also at byte offsets
  std::vector<Tensor> kept;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(0, 70000)(rng);
    Tensor cpu = uniform({n}, -1, 1);
    Tensor dev = cpu.to(kVulkan);
    CHECK(dev.to_vector<float>() == cpu.to_vector<float>());
    if (n > 10) {
      std::vector<float> part(5);
      vk().read(dev.storage()->data(), 7 * sizeof(float), part.data(), 5 * sizeof(float));
      CHECK(std::memcmp(part.data(), cpu.to_vector<float>().data() + 7, 5 * sizeof(float)) == 0);
    }
    if (trial % 3 == 0) kept.push_back(dev);  // the rest are freed, their ranges reused
  }
  const size_t reserved = vk().bytes_reserved();
  for (int trial = 0; trial < 60; ++trial) (void)zeros({1000, 100}, TensorOptions().device(kVulkan));
  CHECK(vk().bytes_reserved() == reserved);  // freed ranges serve later tensors: no new block
  // more than a block: a block of its own, and a read larger than the staging buffer's chunk
  Tensor big_cpu = uniform({20'000'000}, -1, 1);
  Tensor big = big_cpu.to(kVulkan);
  CHECK(big.to_vector<float>() == big_cpu.to_vector<float>());
  for (const Tensor& t : kept) CHECK(t.numel() >= 0);
  // an absurd request names the bytes and the rule it breaks
  try {
    (void)empty({int64_t{1} << 45}, TensorOptions().device(kVulkan));
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    CHECK(std::string(e.what()).find("vulkan:0") != std::string::npos);
    CHECK(std::string(e.what()).find(std::to_string((int64_t{1} << 45) * 4)) != std::string::npos);
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan divisor: the shaders' multiply-and-shift division equals n / d for every d and n < 2^31") {
  // fastdiv.glsl's arithmetic, on the host: (umulhi(n, magic) + n) >> shift
  auto div_by = [](int32_t n, vulkan::Divisor q) {
    const uint32_t hi = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(n)} * q.magic) >> 32);
    return static_cast<int32_t>((hi + static_cast<uint32_t>(n)) >> q.shift);
  };
  std::mt19937 rng(5);
  std::vector<int32_t> ds;
  for (int32_t d = 1; d <= 1100; ++d) ds.push_back(d);
  for (int i = 0; i < 2000; ++i) ds.push_back(std::uniform_int_distribution<int32_t>(1, INT32_MAX)(rng));
  for (int s = 1; s < 31; ++s) ds.insert(ds.end(), {(1 << s) - 1, 1 << s, (1 << s) + 1});
  ds.push_back(INT32_MAX);
  for (int32_t d : ds) {
    const vulkan::Divisor q = vulkan::divisor(d);
    std::vector<int32_t> ns{0, 1, d - 1, d, d < INT32_MAX ? d + 1 : d, INT32_MAX, INT32_MAX - 1, INT32_MAX / d * d};
    for (int i = 0; i < 200; ++i) ns.push_back(std::uniform_int_distribution<int32_t>(0, INT32_MAX)(rng));
    for (int i = 0; i < 50; ++i) ns.push_back(std::uniform_int_distribution<int32_t>(0, 100000)(rng));
    for (int32_t n : ns) {
      const int32_t got = div_by(n, q);
      if (got != n / d) FAIL_CHECK(n << " / " << d << ": " << got << ", not " << n / d);
    }
  }
}

TEST_CASE("vulkan frames in flight: writes and kernels queued over many submissions keep their order") {
  // 400 writes and 800 kernels: frames go to the device every 32 dispatches and are reused after
  // their fences, the upload segments wrap many times, and nothing here waits until the read
  Tensor acc_dev = zeros({1000}, TensorOptions().device(kVulkan)), acc_cpu = zeros({1000});
  for (int i = 0; i < 400; ++i) {
    Tensor step = full({1000}, static_cast<double>(i % 7) - 3.0);
    Tensor step_dev = step.to(kVulkan);  // its host memory is gone before the device copies it
    step = Tensor();
    acc_dev = acc_dev * 0.5 + step_dev;
    acc_cpu = acc_cpu * 0.5 + full({1000}, static_cast<double>(i % 7) - 3.0);
  }
  check_close(acc_dev, acc_cpu, 0, 0, "400 writes and 800 kernels");
  // independent kernels in a row run without barriers between them; one on memory an earlier one
  // bound (here: freed and handed out again at once) must still wait for it
  std::vector<Tensor> parts_dev, parts_cpu;
  Tensor src_cpu = uniform({5000}, -1, 1), src = src_cpu.to(kVulkan);
  for (int i = 0; i < 100; ++i) {
    Tensor scratch = src * static_cast<double>(i);  // freed at the end of the iteration
    parts_dev.push_back(scratch + 1.0);
    parts_cpu.push_back(src_cpu * static_cast<double>(i) + 1.0);
  }
  for (int i = 0; i < 100; i += 9)
    check_close(parts_dev[static_cast<size_t>(i)], parts_cpu[static_cast<size_t>(i)], 0, 0, "independent kernel " + std::to_string(i));
  // a write larger than a frame's upload segment goes through staging and waits
  Tensor big_cpu = uniform({3'000'000}, -1, 1);
  Tensor big = big_cpu.to(kVulkan) * 2.0;
  check_close(big, big_cpu * 2.0, 0, 0, "a 12 MB write");
  // timestamps: the device's time around work, in order, and positive where there was work
  const uint32_t t0 = vk().timestamp();
  Tensor y = big.slice(0, 0, 100'000);
  for (int i = 0; i < 50; ++i) y = y * 1.0001;
  const uint32_t t1 = vk().timestamp();
  const uint32_t t2 = vk().timestamp();
  const double work = vk().elapsed_ms(t0, t1), none = vk().elapsed_ms(t1, t2);
  MESSAGE("50 multiplies of 100k elements: " << work << " ms on the device");
  CHECK(work > 0);
  CHECK(work < 60'000);
  CHECK(none >= 0);
  CHECK(none <= work);
  check_no_validation_messages();
}

TEST_CASE("vulkan: a dtype the backend lacks is an error naming the backend and the op") {
  Tensor x = empty({2, 3}, TensorOptions(DType::f64).device(kVulkan));  // memory takes any dtype
  try {
    (void)exp(x);
    FAIL("expected DTypeError");
  } catch (const DTypeError& e) {
    CHECK(std::string(e.what()).find("vulkan exp: f64") != std::string::npos);
  }
  Tensor d = empty({3}, TensorOptions(DType::f64).device(kVulkan));
  CHECK_THROWS_AS(d.fill_(1), DTypeError);
  Tensor i = ones({3}, TensorOptions(DType::i32).device(kVulkan));
  CHECK_THROWS_AS((void)exp(i), DTypeError);
  // bf16: no kernel of the backend takes it, and autocast says so before it reaches one
  Tensor h = from_vector<float>({1, 2, 3, 4}, {2, 2}).to(DType::bf16).to(kVulkan);  // moved as bytes
  CHECK_THROWS_AS((void)(h + h), DTypeError);
  CHECK_THROWS_AS((void)h.to(DType::f32), DTypeError);
  CHECK_THROWS_AS((void)index_select(h, 0, from_vector<int32_t>({1}, {1}).to(kVulkan)), DTypeError);
  Tensor w = ones({2, 2}, kVulkan);
  try {
    AutocastGuard autocast(DType::bf16);
    (void)matmul(w, w);
    FAIL("expected DTypeError");
  } catch (const DTypeError& e) {
    CHECK(std::string(e.what()).find("matmul under autocast: the vulkan backend has no bf16 kernels") !=
          std::string::npos);
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan: an i32 division by zero and a negative integer power are reported at the next wait") {
  // The CPU throws at once; a shader cannot, so it records the fault, which the host throws at its
  // next wait, as for a bad index. (CUDA's kernels write 0 there and report nothing.)
  Tensor extremes = from_vector<int32_t>({-2147483647 - 1, 2147483647, -7, 7}, {4});
  Tensor minus_one = from_vector<int32_t>({-1, -1, 2, -2}, {4});
  Tensor zero = from_vector<int32_t>({1, 0, 2, 3}, {4}).to(kVulkan);
  CHECK_THROWS_WITH_AS((extremes.to(kVulkan) / zero).to(Device::cpu()), doctest::Contains("integer division by zero"),
                       ValueError);
  CHECK_THROWS_WITH_AS(pow(extremes.to(kVulkan), minus_one.to(kVulkan)).to(Device::cpu()),
                       doctest::Contains("negative integer powers"), ValueError);
  check_close(extremes.to(kVulkan) + 1.0, extremes + 1.0, 0, 0, "after the faults");
  check_no_validation_messages();
}
