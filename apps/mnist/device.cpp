#include "apps/mnist/device.h"

#include <spdlog/spdlog.h>

#include "kiln/core/backend.h"
#include "kiln/core/error.h"
#ifdef KILN_WITH_VULKAN
#include "kiln/kernels/vulkan/vulkan_backend.h"
#endif

namespace kiln::apps {

Device pick_device(const std::string& spec, bool log) {
  if (spec != "auto") return Device(spec);
  for (Device d : {Device::cuda(0), Device::vulkan(0)}) {
    try {
      Backend& b = backend_for(d);
#ifdef KILN_WITH_VULKAN
      if (d.type == DeviceType::vulkan && static_cast<vulkan::VulkanBackend&>(b).software()) {
        if (log)
          spdlog::debug("device: skipping {}: {} runs on the CPU, where kiln's CPU backend is faster", d.str(),
                        static_cast<vulkan::VulkanBackend&>(b).description());
        continue;
      }
#endif
      (void)b;
      if (log) spdlog::info("device: {} (auto: the first available of cuda, a vulkan GPU, cpu)", d.str());
      return d;
    } catch (const BackendUnavailable& e) {
      if (log) spdlog::debug("device: skipping {}: {}", d.str(), e.message());
    }
  }
  if (log) spdlog::info("device: cpu (auto: no CUDA device or Vulkan GPU)");
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
