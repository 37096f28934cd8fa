#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// Batch norm over x [N, C, S] per channel c (M = N S values each) on the Vulkan backend
// (core/backend.h states the three kernels), f32 accumulated in float; variants (-D):
//   STATS     a workgroup per channel: the 256 invocations sum its values, meet in shared memory,
//             then sum the squared deviations from that mean the same way (two passes, as the
//             CPU: no cancellation of a one-pass E[x^2] - E[x]^2). Writes mean and biased var.
//   APPLY     an invocation per element: y = (x - mean[c]) invstd[c] weight[c] + bias[c].
//   SUMS      a workgroup per channel: grad_bias[c] = sum g, grad_weight[c] = sum g xhat.
//   GRAD_X    an invocation per element: grad_x = weight[c] invstd[c] (g - (grad_bias[c] + xhat
//             grad_weight[c]) / M), reading SUMS' results.
//
// Measured (version 1) on an H100 80GB HBM3 through NVIDIA's Vulkan driver (Vulkan 1.4.312,
// 2026-11-22; device time from timestamp queries, `vulkan-bench` in `scripts/device-run vulkan`),
// training on [16, 64, 128, 128] f32: 0.42 ms, 0.32 TB/s of x read twice and y written: STATS
// runs a workgroup per channel (64 workgroups), far too few for the GPU at this size; splitting
// each channel over workgroups is the next version.
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) uniform Params {
  int n, c, s;
  int x_offset, g_offset, y_offset, mean_offset, invstd_offset, weight_offset, bias_offset, gw_offset, gb_offset;
  int has_weight, has_bias;
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

shared float part_a[gl_WorkGroupSize.x];
shared float part_b[gl_WorkGroupSize.x];

// element e of channel ch: plane i = e / S, k = e % S
int at(int ch, int e) { return ((e / P.s) * P.c + ch) * P.s + e % P.s; }

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
  const int t = int(gl_LocalInvocationID.x);
  for (int ch = int(gl_WorkGroupID.x); ch < P.c; ch += int(gl_NumWorkGroups.x)) {
#if defined(STATS)
    float sum = 0.0;
    for (int e = t; e < m; e += threads) sum += x[P.x_offset + at(ch, e)];
    part_a[t] = sum;
    part_b[t] = 0.0;
    reduce_parts(t);
    const float mu = part_a[0] / float(m);
    barrier();  // part_a[0] is read before it is written again
    float squares = 0.0;
    for (int e = t; e < m; e += threads) {
      const float d = x[P.x_offset + at(ch, e)] - mu;
      squares += d * d;
    }
    part_a[t] = squares;
    reduce_parts(t);
    if (t == 0) {
      mean[P.mean_offset + ch] = mu;
      second[P.invstd_offset + ch] = part_a[0] / float(m);
    }
#else
    const float mu = mean[P.mean_offset + ch], r = second[P.invstd_offset + ch];
    float sum_g = 0.0, sum_gx = 0.0;
    for (int e = t; e < m; e += threads) {
      const int i = at(ch, e);
      const float gv = g[P.g_offset + i];
      sum_g += gv;
      sum_gx += gv * ((x[P.x_offset + i] - mu) * r);
    }
    part_a[t] = sum_g;
    part_b[t] = sum_gx;
    reduce_parts(t);
    if (t == 0) {
      gb[P.gb_offset + ch] = part_a[0];
      gw[P.gw_offset + ch] = part_b[0];
    }
#endif
    barrier();  // element 0 is read before the next channel writes it
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
