// bf16: bfloat16, the top 16 bits of an IEEE f32 (sign, 8 exponent bits, 7 mantissa bits). It has
// f32's range and about 3 significant decimal digits: the storage type of mixed precision
// (autograd/autocast.h), whose products accumulate in f32.
//
// A plain 2-byte value with explicit conversions, the same on the host and in CUDA kernels (the
// bits are those of CUDA's __nv_bfloat16), so the CPU reference and the GPU round alike:
//   bf16 -> f32 is exact (the bits shifted up);
//   f32 -> bf16 rounds to nearest, ties to even, as __float2bfloat16_rn does; infinities stay
//   infinite, values past bf16's largest finite value (3.39e38) round to infinity, and a NaN stays
//   a NaN (its top mantissa bit set, so that truncation cannot turn it into an infinity).
// Widening to float is implicit (it is exact), rounding is explicit: arithmetic on bf16 values
// happens in float, and a result becomes bf16 only where code says bf16(v), once, at the store,
// so no sum is ever accumulated in bf16 by accident.
#pragma once

#include <cstdint>
#include <cstring>

#include "kiln/core/host_device.h"

namespace kiln {

struct bf16 {
  uint16_t bits;  // left uninitialised, so that bf16 stays trivial (CUDA __shared__ arrays of it)

  bf16() = default;
  KILN_HOST_DEVICE explicit bf16(float v) : bits(round(v)) {}
  KILN_HOST_DEVICE explicit bf16(double v) : bits(round(static_cast<float>(v))) {}  // through f32, as the kernels
  KILN_HOST_DEVICE operator float() const { return from_bits(static_cast<uint32_t>(bits) << 16); }
  KILN_HOST_DEVICE static bf16 from_raw(uint16_t raw) {
    bf16 b;
    b.bits = raw;
    return b;
  }

 private:
  KILN_HOST_DEVICE static uint32_t to_bits(float v) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(v);
#else
    uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    return u;
#endif
  }
  KILN_HOST_DEVICE static float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float v;
    std::memcpy(&v, &u, sizeof v);
    return v;
#endif
  }
  // Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. A carry out of the
  // mantissa bumps the exponent, which is right (up to infinity past the largest finite value).
  KILN_HOST_DEVICE static uint16_t round(float v) {
    uint32_t u = to_bits(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};

static_assert(sizeof(bf16) == 2, "bf16 is two bytes, as the tensors that hold it assume");

}  // namespace kiln
