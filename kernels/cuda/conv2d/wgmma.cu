// Forward convolution at stride 1 on Hopper's warpgroup tensor cores: forward and backward input
// versions 10 and 11 (kernels/cuda/conv2d.cu gives the versions and their figures,
// kernels/cuda/NOTES.md their story). Built for sm_90a (kernels/cuda/CMakeLists.txt); runs on an sm_90 GPU only.
//
// Version 7 (conv2d/patch.cuh) copies the input rows a block of output pixels reads into shared
// memory once per stage of 8 channels (the "patch"), and each warp loads its mma.sync fragments of
// the im2col matrix out of it with one address add per tap. Its warps also load the weights'
// fragments from shared memory into registers, for 32 x 32 warp tiles of m16n8k8: per k-step a
// warp reads as many bytes of weights as of patch. Here the block is two warpgroups of 64 pixels
// each, and each k-step (one tap, the stage's 8 channels) is one wgmma m64nNk8 per warpgroup (N =
// the block's 32 or 64 output channels): A, the im2col rows, still comes from the patch through
// registers (wgmma takes A from registers in mma.sync's fragment layout, so version 7's loads serve
// unchanged), but B, the weights, is read by the tensor cores straight from shared memory, and each
// A fragment serves all N outputs where version 7's served 32.
//
// The weights are packed beforehand in the layout wgmma reads without a swizzle: "core matrices"
// of 8 outputs by 4 values of k (16 bytes each, 128 bytes together), the two of a k-step's 8
// values side by side (leading byte offset 128: the step along k), then the next 8 outputs (stride
// byte offset 256). 3xTF32 packs each weight's TF32 high part and the rest apart, the two halves
// of a stage one after the other: no split in the kernel, three wgmma a k-step (lo x hi, hi x lo,
// hi x hi), each pair of taps summed from zero and added to the accumulators in f32, as version 7.
//
// Measured (H100, kernel-bench, docs/runs/2026-11-28-h100-wgmma-conv), it ties version 7 and is
// not in production: conv2's forward at batch 512 in 3xTF32 296.3 µs [fig cuda.conv2d.wgmma.conv2-b512.fwd.v10-3xtf32.us]
// against 7's 296.4 [fig cuda.conv2d.wgmma.conv2-b512.fwd.v7-3xtf32.us] and cuDNN FP32's
// 275.8 [fig cuda.conv2d.wgmma.conv2-b512.fwd.cudnn.us], in TF32 171 [fig cuda.conv2d.wgmma.conv2-b512.fwd.v10-tf32.us]
// against 164.3 [fig cuda.conv2d.wgmma.conv2-b512.fwd.v7-tf32.us] and cuDNN TF32's
// 169 [fig cuda.conv2d.wgmma.conv2-b512.fwd.cudnn-tf32.us]; the large layer's forward in 3xTF32
// 1215 µs [fig cuda.conv2d.wgmma.large.fwd.v10-3xtf32.us] against 1246 [fig cuda.conv2d.wgmma.large.fwd.v7-3xtf32.us]
// (cuDNN FP32 683.5 [fig cuda.conv2d.wgmma.large.fwd.cudnn.us]), in TF32 713.1 [fig cuda.conv2d.wgmma.large.fwd.v10-tf32.us]
// against 695.6 [fig cuda.conv2d.wgmma.large.fwd.v7-tf32.us] (cuDNN TF32 344.4 [fig cuda.conv2d.wgmma.large.fwd.cudnn-tf32.us]);
// conv2's backward input (32 outputs, so n32 products) in 3xTF32 448.7 [fig cuda.conv2d.wgmma.conv2-b512.bwd-input.v10-3xtf32.us]
// against 363.4 [fig cuda.conv2d.wgmma.conv2-b512.bwd-input.v7-3xtf32.us]. Nsight Compute says it
// is bound by the instructions around each small product (the fragments' loads and split, each
// pair's partial sums zeroed and added, a wait per group), not by the tensor cores: the figures and
// what to try next are in kernels/cuda/NOTES.md.
//
// Version 11 (below version 10) takes that away: A comes from shared memory too, the im2col rows
// of a tap being a window of the patch once the pixels are numbered over the patch's whole width,
// so no thread loads or splits a fragment. It ties as well (H100, kernel-bench,
// docs/runs/2026-11-28-h100-window-conv). conv2's forward at batch 512:
//   TF32 161.7 µs [fig cuda.conv2d.window.conv2-b512.fwd.v11-tf32.us]
//     against version 7's 167.3 [fig cuda.conv2d.window.conv2-b512.fwd.v7-tf32.us]
//     and cuDNN TF32's 169.7 [fig cuda.conv2d.window.conv2-b512.fwd.cudnn-tf32.us];
//   3xTF32, a stage's products summed from zero, 304.6 [fig cuda.conv2d.window.conv2-b512.fwd.v11-3xtf32.us]
//     and a pair's 348.3 [fig cuda.conv2d.window.conv2-b512.fwd.v11-3xtf32-pairs.us]
//     against 7's 299.4 [fig cuda.conv2d.window.conv2-b512.fwd.v7-3xtf32.us]
//     and cuDNN FP32's 277.7 [fig cuda.conv2d.window.conv2-b512.fwd.cudnn.us].
// The large layer's forward:
//   TF32 727.6 [fig cuda.conv2d.window.large.fwd.v11-tf32.us]
//     against 696.8 [fig cuda.conv2d.window.large.fwd.v7-tf32.us]
//     and cuDNN TF32's 352.3 [fig cuda.conv2d.window.large.fwd.cudnn-tf32.us];
//   3xTF32 1338 [fig cuda.conv2d.window.large.fwd.v11-3xtf32.us]
//     (pairs 1573 [fig cuda.conv2d.window.large.fwd.v11-3xtf32-pairs.us])
//     against 1246 [fig cuda.conv2d.window.large.fwd.v7-3xtf32.us]
//     and cuDNN FP32's 690.1 [fig cuda.conv2d.window.large.fwd.cudnn.us].
// conv2's backward input at batch 512:
//   3xTF32 473.9 [fig cuda.conv2d.window.conv2-b512.bwd-input.v11-3xtf32.us]
//     against 362.8 [fig cuda.conv2d.window.conv2-b512.bwd-input.v7-3xtf32.us];
//   TF32 280.1 [fig cuda.conv2d.window.conv2-b512.bwd-input.v11-tf32.us]
//     against 247.1 [fig cuda.conv2d.window.conv2-b512.bwd-input.v7-tf32.us].
// So the instructions around the products were not what held versions 10 and 11 back: with none
// left in TF32, the m64nNk8 products still run at about a seventh of the tensor cores' TF32 rate
// (kernels/cuda/NOTES.md says what that leaves). What did: each stage's copy, products and
// barrier in step. Version 12 (at the end) is version 11 warp-specialised and persistent, and the
// production forward on sm_90.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/conv2d.cuh"
#include "kiln/kernels/cuda/conv2d/common.cuh"
#include "kiln/kernels/cuda/conv2d/patch.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"
#include "kiln/kernels/cuda/matmul/wgmma.cuh"

namespace kiln::cuda::conv2d {

namespace {

constexpr int kWgBM = 128, kWgThreads = 256;  // two warpgroups of 64 output pixels
constexpr int64_t kWgMaxSmem = 113 * 1024;    // two blocks an SM

// Version 7's patch (patch.cuh: its rows, columns, planes and stages of 8 channels) and a stage's
// weights: a block of bn x 8 floats a tap (and a second set for 3xTF32's low parts).
struct WgPlan {
  PatchPlan patch;
  int bn = 0;
  int64_t np = 0, smem = 0;
  bool exact = false;
};

WgPlan wg_plan(const Dims& d, bool exact) {
  WgPlan p;
  p.exact = exact;
  p.bn = d.og > 32 ? 64 : 32;
  p.patch = patch_plan(d, kWgBM, p.bn);
  p.np = (d.og + p.bn - 1) / p.bn * p.bn;
  const int64_t weights = d.khkw * p.bn * kPatchChannels * (exact ? 2 : 1);
  p.smem = (2 * (kPatchChannels * int64_t{p.patch.plane} + weights) + 2 * kPatchChannels * int64_t{p.patch.rows}) * 4;
  return p;
}

// The packed weights' elements for one set (3xTF32 keeps two).
int64_t wg_weights(const Dims& d, const WgPlan& p) {
  return d.cg > 0 ? (d.c / d.cg) * p.patch.chunks * d.khkw * p.np * kPatchChannels : 0;
}

// The plan where version 10 runs (a Hopper GPU, this file built for it, stride 1, the shared
// memory of two blocks an SM, offsets within an int), else an empty one (smem = 0).
WgPlan wg_plan_for(const Geometry& f, bool exact) {
  if (f.stride_h != 1 || f.stride_w != 1 || f.n * f.o * f.oh * f.ow == 0 || !wgmma_runs()) return {};
  const Dims d = dims_of(f);
  const WgPlan p = wg_plan(d, exact);
  const bool fits = p.smem <= kWgMaxSmem && kPatchChannels * d.hw < (int64_t{1} << 31) && d.ohw < (int64_t{1} << 31);
  return fits ? p : WgPlan{};
}

// Packs w: element (n, k) of the k-step (g, chunk, tap), with K = 16 / sizeof(T) values of k in
// 16 bytes (4 floats, 8 bf16) and 2K a k-step, at
// ((g * chunks + chunk) * taps + tap) * np * 2K + ((n / 8) * 2 + k / K) * 8K + (n % 8) * K + k % K,
// zero past C/G or O/G: core matrices of 8 outputs by 16 bytes, the k-step's two side by side
// (128 bytes apart), the next 8 outputs 256 bytes on, whatever T. 3xTF32: the TF32 high parts
// there, the rest `set` elements later.
template <class T>
__global__ void pack_wgmma_weights_kernel(const T* w, T* wp, Dims d, int64_t chunks, int64_t np, bool flip,
                                          bool exact, int64_t set) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  constexpr int K = 16 / static_cast<int>(sizeof(T)), S = 2 * K;
  KILN_GRID_STRIDE(i, set) {  // i runs over (g, chunk, tap, n, k)
    const int64_t k = i % S, r = i / S, n = r % np, r2 = r / np;
    const int64_t tap = r2 % d.khkw, r3 = r2 / d.khkw, chunk = r3 % chunks, g = r3 / chunks;
    const int64_t at = r2 * np * S + ((n / 8) * 2 + k / K) * 8 * K + (n % 8) * K + k % K;
    const T v = weight_at(w, d, flip, g, chunk * S + k, tap, n);
    if constexpr (std::is_same_v<T, float>) {
      if (exact) {
        uint32_t hi, lo;
        matmul::split_tf32(__float_as_uint(v), hi, lo);
        wp[at] = __uint_as_float(hi);
        wp[set + at] = __uint_as_float(lo);
        continue;
      }
    }
    wp[at] = v;
  }
}

struct WgArgs {
  const float* x;   // [N, C, H, W]
  const float* wp;  // packed
  const float* w;   // the layer's weights, for 3xTF32's NaN fallback
  bool flip;        // w read as the backward input's forward form
  DeviceEpilogue<float> epilogue;
  float* y;  // [N, O, OH, OW]
  Dims d;
  WgPlan plan;
  int tiles;  // pixel tiles per image
  int64_t set;  // elements of one set of packed weights
};

// Stores a warp's wgmma accumulators: rows g and g + 8 of the warp's 16, columns 8j + 2t and + 1
// (acc[4j + 2h + e]), as output channels n0 + column of pixel pixel(row) (negative: a row past
// the image, dropped), through the epilogue. With kExact, a NaN (a 3xTF32 product whose split
// overflowed) is computed again in f32 from x and w.
template <int BN, bool kExact, class Args, class Pixel>
__device__ void store_accumulators(const Args& a, const Dims& d, const float* acc, int64_t img, int64_t group,
                                   int64_t n0, int lane, Pixel&& pixel) {
  const int g = lane / 4, t = lane % 4;
  float* y = a.y + (img * d.o + group * d.og) * d.ohw;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t m = pixel(g + 8 * h);
    if (m < 0) continue;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int64_t n = n0 + j * 8 + 2 * t + e;
        if (n >= d.og) continue;
        float v = acc[4 * j + 2 * h + e];
        if constexpr (kExact) {
          if (v != v)
            v = patch_dot_f32(a.x, d, img, group, m,
                              [&](int64_t c, int64_t tap) { return weight_at(a.w, d, a.flip, group, c, tap, n); });
        }
        y[n * d.ohw + m] = a.epilogue(v, group * d.og + n);
      }
  }
}

// One block: 128 consecutive output pixels of image blockIdx.x / tiles, output channels
// blockIdx.y * BN onward of group blockIdx.z; warpgroup wg owns pixels 64 wg .. 64 wg + 63. Per
// stage (8 input channels) the patch and the stage's packed weights are copied into one of two
// buffers while the block multiplies the other.
template <int BN, bool kExact>
__global__ void __launch_bounds__(kWgThreads) wgmma_conv_kernel(WgArgs a) {
#ifdef KILN_WGMMA
  extern __shared__ __align__(128) float smem_wg[];
  constexpr int R = BN / 2;  // accumulators a thread
  const Dims& d = a.d;
  const WgPlan& plan = a.plan;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t img = blockIdx.x / a.tiles, group = blockIdx.z, n0 = int64_t{blockIdx.y} * BN;
  const int ohw = static_cast<int>(d.ohw), ow = static_cast<int>(d.ow), taps = static_cast<int>(d.khkw);
  const int p0 = static_cast<int>(blockIdx.x % a.tiles) * kWgBM;
  const int y_first = p0 / ow, y_last = (min(p0 + kWgBM, ohw) - 1) / ow;
  const int rows = y_last - y_first + 1 + static_cast<int>((d.kh - 1) * d.dh);

  const int patch_floats = kPatchChannels * plan.patch.plane, step_floats = BN * kPatchChannels;  // a k-step's weights
  const int weight_floats = taps * step_floats * (kExact ? 2 : 1), stage = patch_floats + weight_floats;
  int2* lines = reinterpret_cast<int2*>(smem_wg + 2 * stage);
  patch_lines(lines, rows, y_first, d, plan.patch, tid, kWgThreads);
  // The patch offsets of this thread's fragment rows g and g + 8 (pixels past the image read row 0).
  int pix[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = p0 + warp * 16 + g + 8 * h;
    pix[h] = m < ohw ? (m / ow - y_first) * plan.patch.cols + m % ow : 0;
  }
  __syncthreads();

  const float* x_img = a.x + (img * d.c + group * d.cg) * d.hw;
  auto load = [&](int64_t chunk, float* st) {
    copy_patch(st, x_img, chunk, lines, rows, d, plan.patch, warp, lane, kWgThreads / 32);
    // The stage's k-steps, BN outputs of each from output n0: one contiguous run per tap and set.
    float* ws = st + patch_floats;
    const float* from = a.wp + ((group * plan.patch.chunks + chunk) * taps) * plan.np * kPatchChannels + n0 * kPatchChannels;
    const int pieces = step_floats / 4;  // 16-byte copies a k-step
    for (int i = tid; i < (kExact ? 2 : 1) * taps * pieces; i += kWgThreads) {
      const int run = i / pieces, q = i % pieces * 4, set = run / taps, tap = run % taps;
      matmul::cp_async16(ws + run * step_floats + q, from + set * a.set + tap * plan.np * kPatchChannels + q, 16);
    }
  };

  float acc[R] = {};
  [[maybe_unused]] float part[R];
  constexpr int kGroup = kExact ? 2 : 1;  // taps a commit group
  load(0, smem_wg);
  matmul::cp_async_commit();
  const int kw = static_cast<int>(d.kw), dh = static_cast<int>(d.dh), dw = static_cast<int>(d.dw);
  const uint32_t smem_base = matmul::smem_u32(smem_wg);
  for (int64_t s = 0; s < plan.patch.chunks; ++s) {
    matmul::cp_async_wait<0>();
    __syncthreads();
    if (s + 1 < plan.patch.chunks) load(s + 1, smem_wg + (s + 1) % 2 * stage);
    matmul::cp_async_commit();
    const float* patch = smem_wg + s % 2 * stage;
    const uint32_t weights = smem_base + static_cast<uint32_t>((s % 2 * stage + patch_floats) * 4);
    int ky = 0, kx = 0;
    auto fragment = [&](uint32_t (&av)[4]) {  // the next tap's: rows g, g + 8 at k = t, t + 4
      const float* pt = patch + 2 * (t * plan.patch.plane + ky * dh * plan.patch.cols + kx * dw);
      if (++kx == kw) kx = 0, ++ky;
      const uint2 v0 = *reinterpret_cast<const uint2*>(pt + 2 * pix[0]);
      const uint2 v1 = *reinterpret_cast<const uint2*>(pt + 2 * pix[1]);
      av[0] = v0.x, av[1] = v1.x, av[2] = v0.y, av[3] = v1.y;
    };
    auto step = [&](int tap) {  // the descriptor of a tap's weights (3xTF32: its high parts)
      return matmul::packed_descriptor(weights + static_cast<uint32_t>(tap * step_floats * 4));
    };
    // One commit group at a time, waited for before the next group's fragments load: a tap in
    // TF32, a pair of taps in 3xTF32, whose sum is formed from zero and then added to acc in f32
    // (mma rounds toward zero as it adds: matmul/12_3xtf32.cu). Keeping the next group's
    // fragments loading while a group runs (two buffers, wgmma_wait<1>) measured slower in TF32
    // (kernels/cuda/NOTES.md).
    for (int tap = 0; tap < taps; tap += kGroup) {
      const int n = min(kGroup, taps - tap);
      uint32_t frag[kGroup][4];
#pragma unroll
      for (int u = 0; u < kGroup; ++u)
        if (u < n) fragment(frag[u]);
      if constexpr (kExact) {
        uint32_t hi[kGroup][4], lo[kGroup][4];
#pragma unroll
        for (int u = 0; u < kGroup; ++u)
#pragma unroll
          for (int r = 0; r < 4; ++r) matmul::split_tf32(frag[u][r], hi[u][r], lo[u][r]);
#pragma unroll
        for (int i = 0; i < R; ++i) part[i] = 0.0f;
        matmul::wgmma_fence();
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
          if (u >= n) break;
          const uint64_t b_hi = step(tap + u), b_lo = step(taps + tap + u);  // the low parts follow the high
          matmul::wgmma_tf32(part, lo[u], b_hi);
          matmul::wgmma_tf32(part, hi[u], b_lo);
          matmul::wgmma_tf32(part, hi[u], b_hi);
        }
        matmul::wgmma_commit();
        matmul::wgmma_wait<0>();
        matmul::fence_accumulators(part);
#pragma unroll
        for (int i = 0; i < R; ++i) acc[i] += part[i];
      } else {
        matmul::wgmma_fence();
#pragma unroll
        for (int u = 0; u < kGroup; ++u)
          if (u < n) matmul::wgmma_tf32(acc, frag[u], step(tap + u));
        matmul::wgmma_commit();
        matmul::wgmma_wait<0>();
      }
    }
  }
  matmul::cp_async_wait<0>();
  matmul::fence_accumulators(acc);

  store_accumulators<BN, kExact>(a, d, acc, img, group, n0, lane, [&](int row) -> int64_t {
    const int m = p0 + warp * 16 + row;
    return m < ohw ? m : -1;
  });
#else
  (void)a;
  __trap();
#endif
}

// Packs w (flip: the layer's own weights, for the backward input) and runs version 10 on the
// forward view f.
void wgmma_forward(const float* x, const float* w, bool flip, float* packed, const DeviceEpilogue<float>& e, float* y,
                   const Geometry& f, const WgPlan& plan, cudaStream_t stream, const char* op) {
  const Dims d = dims_of(f);
  const int64_t set = wg_weights(d, plan);
  launch_dependent(pack_wgmma_weights_kernel<float>, blocks_for(set), kThreads, 0, stream, w, packed, d, plan.patch.chunks,
                   plan.np, flip, plan.exact, set);
  KILN_CUDA_LAUNCH_CHECK(op);
  const int tiles = static_cast<int>((d.ohw + kWgBM - 1) / kWgBM);
  const WgArgs args{x, packed, w, flip, e, y, d, plan, tiles, set};
  auto launch = [&]<int BN, bool kExact>() {
    auto* kernel = wgmma_conv_kernel<BN, kExact>;
    const int64_t gx = d.n * tiles, gy = plan.np / BN;
    KILN_CHECK(gx < (int64_t{1} << 31) && gy <= 65535 && f.groups <= 65535, ShapeError, "cuda ", op,
               ": the problem is too large for one launch (", gx, " x ", gy, " x ", f.groups, " blocks)");
    const int bytes = static_cast<int>(plan.smem);
    allow_dynamic_smem(kernel, bytes);
    kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(f.groups)), kWgThreads,
             bytes, stream>>>(args);
    KILN_CUDA_LAUNCH_CHECK(op);
  };
  if (plan.bn == 64) {
    if (plan.exact) launch.template operator()<64, true>();
    else launch.template operator()<64, false>();
  } else {
    if (plan.exact) launch.template operator()<32, true>();
    else launch.template operator()<32, false>();
  }
}

// ---- Version 11: A from shared memory too, the im2col rows as a window of the patch

// wgmma reads A from shared memory in "core matrices" of 8 rows of 16 contiguous bytes, the core
// matrices along M one stride apart. Version 10's rows (output pixels) are not evenly spaced in its
// patch: where an output row ends, the next pixel is (KW - 1) dw patch columns on. Version 11
// numbers the pixels over the patch's whole width instead, m = oy * cols + ox with ox < cols (=
// OW + (KW - 1) dw), and drops the (KW - 1) dw extra columns of each row at the store. Then a tap's
// im2col rows for a block are the patch's pixels from a fixed offset on, in order: the patch stored
// [channel quad][pixel][4 channels] (16 bytes a pixel) is already in the core-matrix layout, and
// a tap's A is a descriptor at that offset (leading byte offset: one quad's plane; stride byte
// offset 128, the next 8 pixels). No thread loads or splits a fragment. 3xTF32 splits each stage's
// patch once, after its copy lands, into the high parts (in place) and the rest (a second plane).
struct WinPlan {
  int cols = 0, rows = 0;  // the patch's columns and rows (a block's 128 pixels, their taps' reach)
  int pixels = 0;          // a channel quad's plane: rows * cols, rounded up to 8
  int64_t chunks = 0;      // stages of 8 channels
  int bn = 0;
  int64_t np = 0, smem = 0;
  bool exact = false;
};

WinPlan win_plan(const Dims& d, bool exact) {
  WinPlan p;
  p.exact = exact;
  p.cols = static_cast<int>(d.ow + (d.kw - 1) * d.dw);
  // a block's pixels start up to cols - 1 into its first row; the last tap reaches
  // (KH - 1) dh rows and (KW - 1) dw columns past its last pixel
  const int64_t reach = p.cols - 1 + kWgBM + (d.kh - 1) * d.dh * p.cols + (d.kw - 1) * d.dw;
  p.rows = static_cast<int>((reach + p.cols - 1) / p.cols);
  p.pixels = (p.rows * p.cols + 7) / 8 * 8;
  p.chunks = (d.cg + kPatchChannels - 1) / kPatchChannels;
  p.bn = d.og > 32 ? 64 : 32;
  p.np = (d.og + p.bn - 1) / p.bn * p.bn;
  const int64_t plane = kPatchChannels * int64_t{p.pixels}, weights = d.khkw * p.bn * kPatchChannels * (exact ? 2 : 1);
  // two stages of patch and weights, 3xTF32's one plane of low parts, the copy's line table
  p.smem = (2 * (plane + weights) + (exact ? plane : 0) + 2 * kPatchChannels * int64_t{p.rows}) * 4;
  return p;
}

WinPlan win_plan_for(const Geometry& f, bool exact) {
  if (f.stride_h != 1 || f.stride_w != 1 || f.n * f.o * f.oh * f.ow == 0 || !wgmma_runs()) return {};
  const Dims d = dims_of(f);
  const WinPlan p = win_plan(d, exact);
  // the descriptors' 14-bit fields: a plane of pixels * 16 bytes; the pixel index within an int
  const bool fits = p.smem <= kWgMaxSmem && p.pixels < (1 << 14) && kPatchChannels * d.hw < (int64_t{1} << 31) &&
                    d.oh * p.cols + kWgBM < (int64_t{1} << 31);
  return fits ? p : WinPlan{};
}

// The packed weights (version 10's packing) for version 11's plan.
WgPlan win_weights_plan(const WinPlan& w) {
  WgPlan p;
  p.patch.chunks = w.chunks;
  p.bn = w.bn;
  p.np = w.np;
  p.exact = w.exact;
  return p;
}

struct WinArgs {
  const float* x;   // [N, C, H, W]
  const float* wp;  // packed as version 10's
  const float* w;   // the layer's weights, for 3xTF32's NaN fallback
  bool flip;
  DeviceEpilogue<float> epilogue;
  float* y;
  Dims d;
  WinPlan plan;
  int tiles;    // 128-pixel tiles of an image's oh * cols pixels
  int64_t set;  // elements of one set of packed weights
};

#ifdef KILN_WGMMA
// A descriptor of A in the patch at shared address addr: the next 4 channels one channel quad's
// plane on (`plane_bytes`), the next 8 pixels 128 bytes on.
__device__ inline uint64_t win_descriptor(uint32_t addr, uint32_t plane_bytes) {
  return matmul::interleaved_descriptor(addr, plane_bytes, 128);
}

// A descriptor as its two 32-bit words. plus(units) is the descriptor moved that many 16-byte
// units on: an add to the low word alone (the address field, bits 0-13, cannot carry, shared
// memory being under 2^18 bytes), where a 64-bit add took two instructions and hid from the
// compiler that the high word never changes.
struct Descriptor {
  uint32_t lo, hi;
  __device__ explicit Descriptor(uint64_t d) : lo(static_cast<uint32_t>(d)), hi(static_cast<uint32_t>(d >> 32)) {}
  __device__ uint64_t plus(uint32_t units) const { return uint64_t{hi} << 32 | (lo + units); }
};
#endif

// One block: pixels 128 blockIdx.x % tiles onward (over the patch's width) of image
// blockIdx.x / tiles, output channels blockIdx.y * BN onward of group blockIdx.z; warpgroup wg
// owns 64 of them. kStageSums (3xTF32): each stage's products summed from zero before they are
// added to the accumulators in f32, rather than each pair of taps' (versions 7 and 10).
template <int BN, bool kExact, bool kStageSums>
__global__ void __launch_bounds__(kWgThreads) window_conv_kernel(WinArgs a) {
#ifdef KILN_WGMMA
  extern __shared__ __align__(128) float smem_win[];
  constexpr int R = BN / 2;
  const Dims& d = a.d;
  const WinPlan& plan = a.plan;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32, wg = warp / 4;
  const int64_t img = blockIdx.x / a.tiles, group = blockIdx.z, n0 = int64_t{blockIdx.y} * BN;
  const int cols = plan.cols, taps = static_cast<int>(d.khkw);
  const int p0 = static_cast<int>(blockIdx.x % a.tiles) * kWgBM, y_first = p0 / cols;

  const int plane = kPatchChannels * plan.pixels, step_floats = BN * kPatchChannels;
  const int weight_floats = taps * step_floats * (kExact ? 2 : 1), stage = plane + weight_floats;
  float* low = smem_win + 2 * stage;  // 3xTF32: the current stage's low parts
  int2* lines = reinterpret_cast<int2*>(low + (kExact ? plane : 0));
  // lines[l], l = (channel c < 8, patch row r): where it starts in a stage's first input plane (-1
  // outside the input) and in the patch ([quad][pixel][4]: pixel r * cols, channel c % 4)
  const int lines_n = kPatchChannels * plan.rows;
  for (int l = tid; l < lines_n; l += kWgThreads) {
    const int c = l / plan.rows, r = l % plan.rows, iy = y_first - static_cast<int>(d.ph) + r;
    lines[l] = {iy >= 0 && iy < d.h ? c * static_cast<int>(d.hw) + iy * static_cast<int>(d.w) : -1,
                (c / 4) * 4 * plan.pixels + r * cols * 4 + c % 4};
  }
  __syncthreads();

  const float* x_img = a.x + (img * d.c + group * d.cg) * d.hw;
  auto load = [&](int64_t chunk, float* st) {
    const int64_t left = d.cg - chunk * kPatchChannels;
    const int valid_lines = static_cast<int>(left < kPatchChannels ? left : kPatchChannels) * plan.rows;
    const float* src = x_img + chunk * kPatchChannels * d.hw;
    const int width = static_cast<int>(d.w), pw = static_cast<int>(d.pw);
#pragma unroll 1
    for (int l = warp; l < lines_n; l += kWgThreads / 32) {
      const int2 line = lines[l];
      const bool row_ok = line.x >= 0 && l < valid_lines;
#pragma unroll 1
      for (int col = lane; col < cols; col += 32) {
        const int ix = col - pw;
        const bool ok = row_ok && static_cast<unsigned>(ix) < static_cast<unsigned>(width);
        matmul::cp_async4(st + line.y + 4 * col, src + (ok ? line.x + ix : 0), ok);
      }
    }
    float* ws = st + plane;
    const float* from = a.wp + ((group * plan.chunks + chunk) * taps) * plan.np * kPatchChannels + n0 * kPatchChannels;
    const int pieces = step_floats / 4;
    for (int i = tid; i < (kExact ? 2 : 1) * taps * pieces; i += kWgThreads) {
      const int run = i / pieces, q = i % pieces * 4, set = run / taps, tap = run % taps;
      matmul::cp_async16(ws + run * step_floats + q, from + set * a.set + tap * plan.np * kPatchChannels + q, 16);
    }
  };

  float acc[R] = {};
  [[maybe_unused]] float part[R];
  load(0, smem_win);
  matmul::cp_async_commit();
  const int kw = static_cast<int>(d.kw), dh = static_cast<int>(d.dh), dw = static_cast<int>(d.dw);
  const uint32_t smem_base = matmul::smem_u32(smem_win), plane_bytes = static_cast<uint32_t>(plan.pixels) * 16;
  const int first = p0 - y_first * cols + wg * 64;  // the warpgroup's first pixel in the patch
  for (int64_t s = 0; s < plan.chunks; ++s) {
    matmul::cp_async_wait<0>();
    const int at = static_cast<int>(s % 2) * stage;
    if constexpr (kExact) {  // split this stage's patch: high parts in place, the rest to `low`
      __syncthreads();
      for (int i = tid; i < plane; i += kWgThreads) {
        uint32_t hi, lo;
        matmul::split_tf32(__float_as_uint(smem_win[at + i]), hi, lo);
        smem_win[at + i] = __uint_as_float(hi);
        low[i] = __uint_as_float(lo);
      }
    }
    matmul::fence_async_shared();
    __syncthreads();
    if (s + 1 < plan.chunks) load(s + 1, smem_win + (s + 1) % 2 * stage);
    matmul::cp_async_commit();
    const uint32_t a_hi = smem_base + static_cast<uint32_t>(at * 4), a_lo = matmul::smem_u32(low);
    const uint32_t weights = smem_base + static_cast<uint32_t>((at + plane) * 4);
    auto b_desc = [&](int run) { return matmul::packed_descriptor(weights + static_cast<uint32_t>(run * step_floats * 4)); };
    auto a_desc = [&](uint32_t base, int tap) {  // the tap's window: pixel first + ky dh cols + kx dw
      const int offset = first + tap / kw * dh * cols + tap % kw * dw;
      return win_descriptor(base + static_cast<uint32_t>(offset) * 16, plane_bytes);
    };
    if constexpr (kExact) {
      // sums from zero over a group of taps (a pair, or the stage), added to acc in f32: the
      // tensor cores round toward zero as they add (matmul/12_3xtf32.cu)
      constexpr int kGroup = kStageSums ? 1 << 20 : 2;
      for (int tap = 0; tap < taps; tap += kGroup) {
        const int end = min(taps, tap + kGroup);
#pragma unroll
        for (int i = 0; i < R; ++i) part[i] = 0.0f;
        matmul::fence_accumulators(part);  // zeroed before the fence, not moved in among the products
        matmul::wgmma_fence();
        for (int u = tap; u < end; ++u) {
          const uint64_t hi = a_desc(a_hi, u), b_hi = b_desc(u), b_lo = b_desc(taps + u);
          matmul::wgmma_tf32(part, a_desc(a_lo, u), b_hi);
          matmul::wgmma_tf32(part, hi, b_lo);
          matmul::wgmma_tf32(part, hi, b_hi);
        }
        matmul::wgmma_commit();
        matmul::wgmma_wait<0>();
        matmul::fence_accumulators(part);
#pragma unroll
        for (int i = 0; i < R; ++i) acc[i] += part[i];
      }
    } else {
      matmul::wgmma_fence();
      for (int tap = 0; tap < taps; ++tap) matmul::wgmma_tf32(acc, a_desc(a_hi, tap), b_desc(tap));
      matmul::wgmma_commit();
      matmul::wgmma_wait<0>();
    }
  }
  matmul::cp_async_wait<0>();
  matmul::fence_accumulators(acc);

  // a row is pixel p0 + 64 wg + row over the patch's width; its extra columns are dropped
  store_accumulators<BN, kExact>(a, d, acc, img, group, n0, lane, [&](int row) -> int64_t {
    const int q = p0 + warp * 16 + row, oy = q / cols, ox = q - oy * cols;
    return oy < d.oh && ox < d.ow ? int64_t{oy} * d.ow + ox : -1;
  });
#else
  (void)a;
  __trap();
#endif
}

// Packs w as version 10 does and runs version 11 on the forward view f.
void window_forward(const float* x, const float* w, bool flip, float* packed, const DeviceEpilogue<float>& e,
                    float* y, const Geometry& f, const WinPlan& plan, WindowSums sums, cudaStream_t stream,
                    const char* op) {
  const Dims d = dims_of(f);
  const WgPlan packing = win_weights_plan(plan);
  const int64_t set = wg_weights(d, packing);
  launch_dependent(pack_wgmma_weights_kernel<float>, blocks_for(set), kThreads, 0, stream, w, packed, d, plan.chunks, plan.np,
                   flip, plan.exact, set);
  KILN_CUDA_LAUNCH_CHECK(op);
  const int tiles = static_cast<int>((d.oh * plan.cols + kWgBM - 1) / kWgBM);
  const WinArgs args{x, packed, w, flip, e, y, d, plan, tiles, set};
  auto launch = [&]<int BN, bool kExact, bool kStageSums>() {
    auto* kernel = window_conv_kernel<BN, kExact, kStageSums>;
    const int64_t gx = d.n * tiles, gy = plan.np / BN;
    KILN_CHECK(gx < (int64_t{1} << 31) && gy <= 65535 && f.groups <= 65535, ShapeError, "cuda ", op,
               ": the problem is too large for one launch (", gx, " x ", gy, " x ", f.groups, " blocks)");
    const int bytes = static_cast<int>(plan.smem);
    allow_dynamic_smem(kernel, bytes);
    kernel<<<dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(f.groups)), kWgThreads,
             bytes, stream>>>(args);
    KILN_CUDA_LAUNCH_CHECK(op);
  };
  const bool stages = sums == WindowSums::stages;
  auto with_bn = [&]<int BN>() {
    if (!plan.exact) launch.template operator()<BN, false, false>();
    else if (stages) launch.template operator()<BN, true, true>();
    else launch.template operator()<BN, true, false>();
  };
  if (plan.bn == 64) with_bn.template operator()<64>();
  else with_bn.template operator()<32>();
}


// ---- Version 12: version 11 warp-specialised and persistent, the patch through a ring of stages

// Version 11's 256 threads copy a stage, wait for it, multiply it and wait for the products in
// step, a block-wide barrier a stage, so each stage pays the copy's latency and the products' in
// full, with only a second block on the SM to cover them. Version 12 splits the work as matmul 13
// does: warpgroup 0 fills a ring of stages, warpgroups 1 and 2 multiply, and they meet at two
// mbarriers a stage, "full" (the producer's 128 threads have stored the stage and the copy engine
// has brought its weights) and "empty" (the 8 consumer warps are done reading it). One block an
// SM walks the problem's tiles (persistent), and the ring runs on from one tile into the next.
// - The producer takes a stage's patch 4 channels of a pixel a thread at a time (lanes on
//   neighbouring pixels: coalesced), by cp.async, nothing in registers and no wait: the copies
//   themselves arrive on "full" as they land. In 3xTF32 the consumers split the window
//   themselves: each thread loads its A fragments (rows g and g + 8 of its warp's 16 pixels,
//   channels t and t + 4, one value from each of the patch's planes) and splits them in
//   registers, a tap's loads in flight while the tap before multiplies; the weights' heads and
//   tails are two sets read from shared memory. The producer gives registers to the consumers
//   (setmaxnreg). Splitting in the producer instead, each thread its own pieces once its cp.async
//   groups had landed (two stages behind its copies), into a second set of the patch that the
//   consumers read through descriptors as TF32 does, was slower everywhere (against eeab05f in
//   one call, one H200, docs/runs/2026-11-29-h200-ring-producer-split), µs: conv2 at batch 512
//   forward 168.2 [fig cuda.conv2d.ring-producer-split.conv2-b512.fwd.old.us]
//   -> 203.2 [fig cuda.conv2d.ring-producer-split.conv2-b512.fwd.new.us], backward input
//   205.9 [fig cuda.conv2d.ring-producer-split.conv2-b512.bwd-input.old.us]
//   -> 285.8 [fig cuda.conv2d.ring-producer-split.conv2-b512.bwd-input.new.us]; the large layer's
//   forward 567.7 [fig cuda.conv2d.ring-producer-split.large.fwd.old.us]
//   -> 796.5 [fig cuda.conv2d.ring-producer-split.large.fwd.new.us], backward input
//   569.6 [fig cuda.conv2d.ring-producer-split.large.bwd-input.old.us]
//   -> 792.3 [fig cuda.conv2d.ring-producer-split.large.bwd-input.new.us]; the f32 CNN's epoch at
//   batch 512 0.101 s [fig cuda.conv2d.ring-producer-split.b512.old.epoch]
//   -> 0.115 [fig cuda.conv2d.ring-producer-split.b512.new.epoch], at 64 0.188 [fig cuda.conv2d.ring-producer-split.b64.old.epoch] -> 0.195 [fig cuda.conv2d.ring-producer-split.b64.new.epoch].
//   Taken out.
// - The weights come by bulk copies of the copy engine: once for the block where every stage's
//   fit beside the ring (MNIST's conv2, both passes: 74 KB in TF32, 147 KB in 3xTF32's two sets),
//   else with each stage.
// - Each consumer warpgroup multiplies mw products of 64 pixels a tap (128 mw pixels a block), so
//   that a stage's weights serve twice as many pixels and the patch's extra rows weigh less.
//   3xTF32 takes one product where the persistent grid's rounds then copy fewer patch pixels
//   (ring_plan_for; one H200, before and after in one call, docs/runs/2026-11-28-h200-ring-rounds):
//   conv2's forward at batch 64 40.4 µs [fig cuda.conv2d.ring-rounds.conv2-b64.fwd.v12-3xtf32.new.us]
//   against two products' 49.4 [fig cuda.conv2d.ring-rounds.conv2-b64.fwd.v12-3xtf32.old.us], its
//   backward input 45.3 [fig cuda.conv2d.ring-rounds.conv2-b64.bwd-input.v12-3xtf32.new.us] against
//   48.0 [fig cuda.conv2d.ring-rounds.conv2-b64.bwd-input.v12-3xtf32.old.us] (cuDNN FP32
//   71.9 [fig cuda.conv2d.ring-rounds.conv2-b64.fwd.cudnn.us] and 56.4 [fig cuda.conv2d.ring-rounds.conv2-b64.bwd-input.cudnn.us]);
//   at batch 512 it keeps two (forward 250.6 [fig cuda.conv2d.ring-rounds.conv2-b512.fwd.v12-3xtf32.new.us]
//   and 250.3 [fig cuda.conv2d.ring-rounds.conv2-b512.fwd.v12-3xtf32.old.us], backward input
//   244.4 [fig cuda.conv2d.ring-rounds.conv2-b512.bwd-input.v12-3xtf32.new.us] and
//   246.1 [fig cuda.conv2d.ring-rounds.conv2-b512.bwd-input.v12-3xtf32.old.us]). TF32 at one
//   product did not move (forward 23.7 [fig cuda.conv2d.ring-rounds.conv2-b64.fwd.v12-tf32.new.us]
//   against 23.7 [fig cuda.conv2d.ring-rounds.conv2-b64.fwd.v12-tf32.old.us], backward input
//   29.0 [fig cuda.conv2d.ring-rounds.conv2-b64.bwd-input.v12-tf32.new.us] against
//   28.3 [fig cuda.conv2d.ring-rounds.conv2-b64.bwd-input.v12-tf32.old.us]) and keeps two.
//   mnist-train's f32 CNN then took 0.299 s [fig cuda.conv2d.ring-rounds.cnn.b64.epoch2] an epoch
//   at batch 64 and 0.146 [fig cuda.conv2d.ring-rounds.cnn.b512.epoch2] at 512
//   (docs/runs/2026-11-28-h200-ring-rounds-train).
// - TF32 keeps a stage's products in flight while the next stage's are issued (wgmma_wait<1>);
//   3xTF32 sums each stage from zero, as version 11's stage sums, and waits for it to add it.
// - Alternating (RingPlan::alternate), the consumer warpgroups take the block's items in turn, 64
//   mw pixels each, each with its half of the ring, so that one loads and splits while the other
//   multiplies, and one's epilogue runs under the other's products. Everywhere, against eeab05f in
//   one call (one H200, docs/runs/2026-11-29-h200-ring-alternate-all), µs: conv2's 3xTF32 forward
//   at batch 512 169.6 [fig cuda.conv2d.ring-alternate-all.conv2.fwd.3xtf32.old.us]
//   -> 146.6 [fig cuda.conv2d.ring-alternate-all.conv2.fwd.3xtf32.new.us], but its backward input
//   205.6 [fig cuda.conv2d.ring-alternate-all.conv2.bwd-input.3xtf32.old.us]
//   -> 218.5 [fig cuda.conv2d.ring-alternate-all.conv2.bwd-input.3xtf32.new.us] (8 stages an item)
//   and in TF32 117.6 [fig cuda.conv2d.ring-alternate-all.conv2.bwd-input.tf32.old.us]
//   -> 178.1 [fig cuda.conv2d.ring-alternate-all.conv2.bwd-input.tf32.new.us], and the large layer,
//   whose stages carry their weights, 579.8 [fig cuda.conv2d.ring-alternate-all.large.fwd.3xtf32.old.us]
//   -> 908.1 [fig cuda.conv2d.ring-alternate-all.large.fwd.3xtf32.new.us] in 3xTF32 and
//   245 [fig cuda.conv2d.ring-alternate-all.large.fwd.tf32.old.us]
//   -> 401 [fig cuda.conv2d.ring-alternate-all.large.fwd.tf32.new.us] in TF32; the f32 CNN's epoch at
//   batch 512 0.101 s [fig cuda.conv2d.ring-alternate-all.b512.old.epoch]
//   -> 0.0987 [fig cuda.conv2d.ring-alternate-all.b512.new.epoch], the TF32 one's
//   0.0703 [fig cuda.conv2d.ring-alternate-all.b512tf32.old.epoch]
//   -> 0.076 [fig cuda.conv2d.ring-alternate-all.b512tf32.new.epoch]. So production alternates in
//   3xTF32 only, where an item has at most 4 stages and the weights are resident (ring_plan_for;
//   docs/runs/2026-11-29-h200-ring-alternate, every CUDA test passing, memcheck clean): conv2's
//   forward 169.4 [fig cuda.conv2d.ring-alternate.conv2.fwd.3xtf32.old.us]
//   -> 147.9 [fig cuda.conv2d.ring-alternate.conv2.fwd.3xtf32.new.us], its backward input as it was,
//   205.8 [fig cuda.conv2d.ring-alternate.conv2.bwd-input.3xtf32.old.us]
//   and 205 [fig cuda.conv2d.ring-alternate.conv2.bwd-input.3xtf32.new.us]; the f32 CNN at batch 512
//   594098 images/s [fig cuda.conv2d.ring-alternate.b512.old.images-per-s]
//   -> 616116 [fig cuda.conv2d.ring-alternate.b512.new.images-per-s] (epochs 2 and 3). The
//   kernels that do not alternate lost a little all the same, the sub-ring's arithmetic now in their
//   code too: TF32's backward input at conv2 117.5 [fig cuda.conv2d.ring-alternate.conv2.bwd-input.tf32.old.us]
//   -> 124.9 [fig cuda.conv2d.ring-alternate.conv2.bwd-input.tf32.new.us], its forward
//   91.26 [fig cuda.conv2d.ring-alternate.conv2.fwd.tf32.old.us]
//   -> 92.01 [fig cuda.conv2d.ring-alternate.conv2.fwd.tf32.new.us], the TF32 CNN at batch 512
//   853671 images/s [fig cuda.conv2d.ring-alternate.b512tf32.old.images-per-s]
//   -> 845856 [fig cuda.conv2d.ring-alternate.b512tf32.new.images-per-s] (kernels/cuda/NOTES.md).
//   Then both sides walked their sub-rings by a stage and a lap, with no division a stage (each had
//   divided by the ring's size since version 12 began, and the producer had then chosen a sub-ring's
//   size and base too), and every form gained, against 1b0e445 in one call (one H200,
//   docs/runs/2026-11-29-h200-ring-cursors), µs at conv2, batch 512: TF32's backward input
//   123.9 [fig cuda.conv2d.ring-cursors.conv2.bwd-input.tf32.old.us]
//   -> 118.4 [fig cuda.conv2d.ring-cursors.conv2.bwd-input.tf32.new.us], its forward
//   92.46 [fig cuda.conv2d.ring-cursors.conv2.fwd.tf32.old.us]
//   -> 88.87 [fig cuda.conv2d.ring-cursors.conv2.fwd.tf32.new.us], bf16's forward
//   84.04 [fig cuda.conv2d.ring-cursors.conv2.fwd.bf16.old.us]
//   -> 79.81 [fig cuda.conv2d.ring-cursors.conv2.fwd.bf16.new.us] and backward input
//   110 [fig cuda.conv2d.ring-cursors.conv2.bwd-input.bf16.old.us]
//   -> 106.9 [fig cuda.conv2d.ring-cursors.conv2.bwd-input.bf16.new.us], 3xTF32's forward
//   147.9 [fig cuda.conv2d.ring-cursors.conv2.fwd.3xtf32.old.us]
//   -> 143.9 [fig cuda.conv2d.ring-cursors.conv2.fwd.3xtf32.new.us] and backward input
//   205.6 [fig cuda.conv2d.ring-cursors.conv2.bwd-input.3xtf32.old.us]
//   -> 202.2 [fig cuda.conv2d.ring-cursors.conv2.bwd-input.3xtf32.new.us]; the CNN at batch 512
//   614600 [fig cuda.conv2d.ring-cursors.b512.old.images-per-s]
//   -> 618960 [fig cuda.conv2d.ring-cursors.b512.new.images-per-s] images a second in f32,
//   840228 [fig cuda.conv2d.ring-cursors.b512tf32.old.images-per-s]
//   -> 856917 [fig cuda.conv2d.ring-cursors.b512tf32.new.images-per-s] in TF32.
// - Nothing the producer or a consumer does a stage is more than it must: a piece's input offset
//   is worked out once a tile, its loads have no branch, a tap moves a descriptor by one add, and
//   the epilogue finds its pixels and loads its biases once a tile. The first build, which did
//   those a stage and an output at a time, tied version 11: its producer issued about 830
//   instructions a stage and set the pace (kernels/cuda/NOTES.md).
//
// Measured (one H200, kernel-bench, docs/runs/2026-11-28-h200-ring-copies), µs. conv2 at batch 512,
// forward:
//   TF32 102.1 [fig cuda.conv2d.ring.conv2-b512.fwd.v12-tf32.us]
//     against version 7's 170.1 [fig cuda.conv2d.ring.conv2-b512.fwd.v7-tf32.us]
//     and cuDNN TF32's 163.1 [fig cuda.conv2d.ring.conv2-b512.fwd.cudnn-tf32.us];
//   3xTF32 254.3 [fig cuda.conv2d.ring.conv2-b512.fwd.v12-3xtf32.us]
//     against 7's 304.9 [fig cuda.conv2d.ring.conv2-b512.fwd.v7-3xtf32.us]
//     and cuDNN FP32's 256.2 [fig cuda.conv2d.ring.conv2-b512.fwd.cudnn.us].
// conv2 at batch 64, forward: TF32 24.1 [fig cuda.conv2d.ring.conv2-b64.fwd.v12-tf32.us]
//   (7: 31.7 [fig cuda.conv2d.ring.conv2-b64.fwd.v7-tf32.us], cuDNN TF32 44.7 [fig cuda.conv2d.ring.conv2-b64.fwd.cudnn-tf32.us]),
//   3xTF32 51.0 [fig cuda.conv2d.ring.conv2-b64.fwd.v12-3xtf32.us]
//   (7: 55.1 [fig cuda.conv2d.ring.conv2-b64.fwd.v7-3xtf32.us], cuDNN FP32 71.5 [fig cuda.conv2d.ring.conv2-b64.fwd.cudnn.us]).
// conv2's backward input at batch 512 (its forward form has 32 outputs: m64n32 products):
//   3xTF32 265.7 [fig cuda.conv2d.ring.conv2-b512.bwd-input.v12-3xtf32.us]
//     against 7's 368.6 [fig cuda.conv2d.ring.conv2-b512.bwd-input.v7-3xtf32.us]
//     and cuDNN FP32's 236.6 [fig cuda.conv2d.ring.conv2-b512.bwd-input.cudnn.us];
//   TF32 135.4 [fig cuda.conv2d.ring.conv2-b512.bwd-input.v12-tf32.us]
//     against 7's 246.6 [fig cuda.conv2d.ring.conv2-b512.bwd-input.v7-tf32.us]
//     and cuDNN TF32's 194.8 [fig cuda.conv2d.ring.conv2-b512.bwd-input.cudnn-tf32.us]
//     (288.2 while TF32's producer loaded through registers: it could not fill stages of 16-cycle
//     products fast enough).
// The large layer, forward:
//   TF32 259.7 [fig cuda.conv2d.ring.large.fwd.v12-tf32.us]
//     against 7's 702.4 [fig cuda.conv2d.ring.large.fwd.v7-tf32.us]
//     and cuDNN TF32's 320.7 [fig cuda.conv2d.ring.large.fwd.cudnn-tf32.us]
//     (backward input 260.9 [fig cuda.conv2d.ring.large.bwd-input.v12-tf32.us],
//     cuDNN TF32 316.2 [fig cuda.conv2d.ring.large.bwd-input.cudnn-tf32.us]);
//   3xTF32 656.3 [fig cuda.conv2d.ring.large.fwd.v12-3xtf32.us]
//     against 7's 1264.0 [fig cuda.conv2d.ring.large.fwd.v7-3xtf32.us]
//     and cuDNN FP32's 628.2 [fig cuda.conv2d.ring.large.fwd.cudnn.us].
// 3xTF32 with the window split by the consumers (the producer's split, through registers, was
// the figures above; docs/runs/2026-11-28-h200-ring-regs): conv2 at batch 512, forward
// 251.7 µs [fig cuda.conv2d.ring-regs.conv2-b512.fwd.v12-3xtf32.us] (cuDNN FP32
// 255.5 [fig cuda.conv2d.ring-regs.conv2-b512.fwd.cudnn.us]), backward input
// 246.0 [fig cuda.conv2d.ring-regs.conv2-b512.bwd-input.v12-3xtf32.us] (cuDNN FP32
// 232.3 [fig cuda.conv2d.ring-regs.conv2-b512.bwd-input.cudnn.us]); at batch 64 forward
// 49.9 [fig cuda.conv2d.ring-regs.conv2-b64.fwd.v12-3xtf32.us] (cuDNN FP32
// 71.8 [fig cuda.conv2d.ring-regs.conv2-b64.fwd.cudnn.us]); the large layer's forward
// 651.4 [fig cuda.conv2d.ring-regs.large.fwd.v12-3xtf32.us] (cuDNN FP32 624.5 [fig cuda.conv2d.ring-regs.large.fwd.cudnn.us]).
// The tensor cores then ran at about a fifth of their TF32 rate at conv2 (64 outputs: m64n64) and
// a half at the large layer (m64n128). Not for want of a wider product: alone, with nothing to
// feed, m64n64k8 runs at 476.6 TFLOP/s [fig cuda.wgmma-rate.tf32.n64.smem.tflops], as fast as
// m64n256k8 (485.7 [fig cuda.wgmma-rate.tf32.n256.smem.tflops]; kernel-bench --only wgmma), and A read
// as this kernel's window as fast as A packed (apps/bench/bench_wgmma.cu). What Nsight Compute showed
// instead (docs/runs/2026-11-28-h200-ring-ncu-before, scripts/ncu_source.py): 46.7M instructions for
// conv2's TF32 forward at batch 512, about 450 a consumer warp a stage for its 18 products (each
// descriptor built in 64 bits per thread and moved to the uniform registers the products read)
// and about 1180 a warp an item in the epilogue, with three warps a scheduler to hide them. So:
// - the warpgroup's index is broadcast from lane 0 (__shfl_sync), which tells the compiler it is
//   uniform: the descriptors that follow from it are built in uniform registers;
// - a tap moves a descriptor by a 32-bit add to its low word (Descriptor);
// - the epilogue stores at 32-bit offsets, applies the activation as one select, and 3xTF32's NaN
//   fallback runs out of line, once every output is stored (ring_output_f32).
// Before and after in one call (one H200, docs/runs/2026-11-28-h200-ring-uniform), µs:
//   conv2, batch 512, 3xTF32: forward 249.7 [fig cuda.conv2d.ring-uniform.conv2-b512.fwd.v12-3xtf32.old.us]
//     -> 172.8 [fig cuda.conv2d.ring-uniform.conv2-b512.fwd.v12-3xtf32.new.us] (cuDNN FP32
//     251.8 [fig cuda.conv2d.ring-uniform.conv2-b512.fwd.cudnn.us]), backward input
//     245.2 [fig cuda.conv2d.ring-uniform.conv2-b512.bwd-input.v12-3xtf32.old.us]
//     -> 210.6 [fig cuda.conv2d.ring-uniform.conv2-b512.bwd-input.v12-3xtf32.new.us] (cuDNN FP32
//     236.4 [fig cuda.conv2d.ring-uniform.conv2-b512.bwd-input.cudnn.us]); production's forward with
//     bias and relu 264.6 [fig cuda.conv2d.ring-uniform.conv2-b512.fwd.production.old.us]
//     -> 188.8 [fig cuda.conv2d.ring-uniform.conv2-b512.fwd.production.new.us];
//   conv2, batch 512, TF32: forward 102.1 [fig cuda.conv2d.ring-uniform.conv2-b512.fwd.v12-tf32.old.us]
//     -> 94.7 [fig cuda.conv2d.ring-uniform.conv2-b512.fwd.v12-tf32.new.us] (cuDNN TF32
//     162.9 [fig cuda.conv2d.ring-uniform.conv2-b512.fwd.cudnn-tf32.us]), backward input
//     132.9 [fig cuda.conv2d.ring-uniform.conv2-b512.bwd-input.v12-tf32.old.us]
//     -> 120.5 [fig cuda.conv2d.ring-uniform.conv2-b512.bwd-input.v12-tf32.new.us] (cuDNN TF32
//     193.4 [fig cuda.conv2d.ring-uniform.conv2-b512.bwd-input.cudnn-tf32.us]);
//   conv2, batch 64, 3xTF32: forward 40.1 [fig cuda.conv2d.ring-uniform.conv2-b64.fwd.v12-3xtf32.old.us]
//     -> 31.5 [fig cuda.conv2d.ring-uniform.conv2-b64.fwd.v12-3xtf32.new.us] (cuDNN FP32
//     71.7 [fig cuda.conv2d.ring-uniform.conv2-b64.fwd.cudnn.us]), backward input
//     45.3 [fig cuda.conv2d.ring-uniform.conv2-b64.bwd-input.v12-3xtf32.old.us]
//     -> 40.9 [fig cuda.conv2d.ring-uniform.conv2-b64.bwd-input.v12-3xtf32.new.us] (cuDNN FP32
//     66.4 [fig cuda.conv2d.ring-uniform.conv2-b64.bwd-input.cudnn.us]); production's forward
//     42.2 [fig cuda.conv2d.ring-uniform.conv2-b64.fwd.production.old.us]
//     -> 36.1 [fig cuda.conv2d.ring-uniform.conv2-b64.fwd.production.new.us];
//   conv2, batch 64, TF32: forward 23.3 [fig cuda.conv2d.ring-uniform.conv2-b64.fwd.v12-tf32.old.us]
//     -> 22.7 [fig cuda.conv2d.ring-uniform.conv2-b64.fwd.v12-tf32.new.us] (cuDNN TF32
//     46.7 [fig cuda.conv2d.ring-uniform.conv2-b64.fwd.cudnn-tf32.us]), backward input
//     28.7 [fig cuda.conv2d.ring-uniform.conv2-b64.bwd-input.v12-tf32.old.us]
//     -> 27.3 [fig cuda.conv2d.ring-uniform.conv2-b64.bwd-input.v12-tf32.new.us] (cuDNN TF32
//     49.7 [fig cuda.conv2d.ring-uniform.conv2-b64.bwd-input.cudnn-tf32.us]);
//   the large layer, after: 3xTF32 forward 575.0 [fig cuda.conv2d.ring-uniform.large.fwd.v12-3xtf32.us]
//     (cuDNN FP32 624.0 [fig cuda.conv2d.ring-uniform.large.fwd.cudnn.us]), backward input
//     571.9 [fig cuda.conv2d.ring-uniform.large.bwd-input.v12-3xtf32.us]
//     (628.4 [fig cuda.conv2d.ring-uniform.large.bwd-input.cudnn.us]); TF32 forward
//     246.7 [fig cuda.conv2d.ring-uniform.large.fwd.v12-tf32.us] (cuDNN TF32
//     313.7 [fig cuda.conv2d.ring-uniform.large.fwd.cudnn-tf32.us]), backward input
//     248.4 [fig cuda.conv2d.ring-uniform.large.bwd-input.v12-tf32.us]
//     (309.9 [fig cuda.conv2d.ring-uniform.large.bwd-input.cudnn-tf32.us]).
// mnist-train's f32 CNN then took 0.267 s [fig cuda.conv2d.ring-uniform.cnn.b64.epoch2] an epoch at
// batch 64 and 0.134 [fig cuda.conv2d.ring-uniform.cnn.b512.epoch2] at 512, TF32
// 0.226 [fig cuda.conv2d.ring-uniform.cnn.b64-tf32.epoch2] and 0.092 [fig cuda.conv2d.ring-uniform.cnn.b512-tf32.epoch2]
// (docs/runs/2026-11-28-h200-ring-uniform-train). NOTES.md has the profile and what is next.
//
// bf16 (forward_ring_bf16, backward_input_ring_bf16). The same bytes serve: a stage is 16 channels,
// a pixel's 8 of a plane one 16-byte row, so the window's descriptors, the weights' core matrices
// (pack_wgmma_weights_kernel<bf16>) and the ring are TF32's, and a tap is one m64nNk16 product at
// twice TF32's rate. Only the producer differs: cp.async moves 4 bytes at least and a piece's 8
// channels lie a plane apart, so it loads them (2 bytes each) into registers and stores each piece
// as one 16-byte word, gathering stage n + 1 as soon as it has stored stage n. Measured (one H200,
// kernel-bench, docs/runs/2026-11-29-h200-bf16-ring-rule), µs. The large layer:
//   forward 162.2 [fig cuda.conv2d.bf16-ring.large.fwd.v12.us]
//     against version 9's 324.6 [fig cuda.conv2d.bf16-ring.large.fwd.v9.us],
//     cuDNN BF16's 191.8 [fig cuda.conv2d.bf16-ring.large.fwd.cudnn.us]
//     and this version's TF32 246.7 [fig cuda.conv2d.bf16-ring.large.fwd.v12-tf32.us];
//   backward input 161.1 [fig cuda.conv2d.bf16-ring.large.bwd-input.v12.us]
//     against 322.6 [fig cuda.conv2d.bf16-ring.large.bwd-input.v9.us]
//     and cuDNN BF16's 190.3 [fig cuda.conv2d.bf16-ring.large.bwd-input.cudnn.us].
// conv2 (32 channels into 64; its backward input 64 into 32), where version 9 stays in production:
//   batch 512, forward 84.08 [fig cuda.conv2d.bf16-ring.conv2-b512.fwd.v12.us]
//     against 83.79 [fig cuda.conv2d.bf16-ring.conv2-b512.fwd.v9.us]
//     (cuDNN BF16 229.7 [fig cuda.conv2d.bf16-ring.conv2-b512.fwd.cudnn.us]),
//   backward input 117.4 [fig cuda.conv2d.bf16-ring.conv2-b512.bwd-input.v12.us]
//     against 109.7 [fig cuda.conv2d.bf16-ring.conv2-b512.bwd-input.v9.us]
//     (129.6 [fig cuda.conv2d.bf16-ring.conv2-b512.bwd-input.cudnn.us]);
//   batch 64, forward 18.94 [fig cuda.conv2d.bf16-ring.conv2-b64.fwd.v12.us]
//     against 17.59 [fig cuda.conv2d.bf16-ring.conv2-b64.fwd.v9.us]
//     (107.8 [fig cuda.conv2d.bf16-ring.conv2-b64.fwd.cudnn.us]),
//   backward input 24.25 [fig cuda.conv2d.bf16-ring.conv2-b64.bwd-input.v12.us]
//     against 17.22 [fig cuda.conv2d.bf16-ring.conv2-b64.bwd-input.v9.us]
//     (99.55 [fig cuda.conv2d.bf16-ring.conv2-b64.bwd-input.cudnn.us]).
// A tile of conv2 sums two stages of 16 channels before its epilogue, which the products do not
// overlap, so the epilogue weighs as much as the products there; production's rule
// (conv2d.cu's ring_bf16_pays) follows. mnist-train's bf16 CNN, whose conv2 stays on version 9,
// kept its epochs: 0.158 s [fig cuda.conv2d.bf16-ring.bf16.new.epoch] at batch 64 against
// 0.1583 [fig cuda.conv2d.bf16-ring.bf16.old.epoch] before, 0.064 [fig cuda.conv2d.bf16-ring.b512_bf16.new.epoch]
// against 0.064 [fig cuda.conv2d.bf16-ring.b512_bf16.old.epoch] at 512 (docs/runs/2026-11-29-h200-bf16-ring).
constexpr int kRingThreads = 384;   // warpgroup 0 produces, 1 and 2 consume
constexpr int kRingTasks = 8;       // 16-byte pieces of a stage's patch a producer thread stores
constexpr int kRingMaxStages = 8;
constexpr int64_t kRingSmem = 227 * 1024;  // one block an SM

struct RingPlan {
  int cols = 0, pixels = 0;  // version 11's patch, for an item of 128 mw pixels (alternate: 64 mw)
  int channels = 0;          // a stage's channels: 8 floats or 16 bf16 a pixel, two planes of 16 bytes
  int64_t chunks = 0, np = 0;
  int bn = 0, mw = 0, stages = 0;
  bool exact = false;
  bool resident = false;      // every stage's weights loaded once for the block
  // The consumer warpgroups take the block's items in turn, each its own item of 64 mw pixels,
  // rather than halves of an item of 128 mw (ring_plan_for says where)
  bool alternate = false;
  int64_t patch_bytes = 0;    // a stage's patch: 2 planes of pixels x 16 bytes
  int64_t step_bytes = 0;     // a k-step's weights, bn x 32 bytes (3xTF32: a set of them)
  int64_t stage_bytes = 0;    // the patch, and the stage's weights where they are not resident
  int64_t weight_bytes = 0;   // every stage's weights, both sets
  int64_t smem = 0;
};

// An item's pixels: a consumer warpgroup's mw products of 64, times two where both share it.
__host__ __device__ inline int64_t ring_bm(const RingPlan& p) { return (p.alternate ? 64 : 128) * int64_t{p.mw}; }

// The plan for mw products of 64 pixels a consumer warpgroup, `channels` a stage.
RingPlan ring_plan(const Dims& d, bool exact, int mw, int channels, bool alternate = false) {
  RingPlan p;
  p.exact = exact;
  p.channels = channels;
  p.bn = d.og > 64 ? 128 : d.og > 32 ? 64 : 32;
  p.mw = mw;
  p.alternate = alternate;
  const int64_t bm = ring_bm(p);
  p.cols = static_cast<int>(d.ow + (d.kw - 1) * d.dw);
  const int64_t reach = p.cols - 1 + bm + (d.kh - 1) * d.dh * p.cols + (d.kw - 1) * d.dw;
  const int rows = static_cast<int>((reach + p.cols - 1) / p.cols);
  p.pixels = (rows * p.cols + 7) / 8 * 8;
  p.chunks = (d.cg + channels - 1) / channels;
  p.np = (d.og + p.bn - 1) / p.bn * p.bn;
  const int sets = exact ? 2 : 1;
  p.patch_bytes = int64_t{32} * p.pixels;
  p.step_bytes = int64_t{p.bn} * 32;
  p.weight_bytes = p.chunks * d.khkw * p.step_bytes * sets;
  const int64_t room = kRingSmem - 128 - (2 * kRingMaxStages + 1) * 8;  // the base's alignment, the mbarriers
  const bool one_block = p.np == p.bn && d.c == d.cg;  // every block the same weights
  p.resident = one_block && p.weight_bytes + 2 * p.patch_bytes <= room;
  p.stage_bytes = p.patch_bytes + (p.resident ? 0 : d.khkw * p.step_bytes * sets);
  p.stages = static_cast<int>(std::min<int64_t>(kRingMaxStages, (room - (p.resident ? p.weight_bytes : 0)) / p.stage_bytes));
  p.smem = 128 + (p.resident ? p.weight_bytes : 0) + p.stages * p.stage_bytes + (2 * kRingMaxStages + 1) * 8;
  return p;
}

// The elements of one set of packed weights (pack_wgmma_weights_kernel's `set`).
int64_t ring_set(const Dims& d, const RingPlan& p) { return (d.c / d.cg) * p.chunks * d.khkw * p.np * p.channels; }

// The pixel tiles of one image, and the items (tiles of every image, group and block of outputs)
// that the persistent blocks walk.
int64_t ring_tiles(const Dims& d, const RingPlan& p) { return (d.oh * p.cols + ring_bm(p) - 1) / ring_bm(p); }
int64_t ring_items(const Dims& d, const RingPlan& p, int64_t groups) {
  return groups * (p.np / p.bn) * d.n * ring_tiles(d, p);
}

// Two products a consumer warpgroup (256 pixels a block: a stage's weights and the patch's extra
// rows serve twice the pixels; 3xTF32 at 128 outputs has room for one, its stage sums doubling
// the accumulators). 3xTF32 takes one where that leaves the blocks less to copy: one block an SM
// walks the items, so the grid takes ceil(items / SMs) rounds, and a small batch can leave the
// last round of 256-pixel items mostly empty (conv2 at batch 64: 192 items on 132 SMs, two rounds
// of 338 patch pixels; at 128 pixels 320 items, three rounds of 208). The measure is the patch
// pixels a round copies, the producer's work, which counts the smaller tile's extra rows against
// it. TF32 keeps two: at conv2, batch 64, one moved neither pass (its backward input a little slower;
// figures at version 12's head), and bf16 (16 channels a stage) as TF32.
RingPlan ring_plan_for(const Geometry& f, bool exact, int channels = kPatchChannels) {
  if (f.stride_h != 1 || f.stride_w != 1 || f.n * f.o * f.oh * f.ow == 0 || !wgmma_runs()) return {};
  const Dims d = dims_of(f);
  // two stages at least (and each warpgroup's share of them, alternating: 3xTF32 hands a stage
  // back once its own products are done, TF32 and bf16 once the next stage's are issued); a
  // stage's patch within the producer's 128 x kRingTasks pieces; the descriptors' 14-bit fields;
  // pixel indices within an int
  auto fits = [&](const RingPlan& p) {
    return p.stages >= (p.alternate && !exact ? 4 : 2) && 2 * p.pixels <= 128 * kRingTasks && p.pixels < (1 << 14) &&
           d.c * d.hw < (int64_t{1} << 31) && d.oh * p.cols + ring_bm(p) < (int64_t{1} << 31);
  };
  const RingPlan two = ring_plan(d, exact, 2, channels);
  if (!exact) return fits(two) ? two : RingPlan{};
  const RingPlan one = ring_plan(d, exact, 1, channels);
  const int64_t sms = device_attribute(cudaDevAttrMultiProcessorCount);
  auto copied = [&](const RingPlan& p) { return (ring_items(d, p, f.groups) + sms - 1) / sms * p.pixels; };
  const RingPlan& p = two.bn == 128 || (fits(one) && (!fits(two) || copied(one) < copied(two))) ? one : two;
  if (!fits(p)) return {};
  // 3xTF32's consumers spend much of a stage loading and splitting A, and sharing an item they do
  // it in step, the tensor cores idle meanwhile; on items of their own they fall out of step, one
  // loading while the other multiplies, and each one's epilogue runs under the other's products.
  // Half the pixels an item cost the producer more stages and patch rows per pixel, and each
  // stage's weights twice where they are not resident: it pays where an item has at most 4 stages
  // and the weights are resident (conv2's forward; its backward input, 8 stages, and the large
  // layer lost: kernels/cuda/NOTES.md).
  const RingPlan alternate = ring_plan(d, exact, p.mw, channels, true);
  return fits(alternate) && alternate.resident && alternate.chunks <= 4 ? alternate : p;
}

template <class T>
struct RingArgs {
  const T* x;   // [N, C, H, W]
  const T* wp;  // packed as version 10's (pack_wgmma_weights_kernel)
  const T* w;   // the layer's weights, for 3xTF32's NaN fallback
  bool flip;
  DeviceEpilogue<T> epilogue;
  T* y;
  Dims d;
  RingPlan plan;
  unsigned tiles;    // pixel tiles of an image's oh * cols pixels
  unsigned nblocks;  // blocks of bn outputs of a group
  int items;         // groups * nblocks * n * tiles
  int64_t set;      // elements of one set of packed weights
};

// Output channel n (of the group) at pixel p of image img again in f32 from x and w: version 12's
// fallback where a 3xTF32 split overflowed. Out of line, so that its loops take no registers from
// the kernel's accumulators (inlined, ptxas spilled 76 bytes of conv2's 3xTF32 kernel for it).
#ifdef KILN_WGMMA
__device__ __noinline__ float ring_output_f32(const RingArgs<float>& a, int64_t img, int64_t group, int64_t n, int p) {
  return patch_dot_f32(a.x, a.d, img, group, p,
                       [&](int64_t c, int64_t tap) { return weight_at(a.w, a.d, a.flip, group, c, tap, n); });
}
#endif

// One block an SM; item i = blockIdx.x + j gridDim.x of the problem is pixel tile i % tiles (ring_bm
// pixels over the patch's width) of image i / tiles % n, outputs n0 = (i / (tiles n) % nblocks) BN
// onward of group i / (tiles n nblocks). Consumer warpgroup wg owns the tile's pixels
// 64 (MW wg + sub) onward, sub < MW; alternating, the block's items are the warpgroups' in turn, a
// tile of 64 MW pixels each. T: float (TF32, or 3xTF32 with kExact) or bf16.
template <class T, int BN, int MW, bool kExact>
__global__ void __launch_bounds__(kRingThreads, 1) ring_conv_kernel(const __grid_constant__ RingArgs<T> a) {
  dependent_kernel_start();  // launch.cuh: launched by launch_dependent
#ifdef KILN_WGMMA
  extern __shared__ __align__(128) uint8_t smem_ring[];
  constexpr int R = BN / 2, kSets = kExact ? 2 : 1;
  constexpr bool kBf16 = std::is_same_v<T, bf16>;
  constexpr int kPiece = 16 / static_cast<int>(sizeof(T));  // a piece's channels: 4 floats or 8 bf16
  const Dims& d = a.d;
  const RingPlan& plan = a.plan;
  uint8_t* weights = smem_ring + (128 - matmul::smem_u32(smem_ring) % 128) % 128;  // resident weights
  uint8_t* ring = weights + (plan.resident ? plan.weight_bytes : 0);
  auto* full = reinterpret_cast<uint64_t*>(ring + plan.stages * plan.stage_bytes);
  uint64_t* empty = full + kRingMaxStages;
  uint64_t* loaded = empty + kRingMaxStages;  // the resident weights
  const int tid = static_cast<int>(threadIdx.x), stages = plan.stages, taps = static_cast<int>(d.khkw);
  const int cols = plan.cols, pixels = plan.pixels;
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      matmul::mbar_init(&full[s], 128);  // every producer thread
      matmul::mbar_init(&empty[s], plan.alternate ? 4 : 8);  // every consumer warp whose item it is
    }
    matmul::mbar_init(loaded, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  struct Item {
    int64_t group, n0, img;
    int p0;
  };
  // Alternating (plan.alternate), the consumer warpgroups take the block's items in turn (item k is
  // warpgroup k % 2's), and the ring's stages are split between them: warpgroup w's are the
  // sub-ring [sub_base(w), sub_end(w)), each stage used by its one warpgroup in order, so that a
  // wait on a stage's parity never meets a phase of the other's. Else both take every item, and
  // every stage. Each side walks its sub-rings stage by stage (matmul::RingWalk).
  const int middle = plan.alternate ? (stages + 1) / 2 : stages;
  auto sub_base = [&](int w) { return w == 1 ? middle : 0; };
  auto sub_end = [&](int w) { return w == 1 ? stages : middle; };
  auto item_at = [&](int i) {  // 32-bit divisions (items < 2^31: ring_plan_for)
    const unsigned r = static_cast<unsigned>(i) / a.tiles, r2 = r / static_cast<unsigned>(d.n);
    return Item{r2 / a.nblocks, int64_t{r2 % a.nblocks} * BN, r % static_cast<unsigned>(d.n),
                static_cast<int>(static_cast<unsigned>(i) % a.tiles * ring_bm(plan))};
  };

  if (tid < 128) {
    matmul::setmaxnreg_dec<152>();  // 128 x 152 + 256 x 176 <= 65536 registers
    // ---- producer: piece i = tid + 128 k of a stage is the kPiece channels (i / pixels) kPiece
    // onward at patch pixel i % pixels, stored at byte 16 i of the stage ([half][pixel][kPiece
    // channels], version 11's). Its
    // offset in a stage's first input plane and whether it lies inside the input depend only on
    // the item (its first patch row), so they are worked out once an item, and a stage's copies
    // are four offsets from there.
    const int h = static_cast<int>(d.h), w = static_cast<int>(d.w), hw = static_cast<int>(d.hw);
    int place[kRingTasks];   // the piece's patch row << 16 | column (the same for every item)
#pragma unroll
    for (int k = 0; k < kRingTasks; ++k) {
      const int p = (tid + 128 * k) % pixels;
      place[k] = (p / cols) << 16 | (p % cols);
    }
    int offset[kRingTasks];  // the piece's first channel in a stage's input planes
    unsigned inside = 0;     // bit k: piece k reads the input
    int gathered = -1;       // the item `offset` and `inside` are for
    const T* image = a.x;
    auto locate = [&](int i) {
      const Item it = item_at(i);
      const int y0 = it.p0 / cols - d.ph;  // the input row of the patch's row 0
      image = a.x + (it.img * d.c + it.group * d.cg) * d.hw;
      inside = 0;
#pragma unroll
      for (int k = 0; k < kRingTasks; ++k) {
        const int piece = tid + 128 * k, iy = y0 + (place[k] >> 16), ix = (place[k] & 0xffff) - d.pw;
        const bool ok = piece < 2 * pixels && static_cast<unsigned>(iy) < static_cast<unsigned>(h) &&
                        static_cast<unsigned>(ix) < static_cast<unsigned>(w);
        // (a piece outside is zero-filled; its offset stays a valid address all the same)
        offset[k] = (piece >= pixels ? kPiece * hw : 0) + (ok ? iy * w + ix : 0);
        inside |= static_cast<unsigned>(ok) << k;
      }
      gathered = i;
    };
    // The channels of a stage past C/G (zero-filled)
    auto channels_left = [&](int64_t chunk) {
      const int64_t rest = d.cg - chunk * plan.channels;
      return rest < plan.channels ? static_cast<int>(rest) : plan.channels;
    };
    // f32: a stage's copies, each piece's four values by cp.async, straight into shared memory (no
    // registers, no wait), zero-filled outside the input and past C/G.
    auto issue = [&](int i, int64_t chunk, uint8_t* st) {
      if (i != gathered) locate(i);
      const T* src = image + chunk * plan.channels * d.hw;
      const int left = channels_left(chunk);
#pragma unroll
      for (int k = 0; k < kRingTasks; ++k) {
        const int piece = tid + 128 * k, c0 = piece >= pixels ? kPiece : 0;
        if (piece >= 2 * pixels) continue;
        const T* at = src + offset[k];
        const bool in = inside >> k & 1;
#pragma unroll
        for (int j = 0; j < kPiece; ++j) {
          const bool ok = in && c0 + j < left;
          matmul::cp_async4(st + 16 * piece + 4 * j, ok ? at + j * hw : src, ok);
        }
      }
    };
    // bf16: cp.async moves 4 bytes at least, and a piece's 8 channels lie hw apart, so a stage's
    // values come through registers: `gather` issues their loads (2 bytes each, zero outside the
    // input and past C/G), `put` stores each piece as one 16-byte word once they have landed. The
    // producer gathers stage n + 1 as soon as it has stored stage n, so that the loads fly while
    // it waits for the next stage to empty. A piece wholly inside the input and the stage's
    // channels (most of them) loads its 8 values without a test, the rest test each: with the test
    // around each load alone, every load was a divergent branch of its own and the producer
    // issued about 3000 instructions a warp a stage at conv2 (Nsight Compute; NOTES.md).
    uint16_t held[kRingTasks][8];  // the values gathered
    auto gather = [&](int i, int64_t chunk) {
      if (i != gathered) locate(i);
      const uint16_t* src = reinterpret_cast<const uint16_t*>(image + chunk * plan.channels * d.hw);
      const int left = channels_left(chunk);
#pragma unroll
      for (int k = 0; k < kRingTasks; ++k) {
        const int piece = tid + 128 * k, c0 = piece >= pixels ? 8 : 0;
        const int valid = piece < 2 * pixels && (inside >> k & 1) ? left - c0 : 0;  // channels c0 + j, j < valid
        const uint16_t* at = src + offset[k];
        if (valid >= 8) {
#pragma unroll
          for (int j = 0; j < 8; ++j) held[k][j] = __ldg(at + j * hw);
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) held[k][j] = j < valid ? __ldg(at + j * hw) : uint16_t{0};
        }
      }
    };
    auto put = [&](uint8_t* st) {
#pragma unroll
      for (int k = 0; k < kRingTasks; ++k) {
        const int piece = tid + 128 * k;
        uint32_t v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) v[j] = uint32_t{held[k][2 * j]} | uint32_t{held[k][2 * j + 1]} << 16;
        if (piece < 2 * pixels) *reinterpret_cast<uint4*>(st + 16 * piece) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    };
    // the packed weights of (group, chunk, tap 0) from output n0, set 0
    auto packed = [&](const Item& it, int64_t chunk) {
      return a.wp + ((it.group * plan.chunks + chunk) * taps) * plan.np * plan.channels + it.n0 * plan.channels;
    };
    const uint32_t step = static_cast<uint32_t>(plan.step_bytes);
    if (plan.resident && tid == 0) {  // one run a set: every chunk and tap of the one block of outputs
      const uint32_t bytes = static_cast<uint32_t>(plan.weight_bytes / kSets);
      matmul::mbar_arrive_expect_tx(loaded, bytes * kSets);
      for (int s = 0; s < kSets; ++s) matmul::bulk_load(weights + s * bytes, a.wp + s * a.set, bytes, loaded);
    }
    // the stage's weights, where they are not resident: a run a set, or a run a tap and set
    auto load_weights = [&](int i, int64_t chunk, uint8_t* st, uint64_t* bar) {
      if (plan.resident || tid != 0) return;
      const Item it = item_at(i);
      matmul::mbar_expect_tx(bar, static_cast<uint32_t>(kSets * taps) * step);
      const T* from = packed(it, chunk);
      uint8_t* to = st + plan.patch_bytes;
      for (int s = 0; s < kSets; ++s) {
        if (plan.np == BN) {
          matmul::bulk_load(to + s * taps * step, from + s * a.set, taps * step, bar);
        } else {
          for (int tap = 0; tap < taps; ++tap)
            matmul::bulk_load(to + (s * taps + tap) * step, from + s * a.set + tap * plan.np * plan.channels, step, bar);
        }
      }
    };
    int item = static_cast<int>(blockIdx.x), k = 0;  // k: the block's item ordinal
    int64_t chunk = 0;
    // each sub-ring's walk (two in registers; as an array indexed by the warpgroup they went to
    // local memory)
    matmul::RingWalk walk0, walk1{sub_base(1)};
    if constexpr (kBf16) gather(item, chunk);
    while (item < a.items) {
      const bool second = plan.alternate && (k & 1);  // item k is warpgroup k % 2's
      const matmul::RingWalk at = second ? walk1 : walk0;
      const int stage = at.stage, lap = at.lap;
      if (second) walk1.next(sub_end(1), sub_base(1));
      else walk0.next(sub_end(0));
      const int this_item = item;
      const int64_t this_chunk = chunk;
      if (++chunk == plan.chunks) chunk = 0, item += static_cast<int>(gridDim.x), ++k;
      uint8_t* st = ring + stage * plan.stage_bytes;
      if (lap > 0) matmul::mbar_wait(&empty[stage], (lap - 1) & 1);
      load_weights(this_item, this_chunk, st, &full[stage]);
      if constexpr (kBf16) {  // stage n's loads are in flight (gathered last time round)
        put(st);
        matmul::fence_async_shared();  // the stores, made visible to the tensor cores' reads
        matmul::mbar_arrive(&full[stage]);
        if (item < a.items) gather(item, chunk);
      } else {
        issue(this_item, this_chunk, st);
        matmul::cp_async_arrive(&full[stage]);  // once this thread's copies have landed
      }
    }
  } else {
    // ---- consumers
    matmul::setmaxnreg_inc<176>();
    // The warpgroup's index broadcast from lane 0: the compiler then knows it is the same across
    // the warp, and keeps what follows from it (the descriptors) in uniform registers, where the
    // products read them. Derived from the thread's index alone, every descriptor was worked out
    // per thread and moved across (R2UR) before each product: about 30 instructions a tap.
    const int wg = __shfl_sync(0xffffffffu, tid / 128, 0) - 1, warp = tid / 32 % 4, lane = tid % 32;
    const int kw = static_cast<int>(d.kw), dw = static_cast<int>(d.dw);
    const int row_step = static_cast<int>(d.dh) * cols;  // a tap row further down the window
    const uint32_t plane_bytes = static_cast<uint32_t>(pixels) * 16, step = static_cast<uint32_t>(plan.step_bytes);
    const uint32_t ring_at = matmul::smem_u32(ring), weights_at = matmul::smem_u32(weights);
    // bytes from a set of weights to the other: every stage's (resident) or the stage's
    const uint32_t set_bytes = static_cast<uint32_t>((plan.resident ? plan.chunks : 1) * taps) * step;
    if (plan.resident) matmul::mbar_wait(loaded, 0);
    // Alternating, the block's items are the two warpgroups' in turn, so that one's epilogue runs
    // while the other multiplies; else the warpgroup's share of every item is its products `half`
    // MW on. The warpgroup walks its sub-ring (the whole ring, not alternating).
    const int grid = static_cast<int>(gridDim.x), base = sub_base(plan.alternate ? wg : 0);
    const int end = sub_end(plan.alternate ? wg : 0), half = plan.alternate ? 0 : wg, turn = plan.alternate ? 2 : 1;
    matmul::RingWalk walk{base};
    int before = base;  // the stage before walk's
    for (int i = static_cast<int>(blockIdx.x) + (turn - 1) * wg * grid; i < a.items; i += turn * grid) {
      const Item it = item_at(i);
      const int first = it.p0 - it.p0 / cols * cols + half * MW * 64;  // the warpgroup's first pixel in the patch
      float acc[MW][R];
#pragma unroll
      for (int s = 0; s < MW; ++s)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[s][r] = 0.0f;
      [[maybe_unused]] float part[MW][R];
      for (int64_t chunk = 0; chunk < plan.chunks; ++chunk, before = walk.stage, walk.next(end, base)) {
        const int stage = walk.stage;
        matmul::mbar_wait(&full[stage], walk.lap & 1);
        // the producer's cp.async writes, seen through the barrier, made visible to the tensor
        // cores' reads
        matmul::fence_async_shared();
        const uint32_t st = ring_at + static_cast<uint32_t>(stage * plan.stage_bytes);
        const uint32_t w0 = plan.resident ? weights_at + static_cast<uint32_t>(chunk * taps) * step
                                          : st + static_cast<uint32_t>(plan.patch_bytes);
        // The descriptors of tap 0. A descriptor's address is in 16-byte units in its low bits
        // (under 2^14: shared memory), so a tap moves it by a 32-bit add to its low word: A by the
        // tap's window offset in pixels, B by a k-step's weights; the high words stay.
        const Descriptor a0(win_descriptor(st + static_cast<uint32_t>(first) * 16, plane_bytes));
        const Descriptor b0(matmul::packed_descriptor(w0));
        const uint32_t b_set = set_bytes / 16, b_step = step / 16;
        int window = 0, kx = 0;  // the tap's offset ky dh cols + kx dw, and its kx
        auto next_tap = [&] {
          if (++kx == kw) kx = 0, window += row_step - (kw - 1) * dw;
          else window += dw;
        };
        if constexpr (kExact) {
          // 3xTF32: each thread loads its A fragments (the window's rows g and g + 8 of its warp's
          // 16, channels t and t + 4: the patch's two planes) and splits them in registers; the
          // weights' two sets (heads, tails) come from shared memory. A tap's fragments load while
          // the tap before multiplies, two sets alternating.
          const float* patch = reinterpret_cast<const float*>(ring + stage * plan.stage_bytes) +
                               (first + warp * 16 + lane / 4) * 4 + lane % 4;
          const int plane = static_cast<int>(plane_bytes / 4);
          uint32_t fa[2][MW][8];
          auto load = [&](uint32_t (&f)[MW][8]) {
#pragma unroll
            for (int s = 0; s < MW; ++s)
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                const float v = patch[(window + s * 64 + (i % 2) * 8) * 4 + (i / 2) * plane];
                matmul::split_tf32(__float_as_uint(v), f[s][i], f[s][4 + i]);
              }
          };
          auto multiply = [&](const uint32_t (&f)[MW][8], int tap) {
            const uint64_t b_hi = b0.plus(tap * b_step), b_lo = b0.plus(tap * b_step + b_set);
            matmul::wgmma_fence();
#pragma unroll
            for (int s = 0; s < MW; ++s) {
              const uint32_t hi[4] = {f[s][0], f[s][1], f[s][2], f[s][3]};
              const uint32_t lo[4] = {f[s][4], f[s][5], f[s][6], f[s][7]};
              matmul::wgmma_tf32(part[s], lo, b_hi);
              matmul::wgmma_tf32(part[s], hi, b_lo);
              matmul::wgmma_tf32(part[s], hi, b_hi);
            }
            matmul::wgmma_commit();
          };
#pragma unroll
          for (int s = 0; s < MW; ++s) {
#pragma unroll
            for (int r = 0; r < R; ++r) part[s][r] = 0.0f;
            matmul::fence_accumulators(part[s]);
          }
          load(fa[0]);
          for (int tap = 0; tap < taps; tap += 2) {
            multiply(fa[0], tap);
            next_tap();
            if (tap + 1 == taps) break;
            matmul::wgmma_wait<1>();  // the tap before is done with fa[1]
            load(fa[1]);
            multiply(fa[1], tap + 1);
            next_tap();
            if (tap + 2 == taps) break;
            matmul::wgmma_wait<1>();
            load(fa[0]);
          }
          matmul::wgmma_wait<0>();
          if (lane == 0) matmul::mbar_arrive(&empty[stage]);
#pragma unroll
          for (int s = 0; s < MW; ++s) {
            matmul::fence_accumulators(part[s]);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[s][r] += part[s][r];
          }
        } else {
          matmul::wgmma_fence();
          for (int tap = 0; tap < taps; ++tap, next_tap()) {
            const uint64_t b = b0.plus(tap * b_step);
#pragma unroll
            for (int s = 0; s < MW; ++s) {
              const uint64_t a_s = a0.plus(static_cast<uint32_t>(window + s * 64));
              if constexpr (kBf16) matmul::wgmma_bf16<0, 0>(acc[s], a_s, b);  // k16: the same bytes as k8 of TF32
              else matmul::wgmma_tf32(acc[s], a_s, b);
            }
          }
          matmul::wgmma_commit();
          matmul::wgmma_wait<1>();  // the stage before is done: hand it back
          if (chunk > 0 && lane == 0) matmul::mbar_arrive(&empty[before]);
        }
      }
      if constexpr (!kExact) {
        matmul::wgmma_wait<0>();
        if (lane == 0) matmul::mbar_arrive(&empty[before]);
      }
      // The thread's outputs are channels n0 + 8j + 2t + e of rows g and g + 8 of each product.
      // Their pixels are worked out once (-1: an extra column of the patch's width, or past the
      // image), each channel's bias is loaded once, and an output costs its add, the activation
      // (a select against `floor`: 0 for a relu, -inf for none; a NaN passes, as UnaryOp::relu)
      // and a store at a 32-bit distance from its channel's first pixel.
      const int t = lane % 4;
      int pixel[MW][2];  // within an int: ring_plan_for
#pragma unroll
      for (int s = 0; s < MW; ++s) {
        matmul::fence_accumulators(acc[s]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int q = it.p0 + (half * MW + s) * 64 + warp * 16 + lane / 4 + 8 * h, oy = q / cols, ox = q - oy * cols;
          pixel[s][h] = oy < d.oh && ox < d.ow ? oy * static_cast<int>(d.ow) + ox : -1;
        }
      }
      const float floor = a.epilogue.activation == Activation::relu ? 0.0f : -INFINITY;
      T* y = a.y + (it.img * d.o + it.group * d.og + it.n0 + 2 * t) * d.ohw;
      const int64_t left = d.og - it.n0;
      const int outputs = (left < BN ? static_cast<int>(left) : BN) - 2 * t;  // columns 8j + e below this
      // fn(value, its channel's bias, its place in y, its channel within the group, its pixel) for
      // every output
      auto each_output = [&](auto&& fn) {
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if (8 * j + e >= outputs) continue;
            T* out = y + (8 * j + e) * d.ohw;
            const int64_t n = it.n0 + 8 * j + 2 * t + e;
            const float bias = a.epilogue.bias != nullptr ? static_cast<float>(a.epilogue.bias[it.group * d.og + n]) : 0.0f;
#pragma unroll
            for (int s = 0; s < MW; ++s)
#pragma unroll
              for (int h = 0; h < 2; ++h)
                if (pixel[s][h] >= 0) fn(acc[s][4 * j + 2 * h + e], bias, out + pixel[s][h], n, pixel[s][h]);
          }
      };
      bool nan = false;
      each_output([&](float v, float bias, T* at, int64_t, int) {
        if constexpr (kExact) nan |= v != v;
        v += bias;
        *at = cast<T>(v < floor ? floor : v);  // bf16: rounded once, here
      });
      // 3xTF32's NaNs (a product whose split overflowed) again in f32 from x and w, once every
      // output is stored, found by reading y back (a NaN stays one through the bias and the
      // activation): inlined among the stores, the recomputation kept ptxas from holding the
      // accumulators in registers
      if constexpr (kExact) {
        if (nan)
          each_output([&](float, float bias, float* at, int64_t n, int p) {
            if (*at == *at) return;
            const float v = ring_output_f32(a, it.img, it.group, n, p) + bias;
            *at = v < floor ? floor : v;
          });
      }
    }
  }
#else
  (void)a;
  __trap();
#endif
}

// Packs w as version 10 does and runs version 12 on the forward view f.
template <class T>
void ring_forward(const T* x, const T* w, bool flip, T* packed, const DeviceEpilogue<T>& e, T* y, const Geometry& f,
                  const RingPlan& plan, cudaStream_t stream, const char* op) {
  const Dims d = dims_of(f);
  const int64_t set = ring_set(d, plan);
  launch_dependent(pack_wgmma_weights_kernel<T>, blocks_for(set), kThreads, 0, stream, w, packed, d, plan.chunks,
                   plan.np, flip, plan.exact, set);
  KILN_CUDA_LAUNCH_CHECK(op);
  const int64_t tiles = ring_tiles(d, plan), nblocks = plan.np / plan.bn, items = ring_items(d, plan, f.groups);
  KILN_CHECK(items < (int64_t{1} << 31) - 1024, ShapeError, "cuda ", op, ": the problem is too large (", items,
             " tiles)");
  const RingArgs<T> args{x, packed, w, flip, e, y, d, plan, static_cast<unsigned>(tiles), static_cast<unsigned>(nblocks),
                         static_cast<int>(items), set};
  const int64_t blocks = std::min<int64_t>(items, device_attribute(cudaDevAttrMultiProcessorCount));
  auto launch = [&]<int BN, int MW, bool kExact>() {
    auto* kernel = ring_conv_kernel<T, BN, MW, kExact>;
    const int bytes = static_cast<int>(plan.smem);
    allow_dynamic_smem(kernel, bytes);
    launch_dependent(kernel, static_cast<unsigned>(blocks), kRingThreads, bytes, stream, args);
    KILN_CUDA_LAUNCH_CHECK(op);
  };
  auto exact_products = [&]<int BN>() {  // 3xTF32: one or two products a warpgroup (ring_plan_for)
    if constexpr (std::is_same_v<T, float>) {
      if (plan.mw == 1) launch.template operator()<BN, 1, true>();
      else if constexpr (BN < 128) launch.template operator()<BN, 2, true>();
    }
  };
  auto sets = [&]<int BN>() {
    if (plan.exact) exact_products.template operator()<BN>();
    else launch.template operator()<BN, 2, false>();
  };
  if (plan.bn == 128) sets.template operator()<128>();
  else if (plan.bn == 64) sets.template operator()<64>();
  else sets.template operator()<32>();
}

}  // namespace

bool forward_wgmma_applies(const Geometry& g, TensorMath math) {
  return wg_plan_for(g, exact(math)).smem > 0;
}

int64_t forward_wgmma_workspace(const Geometry& g) {
  const WgPlan p = wg_plan_for(g, true);
  return p.smem > 0 ? 2 * wg_weights(dims_of(g), p) : 0;
}

void forward_wgmma(const float* x, const float* w, const DeviceEpilogue<float>& e, float* y, float* workspace,
                   const Geometry& g, TensorMath math, cudaStream_t stream) {
  const WgPlan plan = wg_plan_for(g, exact(math));
  check_entry(plan.smem > 0, workspace, forward_wgmma_workspace(g), "conv2d", "10 (wgmma)");
  wgmma_forward(x, w, false, workspace, e, y, g, plan, stream, "conv2d");
}

bool backward_input_wgmma_applies(const Geometry& g, TensorMath math) {
  return backward_input_as_forward_applies(g) && forward_wgmma_applies(as_forward(g), math);
}

int64_t backward_input_wgmma_workspace(const Geometry& g) {
  return backward_input_as_forward_applies(g) ? forward_wgmma_workspace(as_forward(g)) : 0;
}

void backward_input_wgmma(const float* grad_y, const float* w, float* grad_x, float* workspace, const Geometry& g,
                          TensorMath math, cudaStream_t stream) {
  check_entry(backward_input_wgmma_applies(g, math), workspace, backward_input_wgmma_workspace(g),
              "conv2d_backward_input", "10 (wgmma)");
  const Geometry f = as_forward(g);
  wgmma_forward(grad_y, w, true, workspace, {}, grad_x, f, wg_plan_for(f, exact(math)), stream, "conv2d_backward_input");
}

bool forward_window_applies(const Geometry& g, TensorMath math) {
  return win_plan_for(g, exact(math)).smem > 0;
}

int64_t forward_window_workspace(const Geometry& g) {
  const WinPlan p = win_plan_for(g, true);
  return p.smem > 0 ? 2 * wg_weights(dims_of(g), win_weights_plan(p)) : 0;
}

void forward_window(const float* x, const float* w, const DeviceEpilogue<float>& e, float* y, float* workspace,
                    const Geometry& g, TensorMath math, cudaStream_t stream, WindowSums sums) {
  const WinPlan plan = win_plan_for(g, exact(math));
  check_entry(plan.smem > 0, workspace, forward_window_workspace(g), "conv2d", "11 (wgmma window)");
  window_forward(x, w, false, workspace, e, y, g, plan, sums, stream, "conv2d");
}

bool backward_input_window_applies(const Geometry& g, TensorMath math) {
  return backward_input_as_forward_applies(g) && forward_window_applies(as_forward(g), math);
}

int64_t backward_input_window_workspace(const Geometry& g) {
  return backward_input_as_forward_applies(g) ? forward_window_workspace(as_forward(g)) : 0;
}

void backward_input_window(const float* grad_y, const float* w, float* grad_x, float* workspace, const Geometry& g,
                           TensorMath math, cudaStream_t stream, WindowSums sums) {
  check_entry(backward_input_window_applies(g, math), workspace, backward_input_window_workspace(g),
              "conv2d_backward_input", "11 (wgmma window)");
  const Geometry f = as_forward(g);
  window_forward(grad_y, w, true, workspace, {}, grad_x, f, win_plan_for(f, exact(math)), sums, stream,
                 "conv2d_backward_input");
}

bool forward_ring_applies(const Geometry& g, TensorMath math) {
  return ring_plan_for(g, exact(math)).smem > 0;
}

int64_t forward_ring_workspace(const Geometry& g) {
  const RingPlan p = ring_plan_for(g, true);
  return p.smem > 0 ? 2 * ring_set(dims_of(g), p) : 0;
}

void forward_ring(const float* x, const float* w, const DeviceEpilogue<float>& e, float* y, float* workspace,
                  const Geometry& g, TensorMath math, cudaStream_t stream) {
  const RingPlan plan = ring_plan_for(g, exact(math));
  check_entry(plan.smem > 0, workspace, forward_ring_workspace(g), "conv2d", "12 (wgmma ring)");
  ring_forward(x, w, false, workspace, e, y, g, plan, stream, "conv2d");
}

bool backward_input_ring_applies(const Geometry& g, TensorMath math) {
  return backward_input_as_forward_applies(g) && forward_ring_applies(as_forward(g), math);
}

int64_t backward_input_ring_workspace(const Geometry& g) {
  return backward_input_as_forward_applies(g) ? forward_ring_workspace(as_forward(g)) : 0;
}

void backward_input_ring(const float* grad_y, const float* w, float* grad_x, float* workspace, const Geometry& g,
                         TensorMath math, cudaStream_t stream) {
  check_entry(backward_input_ring_applies(g, math), workspace, backward_input_ring_workspace(g),
              "conv2d_backward_input", "12 (wgmma ring)");
  const Geometry f = as_forward(g);
  ring_forward(grad_y, w, true, workspace, {}, grad_x, f, ring_plan_for(f, exact(math)), stream, "conv2d_backward_input");
}

}  // namespace kiln::cuda::conv2d

namespace kiln::cuda::conv2d {

namespace {
constexpr int kRingBf16Channels = 16;  // a stage: two planes of 8 bf16 channels a pixel
}

bool forward_ring_bf16_applies(const Geometry& g) { return ring_plan_for(g, false, kRingBf16Channels).smem > 0; }

int64_t forward_ring_bf16_workspace(const Geometry& g) {
  const RingPlan p = ring_plan_for(g, false, kRingBf16Channels);
  return p.smem > 0 ? static_cast<int64_t>(sizeof(bf16)) * ring_set(dims_of(g), p) : 0;
}

void forward_ring_bf16(const bf16* x, const bf16* w, const DeviceEpilogue<bf16>& e, bf16* y, void* workspace,
                       const Geometry& g, cudaStream_t stream) {
  const RingPlan plan = ring_plan_for(g, false, kRingBf16Channels);
  check_entry(plan.smem > 0, workspace, forward_ring_bf16_workspace(g), "conv2d", "12 (wgmma ring, bf16)", "bytes");
  ring_forward(x, w, false, static_cast<bf16*>(workspace), e, y, g, plan, stream, "conv2d");
}

bool backward_input_ring_bf16_applies(const Geometry& g) {
  return backward_input_as_forward_applies(g) && forward_ring_bf16_applies(as_forward(g));
}

int64_t backward_input_ring_bf16_workspace(const Geometry& g) {
  return backward_input_as_forward_applies(g) ? forward_ring_bf16_workspace(as_forward(g)) : 0;
}

void backward_input_ring_bf16(const bf16* grad_y, const bf16* w, bf16* grad_x, void* workspace, const Geometry& g,
                              cudaStream_t stream) {
  check_entry(backward_input_ring_bf16_applies(g), workspace, backward_input_ring_bf16_workspace(g),
              "conv2d_backward_input", "12 (wgmma ring, bf16)", "bytes");
  const Geometry f = as_forward(g);
  ring_forward(grad_y, w, true, static_cast<bf16*>(workspace), {}, grad_x, f, ring_plan_for(f, false, kRingBf16Channels),
               stream, "conv2d_backward_input");
}

}  // namespace kiln::cuda::conv2d
