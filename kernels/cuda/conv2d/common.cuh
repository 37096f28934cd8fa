// What the conv2d kernels share (kernels/cuda/conv2d.cu, the tutorial, says what they compute):
// the geometry as the kernels read it, the K slice the implicit GEMM kernels step through, and the
// ordered sum of the weight gradient's split partials. Included by conv2d.cu (with
// implicit_gemm.cuh, tensor_cores.cuh and patch.cuh) and by the sm_90a files, conv2d/wgmma.cu and
// conv2d/wgmma_weight.cu.
#pragma once

#include <cstdint>

#include "kiln/core/bf16.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cuda/conv2d.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"

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

// Sums the S partial results of each grad_w element: gw[i] = sum_s ws[s][i] (in T, rounded once
// to Out: bf16's partials are f32). A block of 32 x ROWS threads takes 32 neighbouring
// elements; its rows of threads split the partials (row r adds s = r, r + ROWS, ..., four
// loads in flight before their adds), and row 0 adds the rows' sums in order: the order of every
// addition is fixed by S (and ROWS by S), so the result is deterministic. ROWS is 8, or 32 from
// kSumManySplits partials on: version 5's splits of a small batch (conv1 at batch 64: 256 splits
// of 320 elements, ten blocks) would otherwise be eight round trips to memory a thread. Before
// the rows, one thread per element, eight loads in flight, had left conv1's 80 partials of 288 elements a chain of ten round trips to memory:
// 7 µs [nofig] at batch 64 for 92 KB in the bf16 step's profile (ncu,
// docs/runs/2026-11-27-h100-fc1-split; history: NOTES.md). conv1's whole bf16 weight gradient then took
// 23.5 µs [fig cuda.conv2d.rows.conv1-b64.bwd-weight-bf16.us] at batch 64 and
// 55.4 [fig cuda.conv2d.rows.conv1-b512.bwd-weight-bf16.us] at 512, from
// 27.6 [fig cuda.conv2d.rows.conv1-b64.bwd-weight-bf16.before.us] and
// 78.6 [fig cuda.conv2d.rows.conv1-b512.bwd-weight-bf16.before.us] (kernel-bench, H100,
// docs/runs/2026-11-27-h100-conv1-rows and -bf16-kernels).
constexpr int kSumUnroll = 4;
constexpr int64_t kSumManySplits = 128;
template <class T, class Out, int ROWS>
__global__ void __launch_bounds__(32 * ROWS) sum_splits_kernel(const T* ws, Out* gw, int64_t count, int64_t splits,
                                                               Out* tail, int64_t head) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  __shared__ T rows[ROWS][32];
  const int64_t i = blockIdx.x * int64_t{32} + threadIdx.x;
  T acc = 0;
  if (i < count) {
    for (int64_t s0 = threadIdx.y; s0 < splits; s0 += ROWS * kSumUnroll) {
      T v[kSumUnroll];
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u)
        if (s0 + u * ROWS < splits) v[u] = ws[(s0 + u * ROWS) * count + i];
#pragma unroll
      for (int u = 0; u < kSumUnroll; ++u)
        if (s0 + u * ROWS < splits) acc += v[u];
    }
  }
  rows[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && i < count) {
    T total = rows[0][threadIdx.x];
#pragma unroll
    for (int r = 1; r < ROWS; ++r) total += rows[r][threadIdx.x];
    (i < head ? gw[i] : tail[i - head]) = cast<Out>(total);
  }
}

// as_forward(g), the backward input's forward form, refused where it does not apply.
inline Geometry checked_forward_form(const Geometry& g) {
  KILN_CHECK(backward_input_as_forward_applies(g), ValueError,
             "cuda conv2d_backward_input: the forward form needs stride 1 and padding <= dilation*(kernel-1)");
  return as_forward(g);
}

// Whether a tensor-core version runs 3xTF32 (f32 accuracy) rather than TF32.
inline bool exact(TensorMath math) { return math == TensorMath::tf32x3; }

// What every entry of the wgmma versions (conv2d/wgmma.cu, conv2d/wgmma_weight.cu) checks before it
// runs: that the version applies to the geometry (and the GPU) and that it was given its workspace
// where it needs one (`need` of `unit`: f32 elements, or the bf16 entries' bytes).
inline void check_entry(bool applies, const void* workspace, int64_t need, const char* op, const char* version,
                        const char* unit = "elements") {
  KILN_CHECK(applies, ValueError, "cuda ", op, ": version ", version, " does not apply to this geometry or GPU");
  KILN_CHECK(need == 0 || workspace != nullptr, ValueError, "cuda ", op, ": version ", version,
             " needs a workspace of ", need, " ", unit);
}

// Launches sum_splits_kernel over count elements; those from `head` on go to `tail` (a second
// output summed in the same launch: version 5's bias gradient).
template <class T, class Out>
void sum_splits(const T* ws, Out* gw, int64_t count, int64_t splits, cudaStream_t stream, Out* tail = nullptr,
                int64_t head = -1) {
  const unsigned blocks = static_cast<unsigned>((count + 31) / 32);
  if (splits >= kSumManySplits)
    launch_dependent(sum_splits_kernel<T, Out, 32>, blocks, dim3(32, 32), 0, stream, ws, gw, count, splits, tail,
                     tail ? head : count);
  else
    launch_dependent(sum_splits_kernel<T, Out, 8>, blocks, dim3(32, 8), 0, stream, ws, gw, count, splits, tail,
                     tail ? head : count);
  KILN_CUDA_LAUNCH_CHECK("conv2d sum_splits");
}

}  // namespace

}  // namespace kiln::cuda::conv2d
