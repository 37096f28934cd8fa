// The backends this build of kiln compiled, behind core's backend_for (core/backend.h): core
// names no backend, so the list lives here, beside them. A new backend adds its case here.
#include "kiln/core/backend.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#ifdef KILN_WITH_CUDA
#include "kiln/kernels/cuda/cuda_backend.h"
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
      return cpu::backend();
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

}  // namespace kiln
