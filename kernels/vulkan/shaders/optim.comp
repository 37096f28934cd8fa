#version 450
#extension GL_EXT_scalar_block_layout : require  // std430 parameter blocks
// Optimizer steps on the Vulkan backend, one dispatch per parameter, one invocation per element
// (core/backend.h gives each rule; kernels/cpu/optim.cpp says why each step is there). Variants
// (-D): SGD, ADAM, ADADELTA, RMSPROP. Every product is rounded on its own (`precise`: no fused
// multiply-add), as on the CPU, so a CPU and a Vulkan run from one seed do not drift apart;
// Vulkan's sqrt and division are within a few ulp, so the steps agree to rounding, not bits.
//
// Measured (version 1) with `vulkan-bench` (`scripts/device-run vulkan`; device time from timestamp
// queries) on the H100 of docs/runs/2026-11-26-h100 (NVIDIA's Vulkan driver, Vulkan 1.4.312),
// one step on 16M f32 parameters (seven 64 MB streams: the parameter, its gradient and two
// buffers read, three written): Adadelta 0.190 ms [fig vulkan.adadelta.ms]
// (2.47 TB/s [fig vulkan.adadelta.tbps]), Adam 0.180 ms [fig vulkan.adam.ms]
// (2.61 TB/s [fig vulkan.adam.tbps]; a copy moves 2.0 TB/s [fig vulkan.copy.tbps]). The MNIST CNN's
// eight parameters take eight dispatches a step.
layout(local_size_x_id = 0) in;

layout(std430, binding = 0) uniform Params {
  int numel, p_offset, g_offset, s1_offset, s2_offset, s3_offset;
  int flag_a, flag_b, flag_c, flag_d;  // see each rule
  float lr, wd, c1, c2, c3, c4, c5, c6, eps;
} P;
layout(std430, binding = 1) buffer Param { float p[]; };
layout(std430, binding = 2) readonly buffer Grad { float g[]; };
layout(std430, binding = 3) buffer S1 { float s1[]; };  // SGD/RMSprop: momentum buffer; Adam: m; Adadelta: v
layout(std430, binding = 4) buffer S2 { float s2[]; };  // Adam: v; Adadelta: u; RMSprop: v
layout(std430, binding = 5) buffer S3 { float s3[]; };  // Adam: v_max; RMSprop: grad_avg

void main() {
  const int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x);
  for (int j = int(gl_GlobalInvocationID.x); j < P.numel; j += stride) {
    const int pj = P.p_offset + j;
    precise float d = g[P.g_offset + j];
#if defined(SGD)
    // flag_a: weight decay; flag_b: momentum; flag_c: nesterov; flag_d: init_buffers; c1 = momentum, c2 = 1 - dampening
    if (P.flag_a != 0) d += P.wd * p[pj];
    if (P.flag_b != 0) {
      const int bj = P.s1_offset + j;
      precise float buf = P.flag_d != 0 ? d : P.c1 * s1[bj] + P.c2 * d;
      s1[bj] = buf;
      d = P.flag_c != 0 ? d + P.c1 * buf : buf;
    }
    precise float step = P.lr * d;
    p[pj] -= step;
#elif defined(ADAM)
    // flag_a: L2 weight decay (wd); flag_b: decoupled (AdamW), p *= lr, which holds 1 - lr * wd here;
    // flag_c: amsgrad; c1 = beta1, c2 = 1 - beta1, c3 = beta2, c4 = 1 - beta2, c5 = lr / bc1, c6 = sqrt(bc2)
    if (P.flag_a != 0) d += P.wd * p[pj];
    if (P.flag_b != 0) p[pj] *= P.lr;
    const int mj = P.s1_offset + j, vj = P.s2_offset + j;
    precise float m = P.c1 * s1[mj] + P.c2 * d;
    precise float v = P.c3 * s2[vj] + P.c4 * d * d;
    s1[mj] = m;
    s2[vj] = v;
    float second = v;
    if (P.flag_c != 0) {
      second = max(s3[P.s3_offset + j], v);
      s3[P.s3_offset + j] = second;
    }
    precise float denom = sqrt(second) / P.c6 + P.eps;
    precise float update = P.c5 * (m / denom);
    p[pj] -= update;
#elif defined(ADADELTA)
    // flag_a: weight decay; c1 = rho, c2 = 1 - rho
    if (P.flag_a != 0) d += P.wd * p[pj];
    const int vj = P.s1_offset + j, uj = P.s2_offset + j;
    precise float v = P.c1 * s1[vj] + P.c2 * d * d;
    s1[vj] = v;
    precise float delta = sqrt(s2[uj] + P.eps) / sqrt(v + P.eps) * d;
    precise float u = P.c1 * s2[uj] + P.c2 * delta * delta;
    s2[uj] = u;
    precise float step = P.lr * delta;
    p[pj] -= step;
#else  // RMSPROP
    // flag_a: weight decay; flag_b: momentum; flag_c: centered; c1 = alpha, c2 = 1 - alpha, c3 = momentum
    if (P.flag_a != 0) d += P.wd * p[pj];
    const int vj = P.s2_offset + j;
    precise float v = P.c1 * s2[vj] + P.c2 * d * d;
    s2[vj] = v;
    precise float avg;
    if (P.flag_c != 0) {
      const int aj = P.s3_offset + j;
      precise float ga = P.c1 * s3[aj] + P.c2 * d;
      s3[aj] = ga;
      avg = sqrt(v - ga * ga);
    } else {
      avg = sqrt(v);
    }
    avg += P.eps;
    if (P.flag_b != 0) {
      const int bj = P.s1_offset + j;
      precise float buf = P.c3 * s1[bj] + d / avg;
      s1[bj] = buf;
      precise float step = P.lr * buf;
      p[pj] -= step;
    } else {
      precise float step = P.lr * (d / avg);
      p[pj] -= step;
    }
#endif
  }
}
