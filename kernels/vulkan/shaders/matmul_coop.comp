#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require  // gl_ScopeSubgroup (and the Vulkan memory model)
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
// matmul.comp's product, C[b] = epilogue(op(A[b]) op(B[b])), on the GPU's matrix units through
// cooperative matrices (VK_NV_cooperative_matrix; used only with kiln::allow_f16_products on,
// core/precision.h, where the device offers 16 x 16 x 16 f16 products accumulated in f32 and
// subgroups of 32). A cooperative matrix is a 16 x 16 tile held by a whole subgroup, each
// invocation keeping a part the driver chooses; coopMatMulAddNV multiplies two of them on the
// tensor cores, D = A B + C, in one instruction of the subgroup.
//
// Version 1: a workgroup of 256 invocations (8 subgroups) computed a 64 x 64 tile of C, each
// subgroup a 16 x 32 part (two accumulators), staging 32 k of f16 per step in shared memory; the
// accumulators left through a 64 x 64 f32 tile in shared memory. 13.1 TFLOP/s on 4096^3, half
// of gemm.glsl's f32 (24.9): per step each subgroup did 4 matrix products against 16 scalar
// loads, conversions and stores per invocation, and waited on its loads.
// Version 2 (this): 128 x 128 tiles, each subgroup a 64 x 32 part (4 x 2 accumulators: 8 matrix
// products per 16 k against 4 + 2 matrix loads from shared memory), the next step's global loads
// in flight during this step's products (as gemm.glsl), and each accumulator leaving through a
// 16 x 16 staging area of its subgroup (no workgroup barrier, 8 KB instead of 64).
// Per step of 32 along k: op(A)'s 128 x 32 slice and op(B)'s 32 x 128 slice are converted to f16
// in shared memory (zeros past the edges; row-major A and transposed B loaded k-fastest, so the
// loads coalesce). The epilogue is matmul.comp's: bias, ReLU, or the split-k workspace that
// matmul.comp's REDUCE sums.
// Measured on an H100 80GB HBM3 through NVIDIA's Vulkan driver (Vulkan 1.4.312, vulkan-bench,
// device time, 2026-11-22), 4096 x 4096 x 4096: version 1 13.1 TFLOP/s, version 2 27.0 TFLOP/s,
// where gemm.glsl's f32 makes 24.9 and cuBLAS's f32 SGEMM 51 (kernels/README.md). The matrix
// units' f16 rate is many times that, and version 2 is far from it. Tried and dropped: loading 16
// bytes at a time where rows are aligned (20.2 TFLOP/s, slower: the four 2-byte stores of a group
// then fall on colliding shared-memory banks); two shared-memory stages with one barrier per step
// (27.5 TFLOP/s: the barriers were not what held it). Counting instructions, a step should take
// a tenth of the time it does, so it waits on something only a profiler of Vulkan shaders would
// show (Nsight Graphics; not on the GPU machine). On fc1's 64 x 128 x 9216 it is slower than
// the f32 path (0.039 ms against 0.026: one 128 x 128 tile, half empty, split over k).
layout(local_size_x_id = 0) in;  // 256

layout(std430, binding = 0) uniform Params {
  int batch, m, n, k;
  int lda, ldb, batch_stride_a, batch_stride_b;
  int a_offset, b_offset, out_offset, bias_offset;
  int trans_a, trans_b, has_bias, relu;
  int splits, k_chunk;  // splits > 1: C is the workspace, partial tiles over k_chunk each
} P;
layout(std430, binding = 1) readonly buffer A { float a[]; };
layout(std430, binding = 2) readonly buffer B { float b[]; };
layout(std430, binding = 3) writeonly buffer C { float c[]; };
layout(std430, binding = 4) readonly buffer Bias { float bias[]; };

#include "math.glsl"

const int TM = 128, TN = 128, TK = 32, THREADS = 256;
const int SA = TK + 8, SB = TN + 8;  // row strides: 16-byte multiples, banks staggered
const int LOADS = TM * TK / THREADS;  // elements of each slice per invocation per step (B's too)
shared float16_t tile_a[TM * SA];     // op(A)[r0 + i][k0 + kk] at i SA + kk
shared float16_t tile_b[TK * SB];     // op(B)[k0 + kk][c0 + j] at kk SB + j
shared float stage[8 * 256];          // each subgroup's 16 x 16 accumulator on its way out

float load_a(int g, int i, int kk) {
  return a[P.a_offset + g * P.batch_stride_a + (P.trans_a != 0 ? kk * P.lda + i : i * P.lda + kk)];
}
float load_b(int g, int kk, int j) {
  return b[P.b_offset + g * P.batch_stride_b + (P.trans_b != 0 ? j * P.ldb + kk : kk * P.ldb + j)];
}
// element e of a step's slice: (row, k) of A, (k, column) of B, the stored dimension fastest
ivec2 a_at(int e) { return P.trans_a != 0 ? ivec2(e % TM, e / TM) : ivec2(e / TK, e % TK); }
ivec2 b_at(int e) { return P.trans_b != 0 ? ivec2(e % TK, e / TK) : ivec2(e / TN, e % TN); }

void main() {
  const int t = int(gl_LocalInvocationID.x), s = int(gl_SubgroupID), lane = int(gl_SubgroupInvocationID);
  const int wr = s / 4, wc = s % 4;  // this subgroup's rows 64 wr .., columns 32 wc ..
  const int tiles_m = (P.m + TM - 1) / TM, tiles_n = (P.n + TN - 1) / TN;
  const int tiles = P.batch * tiles_m * tiles_n * P.splits;
  for (int tile_s = int(gl_WorkGroupID.x); tile_s < tiles; tile_s += int(gl_NumWorkGroups.x)) {
    const int split = tile_s % P.splits, tile = tile_s / P.splits;
    const int k_begin = P.splits > 1 ? split * P.k_chunk : 0;
    const int k_end = P.splits > 1 ? min(P.k, k_begin + P.k_chunk) : P.k;
    const int g = tile / (tiles_m * tiles_n), rest = tile % (tiles_m * tiles_n);
    const int r0 = (rest / tiles_n) * TM, c0 = (rest % tiles_n) * TN;
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[4][2];
    for (int r = 0; r < 4; ++r)
      for (int q = 0; q < 2; ++q) acc[r][q] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    float next_a[LOADS], next_b[LOADS];  // the coming step's slices, this invocation's part
    for (int l = 0; l < LOADS; ++l) {
      const ivec2 at = a_at(t + l * THREADS), bt = b_at(t + l * THREADS);
      next_a[l] = r0 + at.x < P.m && k_begin + at.y < k_end ? load_a(g, r0 + at.x, k_begin + at.y) : 0.0;
      next_b[l] = k_begin + bt.x < k_end && c0 + bt.y < P.n ? load_b(g, k_begin + bt.x, c0 + bt.y) : 0.0;
    }
    for (int k0 = k_begin; k0 < k_end; k0 += TK) {
      barrier();  // the previous step's matrix loads from shared memory are done
      for (int l = 0; l < LOADS; ++l) {
        const ivec2 at = a_at(t + l * THREADS), bt = b_at(t + l * THREADS);
        tile_a[at.x * SA + at.y] = float16_t(next_a[l]);
        tile_b[bt.x * SB + bt.y] = float16_t(next_b[l]);
      }
      barrier();
      if (k0 + TK < k_end) {  // the next step's loads, in flight during this step's products
        const int k1 = k0 + TK;
        for (int l = 0; l < LOADS; ++l) {
          const ivec2 at = a_at(t + l * THREADS), bt = b_at(t + l * THREADS);
          next_a[l] = r0 + at.x < P.m && k1 + at.y < k_end ? load_a(g, r0 + at.x, k1 + at.y) : 0.0;
          next_b[l] = k1 + bt.x < k_end && c0 + bt.y < P.n ? load_b(g, k1 + bt.x, c0 + bt.y) : 0.0;
        }
      }
      for (int kf = 0; kf < TK; kf += 16) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa[4], fb[2];
        for (int r = 0; r < 4; ++r) coopMatLoadNV(fa[r], tile_a, uint((64 * wr + 16 * r) * SA + kf), uint(SA), false);
        for (int q = 0; q < 2; ++q) coopMatLoadNV(fb[q], tile_b, uint(kf * SB + 32 * wc + 16 * q), uint(SB), false);
        for (int r = 0; r < 4; ++r)
          for (int q = 0; q < 2; ++q) acc[r][q] = coopMatMulAddNV(fa[r], fb[q], acc[r][q]);
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int q = 0; q < 2; ++q) {
        coopMatStoreNV(acc[r][q], stage, uint(s * 256), 16u, false);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (int e = lane; e < 256; e += 32) {
          const int i = r0 + 64 * wr + 16 * r + e / 16, j = c0 + 32 * wc + 16 * q + e % 16;
          if (i >= P.m || j >= P.n) continue;
          float v = stage[s * 256 + e];
          if (P.splits > 1) {  // a partial sum, to the workspace; REDUCE applies the epilogue
            c[split * P.batch * P.m * P.n + (g * P.m + i) * P.n + j] = v;
            continue;
          }
          if (P.has_bias != 0) v += bias[P.bias_offset + j];
          if (P.relu != 0) v = relu_of(v);  // a NaN passes, as UnaryOp::relu
          c[P.out_offset + (g * P.m + i) * P.n + j] = v;
        }
        subgroupBarrier();  // read before the next accumulator overwrites the staging area
      }
  }
}
