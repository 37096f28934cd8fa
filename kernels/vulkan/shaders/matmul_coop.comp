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
// Per step of 32 along k: op(A)'s 64 x 32 slice and op(B)'s 32 x 128 slice are converted to f16
// in shared memory (zeros past the edges; row-major A and transposed B loaded k-fastest, so the
// loads coalesce); each accumulator leaves through a 16 x 16 staging area of its subgroup (no
// workgroup barrier). The epilogue is matmul.comp's: bias, ReLU, or the split-k workspace that
// matmul.comp's REDUCE sums.
//
// Bench: `vulkan-bench` (apps/bench, run by `scripts/device-run vulkan`), device time.
// Version 3 (this): 64 x 128 tiles, each subgroup 32 x 32 (2 x 2 accumulators), no registers held
// for the next step (fewer registers, more workgroups per multiprocessor):
// 26.7 TFLOP/s [fig vulkan.matmul.coop.4096.tflops] on 4096 x 4096 x 4096, where gemm.glsl's f32 on
// the same GPU makes 24.8 TFLOP/s [fig vulkan.matmul.f32.4096.tflops]; fc1's forward
// 0.026 ms [fig vulkan.matmul.coop.fc1.ms] (vulkan-bench on the H100 of docs/runs/2026-11-26-h100:
// NVIDIA's Vulkan driver, Vulkan 1.4.312). On that GPU in the same run (kernel-bench,
// kernels/README.md), cuBLAS's f32 SGEMM makes 52 TFLOP/s [fig vulkan.ref.cublas-sgemm.4096.tflops]
// and CUDA's TF32 path 289 TFLOP/s [fig kernels.cuda.matmul.4096.tf32.tflops]. Versions 1 and 2, what
// was tried and dropped, and why the limit is not thought to be in the tiling:
// kernels/vulkan/NOTES.md.
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

const int TM = 64, TN = 128, TK = 32, THREADS = 256;
const int SA = TK + 8, SB = TN + 8;  // row strides: 16-byte multiples, banks staggered
const int LOADS_A = TM * TK / THREADS, LOADS_B = TK * TN / THREADS;  // per invocation per step
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
  const int wr = s / 4, wc = s % 4;  // this subgroup's rows 32 wr .., columns 32 wc ..
  const int tiles_m = (P.m + TM - 1) / TM, tiles_n = (P.n + TN - 1) / TN;
  const int tiles = P.batch * tiles_m * tiles_n * P.splits;
  for (int tile_s = int(gl_WorkGroupID.x); tile_s < tiles; tile_s += int(gl_NumWorkGroups.x)) {
    const int split = tile_s % P.splits, tile = tile_s / P.splits;
    const int k_begin = P.splits > 1 ? split * P.k_chunk : 0;
    const int k_end = P.splits > 1 ? min(P.k, k_begin + P.k_chunk) : P.k;
    const int g = tile / (tiles_m * tiles_n), rest = tile % (tiles_m * tiles_n);
    const int r0 = (rest / tiles_n) * TM, c0 = (rest % tiles_n) * TN;
    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[2][2];
    for (int r = 0; r < 2; ++r)
      for (int q = 0; q < 2; ++q) acc[r][q] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    for (int k0 = k_begin; k0 < k_end; k0 += TK) {
      barrier();  // the previous step's matrix loads from shared memory are done
      for (int l = 0; l < LOADS_A; ++l) {
        const ivec2 at = a_at(t + l * THREADS);
        tile_a[at.x * SA + at.y] = float16_t(r0 + at.x < P.m && k0 + at.y < k_end ? load_a(g, r0 + at.x, k0 + at.y) : 0.0);
      }
      for (int l = 0; l < LOADS_B; ++l) {
        const ivec2 bt = b_at(t + l * THREADS);
        tile_b[bt.x * SB + bt.y] = float16_t(k0 + bt.x < k_end && c0 + bt.y < P.n ? load_b(g, k0 + bt.x, c0 + bt.y) : 0.0);
      }
      barrier();
      for (int kf = 0; kf < TK; kf += 16) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa[2], fb[2];
        for (int r = 0; r < 2; ++r) coopMatLoadNV(fa[r], tile_a, uint((32 * wr + 16 * r) * SA + kf), uint(SA), false);
        for (int q = 0; q < 2; ++q) coopMatLoadNV(fb[q], tile_b, uint(kf * SB + 32 * wc + 16 * q), uint(SB), false);
        for (int r = 0; r < 2; ++r)
          for (int q = 0; q < 2; ++q) acc[r][q] = coopMatMulAddNV(fa[r], fb[q], acc[r][q]);
      }
    }
    for (int r = 0; r < 2; ++r)
      for (int q = 0; q < 2; ++q) {
        coopMatStoreNV(acc[r][q], stage, uint(s * 256), 16u, false);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (int e = lane; e < 256; e += 32) {
          const int i = r0 + 32 * wr + 16 * r + e / 16, j = c0 + 32 * wc + 16 * q + e % 16;
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
