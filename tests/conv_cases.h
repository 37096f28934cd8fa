// The conv2d and pooling geometries the device backends' tests run against the CPU: random
// convolutions (sizes 1 and odd sizes, kernels 1..5, stride 1..3, padding 0..2, dilation 1..2,
// groups 1..3, with and without bias; every fourth wide enough to span several tiles) and random
// poolings, with the f32 tolerances that grow with the length of each sum.
#pragma once

#include <algorithm>
#include <random>
#include <string>

#include "kiln/kiln.h"

namespace kiln::test {

struct ConvCase {
  Shape x, w;
  Conv2dConfig config;
  bool bias = false;
  Shape y;
  std::string str() const {
    return "x " + x.str() + " w " + w.str() + " stride " + std::to_string(config.stride[0]) + "x" +
           std::to_string(config.stride[1]) + " pad " + std::to_string(config.padding[0]) + "x" +
           std::to_string(config.padding[1]) + " dilation " + std::to_string(config.dilation[0]) + "x" +
           std::to_string(config.dilation[1]) + " groups " + std::to_string(config.groups) +
           (bias ? " bias" : "");
  }
};

inline int64_t pick(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A random convolution; every fourth is wide enough (C/G, O/G > 32, M > 128) to span several
// tiles of the implicit GEMM in every dimension.
inline ConvCase random_conv(std::mt19937& rng, int trial) {
  static const int64_t channels[] = {1, 2, 3, 5, 8};
  ConvCase c;
  const bool wide = trial % 4 == 3;
  const int64_t groups = pick(rng, 1, 3);
  const int64_t cg = wide ? pick(rng, 33, 40) : channels[pick(rng, 0, 4)];
  const int64_t og = wide ? pick(rng, 33, 70) : channels[pick(rng, 0, 4)];
  const int64_t n = pick(rng, 1, 3);
  c.config.groups = groups;
  for (int i = 0; i < 2; ++i) {
    c.config.stride[i] = pick(rng, 1, 3);
    c.config.padding[i] = pick(rng, 0, 2);
    c.config.dilation[i] = pick(rng, 1, 2);
  }
  const int64_t kh = pick(rng, 1, 5), kw = pick(rng, 1, 5);
  auto in_size = [&](int64_t k, int i) {
    const int64_t least = std::max<int64_t>(1, c.config.dilation[i] * (k - 1) + 1 - 2 * c.config.padding[i]);
    return least + pick(rng, 0, wide ? 12 : 9);
  };
  const int64_t h = in_size(kh, 0), w = in_size(kw, 1);
  c.x = {n, cg * groups, h, w};
  c.w = {og * groups, cg, kh, kw};
  c.bias = pick(rng, 0, 1) == 1;
  auto out = [&](int64_t in, int64_t k, int i) {
    return (in + 2 * c.config.padding[i] - c.config.dilation[i] * (k - 1) - 1) / c.config.stride[i] + 1;
  };
  c.y = {n, og * groups, out(h, kh, 0), out(w, kw, 1)};
  return c;
}

// f32: rtol 1e-4 plus an absolute term that grows with the reduction length (inputs in [-1, 1)).
inline double rtol_for(DType t) { return t == DType::f32 ? 1e-4 : 1e-12; }
inline double atol_for(DType t, int64_t length) { return (t == DType::f32 ? 1e-6 : 1e-14) * static_cast<double>(length); }

struct PoolCase {
  Shape x;
  Pool2dConfig config;
  std::string str() const {
    return "x " + x.str() + " kernel " + std::to_string(config.kernel[0]) + "x" + std::to_string(config.kernel[1]) +
           " stride " + std::to_string(config.stride[0]) + "x" + std::to_string(config.stride[1]) + " pad " +
           std::to_string(config.padding[0]) + "x" + std::to_string(config.padding[1]) +
           (config.count_include_pad ? "" : " exclude pad");
  }
};

inline PoolCase random_pool(std::mt19937& rng) {
  PoolCase c;
  Shape x = {pick(rng, 1, 3), pick(rng, 1, 5), 0, 0};
  for (int i = 0; i < 2; ++i) {
    c.config.kernel[i] = pick(rng, 1, 4);
    c.config.stride[i] = pick(rng, 0, 3);  // 0: the kernel size
    c.config.padding[i] = pick(rng, 0, c.config.kernel[i] / 2);
    x[2 + i] = std::max<int64_t>(1, c.config.kernel[i] - 2 * c.config.padding[i]) + pick(rng, 0, 12);
  }
  c.config.count_include_pad = pick(rng, 0, 1) == 1;
  c.x = x;
  return c;
}

}  // namespace kiln::test
