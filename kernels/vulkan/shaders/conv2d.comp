#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// conv2d on the Vulkan backend, forward and both backwards, with stride, padding, dilation and
// groups (kernels/cpu/conv2d.cpp states the sum):
//   x [N, C, H, W], w [O, C/G, KH, KW], y [N, O, OH, OW]
//   y[n, o, i, j] = act(bias[o] + sum_{c, kh, kw} w[o, c, kh, kw] x[n, g C/G + c, i sh - ph + kh dh, j sw - pw + kw dw])
// Every variant is an implicit GEMM on gemm.glsl's tiles (matmul.comp's), its operands made up
// from the image and the filters as the tiles load them (-D):
//   FORWARD          per group, y[o, p] = sum_k w[o, k] col[k, p] with k = (c, kh, kw) and
//                    p = (n, i, j), col read from x under the window (zeros outside the input); the
//                    bias and ReLU of the layer in the epilogue.
//   BACKWARD_INPUT   the transposed problem: per group, grad_x[c, p] = sum_k w[o, c, kh, kw]
//                    grad_y[n, o, i, j] over k = (o, kh, kw), p = (n, h, w), where i sh = h + ph - kh dh
//                    must divide exactly and land in [0, OH) (zeros otherwise). Each element written
//                    once: no atomics, a fixed order.
//   BACKWARD_WEIGHT  per group, grad_w[o, k] = sum_p grad_y[n, o, i, j] col[k, p] with
//                    k = (c, kh, kw), reducing over p = (n, i, j): few tiles and a long reduction
//                    (MNIST's conv2: 64 x 288 outputs, 36,864 terms each), so the reduction is split
//                    over workgroups (matmul.comp's split k and its REDUCE). Both operands have
//                    consecutive pixels side by side, so both load k-fastest.
// The index arithmetic divides by the image's and the filter's sizes on every load: by
// multiplication (fastdiv.glsl).
//
// Bench: `vulkan-bench` (apps/bench, run by `scripts/device-run vulkan`), device time from
// timestamp queries. Versions 1 to 4, and the CNN's training epoch at each: kernels/vulkan/NOTES.md.
// Version 5 (this): implicit GEMMs on gemm.glsl's tiles (the next step's loads in flight; a
// 32 x 128 tile for 32 channels, 32 x 32 for conv1's 288 weights), the weight gradient's
// reduction split, divisions by multiply, the parameters in a uniform buffer (NVIDIA reads them
// through the constant cache), and k tap-major where the channels summed over are whole steps of
// 16 (TAP_MAJOR below): a load of the forward or input gradient is a multiply-add from a base
// worked out once per step. MNIST's layers at batch 64, conv2 x [64, 32, 26, 26] * w [64, 32, 3, 3]:
// forward 0.083 ms [fig vulkan.conv2d.conv2.fwd.ms],
// input gradient 0.108 [fig vulkan.conv2d.conv2.bwd-input.ms],
// weight gradient 0.108 [fig vulkan.conv2d.conv2.bwd-weight.ms]; conv1 [64, 1, 28, 28] *
// [32, 1, 3, 3] weight gradient 0.031 [fig vulkan.conv2d.conv1.bwd-weight.ms] (vulkan-bench on the
// H100 of docs/runs/2026-11-26-h100: NVIDIA's Vulkan driver, Vulkan 1.4.312). cuDNN on the same
// GPU in the same run (kernel-bench, FP32 FMA math, kernels/README.md): conv2 forward
// 0.083 [fig cuda.conv2d.fwd.cudnn.conv2.ms], input gradient 0.074 [fig cuda.conv2d.bwd-input.cudnn.conv2.ms],
// weight gradient 0.094 ms [fig cuda.conv2d.bwd-weight.cudnn.conv2.ms].
// f32, accumulated in float.
layout(local_size_x_id = 0) in;

#include "fastdiv.glsl"

layout(std430, binding = 0) uniform Params {
  int n, c, h, w;        // x
  int o, kh, kw;         // w: [O, C/G, KH, KW]
  int oh, ow;            // y
  int sh, sw, ph, pw, dh, dw, groups;
  int x_offset, w_offset, y_offset, bias_offset, has_bias;
  int splits, k_chunk;  // the weight gradient: splits > 1 writes partial sums to the workspace
  // the sizes the index arithmetic divides by (fastdiv.glsl)
  Divisor kw_, taps_, ow_, ohw_, w_, hw_, sh_, sw_;  // kw, kh kw, ow, oh ow, w, h w, sh, sw
  Divisor cg_, og_;  // the channels of a group: C/G (forward), O/G (input gradient)
} P;

#if defined(FORWARD)
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer Wt { float wt[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer Bias { float bias[]; };
#elif defined(BACKWARD_INPUT)
layout(std430, binding = 1) readonly buffer GY { float gy[]; };
layout(std430, binding = 2) readonly buffer Wt { float wt[]; };
layout(std430, binding = 3) writeonly buffer GX { float gx[]; };
#else  // BACKWARD_WEIGHT
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) readonly buffer GY { float gy[]; };
layout(std430, binding = 3) writeonly buffer GW { float gw[]; };  // or the split-k workspace
#endif

#include "math.glsl"

layout(constant_id = 6) const int RELU = 0;  // forward: ReLU after the bias
// Forward and input gradient, where the group's channels summed over (C/G forward, O/G input
// gradient) are a multiple of 16: k runs tap-major, k = (kh KW + kw) channels + channel, so the
// 16 k of a step share one filter tap. An invocation's column (pixel) is the same in every step
// too, so whether its loads fall inside the image and where they start is computed once per
// step (gemm_step) and each load is a multiply-add: "tap-major" below. Otherwise k runs
// (channel, kh, kw), as the filter is stored, and each load works out its own tap.
layout(constant_id = 7) const int TAP_MAJOR = 0;

int gemm_batches() { return P.groups; }
int gemm_splits() { return P.splits; }
int gemm_k_chunk() { return P.k_chunk; }

// (c, u, v) of a filter tap index c KH KW + u KW + v
ivec3 tap(int k) {
  const int q = div_by(k, P.kw_), c = div_by(k, P.taps_);
  return ivec3(c, q - c * P.kh, k - q * P.kw);
}
// (b, i, j) of an output pixel index (b OH + i) OW + j
ivec3 out_pixel(int p) {
  const int q = div_by(p, P.ow_), b = div_by(p, P.ohw_);
  return ivec3(b, q - b * P.oh, p - q * P.ow);
}
#if !defined(BACKWARD_INPUT)
// x[b, c, i sh - ph + u dh, j sw - pw + v dw] of channel c of group g, 0 outside the image
float x_under(int g, ivec3 pix, ivec3 t) {
  const int hh = pix.y * P.sh - P.ph + t.y * P.dh, ww = pix.z * P.sw - P.pw + t.z * P.dw;
  if (hh < 0 || hh >= P.h || ww < 0 || ww >= P.w) return 0.0;
  return x[P.x_offset + ((pix.x * P.c + g * (P.c / P.groups) + t.x) * P.h + hh) * P.w + ww];
}
#endif

// tap-major: this step's first k, whether the invocation's loads fall inside, and where they start
int step_k0 = 0, step_base = 0;
bool step_inside = false;

#if defined(FORWARD)
// rows: the group's output channels; k = (c, kh, kw) or tap-major; columns p = (n, i, j) of y
int gemm_m() { return P.o / P.groups; }
int gemm_k() { return (P.c / P.groups) * P.kh * P.kw; }
int gemm_n() { return P.n * P.oh * P.ow; }
float load_a(int g, int row, int k) {  // w[g og + row][k]: w's rows are (c, kh, kw) long
  if (TAP_MAJOR != 0) {
    const int t = div_by(k, P.cg_);  // k = t C/G + c
    k = (k - t * P.cg_.d) * P.kh * P.kw + t;
  }
  return wt[P.w_offset + (g * gemm_m() + row) * gemm_k() + k];
}
#define GEMM_STEP
void gemm_step(int g, int k0, int p) {
  if (TAP_MAJOR == 0 || p >= gemm_n()) return;
  const int t = div_by(k0, P.cg_), c = k0 - t * P.cg_.d, u = div_by(t, P.kw_);  // tap t = u KW + v
  const ivec3 pix = out_pixel(p);
  const int hh = pix.y * P.sh - P.ph + u * P.dh, ww = pix.z * P.sw - P.pw + (t - u * P.kw) * P.dw;
  step_k0 = k0;
  step_inside = hh >= 0 && hh < P.h && ww >= 0 && ww < P.w;
  step_base = P.x_offset + ((pix.x * P.c + g * P.cg_.d + c) * P.h + hh) * P.w + ww;
}
float load_b(int g, int k, int p) {  // col[k][p]
  if (TAP_MAJOR != 0) return step_inside ? x[step_base + (k - step_k0) * P.h * P.w] : 0.0;
  return x_under(g, out_pixel(p), tap(k));
}
void store_c(int g, int split, int row, int p, float acc) {
  const int o = g * gemm_m() + row;
  const ivec3 pix = out_pixel(p);
  if (P.has_bias != 0) acc += bias[P.bias_offset + o];
  if (RELU != 0) acc = relu_of(acc);  // a NaN passes
  y[P.y_offset + ((pix.x * P.o + o) * P.oh + pix.y) * P.ow + pix.z] = acc;
}
#elif defined(BACKWARD_INPUT)
// rows: the group's input channels; k = (o, kh, kw) or tap-major; columns p = (n, h, w) of x
int gemm_m() { return P.c / P.groups; }
int gemm_k() { return (P.o / P.groups) * P.kh * P.kw; }
int gemm_n() { return P.n * P.h * P.w; }
float load_a(int g, int row, int k) {  // w[g og + oo][row][u][v]
  if (TAP_MAJOR != 0) {
    const int t = div_by(k, P.og_);  // k = t O/G + oo
    return wt[P.w_offset + ((g * P.og_.d + k - t * P.og_.d) * gemm_m() + row) * P.kh * P.kw + t];
  }
  const ivec3 t = tap(k);
  return wt[P.w_offset + (((g * (P.o / P.groups) + t.x) * gemm_m() + row) * P.kh + t.y) * P.kw + t.z];
}
#define GEMM_STEP
void gemm_step(int g, int k0, int p) {
  if (TAP_MAJOR == 0 || p >= gemm_n()) return;
  const int t = div_by(k0, P.og_), oo = k0 - t * P.og_.d, u = div_by(t, P.kw_);
  const int q = div_by(p, P.w_), b = div_by(p, P.hw_);
  const int ti = q - b * P.h + P.ph - u * P.dh, tj = p - q * P.w + P.pw - (t - u * P.kw) * P.dw;  // = i sh, j sw
  const int i = div_by(max(ti, 0), P.sh_), j = div_by(max(tj, 0), P.sw_);
  step_k0 = k0;
  step_inside = ti >= 0 && tj >= 0 && i * P.sh == ti && j * P.sw == tj && i < P.oh && j < P.ow;
  step_base = P.y_offset + ((b * P.o + g * P.og_.d + oo) * P.oh + i) * P.ow + j;
}
float load_b(int g, int k, int p) {  // grad_y at the output whose window puts tap (u, v) on pixel p
  if (TAP_MAJOR != 0) return step_inside ? gy[step_base + (k - step_k0) * P.oh * P.ow] : 0.0;
  const ivec3 t = tap(k);
  const int q = div_by(p, P.w_), b = div_by(p, P.hw_);
  const int hh = q - b * P.h, ww = p - q * P.w;
  const int ti = hh + P.ph - t.y * P.dh, tj = ww + P.pw - t.z * P.dw;  // = i sh, j sw
  if (ti < 0 || tj < 0) return 0.0;
  const int i = div_by(ti, P.sh_), j = div_by(tj, P.sw_);
  if (i * P.sh != ti || j * P.sw != tj || i >= P.oh || j >= P.ow) return 0.0;
  return gy[P.y_offset + ((b * P.o + g * (P.o / P.groups) + t.x) * P.oh + i) * P.ow + j];
}
void store_c(int g, int split, int row, int p, float acc) {
  const int q = div_by(p, P.w_), b = div_by(p, P.hw_);
  gx[P.x_offset + ((b * P.c + g * gemm_m() + row) * P.h + q - b * P.h) * P.w + p - q * P.w] = acc;
}
#else  // BACKWARD_WEIGHT
// rows: the group's output channels; columns: the weight's (c, kh, kw); k = (n, i, j)
int gemm_m() { return P.o / P.groups; }
int gemm_k() { return P.n * P.oh * P.ow; }
int gemm_n() { return (P.c / P.groups) * P.kh * P.kw; }
float load_a(int g, int row, int k) {  // grad_y[n, g og + row, i, j]
  const ivec3 pix = out_pixel(k);
  return gy[P.y_offset + ((pix.x * P.o + g * gemm_m() + row) * P.oh + pix.y) * P.ow + pix.z];
}
float load_b(int g, int k, int col) { return x_under(g, out_pixel(k), tap(col)); }  // x under tap col of pixel k
void store_c(int g, int split, int row, int col, float acc) {
  if (P.splits > 1) {  // a split's partial sum, to the workspace [splits][O][columns]
    gw[split * P.groups * gemm_m() * gemm_n() + (g * gemm_m() + row) * gemm_n() + col] = acc;
    return;
  }
  gw[P.w_offset + (g * gemm_m() + row) * gemm_n() + col] = acc;  // grad_w's rows are (c, kh, kw) long
}
#endif

#include "gemm.glsl"
