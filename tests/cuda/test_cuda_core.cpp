// The CUDA backend's own errors: an allocation past the device's memory names the numbers and
// leaves the device working, a device index that is not there is refused, and tensors on two
// devices do not mix. (The ops against the CPU: test_backend_ops.)
#include "tests/cuda/cuda_test.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("device errors: out of memory names the numbers, a missing device is refused") {
  try {
    (void)empty({int64_t{1} << 40}, kCuda);  // 4 TiB
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    std::string what = e.what();
    CHECK(what.find("4398046511104 bytes") != std::string::npos);
    CHECK(what.find("free of") != std::string::npos);
  }
  Tensor x = ones({4, 4}, kCuda);  // the device still works after a failed allocation
  CHECK((x + x).to(Device::cpu()).to_vector<float>() == std::vector<float>(16, 2.0f));
  CHECK_THROWS_AS((void)zeros({1}, Device::cuda(1000)), BackendUnavailable);
  CHECK_THROWS_AS(x + ones({4, 4}), DeviceError);
}
