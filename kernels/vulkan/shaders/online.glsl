// The online softmax state of a run of elements (softmax.comp, cross_entropy.comp), as
// kernels/cuda/softmax.cuh keeps it: (m, s) with m their max and s = sum exp(x - m). Adding an
// element above m rescales s by exp(m_old - m_new). A NaN becomes the max and sticks; a slice
// whose max is not finite ends with s = NaN (finish), so all its outputs are NaN, as on the CPU.
// Needs math.glsl.

vec2 none() { return vec2(-1.0 / 0.0, 0.0); }

// exp(v - m), but 1 when v == m (two infinities would give exp(NaN))
float shifted_exp(float v, float m) { return exp_of(v == m ? 0.0 : v - m); }

vec2 add(vec2 a, float v) {
  if (v > a.x || is_nan(v)) return vec2(v, a.y * shifted_exp(a.x, v) + 1.0);
  return vec2(a.x, a.y + shifted_exp(v, a.x));
}

vec2 combine(vec2 a, vec2 b) {
  if (b.x > a.x || is_nan(b.x)) {
    const vec2 t = a;
    a = b;
    b = t;
  }
  return vec2(a.x, a.y + b.y * shifted_exp(b.x, a.x));  // an empty b (-inf, 0) adds 0
}

vec2 finish(vec2 a) { return isinf(a.x) || is_nan(a.x) ? vec2(a.x, 0.0 / 0.0) : a; }
