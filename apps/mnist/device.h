// The --device option that mnist-train and mnist-predict share.
#pragma once

#include <functional>
#include <string>

#include "kiln/core/device.h"

namespace kiln::apps {

// "auto" takes CUDA, then a Vulkan GPU (not a CPU implementation such as lavapipe, where kiln's
// CPU backend is faster), then the CPU, and says which and why through `log` (and, when `verbose`,
// why each one it skipped was passed by); anything else is parsed as a device.
Device pick_device(const std::string& spec, const std::function<void(const std::string&)>& log, bool verbose);

// For CLI11's check(): empty when `spec` is "auto" or a device, else the reason it is not.
std::string check_device_spec(const std::string& spec);

}  // namespace kiln::apps
