#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// softmax and log_softmax over the middle axis of contiguous x [outer, n, inner] on the Vulkan
// backend (kernels/cuda/softmax.cu states the math):
//   softmax:     out[o, k, i] = exp(x[o, k, i] - m) / s
//   log_softmax: out[o, k, i] = x[o, k, i] - m - log(s),   m = max_k x, s = sum_k exp(x - m)
// Each slice keeps an online state (m, s): an element above m rescales s by exp(m_old - m_new),
// so one pass gives both. Variants (-D):
//   ROWS (inner == 1): a workgroup per row; each invocation folds the elements t, t + 256, ...,
//     the 256 states meet in shared memory, then a second pass writes the row.
//   COLUMNS (inner > 1): a workgroup per 32 adjacent columns (o, i .. i + 31), 8 lanes of 32
//     invocations: lane r folds k = r, r + 8, ... (32 adjacent elements of a row per lane: the
//     loads coalesce), the 8 states of a column meet in shared memory in order of lane, then the
//     lanes write the column the same way.
// Special values as on the CPU: a NaN anywhere in a slice, or a max of +-inf, makes the whole
// slice NaN; a -inf among finite values gives 0 (log: -inf).
//
// Bench: `vulkan-bench` (apps/bench, run by `scripts/device-run vulkan`), device time from
// timestamp queries. Measured on the H100 of docs/runs/2026-11-26-h100 (NVIDIA's Vulkan driver,
// Vulkan 1.4.312), [4096, 4096] f32 read and written: rows (version 1)
// 1.35 TB/s [fig vulkan.softmax.rows.tbps] (68% [fig vulkan.softmax.rows.pct-copy] of a copy's
// 2.0 TB/s [fig vulkan.copy.tbps]; two passes over the row, the second from cache); columns
// (version 2, 8 lanes per column): 0.421 ms [fig vulkan.softmax.columns.ms],
// 0.32 TB/s [fig vulkan.softmax.columns.tbps], still 16% [fig vulkan.softmax.columns.pct-copy] of a
// copy (kernels/cuda/softmax.cu, a tile per block, reaches 77% [fig vulkan.ref.cuda-softmax.columns.pct-copy]
// of its copy over axis 1 of [64, 1024, 256] in the same run). Columns' version 1, an invocation per
// column walking k twice: kernels/vulkan/NOTES.md.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int LOG = 0;  // log_softmax

layout(std430, binding = 0) uniform Params {
  int outer, n, inner;
  int x_offset, out_offset;
} P;
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Out { float out_f[]; };

#include "math.glsl"
#include "online.glsl"

#if defined(ROWS)
shared vec2 partial[gl_WorkGroupSize.x];

void main() {
  const int t = int(gl_LocalInvocationID.x), threads = int(gl_WorkGroupSize.x);
  for (int row = int(gl_WorkGroupID.x); row < P.outer; row += int(gl_NumWorkGroups.x)) {
    const int base = row * P.n;
    vec2 a = none();
    for (int k = t; k < P.n; k += threads) a = add(a, x[P.x_offset + base + k]);
    partial[t] = a;
    barrier();
    for (int step = threads / 2; step > 0; step /= 2) {
      if (t < step) partial[t] = combine(partial[t], partial[t + step]);
      barrier();
    }
    a = finish(partial[0]);
    const float log_s = log_of(a.y);
    for (int k = t; k < P.n; k += threads) {
      const float v = x[P.x_offset + base + k];
      out_f[P.out_offset + base + k] = LOG != 0 ? v - a.x - log_s : shifted_exp(v, a.x) / a.y;
    }
    barrier();  // partial[0] is read before the next row writes it
  }
}
#else  // COLUMNS
shared vec2 lanes[8][32];

void main() {
  const int t = int(gl_LocalInvocationID.x), c = t % 32, r = t / 32;  // 8 lanes x 32 columns
  const int col_groups = (P.inner + 31) / 32, groups = P.outer * col_groups;
  for (int grp = int(gl_WorkGroupID.x); grp < groups; grp += int(gl_NumWorkGroups.x)) {
    const int o = grp / col_groups, i = (grp % col_groups) * 32 + c, base = o * P.n * P.inner + i;
    vec2 a = none();
    if (i < P.inner)
      for (int k = r; k < P.n; k += 8) a = add(a, x[P.x_offset + base + k * P.inner]);
    lanes[r][c] = a;
    barrier();
    if (r == 0) {  // the lanes' states in order of lane
      for (int q = 1; q < 8; ++q) a = combine(a, lanes[q][c]);
      lanes[0][c] = finish(a);
    }
    barrier();
    a = lanes[0][c];
    const float log_s = log_of(a.y);
    if (i < P.inner)
      for (int k = r; k < P.n; k += 8) {
        const float v = x[P.x_offset + base + k * P.inner];
        out_f[P.out_offset + base + k * P.inner] = LOG != 0 ? v - a.x - log_s : shifted_exp(v, a.x) / a.y;
      }
    barrier();  // lanes is read before the next group writes it
  }
}
#endif
