// Where a tensor lives: "cpu", "cuda:N" or "vulkan:N".
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace kiln {

enum class DeviceType : uint8_t { cpu, cuda, vulkan };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}
  // Parses "cpu", "cuda", "cuda:1", "vulkan:0"; throws ValueError on anything else.
  Device(std::string_view spec);  // NOLINT: implicit, so "cuda:1" reads naturally where a Device is asked
  Device(const char* spec) : Device(std::string_view(spec)) {}

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  static constexpr Device vulkan(int i = 0) { return {DeviceType::vulkan, i}; }

  bool is_cpu() const { return type == DeviceType::cpu; }
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

std::string_view device_type_name(DeviceType t);
inline std::ostream& operator<<(std::ostream& out, const Device& d) { return out << d.str(); }

}  // namespace kiln
