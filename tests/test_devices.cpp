// core/devices.h: what cuda:: and vulkan:: count agrees with the backends that start (every
// counted device starts, the next index is refused), and best_device() takes a CUDA device, else
// a Vulkan GPU, else the CPU, saying why it passed each one by. On a machine with no GPU (CI) the
// CUDA count is 0 and lavapipe, where installed, is counted but passed by for the CPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "kiln/core/backend.h"
#include "kiln/core/devices.h"
#include "kiln/core/error.h"

using namespace kiln;

namespace {

// Every device 0 .. count - 1 of `type` starts; device `count` is refused as unavailable.
void check_counted(DeviceType type, int count) {
  CAPTURE(std::string(device_type_name(type)));
  CAPTURE(count);
  CHECK(count >= 0);
  for (int i = 0; i < count; ++i) CHECK_NOTHROW(backend_for(Device(type, i)));
  CHECK_THROWS_AS(backend_for(Device(type, count)), BackendUnavailable);
}

}  // namespace

TEST_CASE("cuda:: and vulkan:: count the devices whose backends start") {
  CHECK(cuda::is_available() == (cuda::device_count() > 0));
  CHECK(vulkan::is_available() == (vulkan::device_count() > 0));
  check_counted(DeviceType::cuda, cuda::device_count());
  check_counted(DeviceType::vulkan, vulkan::device_count());
  CHECK(vulkan::device_count() == vulkan::device_count());  // asked once, the same answer
}

TEST_CASE("best_device takes a CUDA device, else a Vulkan GPU, else the CPU, and says why") {
  const DeviceChoice choice = choose_device();
  CHECK(best_device() == choice.device);
  CHECK_FALSE(choice.reason.empty());
  if (cuda::is_available()) {
    CHECK(choice.device == Device::cuda(0));
    CHECK(choice.passed.empty());
    return;
  }
  // cuda:0 was tried first and passed by, with the backend's reason
  REQUIRE_FALSE(choice.passed.empty());
  CHECK(choice.passed[0].find("cuda:0") != std::string::npos);
  if (choice.device.is_cpu()) {
    // every Vulkan device was passed by too (none, or each a CPU implementation such as lavapipe)
    const size_t vulkan_passed = choice.passed.size() - 1;
    CHECK(vulkan_passed == static_cast<size_t>(std::max(vulkan::device_count(), 1)));
    for (size_t i = 1; i < choice.passed.size(); ++i) {
      CAPTURE(choice.passed[i]);
      CHECK(choice.passed[i].find("vulkan") != std::string::npos);
      if (vulkan::is_available()) CHECK(choice.passed[i].find("runs on the CPU") != std::string::npos);
    }
  } else {
    CHECK(choice.device.type == DeviceType::vulkan);
    CHECK(choice.device.index < vulkan::device_count());
  }
}
