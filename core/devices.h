// Which devices this machine and this build of kiln have, as libtorch's torch::cuda::is_available()
// and torch::cuda::device_count(), and the one to train on when the user has no preference:
//
//   Device device = kiln::best_device();               // cuda:0, else a Vulkan GPU, else cpu
//   if (kiln::cuda::is_available()) ...                // a CUDA device, and kiln built with CUDA
//   int gpus = kiln::cuda::device_count();             // what "cuda:N" can number
//
// Defined by kernels/registry.cpp, beside the list of the backends this build compiled: a backend
// the build left out has no devices.
#pragma once

#include <string>
#include <vector>

#include "kiln/core/device.h"

namespace kiln {

namespace cuda {
// The CUDA devices this process sees: 0 without the CUDA backend, a driver or a GPU.
int device_count();
inline bool is_available() { return device_count() > 0; }
}  // namespace cuda

namespace vulkan {
// The Vulkan devices kiln can use (a compute queue, Vulkan 1.2, push descriptors, std430 uniform
// buffers), lavapipe on the CPU included: 0 without the Vulkan backend, a loader or a driver.
int device_count();
inline bool is_available() { return device_count() > 0; }
}  // namespace vulkan

// The choice best_device() makes, with its reasons (what mnist-train logs for `--device auto`).
struct DeviceChoice {
  Device device;
  std::string reason;               // why this one
  std::vector<std::string> passed;  // each device tried before it, and why it was passed by
};

// The device kiln trains fastest on here: the first CUDA device, else the first Vulkan device
// that is a GPU (a Vulkan implementation that runs on the CPU, such as lavapipe, is slower than
// kiln's CPU backend), else the CPU. Each candidate's backend is started to make sure it works;
// one that fails is passed by with its error.
DeviceChoice choose_device();
inline Device best_device() { return choose_device().device; }

}  // namespace kiln
