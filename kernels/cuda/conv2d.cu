// conv2d on the GPU, forward and both backwards, f32 and f64 (bf16 through f32: the production
// path at the end), with stride, padding, dilation and groups (the CPU oracle is
// kernels/cpu/conv2d.cpp):
//   x [N, C, H, W], w [O, C/G, KH, KW], bias [O] (optional), y [N, O, OH, OW]
//   y[n, o, i, j] = act(bias[o] + sum_{c, kh, kw} w[o, c, kh, kw] * x[n, g*C/G + c, i*sh - ph + kh*dh,
//                                                                            j*sw - pw + kw*dw])
//   (g = o / (O/G); reads outside the input are zeros; act: the epilogue's activation, e.g. ReLU,
//   applied as each forward version stores an element, so a layer's ReLU costs no pass of its
//   own.) Accumulation is in T, as on the CPU.
//
// The GEMM view. Per group, the forward pass is a matrix product C[M, N] = A[M, K] . B[K, N] with
//   M = N_img*OH*OW (one row per output pixel), N = O/G, K = C/G*KH*KW,
//   A = the im2col matrix (row: an output pixel, column: one (c, kh, kw) tap), B = w_g^T.
//   backward input   M = N_img*H*W, N = C/G, K = O/G*KH*KW: A(m, (o, kh, kw)) = grad_y at the
//                    output pixel whose tap (kh, kw) reads input pixel m, or 0 when none does
//   backward weight  M = O/G, N = C/G*KH*KW, K = N_img*OH*OW: grad_y_g . im2col
//
// Bench: `kernel-bench --only conv` (every version against cuDNN; `--shape conv2` for one layer).
// The versions are declared in conv2d.cuh; the GEMM engines are in conv2d/ (implicit_gemm.cuh on
// the CUDA cores, tensor_cores.cuh, patch.cuh, cells.cuh); how each came to be, with the attempts dropped on
// the way: kernels/cuda/NOTES.md. Figures below: ms on MNIST's conv2, x[64,32,26,26] w[64,32,3,3]
// (conv1: x[64,1,28,28] w[32,1,3,3]), "a / b" = 3xTF32 / TF32, beside cuDNN's FP32 in the same run
// (H100 80GB HBM3, kernel-bench, docs/runs/2026-11-26-h100; every row: kernels/README.md).
//
// Forward (cuDNN 0.0829 [fig cuda.conv2d.fwd.cudnn.conv2.ms]):
//   1 direct: a thread per output element loops over its C/G*KH*KW taps. The baseline.
//     1.1845 [fig cuda.conv2d.fwd.v1.conv2.ms].
//   2 implicit GEMM: 128 x 64 block tiles (128 x 32, 128 x 16 for small O/G), K in slices of 16
//     gathered from x straight into shared memory (im2col never materialised), 8 x 4 register tiles
//     per thread; the epilogue applied as the tile is stored.
//     0.1051 [fig cuda.conv2d.fwd.v2.conv2.ms].
//   3 2 with slice k+1's loads issued into registers before slice k's FMAs.
//     0.1029 [fig cuda.conv2d.fwd.v3.conv2.ms].
//   4 3 with 8 x 8 thread tiles (128 threads) where O/G > 32: half the shared reads per FMA.
//     0.1345 [fig cuda.conv2d.fwd.v4.conv2.ms].
//   5 the GEMM on matmul's tensor cores (mma.sync m16n8k8, 3-stage cp.async pipeline), the im2col
//     tile gathered by 4-byte cp.async from per-block tap tables; TensorMath::tf32x3 (three TF32
//     products each: f32 accuracy) or tf32 (allow_tf32).
//     0.0703 [fig cuda.conv2d.fwd.v5-3xtf32.conv2.ms] /
//     0.0398 [fig cuda.conv2d.fwd.v5-tf32.conv2.ms].
//   6 direct for O/G <= 16: a thread per output pixel computes all O/G outputs, the group's weights
//     in shared memory. Timed as backward input 6.
//   7 5 with the input patch in shared memory: the input rows of 8 channels a stage copied once,
//     the mma fragments reading im2col out of it, the weights packed beforehand.
//     0.0533 [fig cuda.conv2d.fwd.v7-3xtf32.conv2.ms] /
//     0.0309 [fig cuda.conv2d.fwd.v7-tf32.conv2.ms].
//   8 6 at stride 1 with the input rows of a band of output rows in shared memory. Timed as
//     backward input 8.
//   9 bf16 only: 7's patch with each pixel a "cell" of 16 channels, copied from x as it is (no
//     pass pairing its channels first), the fragments loaded by ldmatrix. Figures in the bf16
//     section below.
//   10 7 on Hopper's warpgroup tensor cores (conv2d/wgmma.cu): wgmma m64nNk8 with A from the
//     patch through registers and the packed weights read from shared memory; sm_90 only. It ties
//     7 (figures in its file) and is not in production.
//   11 10 with A read from shared memory by the tensor cores too: the pixels numbered over the
//     patch's whole width, so that a tap's im2col rows are a window of the patch (conv2d/wgmma.cu).
//     It ties too (figures in its file) and is not in production.
//   12 11 warp-specialised and persistent (conv2d/wgmma.cu): one block an SM walks the tiles, a
//     producer warpgroup copying the patch by cp.async into a ring of stages that two consumer
//     warpgroups multiply (3xTF32: their window fragments split in registers), 256 pixels a block
//     (3xTF32: 128 where the grid's rounds then copy less), the weights brought by bulk copies,
//     once a block where they fit. In production on sm_90, forward and backward input (figures
//     in its file).
//   13 for O/G <= 4 at stride 1 (conv2d/columns.cu): 8 with nothing but the weights in shared
//     memory, a warp across a row of output pixels and each lane down a column, a tap's
//     neighbours passed between lanes by shuffles; 8 warps a tile split the input channels.
//     Figures in its file.
// Backward input (cuDNN 0.0738 [fig cuda.conv2d.bwd-input.cudnn.conv2.ms]; conv1
//   0.0246 [fig cuda.conv2d.bwd-input.cudnn.conv1.ms]):
//   1 direct gather: a thread per grad_x element sums what every tap landing on it contributes.
//     3.6108 [fig cuda.conv2d.bwd-input.v1.conv2.ms].
//   2 implicit GEMM in gather form (forward 2's kernel): taps the stride does not divide are
//     skipped, so no atomics and no zeroed output. 0.4469 [fig cuda.conv2d.bwd-input.v2.conv2.ms].
//   3 as a forward convolution: at stride 1 grad_x = conv2d(grad_y, w') with w' the flipped,
//     channel-swapped weights (written to a workspace) and padding dh*(KH-1) - ph, on forward 3;
//     needs padding <= dilation*(kernel-1). 0.1263 [fig cuda.conv2d.bwd-input.v3.conv2.ms].
//   4, 5, 6, 7, 8, 9, 10, 11, 12, 13: 3's forward form on forward 4 to 13 (13 reading the
//     weights flipped as it goes, with no workspace).
//     4: 0.1263 [fig cuda.conv2d.bwd-input.v4.conv2.ms];
//     5: 0.0820 [fig cuda.conv2d.bwd-input.v5-3xtf32.conv2.ms] /
//     0.0651 [fig cuda.conv2d.bwd-input.v5-tf32.conv2.ms];
//     7: 0.0567 [fig cuda.conv2d.bwd-input.v7-3xtf32.conv2.ms] /
//     0.0453 [fig cuda.conv2d.bwd-input.v7-tf32.conv2.ms];
//     conv1: 6: 0.0482 [fig cuda.conv2d.bwd-input.v6.conv1.ms];
//     8: 0.0247 [fig cuda.conv2d.bwd-input.v8.conv1.ms].
// Backward weight (cuDNN 0.0941 [fig cuda.conv2d.bwd-weight.cudnn.conv2.ms]):
//   1 implicit GEMM, split-K: K = N_img*OH*OW cut into S ranges so that the launch is one full wave
//     at the kernel's occupancy, partial tiles in a workspace [S, O, C/G*KH*KW], then a second
//     kernel sums them in split order (deterministic, no atomics); 64 x 64 tiles, 32 x 32 for small
//     layers. 0.1198 [fig cuda.conv2d.bwd-weight.v1.conv2.ms].
//   2 1 with 64 x 128 tiles of 8 x 8 thread tiles (128 threads).
//     0.1190 [fig cuda.conv2d.bwd-weight.v2.conv2.ms].
//   3 1 on the tensor cores, as forward 5. 0.0679 [fig cuda.conv2d.bwd-weight.v3-3xtf32.conv2.ms] /
//     0.0458 [fig cuda.conv2d.bwd-weight.v3-tf32.conv2.ms].
//   4 bf16 only: grad_y's rows and x's rows as cells (version 9's copy) in shared memory, a block
//     summing bands of output rows one after another; figures in the bf16 section below.
//   5 for a short reduction per output (K = C/G*KH*KW <= 32: a first layer), where the GEMM
//     versions' tiles of k are mostly empty: one output's K sums in a warp's registers, the input
//     rows of a band in shared memory, and the bias's gradient from the same pass. conv1 (9 taps)
//     in f32 at batch 64: 13.2 µs [fig cuda.conv2d.weight-rows.conv1-b64.v5.us] against 3's
//     36.0 [fig cuda.conv2d.weight-rows.conv1-b64.v3-3xtf32.us] and cuDNN FP32's
//     34.9 [fig cuda.conv2d.weight-rows.conv1-b64.cudnn.us]; at batch 512
//     63.8 [fig cuda.conv2d.weight-rows.conv1-b512.v5.us], 85.2 [fig cuda.conv2d.weight-rows.conv1-b512.v3-3xtf32.us]
//     and 97.5 [fig cuda.conv2d.weight-rows.conv1-b512.cudnn.us]; in bf16
//     13.1 [fig cuda.conv2d.weight-rows.conv1-b64.v5-bf16.us] against version 3 on image pairs'
//     23.1 [fig cuda.conv2d.weight-rows.conv1-b64.v3-bf16.us] and cuDNN BF16's
//     43.8 [fig cuda.conv2d.weight-rows.conv1-b64.cudnn-bf16.us], at batch 512
//     44.6 [fig cuda.conv2d.weight-rows.conv1-b512.v5-bf16.us],
//     54.5 [fig cuda.conv2d.weight-rows.conv1-b512.v3-bf16.us]
//     and 144.1 [fig cuda.conv2d.weight-rows.conv1-b512.cudnn-bf16.us] (H100, kernel-bench,
//     docs/runs/2026-11-27-h100-weight-rows). It issues instructions, not loads: the first form
//     divided each pixel's index by the row width, about forty instructions where the taps take
//     twenty-seven, and took twice as long (kernels/cuda/NOTES.md). Then a register window for 3 x 3
//     and 5 x 5 taps (a lane walks a column of pixels down the band; each pixel loads one new row
//     of taps, three values where nine were loaded): in bf16 9.5 [fig cuda.conv2d.weight-window.conv1-b64.v5-bf16.us]
//     at batch 64 and 33.1 [fig cuda.conv2d.weight-window.conv1-b512.v5-bf16.us] at 512, in f32
//     12.0 [fig cuda.conv2d.weight-window.conv1-b64.v5.us] and 54.3 [fig cuda.conv2d.weight-window.conv1-b512.v5.us]
//     (docs/runs/2026-11-27-h100-weight-window; cuDNN BF16 in the same call
//     55.4 [fig cuda.conv2d.weight-window.conv1-b64.cudnn-bf16.us] and 144.8 [fig cuda.conv2d.weight-window.conv1-b512.cudnn-bf16.us],
//     FP32 35.4 [fig cuda.conv2d.weight-window.conv1-b64.cudnn.us] and 95.3 [fig cuda.conv2d.weight-window.conv1-b512.cudnn.us]):
//     now waiting on grad_y's loads, a lane's eight
//     rows ahead at a time, with DRAM a quarter busy (NOTES.md).
//   6 on Hopper's warpgroup tensor cores (conv2d/wgmma_weight.cu): grad_w^T = im2col^T . grad_y^T,
//     the im2col fragments loaded into registers from the input rows in shared memory (a tap's
//     row of im2col is the input moved by one element, which no wgmma descriptor can address)
//     and grad_y read by the tensor cores, warp-specialised as forward 12, split along the pixels
//     over the SMs; sm_90 only (figures in its file).
//
// Production (CudaBackend::conv2d*): the forward runs 13 where it applies (O/G <= 4 at stride 1),
// else 8 where K = C/G*KH*KW < 32 (a first layer: the tensor cores' slices would be mostly empty)
// and it applies (stride 1, O/G <= 32), else 3 there, else 12 in f32 at stride 1 on an sm_90 GPU,
// else 7 in f32 at stride 1 where its patch fits in shared memory, else 5 (which runs 3 for
// O/G <= 16 and f64). The backward input runs 13 where it applies, else 8 where 3 applies and
// C/G <= 4, else 12 where it runs, else 7 where 3 applies (5 where 7 cannot, 3 in f64), else 1 for C/G <= 8,
// else 2. The backward weight runs 5 where it applies (with the bias's gradient where the layer has
// a bias: Backend::conv2d_backward_weight_and_bias), else 6 in f32 on an sm_90 GPU where it applies
// (backward_weight_ring_applies; the bias's gradient with it in 3xTF32 where the taps leave its
// row spare), else 3 (2 for small layers and f64). The tensor-core versions take TF32 under
// allow_tf32, else 3xTF32.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/core/precision.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/conv2d.cuh"
#include "kiln/kernels/cuda/conv2d/cells.cuh"
#include "kiln/kernels/cuda/conv2d/common.cuh"
#include "kiln/kernels/cuda/conv2d/implicit_gemm.cuh"
#include "kiln/kernels/cuda/conv2d/patch.cuh"
#include "kiln/kernels/cuda/conv2d/tensor_cores.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::conv2d {

namespace {

// ---- forward, version 1: direct ----

template <class T>
__global__ void forward_direct_kernel(const T* x, const T* w, DeviceEpilogue<T> e, T* y, Dims d, int64_t total) {
  KILN_GRID_STRIDE(i, total) {
    const int64_t j = i % d.ow, r = i / d.ow, oi = r % d.oh, r2 = r / d.oh;
    const int64_t o = r2 % d.o, img = r2 / d.o;
    const int64_t g = o / d.og;
    const T* xg = x + (img * d.c + g * d.cg) * d.hw;  // this group's input planes
    const T* wo = w + o * d.cg * d.khkw;               // w[o]: [C/G, KH, KW]
    const int64_t ih0 = oi * d.sh - d.ph, iw0 = j * d.sw - d.pw;
    T acc = 0;
    for (int64_t c = 0; c < d.cg; ++c) {
      for (int64_t ky = 0; ky < d.kh; ++ky) {
        const int64_t ih = ih0 + ky * d.dh;
        if (ih < 0 || ih >= d.h) continue;
        const T* xrow = xg + c * d.hw + ih * d.w;
        const T* wrow = wo + (c * d.kh + ky) * d.kw;
        for (int64_t kx = 0; kx < d.kw; ++kx) {
          const int64_t iw = iw0 + kx * d.dw;
          if (iw >= 0 && iw < d.w) acc += wrow[kx] * xrow[iw];
        }
      }
    }
    y[i] = e(acc, o);
  }
}

// ---- forward, version 6: direct, few output channels ----
//
// One thread per output pixel (and group) computes all of its O/G <= kOut outputs: each input
// value it reads feeds kOut FMAs, with the group's weights in shared memory, transposed to
// [C/G*KH*KW][kOut] (zeros past O/G) so that the kOut weights of a tap are one broadcast read.
// blockIdx.y is the group.
template <class T, int kOut>
__global__ void forward_few_outputs_kernel(const T* x, const T* w, DeviceEpilogue<T> e, T* y, Dims d,
                                           int64_t pixels) {
  extern __shared__ __align__(16) unsigned char smem_few_outputs[];
  T* ws = reinterpret_cast<T*>(smem_few_outputs);
  const int64_t g = blockIdx.y, K = d.cg * d.khkw;
  for (int64_t i = threadIdx.x; i < K * kOut; i += blockDim.x) {
    const int64_t k = i / kOut, o = i % kOut;
    ws[i] = o < d.og ? w[(g * d.og + o) * K + k] : T(0);
  }
  __syncthreads();
  KILN_GRID_STRIDE(p, pixels) {
    const int64_t img = p / d.ohw, r = p % d.ohw;
    const int ih0 = static_cast<int>(r / d.ow) * d.sh - d.ph, iw0 = static_cast<int>(r % d.ow) * d.sw - d.pw;
    const T* xg = x + (img * d.c + g * d.cg) * d.hw;
    const int h = static_cast<int>(d.h), wd = static_cast<int>(d.w), kh = static_cast<int>(d.kh);
    const int kw = static_cast<int>(d.kw);
    T acc[kOut] = {};
    const T* wk = ws;  // the taps in (c, ky, kx) order
    for (int64_t c = 0; c < d.cg; ++c) {
      const T* xc = xg + c * d.hw;
      for (int ky = 0; ky < kh; ++ky) {
        const int ih = ih0 + ky * d.dh;
        const bool row_in = ih >= 0 && ih < h;
        for (int kx = 0; kx < kw; ++kx, wk += kOut) {
          const int iw = iw0 + kx * d.dw;
          if (!row_in || iw < 0 || iw >= wd) continue;
          const T v = xc[int64_t{ih} * wd + iw];
#pragma unroll
          for (int o = 0; o < kOut; ++o) acc[o] += v * wk[o];
        }
      }
    }
    T* yp = y + (img * d.o + g * d.og) * d.ohw + r;
#pragma unroll
    for (int o = 0; o < kOut; ++o)
      if (o < d.og) yp[o * d.ohw] = e(acc[o], g * d.og + o);
  }
}

// ---- forward, version 8: few output channels, stride 1, the input rows in shared memory ----
//
// Version 6 reads every tap of every pixel from global memory (through L1): a 3x3 layer loads
// each input value nine times. Here a block owns a band of `band` output rows of one image (and
// group blockIdx.y) and walks the input channels kRowsChannels at a time: the input rows the band
// reads (padding as zeros) go to shared memory once per chunk, and each thread computes its
// pixel's kOut outputs from there (neighbouring threads on neighbouring columns: conflict-free
// reads), the weights as in version 6. A band is as many rows as a block's threads cover. Up to
// kRowsOutputsMax (32) outputs a thread, so that it also runs a first layer's forward (the MNIST
// CNN's conv1: 1 input channel, 32 outputs), where an implicit GEMM's slices of k would be mostly
// empty. Weights and patch are kept in compute_t<T> (bf16 widened once, as it lands in shared
// memory), and the sums too, each output rounded once.
constexpr int kRowsChannels = 8, kRowsThreads = 128, kRowsOutputsMax = 32;

// kTaps3: the kernel is 3x3 at dilation 1, so the tap loops unroll and a tap's patch and weight
// reads take constant offsets (one shared load each and an FMA per output).
template <class T, int kOut, bool kTaps3>
__global__ void __launch_bounds__(kRowsThreads) forward_few_outputs_rows_kernel(const T* x, const T* w,
                                                                                DeviceEpilogue<T> e, T* y, Dims d,
                                                                                int bands, int band, int cols) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  using C = compute_t<T>;
  extern __shared__ __align__(16) unsigned char smem_few_rows[];
  C* ws = reinterpret_cast<C*>(smem_few_rows);
  const int64_t g = blockIdx.y, K = d.cg * d.khkw;
  C* patch = ws + K * kOut;  // [kRowsChannels][rows][cols]
  for (int64_t i = threadIdx.x; i < K * kOut; i += blockDim.x) {
    const int64_t k = i / kOut, o = i % kOut;
    ws[i] = o < d.og ? cast<C>(w[(g * d.og + o) * K + k]) : C(0);
  }
  const int64_t img = blockIdx.x / bands;
  const int oy0 = static_cast<int>(blockIdx.x % bands) * band, ow = static_cast<int>(d.ow);
  const int band_rows = min(band, static_cast<int>(d.oh) - oy0);
  const int rows = band_rows + static_cast<int>((d.kh - 1) * d.dh), plane = rows * cols;
  const int kh = kTaps3 ? 3 : static_cast<int>(d.kh), kw = kTaps3 ? 3 : static_cast<int>(d.kw);
  const int dh = kTaps3 ? 1 : static_cast<int>(d.dh), dw = kTaps3 ? 1 : static_cast<int>(d.dw);
  // this thread's pixel: its top-left tap in the patch (-1 past the band)
  const int p = static_cast<int>(threadIdx.x), at = p < band_rows * ow ? p / ow * cols + p % ow : -1;
  const T* xg = x + (img * d.c + g * d.cg) * d.hw;
  C acc[kOut] = {};
  for (int64_t c0 = 0; c0 < d.cg; c0 += kRowsChannels) {
    const int nc = d.cg - c0 < kRowsChannels ? static_cast<int>(d.cg - c0) : kRowsChannels;
    __syncthreads();  // the weights are in; every thread is done with the last chunk
    for (int i = p; i < nc * plane; i += kRowsThreads) {
      const int c = i / plane, r = i % plane / cols, col = i % cols;
      const int iy = oy0 - static_cast<int>(d.ph) + r, ix = col - static_cast<int>(d.pw);
      patch[i] = iy >= 0 && iy < d.h && ix >= 0 && ix < d.w ? cast<C>(xg[(c0 + c) * d.hw + int64_t{iy} * d.w + ix])
                                                             : C(0);
    }
    __syncthreads();
    if (at < 0) continue;
    const C* wk = ws + c0 * d.khkw * kOut;  // the taps in (c, ky, kx) order
    for (int c = 0; c < nc; ++c)
#pragma unroll
      for (int ky = 0; ky < kh; ++ky) {
        const C* row = patch + c * plane + at + ky * dh * cols;
#pragma unroll
        for (int kx = 0; kx < kw; ++kx, wk += kOut) {
          const C v = row[kx * dw];
#pragma unroll
          for (int o = 0; o < kOut; ++o) acc[o] += v * wk[o];
        }
      }
  }
  if (at < 0) return;
  T* yp = y + (img * d.o + g * d.og) * d.ohw + int64_t{oy0} * ow + p;
#pragma unroll
  for (int o = 0; o < kOut; ++o)
    if (o < d.og) yp[o * d.ohw] = cast<T>(e(acc[o], g * d.og + o));
}

// ---- backward input, version 1: direct gather ----

template <class T>
__global__ void backward_input_direct_kernel(const T* gy, const T* w, T* gx, Dims d, int64_t total) {
  KILN_GRID_STRIDE(i, total) {
    const int64_t iw = i % d.w, r = i / d.w, ih = r % d.h, r2 = r / d.h;
    const int64_t c = r2 % d.c, img = r2 / d.c;
    const int64_t g = c / d.cg, cl = c % d.cg;
    const T* gyg = gy + (img * d.o + g * d.og) * d.ohw;  // grad_y planes of this group
    const T* wg = w + (g * d.og * d.cg + cl) * d.khkw;   // w[g*og + o, cl] at o = 0
    T acc = 0;
    for (int64_t o = 0; o < d.og; ++o) {
      for (int64_t ky = 0; ky < d.kh; ++ky) {
        // output row oi reads input row oi*sh - ph + ky*dh; it reads ih when that equals ih
        const int64_t ny = ih + d.ph - ky * d.dh;
        if (ny < 0 || ny % d.sh != 0 || ny / d.sh >= d.oh) continue;
        const int64_t oi = ny / d.sh;
        for (int64_t kx = 0; kx < d.kw; ++kx) {
          const int64_t nx = iw + d.pw - kx * d.dw;
          if (nx < 0 || nx % d.sw != 0 || nx / d.sw >= d.ow) continue;
          acc += gyg[o * d.ohw + oi * d.ow + nx / d.sw] * wg[o * d.cg * d.khkw + ky * d.kw + kx];
        }
      }
    }
    gx[i] = acc;
  }
}

// Launches `kernel` on a grid of BM x BN tiles over M x N, times groups * splits.
template <int BM, int BN, class Kernel, class P>
void launch_tiles(Kernel kernel, int threads, const P& p, int64_t groups, int64_t splits, int64_t k_per_split,
                  cudaStream_t stream, const char* op, int smem_bytes = 0) {
  if (p.M == 0 || p.N == 0) return;
  const int64_t gx = (p.M + BM - 1) / BM, gy = (p.N + BN - 1) / BN, gz = groups * splits;
  KILN_CHECK(gx < (int64_t{1} << 31) && gy <= 65535 && gz <= 65535, ShapeError, "cuda ", op,
             ": the problem is too large for one launch (", gx, " x ", gy, " x ", gz, " blocks)");
  kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(gz)), threads,
           smem_bytes, stream>>>(p, k_per_split, splits);
  KILN_CUDA_LAUNCH_CHECK(op);
}

template <class T, int BM, int BN, int BK, int TM, int TN, bool kPrefetch = false, class P>
void launch_gemm(const P& p, int64_t groups, int64_t splits, int64_t k_per_split, cudaStream_t stream,
                 const char* op) {
  launch_tiles<BM, BN>(implicit_gemm_kernel<T, BM, BN, BK, TM, TN, kPrefetch, P>, (BM / TM) * (BN / TN), p, groups,
                       splits, k_per_split, stream, op);
}

// The largest K range whose tap tables a tensor-core launch keeps in shared memory (32 KiB each);
// a longer forward runs the SIMT kernel, and the backward weight splits K at least this finely.
constexpr int64_t kMaxTcKRange = 2048;

// Launches the tensor-core kernel on BM x BN tiles; the dynamic shared memory (stages and tap
// tables) goes over the default 48 KB, which needs the opt-in, made at every launch (cheap; it only
// ever grows, check.h's allow_dynamic_smem says why).
template <int BM, int BN, Mma M, class P>
void launch_gemm_tc(const P& p, int64_t groups, int64_t splits, int64_t k_per_split, cudaStream_t stream,
                    const char* op) {
  using G = TcGemm<BM, BN, P>;
  auto* kernel = implicit_gemm_tc_kernel<G, M, P>;
  const int bytes = static_cast<int>(G::smem_bytes(std::min(k_per_split, p.K)));
  allow_dynamic_smem(kernel, bytes);
  launch_tiles<BM, BN>(kernel, G::THREADS, p, groups, splits, k_per_split, stream, op, bytes);
}

// ---- backward weight, version 5: a short reduction per output, the input rows in shared memory ----
//
// Where K = C/G*KH*KW is small (a first layer: the MNIST CNN's conv1 has 9 taps), the implicit
// GEMMs' slices of k are mostly empty, and versions 3 and 4 first pair their operands' rows. Here
// one output's K sums are a warp's registers. A block holds the input rows of a band of output
// rows of `images` images in shared memory (padding as zeros, as forward 8); each warp takes one
// output channel and adds, over the band's pixels, grad_y times the input under each tap, and
// (where the bias's gradient is wanted too) grad_y itself. Shuffles then add up the lanes, and each
// block writes its partial sums [split][O][K] (then [split][O] for the bias), which sum_splits
// adds in split order (deterministic).
//
// Two kernels walk the band. The window kernel, for the common first layers (3 x 3 taps of up to 3
// channels, 5 x 5 of one) where the row stride equals the row dilation: each lane walks a column
// of output pixels down the band and keeps the pixel's taps in registers. The next pixel down
// reads the same input rows but the first, moved up a row, and one new row: KW shared loads per
// channel where the taps kernel makes KH*KW. The taps kernel, for the rest: lanes on neighbouring
// pixels of the band, every tap loaded at every pixel.
//
// A first layer's relu: grad_y reaches a first layer as the gradient of its relu's output, which
// the layer above (conv2's backward input, version 12 in f32) does not mask (it would cost more
// than a pass: kernels/cuda/NOTES.md). Given relu_y, both kernels read it beside grad_y and take
// grad_y as 0 where relu_y <= 0, and the pass over the whole gradient that did it before is gone.
// The f32 CNN's step, one call against the pass (H200, ncu, docs/runs/2026-11-29-h200-relu-weight):
// at batch 512 the pass's 30.5 µs [fig cuda.conv2d.relu-weight.b512.old.unary.us] went and the
// window kernel went from 51.0 [fig cuda.conv2d.relu-weight.b512.old.window.us] to
// 64.7 [fig cuda.conv2d.relu-weight.b512.new.window.us], the step's kernel time from
// 996.2 [fig cuda.conv2d.relu-weight.b512.old.step.us] to 973.2 µs [fig cuda.conv2d.relu-weight.b512.new.step.us];
// at batch 64 6.2 [fig cuda.conv2d.relu-weight.b64.old.unary.us] went and the window took
// 2.7 µs [fig cuda.conv2d.relu-weight.b64.window-more.us] more.
constexpr int kRowsWeightTaps = 32, kRowsWeightWarps = 8, kRowsWeightUnroll = 4, kRowsWeightSplits = 256;
constexpr int kWindowRowsAhead = 8;  // grad_y loads a lane has in flight on its walk down a column
constexpr int64_t kRowsWeightSmem = 48 * 1024;

struct RowsWeightPlan {
  int band = 0, bands = 0;  // output rows a block, and bands an image
  int rows = 0, cols = 0;   // a band's input rows and columns (padding included)
  int images = 0;           // a block's images
  int64_t splits = 0;       // blocks along x: image chunks x bands (0: the version does not apply)
  int64_t smem = 0;
};

// Where a block of either kernel stands: its group, first image and first output row, and how
// many of each it has.
struct WeightBand {
  int64_t g, img0;
  int oy0, band_rows, images;
  __device__ WeightBand(const Dims& d, const RowsWeightPlan& plan)
      : g(blockIdx.z), img0(blockIdx.x / plan.bands * int64_t{plan.images}),
        oy0(static_cast<int>(blockIdx.x % plan.bands) * plan.band),
        band_rows(min(plan.band, static_cast<int>(d.oh) - oy0)),
        images(static_cast<int>(min(int64_t{plan.images}, d.n - img0))) {}
};

// Copies the band's input rows into patch [images][C/G][plan.rows][plan.cols], zeros where the
// taps read padding. Positions within the patch are below 2^21 (the shared memory holds 12288
// values), so div_small divides them exactly: an integer division by a value known only at run
// time costs about forty instructions.
template <class T>
__device__ void load_weight_band(compute_t<T>* patch, const T* x, const Dims& d, const RowsWeightPlan& plan,
                                 const WeightBand& b) {
  using C = compute_t<T>;
  const int rows = (b.band_rows - 1) * d.sh + static_cast<int>(d.kh - 1) * d.dh + 1;
  const int cg = static_cast<int>(d.cg), count = b.images * cg * plan.rows * plan.cols;
  const float inv_cols = 1.0f / static_cast<float>(plan.cols), inv_rows = 1.0f / static_cast<float>(plan.rows);
  const float inv_cg = 1.0f / static_cast<float>(cg);
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const int row = div_small(i, inv_cols), col = i - row * plan.cols;  // row of all images' planes
    const int plane = div_small(row, inv_rows), r = row - plane * plan.rows;
    const int img = div_small(plane, inv_cg), c = plane - img * cg;
    const int iy = b.oy0 * d.sh - d.ph + r, ix = col - d.pw;
    patch[i] = r < rows && iy >= 0 && iy < d.h && ix >= 0 && ix < d.w
                   ? cast<C>(x[((b.img0 + img) * d.c + b.g * d.cg + c) * d.hw + int64_t{iy} * d.w + ix])
                   : C(0);
  }
}

// Adds up the warp's lanes' sums of output o (acc[k] for tap k < K, then the bias's) and writes
// them to the block's partials.
template <int kTaps, class C>
__device__ void store_weight_partials(const C (&acc)[kTaps], C acc_bias, C* partials, bool bias, const Dims& d,
                                      int64_t g, int64_t o, int K) {
  auto lanes_sum = [](C v) {
#pragma unroll
    for (int s = 16; s > 0; s /= 2) v += __shfl_xor_sync(0xffffffffu, v, s);
    return v;
  };
  const bool lane0 = threadIdx.x % 32 == 0;
  C* out = partials + blockIdx.x * (d.o * (K + bias));
#pragma unroll
  for (int k = 0; k < kTaps; ++k) {
    const C v = lanes_sum(acc[k]);
    if (lane0 && k < K) out[(g * d.og + o) * K + k] = v;
  }
  if (bias) {
    const C v = lanes_sum(acc_bias);
    if (lane0) out[d.o * K + g * d.og + o] = v;
  }
}

// grad_y's element i, taken back through the relu whose output is relu where relu is not null: 0
// where relu[i] <= 0, as unary_backward(relu) makes it (a NaN in relu passes grad_y).
template <class T>
__device__ inline compute_t<T> grad_through(const T* gy, const T* relu, int64_t i) {
  using C = compute_t<T>;
  const C v = cast<C>(gy[i]);
  return relu != nullptr && cast<C>(relu[i]) <= C(0) ? C(0) : v;
}

// What both kernels start from: the block's band, its input rows in the patch (the block's shared
// memory, [images][C/G][rows][cols]), and this warp's output channel o, -1 past O/G (the warp has
// nothing to sum).
template <class T>
struct BandStart {
  compute_t<T>* patch;
  WeightBand b;
  int64_t o;
};
template <class T>
__device__ BandStart<T> weight_band_start(const T* x, const Dims& d, const RowsWeightPlan& plan) {
  extern __shared__ __align__(16) unsigned char smem_weight_rows[];
  auto* patch = reinterpret_cast<compute_t<T>*>(smem_weight_rows);
  const WeightBand b(d, plan);
  load_weight_band(patch, x, d, plan, b);
  __syncthreads();
  const int64_t o = blockIdx.y * int64_t{kRowsWeightWarps} + threadIdx.x / 32;
  return {patch, b, o < d.og ? o : -1};
}

// The taps kernel: lanes on neighbouring pixels (neighbouring columns), kRowsWeightUnroll grad_y
// loads in flight at once, each pixel's K taps read from the patch.
template <class T, int kTaps>
__global__ void __launch_bounds__(32 * kRowsWeightWarps) backward_weight_rows_kernel(const T* x, const T* gy,
                                                                                     const T* relu,
                                                                                     compute_t<T>* partials, bool bias,
                                                                                     Dims d, RowsWeightPlan plan) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  using C = compute_t<T>;
  const auto [patch, b, o] = weight_band_start(x, d, plan);
  if (o < 0) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  // tap k = (c, ky, kx) reads the patch this far from the pixel's top-left tap (0 past K)
  const int plane = plan.rows * plan.cols, per_image = static_cast<int>(d.cg) * plane;
  const int K = static_cast<int>(d.cg * d.khkw), kh = static_cast<int>(d.kh), kw = static_cast<int>(d.kw);
  int off[kTaps];
  int c = 0, ky = 0, kx = 0;
#pragma unroll
  for (int k = 0; k < kTaps; ++k) {
    off[k] = k < K ? c * plane + ky * d.dh * plan.cols + kx * d.dw : 0;
    if (++kx == kw) kx = 0, ++ky;
    if (ky == kh) ky = 0, ++c;
  }
  C acc[kTaps] = {}, acc_bias = 0;  // acc past K: sums of nothing useful, never written
  const int pixels = b.band_rows * static_cast<int>(d.ow), ow = static_cast<int>(d.ow), row_step = d.sh * plan.cols;
  const float inv_ow = 1.0f / static_cast<float>(d.ow);
  for (int img = 0; img < b.images; ++img) {
    const int64_t gp = ((b.img0 + img) * d.o + b.g * d.og + o) * d.ohw + int64_t{b.oy0} * ow;
    const C* pp = patch + img * per_image;
    for (int p0 = lane; p0 < pixels; p0 += 32 * kRowsWeightUnroll) {
      C gv[kRowsWeightUnroll];
      int at[kRowsWeightUnroll];
#pragma unroll
      for (int u = 0; u < kRowsWeightUnroll; ++u) {  // past the band: the last pixel, times 0
        const int p = p0 + 32 * u, q = min(p, pixels - 1), r = div_small(q, inv_ow);
        const C v = grad_through(gy, relu, gp + q);
        gv[u] = p < pixels ? v : C(0);
        at[u] = r * row_step + (q - r * ow) * d.sw;
      }
#pragma unroll
      for (int u = 0; u < kRowsWeightUnroll; ++u)
#pragma unroll
        for (int k = 0; k < kTaps; ++k) acc[k] += gv[u] * pp[at[u] + off[k]];
      if (bias)
#pragma unroll
        for (int u = 0; u < kRowsWeightUnroll; ++u) acc_bias += gv[u];
    }
  }
  store_weight_partials(acc, acc_bias, partials, bias, d, b.g, o, K);
}

// The window kernel: KH x KW taps (exactly) of up to kC channels, where d.sh == d.dh (or KH = 1).
// A lane walks a column of output pixels (image, ox) down the band, win[c][ky][kx] the taps of
// its pixel, kWindowRowsAhead grad_y loads ahead; lanes on neighbouring columns read grad_y's rows
// coalesced and the patch's rows without bank conflicts.
template <class T, int kC, int kKH, int kKW>
__global__ void __launch_bounds__(32 * kRowsWeightWarps) backward_weight_window_kernel(const T* x, const T* gy,
                                                                                       const T* relu,
                                                                                       compute_t<T>* partials, bool bias,
                                                                                       Dims d, RowsWeightPlan plan) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  using C = compute_t<T>;
  constexpr int kTaps = kC * kKH * kKW;  // tap (c, ky, kx) is k = (c * KH + ky) * KW + kx, as in w
  const auto [patch, b, o] = weight_band_start(x, d, plan);
  if (o < 0) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int cg = static_cast<int>(d.cg), plane = plan.rows * plan.cols, per_image = cg * plane;
  const int ow = static_cast<int>(d.ow), row_step = d.sh * plan.cols, tap_row = d.dh * plan.cols;
  const float inv_ow = 1.0f / static_cast<float>(d.ow);
  C acc[kTaps] = {}, acc_bias = 0;  // channels past C/G: sums of zeros, never written
  for (int j = lane; j < b.images * ow; j += 32) {
    const int img = div_small(j, inv_ow), ox = j - img * ow;
    // the column's grad_y (and relu_y), a row every ow
    const int64_t first = ((b.img0 + img) * d.o + b.g * d.og + o) * d.ohw + int64_t{b.oy0} * ow + ox;
    const T* gcol = gy + first;
    const T* rcol = relu != nullptr ? relu + first : nullptr;
    const C* pp = patch + img * per_image + ox * d.sw;  // output row y's tap (c, ky, kx):
    auto tap = [&](int c, int row, int kx) {            //   pp[c * plane + y * row_step + ky * tap_row + kx * dw]
      return kC == 1 || c < cg ? pp[c * plane + row + kx * d.dw] : C(0);
    };
    C win[kC][kKH][kKW];
    // rows 0 .. KH-2 of output row 0's taps, where the first step down expects them: one row lower
#pragma unroll
    for (int c = 0; c < kC; ++c)
#pragma unroll
      for (int ky = 0; ky + 1 < kKH; ++ky)
#pragma unroll
        for (int kx = 0; kx < kKW; ++kx) win[c][ky + 1][kx] = tap(c, ky * tap_row, kx);
    // one output row: the window moves down (its new last row y * row_step + (KH-1) * tap_row),
    // then every tap times the pixel's grad_y
    auto step = [&](int y, C g) {
#pragma unroll
      for (int c = 0; c < kC; ++c) {
#pragma unroll
        for (int ky = 0; ky + 1 < kKH; ++ky)
#pragma unroll
          for (int kx = 0; kx < kKW; ++kx) win[c][ky][kx] = win[c][ky + 1][kx];
#pragma unroll
        for (int kx = 0; kx < kKW; ++kx) win[c][kKH - 1][kx] = tap(c, y * row_step + (kKH - 1) * tap_row, kx);
#pragma unroll
        for (int ky = 0; ky < kKH; ++ky)
#pragma unroll
          for (int kx = 0; kx < kKW; ++kx) acc[(c * kKH + ky) * kKW + kx] += g * win[c][ky][kx];
      }
      acc_bias += g;
    };
    // kWindowRowsAhead rows' grad_y loads in flight, then their steps; the band's last rows the
    // same way, each load and step kept to the band (they were a load and a step at a time). With
    // that and the column's offsets in 32 bits, at batch 512 (bands unchanged) the kernel went from
    // 64.6 [fig cuda.conv2d.window-sums.b512.old.window.us] to 58.4 µs [fig cuda.conv2d.window-sums.b512.new.window.us]
    // in the f32 step (ncu, H200), the step from 975.0 [fig cuda.conv2d.window-sums.b512.old.step.us]
    // to 966.8 [fig cuda.conv2d.window-sums.b512.new.step.us], its sums from 10.4 [fig cuda.conv2d.window-sums.b512.old.sums.us]
    // to 8.2 [fig cuda.conv2d.window-sums.b512.new.sums.us].
    // Whole rounds of rows take no test at each load and step, and the column's pointers move down
    // a round at a time; then the band's last rows, each kept to the band. Against the rounds that
    // tested every row (a runtime `whole`), in the step (ncu, H200): at batch 512 f32
    // 59.26 [fig cuda.conv2d.window-rounds.f32.old.window.us] -> 46.48 µs [fig cuda.conv2d.window-rounds.f32.new.window.us],
    // bf16 37.94 [fig cuda.conv2d.window-rounds.bf16.old.window.us] -> 33.44 [fig cuda.conv2d.window-rounds.bf16.new.window.us];
    // at batch 64 (bands of 7 rows: no whole round) 12.95 [fig cuda.conv2d.window-rounds.b64.old.window.us]
    // -> 14.08 [fig cuda.conv2d.window-rounds.b64.new.window.us], slower, not understood (NOTES.md).
    // mnist-train, thousands of images a second: batch 512 f32 637.3 [fig cuda.conv2d.window-rounds.f32.old.images-per-s]
    // -> 646.7 [fig cuda.conv2d.window-rounds.f32.new.images-per-s], bf16 925 [fig cuda.conv2d.window-rounds.bf16.old.images-per-s]
    // -> 931 [fig cuda.conv2d.window-rounds.bf16.new.images-per-s], batch 64 332.1 [fig cuda.conv2d.window-rounds.b64.old.images-per-s]
    // -> 331.1 [fig cuda.conv2d.window-rounds.b64.new.images-per-s] (docs/runs/2026-11-30-h200-window-rounds).
    auto round = [&]<bool kWhole>(int y) {
      C gv[kWindowRowsAhead];
#pragma unroll
      for (int u = 0; u < kWindowRowsAhead; ++u)
        gv[u] = kWhole || y + u < b.band_rows ? grad_through(gcol, rcol, u * ow) : C(0);
#pragma unroll
      for (int u = 0; u < kWindowRowsAhead; ++u)
        if (kWhole || y + u < b.band_rows) step(y + u, gv[u]);
    };
    int y = 0;
    for (; y + kWindowRowsAhead <= b.band_rows; y += kWindowRowsAhead) {
      round.template operator()<true>(y);
      gcol += kWindowRowsAhead * ow;
      if (rcol != nullptr) rcol += kWindowRowsAhead * ow;
    }
    if (y < b.band_rows) round.template operator()<false>(y);
  }
  store_weight_partials(acc, acc_bias, partials, bias, d, b.g, o, cg * kKH * kKW);
}

// How many blocks of `kernel` (launched with `threads`) fit on one SM (registers, shared memory,
// threads), asked of the runtime once per instantiation and process (the first device's answer is
// kept: a process with several GPUs of different kinds would only get a worse split, never a
// wrong one).
template <auto kernel>
int blocks_per_sm(int threads, int smem_bytes = 0) {
  static std::atomic<int> cached{0};
  int b = cached.load(std::memory_order_relaxed);
  if (b > 0) return b;
  if (smem_bytes > 48 * 1024)
    allow_dynamic_smem(kernel, smem_bytes);
  KILN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, threads, smem_bytes));
  b = std::max(b, 1);
  cached.store(b, std::memory_order_relaxed);
  return b;
}

// How backward_weight splits its reduction for a BM x BN tile: the number of splits and the K
// range of each (a multiple of the K slice).
struct WeightPlan {
  int64_t splits = 1, k_per_split = 0;
};

// 32 x 32 tiles when both sides of grad_w's GEMM fit one (conv1 of MNIST: 32 x 9).
bool weight_small(const Geometry& g) { return g.o / g.groups <= 32 && (g.c / g.groups) * g.kh * g.kw <= 32; }

// Enough splits that the launch is one full wave: blocks_per_sm (the occupancy of the kernel that
// will run) times the SM count, over the number of output tiles; and splits of at most max_range.
WeightPlan plan_weight(const Geometry& g, int64_t bm, int64_t bn, int64_t blocks_per_sm, int64_t max_range) {
  const Dims d = dims_of(g);
  WeightPlan plan;
  const int64_t M = d.og, N = d.cg * d.khkw, K = d.n * d.ohw;
  const int64_t tiles = ((M + bm - 1) / bm) * ((N + bn - 1) / bn) * g.groups;
  const int64_t target = blocks_per_sm * static_cast<int64_t>(device_attribute(cudaDevAttrMultiProcessorCount));
  // Each split gets at least 16 K slices, so that the partials stay a small share of the work.
  const int64_t most = std::max<int64_t>(1, K / (16 * kSliceK));
  plan.splits = std::clamp<int64_t>((target + tiles - 1) / tiles, 1,
                                    std::max<int64_t>(1, std::min<int64_t>(most, 65535 / g.groups)));
  const int64_t per = std::min((K + plan.splits - 1) / plan.splits, max_range);
  plan.k_per_split = std::max<int64_t>(kSliceK, (per + kSliceK - 1) / kSliceK * kSliceK);
  plan.splits = std::max<int64_t>(1, (K + plan.k_per_split - 1) / plan.k_per_split);
  return plan;
}

// The grad_w GEMMs, each a tile shape, a kernel, and the longest K range it takes: SIMT with
// TM x TN thread tiles, or on the tensor cores (64 x 64 tiles of 32 x 32 warp tiles).
template <class T, int BM_, int BN_, int TM, int TN>
struct SimtWeightGemm {
  static constexpr int BM = BM_, BN = BN_;
  static constexpr int64_t kMaxRange = int64_t{1} << 62;
  static int blocks() {
    return blocks_per_sm<implicit_gemm_kernel<T, BM, BN, kSliceK, TM, TN, false, BackwardWeightProblem<T>>>(
        (BM / TM) * (BN / TN));
  }
  static void run(const T* x, const T* grad_y, compute_t<T>* out, const Dims& d, int64_t groups,
                  const WeightPlan& plan, cudaStream_t stream) {
    const BackwardWeightProblem<T> p{x, grad_y, out, d, d.og, d.cg * d.khkw, d.n * d.ohw};
    launch_gemm<T, BM, BN, kSliceK, TM, TN>(p, groups, plan.splits, plan.k_per_split, stream, "conv2d_backward_weight");
  }
};
template <Mma M>
struct TensorCoreWeightGemm {
  static constexpr int BM = 64, BN = 64;
  static constexpr int64_t kMaxRange = kMaxTcKRange;
  using G = TcGemm<BM, BN, TapWeight>;
  // The occupancy at the tables of a 1024-long range (a typical split): a guide for the split count.
  static int blocks() {
    return blocks_per_sm<implicit_gemm_tc_kernel<G, M, TapWeight>>(G::THREADS, static_cast<int>(G::smem_bytes(1024)));
  }
  static void run(const float* x, const float* grad_y, float* out, const Dims& d, int64_t groups,
                  const WeightPlan& plan, cudaStream_t stream) {
    const TapWeight p{grad_y, x, out, d, d.og, d.cg * d.khkw, d.n * d.ohw, static_cast<int>(d.h),
                      static_cast<int>(d.w)};
    launch_gemm_tc<BM, BN, M>(p, groups, plan.splits, plan.k_per_split, stream, "conv2d_backward_weight");
  }
};

// The split plan of one weight-gradient GEMM.
template <class Gemm>
WeightPlan weight_plan(const Geometry& g) {
  return plan_weight(g, Gemm::BM, Gemm::BN, Gemm::blocks(), Gemm::kMaxRange);
}

// Whether there is a gradient to compute: false for an empty layer, and for an empty batch, whose
// gradient it zeroes.
template <class T>
bool weight_nonempty(T* grad_w, const Geometry& g, cudaStream_t stream) {
  const int64_t count = g.o * (g.c / g.groups) * g.kh * g.kw;
  if (count == 0) return false;
  if (g.n * g.oh * g.ow == 0) {
    KILN_CUDA_CHECK(cudaMemsetAsync(grad_w, 0, sizeof(T) * static_cast<size_t>(count), stream));
    return false;
  }
  return true;
}

// The workspace (elements) one GEMM needs: the partials when it splits.
template <class Gemm>
int64_t weight_workspace_for(const Geometry& g) {
  const WeightPlan plan = weight_plan<Gemm>(g);
  return plan.splits > 1 ? plan.splits * g.o * (g.c / g.groups) * g.kh * g.kw : 0;
}

// grad_w by one of the GEMMs above: split-K GEMM, then the ordered sum.
template <class Gemm, class T>
void weight_gemm(const T* x, const T* grad_y, T* grad_w, T* workspace, const Geometry& g, cudaStream_t stream) {
  if (!weight_nonempty(grad_w, g, stream)) return;
  const Dims d = dims_of(g);
  const int64_t count = d.o * d.cg * d.khkw;
  const WeightPlan plan = weight_plan<Gemm>(g);
  KILN_CHECK(plan.splits == 1 || workspace != nullptr, ValueError,
             "cuda conv2d_backward_weight: needs a workspace of ", plan.splits * count, " elements");
  Gemm::run(x, grad_y, plan.splits > 1 ? workspace : grad_w, d, g.groups, plan, stream);
  if (plan.splits > 1) {
    sum_splits(workspace, grad_w, count, plan.splits, stream);
    KILN_CUDA_LAUNCH_CHECK("conv2d_backward_weight");
  }
}

// The forward GEMM at the tile that fits O/G: 128 x 64, or 128 x 32 / 128 x 16 when a wider tile
// would be mostly empty columns (the backward input as a forward convolution has N = C/G, which
// is 1 for the first MNIST layer).
// kWide: the 128 x 64 tile with 8 x 8 thread tiles (128 threads) instead of 8 x 4 (256 threads).
template <class T, bool kPrefetch, bool kWide = false>
void forward_gemm(const ForwardProblem<T>& p, int64_t groups, cudaStream_t stream, const char* op) {
  if (kWide && p.N > 32) launch_gemm<T, 128, 64, kSliceK, 8, 8, kPrefetch>(p, groups, 1, p.K, stream, op);
  else if (p.N > 32) launch_gemm<T, 128, 64, kSliceK, 8, 4, kPrefetch>(p, groups, 1, p.K, stream, op);
  else if (p.N > 16) launch_gemm<T, 128, 32, kSliceK, 8, 4, kPrefetch>(p, groups, 1, p.K, stream, op);
  else launch_gemm<T, 128, 16, kSliceK, 8, 2, kPrefetch>(p, groups, 1, p.K, stream, op);
}

// The forward GEMM on the tensor cores where O/G > 16 (128 x 64 or 128 x 32 tiles of 32 x 32 warp
// tiles), else version 3's: a 16-column tile would leave most of each mma empty. f64 always runs
// version 3 (the tensor-core kernels are f32).
template <class T>
void forward_tc(const ForwardProblem<T>& p, int64_t groups, TensorMath math, cudaStream_t stream, const char* op) {
  if constexpr (std::is_same_v<T, float>) {
    const bool exact = math == TensorMath::tf32x3;
    const TapForward tp{p.x, p.w, p.epilogue, p.y, p.d, p.M, p.N, p.K, static_cast<int>(p.d.h), static_cast<int>(p.d.w)};
    if (p.N > 32 && p.K <= kMaxTcKRange) {
      return exact ? launch_gemm_tc<128, 64, Mma::tf32x3>(tp, groups, 1, p.K, stream, op)
                   : launch_gemm_tc<128, 64, Mma::tf32>(tp, groups, 1, p.K, stream, op);
    }
    if (p.N > 16 && p.K <= kMaxTcKRange) {
      return exact ? launch_gemm_tc<128, 32, Mma::tf32x3>(tp, groups, 1, p.K, stream, op)
                   : launch_gemm_tc<128, 32, Mma::tf32>(tp, groups, 1, p.K, stream, op);
    }
  }
  forward_gemm<T, true>(p, groups, stream, op);
}

// Forward version 6 at the kOut that covers O/G (1, 2, 4, 8 or 16); false when it does not apply:
// O/G > 16, or the group's weights would not fit 48 KB of shared memory.
constexpr int64_t kFewOutputsMax = 16;
template <class T>
bool forward_few(const ForwardProblem<T>& p, int64_t groups, cudaStream_t stream, const char* op) {
  const Dims& d = p.d;
  if (d.og > kFewOutputsMax) return false;
  const int k_out = d.og <= 1 ? 1 : d.og <= 2 ? 2 : d.og <= 4 ? 4 : d.og <= 8 ? 8 : 16;
  const int64_t bytes = p.K * k_out * static_cast<int64_t>(sizeof(T));
  if (bytes > 48 * 1024) return false;
  const int64_t pixels = d.n * d.ohw;
  if (pixels == 0 || d.og == 0) return true;
  KILN_CHECK(groups <= 65535, ShapeError, "cuda ", op, ": too many groups for one launch (", groups, ")");
  const dim3 grid(std::min<unsigned>(blocks_for(pixels), 8192u), static_cast<unsigned>(groups));
  auto launch = [&](auto kernel) {
    kernel<<<grid, kThreads, static_cast<size_t>(bytes), stream>>>(p.x, p.w, p.epilogue, p.y, d, pixels);
  };
  switch (k_out) {
    case 1: launch(forward_few_outputs_kernel<T, 1>); break;
    case 2: launch(forward_few_outputs_kernel<T, 2>); break;
    case 4: launch(forward_few_outputs_kernel<T, 4>); break;
    case 8: launch(forward_few_outputs_kernel<T, 8>); break;
    default: launch(forward_few_outputs_kernel<T, 16>); break;
  }
  KILN_CUDA_LAUNCH_CHECK(op);
  return true;
}

// Forward version 8 at the kOut that covers O/G; false when it does not apply: stride > 1, O/G >
// 32, rows wider than a block, or the weights and the patch over 48 KB of shared memory.
template <class T>
bool forward_few_rows(const ForwardProblem<T>& p, int64_t groups, cudaStream_t stream, const char* op) {
  const Dims& d = p.d;
  if (d.og > kRowsOutputsMax || d.sh != 1 || d.sw != 1) return false;
  const int k_out = d.og <= 1 ? 1 : d.og <= 2 ? 2 : d.og <= 4 ? 4 : d.og <= 8 ? 8 : d.og <= 16 ? 16 : 32;
  // bands of whole rows, at most one pixel per thread, even in height
  if (d.ow > kRowsThreads) return false;
  const int64_t bands = (d.oh + kRowsThreads / d.ow - 1) / (kRowsThreads / d.ow);
  const int64_t band = (d.oh + bands - 1) / bands, cols = d.ow + (d.kw - 1) * d.dw;
  const int64_t rows = band + (d.kh - 1) * d.dh;
  const int64_t bytes = (p.K * k_out + kRowsChannels * rows * cols) * static_cast<int64_t>(sizeof(compute_t<T>));
  if (bytes > 48 * 1024) return false;
  if (d.n * d.ohw == 0 || d.og == 0) return true;
  const int64_t blocks = d.n * ((d.oh + band - 1) / band);
  KILN_CHECK(groups <= 65535 && blocks < (int64_t{1} << 31), ShapeError, "cuda ", op,
             ": the problem is too large for one launch (", blocks, " x ", groups, " blocks)");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(groups));
  const int n_bands = static_cast<int>((d.oh + band - 1) / band);
  const bool taps3 = d.kh == 3 && d.kw == 3 && d.dh == 1 && d.dw == 1;
  auto launch = [&]<int kOut>() {
    auto* kernel =
        taps3 ? forward_few_outputs_rows_kernel<T, kOut, true> : forward_few_outputs_rows_kernel<T, kOut, false>;
    launch_dependent(kernel, grid, kRowsThreads, static_cast<size_t>(bytes), stream, p.x, p.w, p.epilogue, p.y, d,
                     n_bands, static_cast<int>(band), static_cast<int>(cols));
  };
  switch (k_out) {
    case 1: launch.template operator()<1>(); break;
    case 2: launch.template operator()<2>(); break;
    case 4: launch.template operator()<4>(); break;
    case 8: launch.template operator()<8>(); break;
    case 16: launch.template operator()<16>(); break;
    default: launch.template operator()<32>(); break;
  }
  KILN_CUDA_LAUNCH_CHECK(op);
  return true;
}

// w' [C, O/G, KH, KW] from w [O, C/G, KH, KW]: w'[g*cg + c, o, kh, kw] = w[g*og + o, c, KH-1-kh, KW-1-kw].
template <class T>
__global__ void flip_weights_kernel(const T* w, T* wt, Dims d, int64_t total) {
  KILN_GRID_STRIDE(i, total) {
    const int64_t kx = i % d.kw, r = i / d.kw, ky = r % d.kh, r2 = r / d.kh;
    const int64_t o = r2 % d.og, c = r2 / d.og;  // c: the global input channel
    const int64_t g = c / d.cg, cl = c % d.cg;
    wt[i] = w[((g * d.og + o) * d.cg + cl) * d.khkw + (d.kh - 1 - ky) * d.kw + (d.kw - 1 - kx)];
  }
}

}  // namespace

// ---- the versions (conv2d.cuh) ----

bool backward_input_uses_direct(const Geometry& g) { return g.c / g.groups <= 8; }

bool backward_input_as_forward_applies(const Geometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.dilation_h * (g.kh - 1) - g.pad_h >= 0 &&
         g.dilation_w * (g.kw - 1) - g.pad_w >= 0;
}

Geometry as_forward(const Geometry& g) {
  Geometry f;
  f.n = g.n, f.c = g.o, f.h = g.oh, f.w = g.ow;
  f.o = g.c, f.kh = g.kh, f.kw = g.kw;
  f.oh = g.h, f.ow = g.w;
  f.pad_h = g.dilation_h * (g.kh - 1) - g.pad_h, f.pad_w = g.dilation_w * (g.kw - 1) - g.pad_w;
  f.dilation_h = g.dilation_h, f.dilation_w = g.dilation_w;
  f.groups = g.groups;
  return f;
}

namespace {

// Version 7's block: 128 output pixels; its plan where it runs, else an empty plan (chunks = 0,
// smem = 0): stride 1, and two blocks' shared memory fit an SM (the patch grows with the width,
// the packed weights with the kernel's taps), and every offset fits an int.
constexpr int kPatchBM = 128;
constexpr int64_t kPatchMaxSmem = 110 * 1024;
PatchPlan patch_plan_for(const Geometry& f) {
  if (f.stride_h != 1 || f.stride_w != 1 || f.n * f.o * f.oh * f.ow == 0) return {};
  const Dims d = dims_of(f);
  const PatchPlan plan = patch_plan(d, kPatchBM, patch_bn(d.og));
  const bool fits = plan.smem <= kPatchMaxSmem && kPatchChannels * d.hw < (int64_t{1} << 31) &&
                    d.ohw < (int64_t{1} << 31);
  return fits ? plan : PatchPlan{};
}

// Version 7's packed weights (elements) under `plan`, 0 where it does not run.
int64_t packed_weights(const Geometry& f, const PatchPlan& plan) {
  return plan.smem == 0 ? 0 : f.groups * plan.chunks * kPatchChannels * f.kh * f.kw * plan.np;
}
int64_t patch_weights(const Geometry& f) { return packed_weights(f, patch_plan_for(f)); }

}  // namespace

int64_t backward_input_as_forward_workspace(const Geometry& g) {
  const int64_t flipped = g.o * (g.c / g.groups) * g.kh * g.kw;  // versions 3-6; version 7 packs
  return backward_input_as_forward_applies(g) ? std::max(flipped, patch_weights(as_forward(g))) : flipped;
}

template <class T>
void forward_direct(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, cudaStream_t stream) {
  const int64_t total = g.n * g.o * g.oh * g.ow;
  if (total == 0) return;
  forward_direct_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(x, w, e, y, dims_of(g), total);
  KILN_CUDA_LAUNCH_CHECK("conv2d");
}

template <class T>
void forward_implicit_gemm(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, cudaStream_t stream) {
  const Dims d = dims_of(g);
  forward_gemm<T, false>({x, w, e, y, d, d.n * d.ohw, d.og, d.cg * d.khkw}, g.groups, stream, "conv2d");
}

template <class T>
void forward_implicit_gemm_prefetch(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g,
                                    cudaStream_t stream) {
  const Dims d = dims_of(g);
  forward_gemm<T, true>({x, w, e, y, d, d.n * d.ohw, d.og, d.cg * d.khkw}, g.groups, stream, "conv2d");
}

template <class T>
void forward_implicit_gemm_wide(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, cudaStream_t stream) {
  const Dims d = dims_of(g);
  forward_gemm<T, true, true>({x, w, e, y, d, d.n * d.ohw, d.og, d.cg * d.khkw}, g.groups, stream, "conv2d");
}

template <class T>
void backward_input_direct(const T* grad_y, const T* w, T* grad_x, const Geometry& g, cudaStream_t stream) {
  const int64_t total = g.n * g.c * g.h * g.w;
  if (total == 0) return;
  backward_input_direct_kernel<T><<<blocks_for(total), kThreads, 0, stream>>>(grad_y, w, grad_x, dims_of(g), total);
  KILN_CUDA_LAUNCH_CHECK("conv2d_backward_input");
}

template <class T>
void backward_input_implicit_gemm(const T* grad_y, const T* w, T* grad_x, const Geometry& g, cudaStream_t stream) {
  const Dims d = dims_of(g);
  const BackwardInputProblem<T> p{grad_y, w, grad_x, d, d.n * d.hw, d.cg, d.og * d.khkw};
  if (d.cg > 32) launch_gemm<T, 128, 64, kSliceK, 8, 4>(p, g.groups, 1, p.K, stream, "conv2d_backward_input");
  else launch_gemm<T, 128, 32, kSliceK, 8, 4>(p, g.groups, 1, p.K, stream, "conv2d_backward_input");
}

// With stride 1, grad_x[n, c, i, j] = sum_{o, kh, kw} w[o, c, kh, kw] * gy[n, o, i + ph - kh*dh, j + pw - kw*dw].
// Put kh = KH-1-kh': the row read is i - ph' + kh'*dh with ph' = dh*(KH-1) - ph, which is the
// forward convolution of gy (as the input, O channels) with w' (C output channels, O/G inputs
// each) at padding ph', dilation dh, stride 1. Its output height is
// OH + 2 ph' - dh (KH-1) = (H + 2 ph - dh (KH-1)) + dh (KH-1) - 2 ph = H.
namespace {
// run(problem, groups, op) runs the forward GEMM.
template <class T, class Run>
void input_as_forward(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g, cudaStream_t stream,
                      Run run) {
  checked_forward_form(g);
  const int64_t count = g.o * (g.c / g.groups) * g.kh * g.kw;  // w', the flipped weights
  KILN_CHECK(count == 0 || workspace != nullptr, ValueError, "cuda conv2d_backward_input: needs a workspace of ",
             backward_input_as_forward_workspace(g), " elements");
  if (count > 0) {
    flip_weights_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(w, workspace, dims_of(g), count);
    KILN_CUDA_LAUNCH_CHECK("conv2d_backward_input");
  }
  const Geometry f = as_forward(g);
  const Dims d = dims_of(f);
  run(ForwardProblem<T>{grad_y, workspace, DeviceEpilogue<T>{}, grad_x, d, d.n * d.ohw, d.og, d.cg * d.khkw}, f.groups,
      "conv2d_backward_input");
}
}  // namespace

template <class T>
void backward_input_as_forward(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                               cudaStream_t stream) {
  input_as_forward(grad_y, w, grad_x, workspace, g, stream,
                   [&](const ForwardProblem<T>& p, int64_t groups, const char* op) {
                     forward_gemm<T, true>(p, groups, stream, op);
                   });
}

template <class T>
void backward_input_as_forward_wide(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                                    cudaStream_t stream) {
  input_as_forward(grad_y, w, grad_x, workspace, g, stream,
                   [&](const ForwardProblem<T>& p, int64_t groups, const char* op) {
                     forward_gemm<T, true, true>(p, groups, stream, op);
                   });
}

template <class T>
void backward_input_tensor_cores(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                                 TensorMath math, cudaStream_t stream) {
  input_as_forward(grad_y, w, grad_x, workspace, g, stream,
                   [&](const ForwardProblem<T>& p, int64_t groups, const char* op) {
                     forward_tc<T>(p, groups, math, stream, op);
                   });
}

namespace {
// Version 7's kernel at math M on the view f it reads (the forward view; for bf16 the paired
// one), x and the packed weights as 32-bit elements, at the plan's tile.
template <Mma M, class Y>
void patch_launch(const float* x, const float* packed, const DeviceEpilogue<Y>& e, Y* y, const Geometry& f,
                  const PatchPlan& plan, cudaStream_t stream, const char* op) {
  const Dims d = dims_of(f);
  const int tiles = static_cast<int>((d.ohw + kPatchBM - 1) / kPatchBM);
  const PatchArgs<Y> args{x, packed, e, y, d, plan, tiles};
  auto launch = [&]<int BN>() {
    using G = PatchTile<kPatchBM, BN>;
    auto* kernel = patch_conv_kernel<G, M, Y>;
    const int64_t gx = d.n * tiles, gy = (d.og + BN - 1) / BN;
    KILN_CHECK(gx < (int64_t{1} << 31) && gy <= 65535 && f.groups <= 65535, ShapeError, "cuda ", op,
               ": the problem is too large for one launch (", gx, " x ", gy, " x ", f.groups, " blocks)");
    const int bytes = static_cast<int>(plan.smem);
    allow_dynamic_smem(kernel, bytes);
    kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(f.groups)), G::THREADS,
             bytes, stream>>>(args);
    KILN_CUDA_LAUNCH_CHECK(op);
  };
  if (patch_bn(d.og) == 64) launch.template operator()<64>();
  else launch.template operator()<32>();
}

// Version 7 in f32 on the forward view f: packs w (flip: the layer's own weights, for the
// backward input) into `packed` and runs the patch kernel.
template <Mma M>
void patch_forward(const float* x, const float* w, bool flip, float* packed, const DeviceEpilogue<float>& e, float* y,
                   const Geometry& f, const PatchPlan& plan, cudaStream_t stream, const char* op) {
  const int64_t count = packed_weights(f, plan);
  pack_patch_weights_kernel<float, float><<<blocks_for(count), kThreads, 0, stream>>>(w, packed, dims_of(f), plan,
                                                                                       flip, count);
  KILN_CUDA_LAUNCH_CHECK(op);
  patch_launch<M>(x, packed, e, y, f, plan, stream, op);
}
}  // namespace

int64_t forward_patch_workspace(const Geometry& g) { return patch_weights(g); }

template <class T>
void forward_patch(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, T* workspace, const Geometry& g,
                   TensorMath math, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    const PatchPlan plan = patch_plan_for(g);
    if (plan.smem > 0) {
      KILN_CHECK(workspace != nullptr, ValueError, "cuda conv2d: needs a workspace of ", patch_weights(g), " elements");
      if (math == TensorMath::tf32x3)
        patch_forward<Mma::tf32x3>(x, w, false, workspace, e, y, g, plan, stream, "conv2d");
      else
        patch_forward<Mma::tf32>(x, w, false, workspace, e, y, g, plan, stream, "conv2d");
      return;
    }
  }
  forward_tensor_cores<T>(x, w, e, y, g, math, stream);
}

template <class T>
void backward_input_patch(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g, TensorMath math,
                          cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    const PatchPlan plan = backward_input_as_forward_applies(g) ? patch_plan_for(as_forward(g)) : PatchPlan{};
    if (plan.smem > 0) {
      KILN_CHECK(workspace != nullptr, ValueError, "cuda conv2d_backward_input: needs a workspace of ",
                 backward_input_as_forward_workspace(g), " elements");
      const Geometry f = as_forward(g);
      if (math == TensorMath::tf32x3)
        patch_forward<Mma::tf32x3>(grad_y, w, true, workspace, {}, grad_x, f, plan, stream, "conv2d_backward_input");
      else
        patch_forward<Mma::tf32>(grad_y, w, true, workspace, {}, grad_x, f, plan, stream, "conv2d_backward_input");
      return;
    }
  }
  backward_input_tensor_cores<T>(grad_y, w, grad_x, workspace, g, math, stream);
}

// Enough for every version at either dtype (their occupancies, hence their splits, differ).
int64_t backward_weight_workspace(const Geometry& g) {
  if (weight_small(g))
    return std::max(weight_workspace_for<SimtWeightGemm<float, 32, 32, 4, 4>>(g),
                    weight_workspace_for<SimtWeightGemm<double, 32, 32, 4, 4>>(g));
  return std::max({weight_workspace_for<SimtWeightGemm<float, 64, 64, 4, 4>>(g),
                   weight_workspace_for<SimtWeightGemm<double, 64, 64, 4, 4>>(g),
                   weight_workspace_for<SimtWeightGemm<float, 64, 128, 8, 8>>(g),
                   weight_workspace_for<SimtWeightGemm<double, 64, 128, 8, 8>>(g),
                   weight_workspace_for<TensorCoreWeightGemm<Mma::tf32x3>>(g),
                   weight_workspace_for<TensorCoreWeightGemm<Mma::tf32>>(g)});
}

template <class T>
void backward_weight_implicit_gemm(const T* x, const T* grad_y, T* grad_w, T* workspace, const Geometry& g,
                                   cudaStream_t stream) {
  if (weight_small(g)) weight_gemm<SimtWeightGemm<T, 32, 32, 4, 4>>(x, grad_y, grad_w, workspace, g, stream);
  else weight_gemm<SimtWeightGemm<T, 64, 64, 4, 4>>(x, grad_y, grad_w, workspace, g, stream);
}

template <class T>
void backward_weight_implicit_gemm_wide(const T* x, const T* grad_y, T* grad_w, T* workspace, const Geometry& g,
                                        cudaStream_t stream) {
  if (weight_small(g)) weight_gemm<SimtWeightGemm<T, 32, 32, 4, 4>>(x, grad_y, grad_w, workspace, g, stream);
  else weight_gemm<SimtWeightGemm<T, 64, 128, 8, 8>>(x, grad_y, grad_w, workspace, g, stream);
}

template <class T>
void backward_weight_tensor_cores(const T* x, const T* grad_y, T* grad_w, T* workspace, const Geometry& g,
                                  TensorMath math, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    if (!weight_small(g)) {
      return math == TensorMath::tf32x3
                 ? weight_gemm<TensorCoreWeightGemm<Mma::tf32x3>>(x, grad_y, grad_w, workspace, g, stream)
                 : weight_gemm<TensorCoreWeightGemm<Mma::tf32>>(x, grad_y, grad_w, workspace, g, stream);
    }
  }
  backward_weight_implicit_gemm_wide<T>(x, grad_y, grad_w, workspace, g, stream);
}

template <class T>
void forward_few_outputs(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, cudaStream_t stream) {
  const Dims d = dims_of(g);
  const ForwardProblem<T> p{x, w, e, y, d, d.n * d.ohw, d.og, d.cg * d.khkw};
  if (!forward_few(p, g.groups, stream, "conv2d")) forward_gemm<T, true>(p, g.groups, stream, "conv2d");
}

template <class T>
void backward_input_few_outputs(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                                cudaStream_t stream) {
  input_as_forward(grad_y, w, grad_x, workspace, g, stream,
                   [&](const ForwardProblem<T>& p, int64_t groups, const char* op) {
                     if (!forward_few(p, groups, stream, op)) forward_gemm<T, true>(p, groups, stream, op);
                   });
}

template <class T>
bool forward_few_outputs_rows_applies(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g,
                                      cudaStream_t stream) {
  const Dims d = dims_of(g);
  return forward_few_rows(ForwardProblem<T>{x, w, e, y, d, d.n * d.ohw, d.og, d.cg * d.khkw}, g.groups, stream,
                          "conv2d");
}

template <class T>
void forward_few_outputs_rows(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g,
                              cudaStream_t stream) {
  if (!forward_few_outputs_rows_applies(x, w, e, y, g, stream)) forward_few_outputs<T>(x, w, e, y, g, stream);
}

template <class T>
void backward_input_few_outputs_rows(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                                     cudaStream_t stream) {
  input_as_forward(grad_y, w, grad_x, workspace, g, stream,
                   [&](const ForwardProblem<T>& p, int64_t groups, const char* op) {
                     if (!forward_few_rows(p, groups, stream, op) && !forward_few(p, groups, stream, op))
                       forward_gemm<T, true>(p, groups, stream, op);
                   });
}

// Version 5's plan for sums in `csize`-byte values: the tallest band of output rows whose input
// rows fit the shared memory, and as many images a block as keep about kRowsWeightSplits splits.
RowsWeightPlan rows_weight_plan(const Geometry& g, int64_t csize) {
  const Dims d = dims_of(g);
  if (d.cg * d.khkw > kRowsWeightTaps || d.n * d.o * d.ohw == 0) return {};
  RowsWeightPlan p;
  p.cols = static_cast<int>((d.ow - 1) * d.sw + (d.kw - 1) * d.dw + 1);
  const int64_t fit_rows = kRowsWeightSmem / (d.cg * p.cols * csize), reach = (d.kh - 1) * d.dh + 1;
  if (fit_rows < reach) return {};
  p.band = static_cast<int>(std::min(d.oh, (fit_rows - reach) / d.sh + 1));
  // Few images (a small batch): shorter bands, so that images x bands reaches kRowsWeightSplits
  // where the rows allow it. conv1 at batch 64 ran as 64 splits of whole images, 256 blocks for
  // 132 SMs, each warp walking 26 rows in four rounds of loads (ncu: under a quarter of its warps
  // resident, docs/runs/2026-11-29-h200-window-ncu); as 256 splits of 7 rows, with the sum of
  // many splits on more threads (sum_splits), in the f32 step (ncu, H200,
  // docs/runs/2026-11-29-h200-window-sums): the window kernel 18.4 [fig cuda.conv2d.window-sums.b64.old.window.us]
  // -> 12.9 µs [fig cuda.conv2d.window-sums.b64.new.window.us], the step's sums
  // 7.6 [fig cuda.conv2d.window-sums.b64.old.sums.us] -> 8.2 [fig cuda.conv2d.window-sums.b64.new.sums.us],
  // the step 264.9 [fig cuda.conv2d.window-sums.b64.old.step.us] -> 259.9 µs [fig cuda.conv2d.window-sums.b64.new.step.us]
  // of kernels; epochs 2 and 3 of four runs 0.2204 [fig cuda.conv2d.window-epochs.b64.old.epoch]
  // -> 0.2184 s [fig cuda.conv2d.window-epochs.b64.new.epoch] (docs/runs/2026-11-29-h200-window-epochs).
  // Alone in kernel-bench, whose repeated calls leave grad_y in L2, the weight gradient is the
  // slower: 10.2 [fig cuda.conv2d.window-sums.bench-b64.old.us] -> 13.0 µs [fig cuda.conv2d.window-sums.bench-b64.new.us].
  if (const int64_t bands_wanted = (kRowsWeightSplits + d.n - 1) / d.n; bands_wanted > 1)
    p.band = static_cast<int>(std::min<int64_t>(p.band, std::max<int64_t>(1, (d.oh + bands_wanted - 1) / bands_wanted)));
  p.rows = static_cast<int>((p.band - 1) * d.sh + reach);
  p.bands = static_cast<int>((d.oh + p.band - 1) / p.band);
  const int64_t image_bytes = d.cg * p.rows * p.cols * csize;
  p.images = static_cast<int>(std::clamp<int64_t>((d.n * p.bands + kRowsWeightSplits - 1) / kRowsWeightSplits, 1,
                                                  kRowsWeightSmem / image_bytes));
  p.splits = (d.n + p.images - 1) / p.images * p.bands;
  p.smem = p.images * image_bytes;
  return p;
}

template <class T>
int64_t backward_weight_rows_workspace(const Geometry& g) {
  const int64_t csize = sizeof(compute_t<T>);
  return rows_weight_plan(g, csize).splits * g.o * ((g.c / g.groups) * g.kh * g.kw + 1) * csize;
}

template <class T>
void backward_weight_rows(const T* x, const T* grad_y, T* grad_w, void* workspace, const Geometry& g,
                          cudaStream_t stream, T* grad_b, const T* relu_y) {
  using C = compute_t<T>;
  const RowsWeightPlan plan = rows_weight_plan(g, sizeof(C));
  const Dims d = dims_of(g);
  KILN_CHECK(plan.splits > 0, ValueError, "cuda conv2d_backward_weight: version 5 needs C/G*KH*KW <= ",
             kRowsWeightTaps, " (got ", d.cg * d.khkw, ") and one output row's input rows within ", kRowsWeightSmem,
             " bytes of shared memory");
  KILN_CHECK(workspace != nullptr, ValueError, "cuda conv2d_backward_weight: needs a workspace of ",
             backward_weight_rows_workspace<T>(g), " bytes");
  const int64_t K = d.cg * d.khkw, outputs = (d.og + kRowsWeightWarps - 1) / kRowsWeightWarps;
  KILN_CHECK(plan.splits < (int64_t{1} << 31) && outputs <= 65535 && g.groups <= 65535, ShapeError,
             "cuda conv2d_backward_weight: the problem is too large for one launch (", plan.splits, " x ", outputs,
             " x ", g.groups, " blocks)");
  C* partials = static_cast<C*>(workspace);
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(outputs), static_cast<unsigned>(g.groups));
  const bool bias = grad_b != nullptr;
  // the window kernel for 3 x 3 taps of up to 3 channels and 5 x 5 of one, moving down by its
  // dilation; the taps kernel for the rest
  const bool slides = d.sh == d.dh;
  auto launch = [&](auto kernel) {
    launch_dependent(kernel, grid, 32 * kRowsWeightWarps, plan.smem, stream, x, grad_y, relu_y, partials, bias, d,
                     plan);
  };
  if (slides && d.kh == 3 && d.kw == 3 && d.cg == 1) {
    launch(backward_weight_window_kernel<T, 1, 3, 3>);
  } else if (slides && d.kh == 3 && d.kw == 3) {  // C/G <= 3, K being at most 32
    launch(backward_weight_window_kernel<T, 3, 3, 3>);
  } else if (slides && d.kh == 5 && d.kw == 5) {  // C/G = 1
    launch(backward_weight_window_kernel<T, 1, 5, 5>);
  } else {
    dispatch<9, 16, 32>(K <= 9 ? 9 : K <= 16 ? 16 : 32,
                        [&](auto taps) { launch(backward_weight_rows_kernel<T, taps()>); });
  }
  KILN_CUDA_LAUNCH_CHECK("conv2d_backward_weight");
  sum_splits<C, T>(partials, grad_w, d.o * (K + bias), plan.splits, stream, grad_b, d.o * K);
}

template int64_t backward_weight_rows_workspace<float>(const Geometry&);
template int64_t backward_weight_rows_workspace<double>(const Geometry&);
template int64_t backward_weight_rows_workspace<bf16>(const Geometry&);
template void backward_weight_rows<float>(const float*, const float*, float*, void*, const Geometry&, cudaStream_t,
                                          float*, const float*);
template void backward_weight_rows<double>(const double*, const double*, double*, void*, const Geometry&, cudaStream_t,
                                           double*, const double*);
template void backward_weight_rows<bf16>(const bf16*, const bf16*, bf16*, void*, const Geometry&, cudaStream_t, bf16*,
                                         const bf16*);

template <class T>
void forward_tensor_cores(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, TensorMath math,
                          cudaStream_t stream) {
  const Dims d = dims_of(g);
  forward_tc<T>({x, w, e, y, d, d.n * d.ohw, d.og, d.cg * d.khkw}, g.groups, math, stream, "conv2d");
}

#define KILN_CONV2D_INSTANTIATE(T)                                                                          \
  template void forward_direct<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, const Geometry&, cudaStream_t);         \
  template void forward_implicit_gemm<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, const Geometry&, cudaStream_t);  \
  template void forward_implicit_gemm_prefetch<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, const Geometry&,       \
                                                  cudaStream_t);                                           \
  template void backward_input_direct<T>(const T*, const T*, T*, const Geometry&, cudaStream_t);            \
  template void backward_input_implicit_gemm<T>(const T*, const T*, T*, const Geometry&, cudaStream_t);     \
  template void backward_input_as_forward<T>(const T*, const T*, T*, T*, const Geometry&, cudaStream_t);    \
  template void backward_weight_implicit_gemm<T>(const T*, const T*, T*, T*, const Geometry&, cudaStream_t);    \
  template void backward_weight_implicit_gemm_wide<T>(const T*, const T*, T*, T*, const Geometry&, cudaStream_t); \
  template void forward_implicit_gemm_wide<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, const Geometry&, cudaStream_t);   \
  template void backward_input_as_forward_wide<T>(const T*, const T*, T*, T*, const Geometry&, cudaStream_t); \
  template void forward_tensor_cores<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, const Geometry&, TensorMath,         \
                                        cudaStream_t);                                                         \
  template void backward_input_tensor_cores<T>(const T*, const T*, T*, T*, const Geometry&, TensorMath,        \
                                               cudaStream_t);                                                  \
  template void backward_weight_tensor_cores<T>(const T*, const T*, T*, T*, const Geometry&, TensorMath,       \
                                                cudaStream_t);                                                 \
  template void forward_few_outputs<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, const Geometry&, cudaStream_t);       \
  template void backward_input_few_outputs<T>(const T*, const T*, T*, T*, const Geometry&, cudaStream_t);      \
  template void backward_input_patch<T>(const T*, const T*, T*, T*, const Geometry&, TensorMath, cudaStream_t);   \
  template void forward_patch<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, T*, const Geometry&, TensorMath, \
                                 cudaStream_t);                                                                \
  template void forward_few_outputs_rows<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, const Geometry&,      \
                                            cudaStream_t);                                                       \
  template bool forward_few_outputs_rows_applies<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, const Geometry&, \
                                                    cudaStream_t);                                               \
  template void backward_input_few_outputs_rows<T>(const T*, const T*, T*, T*, const Geometry&, cudaStream_t);
KILN_CONV2D_INSTANTIATE(float)
KILN_CONV2D_INSTANTIATE(double)
#undef KILN_CONV2D_INSTANTIATE

// ---- bf16 (mixed precision) on the tensor cores ----
//
// Versions 7 (forward, backward input) and 3 (backward weight) at Mma::bf16: the operands are bf16,
// each product of two is exact in f32 and the sums accumulate in f32, and each result is rounded
// to bf16 once (after the epilogue in the forward). mma m16n8k16 wants pairs of neighbouring k in
// each 32-bit register, and cp.async moves 4 bytes at least, so each operand is first written as
// pairs along its reduction (one elementwise pass): the input of a forward view pairs its
// channels (k runs over channel and tap), the backward weight's x and grad_y pair their images
// (k runs over image and pixel). Odd counts get a zero partner. Then the TF32 kernels run
// unchanged on the pairs, their 32-bit elements, with the bf16 instruction. A short reduction (a
// first layer's forward: C/G*KH*KW < 32) runs the CUDA-core version 3 on the bf16 operands as they
// are, widening each element as it loads; the weight gradient has that form too (version 1).
//
// Measured (ms: kiln's bf16 production / cuDNN in bf16, NCHW, its fastest algorithm by Find / kiln's
// TF32 version 7 or 3; H100 80GB HBM3, 2026-11-27, kernel-bench, docs/runs/2026-11-27-h100-bf16-kernels):
//   conv2 batch 64:
//     forward 0.0294 [fig cuda.conv2d.bf16.conv2.fwd.ms] / 0.0757 [fig cuda.conv2d.cudnn-bf16.conv2.fwd.ms] /
//       0.0312 [fig cuda.conv2d.tf32.conv2.fwd.ms]
//     backward input 0.0385 [fig cuda.conv2d.bf16.conv2.bwd-input.ms] /
//       0.0604 [fig cuda.conv2d.cudnn-bf16.conv2.bwd-input.ms] /
//       0.0455 [fig cuda.conv2d.tf32.conv2.bwd-input.ms]
//     backward weight 0.0413 [fig cuda.conv2d.bf16.conv2.bwd-weight.ms] /
//       0.101 [fig cuda.conv2d.cudnn-bf16.conv2.bwd-weight.ms] /
//       0.0465 [fig cuda.conv2d.tf32.conv2.bwd-weight.ms]
//   conv2 batch 512:
//     forward 0.142 [fig cuda.conv2d.bf16.conv2-b512.fwd.ms] / 0.114 [fig cuda.conv2d.cudnn-bf16.conv2-b512.fwd.ms] /
//       0.166 [fig cuda.conv2d.tf32.conv2-b512.fwd.ms]
//     backward input 0.198 [fig cuda.conv2d.bf16.conv2-b512.bwd-input.ms] /
//       0.142 [fig cuda.conv2d.cudnn-bf16.conv2-b512.bwd-input.ms] /
//       0.254 [fig cuda.conv2d.tf32.conv2-b512.bwd-input.ms]
//     backward weight 0.254 [fig cuda.conv2d.bf16.conv2-b512.bwd-weight.ms] /
//       0.173 [fig cuda.conv2d.cudnn-bf16.conv2-b512.bwd-weight.ms] /
//       0.288 [fig cuda.conv2d.tf32.conv2-b512.bwd-weight.ms]
//   x[64,128,56,56] w[128,128,3,3] pad 1:
//     forward 0.459 [fig cuda.conv2d.bf16.large.fwd.ms] / 0.202 [fig cuda.conv2d.cudnn-bf16.large.fwd.ms] /
//       0.699 [fig cuda.conv2d.tf32.large.fwd.ms]
//     backward input 0.451 [fig cuda.conv2d.bf16.large.bwd-input.ms] /
//       0.198 [fig cuda.conv2d.cudnn-bf16.large.bwd-input.ms] /
//       0.701 [fig cuda.conv2d.tf32.large.bwd-input.ms]
//     backward weight 0.773 [fig cuda.conv2d.bf16.large.bwd-weight.ms] /
//       0.193 [fig cuda.conv2d.cudnn-bf16.large.bwd-weight.ms] /
//       1.27 [fig cuda.conv2d.tf32.large.bwd-weight.ms]
// At the MNIST layer's batch 64 every pass beats cuDNN's bf16; at batch 512 and on the large layer
// cuDNN pulls ahead, where 32 x 32 warp tiles of mma.sync and the pairing passes cost what a wgmma
// implicit GEMM would not. The first layer's weight gradient takes version 3 on pairs too:
// 0.0261 [fig cuda.conv2d.bf16.conv1.bwd-weight-pairs.ms] ms at batch 64 against version 1 in bf16's
// 0.0597 [fig cuda.conv2d.bf16.conv1.bwd-weight-v1.ms] (f32 production: 0.0396 [fig cuda.conv2d.f32.conv1.bwd-weight.ms]).
//
// Version 9 (conv2d/cells.cuh) then dropped the forward's and the backward input's pairing pass:
// the block copies the input itself, transposing as it goes, into cells of 16 channels a pixel
// that ldmatrix reads whole. Measured (µs: version 9 / version 7 with its pairing pass / cuDNN
// BF16; H100 80GB HBM3, 2026-11-27, kernel-bench, docs/runs/2026-11-27-h100-bench-cells; the
// backward input was faster at batch 512 in version 9's first run, before its copy was shared
// with the weight gradient's version 4, and NOTES.md says what is known of why):
//   conv2 batch 64: forward 16.8 [fig cuda.conv2d.cells.conv2.fwd.v9.us] /
//     24.6 [fig cuda.conv2d.cells.conv2.fwd.v7.us] / 44.0 [fig cuda.conv2d.cells.conv2.fwd.cudnn.us];
//     backward input 17.4 [fig cuda.conv2d.cells.conv2.bwd-input.v9.us] /
//     31.8 [fig cuda.conv2d.cells.conv2.bwd-input.v7.us] / 59.4 [fig cuda.conv2d.cells.conv2.bwd-input.cudnn.us]
//   conv2 batch 512: forward 83.1 [fig cuda.conv2d.cells.conv2-b512.fwd.v9.us] /
//     121.2 [fig cuda.conv2d.cells.conv2-b512.fwd.v7.us] / 269 [fig cuda.conv2d.cells.conv2-b512.fwd.cudnn.us];
//     backward input 111.9 [fig cuda.conv2d.cells.conv2-b512.bwd-input.v9.us] /
//     161.9 [fig cuda.conv2d.cells.conv2-b512.bwd-input.v7.us] /
//     167.3 [fig cuda.conv2d.cells.conv2-b512.bwd-input.cudnn.us]
//   large: forward 310.4 [fig cuda.conv2d.cells.large.fwd.v9.us] / 413.7 [fig cuda.conv2d.cells.large.fwd.v7.us] /
//     202.0 [fig cuda.conv2d.cells.large.fwd.cudnn.us]; backward input
//     310.5 [fig cuda.conv2d.cells.large.bwd-input.v9.us] / 404.2 [fig cuda.conv2d.cells.large.bwd-input.v7.us] /
//     201.5 [fig cuda.conv2d.cells.large.bwd-input.cudnn.us]
// On the MNIST layer version 9 beats cuDNN's bf16 at both batches; the large layer (a reduction of
// 1152) still takes half as long again as cuDNN, where mma.sync's 32 x 32 warp tiles and not the
// copy are the limit. The weight gradient's version 4 reads x and grad_y the same way (below,
// backward_weight_cells_bf16_pays says where production takes it).
namespace {

int64_t round_up4(int64_t words) { return (words + 3) / 4 * 4; }  // 16-byte alignment, in 32-bit words

// Rows of `len` bf16, `rows` to a block (a group's channels, or a batch's images) -> the block's
// rows 2q and 2q + 1 as one row of 32-bit elements (the second zero past `rows`): xp [blocks,
// ceil(rows / 2), len]. V elements a thread: 4 where the rows allow 8-byte loads and 16-byte
// stores. The CNN's bf16 step at batch 512 spent 214.8 µs [fig kernels.step.b512-bf16.pairing.before.us]
// pairing with one element a thread, 95.8 µs [fig kernels.step.b512-bf16.pairing.us] this way (Nsight
// Compute, H100, docs/runs/2026-11-27-h100-bf16-profile and -vec).
template <int V>
__global__ void pair_rows_kernel(const bf16* x, uint32_t* xp, int64_t rows, int64_t pairs, int64_t len,
                                 int64_t total) {
  KILN_GRID_STRIDE(i, total) {  // i runs over (block, q, e / V)
    const int64_t e = i % (len / V) * V, r = i / (len / V), q = r % pairs, block = r / pairs;
    const bf16* row = x + (block * rows + 2 * q) * len + e;
    const Vec<bf16, V> lo = *reinterpret_cast<const Vec<bf16, V>*>(row);
    Vec<bf16, V> hi{};
    if (2 * q + 1 < rows) hi = *reinterpret_cast<const Vec<bf16, V>*>(row + len);
    Vec<uint32_t, V> w;
#pragma unroll
    for (int k = 0; k < V; ++k) w.v[k] = bf16_pair(lo.v[k], hi.v[k]);
    reinterpret_cast<Vec<uint32_t, V>*>(xp)[i] = w;
  }
}

void pair_rows(const bf16* x, uint32_t* xp, int64_t blocks, int64_t rows, int64_t len, cudaStream_t stream,
               const char* op) {
  const int64_t pairs = (rows + 1) / 2, words = blocks * pairs * len;
  if (words == 0) return;
  const bool vec =
      len % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0;
  if (vec) pair_rows_kernel<4><<<blocks_for(words / 4), kThreads, 0, stream>>>(x, xp, rows, pairs, len, words / 4);
  else pair_rows_kernel<1><<<blocks_for(words), kThreads, 0, stream>>>(x, xp, rows, pairs, len, words);
  KILN_CUDA_LAUNCH_CHECK(op);
}

// A view with the input channels of each group paired: C/G rounded up to pairs, one element each.
Geometry paired_channels(const Geometry& f) {
  Geometry p = f;
  p.c = f.groups * ((f.c / f.groups + 1) / 2);
  return p;
}

// The forward view f (of the layer: the forward itself, or the backward input's form) in bf16 on
// the patch kernel: pairs x's channels, packs w in pairs (flip as for f32), and runs it. The
// workspace holds the paired input, then the packed weights.
void patch_forward_bf16(const bf16* x, const bf16* w, bool flip, uint32_t* workspace, const DeviceEpilogue<bf16>& e,
                        bf16* y, const Geometry& f, cudaStream_t stream, const char* op) {
  const Geometry p = paired_channels(f);
  const PatchPlan plan = patch_plan_for(p);
  KILN_CHECK(plan.smem > 0, ValueError, "cuda ", op, ": the bf16 patch version does not apply to this geometry");
  KILN_CHECK(workspace != nullptr, ValueError, "cuda ", op, ": needs a workspace");
  const int64_t paired = p.n * p.c * p.h * p.w, packed = packed_weights(p, plan);
  uint32_t* xp = workspace;
  uint32_t* wp = workspace + round_up4(paired);
  pair_rows(x, xp, f.n * f.groups, f.c / f.groups, f.h * f.w, stream, op);
  pack_patch_weights_kernel<bf16, uint32_t><<<blocks_for(packed), kThreads, 0, stream>>>(w, wp, dims_of(f), plan,
                                                                                          flip, packed);
  KILN_CUDA_LAUNCH_CHECK(op);
  patch_launch<Mma::bf16>(reinterpret_cast<const float*>(xp), reinterpret_cast<const float*>(wp), e, y, p, plan,
                          stream, op);
}

int64_t patch_bf16_workspace(const Geometry& f) {
  const Geometry p = paired_channels(f);
  const PatchPlan plan = patch_plan_for(p);
  return plan.smem == 0 ? 0 : 4 * (round_up4(p.n * p.c * p.h * p.w) + packed_weights(p, plan));
}

Geometry paired_images(const Geometry& g) {
  Geometry p = g;
  p.n = (g.n + 1) / 2;
  return p;
}

using WeightGemmBf16 = TensorCoreWeightGemm<Mma::bf16>;

}  // namespace

template void forward_implicit_gemm_prefetch<bf16>(const bf16*, const bf16*, const DeviceEpilogue<bf16>&, bf16*,
                                                   const Geometry&, cudaStream_t);
template bool forward_few_outputs_rows_applies<bf16>(const bf16*, const bf16*, const DeviceEpilogue<bf16>&, bf16*,
                                                     const Geometry&, cudaStream_t);

bool forward_patch_bf16_applies(const Geometry& g) { return patch_bf16_workspace(g) > 0; }
int64_t forward_patch_bf16_workspace(const Geometry& g) { return patch_bf16_workspace(g); }

void forward_patch_bf16(const bf16* x, const bf16* w, const DeviceEpilogue<bf16>& e, bf16* y, void* workspace,
                        const Geometry& g, cudaStream_t stream) {
  patch_forward_bf16(x, w, false, static_cast<uint32_t*>(workspace), e, y, g, stream, "conv2d");
}

bool backward_input_patch_bf16_applies(const Geometry& g) {
  return backward_input_as_forward_applies(g) && patch_bf16_workspace(as_forward(g)) > 0;
}
int64_t backward_input_patch_bf16_workspace(const Geometry& g) {
  return backward_input_as_forward_applies(g) ? patch_bf16_workspace(as_forward(g)) : 0;
}

void backward_input_patch_bf16(const bf16* grad_y, const bf16* w, bf16* grad_x, void* workspace, const Geometry& g,
                               cudaStream_t stream) {
  patch_forward_bf16(grad_y, w, true, static_cast<uint32_t*>(workspace), {}, grad_x, checked_forward_form(g), stream,
                     "conv2d_backward_input");
}

namespace {

// Version 9's plan on the forward view f (an empty plan where it does not run), and its
// workspace: the packed weights, in bytes.
constexpr int64_t kCellMaxSmem = 110 * 1024;
CellPlan cell_plan_for(const Geometry& f) { return cell_plan(dims_of(f), kCellMaxSmem); }
int64_t cell_workspace(const Geometry& f) {
  const CellPlan plan = cell_plan_for(f);
  return plan.smem == 0 ? 0 : 2 * f.groups * plan.chunks * f.kh * f.kw * plan.np * kCellChannels;
}

// Version 9 on the forward view f: packs w (flip: the layer's own weights, for the backward
// input) into the workspace and runs the cell kernel.
void cell_forward_bf16(const bf16* x, const bf16* w, bool flip, void* workspace, const DeviceEpilogue<bf16>& e, bf16* y,
                       const Geometry& f, cudaStream_t stream, const char* op, const bf16* relu_x = nullptr) {
  const CellPlan plan = cell_plan_for(f);
  KILN_CHECK(plan.smem > 0, ValueError, "cuda ", op, ": version 9 does not apply to this geometry");
  KILN_CHECK(workspace != nullptr, ValueError, "cuda ", op, ": needs a workspace of ", cell_workspace(f), " bytes");
  const Dims d = dims_of(f);
  bf16* packed = static_cast<bf16*>(workspace);
  const int64_t count = cell_workspace(f) / 2;
  pack_cell_weights_kernel<<<blocks_for(count), kThreads, 0, stream>>>(w, packed, d, plan, flip, count);
  KILN_CUDA_LAUNCH_CHECK(op);
  const int tiles = static_cast<int>((d.ohw + 127) / 128);
  const CellArgs args{x, packed, e, y, d, plan, tiles, relu_x};
  // pixel pairs where every input row starts at an even element, 4-byte aligned
  const bool pairs = d.w % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0;
  auto launch = [&]<int BN>() {
    using G = CellTile<BN>;
    auto* kernel = pairs ? cell_conv_kernel<G, true> : cell_conv_kernel<G, false>;
    const int64_t gx = d.n * tiles, gy = plan.np / BN;
    KILN_CHECK(gx < (int64_t{1} << 31) && gy <= 65535 && f.groups <= 65535, ShapeError, "cuda ", op,
               ": the problem is too large for one launch (", gx, " x ", gy, " x ", f.groups, " blocks)");
    const int bytes = static_cast<int>(plan.smem);
    allow_dynamic_smem(kernel, bytes);
    kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(f.groups)), G::THREADS,
             bytes, stream>>>(args);
    KILN_CUDA_LAUNCH_CHECK(op);
  };
  if (plan.bn == 64) launch.template operator()<64>();
  else launch.template operator()<32>();
}

}  // namespace

bool forward_cells_bf16_applies(const Geometry& g) { return cell_workspace(g) > 0; }
int64_t forward_cells_bf16_workspace(const Geometry& g) { return cell_workspace(g); }
void forward_cells_bf16(const bf16* x, const bf16* w, const DeviceEpilogue<bf16>& e, bf16* y, void* workspace,
                        const Geometry& g, cudaStream_t stream) {
  cell_forward_bf16(x, w, false, workspace, e, y, g, stream, "conv2d");
}

bool backward_input_cells_bf16_applies(const Geometry& g) {
  return backward_input_as_forward_applies(g) && cell_workspace(as_forward(g)) > 0;
}
int64_t backward_input_cells_bf16_workspace(const Geometry& g) {
  return backward_input_as_forward_applies(g) ? cell_workspace(as_forward(g)) : 0;
}
void backward_input_cells_bf16(const bf16* grad_y, const bf16* w, bf16* grad_x, void* workspace, const Geometry& g,
                               cudaStream_t stream) {
  backward_input_relu_cells_bf16(grad_y, w, nullptr, grad_x, workspace, g, stream);
}
void backward_input_relu_cells_bf16(const bf16* grad_y, const bf16* w, const bf16* relu_x, bf16* grad_x,
                                    void* workspace, const Geometry& g, cudaStream_t stream) {
  cell_forward_bf16(grad_y, w, true, workspace, {}, grad_x, checked_forward_form(g), stream, "conv2d_backward_input",
                    relu_x);
}

namespace {

// Backward weight version 4's plan (splits = 0 where it does not run: stride 1, a 3 x 3 kernel,
// at least 8 input channels a group, two stages within the shared memory, offsets within an
// int). Its splits: one full wave of blocks, each at least 4 bands.
constexpr int64_t kCellWeightMaxSmem = 110 * 1024;
CellWeightPlan cell_weight_plan(const Geometry& g) {
  const Dims d = dims_of(g);
  if (g.stride_h != 1 || g.stride_w != 1 || g.kh != 3 || g.kw != 3 || d.cg < 8 || d.n * d.og * d.ohw == 0) return {};
  CellWeightPlan p;
  p.band_rows = static_cast<int>(std::clamp<int64_t>(kBandPixels / d.ow, 1, d.oh));
  p.band_pixels = static_cast<int>(p.band_rows * d.ow);
  p.lda = (p.band_pixels + 15) / 16 * 16 + 8;
  p.rows = static_cast<int>(p.band_rows + (d.kh - 1) * d.dh);
  p.cols = static_cast<int>(d.ow + (d.kw - 1) * d.dw);
  p.bands = (d.oh + p.band_rows - 1) / p.band_rows;
  p.stage_bytes = int64_t{CellWeightTile<3, 3>::BM} * p.lda * 2 + int64_t{p.rows} * p.cols * 32;
  if (2 * p.stage_bytes > kCellWeightMaxSmem || kCellPlanes * d.hw >= (int64_t{1} << 31) ||
      d.ohw >= (int64_t{1} << 31))
    return {};
  const int64_t blocks = (d.cg + kCellChannels - 1) / kCellChannels * ((d.og + 63) / 64) * g.groups;
  const int64_t target = blocks_per_sm<cell_weight_kernel<3, 3, true, true>>(CellWeightTile<3, 3>::THREADS,
                                                                             static_cast<int>(2 * p.stage_bytes)) *
                         static_cast<int64_t>(device_attribute(cudaDevAttrMultiProcessorCount));
  p.splits = std::clamp<int64_t>((target + blocks - 1) / blocks, 1, std::max<int64_t>(1, d.n * p.bands / 4));
  p.splits = std::min<int64_t>(p.splits, 65535);
  return p;
}

int64_t cell_weight_workspace(const Geometry& g) {
  const CellWeightPlan plan = cell_weight_plan(g);
  return 4 * plan.splits * g.o * (g.c / g.groups) * g.kh * g.kw;
}

}  // namespace

bool backward_weight_cells_bf16_applies(const Geometry& g) { return cell_weight_plan(g).splits > 0; }

// Version 4 saves version 3's pairing passes over x and grad_y, which weigh most where a layer
// does few multiply-adds per value moved, (O/G)(C/G) / (O/G + C/G) (MNIST's conv2: 21; the large
// layer's 64, where version 3's 64 x 64 tiles win); and it runs its bands one after another, so a
// split needs several to hide their loads (at batch 64 conv2 has 3 a split at one full wave, at 512
// 23). Measured (µs, version 4 / version 3 on image pairs / cuDNN BF16; H100, kernel-bench,
// docs/runs/2026-11-27-h100-cells-weight): conv2 at batch 512 103.4 [fig cuda.conv2d.cells-weight.conv2-b512.v4.us] /
// 217.5 [fig cuda.conv2d.cells-weight.conv2-b512.v3.us] / 176.8 [fig cuda.conv2d.cells-weight.conv2-b512.cudnn.us],
// at batch 64 42.3 [fig cuda.conv2d.cells-weight.conv2.v4.us] / 33.4 [fig cuda.conv2d.cells-weight.conv2.v3.us] /
// 102.9 [fig cuda.conv2d.cells-weight.conv2.cudnn.us], the large layer 878 [fig cuda.conv2d.cells-weight.large.v4.us] /
// 720.1 [fig cuda.conv2d.cells-weight.large.v3.us] / 191.7 [fig cuda.conv2d.cells-weight.large.cudnn.us].
bool backward_weight_cells_bf16_pays(const Geometry& g) {
  const CellWeightPlan plan = cell_weight_plan(g);
  if (plan.splits == 0) return false;
  const double og = static_cast<double>(g.o / g.groups), cg = static_cast<double>(g.c / g.groups);
  return og * cg / (og + cg) <= 32 && g.n * plan.bands >= 8 * plan.splits;
}

void backward_weight_cells_bf16(const bf16* x, const bf16* grad_y, bf16* grad_w, void* workspace, const Geometry& g,
                                cudaStream_t stream) {
  const char* op = "conv2d_backward_weight";
  const CellWeightPlan plan = cell_weight_plan(g);
  KILN_CHECK(plan.splits > 0, ValueError, "cuda ", op, ": version 4 does not apply to this geometry");
  KILN_CHECK(workspace != nullptr, ValueError, "cuda ", op, ": needs a workspace of ", cell_weight_workspace(g),
             " bytes");
  const Dims d = dims_of(g);
  const CellWeightArgs args{x, grad_y, static_cast<float*>(workspace), d, plan};
  const bool pairs = d.w % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 4 == 0;
  const bool vec = d.ohw % 8 == 0 && d.ow % 8 == 0 && reinterpret_cast<uintptr_t>(grad_y) % 16 == 0;
  auto* kernel = pairs ? (vec ? cell_weight_kernel<3, 3, true, true> : cell_weight_kernel<3, 3, true, false>)
                       : (vec ? cell_weight_kernel<3, 3, false, true> : cell_weight_kernel<3, 3, false, false>);
  const int64_t chunks = (d.cg + kCellChannels - 1) / kCellChannels, otiles = (d.og + 63) / 64;
  KILN_CHECK(chunks <= 65535 && otiles * g.groups <= 65535, ShapeError, "cuda ", op,
             ": the problem is too large for one launch (", chunks, " x ", otiles * g.groups, " blocks)");
  const int bytes = static_cast<int>(2 * plan.stage_bytes);
  allow_dynamic_smem(kernel, bytes);
  kernel<<<dim3(static_cast<unsigned>(plan.splits), static_cast<unsigned>(chunks),
                static_cast<unsigned>(otiles * g.groups)),
           CellWeightTile<3, 3>::THREADS, bytes, stream>>>(args);
  KILN_CUDA_LAUNCH_CHECK(op);
  sum_splits(static_cast<const float*>(workspace), grad_w, d.o * d.cg * d.khkw, plan.splits, stream);
  KILN_CUDA_LAUNCH_CHECK(op);
}

// Version 1 in bf16: the CUDA-core GEMM on the bf16 operands as they are (each element widened as
// it loads), 32 x 32 tiles for small layers as in f32.
using WeightGemmSmallBf16 = SimtWeightGemm<bf16, 32, 32, 4, 4>;
using WeightGemmSimtBf16 = SimtWeightGemm<bf16, 64, 64, 4, 4>;

namespace {
// Whether there is a gradient to compute; zeroes it for an empty batch. bf16's kernels always
// write f32 partials, so they always need the workspace.
bool weight_work(bf16* grad_w, const void* workspace, const Geometry& g, cudaStream_t stream) {
  if (!weight_nonempty(grad_w, g, stream)) return false;
  KILN_CHECK(workspace != nullptr, ValueError, "cuda conv2d_backward_weight: needs a workspace of ",
             backward_weight_bf16_workspace(g), " bytes");
  return true;
}
}  // namespace

// The f32 partials (at least one set: the kernels write f32); for version 3 after the paired x and
// grad_y. Enough for either version.
int64_t backward_weight_bf16_workspace(const Geometry& g) {
  const int64_t count = g.o * (g.c / g.groups) * g.kh * g.kw;
  const WeightPlan simt = weight_small(g) ? weight_plan<WeightGemmSmallBf16>(g) : weight_plan<WeightGemmSimtBf16>(g);
  const Geometry p = paired_images(g);
  const WeightPlan tc = weight_plan<WeightGemmBf16>(p);
  return std::max(cell_weight_workspace(g),
                  4 * std::max(simt.splits * count, round_up4(p.n * p.c * p.h * p.w) +
                                                        round_up4(p.n * p.o * p.oh * p.ow) + tc.splits * count));
}

void backward_weight_implicit_gemm_bf16(const bf16* x, const bf16* grad_y, bf16* grad_w, void* workspace,
                                        const Geometry& g, cudaStream_t stream) {
  if (!weight_work(grad_w, workspace, g, stream)) return;
  const int64_t count = g.o * (g.c / g.groups) * g.kh * g.kw;
  float* partials = static_cast<float*>(workspace);
  const bool small = weight_small(g);
  const WeightPlan plan = small ? weight_plan<WeightGemmSmallBf16>(g) : weight_plan<WeightGemmSimtBf16>(g);
  if (small) WeightGemmSmallBf16::run(x, grad_y, partials, dims_of(g), g.groups, plan, stream);
  else WeightGemmSimtBf16::run(x, grad_y, partials, dims_of(g), g.groups, plan, stream);
  sum_splits(partials, grad_w, count, plan.splits, stream);
  KILN_CUDA_LAUNCH_CHECK("conv2d_backward_weight");
}

void backward_weight_tensor_cores_bf16(const bf16* x, const bf16* grad_y, bf16* grad_w, void* workspace,
                                       const Geometry& g, cudaStream_t stream) {
  const char* op = "conv2d_backward_weight";
  if (!weight_work(grad_w, workspace, g, stream)) return;
  const Geometry p = paired_images(g);
  const Dims d = dims_of(p);
  const int64_t count = d.o * d.cg * d.khkw;
  const int64_t nx = d.n * d.c * d.hw, ny = d.n * d.o * d.ohw;
  uint32_t* xp = static_cast<uint32_t*>(workspace);
  uint32_t* gyp = xp + round_up4(nx);
  float* partials = reinterpret_cast<float*>(gyp + round_up4(ny));
  pair_rows(x, xp, 1, g.n, d.c * d.hw, stream, op);  // images 2i and 2i + 1 side by side
  pair_rows(grad_y, gyp, 1, g.n, d.o * d.ohw, stream, op);
  const WeightPlan plan = weight_plan<WeightGemmBf16>(p);
  WeightGemmBf16::run(reinterpret_cast<const float*>(xp), reinterpret_cast<const float*>(gyp), partials, d, p.groups,
                      plan, stream);
  sum_splits(partials, grad_w, count, plan.splits, stream);
  KILN_CUDA_LAUNCH_CHECK(op);
}

}  // namespace kiln::cuda::conv2d

// ---- the production path: CudaBackend ----

namespace kiln::cuda {

namespace {

conv2d::Geometry geometry_of(const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p) {
  conv2d::Geometry g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = w[0], g.kh = w[2], g.kw = w[3];
  g.oh = y[2], g.ow = y[3];
  g.stride_h = p.stride_h, g.stride_w = p.stride_w, g.pad_h = p.pad_h, g.pad_w = p.pad_w;
  g.dilation_h = p.dilation_h, g.dilation_w = p.dilation_w, g.groups = p.groups;
  return g;
}

// TF32 where allow_tf32 permits it, else 3xTF32 (f32 accuracy).
conv2d::TensorMath tensor_math() { return allow_tf32() ? conv2d::TensorMath::tf32 : conv2d::TensorMath::tf32x3; }

void check_same_dtype(const char* op, const TensorRef& a, const TensorRef& b, const TensorRef& c) {
  KILN_CHECK(a.dtype == b.dtype && b.dtype == c.dtype, DTypeError, "cuda backend: ", op,
             " needs one dtype, got ", a.dtype, ", ", b.dtype, " and ", c.dtype);
}

// The three passes in T (f32 or f64), the tensor-core versions at `math`.
template <class T>
void forward(CudaBackend& be, const T* x, const T* w, const DeviceEpilogue<T>& b, T* y, const conv2d::Geometry& g,
             conv2d::TensorMath math) {
  // A reduction this short (the first MNIST layer: C*KH*KW = 9) leaves most of each 16-long
  // tensor-core slice, and of version 7's 8-channel stages, empty: version 3 beat the 3xTF32
  // versions there (conv1: 0.0097 ms [fig cuda.conv2d.fwd.v3.conv1.ms] against 5's
  // 0.0114 [fig cuda.conv2d.fwd.v5-3xtf32.conv1.ms] and 7's
  // 0.0167 [fig cuda.conv2d.fwd.v7-3xtf32.conv1.ms]; H100, kernel-bench,
  // docs/runs/2026-11-26-h100), and version 8 (a thread per pixel, all 32 outputs from the input
  // rows in shared memory) beats 3: 6.2 µs [fig cuda.conv2d.rows.conv1-b64.v8.us] against
  // 9.8 [fig cuda.conv2d.rows.conv1-b64.v3.us] at batch 64, 28.8 [fig cuda.conv2d.rows.conv1-b512.v8.us]
  // against 56.3 [fig cuda.conv2d.rows.conv1-b512.v3.us] at 512, where cuDNN took
  // 20.2 [fig cuda.conv2d.rows.conv1-b64.cudnn.us] and 41.9 [fig cuda.conv2d.rows.conv1-b512.cudnn.us]
  // (docs/runs/2026-11-27-h100-conv1-rows). TF32's version 5 also beats 3
  // (0.0080 ms [fig cuda.conv2d.fwd.v5-tf32.conv1.ms]), but this rule takes 8, else 3, under
  // either math. Elsewhere version 12 on an sm_90 GPU where it runs (f32, stride 1), else version
  // 7 where it runs (stride 1), else version 5. Before all of them, version 13 where it applies
  // (O/G <= 4 at stride 1: bound by its loads, where a tensor-core tile of outputs would be
  // mostly padding; figures in conv2d/columns.cu).
  if (conv2d::forward_columns_applies<T>(g)) {
    conv2d::forward_columns<T>(x, w, b, y, g, be.stream());
  } else if (g.c / g.groups * g.kh * g.kw < 32) {
    if (!conv2d::forward_few_outputs_rows_applies<T>(x, w, b, y, g, be.stream()))
      conv2d::forward_implicit_gemm_prefetch<T>(x, w, b, y, g, be.stream());
  } else if (const int64_t ring = std::is_same_v<T, float> && conv2d::forward_ring_applies(g, math)
                                      ? conv2d::forward_ring_workspace(g)
                                      : 0;
             ring > 0) {
    if constexpr (std::is_same_v<T, float>) {
      Scratch ws(be, sizeof(float) * static_cast<size_t>(ring));
      conv2d::forward_ring(x, w, b, y, static_cast<float*>(ws.p), g, math, be.stream());
    }
  } else if (const int64_t packed = std::is_same_v<T, float> ? conv2d::forward_patch_workspace(g) : 0; packed > 0) {
    Scratch ws(be, sizeof(T) * static_cast<size_t>(packed));
    conv2d::forward_patch<T>(x, w, b, y, static_cast<T*>(ws.p), g, math, be.stream());
  } else {
    conv2d::forward_tensor_cores<T>(x, w, b, y, g, math, be.stream());
  }
}

template <class T>
void backward_input(CudaBackend& be, const T* gy, const T* w, T* gx, const conv2d::Geometry& g,
                    conv2d::TensorMath math) {
  if (conv2d::backward_input_columns_applies<T>(g)) {
    conv2d::backward_input_columns<T>(gy, w, gx, g, be.stream());
  } else if (conv2d::backward_input_as_forward_applies(g) && g.c / g.groups <= 4) {
    Scratch ws(be, sizeof(T) * static_cast<size_t>(conv2d::backward_input_as_forward_workspace(g)));
    conv2d::backward_input_few_outputs_rows<T>(gy, w, gx, static_cast<T*>(ws.p), g, be.stream());
  } else if (std::is_same_v<T, float> && conv2d::backward_input_ring_applies(g, math)) {
    if constexpr (std::is_same_v<T, float>) {
      Scratch ws(be, sizeof(float) * static_cast<size_t>(conv2d::backward_input_ring_workspace(g)));
      conv2d::backward_input_ring(gy, w, gx, static_cast<float*>(ws.p), g, math, be.stream());
    }
  } else if (conv2d::backward_input_as_forward_applies(g)) {
    Scratch ws(be, sizeof(T) * static_cast<size_t>(conv2d::backward_input_as_forward_workspace(g)));
    conv2d::backward_input_patch<T>(gy, w, gx, static_cast<T*>(ws.p), g, math, be.stream());
  } else if (conv2d::backward_input_uses_direct(g)) {
    conv2d::backward_input_direct<T>(gy, w, gx, g, be.stream());
  } else {
    conv2d::backward_input_implicit_gemm<T>(gy, w, gx, g, be.stream());
  }
}

template <class T>
void backward_weight(CudaBackend& be, const T* x, const T* gy, T* gw, const conv2d::Geometry& g,
                     conv2d::TensorMath math) {
  if constexpr (std::is_same_v<T, float>) {
    if (conv2d::backward_weight_ring_applies(g, math)) {
      Scratch ws(be, sizeof(float) * static_cast<size_t>(conv2d::backward_weight_ring_workspace(g, math)));
      conv2d::backward_weight_ring(x, gy, gw, static_cast<float*>(ws.p), g, math, be.stream());
      return;
    }
  }
  Scratch ws(be, sizeof(T) * static_cast<size_t>(conv2d::backward_weight_workspace(g)));
  conv2d::backward_weight_tensor_cores<T>(x, gy, gw, static_cast<T*>(ws.p), g, math, be.stream());
}

}  // namespace

namespace {
// Whether production takes version 12 in bf16 for the forward view g (where it applies): where a
// block's tile sums at least 64 channels (4 stages of 16) before its epilogue, which does not
// overlap the products, into more than 32 outputs (m64n32 products). Version 9 (mma.sync) keeps
// the lead elsewhere: at the MNIST CNN's conv2 (32 channels into 64) 12 ties 9's forward at batch
// 512 and trails it at 64, and conv2's backward input (64 channels into 32) trails at both, while
// on x[64,128,56,56] w[128,128,3,3] 12 takes half 9's time and less than cuDNN's bf16 (figures at
// version 12's head in conv2d/wgmma.cu). Between those layers the rule is not measured.
bool ring_bf16_pays(const conv2d::Geometry& g) { return g.c / g.groups >= 64 && g.o / g.groups > 32; }
}  // namespace

// bf16 runs the bf16 versions (conv2d.cuh): version 13, forward and backward input, where it
// applies (O/G <= 4 in the forward form: a first layer's backward input), the forward's version 8
// (else 3) where C/G*KH*KW < 32
// (conv1: 6.8 µs [fig cuda.conv2d.rows.conv1-b64.v8-bf16.us] against 3's
// 11.4 [fig cuda.conv2d.rows.conv1-b64.v3-bf16.us] and cuDNN BF16's
// 19.1 [fig cuda.conv2d.rows.conv1-b64.cudnn-bf16.us] at batch 64;
// 26.5 [fig cuda.conv2d.rows.conv1-b512.v8-bf16.us], 62.2 [fig cuda.conv2d.rows.conv1-b512.v3-bf16.us]
// and 51.9 [fig cuda.conv2d.rows.conv1-b512.cudnn-bf16.us] at 512), else version 12 in bf16 where
// it pays (ring_bf16_pays; the backward input not through a relu, which 9 applies in its store),
// else version 9, the backward input's 9 where the f32 path would take 7 (version 9 runs wherever
// 7 on channel pairs would, so 7 in bf16 is left to kernel-bench and the tests), the weight
// gradient's version 6 where it runs (by TMA: conv2d/wgmma_weight.cu), else version 4 where it
// pays (a 3 x 3 layer of few multiply-adds per value moved, several bands a split), else version 3
// on image pairs.
// Where they do not apply (stride > 1, a patch over the shared memory, a backward input with
// C/G <= 4 that version 13 does not take, or outside the forward form) it runs the f32 versions on
// operands widened to f32, at TF32 whatever allow_tf32 says: a bf16 value has 8 significant bits,
// which TF32's 11 hold, so each TF32 product is the exact product of the bf16 values, as on bf16
// tensor cores, and the sums are f32. Either way the result is rounded to bf16 once (after the
// epilogue in the forward).
void CudaBackend::conv2d(const TensorRef& x, const TensorRef& w, const TensorRef& y, const Conv2dParams& p,
                         const Epilogue& epilogue) {
  check_same_dtype("conv2d", x, w, y);
  KILN_CHECK(!epilogue.bias.defined() || epilogue.bias.dtype == y.dtype, DTypeError,
             "cuda backend: conv2d needs one dtype, got bias ", epilogue.bias.dtype, " for ", y.dtype);
  const conv2d::Geometry g = geometry_of(x.shape, w.shape, y.shape, p);
  if (y.dtype == DType::bf16 && conv2d::forward_columns_applies<bf16>(g)) {  // as for f32: version 13
    conv2d::forward_columns<bf16>(x.data<bf16>(), w.data<bf16>(), device_epilogue<bf16>(epilogue), y.data<bf16>(), g,
                                  stream());
    return;
  }
  if (y.dtype == DType::bf16 && g.c / g.groups * g.kh * g.kw < 32) {  // as for f32: version 8, else 3
    if (!conv2d::forward_few_outputs_rows_applies<bf16>(x.data<bf16>(), w.data<bf16>(), device_epilogue<bf16>(epilogue),
                                                        y.data<bf16>(), g, stream()))
      conv2d::forward_implicit_gemm_prefetch<bf16>(x.data<bf16>(), w.data<bf16>(), device_epilogue<bf16>(epilogue),
                                                   y.data<bf16>(), g, stream());
    return;
  }
  if (y.dtype == DType::bf16 && ring_bf16_pays(g) && conv2d::forward_ring_bf16_applies(g)) {
    Scratch ws(*this, static_cast<size_t>(conv2d::forward_ring_bf16_workspace(g)));
    conv2d::forward_ring_bf16(x.data<bf16>(), w.data<bf16>(), device_epilogue<bf16>(epilogue), y.data<bf16>(), ws.p, g,
                              stream());
    return;
  }
  if (y.dtype == DType::bf16 && conv2d::forward_cells_bf16_applies(g)) {
    Scratch ws(*this, static_cast<size_t>(conv2d::forward_cells_bf16_workspace(g)));
    conv2d::forward_cells_bf16(x.data<bf16>(), w.data<bf16>(), device_epilogue<bf16>(epilogue), y.data<bf16>(), ws.p, g,
                               stream());
    return;
  }
  if (y.dtype == DType::bf16) {
    const Widened xf(*this, x), wf(*this, w), bf(*this, epilogue.bias), yf(*this, y, false);
    forward<float>(*this, xf.data(), wf.data(), {bf.data(), epilogue.activation}, yf.data(), g,
                   conv2d::TensorMath::tf32);
    copy(yf.ref, y);
    return;
  }
  visit_floating(y.dtype, "conv2d", [&](auto tag) {
    using T = decltype(tag);
    forward<T>(*this, x.data<T>(), w.data<T>(), device_epilogue<T>(epilogue), y.data<T>(), g, tensor_math());
  });
}

namespace {
bool backward_input_runs_cells(const TensorRef& grad_x, const conv2d::Geometry& g) {
  return grad_x.dtype == DType::bf16 && g.c / g.groups > 4 && conv2d::backward_input_cells_bf16_applies(g);
}
}  // namespace

// Version 9 zeroes the gradient where x <= 0 as it stores it; elsewhere relu's gradient is a pass
// of its own after the convolution's (version 12 doing the same in its epilogue took longer than
// the pass: kernels/cuda/NOTES.md), which autograd leaves to the layer that made x where its weight
// gradient can take it (version 5, a first layer's).
bool CudaBackend::conv2d_backward_input_relu_fused(const TensorRef& grad_y, const TensorRef& w,
                                                   const TensorRef& relu_x, const Conv2dParams& p) const {
  return backward_input_runs_cells(relu_x, geometry_of(relu_x.shape, w.shape, grad_y.shape, p));
}

void CudaBackend::conv2d_backward_input_relu(const TensorRef& grad_y, const TensorRef& w, const TensorRef& relu_x,
                                             const TensorRef& grad_x, const Conv2dParams& p) {
  check_same_dtype("conv2d_backward_input", grad_y, w, grad_x);
  KILN_CHECK(relu_x.dtype == grad_x.dtype && relu_x.shape == grad_x.shape && relu_x.is_contiguous(), ShapeError,
             "cuda conv2d_backward_input: relu_x ", relu_x.shape, " ", relu_x.dtype,
             " must be contiguous and match the input gradient ", grad_x.shape, " ", grad_x.dtype);
  const conv2d::Geometry g = geometry_of(grad_x.shape, w.shape, grad_y.shape, p);
  if (!backward_input_runs_cells(grad_x, g)) return Backend::conv2d_backward_input_relu(grad_y, w, relu_x, grad_x, p);
  Scratch ws(*this, static_cast<size_t>(conv2d::backward_input_cells_bf16_workspace(g)));
  conv2d::backward_input_relu_cells_bf16(grad_y.data<bf16>(), w.data<bf16>(), relu_x.data<bf16>(), grad_x.data<bf16>(),
                                         ws.p, g, stream());
}

void CudaBackend::conv2d_backward_input(const TensorRef& grad_y, const TensorRef& w, const TensorRef& grad_x,
                                        const Conv2dParams& p) {
  check_same_dtype("conv2d_backward_input", grad_y, w, grad_x);
  const conv2d::Geometry g = geometry_of(grad_x.shape, w.shape, grad_y.shape, p);
  if (grad_x.dtype == DType::bf16 && conv2d::backward_input_as_forward_applies(g) &&
      ring_bf16_pays(conv2d::as_forward(g)) && conv2d::backward_input_ring_bf16_applies(g)) {
    Scratch ws(*this, static_cast<size_t>(conv2d::backward_input_ring_bf16_workspace(g)));
    conv2d::backward_input_ring_bf16(grad_y.data<bf16>(), w.data<bf16>(), grad_x.data<bf16>(), ws.p, g, stream());
    return;
  }
  if (backward_input_runs_cells(grad_x, g)) {
    Scratch ws(*this, static_cast<size_t>(conv2d::backward_input_cells_bf16_workspace(g)));
    conv2d::backward_input_cells_bf16(grad_y.data<bf16>(), w.data<bf16>(), grad_x.data<bf16>(), ws.p, g, stream());
    return;
  }
  if (grad_x.dtype == DType::bf16 && conv2d::backward_input_columns_applies<bf16>(g)) {  // C/G <= 4
    conv2d::backward_input_columns<bf16>(grad_y.data<bf16>(), w.data<bf16>(), grad_x.data<bf16>(), g, stream());
    return;
  }
  if (grad_x.dtype == DType::bf16) {
    const Widened gyf(*this, grad_y), wf(*this, w), gxf(*this, grad_x, false);
    backward_input<float>(*this, gyf.data(), wf.data(), gxf.data(), g, conv2d::TensorMath::tf32);
    copy(gxf.ref, grad_x);
    return;
  }
  visit_floating(grad_x.dtype, "conv2d_backward_input", [&](auto tag) {
    using T = decltype(tag);
    backward_input<T>(*this, grad_y.data<T>(), w.data<T>(), grad_x.data<T>(), g, tensor_math());
  });
}

namespace {
// Version 5 where it applies (a short reduction per output: a first layer), in every dtype, with
// the bias's gradient where grad_b is defined and grad_y taken back through a relu where relu_y is;
// false where it does not.
bool backward_weight_rows(CudaBackend& be, const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                          const TensorRef& grad_b, const conv2d::Geometry& g, const TensorRef& relu_y = {}) {
  bool done = false;
  visit_floating_bf16(grad_w.dtype, "conv2d_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    const int64_t bytes = conv2d::backward_weight_rows_workspace<T>(g);
    if (bytes == 0) return;
    Scratch ws(be, static_cast<size_t>(bytes));
    conv2d::backward_weight_rows<T>(x.data<T>(), grad_y.data<T>(), grad_w.data<T>(), ws.p, g, be.stream(),
                                    grad_b.defined() ? grad_b.data<T>() : nullptr,
                                    relu_y.defined() ? relu_y.data<T>() : nullptr);
    done = true;
  });
  return done;
}
}  // namespace

// Version 5 where it applies (taking grad_y back through relu_y's relu as it reads it), else
// version 6 where it takes the bias (3xTF32: f32 without allow_tf32) and there is no relu, else
// false: the caller masks and sums grad_y itself.
bool CudaBackend::conv2d_backward_weight_and_bias(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                                                  const TensorRef& grad_b, const Conv2dParams& p,
                                                  const TensorRef& relu_y) {
  check_same_dtype("conv2d_backward_weight", x, grad_y, grad_w);
  KILN_CHECK(grad_b.dtype == grad_w.dtype && grad_b.shape == Shape{grad_w.shape[0]} && grad_b.is_contiguous(),
             ShapeError, "cuda conv2d_backward_weight: the bias's gradient ", grad_b.shape, " ", grad_b.dtype,
             " for ", grad_w.shape[0], " outputs of ", grad_w.dtype);
  KILN_CHECK(!relu_y.defined() || (relu_y.dtype == grad_y.dtype && relu_y.shape == grad_y.shape &&
                                   relu_y.is_contiguous() && grad_y.is_contiguous()),
             ShapeError, "cuda conv2d_backward_weight: relu_y ", relu_y.shape, " ", relu_y.dtype,
             " must be contiguous and match the contiguous output gradient ", grad_y.shape, " ", grad_y.dtype);
  const conv2d::Geometry g = geometry_of(x.shape, grad_w.shape, grad_y.shape, p);
  if (backward_weight_rows(*this, x, grad_y, grad_w, grad_b, g, relu_y)) return true;
  if (relu_y.defined()) return false;
  const conv2d::TensorMath math = tensor_math();
  if (grad_w.dtype != DType::f32 || !conv2d::backward_weight_ring_takes_bias(g, math)) return false;
  Scratch ws(*this, sizeof(float) * static_cast<size_t>(conv2d::backward_weight_ring_workspace(g, math, true)));
  conv2d::backward_weight_ring(x.data<float>(), grad_y.data<float>(), grad_w.data<float>(), static_cast<float*>(ws.p),
                               g, math, stream(), grad_b.data<float>());
  return true;
}

void CudaBackend::conv2d_backward_weight(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                                         const Conv2dParams& p) {
  check_same_dtype("conv2d_backward_weight", x, grad_y, grad_w);
  const conv2d::Geometry g = geometry_of(x.shape, grad_w.shape, grad_y.shape, p);
  if (backward_weight_rows(*this, x, grad_y, grad_w, TensorRef{}, g)) return;
  if (grad_w.dtype == DType::bf16 &&
      conv2d::backward_weight_ring_bf16_applies(x.data<bf16>(), grad_y.data<bf16>(), g)) {
    Scratch ws(*this, static_cast<size_t>(conv2d::backward_weight_ring_bf16_workspace(g)));
    conv2d::backward_weight_ring_bf16(x.data<bf16>(), grad_y.data<bf16>(), grad_w.data<bf16>(), ws.p, g, stream());
    return;
  }
  if (grad_w.dtype == DType::bf16) {
    Scratch ws(*this, static_cast<size_t>(conv2d::backward_weight_bf16_workspace(g)));
    if (conv2d::backward_weight_cells_bf16_pays(g)) {
      conv2d::backward_weight_cells_bf16(x.data<bf16>(), grad_y.data<bf16>(), grad_w.data<bf16>(), ws.p, g, stream());
      return;
    }
    conv2d::backward_weight_tensor_cores_bf16(x.data<bf16>(), grad_y.data<bf16>(), grad_w.data<bf16>(), ws.p, g,
                                              stream());
    return;
  }
  visit_floating(grad_w.dtype, "conv2d_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    backward_weight<T>(*this, x.data<T>(), grad_y.data<T>(), grad_w.data<T>(), g, tensor_math());
  });
}

}  // namespace kiln::cuda
