// Elementary functions the Vulkan backend computes itself rather than take from GLSL, whose
// precision Vulkan leaves loose (exp: 3 + 2|x| ulp; sin and cos: an absolute 2^-11; log: an
// absolute 2^-21 near 1; tanh: whatever sinh and cosh give), so that every driver computes what
// the CPU does to a few ulp. Included by the shaders that need them.

bool is_nan(float v) { return isnan(v); }  // the builtin: a driver may fold v != v away

// max(v, 0) that lets a NaN through, as UnaryOp::relu and the epilogues (a driver may turn
// v < 0 ? 0 : v into a max that drops it)
float relu_of(float v) { return isnan(v) ? v : max(v, 0.0); }

// e^x to about 1 ulp: x = k ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, the first exact in a
// few bits, so k ln2 loses nothing), e^r by Cephes' expf polynomial, then the exponent.
float exp_of(float x) {
  if (is_nan(x)) return x;
  if (x > 88.7228394) return 1.0 / 0.0;
  if (x < -103.972084) return 0.0;
  const float k = round(x * 1.44269504088896341);
  precise float r = x - k * 0.693359375;
  r = r - k * -2.12194440e-4;
  const float z = r * r;
  const float p = ((((1.9875691500e-4 * r + 1.3981999507e-3) * r + 8.3334519073e-3) * r + 4.1665795894e-2) * r +
                   1.6666665459e-1) * r + 5.0000001201e-1;
  const float e = p * z + r + 1.0;
  // 2^k in two steps, so that k down to -150 reaches the denormals and k = 128 does not overflow early
  const int half_k = int(k) / 2;
  return e * exp2(float(half_k)) * exp2(float(int(k) - half_k));
}

// ln x for x > 0 (NaN below 0, -inf at 0, inf at inf): x = m 2^e with m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh(t), t = (m - 1) / (m + 1), by its series.
float log_of(float x) {
  if (is_nan(x) || x < 0.0) return 0.0 / 0.0;
  if (x == 0.0) return -1.0 / 0.0;
  if (isinf(x)) return x;
  int e;
  float m = frexp(x, e);
  if (m < 0.70710678) {
    m *= 2.0;
    e -= 1;
  }
  const float t = (m - 1.0) / (m + 1.0), t2 = t * t;
  const float series = 2.0 * t * (1.0 + t2 * (1.0 / 3.0 + t2 * (1.0 / 5.0 + t2 * (1.0 / 7.0 + t2 * (1.0 / 9.0)))));
  return float(e) * 0.69314718055994531 + series;
}

// tanh: below 0.625 an odd polynomial (Cephes' tanhf coefficients), above it 1 - 2 / (e^2|x| + 1),
// which has no cancellation there.
float tanh_of(float v) {
  const float a = abs(v);
  if (a < 0.625) {
    const float z = v * v;
    return v + v * z * ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z +
                         1.33314422036e-1) * z - 3.33332819422e-1);
  }
  if (is_nan(v)) return v;
  const float t = 1.0 - 2.0 / (exp_of(2.0 * a) + 1.0);
  return v < 0.0 ? -t : t;
}

// erfc(z), relative error below 1.2e-7 for every z (Numerical Recipes' Chebyshev fit).
float erfc_of(float z) {
  const float t = 1.0 / (1.0 + 0.5 * abs(z));
  const float poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 +
      t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 +
      t * (-0.82215223 + t * 0.17087277))))))));
  const float r = t * exp_of(-z * z + poly);
  return z >= 0.0 ? r : 2.0 - r;
}
