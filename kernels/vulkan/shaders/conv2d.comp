#version 450
// conv2d on the Vulkan backend, forward and both backwards, with stride, padding, dilation and
// groups (kernels/cpu/conv2d.cpp states the sum):
//   x [N, C, H, W], w [O, C/G, KH, KW], y [N, O, OH, OW]
//   y[n, o, i, j] = act(bias[o] + sum_{c, kh, kw} w[o, c, kh, kw] x[n, g C/G + c, i sh - ph + kh dh, j sw - pw + kw dw])
// version 1 (direct, one invocation per output element of the pass), variants (-D):
//   FORWARD          an invocation per y element, summing over its group's C/G x KH x KW window;
//                    the bias and ReLU of the layer in the epilogue.
//   BACKWARD_INPUT   an invocation per x element, summing grad_y over the outputs whose windows
//                    cover it: for each tap (kh, kw) the output row i with i sh = h + ph - kh dh,
//                    when that divides exactly and lies in [0, OH). Each element is written once:
//                    no atomics, a fixed order.
//   BACKWARD_WEIGHT  a workgroup per w element: its 256 invocations split the N OH OW terms of
//                    x * grad_y (batch and output plane) and meet in shared memory. (An invocation
//                    per w element, walking all the terms alone, left the GPU nearly idle: conv1 of
//                    the MNIST CNN has 288 weights, each a sum of 43,264 terms.)
// f32, accumulated in float. Plain and direct: every product reads global memory (the caches
// serve the reuse); tiling through shared memory is the next version's work.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const int RELU = 0;  // forward: ReLU after the bias

layout(std430, binding = 0) readonly buffer Params {
  int n, c, h, w;        // x
  int o, kh, kw;         // w: [O, C/G, KH, KW]
  int oh, ow;            // y
  int sh, sw, ph, pw, dh, dw, groups;
  int x_offset, w_offset, y_offset, bias_offset, has_bias;
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
layout(std430, binding = 3) writeonly buffer GW { float gw[]; };
shared float partial[gl_WorkGroupSize.x];
#endif

#include "math.glsl"

void main() {
  const int cg = P.c / P.groups, og = P.o / P.groups;  // channels per group, in and out
  const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x);
#if defined(FORWARD)
  const int total = P.n * P.o * P.oh * P.ow;
  for (int e = int(gl_GlobalInvocationID.x); e < total; e += stride) {
    const int j = e % P.ow, i = (e / P.ow) % P.oh, o = (e / (P.ow * P.oh)) % P.o, b = e / (P.ow * P.oh * P.o);
    const int g = o / og;
    float acc = 0.0;
    for (int c = 0; c < cg; ++c) {
      const int x_plane = P.x_offset + (b * P.c + g * cg + c) * P.h * P.w;
      const int w_base = P.w_offset + ((o * cg + c) * P.kh) * P.kw;
      for (int u = 0; u < P.kh; ++u) {
        const int hh = i * P.sh - P.ph + u * P.dh;
        if (hh < 0 || hh >= P.h) continue;
        for (int v = 0; v < P.kw; ++v) {
          const int ww = j * P.sw - P.pw + v * P.dw;
          if (ww < 0 || ww >= P.w) continue;
          acc += wt[w_base + u * P.kw + v] * x[x_plane + hh * P.w + ww];
        }
      }
    }
    if (P.has_bias != 0) acc += bias[P.bias_offset + o];
    if (RELU != 0) acc = relu_of(acc);  // a NaN passes
    y[P.y_offset + e] = acc;
  }
#elif defined(BACKWARD_INPUT)
  const int total = P.n * P.c * P.h * P.w;
  for (int e = int(gl_GlobalInvocationID.x); e < total; e += stride) {
    const int ww = e % P.w, hh = (e / P.w) % P.h, c = (e / (P.w * P.h)) % P.c, b = e / (P.w * P.h * P.c);
    const int g = c / cg, cc = c % cg;
    float acc = 0.0;
    for (int u = 0; u < P.kh; ++u) {
      const int ti = hh + P.ph - u * P.dh;  // = i sh
      if (ti < 0 || ti % P.sh != 0 || ti / P.sh >= P.oh) continue;
      const int i = ti / P.sh;
      for (int v = 0; v < P.kw; ++v) {
        const int tj = ww + P.pw - v * P.dw;
        if (tj < 0 || tj % P.sw != 0 || tj / P.sw >= P.ow) continue;
        const int j = tj / P.sw;
        for (int oo = 0; oo < og; ++oo) {
          const int o = g * og + oo;
          acc += wt[P.w_offset + ((o * cg + cc) * P.kh + u) * P.kw + v] * gy[P.y_offset + ((b * P.o + o) * P.oh + i) * P.ow + j];
        }
      }
    }
    gx[P.x_offset + e] = acc;
  }
#else
  const int total = P.o * cg * P.kh * P.kw, terms = P.n * P.oh * P.ow, t = int(gl_LocalInvocationID.x);
  for (int e = int(gl_WorkGroupID.x); e < total; e += int(gl_NumWorkGroups.x)) {
    const int v = e % P.kw, u = (e / P.kw) % P.kh, cc = (e / (P.kw * P.kh)) % cg, o = e / (P.kw * P.kh * cg);
    const int c = (o / og) * cg + cc;
    float acc = 0.0;
    for (int q = t; q < terms; q += int(gl_WorkGroupSize.x)) {  // q = (b, i, j): neighbours read neighbours
      const int j = q % P.ow, i = (q / P.ow) % P.oh, b = q / (P.ow * P.oh);
      const int hh = i * P.sh - P.ph + u * P.dh, ww = j * P.sw - P.pw + v * P.dw;
      if (hh < 0 || hh >= P.h || ww < 0 || ww >= P.w) continue;
      acc += x[P.x_offset + ((b * P.c + c) * P.h + hh) * P.w + ww] * gy[P.y_offset + ((b * P.o + o) * P.oh + i) * P.ow + j];
    }
    partial[t] = acc;
    barrier();
    for (int step = int(gl_WorkGroupSize.x) / 2; step > 0; step /= 2) {
      if (t < step) partial[t] += partial[t + step];
      barrier();
    }
    if (t == 0) gw[P.w_offset + e] = partial[0];
    barrier();  // partial[0] is read before the next weight writes it
  }
#endif
}
