#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// Indexing along the middle axis of contiguous [outer, n, inner] tensors on the Vulkan backend,
// one source, three variants (-D):
//   GATHER     out[o, j, i] = x[o, indices[j], i]                 out [outer, m, inner]
//   INDEX_ADD  out[o, k, i] += sum of src[o, j, i] over j with indices[j] == k, j in order
//   ONE_HOT    out[r, c] = indices[r] == c ? 1 : 0                 out [N, C]
// gather is how a batch is drawn from a data set held on the device; one invocation per output
// element, so neighbouring invocations read and write neighbouring elements of a row.
// index_add (version 1): one invocation per output element, which walks every index and adds the
// sources that land on it in the order of j. No atomics (Vulkan has no float atomics without an
// extension) and the CPU's order of additions, so the sums are the CPU's bits; the walk costs
// m reads of the indices per output element, which suits the small m of a batch (an embedding's
// gradient with a large vocabulary will want a sort first).
// Elements are 4-byte words (f32 and i32 alike: gather and one_hot move bits) or, for u8 (ELEM_U8),
// bytes four to a word, written with atomicAnd/atomicOr on the element's byte.
// An index outside [0, n) cannot throw from a shader: the invocation skips its element and records
// the first such index in the fault slot, which the host reads at its next wait and throws.
//
// Measured (version 1) with `vulkan-bench` (`scripts/device-run vulkan`; device time from timestamp
// queries) on the H100 of docs/runs/2026-11-26-h100 (NVIDIA's Vulkan driver, Vulkan 1.4.312),
// index_select of 4096 random rows of [4096, 4096] f32: 1.12 TB/s [fig vulkan.index_select.tbps]
// read and written (a copy: 2.0 TB/s [fig vulkan.copy.tbps]).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int ELEM_U8 = 0;  // gather, one_hot: u8 elements (else 4-byte words)
layout(constant_id = 2) const int ADD_I32 = 0;  // index_add: i32 (else f32)

layout(std430, binding = 0) uniform Params {
  int total;  // output elements
  int outer, n, m, inner;
  int x_offset, idx_offset, out_offset;
  int fault_op;  // the op's code in the fault slot (see runtime.cpp)
} P;

layout(std430, binding = 1) readonly buffer Indices { int idx[]; };
#if defined(ONE_HOT)
layout(std430, binding = 2) buffer Out { uint out_u[]; };
layout(std430, binding = 3) buffer Fault { int fault[]; };
#else
layout(std430, binding = 2) readonly buffer X { uint x_u[]; };
layout(std430, binding = 2) readonly buffer XF { float x_f[]; };
layout(std430, binding = 2) readonly buffer XI { int x_i[]; };
layout(std430, binding = 3) buffer Out { uint out_u[]; };
layout(std430, binding = 3) buffer OutF { float out_f[]; };
layout(std430, binding = 3) buffer OutI { int out_i[]; };
layout(std430, binding = 4) buffer Fault { int fault[]; };
#endif

// The first bad index wins the slot: (op, value, position, bound).
void report_fault(int value, int position, int bound) {
  if (atomicCompSwap(fault[0], 0, P.fault_op) == 0) {
    fault[1] = value;
    fault[2] = position;
    fault[3] = bound;
  }
}

void store_u8(int o, uint byte) {
  const uint shift = uint(o & 3) * 8u;
  atomicAnd(out_u[o >> 2], ~(0xffu << shift));
  atomicOr(out_u[o >> 2], (byte & 0xffu) << shift);
}

#if !defined(ONE_HOT)
uint load_u8(int s) { return (x_u[s >> 2] >> (uint(s & 3) * 8u)) & 0xffu; }
#endif

void main() {
  const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x);
  for (int e = int(gl_GlobalInvocationID.x); e < P.total; e += stride) {
#if defined(GATHER)
    const int i = e % P.inner, row = e / P.inner, j = row % P.m, o = row / P.m;
    const int k = idx[P.idx_offset + j];
    if (k < 0 || k >= P.n) {
      if (i == 0) report_fault(k, j, P.n);
      continue;
    }
    const int s = P.x_offset + (o * P.n + k) * P.inner + i;
    if (ELEM_U8 != 0) store_u8(P.out_offset + e, load_u8(s));
    else out_u[P.out_offset + e] = x_u[s];
#elif defined(INDEX_ADD)
    const int i = e % P.inner, row = e / P.inner, k = row % P.n, o = row / P.n;
    float sum_f = 0.0;
    int sum_i = 0;
    bool any = false;
    for (int j = 0; j < P.m; ++j) {
      const int t = idx[P.idx_offset + j];
      if (t < 0 || t >= P.n) {
        if (e == 0) report_fault(t, j, P.n);
        continue;
      }
      if (t != k) continue;
      const int s = P.x_offset + (o * P.m + j) * P.inner + i;
      // out += src one source at a time, as the CPU adds them
      if (ADD_I32 != 0) sum_i = (any ? sum_i : out_i[P.out_offset + e]) + x_i[s];
      else sum_f = (any ? sum_f : out_f[P.out_offset + e]) + x_f[s];
      any = true;
    }
    if (any) {
      if (ADD_I32 != 0) out_i[P.out_offset + e] = sum_i;
      else out_f[P.out_offset + e] = sum_f;
    }
#else  // ONE_HOT: e = r * C + c, n = C, P.outer = N
    const int c = e % P.n, r = e / P.n;
    const int k = idx[P.idx_offset + r];
    if (k < 0 || k >= P.n) {
      if (c == 0) report_fault(k, r, P.n);
      continue;
    }
    // the 1 in out's dtype: its bits come as P.m (f32 1.0, i32 1 or u8 1)
    const uint one = k == c ? uint(P.m) : 0u;
    if (ELEM_U8 != 0) store_u8(P.out_offset + e, one);
    else out_u[P.out_offset + e] = one;
#endif
  }
}
