// What every test_vulkan file shares: the device (lavapipe in CI, the GPU's driver on the device
// machine; tests/device_main.cpp turns the validation layer on before the backend starts and runs
// test_vulkan only where a device is here), and the rule that a case fails on any message of the
// layer (check_no_validation_messages, tests/device_backends.h).
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "kiln/kernels/vulkan/vulkan_backend.h"
#include "kiln/kiln.h"
#include "tests/backend_cases.h"
#include "tests/device_backends.h"

namespace kiln::test {

inline const Device kVulkan = Device::vulkan(0);

inline vulkan::VulkanBackend& vk() { return vulkan::backend(0); }

inline void check_close(const Tensor& gpu, const Tensor& cpu, double rtol, double atol, const std::string& what) {
  check_close_on(kVulkan, gpu, cpu, rtol, atol, what);
}

}  // namespace kiln::test
