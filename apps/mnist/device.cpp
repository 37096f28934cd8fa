#include "apps/mnist/device.h"

#include <spdlog/spdlog.h>

#include "kiln/core/devices.h"
#include "kiln/core/error.h"

namespace kiln::apps {

Device pick_device(const std::string& spec, bool log) {
  if (spec != "auto") return Device(spec);
  const DeviceChoice choice = choose_device();
  if (log) {
    for (const std::string& why : choice.passed) spdlog::debug("device: skipping {}", why);
    spdlog::info("device: {} (auto: {})", choice.device.str(), choice.reason);
  }
  return choice.device;
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
