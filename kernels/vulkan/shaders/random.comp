#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// Random draws on the Vulkan backend, from kiln's Philox4x32-10 stream (core/philox.h): element i
// of a draw at (seed, offset) takes word i % 4 of block offset + i / 4, so every backend draws the
// same numbers. One invocation per block of four elements. Variants (-D): UNIFORM, NORMAL, DROPOUT.
//
//   uniform: out[i] = low + (high - low) * u_i, u_i = ((word >> 8) + 0.5) * 2^-24 (exact in f32)
//   normal:  Box-Muller on pairs (2j, 2j + 1): r = sqrt(-2 ln u_2j), out[2j] = mean + stddev *
//            r cos(2 pi u_2j+1), out[2j+1] = mean + stddev * r sin(2 pi u_2j+1)
//   dropout: out[i] = x[i] * (u_i > p ? 1 / (1 - p) : 0), compared and scaled in f32 as the CPU
//
// The CPU computes uniform's affine map in double and rounds once; here low and high - low come
// as (hi, lo) float pairs and the product is formed exactly (u and the hi part split into 12-bit
// halves), so the result is that double rounded once, but for values within about 2^-44 of a
// rounding boundary. GLSL's log, sin and cos may be far less accurate than that (Vulkan allows
// sin and cos an absolute error of 2^-11), so normal uses its own: log through the exponent and a
// series in (m - 1) / (m + 1), sin and cos of 2 pi u through an exact quarter-turn reduction of u
// and Taylor polynomials on [-pi/4, pi/4]; they agree with the CPU's double to a few f32 ulp.
//
// Measured (version 1) with `vulkan-bench` (`scripts/device-run vulkan`; device time from timestamp
// queries) on the H100 of docs/runs/2026-11-26-h100 (NVIDIA's Vulkan driver, Vulkan 1.4.312),
// [4096, 4096] f32: uniform 0.80 TB/s [fig vulkan.uniform.tbps] written (the Philox rounds and the
// exact affine map cost more than the store: bound by arithmetic), dropout
// 1.39 TB/s [fig vulkan.dropout.tbps] read and written (a copy: 2.0 TB/s [fig vulkan.copy.tbps]).
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) uniform Params {
  int numel;
  uint seed_lo, seed_hi, offset_lo, offset_hi;
  float a_hi, a_lo, b_hi, b_lo;  // uniform: low, high - low; normal: mean, stddev (hi only)
  float threshold, scale;        // dropout: p and 1 / (1 - p), as f32
  int x_offset, out_offset;
} P;

#if defined(DROPOUT)
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Out { float out_f[]; };
#else
layout(std430, binding = 1) writeonly buffer Out { float out_f[]; };
#endif

uvec4 philox(uvec4 counter, uint key0, uint key1) {
  for (int round = 0; round < 10; ++round) {
    uint hi0, lo0, hi1, lo1;
    umulExtended(0xD2511F53u, counter.x, hi0, lo0);
    umulExtended(0xCD9E8D57u, counter.z, hi1, lo1);
    counter = uvec4(hi1 ^ counter.y ^ key0, lo1, hi0 ^ counter.w ^ key1, lo0);
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return counter;
}

#include "math.glsl"

float to_unit(uint w) { return (float(w >> 8) + 0.5) * (1.0 / 16777216.0); }

vec2 two_sum(float a, float b) {
  precise float s = a + b;
  precise float v = s - a;
  precise float e = (a - (s - v)) + (b - v);
  return vec2(s, e);
}
vec2 split12(float v) {  // Veltkamp: two halves of 12 significant bits
  precise float c = 4097.0 * v;
  precise float h = c - (c - v);
  precise float l = v - h;
  return vec2(h, l);
}

// (cos, sin) of 2 pi u for u in (0, 1), u a multiple of 2^-24: u - q / 4 is exact, so the angle
// left is 2 pi y with |y| <= 1/8, where the Taylor terms to y^13 suffice for f32.
vec2 cos_sin_turn(float u) {
  const float q = round(4.0 * u);
  const float y = u - 0.25 * q;
  const float a = 6.28318530717958648 * y, a2 = a * a;
  const float s = a * (1.0 - a2 / 6.0 * (1.0 - a2 / 20.0 * (1.0 - a2 / 42.0 * (1.0 - a2 / 72.0 * (1.0 - a2 / 110.0)))));
  const float c = 1.0 - a2 / 2.0 * (1.0 - a2 / 12.0 * (1.0 - a2 / 30.0 * (1.0 - a2 / 56.0 * (1.0 - a2 / 90.0))));
  const int quarter = int(q) & 3;  // rotate by quarter turns
  if (quarter == 0) return vec2(c, s);
  if (quarter == 1) return vec2(-s, c);
  if (quarter == 2) return vec2(-c, -s);
  return vec2(s, -c);
}

void main() {
  const int blocks = (P.numel + 3) / 4;
  const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x);
  for (int b = int(gl_GlobalInvocationID.x); b < blocks; b += stride) {
    uint carry;
    const uint c_lo = uaddCarry(P.offset_lo, uint(b), carry);
    const uvec4 words = philox(uvec4(c_lo, P.offset_hi + carry, 0u, 0u), P.seed_lo, P.seed_hi);
    const float u[4] = {to_unit(words.x), to_unit(words.y), to_unit(words.z), to_unit(words.w)};
#if defined(UNIFORM)
    const vec2 d = split12(P.b_hi);
    for (int r = 0; r < 4; ++r) {
      const int i = 4 * b + r;
      if (i >= P.numel) break;
      // low + (high - low) * u: u * d_hi as two exact products of 12-bit halves, the rest as corrections
      const vec2 uu = split12(u[r]);
      precise float lo = u[r] * P.b_lo + P.a_lo;
      vec2 s = two_sum(uu.x * d.x, uu.x * d.y);
      lo += s.y;
      s = two_sum(s.x, uu.y * d.x);
      lo += s.y;
      s = two_sum(s.x, uu.y * d.y);
      lo += s.y;
      s = two_sum(s.x, P.a_hi);
      lo += s.y;
      precise float value = s.x + lo;
      out_f[P.out_offset + i] = value;
    }
#elif defined(NORMAL)
    for (int pair = 0; pair < 2; ++pair) {
      const int i = 4 * b + 2 * pair;
      if (i >= P.numel) break;
      const float radius = sqrt(-2.0 * log_of(u[2 * pair]));
      const vec2 cs = cos_sin_turn(u[2 * pair + 1]);
      out_f[P.out_offset + i] = P.a_hi + P.b_hi * radius * cs.x;
      if (i + 1 < P.numel) out_f[P.out_offset + i + 1] = P.a_hi + P.b_hi * radius * cs.y;
    }
#else  // DROPOUT
    for (int r = 0; r < 4; ++r) {
      const int i = 4 * b + r;
      if (i >= P.numel) break;
      out_f[P.out_offset + i] = x[P.x_offset + i] * (u[r] > P.threshold ? P.scale : 0.0);
    }
#endif
  }
}
