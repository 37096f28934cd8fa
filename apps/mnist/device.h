// The --device option that mnist-train and mnist-predict share.
#pragma once

#include <string>

#include "kiln/core/device.h"

namespace kiln::apps {

// "auto" takes CUDA, then a Vulkan GPU (not a CPU implementation such as lavapipe, where kiln's
// CPU backend is faster), then the CPU, and logs which and why (at info level, with `log`), and why
// each one it skipped was passed by (debug); anything else is parsed as a device.
Device pick_device(const std::string& spec, bool log = true);

// For CLI11's check(): empty when `spec` is "auto" or a device, else the reason it is not.
std::string check_device_spec(const std::string& spec);

}  // namespace kiln::apps
