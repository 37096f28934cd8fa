// What every Vulkan test file shares: the device (lavapipe in CI, the GPU's driver on the device
// machine), the validation layer turned on before the backend starts, and the rule that a case
// fails on any message of the layer.
#pragma once

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "kiln/core/backend.h"
#include "kiln/kiln.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"
#include "tests/backend_cases.h"

namespace kiln::test {

inline const Device kVulkan = Device::vulkan(0);

// Whether a Vulkan device is here. Where none is, a case reports that it skipped, but in CI
// (CI=true), which installs lavapipe, that is a failure: the tests must not pass by not running.
inline bool have_vulkan() {
  setenv("KILN_VULKAN_VALIDATION", "1", 0);  // before the backend starts; KILN_VULKAN_VALIDATION=0 turns it off
  try {
    (void)backend_for(kVulkan);
    return true;
  } catch (const BackendUnavailable& e) {
    const char* ci = std::getenv("CI");
    if (ci && std::string(ci) == "true") FAIL("no Vulkan device in CI: " << std::string(e.what()));
    MESSAGE("skipped: " << std::string(e.what()));
    return false;
  }
}

inline vulkan::VulkanBackend& vk() { return vulkan::backend(0); }

inline void check_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol, const std::string& what) {
  check_close_on(kVulkan, gpu, cpu, rtol, atol, what);
}

// Every case ends with this: the validation layer (when on) said nothing.
inline void check_no_validation_messages() {
  const auto messages = vulkan::validation_messages();
  CHECK_MESSAGE(messages.empty(), messages.size() << " validation message(s), the first: "
                                                  << (messages.empty() ? "" : messages.front()));
}

}  // namespace kiln::test
