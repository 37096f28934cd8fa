#version 450
// conv2d on the Vulkan backend, forward and both backwards, with stride, padding, dilation and
// groups (kernels/cpu/conv2d.cpp states the sum):
//   x [N, C, H, W], w [O, C/G, KH, KW], y [N, O, OH, OW]
//   y[n, o, i, j] = act(bias[o] + sum_{c, kh, kw} w[o, c, kh, kw] x[n, g C/G + c, i sh - ph + kh dh, j sw - pw + kw dw])
// Variants (-D):
//   FORWARD          implicit GEMM (version 2): per group, y[o, p] = sum_k w[o, k] col[k, p] with
//                    k = (c, kh, kw) and p = (n, i, j), col read from x on the fly (zeros outside
//                    the input). matmul.comp's tiles: a workgroup of 256 computes 64 output
//                    channels x 64 pixels, 4 x 4 per invocation, staging 16 k-steps of w and col in
//                    shared memory; the bias and ReLU of the layer in the epilogue.
//   BACKWARD_INPUT   the same GEMM on the transposed problem: per group, grad_x[c, p] =
//                    sum_k w[o, c, kh, kw] grad_y[n, o, i, j] over k = (o, kh, kw), p = (n, h, w),
//                    where i sh = h + ph - kh dh must divide exactly and land in [0, OH) (zeros
//                    otherwise). Each element written once: no atomics, a fixed order.
//   BACKWARD_WEIGHT  the same GEMM once more: per group, grad_w[o, k] = sum_p grad_y[n, o, i, j]
//                    col[k, p] with k = (c, kh, kw), reducing over p = (n, i, j). Few tiles, a long
//                    reduction (MNIST's conv2: 64 x 288 outputs, 36,864 terms each), so the
//                    reduction is split over workgroups (matmul.comp's split k and its REDUCE).
//                    Before: an invocation per weight walking all its terms alone (the GPU nearly
//                    idle: conv1's 288 weights are sums of 43,264 terms), then a workgroup per
//                    weight meeting in shared memory (conv2's gradient 3.1 ms on an H100 through
//                    NVIDIA's Vulkan driver: integer divisions per term, and few loads in flight).
// Version 1 of the first two was direct, an invocation per output element reading every product
// from global memory. Measured on an H100 through NVIDIA's Vulkan driver (2026-11-22, vulkan-bench
// in `scripts/device-run vulkan`; MNIST conv2 at batch 64: x [64, 32, 26, 26], w [64, 32, 3, 3]):
// forward 0.195 ms, input gradient 0.587 ms, weight gradient 0.298 ms (3.13 ms with a
// workgroup per weight); the CNN's training epoch 9.4 s (all direct) -> 6.4 s (the weight gradient
// per workgroup) -> 5.8 s (forward and input gradient as GEMMs) -> 1.85 s (the weight gradient
// as a split GEMM, and matmul's split k; CUDA: 0.50 s).
// f32, accumulated in float.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int RELU = 0;  // forward: ReLU after the bias

layout(std430, binding = 0) readonly buffer Params {
  int n, c, h, w;        // x
  int o, kh, kw;         // w: [O, C/G, KH, KW]
  int oh, ow;            // y
  int sh, sw, ph, pw, dh, dw, groups;
  int x_offset, w_offset, y_offset, bias_offset, has_bias;
  int splits, k_chunk;  // the weight gradient: splits > 1 writes partial sums to the workspace
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

const int TILE = 64, BK = 16, THREAD = 4;
shared float tile_a[BK][TILE];  // the weights: [k][row]
shared float tile_b[BK][TILE];  // col: [k][pixel]

#if defined(FORWARD)
// rows: the group's output channels; k = (c, kh, kw); pixels p = (n, i, j) of y
int rows_count() { return P.o / P.groups; }
int k_count() { return (P.c / P.groups) * P.kh * P.kw; }
int pixel_count() { return P.n * P.oh * P.ow; }
float load_a(int g, int row, int k) {  // w[g og + row][k]: w's rows are k long
  return wt[P.w_offset + (g * rows_count() + row) * k_count() + k];
}
float load_b(int g, int k, int p) {  // col[k][p]: x under the window, 0 outside
  const int v = k % P.kw, u = (k / P.kw) % P.kh, c = k / (P.kw * P.kh);
  const int j = p % P.ow, i = (p / P.ow) % P.oh, b = p / (P.ow * P.oh);
  const int hh = i * P.sh - P.ph + u * P.dh, ww = j * P.sw - P.pw + v * P.dw;
  if (hh < 0 || hh >= P.h || ww < 0 || ww >= P.w) return 0.0;
  return x[P.x_offset + ((b * P.c + g * (P.c / P.groups) + c) * P.h + hh) * P.w + ww];
}
void store(int g, int row, int p, float acc) {
  const int o = g * rows_count() + row;
  const int j = p % P.ow, i = (p / P.ow) % P.oh, b = p / (P.ow * P.oh);
  if (P.has_bias != 0) acc += bias[P.bias_offset + o];
  if (RELU != 0) acc = relu_of(acc);  // a NaN passes
  y[P.y_offset + ((b * P.o + o) * P.oh + i) * P.ow + j] = acc;
}
#elif defined(BACKWARD_INPUT)
// rows: the group's input channels; k = (o, kh, kw); pixels p = (n, h, w) of x
int rows_count() { return P.c / P.groups; }
int k_count() { return (P.o / P.groups) * P.kh * P.kw; }
int pixel_count() { return P.n * P.h * P.w; }
float load_a(int g, int row, int k) {  // w[g og + oo][row][u][v]
  const int v = k % P.kw, u = (k / P.kw) % P.kh, oo = k / (P.kw * P.kh);
  return wt[P.w_offset + (((g * (P.o / P.groups) + oo) * rows_count() + row) * P.kh + u) * P.kw + v];
}
float load_b(int g, int k, int p) {  // grad_y at the output whose window puts tap (u, v) on pixel p
  const int v = k % P.kw, u = (k / P.kw) % P.kh, oo = k / (P.kw * P.kh);
  const int ww = p % P.w, hh = (p / P.w) % P.h, b = p / (P.w * P.h);
  const int ti = hh + P.ph - u * P.dh, tj = ww + P.pw - v * P.dw;  // = i sh, j sw
  if (ti < 0 || tj < 0 || ti % P.sh != 0 || tj % P.sw != 0) return 0.0;
  const int i = ti / P.sh, j = tj / P.sw;
  if (i >= P.oh || j >= P.ow) return 0.0;
  return gy[P.y_offset + ((b * P.o + g * (P.o / P.groups) + oo) * P.oh + i) * P.ow + j];
}
void store(int g, int row, int p, float acc) {
  const int ww = p % P.w, hh = (p / P.w) % P.h, b = p / (P.w * P.h);
  gx[P.x_offset + ((b * P.c + g * rows_count() + row) * P.h + hh) * P.w + ww] = acc;
}
#else  // BACKWARD_WEIGHT
// rows: the group's output channels; "pixels": the weight's columns (c, kh, kw); k = (n, i, j)
int rows_count() { return P.o / P.groups; }
int k_count() { return P.n * P.oh * P.ow; }
int pixel_count() { return (P.c / P.groups) * P.kh * P.kw; }
float load_a(int g, int row, int k) {  // grad_y[n, g og + row, i, j]
  const int j = k % P.ow, i = (k / P.ow) % P.oh, b = k / (P.ow * P.oh);
  return gy[P.y_offset + ((b * P.o + g * rows_count() + row) * P.oh + i) * P.ow + j];
}
float load_b(int g, int k, int col) {  // x under tap col of output pixel k, 0 outside
  const int v = col % P.kw, u = (col / P.kw) % P.kh, c = col / (P.kw * P.kh);
  const int j = k % P.ow, i = (k / P.ow) % P.oh, b = k / (P.ow * P.oh);
  const int hh = i * P.sh - P.ph + u * P.dh, ww = j * P.sw - P.pw + v * P.dw;
  if (hh < 0 || hh >= P.h || ww < 0 || ww >= P.w) return 0.0;
  return x[P.x_offset + ((b * P.c + g * (P.c / P.groups) + c) * P.h + hh) * P.w + ww];
}
void store(int g, int row, int col, float acc) {  // grad_w's rows are the weight's (c, kh, kw) long
  gw[P.w_offset + (g * rows_count() + row) * pixel_count() + col] = acc;
}
#endif

void main() {
  const int t = int(gl_LocalInvocationID.x), tr = t / 16, tc = t % 16;
  const int m = rows_count(), kk_total = k_count(), np = pixel_count();
  const int tiles_m = (m + TILE - 1) / TILE, tiles_n = (np + TILE - 1) / TILE;
  const int tiles = P.groups * tiles_m * tiles_n * P.splits;
  for (int tile_s = int(gl_WorkGroupID.x); tile_s < tiles; tile_s += int(gl_NumWorkGroups.x)) {
    const int split = tile_s % P.splits, tile = tile_s / P.splits;
    const int k_begin = split * P.k_chunk, k_end = P.splits > 1 ? min(kk_total, k_begin + P.k_chunk) : kk_total;
    const int g = tile / (tiles_m * tiles_n), rest = tile % (tiles_m * tiles_n);
    const int r0 = (rest / tiles_n) * TILE, p0 = (rest % tiles_n) * TILE;
    float acc[THREAD][THREAD];
    for (int r = 0; r < THREAD; ++r)
      for (int q = 0; q < THREAD; ++q) acc[r][q] = 0.0;
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
      for (int e = t; e < BK * TILE; e += 256) {
        const int kk = e / TILE, xi = e % TILE;
        const bool k_in = k0 + kk < k_end;
        tile_a[kk][xi] = k_in && r0 + xi < m ? load_a(g, r0 + xi, k0 + kk) : 0.0;
        tile_b[kk][xi] = k_in && p0 + xi < np ? load_b(g, k0 + kk, p0 + xi) : 0.0;
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
      const int row = r0 + tr * THREAD + r;
      if (row >= m) continue;
      for (int q = 0; q < THREAD; ++q) {
        const int p = p0 + tc * THREAD + q;
        if (p >= np) continue;
        // a split's partial sum goes to the workspace [splits][O][columns] (the weight gradient)
#if defined(BACKWARD_WEIGHT)
        if (P.splits > 1) {
          gw[split * P.groups * m * np + (g * m + row) * np + p] = acc[r][q];
          continue;
        }
#endif
        store(g, row, p, acc[r][q]);
      }
    }
  }
}
