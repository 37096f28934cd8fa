// Forward version 13: few output channels at stride 1, a warp across a row of output pixels and
// each lane down a column of them, a tap's neighbours passed between lanes by shuffles; backward
// input 13 is its forward form (kernels/cuda/conv2d.cu gives the versions, NOTES.md their story).
//
// A layer with few outputs a group (O/G <= 4) does few multiply-adds per value it reads: the
// backward input of a first layer (MNIST's conv1: 32 channels of grad_y in, one channel of grad_x
// out, 9 taps each) reads 32 values and does 288 multiply-adds per output, so it is bound by its
// loads, and the tensor cores' tiles of 32 or 64 outputs would be almost all padding. Version 8
// (conv2d.cu) copies a band of input rows to shared memory for each 8 channels and lets each thread
// read its taps from there; at conv1's backward input, batch 512, it moved a tenth of what a copy
// moves: its copy loop divides each element's index three times, a block of 128 threads covers 4
// of the 28 rows and reads the band's 2 extra rows again, and each block waits for its own copy
// before it multiplies, so few loads are in flight.
//
// Here nothing goes through shared memory but the weights:
// - a block's warps (up to 8, 4 channels each at least, 8 where the grid runs in several waves)
//   share one tile of kColsRows output rows by 32 - (K - 1) columns and split the input channels
//   between them (warp w of 8 takes w, w + 8, ...);
// - lane l loads input column ox0 - pw + l of the tile's K - 1 + kColsRows input rows, one load a
//   row, coalesced across the warp, all of a channel's rows in flight together;
// - the value at tap kx of the lane's output column is lane l + kx's, one shuffle away, so each
//   input value is loaded once a warp and serves all K x K taps that read it from registers;
// - the lanes' partial sums meet in shared memory at the end, added in warp order (deterministic).
// The kernel's K x K taps and outputs a lane are template arguments, so every loop unrolls and each
// weight is a register.
//
// Measured (one H200, kernel-bench, docs/runs/2026-11-28-h200-columns), µs. conv1's backward input
// (grad_x [N, 1, 28, 28] from grad_y [N, 32, 26, 26]):
//   batch 512, f32: 32.7 [fig cuda.conv2d.columns.conv1-b512.bwd-input.v13.us]
//     against version 8's 108.0 [fig cuda.conv2d.columns.conv1-b512.bwd-input.v8.us],
//     cuDNN FP32's 76.3 [fig cuda.conv2d.columns.conv1-b512.bwd-input.cudnn.us]
//     and cuDNN TF32's 75.5 [fig cuda.conv2d.columns.conv1-b512.bwd-input.cudnn-tf32.us];
//   batch 512, bf16: 31.2 [fig cuda.conv2d.columns.conv1-b512.bwd-input.v13-bf16.us]
//     against cuDNN BF16's 103.7 [fig cuda.conv2d.columns.conv1-b512.bwd-input.cudnn-bf16.us]
//     (production before: widened to f32 for version 8,
//     134.0 [fig cuda.conv2d.columns.conv1-b512.bwd-input.bf16-before.us] in docs/runs/2026-11-28-h200-weight-regs);
//   batch 64, f32: 6.8 [fig cuda.conv2d.columns.conv1-b64.bwd-input.v13.us]
//     against 8's 24.5 [fig cuda.conv2d.columns.conv1-b64.bwd-input.v8.us],
//     cuDNN FP32's 29.9 [fig cuda.conv2d.columns.conv1-b64.bwd-input.cudnn.us]
//     and TF32's 37.5 [fig cuda.conv2d.columns.conv1-b64.bwd-input.cudnn-tf32.us];
//     bf16 6.9 [fig cuda.conv2d.columns.conv1-b64.bwd-input.v13-bf16.us]
//     against cuDNN BF16's 59.5 [fig cuda.conv2d.columns.conv1-b64.bwd-input.cudnn-bf16.us].
// A segmentation head's forward, x [64, 64, 56, 56] to one output channel, 3 x 3, padding 1:
//   f32 27.7 [fig cuda.conv2d.columns.head.fwd.v13.us]
//     against version 8's 137.4 [fig cuda.conv2d.columns.head.fwd.v8.us], version 12's TF32
//     84.9 [fig cuda.conv2d.columns.head.fwd.v12-tf32.us] (a 32-output tile for one output),
//     cuDNN FP32's 123.4 [fig cuda.conv2d.columns.head.fwd.cudnn.us]
//     and TF32's 133.3 [fig cuda.conv2d.columns.head.fwd.cudnn-tf32.us];
//   bf16 25.1 [fig cuda.conv2d.columns.head.fwd.v13-bf16.us]
//     against version 9's 68.1 [fig cuda.conv2d.columns.head.fwd.v9-bf16.us]
//     and cuDNN BF16's 104.5 [fig cuda.conv2d.columns.head.fwd.cudnn-bf16.us].
// I predicted conv1's backward input at batch 512 near 15 µs [nofig], bound by its 44 MB of f32
// reads; at 32.7 [fig cuda.conv2d.columns.conv1-b512.bwd-input.v13.us] it moves a third of what the
// copy does, and bf16's half the bytes take the same time: it waits on latency, not bandwidth. At
// 64 registers a lane, 32 warps an SM each walk their 4 channels one round trip after another.
// Loading the next channel's rows before a channel's multiply-adds took 77 registers and fewer
// warps, and was slower: conv1 at batch 512 38.5 [fig cuda.conv2d.columns.prefetch.conv1-b512.bwd-input.v13.us],
// the head 34.9 [fig cuda.conv2d.columns.prefetch.head.fwd.v13.us] (a later call; NOTES.md).
// What did help was fewer, longer warps where the grid runs in several waves: 8 channels a warp,
// so 4 warps a tile at conv1, spending less on each tile's weights and partial sums
// (docs/runs/2026-11-28-h200-columns-warps): conv1's backward input at batch 512
// 30.2 [fig cuda.conv2d.columns-warps.conv1-b512.bwd-input.v13.us] in f32 and
// 28.8 [fig cuda.conv2d.columns-warps.conv1-b512.bwd-input.v13-bf16.us] in bf16 (8 always, an
// earlier call: 30.2 [fig cuda.conv2d.columns-warps.fixed8.conv1-b512.bwd-input.v13.us] and
// 28.8 [fig cuda.conv2d.columns-warps.fixed8.conv1-b512.bwd-input.v13-bf16.us]). At batch 64 the
// grid is one wave, and 8 always took 8.5 [fig cuda.conv2d.columns-warps.fixed8.conv1-b64.bwd-input.v13.us]
// (bf16 8.6 [fig cuda.conv2d.columns-warps.fixed8.conv1-b64.bwd-input.v13-bf16.us]), so the
// launch keeps 4 there: 6.9 [fig cuda.conv2d.columns-warps.conv1-b64.bwd-input.v13.us]
// (bf16 7.0 [fig cuda.conv2d.columns-warps.conv1-b64.bwd-input.v13-bf16.us]); the head, 8 warps
// of 8 channels either way, 27.8 [fig cuda.conv2d.columns-warps.head.fwd.v13.us]. Issuing a
// warp's first channel before the weights' barrier was slower again: conv1 at batch 512
// 36.1 [fig cuda.conv2d.columns-warps.early.conv1-b512.bwd-input.v13.us] (bf16
// 35.8 [fig cuda.conv2d.columns-warps.early.conv1-b512.bwd-input.v13-bf16.us]; batch 64
// 7.2 [fig cuda.conv2d.columns-warps.early.conv1-b64.bwd-input.v13.us], bf16
// 7.9 [fig cuda.conv2d.columns-warps.early.conv1-b64.bwd-input.v13-bf16.us]), the head
// 31.8 [fig cuda.conv2d.columns-warps.early.head.fwd.v13.us].
#include <algorithm>
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/conv2d.cuh"
#include "kiln/kernels/cuda/conv2d/common.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda::conv2d {

namespace {

constexpr int kColsRows = 8;                 // output rows a lane computes
constexpr int kColsWarps = 8;                // warps a block at most, splitting the input channels
constexpr int kColsWarpChannels = 4;         // channels a warp at least (8 over several waves)
constexpr int kColsMaxOutputs = 4;           // O/G
constexpr int kColsWeightWords = 100;        // 32-bit registers a lane's weights of a channel may take
constexpr int64_t kColsSmem = 64 * 1024;     // the weights, then the warps' partial sums

struct ColsArgs {
  Dims d;
  bool flip;  // w is the layer's own (the backward input's forward form reads it flipped)
  int warps;
  unsigned segments, bands;  // a row's column segments of 32 - (K - 1) pixels; bands of kColsRows rows
};

// The outputs a lane computes for O/G outputs (a power of two, so that a group's weights of one
// tap are a vector).
int cols_outputs(int64_t og) { return og <= 1 ? 1 : og <= 2 ? 2 : 4; }

template <class T, int K, int kOut>
__global__ void __launch_bounds__(32 * kColsWarps) columns_kernel(const T* x, const T* w, DeviceEpilogue<T> e, T* y,
                                                                   ColsArgs a) {
  using C = compute_t<T>;
  constexpr int R = kColsRows, kIn = R + K - 1, kSpan = 32 - (K - 1), kTaps = K * K;
  extern __shared__ __align__(16) unsigned char smem_cols[];
  C* ws = reinterpret_cast<C*>(smem_cols);  // [C/G][tap][kOut], then the partial sums
  const Dims& d = a.d;
  unsigned t = blockIdx.x;
  const int ox0 = static_cast<int>(t % a.segments) * kSpan;
  t /= a.segments;
  const int oy0 = static_cast<int>(t % a.bands) * R;
  t /= a.bands;
  const int64_t img = t % static_cast<unsigned>(d.n), g = t / static_cast<unsigned>(d.n);
  for (int i = static_cast<int>(threadIdx.x); i < d.cg * kTaps * kOut; i += static_cast<int>(blockDim.x))
    ws[i] = cast<C>(weight_at(w, d, a.flip, g, i / (kTaps * kOut), i / kOut % kTaps, i % kOut));
  __syncthreads();

  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int width = static_cast<int>(d.w), iy0 = oy0 - d.ph, ix = ox0 - d.pw + lane;
  unsigned inside = 0;  // bit r: input row iy0 + r at this lane's column lies inside the input
#pragma unroll
  for (int r = 0; r < kIn; ++r)
    inside |= static_cast<unsigned>(iy0 + r >= 0 && iy0 + r < d.h && ix >= 0 && ix < width) << r;
  const T* planes = x + (img * d.c + g * d.cg) * d.hw;
  C acc[kOut][R] = {};
  for (int64_t c = warp; c < d.cg; c += a.warps) {
    const T* plane = planes + c * d.hw;
    C v[kIn];
#pragma unroll
    for (int r = 0; r < kIn; ++r) v[r] = inside >> r & 1 ? cast<C>(plane[(iy0 + r) * width + ix]) : C(0);
    C wt[kTaps * kOut];
#pragma unroll
    for (int i = 0; i < kTaps * kOut; ++i) wt[i] = ws[c * kTaps * kOut + i];
    // input row r serves output row r - ky through tap row ky
#pragma unroll
    for (int r = 0; r < kIn; ++r) {
      C s[K];
      s[0] = v[r];
#pragma unroll
      for (int kx = 1; kx < K; ++kx) s[kx] = __shfl_down_sync(0xffffffffu, v[r], kx);
#pragma unroll
      for (int ky = 0; ky < K; ++ky) {
        if (r - ky < 0 || r - ky >= R) continue;
#pragma unroll
        for (int kx = 0; kx < K; ++kx)
#pragma unroll
          for (int o = 0; o < kOut; ++o) acc[o][r - ky] += s[kx] * wt[(ky * K + kx) * kOut + o];
      }
    }
  }

  // Output (o, r, l) of the tile is element (o R + r) 32 + l of a warp's partial sums.
  auto store = [&](int i, C sum) {
    const int o = i / (R * 32), oy = oy0 + i / 32 % R, l = i % 32, ox = ox0 + l;
    if (l < kSpan && o < d.og && oy < d.oh && ox < d.ow)
      y[((img * d.o + g * d.og + o) * d.oh + oy) * d.ow + ox] = cast<T>(e(sum, g * d.og + o));
  };
  constexpr int kTile = kOut * R * 32;
  if (a.warps == 1) {
#pragma unroll
    for (int o = 0; o < kOut; ++o)
#pragma unroll
      for (int r = 0; r < R; ++r) store((o * R + r) * 32 + lane, acc[o][r]);
    return;
  }
  __syncthreads();  // every warp is done with the weights
#pragma unroll
  for (int o = 0; o < kOut; ++o)
#pragma unroll
    for (int r = 0; r < R; ++r) ws[warp * kTile + (o * R + r) * 32 + lane] = acc[o][r];
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < kTile; i += static_cast<int>(blockDim.x)) {
    C sum = ws[i];
    for (int k = 1; k < a.warps; ++k) sum += ws[k * kTile + i];
    store(i, sum);
  }
}

// Whether a lane's weights of one channel fit its registers (f64 at 5 x 5 and 4 outputs does not).
constexpr bool cols_weights_fit(int64_t k, int64_t outputs, int64_t bytes) {
  return k * k * outputs * bytes <= 4 * kColsWeightWords;
}

// K when version 13 runs the forward view f (stride 1, dilation 1, a square 3 x 3 or 5 x 5
// kernel, O/G <= 4, a channel's weights within a lane's registers, the weights and partial sums
// within shared memory, each plane's offsets within an int), else 0.
template <class T>
int cols_kernel_size(const Geometry& f) {
  const bool square = f.kh == f.kw && (f.kh == 3 || f.kh == 5);
  if (!square || f.stride_h != 1 || f.stride_w != 1 || f.dilation_h != 1 || f.dilation_w != 1 ||
      f.o / f.groups > kColsMaxOutputs || f.h * f.w >= (int64_t{1} << 31))
    return 0;
  const int64_t outputs = cols_outputs(f.o / f.groups), bytes = static_cast<int64_t>(sizeof(compute_t<T>));
  const int64_t weights = f.c / f.groups * f.kh * f.kw * outputs, partials = kColsWarps * outputs * kColsRows * 32;
  const bool fit = cols_weights_fit(f.kh, outputs, bytes) && std::max(weights, partials) * bytes <= kColsSmem;
  return fit ? static_cast<int>(f.kh) : 0;
}

template <class T>
void columns_forward(const T* x, const T* w, bool flip, const DeviceEpilogue<T>& e, T* y, const Geometry& f,
                     cudaStream_t stream, const char* op) {
  const int k = cols_kernel_size<T>(f);
  KILN_CHECK(k > 0, ValueError, "cuda ", op, ": version 13 does not apply to this geometry");
  const Dims d = dims_of(f);
  if (d.n * d.o * d.ohw == 0) return;
  const int outputs = cols_outputs(d.og);
  const int64_t span = 33 - k;  // output columns a warp
  ColsArgs a{d, flip, 0, static_cast<unsigned>((d.ow + span - 1) / span),
             static_cast<unsigned>((d.oh + kColsRows - 1) / kColsRows)};
  const int64_t blocks = int64_t{a.segments} * a.bands * d.n * f.groups;
  KILN_CHECK(blocks < (int64_t{1} << 31), ShapeError, "cuda ", op, ": the problem is too large for one launch (",
             blocks, " blocks)");
  auto launch = [&]<int K, int kOut>() {
    if constexpr (cols_weights_fit(K, kOut, sizeof(compute_t<T>))) {
      auto* kernel = columns_kernel<T, K, kOut>;
      // 4 channels a warp at least; 8 where the grid at 4 would not all be resident at once, so
      // that fewer, longer warps spend less on each tile's weights and partial sums (figures
      // above). The resident warps are the kernel's occupancy at its registers, asked once (of the
      // first device: on a second GPU of another kind the choice may be worse, never wrong).
      static const int64_t resident = [&] {
        int per_sm = 0;
        KILN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kColsWarps, 0));
        return int64_t{std::max(per_sm, 1)} * kColsWarps * device_attribute(cudaDevAttrMultiProcessorCount);
      }();
      auto warps_at = [&](int64_t channels) { return std::clamp<int64_t>(d.cg / channels, 1, kColsWarps); };
      const bool waves = blocks * warps_at(kColsWarpChannels) > resident;
      a.warps = static_cast<int>(warps_at(waves ? 2 * kColsWarpChannels : kColsWarpChannels));
      const int64_t smem = std::max<int64_t>(d.cg * d.khkw * kOut, int64_t{a.warps} * kOut * kColsRows * 32) *
                           static_cast<int64_t>(sizeof(compute_t<T>));
      if (smem > 48 * 1024) allow_dynamic_smem(kernel, static_cast<size_t>(smem));  // (a host call)
      kernel<<<static_cast<unsigned>(blocks), 32 * a.warps, static_cast<size_t>(smem), stream>>>(x, w, e, y, a);
    }
  };
  auto outputs_of = [&]<int K>() {
    if (outputs == 1) launch.template operator()<K, 1>();
    else if (outputs == 2) launch.template operator()<K, 2>();
    else launch.template operator()<K, 4>();
  };
  if (k == 3) outputs_of.template operator()<3>();
  else outputs_of.template operator()<5>();
  KILN_CUDA_LAUNCH_CHECK(op);
}

}  // namespace

template <class T>
bool forward_columns_applies(const Geometry& g) {
  return cols_kernel_size<T>(g) > 0;
}

template <class T>
void forward_columns(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, cudaStream_t stream) {
  columns_forward(x, w, false, e, y, g, stream, "conv2d");
}

template <class T>
bool backward_input_columns_applies(const Geometry& g) {
  return backward_input_as_forward_applies(g) && cols_kernel_size<T>(as_forward(g)) > 0;
}

template <class T>
void backward_input_columns(const T* grad_y, const T* w, T* grad_x, const Geometry& g, cudaStream_t stream) {
  columns_forward(grad_y, w, true, {}, grad_x, checked_forward_form(g), stream, "conv2d_backward_input");
}

#define KILN_CONV2D_COLUMNS(T)                                                                              \
  template bool forward_columns_applies<T>(const Geometry&);                                                \
  template void forward_columns<T>(const T*, const T*, const DeviceEpilogue<T>&, T*, const Geometry&,        \
                                   cudaStream_t);                                                           \
  template bool backward_input_columns_applies<T>(const Geometry&);                                         \
  template void backward_input_columns<T>(const T*, const T*, T*, const Geometry&, cudaStream_t);
KILN_CONV2D_COLUMNS(float)
KILN_CONV2D_COLUMNS(double)
KILN_CONV2D_COLUMNS(bf16)
#undef KILN_CONV2D_COLUMNS

}  // namespace kiln::cuda::conv2d
