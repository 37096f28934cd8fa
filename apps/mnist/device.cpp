#include "apps/mnist/device.h"

#include "core/backend.h"
#include "core/error.h"

namespace kiln::apps {

Device pick_device(const std::string& spec, const std::function<void(const std::string&)>& log, bool verbose) {
  if (spec != "auto") return Device(spec);
  // Vulkan joins this list once its backend has every kernel a training run needs; until then it
  // serves --device vulkan alone, which names the first kernel it lacks.
  for (Device d : {Device::cuda(0)}) {
    try {
      (void)backend_for(d);
      log("device: " + d.str() + " (auto: the first available of cuda, cpu)");
      return d;
    } catch (const BackendUnavailable& e) {
      if (verbose) log("device: skipping " + d.str() + ": " + e.what());
    }
  }
  log("device: cpu (auto: no CUDA device, or a build of kiln without the CUDA backend)");
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
