#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
#if defined(ROWS_SUBGROUP)
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif
// Reductions over the middle axis of contiguous x [outer, n, inner] -> out [outer, inner] on the
// Vulkan backend (kernels/cpu/reduce.cpp states the rules; the op is a specialisation constant):
//   sum, mean     f32 accumulates in float (the CPU in double: the tests bound the difference);
//                 i32 sums wrap, as the CPU's 64-bit sum wrapped to 32 bits. mean of n = 0 is NaN.
//   max, min      a NaN anywhere makes the result NaN.
//   argmax/argmin the i32 index of the first extreme; the first NaN counts as the extreme.
// Variants (-D):
//   ROWS (inner == 1): a workgroup per row; each invocation folds the elements k = t, t + 256, ...
//     then the 256 partials meet in shared memory, halving each step (8 steps, a barrier each).
//     The index travels with the value and ties go to the lower index, so the arg ops give the
//     first extreme whatever order the partials meet in.
//   ROWS_SUBGROUP, the same where the device has subgroup shuffles (the host asks): the partials
//     of a subgroup (32 invocations on NVIDIA, 8 on lavapipe) meet through register shuffles
//     (subgroupShuffleXor, log2 of its size steps, no shared memory, no barrier), one value per
//     subgroup goes through shared memory, and the first subgroup combines those the same way:
//     two barriers in all. Measured with vulkan-bench (device time) on the H100 of
//     docs/runs/2026-11-26-h100 (NVIDIA's Vulkan driver): the sums of a [4096, 4096] matrix's rows
//     (67 MB read) in 0.0283 ms [fig vulkan.sum.rows.tree.ms] with the tree,
//     0.0274 ms [fig vulkan.sum.rows.shuffle.ms] with shuffles: 2.37 [fig vulkan.sum.rows.tree.tbps]
//     and 2.45 TB/s [fig vulkan.sum.rows.shuffle.tbps], where a copy moves 2.0 TB/s [fig vulkan.copy.tbps]
//     (reading and writing). Long rows are bound by memory either way; the shuffles save the
//     tree's barriers, which weigh on short rows.
//   COLUMNS (inner > 1): a workgroup per 32 adjacent outputs (o, i .. i + 31), 8 lanes of 32
//     invocations each: lane r folds k = r, r + 8, ..., the 32 invocations of a lane reading 32
//     adjacent elements of a row of x (coalesced), then the 8 partials of each output meet in
//     shared memory in order of lane. The sums of a [4096, 4096] matrix's columns:
//     0.066 ms [fig vulkan.sum.columns.ms] (1.02 TB/s [fig vulkan.sum.columns.tbps]; vulkan-bench on
//     the same H100, docs/runs/2026-11-26-h100); version 1, an invocation per output:
//     kernels/vulkan/NOTES.md.
// Bench: `vulkan-bench` (apps/bench, run by `scripts/device-run vulkan`), device time from
// timestamp queries.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int OP = 0;      // core/backend.h's ReduceOp: sum, mean, max, min, argmax, argmin
layout(constant_id = 2) const int IS_I32 = 0;  // x (and out, but for the arg ops) is i32, else f32

const int SUM = 0, MEAN = 1, MAX = 2, MIN = 3, ARGMAX = 4, ARGMIN = 5;
const bool kArg = OP == ARGMAX || OP == ARGMIN;
const bool kMax = OP == MAX || OP == ARGMAX;

layout(std430, binding = 0) uniform Params {
  int outer, n, inner;
  int x_offset, out_offset;
} P;
layout(std430, binding = 1) readonly buffer XF { float x_f[]; };
layout(std430, binding = 1) readonly buffer XI { int x_i[]; };
layout(std430, binding = 2) writeonly buffer OutF { float out_f[]; };
layout(std430, binding = 2) writeonly buffer OutI { int out_i[]; };

// A partial result: the value (f32, or i32 in `vi`) and, for the arg ops, its index.
struct Acc {
  float v;
  int vi;
  int index;
};

Acc start() {
  if (OP == SUM || OP == MEAN) return Acc(0.0, 0, 0);
  // the identity of max / min; index n + 1 loses every tie (n itself marks "no element")
  return Acc(kMax ? -1.0 / 0.0 : 1.0 / 0.0, kMax ? -2147483647 - 1 : 2147483647, 2147483647);
}

bool is_nan(float v) { return isnan(v); }

// a combined with b: for max and min, NaN wins and, among equals (NaNs included), the lower index
Acc combine(Acc a, Acc b) {
  if (OP == SUM || OP == MEAN) return Acc(a.v + b.v, a.vi + b.vi, 0);
  bool take_b;
  if (IS_I32 != 0) {
    take_b = kMax ? b.vi > a.vi : b.vi < a.vi;
    if (b.vi == a.vi) take_b = b.index < a.index;
  } else if (is_nan(a.v) || is_nan(b.v)) {
    take_b = is_nan(b.v) && (!is_nan(a.v) || b.index < a.index);
  } else {
    take_b = kMax ? b.v > a.v : b.v < a.v;
    if (b.v == a.v) take_b = b.index < a.index;
  }
  return take_b ? b : a;
}

Acc element(int at, int k) {
  if (IS_I32 != 0) return Acc(0.0, x_i[at], k);
  return Acc(x_f[at], 0, k);
}

void store(int at, Acc a) {
  if (kArg) out_i[at] = a.index;
  else if (IS_I32 != 0) out_i[at] = a.vi;  // mean of i32 is refused on the host
  else out_f[at] = OP == MEAN ? a.v / float(P.n) : a.v;
}

#if defined(ROWS)
shared Acc partial[gl_WorkGroupSize.x];  // sized by the workgroup (constant 0)

void main() {
  const int t = int(gl_LocalInvocationID.x), threads = int(gl_WorkGroupSize.x);
  for (int row = int(gl_WorkGroupID.x); row < P.outer; row += int(gl_NumWorkGroups.x)) {
    Acc a = start();
    const int base = P.x_offset + row * P.n;
    for (int k = t; k < P.n; k += threads) a = combine(a, element(base + k, k));
    partial[t] = a;
    barrier();
    for (int step = threads / 2; step > 0; step /= 2) {
      if (t < step) partial[t] = combine(partial[t], partial[t + step]);
      barrier();
    }
    if (t == 0) store(P.out_offset + row, partial[0]);
    barrier();  // partial[0] is read before the next row writes it
  }
}
#elif defined(ROWS_SUBGROUP)
shared Acc partial[gl_WorkGroupSize.x];  // one per subgroup; at most one per invocation

// a combined across the subgroup: after log2(size) butterfly steps every invocation holds it
// (combine is commutative, ties included, so both sides of each exchange agree)
Acc subgroup_combine(Acc a) {
  for (uint offset = gl_SubgroupSize / 2; offset > 0; offset /= 2)
    a = combine(a, Acc(subgroupShuffleXor(a.v, offset), subgroupShuffleXor(a.vi, offset),
                       subgroupShuffleXor(a.index, offset)));
  return a;
}

void main() {
  const int t = int(gl_LocalInvocationID.x), threads = int(gl_WorkGroupSize.x);
  for (int row = int(gl_WorkGroupID.x); row < P.outer; row += int(gl_NumWorkGroups.x)) {
    Acc a = start();
    const int base = P.x_offset + row * P.n;
    for (int k = t; k < P.n; k += threads) a = combine(a, element(base + k, k));
    a = subgroup_combine(a);
    if (gl_SubgroupInvocationID == 0) partial[gl_SubgroupID] = a;
    barrier();
    if (gl_SubgroupID == 0) {
      Acc b = start();
      for (uint i = gl_SubgroupInvocationID; i < gl_NumSubgroups; i += gl_SubgroupSize) b = combine(b, partial[i]);
      b = subgroup_combine(b);
      if (gl_SubgroupInvocationID == 0) store(P.out_offset + row, b);
    }
    barrier();  // partial is read before the next row writes it
  }
}
#else  // COLUMNS
shared Acc lanes[8][32];

void main() {
  const int t = int(gl_LocalInvocationID.x), c = t % 32, r = t / 32;  // 8 lanes x 32 columns
  const int col_groups = (P.inner + 31) / 32, groups = P.outer * col_groups;
  for (int grp = int(gl_WorkGroupID.x); grp < groups; grp += int(gl_NumWorkGroups.x)) {
    const int o = grp / col_groups, i = (grp % col_groups) * 32 + c;
    Acc a = start();
    if (i < P.inner) {
      const int base = P.x_offset + o * P.n * P.inner + i;
      for (int k = r; k < P.n; k += 8) a = combine(a, element(base + k * P.inner, k));
    }
    lanes[r][c] = a;
    barrier();
    if (r == 0 && i < P.inner) {  // the lanes' partials in order of lane: the same sum every run
      Acc b = lanes[0][c];
      for (int q = 1; q < 8; ++q) b = combine(b, lanes[q][c]);
      store(P.out_offset + o * P.inner + i, b);
    }
    barrier();  // lanes is read before the next group writes it
  }
}
#endif
