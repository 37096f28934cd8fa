// What the conv2d kernels share (kernels/cuda/conv2d.cu, the tutorial, says what they compute):
// the geometry as the kernels read it, and the K slice the implicit GEMM kernels step through.
// Included by conv2d.cu only, with implicit_gemm.cuh, tensor_cores.cuh and patch.cuh, so that the
// one file that defines the versions keeps its kernels in one translation unit.
#pragma once

#include <cstdint>

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

}  // namespace

}  // namespace kiln::cuda::conv2d
