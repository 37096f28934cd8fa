#include "kiln/core/device.h"

#include <charconv>

#include "kiln/core/error.h"

namespace kiln {

std::string_view device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return "cuda";
    case DeviceType::vulkan: return "vulkan";
  }
  return "?";
}

Device::Device(std::string_view spec) {
  std::string_view name = spec.substr(0, spec.find(':'));
  if (name == "cpu") type = DeviceType::cpu;
  else if (name == "cuda") type = DeviceType::cuda;
  else if (name == "vulkan") type = DeviceType::vulkan;
  else
    KILN_FAIL(ValueError, "device '", spec, "': expected cpu, cuda[:N] or vulkan[:N]");
  if (name.size() < spec.size()) {
    std::string_view digits = spec.substr(name.size() + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    KILN_CHECK(ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && index >= 0,
               ValueError, "device '", spec, "': the index after ':' must be a number >= 0");
    KILN_CHECK(type != DeviceType::cpu || index == 0, ValueError, "device '", spec,
               "': there is one cpu device, cpu:0");
  }
}

std::string Device::str() const {
  if (type == DeviceType::cpu) return "cpu";
  return std::string(device_type_name(type)) + ":" + std::to_string(index);
}

}  // namespace kiln
