// The Vulkan backend's compute shaders, compiled from kernels/vulkan/shaders/*.comp to SPIR-V by
// glslc at build time and embedded in the library (kernels/vulkan/CMakeLists.txt lists the
// variants; cmake/EmbedSpirv.cmake writes the tables).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace kiln::vulkan {

// The SPIR-V words of shader variant `name` ("elementwise_unary", ...), or an empty span.
std::span<const uint32_t> shader_code(std::string_view name);

}  // namespace kiln::vulkan
