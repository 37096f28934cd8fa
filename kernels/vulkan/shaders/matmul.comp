#version 450
// C[b] = epilogue(op(A[b]) op(B[b])) on the Vulkan backend (core/backend.h's MatmulParams: op(A)
// m x k, A row-major with row stride lda or, when transposed, k x m; likewise op(B) k x n; a batch
// stride of 0 broadcasts one matrix), f32, accumulated in float (as the CPU's BLAS does).
//
// version 1 (shared-memory tiles, register blocking): a workgroup of 256 invocations computes a
// 64 x 64 tile of C, each invocation a 4 x 4 block of it. Per step of 16 along k the workgroup
// copies a 64 x 16 slice of op(A) and a 16 x 64 slice of op(B) into shared memory (4 elements
// each per invocation, zeros past the edges), then every invocation does 16 x 16 multiply-adds
// from registers loaded out of them: 16 shared loads per 16 FMAs instead of 2 global loads per
// FMA. The epilogue adds the bias of column j and applies ReLU before the store, so a Linear
// layer and its activation are one pass. Tiles beyond the workgroup count loop (grid-stride).
// Split k (the MNIST CNN's fc1, 64 x 128 x 9216, has two tiles: two workgroups walking 9216 k
// each took 1.17 ms on an H100 through NVIDIA's Vulkan driver, 0.069 ms split 72 ways; vulkan-bench,
// 2026-11-22): when C has few tiles and k is long,
// `splits` workgroups share each tile's k, each writing its partial tile to a workspace
// [splits][batch m n]; the REDUCE variant then adds the partials in order of s (the same sum on
// every run) and applies the epilogue. conv2d.comp's weight gradient ends in it too.
layout(local_size_x_id = 0) in;  // 256

#if defined(REDUCE)
layout(std430, binding = 0) readonly buffer Params {
  int total, n, splits, out_offset, bias_offset, has_bias, relu;
} R;
layout(std430, binding = 1) readonly buffer W { float ws[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };

#include "math.glsl"

void main() {
  const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x);
  for (int e = int(gl_GlobalInvocationID.x); e < R.total; e += stride) {
    float v = 0.0;
    for (int s = 0; s < R.splits; ++s) v += ws[s * R.total + e];
    if (R.has_bias != 0) v += bias[R.bias_offset + e % R.n];
    if (R.relu != 0) v = relu_of(v);
    c[R.out_offset + e] = v;
  }
}
#else

const int TILE = 64, BK = 16, THREAD = 4;

layout(std430, binding = 0) readonly buffer Params {
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

shared float tile_a[BK][TILE];  // op(A)[i0 + i][k0 + kk] at [kk][i]
shared float tile_b[BK][TILE];  // op(B)[k0 + kk][j0 + j] at [kk][j]

float load_a(int base, int i, int kk) {
  if (i >= P.m || kk >= P.k) return 0.0;
  return a[base + (P.trans_a != 0 ? kk * P.lda + i : i * P.lda + kk)];
}
float load_b(int base, int kk, int j) {
  if (kk >= P.k || j >= P.n) return 0.0;
  return b[base + (P.trans_b != 0 ? j * P.ldb + kk : kk * P.ldb + j)];
}

void main() {
  const int t = int(gl_LocalInvocationID.x);
  const int tr = t / 16, tc = t % 16;  // this invocation's 4 x 4 block: rows tr*4.., columns tc*4..
  const int tiles_m = (P.m + TILE - 1) / TILE, tiles_n = (P.n + TILE - 1) / TILE;
  const int tiles = P.batch * tiles_m * tiles_n * P.splits;
  for (int tile_s = int(gl_WorkGroupID.x); tile_s < tiles; tile_s += int(gl_NumWorkGroups.x)) {
    const int split = tile_s % P.splits, tile = tile_s / P.splits;
    const int k_begin = split * P.k_chunk, k_end = min(P.k, k_begin + P.k_chunk);
    const int bt = tile / (tiles_m * tiles_n), rest = tile % (tiles_m * tiles_n);
    const int i0 = (rest / tiles_n) * TILE, j0 = (rest % tiles_n) * TILE;
    const int a_base = P.a_offset + bt * P.batch_stride_a, b_base = P.b_offset + bt * P.batch_stride_b;
    float acc[THREAD][THREAD];
    for (int r = 0; r < THREAD; ++r)
      for (int q = 0; q < THREAD; ++q) acc[r][q] = 0.0;
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
      // 1024 elements of each slice, 4 per invocation; consecutive invocations take consecutive
      // i (A, when transposed, or column-major) or j (B), so the global loads are coalesced
      for (int e = t; e < BK * TILE; e += 256) {
        const int kk = e / TILE, x = e % TILE;
        const bool in_k = k0 + kk < k_end;
        tile_a[kk][x] = in_k ? load_a(a_base, i0 + x, k0 + kk) : 0.0;
        tile_b[kk][x] = in_k ? load_b(b_base, k0 + kk, j0 + x) : 0.0;
      }
      barrier();
      for (int kk = 0; kk < BK; ++kk) {
        float ra[THREAD], rb[THREAD];
        for (int r = 0; r < THREAD; ++r) ra[r] = tile_a[kk][tr * THREAD + r];
        for (int q = 0; q < THREAD; ++q) rb[q] = tile_b[kk][tc * THREAD + q];
        for (int r = 0; r < THREAD; ++r)
          for (int q = 0; q < THREAD; ++q) acc[r][q] = fma(ra[r], rb[q], acc[r][q]);
      }
      barrier();
    }
    for (int r = 0; r < THREAD; ++r) {
      const int i = i0 + tr * THREAD + r;
      if (i >= P.m) continue;
      for (int q = 0; q < THREAD; ++q) {
        const int j = j0 + tc * THREAD + q;
        if (j >= P.n) continue;
        float v = acc[r][q];
        if (P.splits > 1) {  // a partial sum, to the workspace; REDUCE applies the epilogue
          c[split * P.batch * P.m * P.n + (bt * P.m + i) * P.n + j] = v;
          continue;
        }
        if (P.has_bias != 0) v += bias[P.bias_offset + j];
        if (P.relu != 0) v = relu_of(v);  // a NaN passes, as UnaryOp::relu
        c[P.out_offset + (bt * P.m + i) * P.n + j] = v;
      }
    }
  }
}
#endif
