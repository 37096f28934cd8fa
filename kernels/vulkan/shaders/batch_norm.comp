#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// Batch norm over x [N, C, S] per channel c (M = N S values each) on the Vulkan backend
// (core/backend.h states the three kernels), f32 accumulated in float; variants (-D):
//   STATS     the mean and biased variance of each channel in two passes over its values, as
//             the CPU (no cancellation of a one-pass E[x^2] - E[x]^2), each channel's values cut
//             into `chunks` runs, a workgroup per (channel, run): PASS 0 sums each run, PASS 1
//             sums each run's squared deviations from the mean (the runs' sums added in order),
//             PASS 2 adds the runs' results in order and writes mean and var (an invocation per
//             channel). The 256 partials of a run meet in shared memory.
//   APPLY     an invocation per element: y = (x - mean[c]) invstd[c] weight[c] + bias[c].
//   SUMS      grad_bias[c] = sum g, grad_weight[c] = sum g xhat, the same way: PASS 0 per run,
//             PASS 2 the runs in order.
//   GRAD_X    an invocation per element: grad_x = weight[c] invstd[c] (g - (grad_bias[c] + xhat
//             grad_weight[c]) / M), reading SUMS' results.
//
// Bench: `vulkan-bench` (apps/bench, run by `scripts/device-run vulkan`), device time from
// timestamp queries. Version 2 (this): runs of at least 2048 values, about 512 workgroups, the
// plane of an element found by multiply (fastdiv.glsl). Training on [16, 64, 128, 128] f32 (x read
// twice, y written): 0.152 ms [fig vulkan.batch_norm.train.ms],
// 0.88 TB/s [fig vulkan.batch_norm.train.tbps] counting x once and y, as a copy's rate counts its
// read and write (a copy: 2.0 TB/s [fig vulkan.copy.tbps]); every value is read twice, as the two
// passes need (vulkan-bench on the H100 of docs/runs/2026-11-26-h100: NVIDIA's Vulkan driver,
// Vulkan 1.4.312). Version 1: kernels/vulkan/NOTES.md.
layout(local_size_x_id = 0) in;

#include "fastdiv.glsl"

layout(constant_id = 1) const int PASS = 0;  // STATS and SUMS: see above

layout(std430, binding = 0) uniform Params {
  int n, c, s;
  int x_offset, g_offset, y_offset, mean_offset, invstd_offset, weight_offset, bias_offset, gw_offset, gb_offset;
  int has_weight, has_bias;
  int chunks, chunk;  // STATS, SUMS: runs per channel, values per run
  Divisor s_;
} P;
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) buffer Mean { float mean[]; };     // STATS writes it; the others read
layout(std430, binding = 3) buffer Second { float second[]; }; // STATS: var; the others: invstd
layout(std430, binding = 4) readonly buffer Weight { float weight[]; };
layout(std430, binding = 5) readonly buffer Bias { float bias[]; };
layout(std430, binding = 6) readonly buffer G { float g[]; };
layout(std430, binding = 7) buffer Out { float out_f[]; };     // APPLY: y; GRAD_X: grad_x
layout(std430, binding = 8) buffer GW { float gw[]; };
layout(std430, binding = 9) buffer GB { float gb[]; };
layout(std430, binding = 10) buffer Parts { float parts[]; };  // STATS, SUMS: [2][C][chunks] run results

shared float part_a[gl_WorkGroupSize.x];
shared float part_b[gl_WorkGroupSize.x];

// element e of channel ch: plane i = e / S, k = e % S
int at(int ch, int e) {
  const int i = div_by(e, P.s_);
  return (i * P.c + ch) * P.s + e - i * P.s;
}

// the runs' results of channel ch added in order: part 0 (a) or 1 (b)
float runs_total(int part, int ch) {
  float total = 0.0;
  for (int r = 0; r < P.chunks; ++r) total += parts[(part * P.c + ch) * P.chunks + r];
  return total;
}

// part_a (and part_b) summed across the workgroup into element 0
void reduce_parts(int t) {
  barrier();
  for (int step = int(gl_WorkGroupSize.x) / 2; step > 0; step /= 2) {
    if (t < step) {
      part_a[t] += part_a[t + step];
      part_b[t] += part_b[t + step];
    }
    barrier();
  }
}

void main() {
  const int m = P.n * P.s, threads = int(gl_WorkGroupSize.x);
#if defined(STATS) || defined(SUMS)
  if (PASS == 2) {  // an invocation per channel: the runs in order
    for (int ch = int(gl_GlobalInvocationID.x); ch < P.c; ch += int(gl_NumWorkGroups.x * gl_WorkGroupSize.x)) {
#if defined(STATS)
      mean[P.mean_offset + ch] = runs_total(0, ch) / float(m);
      second[P.invstd_offset + ch] = runs_total(1, ch) / float(m);
#else
      gb[P.gb_offset + ch] = runs_total(0, ch);
      gw[P.gw_offset + ch] = runs_total(1, ch);
#endif
    }
    return;
  }
  const int t = int(gl_LocalInvocationID.x);
  for (int wg = int(gl_WorkGroupID.x); wg < P.c * P.chunks; wg += int(gl_NumWorkGroups.x)) {
    const int ch = wg / P.chunks, run = wg % P.chunks;
    const int begin = run * P.chunk, end = min(m, begin + P.chunk);
    float a = 0.0, b = 0.0;
#if defined(STATS)
    if (PASS == 0) {
      for (int e = begin + t; e < end; e += threads) a += x[P.x_offset + at(ch, e)];
    } else {
      const float mu = runs_total(0, ch) / float(m);
      for (int e = begin + t; e < end; e += threads) {
        const float d = x[P.x_offset + at(ch, e)] - mu;
        a += d * d;
      }
    }
#else
    const float mu = mean[P.mean_offset + ch], r = second[P.invstd_offset + ch];
    for (int e = begin + t; e < end; e += threads) {
      const int i = at(ch, e);
      const float gv = g[P.g_offset + i];
      a += gv;
      b += gv * ((x[P.x_offset + i] - mu) * r);
    }
#endif
    part_a[t] = a;
    part_b[t] = b;
    reduce_parts(t);
    if (t == 0) {
#if defined(STATS)
      parts[(PASS * P.c + ch) * P.chunks + run] = part_a[0];  // PASS 0: sums in part 0; PASS 1: squares in part 1
#else
      parts[ch * P.chunks + run] = part_a[0];
      parts[(P.c + ch) * P.chunks + run] = part_b[0];
#endif
    }
    barrier();  // element 0 is read before the next run writes it
  }
#else  // APPLY, GRAD_X: an invocation per element of x
  const int total = P.n * P.c * P.s, stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x);
  for (int e = int(gl_GlobalInvocationID.x); e < total; e += stride) {
    const int ch = (e / P.s) % P.c;
    const float xhat = (x[P.x_offset + e] - mean[P.mean_offset + ch]) * second[P.invstd_offset + ch];
    const float w = P.has_weight != 0 ? weight[P.weight_offset + ch] : 1.0;
#if defined(APPLY)
    out_f[P.y_offset + e] = xhat * w + (P.has_bias != 0 ? bias[P.bias_offset + ch] : 0.0);
#else
    const float inv_m = 1.0 / float(P.n * P.s);
    const float mean_g = gb[P.gb_offset + ch] * inv_m, mean_gx = gw[P.gw_offset + ch] * inv_m;
    out_f[P.y_offset + e] = w * second[P.invstd_offset + ch] * (g[P.g_offset + e] - mean_g - xhat * mean_gx);
#endif
  }
#endif
}
