#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// 2-D pooling over each plane of x [N, C, H, W] -> y [N, C, OH, OW] on the Vulkan backend, and the
// backward passes (kernels/cpu/pool.cpp states the rules), one invocation per output element of
// the pass; variants (-D):
//   MAX_FORWARD      y = the window's max, indices (i32) its position h W + w in the plane;
//                    padding never wins; a NaN does, the last one in row-major window order (as
//                    PyTorch's kernels, which take v when v > max or v is NaN).
//   MAX_BACKWARD     an invocation per x element, summing grad_y over the windows that cover it
//                    and chose it (their index names it): each element written once, no atomics.
//   AVG_FORWARD      y = the window's mean: divided by KH KW (count_include_pad) or by its real
//                    elements.
//   AVG_BACKWARD     an invocation per x element, summing grad_y / divisor over the windows that
//                    cover it.
//
// Measured (version 1) with `vulkan-bench` (`scripts/device-run vulkan`; device time from timestamp
// queries) on the H100 of docs/runs/2026-11-26-h100 (NVIDIA's Vulkan driver, Vulkan 1.4.312),
// [16, 64, 128, 128] f32, 2 x 2 windows: max 1.93 TB/s [fig vulkan.max_pool2d.tbps],
// average 2.19 TB/s [fig vulkan.avg_pool2d.tbps] (64 MB read, 16 MB written; a copy:
// 2.0 TB/s [fig vulkan.copy.tbps]). MNIST's [64, 64, 24, 24]: max forward
// 0.0081 ms [fig vulkan.max_pool2d.mnist.ms], backward 0.0247 ms [fig vulkan.max_pool2d.mnist.backward.ms].
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) uniform Params {
  int planes, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw, include_pad;
  int x_offset, y_offset, i_offset;
} P;

#if defined(MAX_FORWARD)
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) writeonly buffer I { int idx[]; };
#elif defined(MAX_BACKWARD)
layout(std430, binding = 1) readonly buffer GY { float gy[]; };
layout(std430, binding = 2) readonly buffer I { int idx[]; };
layout(std430, binding = 3) writeonly buffer GX { float gx[]; };
#elif defined(AVG_FORWARD)
layout(std430, binding = 1) readonly buffer X { float x[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
#else  // AVG_BACKWARD
layout(std430, binding = 1) readonly buffer GY { float gy[]; };
layout(std430, binding = 2) writeonly buffer GX { float gx[]; };
#endif

// The divisor of window (i, j): KH KW, or the real elements in it.
float divisor(int i, int j) {
  if (P.include_pad != 0) return float(P.kh * P.kw);
  const int h0 = i * P.sh - P.ph, w0 = j * P.sw - P.pw;
  const int rows = min(h0 + P.kh, P.h) - max(h0, 0), cols = min(w0 + P.kw, P.w) - max(w0, 0);
  return float(rows * cols);
}

void main() {
  const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x);
#if defined(MAX_FORWARD) || defined(AVG_FORWARD)
  const int total = P.planes * P.oh * P.ow;
  for (int e = int(gl_GlobalInvocationID.x); e < total; e += stride) {
    const int j = e % P.ow, i = (e / P.ow) % P.oh, plane = e / (P.ow * P.oh);
    const int base = P.x_offset + plane * P.h * P.w;
    const int h0 = i * P.sh - P.ph, w0 = j * P.sw - P.pw;
#if defined(MAX_FORWARD)
    float best = -1.0 / 0.0;
    int best_at = max(h0, 0) * P.w + max(w0, 0);  // the first real element, should all be -inf
    for (int hh = max(h0, 0); hh < min(h0 + P.kh, P.h); ++hh)
      for (int ww = max(w0, 0); ww < min(w0 + P.kw, P.w); ++ww) {
        const float v = x[base + hh * P.w + ww];
        if (v > best || isnan(v)) {  // v > NaN is false, so the last NaN wins
          best = v;
          best_at = hh * P.w + ww;
        }
      }
    y[P.y_offset + e] = best;
    idx[P.i_offset + e] = best_at;
#else
    float sum = 0.0;
    for (int hh = max(h0, 0); hh < min(h0 + P.kh, P.h); ++hh)
      for (int ww = max(w0, 0); ww < min(w0 + P.kw, P.w); ++ww) sum += x[base + hh * P.w + ww];
    y[P.y_offset + e] = sum / divisor(i, j);
#endif
  }
#else  // the backwards: an invocation per x element
  const int total = P.planes * P.h * P.w;
  for (int e = int(gl_GlobalInvocationID.x); e < total; e += stride) {
    const int ww = e % P.w, hh = (e / P.w) % P.h, plane = e / (P.w * P.h);
    // the windows that cover (hh, ww): i with i sh - ph <= hh < i sh - ph + kh, likewise j
    const int i_lo = max(0, (hh + P.ph - P.kh + P.sh) / P.sh), i_hi = min(P.oh - 1, (hh + P.ph) / P.sh);
    const int j_lo = max(0, (ww + P.pw - P.kw + P.sw) / P.sw), j_hi = min(P.ow - 1, (ww + P.pw) / P.sw);
    float acc = 0.0;
    for (int i = i_lo; i <= i_hi; ++i)
      for (int j = j_lo; j <= j_hi; ++j) {
        const int at = plane * P.oh * P.ow + i * P.ow + j;
#if defined(MAX_BACKWARD)
        if (idx[P.i_offset + at] == hh * P.w + ww) acc += gy[P.y_offset + at];
#else
        acc += gy[P.y_offset + at] / divisor(i, j);
#endif
      }
    gx[P.x_offset + e] = acc;
  }
#endif
}
