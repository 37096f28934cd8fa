// The backends this build of kiln compiled, behind core's backend_for (core/backend.h), and the
// process groups, behind init_process_group (core/process_group.h): core names no backend, so
// the lists live here, beside them, with what core/devices.h asks of them. A new backend adds its
// case here.
#include <algorithm>
#include <string>
#include <vector>

#include "kiln/core/backend.h"
#include "kiln/core/devices.h"
#include "kiln/core/error.h"
#include "kiln/core/process_group.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#ifdef KILN_WITH_MPI
#include "kiln/kernels/cpu/mpi_group.h"
#endif
#ifdef KILN_WITH_CUDA
#include "kiln/kernels/cuda/cuda_backend.h"
#endif
#ifdef KILN_WITH_NCCL
#include "kiln/kernels/cuda/nccl_group.h"
#endif
#ifdef KILN_WITH_VULKAN
#include "kiln/kernels/vulkan/vulkan_backend.h"
#endif

namespace kiln {

namespace {
// The error for a device whose backend this build left out: what to configure, or to use instead.
[[noreturn, maybe_unused]] void not_built(const Device& device, const char* backend, const char* needs) {
  KILN_FAIL(BackendUnavailable, "device ", device, ": this build of kiln has no ", backend, " backend (configure with ",
            needs, "; or use --device cpu)");
}
}  // namespace

Backend& backend_for(const Device& device) {
  switch (device.type) {
    case DeviceType::cpu:
      return cpu::widening_backend();
    case DeviceType::cuda:
#ifdef KILN_WITH_CUDA
      return cuda::backend(device.index);
#else
      not_built(device, "CUDA", "the CUDA toolkit and KILN_CUDA=ON");
#endif
    case DeviceType::vulkan:
#ifdef KILN_WITH_VULKAN
      return vulkan::backend(device.index);
#else
      not_built(device, "Vulkan", "the Vulkan headers, loader and glslc and KILN_VULKAN=ON");
#endif
  }
  KILN_FAIL(DeviceError, "unknown device type");
}

#ifndef KILN_WITH_CUDA
int cuda::device_count() { return 0; }
#endif
#ifndef KILN_WITH_VULKAN
int vulkan::device_count() { return 0; }
#endif

DeviceChoice choose_device() {
  DeviceChoice choice;
  // cuda:0, then every Vulkan device in the driver's order (vulkan:0 at least, for its error)
  std::vector<Device> candidates = {Device::cuda(0)};
  for (int i = 0; i < std::max(vulkan::device_count(), 1); ++i) candidates.push_back(Device::vulkan(i));
  for (const Device& d : candidates) {
    try {
      Backend& b = backend_for(d);
#ifdef KILN_WITH_VULKAN
      if (d.type == DeviceType::vulkan && static_cast<vulkan::VulkanBackend&>(b).software()) {
        choice.passed.push_back(detail::concat(d, ": ", static_cast<vulkan::VulkanBackend&>(b).description(),
                                               " runs on the CPU, where kiln's CPU backend is faster"));
        continue;
      }
#endif
      (void)b;
      choice.device = d;
      choice.reason = "the first available of cuda, a vulkan GPU, cpu";
      return choice;
    } catch (const BackendUnavailable& e) {
      choice.passed.push_back(std::string(e.message()));
    }
  }
  choice.device = Device::cpu();
  choice.reason = "no CUDA device or Vulkan GPU";
  return choice;
}

std::shared_ptr<ProcessGroup> init_process_group(DeviceType type, const ProcessGroupOptions& options) {
#ifdef KILN_WITH_MPI
  switch (type) {
    case DeviceType::cpu:
      return cpu::mpi_world(options);
    case DeviceType::cuda:
#ifdef KILN_WITH_NCCL
      return cuda::nccl_group(cpu::mpi_world(options), options);
#else
      KILN_FAIL(BackendUnavailable, "data-parallel on cuda: this build of kiln has no NCCL (configure with the "
                "CUDA toolkit's NCCL and KILN_NCCL=ON; or train on the cpu, whose tensors go through MPI)");
#endif
    case DeviceType::vulkan:
      KILN_FAIL(BackendUnavailable, "data-parallel on vulkan: kiln has no process group for Vulkan tensors "
                "(NCCL serves CUDA, MPI the cpu); train data-parallel on cuda or cpu");
  }
  KILN_FAIL(DeviceError, "unknown device type");
#else
  (void)options;
  KILN_FAIL(BackendUnavailable, "data-parallel on ", device_type_name(type), ": this build of kiln has no MPI ",
            "(install Open MPI, e.g. Debian's libopenmpi-dev, and configure with KILN_MPI=ON)");
#endif
}

}  // namespace kiln
