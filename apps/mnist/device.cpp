#include "apps/mnist/device.h"

#include "core/backend.h"
#include "core/error.h"

namespace kiln::apps {

Device pick_device(const std::string& spec, const std::function<void(const std::string&)>& log, bool verbose) {
  if (spec != "auto") return Device(spec);
  for (Device d : {Device::cuda(0), Device::vulkan(0)}) {
    try {
      (void)backend_for(d);
      log("device: " + d.str() + " (auto: the first available of cuda, vulkan, cpu)");
      return d;
    } catch (const BackendUnavailable& e) {
      if (verbose) log("device: skipping " + d.str() + ": " + e.what());
    }
  }
  log("device: cpu (auto: this build of kiln has no CUDA or Vulkan backend)");
  return Device::cpu();
}

std::string check_device_spec(const std::string& spec) {
  if (spec == "auto") return {};
  try {
    (void)Device(spec);
    return {};
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace kiln::apps
