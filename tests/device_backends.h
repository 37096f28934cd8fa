// The device backends this build of kiln compiled in, as the device tests see them: each one's
// name (the doctest suite of its cases in test_backend_ops, and --backend=NAME), its device, what
// must happen before it starts and after each case, and whether it has a device here.
// tests/device_main.cpp, the main of every device test binary, skips a binary whose backends
// have no device (exit code kSkipped, CTest's SKIP_RETURN_CODE) instead of passing it.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/backend.h"
#include "kiln/kiln.h"
#include "tests/skip.h"  // kSkipped: the exit code of a binary whose backend has no device
#ifdef KILN_WITH_VULKAN
#include "kiln/kernels/vulkan/vulkan_backend.h"
#endif

namespace kiln::test {

struct DeviceBackend {
  std::string_view name;  // "cuda", "vulkan"
  Device device;
  void (*before_start)() = [] {};  // before the backend's first use
  void (*after_case)() = [] {};    // at the end of each case, its checks of what the backend noticed
  bool required_in_ci = false;     // CI=true: a missing device is a failure (CI installs lavapipe)
  int64_t max_binding_bytes = std::numeric_limits<int64_t>::max();  // the most one kernel argument may hold

  // Empty where the backend has a device here, else why not.
  std::string missing() const {
    before_start();
    try {
      (void)backend_for(device);
      return {};
    } catch (const BackendUnavailable& e) {
      return e.what();
    }
  }
};

#ifdef KILN_WITH_VULKAN
// Every Vulkan case ends with this: the validation layer (when on) said nothing.
inline void check_no_validation_messages() {
  const auto messages = vulkan::validation_messages();
  CHECK_MESSAGE(messages.empty(), messages.size() << " validation message(s), the first: "
                                                  << (messages.empty() ? "" : messages.front()));
}
#endif

inline const std::vector<DeviceBackend>& compiled_backends() {
  static const std::vector<DeviceBackend> all = {
#ifdef KILN_WITH_CUDA
      {.name = "cuda", .device = Device::cuda(0)},
#endif
#ifdef KILN_WITH_VULKAN
      {.name = "vulkan",
       .device = Device::vulkan(0),
       // the validation layer on before the backend starts; KILN_VULKAN_VALIDATION=0 turns it off
       .before_start = [] { setenv("KILN_VULKAN_VALIDATION", "1", 0); },
       .after_case = check_no_validation_messages,
       .required_in_ci = true,
       .max_binding_bytes = int64_t{128} << 20},  // lavapipe's maxStorageBufferRange (128 MiB)
#endif
  };
  return all;
}

}  // namespace kiln::test
