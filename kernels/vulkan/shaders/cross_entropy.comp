#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// Cross-entropy with label smoothing s over logits [N, C] and i32 targets [N] on the Vulkan
// backend (core/backend.h states it); variants (-D) FORWARD and BACKWARD:
//   losses[r] = (1 - s) (lse_r - x[r, t_r]) + s (lse_r - mean_c x[r, c])
//   grad_logits[r, c] = grad_losses[r] (p[r, c] - (1 - s) [c == t_r] - s / C),  p = softmax(x[r])
// A workgroup per row: each invocation folds its elements into an online (max, sum) state and a
// plain sum, the 256 of each meet in shared memory, then invocation 0 writes the loss (forward)
// or every invocation writes its elements' gradients (backward). A target outside [0, C) gives a
// NaN loss (a NaN gradient row) and is recorded in the fault slot, which the host throws.
// Special values, as on the CPU (and PyTorch): a NaN or +inf in the row, or a row of -inf, makes
// its loss and gradient NaN; a -inf logit off the target has probability 0 and leaves the loss
// finite without smoothing (+inf with it); the target at -inf gives +inf.
//
// Measured (version 1) with `vulkan-bench` (`scripts/device-run vulkan`; device time from timestamp
// queries) on the H100 of docs/runs/2026-11-26-h100 (NVIDIA's Vulkan driver, Vulkan 1.4.312),
// [4096, 4096] f32 logits, a loss per row: 1.0 TB/s [fig vulkan.cross_entropy.rows.tbps] of logits
// read, half a copy's 2.0 TB/s [fig vulkan.copy.tbps] (one workgroup per row, a shared-memory tree
// per row and a single pass).
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) uniform Params {
  int rows, classes;
  int x_offset, target_offset, g_offset, out_offset;  // g: grad_losses (backward)
  float smoothing;
  int fault_op;
} P;
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer Targets { int targets[]; };
#if defined(FORWARD)
layout(std430, binding = 3) writeonly buffer Losses { float losses[]; };
layout(std430, binding = 4) buffer Fault { int fault[]; };
#else
layout(std430, binding = 3) readonly buffer G { float g[]; };
layout(std430, binding = 4) writeonly buffer Grad { float grad[]; };
layout(std430, binding = 5) buffer Fault { int fault[]; };
#endif

#include "math.glsl"
#include "online.glsl"

shared vec2 partial[gl_WorkGroupSize.x];
shared float totals[gl_WorkGroupSize.x];

void report_fault(int value, int position, int bound) {
  if (atomicCompSwap(fault[0], 0, P.fault_op) == 0) {
    fault[1] = value;
    fault[2] = position;
    fault[3] = bound;
  }
}

void main() {
  const int t = int(gl_LocalInvocationID.x), threads = int(gl_WorkGroupSize.x);
  const float nan = 0.0 / 0.0;
  for (int row = int(gl_WorkGroupID.x); row < P.rows; row += int(gl_NumWorkGroups.x)) {
    const int base = P.x_offset + row * P.classes;
    vec2 a = none();
    float total = 0.0;
    for (int c = t; c < P.classes; c += threads) {
      const float v = x[base + c];
      a = add(a, v);
      total += v;
    }
    partial[t] = a;
    totals[t] = total;
    barrier();
    for (int step = threads / 2; step > 0; step /= 2) {
      if (t < step) {
        partial[t] = combine(partial[t], partial[t + step]);
        totals[t] += totals[t + step];
      }
      barrier();
    }
    a = finish(partial[0]);
    const int target = targets[P.target_offset + row];
    const bool valid = target >= 0 && target < P.classes;
    if (!valid && t == 0) report_fault(target, row, P.classes);
#if defined(FORWARD)
    if (t == 0) {
      float loss = nan;
      if (valid) {
        // lse - v as (m - v) + log s: lse and v are both near m when the logits are large (1e3),
        // and their difference in float would keep only its last bits; m - v is exact there
        const float log_s = log_of(a.y);
        const float nll = (a.x - x[base + target]) + log_s;                   // -log p[row, target]
        const float mean_nll = (a.x - totals[0] / float(P.classes)) + log_s;  // mean_c(-log p[row, c])
        // Without smoothing mean_nll is left out, not multiplied by 0: a -inf logit off the
        // target makes it +inf, and 0 * inf would turn a finite loss into NaN (PyTorch adds it
        // only for s > 0).
        loss = P.smoothing > 0.0 ? (1.0 - P.smoothing) * nll + P.smoothing * mean_nll : nll;
      }
      losses[P.out_offset + row] = loss;
    }
#else
    const float gr = g[P.g_offset + row], off = P.smoothing / float(P.classes);
    for (int c = t; c < P.classes; c += threads) {
      const float p = shifted_exp(x[base + c], a.x) / a.y;
      const float hit = c == target ? 1.0 - P.smoothing : 0.0;
      grad[P.out_offset + row * P.classes + c] = valid ? gr * (p - hit - off) : nan;
    }
#endif
    barrier();  // partial[0] and totals[0] are read before the next row writes them
  }
}
