// CPU memory: buffers are plain host memory, so write and read are memcpy.
//
// Every buffer is 64-byte aligned: a cache line, and the widest SIMD load (AVX-512), so rows of a
// fresh tensor never start mid-line. allocate(0) returns a real, non-null buffer: an empty tensor
// still owns storage, and a null buffer means "undefined" in TensorRef.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"

namespace kiln::cpu {

namespace {
constexpr size_t kAlignment = 64;
}  // namespace

void* CpuBackend::allocate(size_t bytes) {
  // std::aligned_alloc wants a size that is a multiple of the alignment, and at least one block
  // so that allocate(0) still returns a unique non-null pointer.
  KILN_CHECK(bytes <= SIZE_MAX - kAlignment, OutOfMemory, "cpu: cannot allocate ", bytes,
             " bytes (larger than the address space)");
  size_t rounded = bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* buffer = std::aligned_alloc(kAlignment, rounded);
  KILN_CHECK(buffer != nullptr, OutOfMemory, "cpu: cannot allocate ", bytes,
             " bytes: the system refused");
  return buffer;
}

void CpuBackend::deallocate(void* buffer) noexcept { std::free(buffer); }

void CpuBackend::write(void* buffer, size_t byte_offset, const void* host, size_t bytes) {
  if (bytes == 0) return;  // host may be null for an empty tensor; memcpy forbids that
  std::memcpy(static_cast<char*>(buffer) + byte_offset, host, bytes);
}

void CpuBackend::read(const void* buffer, size_t byte_offset, void* host, size_t bytes) {
  if (bytes == 0) return;
  std::memcpy(host, static_cast<const char*>(buffer) + byte_offset, bytes);
}

CpuBackend& backend() {
  static CpuBackend instance;
  return instance;
}

}  // namespace kiln::cpu
