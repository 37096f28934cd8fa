// Random draws of the Vulkan backend (shaders/random.comp): uniform, normal and dropout from
// kiln's Philox stream, the numbers the CPU and CUDA backends draw.
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

// random.comp's Params
struct Params {
  int32_t numel = 0;
  uint32_t seed_lo = 0, seed_hi = 0, offset_lo = 0, offset_hi = 0;
  float a_hi = 0, a_lo = 0, b_hi = 0, b_lo = 0;
  float threshold = 0, scale = 0;
  int32_t x_offset = 0, out_offset = 0;
};

Params params_for(const TensorRef& out, const philox::Key& key, const char* op) {
  // The Vulkan backend captures nothing, so no key of its draws reads a replay value.
  KILN_CHECK(key.replay == nullptr, BackendUnavailable, "vulkan ", op, ": a draw keyed by a replay value (the "
             "Vulkan backend captures no graphs)");
  const uint64_t seed = key.seed, offset = key.offset;
  KILN_CHECK(out.dtype == DType::f32, DTypeError, "vulkan ", op, ": ", out.dtype,
             " is not supported by the Vulkan backend yet (random draws in f32 so far)");
  KILN_CHECK(out.is_contiguous(), ValueError, "vulkan ", op, ": out must be contiguous");
  KILN_CHECK(out.numel() < (int64_t{1} << 31) - 4 && out.offset < (int64_t{1} << 31), ShapeError, "vulkan ", op,
             ": ", out.numel(), " elements exceed the 32-bit indices of the Vulkan kernels");
  Params p;
  p.numel = static_cast<int32_t>(out.numel());
  p.seed_lo = static_cast<uint32_t>(seed);
  p.seed_hi = static_cast<uint32_t>(seed >> 32);
  p.offset_lo = static_cast<uint32_t>(offset);
  p.offset_hi = static_cast<uint32_t>(offset >> 32);
  p.out_offset = static_cast<int32_t>(out.offset);
  return p;
}

void split(double v, float* hi, float* lo) {
  *hi = static_cast<float>(v);
  *lo = static_cast<float>(v - static_cast<double>(*hi));
}

}  // namespace

void VulkanBackend::uniform(const TensorRef& out, double low, double high, const philox::Key& key) {
  Params p = params_for(out, key, "uniform");
  split(low, &p.a_hi, &p.a_lo);
  split(high - low, &p.b_hi, &p.b_lo);
  record({"random_uniform", {}, &p, sizeof p, {allocation(out)}, (out.numel() + 3) / 4});
}

void VulkanBackend::normal(const TensorRef& out, double mean, double stddev, const philox::Key& key) {
  Params p = params_for(out, key, "normal");
  p.a_hi = static_cast<float>(mean);
  p.b_hi = static_cast<float>(stddev);
  record({"random_normal", {}, &p, sizeof p, {allocation(out)}, (out.numel() + 3) / 4});
}

void VulkanBackend::dropout(const TensorRef& x, const TensorRef& out, double p_drop, const philox::Key& key) {
  KILN_CHECK(x.is_contiguous() && x.dtype == out.dtype && x.numel() == out.numel(), ValueError,
             "vulkan dropout: takes contiguous x and out of one dtype and size");
  Params p = params_for(out, key, "dropout");
  p.threshold = static_cast<float>(p_drop);
  p.scale = static_cast<float>(1.0 / (1.0 - p_drop));
  p.x_offset = static_cast<int32_t>(x.offset);
  record({"random_dropout", {}, &p, sizeof p, {allocation(x), allocation(out)}, (out.numel() + 3) / 4});
}

}  // namespace kiln::vulkan
