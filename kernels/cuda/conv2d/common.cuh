// What the conv2d kernels share (kernels/cuda/conv2d.cu, the tutorial, says what they compute):
// the geometry as the kernels read it, and the K slice the implicit GEMM kernels step through.
// Included by conv2d.cu only, with implicit_gemm.cuh, tensor_cores.cuh and patch.cuh, so that the
// one file that defines the versions keeps its kernels in one translation unit.
#pragma once

#include <cstdint>

#include "kiln/core/bf16.h"
#include "kiln/kernels/cuda/conv2d.cuh"

namespace kiln::cuda::conv2d {

namespace {

// The geometry as the kernels read it, with the derived sizes.
struct Dims {
  int64_t n, c, h, w, o, kh, kw, oh, ow;
  int64_t hw, ohw, khkw;
  int64_t cg, og;  // channels per group, in and out
  int sh, sw, ph, pw, dh, dw;
};

Dims dims_of(const Geometry& g) {
  Dims d{};
  d.n = g.n, d.c = g.c, d.h = g.h, d.w = g.w, d.o = g.o, d.kh = g.kh, d.kw = g.kw, d.oh = g.oh, d.ow = g.ow;
  d.hw = g.h * g.w, d.ohw = g.oh * g.ow, d.khkw = g.kh * g.kw;
  d.cg = g.c / g.groups, d.og = g.o / g.groups;
  d.sh = static_cast<int>(g.stride_h), d.sw = static_cast<int>(g.stride_w);
  d.ph = static_cast<int>(g.pad_h), d.pw = static_cast<int>(g.pad_w);
  d.dh = static_cast<int>(g.dilation_h), d.dw = static_cast<int>(g.dilation_w);
  return d;
}

// The implicit GEMM kernels step through K in slices of this many values.
constexpr int kSliceK = 16;

// The weight of output n (of group g) for input channel c at tap, as the forward view d reads it
// (flip: from the layer's own weights, version 3's form), zero past C/G or O/G.
template <class T>
__device__ T weight_at(const T* w, const Dims& d, bool flip, int64_t g, int64_t c, int64_t tap, int64_t n) {
  if (c >= d.cg || n >= d.og) return T(0.0f);
  return flip ? w[((g * d.cg + c) * d.og + n) * d.khkw + (d.khkw - 1 - tap)]
              : w[((g * d.og + n) * d.cg + c) * d.khkw + tap];
}

// Two bf16 as one 32-bit element, lo in the low half (the lower k, as mma m16n8k16 reads it;
// the lower column of an accumulator pair).
__device__ inline uint32_t bf16_pair(bf16 lo, bf16 hi) { return uint32_t{lo.bits} | uint32_t{hi.bits} << 16; }

// lo and hi rounded to bf16 (to nearest even) as one such pair, by one instruction.
__device__ inline uint32_t round_bf16_pair(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// a / b rounded down, for 0 <= a < 2^21, from inv_b = 1 / b as a float: a multiply where an
// integer division takes about twenty instructions. Exact: (a + 0.5) / b is at least 0.5 / b
// from an integer, and the float product errs by less than (a + 0.5) / b * 2^-23.
__device__ inline int div_small(int a, float inv_b) { return static_cast<int>((static_cast<float>(a) + 0.5f) * inv_b); }

}  // namespace

}  // namespace kiln::cuda::conv2d
