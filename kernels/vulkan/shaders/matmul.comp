#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// C[b] = epilogue(op(A[b]) op(B[b])) on the Vulkan backend (core/backend.h's MatmulParams: op(A)
// m x k, A row-major with row stride lda or, when transposed, k x m; likewise op(B) k x n; a batch
// stride of 0 broadcasts one matrix), f32, accumulated in float (as the CPU's BLAS does).
//
// The product is gemm.glsl's tiled GEMM (shared-memory tiles, register blocking, the next step's
// loads in flight during this one's arithmetic; its versions are told there): a workgroup of 256
// invocations computes a tile of C (64 x 64, or 32 x 128 / 32 x 32 for thin or small products),
// each invocation a 4 x 4 (2 x 2) block of it, staging 16 k of op(A) and op(B) per step in
// shared memory. A row-major A and a transposed B are loaded k-fastest (constants 4 and 5), so
// their loads coalesce. The epilogue adds the bias of column j and applies ReLU before the
// store, so a Linear layer and its activation are one pass.
// Split k: when C has few tiles and k is long, `splits` workgroups share each tile's k, each
// writing its partial tile to a workspace [splits][batch m n]; the REDUCE variant then adds the
// partials in order of s (the same sum on every run) and applies the epilogue. conv2d.comp's
// weight gradient ends in it too.
//
// Bench: `vulkan-bench` (apps/bench, run by `scripts/device-run vulkan`), device time from
// timestamp queries. Version 4 (this): gemm.glsl's tiles with a row-major A and a transposed B
// loaded k-fastest, split k, the parameters in a uniform buffer. MNIST's fc1: forward
// 64x128x9216 0.026 ms [fig vulkan.matmul.fc1.fwd.ms], weight gradient 128x9216x64
// 0.015 [fig vulkan.matmul.fc1.bwd-weight.ms], input gradient 64x9216x128
// 0.018 [fig vulkan.matmul.fc1.bwd-input.ms] (vulkan-bench on the H100 of docs/runs/2026-11-26-h100:
// NVIDIA's Vulkan driver, Vulkan 1.4.312). cuBLAS SGEMM on the same GPU in the same run
// (kernel-bench, kernels/README.md): 0.017 [fig vulkan.ref.cublas.fc1.fwd.ms],
// 0.013 [fig vulkan.ref.cublas.fc1.bwd-weight.ms] and 0.013 ms [fig vulkan.ref.cublas.fc1.bwd-input.ms].
// Versions 1 to 3: kernels/vulkan/NOTES.md.
layout(local_size_x_id = 0) in;  // 256

#if defined(REDUCE)
layout(std430, binding = 0) uniform Params {
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

int gemm_batches() { return P.batch; }
int gemm_m() { return P.m; }
int gemm_n() { return P.n; }
int gemm_k() { return P.k; }
int gemm_splits() { return P.splits; }
int gemm_k_chunk() { return P.k_chunk; }

float load_a(int g, int i, int kk) {
  return a[P.a_offset + g * P.batch_stride_a + (P.trans_a != 0 ? kk * P.lda + i : i * P.lda + kk)];
}
float load_b(int g, int kk, int j) {
  return b[P.b_offset + g * P.batch_stride_b + (P.trans_b != 0 ? j * P.ldb + kk : kk * P.ldb + j)];
}
void store_c(int g, int split, int i, int j, float v) {
  if (P.splits > 1) {  // a partial sum, to the workspace; REDUCE applies the epilogue
    c[split * P.batch * P.m * P.n + (g * P.m + i) * P.n + j] = v;
    return;
  }
  if (P.has_bias != 0) v += bias[P.bias_offset + j];
  if (P.relu != 0) v = relu_of(v);  // a NaN passes, as UnaryOp::relu
  c[P.out_offset + (g * P.m + i) * P.n + j] = v;
}

#include "gemm.glsl"
#endif
