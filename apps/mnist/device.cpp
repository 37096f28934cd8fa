#include "apps/mnist/device.h"

#include "kiln/core/backend.h"
#include "kiln/core/error.h"
#ifdef KILN_WITH_VULKAN
#include "kiln/kernels/vulkan/vulkan_backend.h"
#endif

namespace kiln::apps {

Device pick_device(const std::string& spec, const std::function<void(const std::string&)>& log, bool verbose) {
  if (spec != "auto") return Device(spec);
  for (Device d : {Device::cuda(0), Device::vulkan(0)}) {
    try {
      Backend& b = backend_for(d);
#ifdef KILN_WITH_VULKAN
      if (d.type == DeviceType::vulkan && static_cast<vulkan::VulkanBackend&>(b).software()) {
        if (verbose)
          log("device: skipping " + d.str() + ": " + static_cast<vulkan::VulkanBackend&>(b).description() +
              " runs on the CPU, where kiln's CPU backend is faster");
        continue;
      }
#endif
      (void)b;
      log("device: " + d.str() + " (auto: the first available of cuda, a vulkan GPU, cpu)");
      return d;
    } catch (const BackendUnavailable& e) {
      if (verbose) log("device: skipping " + d.str() + ": " + std::string(e.message()));
    }
  }
  log("device: cpu (auto: no CUDA device or Vulkan GPU)");
  return Device::cpu();
}

std::string check_device_spec(const std::string& spec) {
  if (spec == "auto") return {};
  try {
    (void)Device(spec);
    return {};
  } catch (const Error& e) {
    return std::string(e.message());
  }
}

}  // namespace kiln::apps
