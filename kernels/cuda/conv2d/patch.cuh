// Forward convolution at stride 1 on the tensor cores with the input patch in shared memory
// (forward and backward input version 7; kernels/cuda/conv2d.cu gives its figures,
// kernels/cuda/NOTES.md its story). Included by conv2d.cu only.
//
// The tensor-core versions before it gather the im2col tile element by element: a 3x3 layer reads
// each input value up to nine times per block, each time as its own 4-byte copy with its own
// bounds test. Here a block copies the rows of the input that its output pixels need once per
// stage (a "patch", padding included as zeros), and the mma fragments read the im2col matrix out of
// it: element (m, k) of A, for the output pixel m and the tap (ky, kx) of channel c, is the patch
// value at (c, row(m) + ky*dh, col(m) + kx*dw), so a fragment load is one address add. The weights
// are packed beforehand into the order the stages consume them, so they arrive as 16-byte copies.
//
// In bf16 the kernel is the same on pairs of channels: the caller first writes the input with
// channels 2q and 2q + 1 side by side in one 32-bit element (conv2d.cu's pair_rows: an extra pass
// over the input), and packs the weights in pairs too. A "channel" of the kernel is then a pair, a
// stage of 8 is 16 channels, and each k-step is one mma m16n8k16 per tile where TF32 takes
// m16n8k8 (matmul::mma_slice: the fragments of the two agree word for word). cp.async copies 4
// bytes at least, so a gather of single bf16 values could not run through it; a gather of pairs
// does, and the mma reads them as they come.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiln/core/bf16.h"
#include "kiln/kernels/cuda/conv2d/common.cuh"
#include "kiln/kernels/cuda/conv2d/tensor_cores.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::conv2d {

namespace {

// K is walked a stage of kPatchChannels input channels (32-bit elements: f32 values, or pairs of
// bf16 channels) at a time; inside a stage, tap by tap, so that one mma k-step is one tap of the
// stage's 8 elements (k = tap * 8 + channel).
constexpr int kPatchChannels = 8;

// Shared memory keeps channels c and c + 4 side by side (8 bytes), in the patch and in the packed
// weights: the values at k = t and k = t + 4 that an mma fragment takes from one row (a0 and a2
// of A, b0 and b1 of B) arrive in one 8-byte load.
//
// The block shape: BM output pixels of one image by BN output channels, 32 x 32 warp tiles of
// mma.sync m16n8k8, two stages of shared memory.
template <int BM_, int BN_>
struct PatchTile {
  static constexpr int BM = BM_, BN = BN_, WM = 32, WN = 32, MI = WM / 16, NI = WN / 8;
  static constexpr int WARPS = (BM / WM) * (BN / WN), THREADS = WARPS * 32;
  // The weights of a stage: rows (tap, t) of BN pairs (k = t, t + 4), LDB = 2 * BN + 8 floats
  // apart: a half-warp's 8-byte loads (rows t = 0..3, columns g = 0..3) cover the 32 banks once.
  static constexpr int LDB = 2 * BN + 8;
};

// The output-channel tile for N outputs per group.
inline int patch_bn(int64_t n) { return n > 32 ? 64 : 32; }

// Where a launch's patches sit. Each block's patch spans the input rows its BM pixels read
// (`rows` at most, over all blocks) by `cols` = OW + (KW-1)*dw columns (the padding columns
// included): `plane` cells for each pair of channels (c, c + 4), rounded so that 2 * plane = 8
// (mod 32), which puts the 8-byte loads of a half-warp (pairs t = 0..3, pixels g = 0..3) on the
// 32 banks once.
struct PatchPlan {
  int rows = 0, cols = 0, plane = 0;
  int64_t chunks = 0;  // stages: ceil(C/G / kPatchChannels)
  int64_t np = 0;      // packed weight row: O/G rounded up to the block's BN
  int64_t smem = 0;    // dynamic shared memory bytes
};

inline PatchPlan patch_plan(const Dims& d, int bm, int bn) {
  PatchPlan p;
  p.rows = static_cast<int>(std::min<int64_t>((bm - 1) / d.ow + 2, d.oh) + (d.kh - 1) * d.dh);
  p.cols = static_cast<int>(d.ow + (d.kw - 1) * d.dw);
  const int area = p.rows * p.cols;
  p.plane = area + ((4 - area) % 16 + 16) % 16;
  p.chunks = (d.cg + kPatchChannels - 1) / kPatchChannels;
  p.np = (d.og + bn - 1) / bn * bn;
  const int64_t stage = kPatchChannels * int64_t{p.plane} + d.khkw * 4 * int64_t{2 * bn + 8};
  p.smem = (2 * stage + 2 * kPatchChannels * int64_t{p.rows}) * 4;
  return p;
}

// The packed weights, in the order the stages read them: wp[g][chunk][tap][c8 % 4][np][c8 / 4] =
// the weight of output n (of group g) for input channel chunk*8 + c8 at tap, zero past C/G or
// O/G. For the forward the weights are w [O, C/G, KH, KW]; for the backward input (flip) w is the
// layer's own weight, read with its channel axes swapped and the kernel flipped (version 3
// explains): d is the forward view in both cases.
__host__ __device__ inline int64_t packed_at(const Dims& d, const PatchPlan& plan, int64_t g, int64_t c, int64_t tap,
                                             int64_t n) {
  const int64_t chunk = c / kPatchChannels, c8 = c % kPatchChannels;
  return ((((g * plan.chunks + chunk) * d.khkw + tap) * 4 + c8 % 4) * plan.np + n) * 2 + c8 / 4;
}

// Packs w into wp (packed_at's order). E is the element: T itself, or for bf16 a uint32_t holding
// channels 2c and 2c + 1 (plan is then the paired view's, d the layer's forward view).
template <class T, class E>
__global__ void pack_patch_weights_kernel(const T* w, E* wp, Dims d, PatchPlan plan, bool flip, int64_t total) {
  KILN_GRID_STRIDE(i, total) {  // i runs over (g, c in the stages, tap, n)
    const int64_t n = i % plan.np, r = i / plan.np, tap = r % d.khkw, r2 = r / d.khkw;
    const int64_t c = r2 % (plan.chunks * kPatchChannels), g = r2 / (plan.chunks * kPatchChannels);
    if constexpr (std::is_same_v<E, T>) {
      wp[packed_at(d, plan, g, c, tap, n)] = weight_at(w, d, flip, g, c, tap, n);
    } else {
      wp[packed_at(d, plan, g, c, tap, n)] =
          bf16_pair(weight_at(w, d, flip, g, 2 * c, tap, n), weight_at(w, d, flip, g, 2 * c + 1, tap, n));
    }
  }
}

// Y: the output's type (f32, or bf16 rounded once after the epilogue). x and wp hold 32-bit
// elements (f32, or pairs of bf16).
template <class Y>
struct PatchArgs {
  const float* x;   // [N, C, H, W]
  const float* wp;  // packed
  DeviceEpilogue<Y> epilogue;
  Y* y;  // [N, O, OH, OW]
  Dims d;
  PatchPlan plan;
  int tiles;  // pixel tiles per image
};

// y(m, n) as a plain f32 sum over the taps that exist, weight(c, tap) giving output n's weights:
// the 3xTF32 answer for results that came out NaN (an infinite input splits into inf + NaN inside
// the mma; tensor_cores.cuh's dot_f32). Versions 7 and 10.
template <class Weight>
__device__ float patch_dot_f32(const float* x_all, const Dims& d, int64_t img, int64_t g, int64_t m, Weight weight) {
  const int64_t oy = m / d.ow, ox = m % d.ow;
  const float* x = x_all + (img * d.c + g * d.cg) * d.hw;
  float sum = 0;
  for (int64_t c = 0; c < d.cg; ++c)
    for (int64_t tap = 0; tap < d.khkw; ++tap) {
      const int64_t iy = oy - d.ph + tap / d.kw * d.dh, ix = ox - d.pw + tap % d.kw * d.dw;
      if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
      sum = fmaf(x[c * d.hw + iy * d.w + ix], weight(c, tap), sum);
    }
  return sum;
}

// The patch of a block whose output pixels span output rows y_first onward, `rows` input rows
// (versions 7 and 10). lines[l] for each line l = (channel c < 8, patch row r): where it starts
// in a stage's first input plane (-1 for rows outside the input) and in the patch (whose columns
// are 2 floats apart). Written once per block by its `threads` threads.
__device__ inline void patch_lines(int2* lines, int rows, int y_first, const Dims& d, const PatchPlan& plan, int tid,
                                   int threads) {
  for (int l = tid; l < kPatchChannels * rows; l += threads) {
    const int c = l / rows, r = l % rows, iy = y_first - static_cast<int>(d.ph) + r;
    lines[l] = {iy >= 0 && iy < d.h ? c * static_cast<int>(d.hw) + iy * static_cast<int>(d.w) : -1,
                2 * ((c % 4) * plan.plane + r * plan.cols) + c / 4};
  }
}

// Queues the copy of stage `chunk`'s patch (channels chunk * 8 onward of x_img, the block's image
// and group) into st: a warp a line at a time, 4-byte cp.async, zeros outside the input and past C/G.
__device__ inline void copy_patch(float* st, const float* x_img, int64_t chunk, const int2* lines, int rows,
                                  const Dims& d, const PatchPlan& plan, int warp, int lane, int warps) {
  const int64_t left = d.cg - chunk * kPatchChannels;
  const int valid_lines = static_cast<int>(left < kPatchChannels ? left : kPatchChannels) * rows;
  const float* src = x_img + chunk * kPatchChannels * d.hw;
  const int width = static_cast<int>(d.w), pw = static_cast<int>(d.pw);
#pragma unroll 1
  for (int l = warp; l < kPatchChannels * rows; l += warps) {
    const int2 line = lines[l];
    const bool row_ok = line.x >= 0 && l < valid_lines;
#pragma unroll 1
    for (int col = lane; col < plan.cols; col += 32) {
      const int ix = col - pw;
      const bool ok = row_ok && static_cast<unsigned>(ix) < static_cast<unsigned>(width);
      matmul::cp_async4(st + line.y + 2 * col, src + (ok ? line.x + ix : 0), ok);
    }
  }
}

// One block: BM consecutive output pixels of image blockIdx.x / tiles (tile blockIdx.x % tiles),
// output channels blockIdx.y * BN onward of group blockIdx.z. Per stage (8 input channels): the
// patch (4-byte copies, zero-filled outside the input) and the stage's packed weights (16-byte
// copies) into one of two buffers while the block multiplies the other, at math M: in tf32x3 the
// sum of each two taps (16 values of k) formed from zero and added in f32, as in version 5.
template <class G, Mma M, class Y>
__global__ void __launch_bounds__(G::THREADS) patch_conv_kernel(PatchArgs<Y> a) {
  constexpr bool kExact = M == Mma::tf32x3;
  extern __shared__ __align__(16) float smem_patch[];
  constexpr int MI = G::MI, NI = G::NI, C8 = kPatchChannels;
  const Dims& d = a.d;
  const PatchPlan& plan = a.plan;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int wm0 = warp / (G::BN / G::WN) * G::WM, wn0 = warp % (G::BN / G::WN) * G::WN;
  const int64_t img = blockIdx.x / a.tiles, group = blockIdx.z, n0 = int64_t{blockIdx.y} * G::BN;
  const int ohw = static_cast<int>(d.ohw), ow = static_cast<int>(d.ow), taps = static_cast<int>(d.khkw);
  const int p0 = static_cast<int>(blockIdx.x % a.tiles) * G::BM;
  const int y_first = p0 / ow, y_last = (min(p0 + G::BM, ohw) - 1) / ow;
  const int rows = y_last - y_first + 1 + static_cast<int>((d.kh - 1) * d.dh);

  const int patch_floats = C8 * plan.plane, stage = patch_floats + taps * 4 * G::LDB;
  int2* lines = reinterpret_cast<int2*>(smem_patch + 2 * stage);
  patch_lines(lines, rows, y_first, d, plan, tid, G::THREADS);
  // The patch offsets of this thread's fragment rows (pixels past the image read row 0).
  int pix[MI][2];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = p0 + wm0 + mi * 16 + g + 8 * h;
      pix[mi][h] = m < ohw ? (m / ow - y_first) * plan.cols + m % ow : 0;
    }
  __syncthreads();

  const float* x_img = a.x + (img * d.c + group * d.cg) * d.hw;
  const float* w_group = a.wp + group * plan.chunks * taps * C8 * plan.np + 2 * n0;
  auto load = [&](int64_t chunk, float* st) {
    copy_patch(st, x_img, chunk, lines, rows, d, plan, warp, lane, G::WARPS);
    float* bs = st + patch_floats;  // rows (tap, t) of the stage: 2 * BN floats from column 2 * n0
    const float* ws = w_group + chunk * taps * 4 * 2 * plan.np;
    for (int i = tid; i < taps * 4 * (2 * G::BN / 4); i += G::THREADS) {
      const int row = i / (2 * G::BN / 4), q = i % (2 * G::BN / 4) * 4;
      matmul::cp_async16(bs + row * G::LDB + q, ws + row * 2 * plan.np + q, 16);
    }
  };

  float acc[MI][NI][4] = {};
  float part[MI][NI][4];
  // One k-step: the stage's 8 channels at one tap (tap_off: its offset in the patch). kExact:
  // into `part`, from zero when kFirst; otherwise straight into acc.
  auto k_step = [&]<bool kFirst>(const float* patch, const float* bs, int tap, int tap_off) {
    uint32_t b[NI][2];
    [[maybe_unused]] uint32_t b_hi[NI][2], b_lo[NI][2];  // 3xTF32
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) {
      const uint2 v = *reinterpret_cast<const uint2*>(bs + (tap * 4 + t) * G::LDB + 2 * (wn0 + ni * 8 + g));
      b[ni][0] = v.x, b[ni][1] = v.y;  // k = t, t + 4
      if constexpr (kExact) {
        matmul::split_tf32(b[ni][0], b_hi[ni][0], b_lo[ni][0]);
        matmul::split_tf32(b[ni][1], b_hi[ni][1], b_lo[ni][1]);
      }
    }
    const float* pt = patch + 2 * (t * plan.plane + tap_off);  // channels t and t + 4
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const uint2 v0 = *reinterpret_cast<const uint2*>(pt + 2 * pix[mi][0]);  // rows g
      const uint2 v1 = *reinterpret_cast<const uint2*>(pt + 2 * pix[mi][1]);  // rows g + 8
      uint32_t av[4] = {v0.x, v1.x, v0.y, v1.y};
      if constexpr (kExact) {
        uint32_t a_hi[4], a_lo[4];
#pragma unroll
        for (int r = 0; r < 4; ++r) matmul::split_tf32(av[r], a_hi[r], a_lo[r]);
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          if constexpr (kFirst) matmul::mma_16x8x8_first(part[mi][ni], a_lo, b_hi[ni]);
          else matmul::mma_16x8x8(part[mi][ni], a_lo, b_hi[ni]);
          matmul::mma_16x8x8(part[mi][ni], a_hi, b_lo[ni]);
          matmul::mma_16x8x8(part[mi][ni], a_hi, b_hi[ni]);
        }
      } else {
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          if constexpr (M == Mma::bf16) matmul::mma_bf16_16x8x16(acc[mi][ni], av, b[ni]);
          else matmul::mma_16x8x8(acc[mi][ni], av, b[ni]);
        }
      }
    }
  };

  // Two stages: stage s lands (wait, barrier: also every warp is done with stage s - 1), then
  // stage s + 1 is queued into the buffer s - 1 used while the block multiplies stage s.
  load(0, smem_patch);
  matmul::cp_async_commit();
  const int kw = static_cast<int>(d.kw), dh = static_cast<int>(d.dh), dw = static_cast<int>(d.dw);
  for (int64_t s = 0; s < plan.chunks; ++s) {
    matmul::cp_async_wait<0>();
    __syncthreads();
    if (s + 1 < plan.chunks) load(s + 1, smem_patch + (s + 1) % 2 * stage);
    matmul::cp_async_commit();
    const float* patch = smem_patch + s % 2 * stage;
    const float* bs = patch + patch_floats;
    // the taps in pairs: in 3xTF32 each pair's sum (16 values of k) is formed from zero and added
    // to acc in f32
    int ky = 0, kx = 0;
    auto next = [&] {
      const int off = ky * dh * plan.cols + kx * dw;
      if (++kx == kw) kx = 0, ++ky;
      return off;
    };
    for (int tap = 0; tap < taps; tap += 2) {
      k_step.template operator()<true>(patch, bs, tap, next());
      if (tap + 1 < taps) k_step.template operator()<false>(patch, bs, tap + 1, next());
      if constexpr (kExact) matmul::add_tiles(acc, part);
    }
  }
  matmul::cp_async_wait<0>();

  // The mma accumulator layout: rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8 tile.
  Y* y = a.y + (img * d.o + group * d.og) * d.ohw;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = p0 + wm0 + mi * 16 + g + 8 * h;
      if (m >= ohw) continue;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t n = n0 + wn0 + ni * 8 + 2 * t + e;
          if (n >= d.og) continue;
          float v = acc[mi][ni][h * 2 + e];
          if constexpr (kExact) {
            if (v != v) {
              v = patch_dot_f32(a.x, d, img, group, m, [&](int64_t c, int64_t tap) {
                return a.wp[packed_at(d, plan, group, c, tap, n)];
              });
            }
          }
          y[n * d.ohw + m] = cast<Y>(a.epilogue(v, group * d.og + n));
        }
    }
}

}  // namespace

}  // namespace kiln::cuda::conv2d
