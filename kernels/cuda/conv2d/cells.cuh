// Convolution at stride 1 in bf16 on the tensor cores, read straight from the NCHW tensors: the
// forward (and the backward input as a forward) version 9, and the backward weight version 4,
// which shares its copy (kernels/cuda/conv2d.cu gives their figures, kernels/cuda/NOTES.md their
// story). Included by conv2d.cu only.
//
// Version 7 in bf16 first writes its input again with channels paired (mma m16n8k16 wants two
// neighbouring k in one 32-bit register, and its 4-byte cp.async gathers could not move single
// bf16 values): a pass over the whole input before the kernel, and a 4-byte copy per pair of
// values inside it. Here the block transposes as it copies: each patch pixel becomes a "cell" of
// 16 channels (32 bytes, channels running along it), so that the 8 channels of one pixel at one
// tap are 16 contiguous bytes, one row of an ldmatrix 8 x 8 matrix. A k-step (16 channels, one
// tap) then loads each A fragment with one ldmatrix.x4 whose lanes point at the cells of their
// pixels moved by the tap: every tap is a whole number of cells away, so every row stays aligned.
//
// The copy (CellCopy): a thread takes half a cell (8 channels of one pixel: eight 2-byte loads,
// neighbouring lanes on neighbouring pixels, so each load is one coalesced row; at an even width
// two pixels, eight 4-byte loads) and stores it as one 16-byte word. The next stage's loads are issued before the block multiplies this one and stored after
// it, two stages of shared memory alternating. The weights are packed beforehand as rows of 16
// channels too, one row per output and tap, and arrive by 16-byte cp.async.
//
// Shared memory banks: the 8 rows of an ldmatrix matrix are 8 neighbouring cells (pixels, or
// outputs), 32 bytes apart: their first halves would sit on half of the banks twice. Swapping a
// cell's two halves in every second group of four cells (cell_half) puts any 8 neighbouring cells'
// halves on the 32 banks once, for the ldmatrix loads and for the copy's stores.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiln/core/bf16.h"
#include "kiln/kernels/cuda/conv2d/common.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::conv2d {

namespace {

constexpr int kCellChannels = 16;  // a cell: 16 bf16 channels of one pixel, 32 bytes
constexpr int64_t kCellPlanes = 8;  // the input planes one unit of the copy reads, as int offsets
// The half cells a thread carries from global to shared memory at a time: a stage's copy is
// rounds of kCellUnits * THREADS, the first issued before the block multiplies the stage before.
constexpr int kCellUnits = 4;  // (pixel pairs: 2 units of two cells)

// The byte offset of half h (channels 8h .. 8h + 7) of cell i, halves swapped where bit 2 of i is set.
__host__ __device__ inline int cell_half(int i, int h) { return i * 32 + ((h ^ (i >> 2 & 1)) << 4); }

// The block: BM = 128 output pixels of one image by BN output channels, 32 x 32 warp tiles of
// mma.sync m16n8k16.
template <int BN_>
struct CellTile {
  static constexpr int BM = 128, BN = BN_, WM = 32, WN = 32, MI = WM / 16, NI = WN / 8;
  static constexpr int WARPS = (BM / WM) * (BN / WN), THREADS = WARPS * 32;
};

// The output-channel tile for N outputs per group.
inline int cell_bn(int64_t n) { return n > 32 ? 64 : 32; }

// A launch's patch: `rows` input rows at most (over all blocks) by `cols` = OW + (KW-1)*dw columns
// (the padding columns included), one cell each; the stages of 16 channels; the packed weights'
// rows (O/G rounded up to BN) and the shared memory (two stages of patch and weights).
struct CellPlan {
  int rows = 0, cols = 0, cells = 0, bn = 0;
  int64_t chunks = 0, np = 0, smem = 0;
};

// The plan, or an empty one (smem = 0) where version 9 does not run: stride 1, two blocks' shared
// memory on an SM, offsets within an int (kCellPlanes: the copy's loads reach 7 planes past a
// unit's first channel). It runs wherever version 7 on channel pairs would: the same patch in the
// same bytes, with fewer bytes of weights, under the same offset rule.
inline CellPlan cell_plan(const Dims& d, int64_t max_smem) {
  if (d.sh != 1 || d.sw != 1 || d.n * d.o * d.ohw == 0) return {};
  CellPlan p;
  p.bn = cell_bn(d.og);
  p.rows = static_cast<int>(std::min<int64_t>(127 / d.ow + 2, d.oh) + (d.kh - 1) * d.dh);
  p.cols = static_cast<int>(d.ow + (d.kw - 1) * d.dw);
  p.cells = p.rows * p.cols;
  p.chunks = (d.cg + kCellChannels - 1) / kCellChannels;
  p.np = (d.og + p.bn - 1) / p.bn * p.bn;
  // two stages; the output tile (BN rows of 128 + 8 pixels) reuses them
  p.smem = std::max(2 * (int64_t{p.cells} * 32 + d.khkw * p.bn * 32), int64_t{p.bn} * 136 * 2);
  const bool fits = p.smem <= max_smem && kCellPlanes * d.hw < (int64_t{1} << 31) && d.ohw < (int64_t{1} << 31);
  return fits ? p : CellPlan{};
}

// The packed weights: rows of 16 channels (cell_half's order), wp[g][chunk][tap][np][16] = the
// weight of output n (of group g) for input channel chunk*16 + c at tap, zero past C/G or O/G.
// flip: w is the layer's own weight, read as the backward input's forward form (common.cuh's
// weight_at).
__global__ void pack_cell_weights_kernel(const bf16* w, bf16* wp, Dims d, CellPlan plan, bool flip, int64_t total) {
  KILN_GRID_STRIDE(i, total) {  // i runs over (g, chunk, tap, n, c)
    const int64_t c = i % kCellChannels, r = i / kCellChannels, n = r % plan.np, r2 = r / plan.np;
    const int64_t tap = r2 % d.khkw, r3 = r2 / d.khkw, chunk = r3 % plan.chunks, g = r3 / plan.chunks;
    const int64_t row = ((g * plan.chunks + chunk) * d.khkw + tap) * plan.np + n;
    wp[row * kCellChannels + (c / 8 ^ (n >> 2 & 1)) * 8 + c % 8] =
        weight_at(w, d, flip, g, chunk * kCellChannels + c, tap, n);
  }
}

// The copy of a patch into cells: `rows` input rows from row iy0 (given at each gather, so that
// one copy serves patches at any height), `cols` columns from column -pw, 16 channels from c0.
// Its units are 8 channels (half cells) of one pixel, or with kPairs of two neighbouring pixels
// (an input of even width: one 4-byte load per channel, the pair's first at an even column, so
// both are in the image or neither). Units u < units count as (h, patch row, pixel or pair) and go
// in rounds: round r takes u = (r * kUnits + i) * THREADS + tid. A unit's row, column and where
// it writes (byte offsets in the patch, -1 outside it) are the same for every patch: round 0's are
// kept in registers. gather loads a round into registers (zeros for padding and channels past
// C/G), put stores it: a block can issue the next patch's loads, multiply, then store.
template <int THREADS, bool kPairs>
struct CellCopy {
  static constexpr int kUnits = kPairs ? kCellUnits / 2 : kCellUnits, kPixels = kPairs ? 2 : 1;
  struct Unit {
    int r, ix, c;  // c: the unit's first channel within the 16 (0 or 8)
    int dst[kPixels];
  };
  int tid, rows, cols, h_in, w_in, hw, cg, pw, ix_lo, per_row, units, rounds;
  float inv_per_row;
  Unit first[kUnits];
  uint4 held[kUnits][kPixels];

  __device__ CellCopy(int tid_, int rows_, int cols_, const Dims& d)
      : tid(tid_), rows(rows_), cols(cols_), h_in(static_cast<int>(d.h)), w_in(static_cast<int>(d.w)),
        hw(static_cast<int>(d.hw)), cg(static_cast<int>(d.cg)), pw(static_cast<int>(d.pw)) {
    ix_lo = kPairs ? -((pw + 1) / 2 * 2) : -pw;  // the first unit's column in the input
    per_row = (cols - pw - ix_lo + kPixels - 1) / kPixels;
    units = 2 * rows * per_row;
    rounds = (units + kUnits * THREADS - 1) / (kUnits * THREADS);
    inv_per_row = 1.0f / static_cast<float>(per_row);
#pragma unroll
    for (int i = 0; i < kUnits; ++i) first[i] = unit(0, i);
  }

  __device__ Unit unit(int round, int i) const {
    Unit v{};
    const int u = (round * kUnits + i) * THREADS + tid, hr = div_small(u, inv_per_row), h = hr >= rows;
    v.r = u < units ? hr - h * rows : -1;
    v.ix = ix_lo + (u - hr * per_row) * kPixels;
    v.c = 8 * h;
#pragma unroll
    for (int e = 0; e < kPixels; ++e) {
      const int col = v.ix + e + pw;
      v.dst[e] = u < units && col >= 0 && col < cols ? cell_half(v.r * cols + col, h) : -1;
    }
    return v;
  }

  // x_group: the image's first channel of the group; c0: the first of the 16 channels.
  __device__ void gather(const bf16* x_group, int iy0, int c0, int round) {
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const Unit u = round == 0 ? first[i] : unit(round, i);
      const int iy = iy0 + u.r, c = c0 + u.c;
      const bool in = u.r >= 0 && static_cast<unsigned>(iy) < static_cast<unsigned>(h_in) &&
                      static_cast<unsigned>(u.ix) < static_cast<unsigned>(w_in);
      const int valid = in ? min(8, cg - c) : 0;
      const int64_t at = int64_t{c} * hw + iy * w_in + u.ix;
      if constexpr (kPairs) {  // v[j]: channel j at both pixels; the cells take their halves
        const uint32_t* src = reinterpret_cast<const uint32_t*>(x_group) + at / 2;
        uint32_t v[8];
        if (valid == 8) {  // a whole half cell: no tests
#pragma unroll
          for (int j = 0; j < 8; ++j) v[j] = __ldg(src + j * (hw / 2));
        } else {
#pragma unroll
          for (int j = 0; j < 8; ++j) v[j] = j < valid ? __ldg(src + j * (hw / 2)) : 0u;
        }
        held[i][0] = make_uint4(__byte_perm(v[0], v[1], 0x5410), __byte_perm(v[2], v[3], 0x5410),
                                __byte_perm(v[4], v[5], 0x5410), __byte_perm(v[6], v[7], 0x5410));
        held[i][1] = make_uint4(__byte_perm(v[0], v[1], 0x7632), __byte_perm(v[2], v[3], 0x7632),
                                __byte_perm(v[4], v[5], 0x7632), __byte_perm(v[6], v[7], 0x7632));
      } else {
        const uint16_t* src = reinterpret_cast<const uint16_t*>(x_group) + at;
        uint32_t v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = j < valid ? uint32_t{__ldg(src + j * hw)} : 0u;
        held[i][0] = make_uint4(v[0] | v[1] << 16, v[2] | v[3] << 16, v[4] | v[5] << 16, v[6] | v[7] << 16);
      }
    }
  }

  __device__ void put(unsigned char* patch, int round) const {
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const Unit u = round == 0 ? first[i] : unit(round, i);
#pragma unroll
      for (int e = 0; e < kPixels; ++e)
        if (u.dst[e] >= 0) *reinterpret_cast<uint4*>(patch + u.dst[e]) = held[i][e];
    }
  }
};

struct CellArgs {
  const bf16* x;   // [N, C, H, W]
  const bf16* wp;  // packed
  DeviceEpilogue<bf16> epilogue;
  bf16* y;  // [N, O, OH, OW]
  Dims d;
  CellPlan plan;
  int tiles;  // pixel tiles per image
  // A backward input may take the gradient back through the relu that made x: then y is 0
  // wherever relu_x (x itself, y's shape) is <= 0. Null: no relu.
  const bf16* relu_x = nullptr;
};

// V bf16 values as one load or store: 16, 4 or 2 bytes.
template <int V>
using Bf16s = std::conditional_t<V == 8, uint4, std::conditional_t<V == 2, uint32_t, uint16_t>>;

// bf16 values with relu's gradient applied, read from the relu's output r: 0 where r <= 0 (a NaN
// passes, as relu_backward).
__device__ inline uint16_t through_relu(uint16_t v, uint16_t r) {
  return __uint_as_float(uint32_t{r} << 16) <= 0.0f ? uint16_t{0} : v;
}
__device__ inline uint32_t through_relu(uint32_t v, uint32_t r) {
  const float lo = __uint_as_float(r << 16), hi = __uint_as_float(r & 0xffff0000u);
  return v & ((lo <= 0.0f ? 0u : 0xffffu) | (hi <= 0.0f ? 0u : 0xffff0000u));
}
__device__ inline uint4 through_relu(uint4 v, uint4 r) {
  return {through_relu(v.x, r.x), through_relu(v.y, r.y), through_relu(v.z, r.z), through_relu(v.w, r.w)};
}

// One block: BM consecutive output pixels of image blockIdx.x / tiles (tile blockIdx.x % tiles),
// output channels blockIdx.y * BN onward of group blockIdx.z; the stages are 16 input channels,
// and within a stage a k-step is one tap.
template <class G, bool kPairs>
__global__ void __launch_bounds__(G::THREADS, 2) cell_conv_kernel(CellArgs a) {
  extern __shared__ __align__(128) unsigned char smem_cells[];
  constexpr int MI = G::MI, NI = G::NI;
  const Dims& d = a.d;
  const CellPlan& plan = a.plan;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int wm0 = warp / (G::BN / G::WN) * G::WM, wn0 = warp % (G::BN / G::WN) * G::WN;
  const int64_t img = blockIdx.x / a.tiles, group = blockIdx.z, n0 = int64_t{blockIdx.y} * G::BN;
  const int ohw = static_cast<int>(d.ohw), ow = static_cast<int>(d.ow), taps = static_cast<int>(d.khkw);
  const int p0 = static_cast<int>(blockIdx.x % a.tiles) * G::BM;
  // the block's output rows; offsets within them divide by ow as floats (div_small)
  const float inv_ow = 1.0f / static_cast<float>(ow);
  const int y_first = p0 / ow, x0 = p0 - y_first * ow;
  const int y_last = y_first + div_small(x0 + min(G::BM, ohw - p0) - 1, inv_ow);
  const int rows = y_last - y_first + 1 + static_cast<int>((d.kh - 1) * d.dh), cols = plan.cols;
  const int patch_bytes = plan.cells * 32, stage_bytes = patch_bytes + taps * G::BN * 32;

  // This lane's ldmatrix rows (lanes 8i .. 8i + 7 give matrix i's). A: of each 16-pixel tile,
  // matrices 0 and 2 take pixels 0-7 and 1 and 3 pixels 8-15, 0 and 1 the cells' first halves
  // (channels 0-7), 2 and 3 their second; a_cell is the cell the lane reads at tap (0, 0)
  // (pixels past the image read cell 0). B: of each pair of 8-output tiles, matrices 0 and 1
  // take the first tile, 2 and 3 the second, 0 and 2 the rows' first halves.
  int a_cell[MI];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    const int m = p0 + wm0 + mi * 16 + lane % 8 + 8 * (lane / 8 % 2);
    const int row = div_small(x0 + m - p0, inv_ow);
    a_cell[mi] = m < ohw ? row * cols + x0 + m - p0 - row * ow : 0;
  }
  const int a_h = lane / 16, b_row = wn0 + lane % 8 + 8 * (lane / 16), b_h = lane / 8 % 2;

  CellCopy<G::THREADS, kPairs> copy(tid, rows, cols, d);
  const bf16* x_group = a.x + (img * d.c + group * d.cg) * d.hw;
  const int iy0 = y_first - static_cast<int>(d.ph);
  auto gather = [&](int64_t chunk, int round) {
    copy.gather(x_group, iy0, static_cast<int>(chunk) * kCellChannels, round);
  };
  auto put = [&](unsigned char* stage, int round) { copy.put(stage, round); };
  // The stage's weights: rows (tap, n0 .. n0 + BN) of the packed group, 16 bytes a copy.
  const bf16* w_group = a.wp + (group * plan.chunks * taps * plan.np + n0) * kCellChannels;
  const int tap_words = static_cast<int>(plan.np) * kCellChannels;  // bf16 values between taps
  auto load_weights = [&](int64_t chunk, unsigned char* stage) {
    const bf16* src = w_group + chunk * taps * tap_words;
    for (int i = tid; i < taps * G::BN * 2; i += G::THREADS) {
      const int tap = i / (G::BN * 2), q = i % (G::BN * 2);
      matmul::cp_async16(stage + patch_bytes + i * 16, src + tap * tap_words + q * 8, 16);
    }
    matmul::cp_async_commit();
  };

  float acc[MI][NI][4] = {};
  const int kw = static_cast<int>(d.kw), dh = static_cast<int>(d.dh), dw = static_cast<int>(d.dw);
  auto multiply = [&](const unsigned char* stage) {
    const unsigned char* bs = stage + patch_bytes;
    int ky = 0, kx = 0;
    for (int tap = 0; tap < taps; ++tap) {
      const int off = ky * dh * cols + kx * dw;
      if (++kx == kw) kx = 0, ++ky;
      uint32_t b[NI][2];
#pragma unroll
      for (int p = 0; p < NI / 2; ++p) {
        uint32_t r[4];
        matmul::ldmatrix_x4(r, bs + tap * G::BN * 32 + cell_half(b_row + 16 * p, b_h));
        b[2 * p][0] = r[0], b[2 * p][1] = r[1], b[2 * p + 1][0] = r[2], b[2 * p + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) {
        uint32_t af[4];
        matmul::ldmatrix_x4(af, stage + cell_half(a_cell[mi] + off, a_h));
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) matmul::mma_bf16_16x8x16(acc[mi][ni], af, b[ni]);
      }
    }
  };

  auto stage_at = [&](int64_t s) { return smem_cells + (s % 2) * stage_bytes; };
  load_weights(0, stage_at(0));
  for (int r = 0; r < copy.rounds; ++r) gather(0, r), put(stage_at(0), r);
  matmul::cp_async_wait<0>();
  __syncthreads();
  for (int64_t s = 0; s < plan.chunks; ++s) {
    const bool next = s + 1 < plan.chunks;
    if (next) {  // into the buffer stage s - 1 used: every warp passed the barrier after it
      gather(s + 1, 0);
      load_weights(s + 1, stage_at(s + 1));
    }
    multiply(stage_at(s));
    if (next)
      for (int r = 0; r < copy.rounds; ++r) {
        if (r > 0) gather(s + 1, r);
        put(stage_at(s + 1), r);
      }
    matmul::cp_async_wait<0>();
    __syncthreads();
  }

  // The epilogue, then the tile through shared memory (the stages are free after the barrier
  // above): the accumulators (rows g and g + 8, columns 2t and 2t + 1 of each 16 x 8 tile) rounded
  // to bf16 pairs, which are an ldmatrix fragment's rows, so that stmatrix .trans writes them as
  // rows of outputs, BM pixels each (LDT apart: 8 rows on the 32 banks once); then 16-byte rows of
  // 8 pixels to y, where an output's pixels are contiguous.
  constexpr int LDT = G::BM + 8;
  const int t = lane % 4;
  uint32_t packed[MI][NI][2];
#pragma unroll
  for (int ni = 0; ni < NI; ++ni) {
    float bias[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int64_t n = n0 + wn0 + ni * 8 + 2 * t + e;
      bias[e] = a.epilogue.bias && n < d.og ? static_cast<float>(a.epilogue.bias[group * d.og + n]) : 0.0f;
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        packed[mi][ni][h] = round_bf16_pair(a.epilogue.activate(acc[mi][ni][2 * h] + bias[0]),
                                            a.epilogue.activate(acc[mi][ni][2 * h + 1] + bias[1]));
  }
  unsigned char* tile = smem_cells;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ni += 2) {
      const int n = wn0 + (ni + lane / 16) * 8 + lane % 8, m = wm0 + mi * 16 + lane / 8 % 2 * 8;
      matmul::stmatrix_x4_trans(tile + (n * LDT + m) * 2, packed[mi][ni][0], packed[mi][ni][1], packed[mi][ni + 1][0],
                                packed[mi][ni + 1][1]);
    }
  __syncthreads();
  const int64_t y0 = (img * d.o + group * d.og + n0) * d.ohw + p0;
  const int pixels = min(G::BM, ohw - p0), outputs = static_cast<int>(min(int64_t{G::BN}, d.og - n0));
  // Runs of V pixels of an output as one store (p0 is a multiple of 128, so a run starts aligned
  // where OH*OW is a multiple of V). Through a relu, each thread reads kBatch runs of relu_x
  // before it stores any, so that the loads wait together rather than one after another.
  auto store = [&]<int V>() {
    constexpr int kRuns = G::BM / V, kBatch = 4;
    const int count = outputs * kRuns;
    for (int first = tid; first < count; first += kBatch * G::THREADS) {
      Bf16s<V> relu[kBatch];
      if (a.relu_x) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          const int i = first + b * G::THREADS, n = i / kRuns, m = i % kRuns * V;
          if (i < count && m < pixels)
            relu[b] = *reinterpret_cast<const Bf16s<V>*>(a.relu_x + y0 + int64_t{n} * ohw + m);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = first + b * G::THREADS, n = i / kRuns, m = i % kRuns * V;
        if (i >= count || m >= pixels) continue;
        Bf16s<V> v = *reinterpret_cast<const Bf16s<V>*>(tile + (n * LDT + m) * 2);
        if (a.relu_x) v = through_relu(v, relu[b]);
        *reinterpret_cast<Bf16s<V>*>(a.y + y0 + int64_t{n} * ohw + m) = v;
      }
    }
  };
  if (ohw % 8 == 0) store.template operator()<8>();
  else if (ohw % 2 == 0) store.template operator()<2>();
  else store.template operator()<1>();
}

// ---- backward weight, version 4: bf16 in cells ----
//
// grad_w[o, c, tap] = sum over images and output pixels p of grad_y[o, p] * x[c, p moved by tap].
// A block owns 64 outputs (two warps' 32, mma's M) and 16 input channels (one cell: N is those 16
// at every tap), and sums over a range of "bands": BR output rows of one image, a stage each. A
// stage holds grad_y's rows of the band ([64][pixels], k running along them: mma's A, read by
// ldmatrix) and the input rows under them as cells (B: a pixel's 8 channels are a 16-byte row of
// the tap's k x n tile, read by ldmatrix .trans). Warp w takes outputs 32 (w % 2) onward and
// kernel row w / 2, all its KW taps: KH x KW x 2 tiles of 16 x 8 a k-step for two ldmatrix of A.
// The blocks' sums over their ranges are f32 partials [S][O][C/G][KH][KW], added in order by
// conv2d.cu's sum_splits.
constexpr int kBandPixels = 96;  // a band: as many whole output rows as fill about this many pixels

template <int KH, int KW>
struct CellWeightTile {
  static constexpr int BM = 64, WARPS = 2 * KH, THREADS = WARPS * 32, MI = 2, NI = 2 * KW;
};

struct CellWeightPlan {
  int band_rows = 0, band_pixels = 0, lda = 0;  // lda: grad_y's row in the stage (bf16 values)
  int rows = 0, cols = 0;                       // the input patch of a band, in cells
  int64_t bands = 0, splits = 0, stage_bytes = 0;
};

struct CellWeightArgs {
  const bf16* x;
  const bf16* gy;
  float* partials;  // [splits][O][C/G][KH][KW]
  Dims d;
  CellWeightPlan plan;
};

template <int KH, int KW, bool kPairs, bool kVec>
__global__ void __launch_bounds__(CellWeightTile<KH, KW>::THREADS) cell_weight_kernel(CellWeightArgs a) {
  using G = CellWeightTile<KH, KW>;
  extern __shared__ __align__(128) unsigned char smem_cell_weight[];
  const Dims& d = a.d;
  const CellWeightPlan& plan = a.plan;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int wm0 = warp % 2 * 32, ky = warp / 2;
  const int64_t split = blockIdx.x, c0 = int64_t{blockIdx.y} * kCellChannels;
  const int64_t otiles = (d.og + G::BM - 1) / G::BM, group = blockIdx.z / otiles, o0 = blockIdx.z % otiles * G::BM;
  const int ow = static_cast<int>(d.ow), ohw = static_cast<int>(d.ohw), oh = static_cast<int>(d.oh);
  const int band_rows = plan.band_rows, band_pixels = plan.band_pixels, lda = plan.lda, cols = plan.cols;
  const int patch_at = G::BM * lda * 2;  // the stage: grad_y's tile, then the patch
  // the bands this block sums: [t0, t1) of N * bands, band b of image b / bands
  const int64_t total = d.n * plan.bands, t0 = total * split / plan.splits, t1 = total * (split + 1) / plan.splits;

  // grad_y's tile: units of 8 pixels (kVec: 16-byte loads, the planes and bands 8-aligned) or 1
  constexpr int kPix = kVec ? 8 : 1, kUnits = kVec ? 4 : 16;
  const int per_row = (band_pixels + 15) / 16 * 16 / kPix, gy_units = G::BM * per_row;
  const float inv_per_row = 1.0f / static_cast<float>(per_row);
  const int gy_rounds = (gy_units + kUnits * G::THREADS - 1) / (kUnits * G::THREADS);
  using Held = std::conditional_t<kVec, uint4, uint16_t>;
  Held gy_held[kUnits];
  auto gy_gather = [&](int64_t t, int round) {
    const int64_t img = t / plan.bands;
    const int r0 = static_cast<int>(t % plan.bands) * band_rows, pixels = min(band_rows, oh - r0) * ow;
    const bf16* src = a.gy + ((img * d.o + group * d.og + o0) * d.ohw + int64_t{r0} * ow);
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const int u = (round * kUnits + i) * G::THREADS + tid, o = div_small(u, inv_per_row);
      const int q = (u - o * per_row) * kPix;
      const bool ok = u < gy_units && o0 + o < d.og && q < pixels;
      if constexpr (kVec) gy_held[i] = ok ? __ldg(reinterpret_cast<const uint4*>(src + int64_t{o} * ohw + q)) : uint4{};
      else gy_held[i] = ok ? __ldg(reinterpret_cast<const uint16_t*>(src + int64_t{o} * ohw + q)) : uint16_t{0};
    }
  };
  auto gy_put = [&](unsigned char* stage, int round) {
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      const int u = (round * kUnits + i) * G::THREADS + tid, o = div_small(u, inv_per_row);
      const int q = (u - o * per_row) * kPix;
      if (u < gy_units) *reinterpret_cast<Held*>(stage + (o * lda + q) * 2) = gy_held[i];
    }
  };
  CellCopy<G::THREADS, kPairs> copy(tid, plan.rows, cols, d);
  auto x_gather = [&](int64_t t, int round) {
    const int64_t img = t / plan.bands;
    const int iy0 = static_cast<int>(t % plan.bands) * band_rows - static_cast<int>(d.ph);
    copy.gather(a.x + (img * d.c + group * d.cg) * d.hw, iy0, static_cast<int>(c0), round);
  };
  const int rounds = max(gy_rounds, copy.rounds);
  auto load = [&](int64_t t, unsigned char* stage) {  // the whole stage, round by round
    for (int r = 0; r < rounds; ++r) {
      if (r < gy_rounds) gy_gather(t, r);
      if (r < copy.rounds) x_gather(t, r);
      if (r < gy_rounds) gy_put(stage, r);
      if (r < copy.rounds) copy.put(stage + patch_at, r);
    }
  };

  // This lane's ldmatrix rows: A as in cell_conv_kernel (rows = outputs, k = pixels of the band);
  // B (.trans): matrices 0 and 2 pixels 0-7 of the k-step, 1 and 3 pixels 8-15, 0 and 1 the cells'
  // first halves.
  const int a_row = wm0 + lane % 8 + 8 * (lane / 8 % 2), a_k = 8 * (lane / 16);
  const int b_pixel = lane % 8 + 8 * (lane / 8 % 2), b_h = lane / 16;
  const float inv_ow = 1.0f / static_cast<float>(ow);
  const int dh = static_cast<int>(d.dh), dw = static_cast<int>(d.dw);
  float acc[G::MI][G::NI][4] = {};
  auto multiply = [&](const unsigned char* stage) {
    const unsigned char* patch = stage + patch_at;
    for (int k0 = 0; k0 < band_pixels; k0 += 16) {
      uint32_t af[G::MI][4];
#pragma unroll
      for (int mi = 0; mi < G::MI; ++mi) matmul::ldmatrix_x4(af[mi], stage + ((a_row + mi * 16) * lda + k0 + a_k) * 2);
      // the lane's pixel (past the band: cell 0, whose products meet grad_y's zeros)
      const int q = k0 + b_pixel, row = div_small(q, inv_ow);
      const int cell = q < band_pixels ? (row + ky * dh) * cols + q - row * ow : 0;
#pragma unroll
      for (int kx = 0; kx < KW; ++kx) {
        uint32_t r[4];
        matmul::ldmatrix_x4_trans(r, patch + cell_half(cell + (q < band_pixels ? kx * dw : 0), b_h));
        const uint32_t b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
        for (int mi = 0; mi < G::MI; ++mi) {
          matmul::mma_bf16_16x8x16(acc[mi][2 * kx], af[mi], b0);
          matmul::mma_bf16_16x8x16(acc[mi][2 * kx + 1], af[mi], b1);
        }
      }
    }
  };

  const int stage_bytes = static_cast<int>(plan.stage_bytes);
  auto stage_at = [&](int64_t t) { return smem_cell_weight + (t % 2) * stage_bytes; };
  if (t0 < t1) {
    load(t0, stage_at(t0));
    __syncthreads();
    for (int64_t t = t0; t < t1; ++t) {
      const bool next = t + 1 < t1;
      if (next) gy_gather(t + 1, 0), x_gather(t + 1, 0);  // into the buffer band t - 1 used
      multiply(stage_at(t));
      if (next) {
        if (gy_rounds == 1 && copy.rounds == 1) gy_put(stage_at(t + 1), 0), copy.put(stage_at(t + 1) + patch_at, 0);
        else load(t + 1, stage_at(t + 1));
      }
      __syncthreads();
    }
  }

  // acc[mi][2 kx + j]: outputs (rows g, g + 8), channels 8j + 2t, + 1 at tap (ky, kx)
  const int g = lane / 4, t = lane % 4;
  float* out = a.partials + (split * d.o + group * d.og) * d.cg * d.khkw;
#pragma unroll
  for (int mi = 0; mi < G::MI; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t o = o0 + wm0 + mi * 16 + g + 8 * h;
      if (o >= d.og) continue;
#pragma unroll
      for (int n = 0; n < G::NI; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t c = c0 + n % 2 * 8 + 2 * t + e;
          if (c < d.cg) out[(o * d.cg + c) * d.khkw + ky * KW + n / 2] = acc[mi][n][2 * h + e];
        }
    }
}

}  // namespace

}  // namespace kiln::cuda::conv2d
