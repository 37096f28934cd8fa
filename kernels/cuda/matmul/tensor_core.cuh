// What the mma.sync tensor-core versions (08, 10, 11, 12, 14) share: the PTX instructions they are
// written with, each wrapped once, and the pieces of the cp.async versions 10-12 (shared-memory
// tile layout, tile loader, pipeline loop, fragment loads, the TF32 and 3xTF32 slice loops, block
// geometry, launcher). Included by the version files, by 13 (for store_mma_tiles), and by the
// conv2d tensor-core kernels (kernels/cuda/conv2d.cu), which feed the same pipeline and slice
// loops from their own gather loaders.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/matmul/common.cuh"

namespace kiln::cuda::matmul {

// f32 -> TF32 rounded to nearest (ties away from zero): the bit pattern of an f32 whose low 13
// mantissa bits are zero.
__device__ inline uint32_t to_tf32(float f) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(f));
  return r;
}

// d += a * b for one 16 x 8 x 8 tile. Fragments (PTX ISA, "mma.m16n8k8" for .tf32), with
// g = lane / 4 and t = lane % 4:  a0 (g, t)  a1 (g + 8, t)  a2 (g, t + 4)  a3 (g + 8, t + 4);
// b0 (k = t, n = g)  b1 (k = t + 4, n = g);  d0, d1 (g, 2t + {0, 1})  d2, d3 (g + 8, 2t + {0, 1}).
// The tensor core reads the top 19 bits of each input register (sign, exponent, 10 mantissa
// bits): raw f32 bits are truncated to TF32, to_tf32's are rounded.
__device__ inline void mma_16x8x8(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d = a * b for one 16 x 8 x 8 tile (the accumulator input is zero).
__device__ inline void mma_16x8x8_first(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
}

// d += a * b for one 16 x 8 x 16 tile. Fragments (PTX ISA, "mma.m16n8k16" for .bf16), g = lane / 4,
// t = lane % 4, each register two bf16 (the lower k in the low half):
// a0 (g, 2t..2t+1)  a1 (g + 8, 2t..2t+1)  a2 (g, 2t+8..2t+9)  a3 (g + 8, 2t+8..2t+9);
// b0 (k = 2t..2t+1, n = g)  b1 (k = 2t+8..2t+9, n = g);  d0, d1 (g, 2t + {0, 1})  d2, d3 (g + 8, ...).
__device__ inline void mma_bf16_16x8x16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// x (f32 bits) -> hi = x rounded to TF32 (to nearest, ties away from zero) and lo = x - hi (exact
// in f32), both as f32 bits: the two halves of a "3xTF32" product (version 12, the conv2d
// tensor-core kernels). Three instructions (an add, a mask, a subtract) where to_tf32's conversion
// takes five: it also tests for inf and NaN. The bits agree for every x but NaN, whose lo is NaN
// here too, so the result is NaN either way, and the kernels recompute NaN results in plain f32.
__device__ inline void split_tf32(uint32_t x, uint32_t& hi, uint32_t& lo) {
  hi = (x + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(__uint_as_float(x) - __uint_as_float(hi));
}

// ldmatrix .x4: four 8 x 8 matrices of 16-bit values, one 16-byte row per lane address (lanes
// 8i .. 8i + 7 give the rows of matrix i). Lane l receives, in r[i], the 32-bit word (l / 4, l % 4)
// of matrix i. Read as 32-bit values, a "matrix" is 8 rows of 4 floats, and that word is exactly
// the (g, t) element of an mma fragment: one instruction loads a whole A fragment, or the B
// fragments of two 8-column tiles, from a tile stored with k running along its rows.
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// ldmatrix .x4 .trans: as ldmatrix_x4, each matrix transposed on the way: lane l receives the
// 16-bit values (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4) of matrix i, rows being the 16-byte
// lines the lanes point at. From lines that run along n (one k each), an mma B fragment.
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// stmatrix .x4 .trans: the inverse of ldmatrix .x4 with .trans. Lane l holds, in r[i], the 16-bit
// pair (l / 4, 2 * (l % 4) .. + 1) of matrix i (an mma accumulator tile's rows, rounded to 16-bit
// pairs), and lanes 8i .. 8i + 7 give the addresses of its 8 columns: column c (8 values, 16
// bytes) goes to lane 8i + c's address. stmatrix is new in sm_90; before it, each lane asks the
// lanes owning its two columns for their addresses and stores its values as 16-bit halves.
__device__ inline void stmatrix_x4_trans(void* row, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(row));
#if __CUDA_ARCH__ >= 900
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(s), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
#else
  // Lane l holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1; column c's line starts at the
  // address of lane 8i + c, and row r is the r-th 16-bit value of that line.
  const int lane = static_cast<int>(threadIdx.x % 32), r = lane / 4, c = 2 * (lane % 4);
  const uint32_t regs[4] = {r0, r1, r2, r3};
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t line = __shfl_sync(0xffffffffu, s, 8 * i + c + h);
      const auto half = static_cast<uint16_t>(regs[i] >> (16 * h));
      asm volatile("st.shared.u16 [%0], %1;\n" ::"r"(line + 2 * r), "h"(half) : "memory");
    }
#endif
}

// Copies `bytes` (0..16) from global `src` to shared `dst` and zero-fills the rest of the 16,
// without passing through registers (.cg: cached in L2 only).
__device__ inline void cp_async16(void* dst, const void* src, int bytes) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes) : "memory");
}
// cp.async of one 4-byte element, zero-filled when `valid` is false (nothing is read then).
__device__ inline void cp_async4(void* dst, const void* src, bool valid) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 4 : 0) : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// One stage's BK x BX tile of an operand in shared memory, kept in the layout memory has so that
// cp.async copies straight through. KC (k-contiguous: memory runs along p) is stored x-major,
// S[x * LD + p] with LD = BK + 4; otherwise k-major, S[p * LD + x] with LD = BX + 8. Either padding
// keeps rows 16-byte aligned and puts the 32 lanes of a fragment load (lane = 4g + t reads
// (p0 + t, x0 + g)) on 32 different banks: 4g + t for rows of BK + 4 = 36, 8t + g for rows of
// BX + 8 (BX a multiple of 32); ldmatrix's 8 row addresses of a KC tile, 36 words apart, too.
template <int BK_, int BX, bool KC_>
struct Tile {
  static constexpr int BK = BK_;
  static constexpr bool KC = KC_;
  static constexpr int LD = KC ? BK + 4 : BX + 8;
  static constexpr int SIZE = KC ? BX * LD : BK * LD;  // floats
  static_assert(LD % 4 == 0 && SIZE % 4 == 0, "16-byte aligned rows and stages");
  __device__ static int at(int p, int x) { return KC ? x * LD + p : p * LD + x; }
};

// Queues the copies of an operand's BK x BX tiles into shared memory, one slice of k at a time:
// NT threads, 16-byte chunks along memory's direction, neighbouring threads on neighbouring chunks
// (coalesced). Seen along memory, a tile is a stack of "lines" (rows of memory: x for a KC tile,
// p otherwise) LEN floats long; thread tid copies the chunk at `pos` of lines line0, line0 + STEP,
// ... (STEP = NT / (LEN / 4)), so everything but the k offset is worked out once, in the
// constructor, and a slice costs one address computation per chunk. A chunk that crosses the
// edge of its operand copies only its valid bytes (the rest zero-filled), a chunk outside copies
// none, so any m, n and k work. Needs 16-byte aligned sources: the base pointer, the row stride
// and the batch stride multiples of 4 floats (async_applies). Version 10 first worked every chunk's
// coordinates out afresh per slice; the compiler kept them live across the loop, spilled 44 bytes
// per thread, and ran slower (history: NOTES.md). With this loader nothing spills: 10 takes
// 1.03 ms [fig cuda.matmul.10.4096.ms] at 4096^3 (H100 80GB HBM3, kernel-bench,
// docs/runs/2026-11-26-h100).
template <int BK, int BX, int NT, bool KC>
struct AsyncTileLoader {
  using T = Tile<BK, BX, KC>;
  static constexpr int LEN = KC ? BK : BX, LINES = KC ? BX : BK;
  static constexpr int PER_LINE = LEN / 4, STEP = NT / PER_LINE, CHUNKS = LINES / STEP;
  static_assert(NT % PER_LINE == 0 && LINES % STEP == 0, "tiles split evenly into chunks");

  const float* data;   // the operand's first element
  int64_t ld;          // its row stride
  int64_t lines, len;  // its extents across and along memory (x and k for KC, k and x otherwise)
  int64_t line0, pos;  // this thread's first line and its position along the lines, in the operand
  int dst0;            // where that chunk goes in the tile

  __device__ AsyncTileLoader(const Panel<float>& P, int64_t x0, int tid)
      : data(P.data), ld(P.ld), lines(KC ? P.x : P.k), len(KC ? P.k : P.x) {
    const int line = tid / PER_LINE, at = tid % PER_LINE * 4;
    line0 = (KC ? x0 : 0) + line;
    pos = (KC ? 0 : x0) + at;
    dst0 = line * T::LD + at;  // lines are the tile's rows in either layout
  }

  // The tile of k values [p0, p0 + BK) into S.
  __device__ void load(int64_t p0, float* S) const {
    const int64_t l0 = KC ? line0 : line0 + p0, p = KC ? pos + p0 : pos;
    // Bytes of the chunk inside the operand along memory: 16, fewer at the edge, 0 past it.
    const int bytes = p < len ? 4 * static_cast<int>(len - p < 4 ? len - p : 4) : 0;
#pragma unroll
    for (int s = 0; s < CHUNKS; ++s) {
      const int64_t l = l0 + s * STEP;
      const bool inside = l < lines && bytes > 0;
      // A valid address even when nothing is read.
      const float* src = inside ? data + l * ld + p : data;
      cp_async16(S + dst0 + s * STEP * T::LD, src, inside ? bytes : 0);
    }
  }
};

// The cp.async pipeline of versions 10-12: slices of BK values of k go through STAGES shared-
// memory stages, STAGES - 1 of them in flight while the block computes on the oldest; one
// __syncthreads per slice. compute(as, bs) multiplies the slice's tiles of A and B. `smem` holds
// STAGES * (A tile + B tile) floats.
template <int STAGES, class LA, class LB, class Compute>
__device__ void cp_async_pipeline(const LA& load_a, const LB& load_b, int64_t k, float* smem, Compute&& compute) {
  static_assert(LA::T::BK == LB::T::BK && STAGES >= 2, "one slice length, at least double buffering");
  constexpr int BK = LA::T::BK, STAGE = LA::T::SIZE + LB::T::SIZE;
  const int64_t slices = (k + BK - 1) / BK;
  // Slice s into stage s % STAGES; always one commit group per call (empty past the end), so that
  // wait_group's count of pending groups means the same in every iteration.
  auto load = [&](int64_t s) {
    if (s < slices) {
      float* st = smem + static_cast<int>(s % STAGES) * STAGE;
      load_a.load(s * BK, st);
      load_b.load(s * BK, st + LA::T::SIZE);
    }
    cp_async_commit();
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) load(s);
  for (int64_t s = 0; s < slices; ++s) {
    // Slice s has landed (at most STAGES - 2 later groups pending) for this thread; the barrier
    // makes it so for every thread, and also says every warp is done with slice s - 1, whose
    // stage the next line refills.
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    load(s + STAGES - 1);
    const float* as = smem + static_cast<int>(s % STAGES) * STAGE;
    compute(as, as + LA::T::SIZE);
  }
  cp_async_wait<0>();  // nothing useful is pending (only empty groups); leave none behind
}

// The A fragment (raw f32 bits, layout above) of the 16 x 8 mma tile at rows row .. row + 15 and
// k kk .. kk + 7 of the shared tile `as`. From a KC tile with LDMATRIX: one ldmatrix.x4, whose
// matrices are rows 0-7 k 0-3 (a0), rows 8-15 k 0-3 (a1), rows 0-7 k 4-7 (a2), rows 8-15 k 4-7
// (a3); otherwise four conflict-free 32-bit loads (Tile's padding).
template <class TA, bool LDMATRIX>
__device__ void load_a_fragment(uint32_t (&a)[4], const float* as, int kk, int row, int lane) {
  if constexpr (TA::KC && LDMATRIX) {
    ldmatrix_x4(a, &as[TA::at(kk + lane / 16 * 4, row + lane / 8 % 2 * 8 + lane % 8)]);
  } else {
    const int g = lane / 4, t = lane % 4;
    a[0] = __float_as_uint(as[TA::at(kk + t, row + g)]);
    a[1] = __float_as_uint(as[TA::at(kk + t, row + g + 8)]);
    a[2] = __float_as_uint(as[TA::at(kk + t + 4, row + g)]);
    a[3] = __float_as_uint(as[TA::at(kk + t + 4, row + g + 8)]);
  }
}

// The B fragments (raw f32 bits) of the two 8 x 8 mma tiles at columns col .. col + 15 and k
// kk .. kk + 7 of `bs`. From a KC tile with LDMATRIX: one ldmatrix.x4 (matrices: columns 0-7 k 0-3
// and k 4-7, then the same for columns 8-15); otherwise 32-bit loads.
template <class TB, bool LDMATRIX>
__device__ void load_b_fragments(uint32_t (&b0)[2], uint32_t (&b1)[2], const float* bs, int kk, int col, int lane) {
  if constexpr (TB::KC && LDMATRIX) {
    uint32_t r[4];
    ldmatrix_x4(r, &bs[TB::at(kk + lane / 8 % 2 * 4, col + lane / 16 * 8 + lane % 8)]);
    b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
  } else {
    const int g = lane / 4, t = lane % 4;
    b0[0] = __float_as_uint(bs[TB::at(kk + t, col + g)]);
    b0[1] = __float_as_uint(bs[TB::at(kk + t + 4, col + g)]);
    b1[0] = __float_as_uint(bs[TB::at(kk + t, col + 8 + g)]);
    b1[1] = __float_as_uint(bs[TB::at(kk + t + 4, col + 8 + g)]);
  }
}

// One slice of k (TA::BK 32-bit elements) of a warp's MI x NI mma tiles added into `acc`. The
// warp's tile starts at row wm0 of `as` and column wn0 of `bs`. kBf16Pairs false: the elements
// are f32, multiplied as raw bits (the tensor cores truncate them to TF32: version 11 and the
// conv2d TF32 kernels). kBf16Pairs true: each element is two bf16 neighbouring in k, the lower k
// in the low half (the conv2d bf16 kernels pair their operands so). Read as 32-bit words, the
// fragments of m16n8k16 over bf16 are exactly those of m16n8k8 over the pairs (a0: row g, pair t,
// which is k 2t and 2t + 1; a2: pair t + 4, k 2t + 8 and 2t + 9; b0 and b1 likewise), so the same
// loads feed either instruction, and a slice of BK pairs is 2 * BK values of k.
template <class TA, class TB, bool kBf16Pairs = false, int MI, int NI>
__device__ void mma_slice(float (&acc)[MI][NI][4], const float* as, const float* bs, int wm0, int wn0, int lane) {
  static_assert(TA::BK == TB::BK && NI % 2 == 0, "one slice length, B fragments in pairs of tiles");
#pragma unroll
  for (int kk = 0; kk < TA::BK; kk += 8) {
    uint32_t b[NI][2];
#pragma unroll
    for (int ni = 0; ni < NI; ni += 2) load_b_fragments<TB, true>(b[ni], b[ni + 1], bs, kk, wn0 + ni * 8, lane);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      uint32_t a[4];
      load_a_fragment<TA, true>(a, as, kk, wm0 + mi * 16, lane);
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        if constexpr (kBf16Pairs) mma_bf16_16x8x16(acc[mi][ni], a, b[ni]);
        else mma_16x8x8(acc[mi][ni], a, b[ni]);
      }
    }
  }
}

// One slice of k (TA::BK values) of a warp's MI x NI mma tiles in 3xTF32: every fragment split
// into head and tail (split_tf32), each product as lo_a * hi_b + hi_a * lo_b + hi_a * hi_b, the small
// terms first. `part` receives the slice's sum from zero: the tensor cores round toward zero as they
// add, so callers keep their sums over many slices in ordinary f32 adds (version 12 explains).
// The warp's tile starts at row wm0 of `as` and column wn0 of `bs`.
template <class TA, class TB, int MI, int NI>
__device__ void mma_3xtf32_slice(float (&part)[MI][NI][4], const float* as, const float* bs, int wm0, int wn0,
                                 int lane) {
  static_assert(TA::BK == TB::BK && NI % 2 == 0, "one slice length, B fragments in pairs of tiles");
#pragma unroll
  for (int kk = 0; kk < TA::BK; kk += 8) {
    uint32_t b_hi[NI][2], b_lo[NI][2];
#pragma unroll
    for (int ni = 0; ni < NI; ni += 2) {
      uint32_t b[2][2];
      load_b_fragments<TB, true>(b[0], b[1], bs, kk, wn0 + ni * 8, lane);
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int r = 0; r < 2; ++r) split_tf32(b[h][r], b_hi[ni + h][r], b_lo[ni + h][r]);
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      uint32_t a[4], a_hi[4], a_lo[4];
      load_a_fragment<TA, true>(a, as, kk, wm0 + mi * 16, lane);
#pragma unroll
      for (int r = 0; r < 4; ++r) split_tf32(a[r], a_hi[r], a_lo[r]);
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        if (kk == 0) mma_16x8x8_first(part[mi][ni], a_lo, b_hi[ni]);
        else mma_16x8x8(part[mi][ni], a_lo, b_hi[ni]);
        mma_16x8x8(part[mi][ni], a_hi, b_lo[ni]);
        mma_16x8x8(part[mi][ni], a_hi, b_hi[ni]);
      }
    }
  }
}

// acc += one slice of k in 3xTF32: the slice's sum formed on the tensor cores from zero
// (mma_3xtf32_slice), then added to the running sum in f32 (versions 12 and the conv2d kernels).
// acc += part over a warp's MI x NI mma tiles, in f32.
template <int MI, int NI>
__device__ inline void add_tiles(float (&acc)[MI][NI][4], const float (&part)[MI][NI][4]) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mi][ni][r] += part[mi][ni][r];
}

template <class TA, class TB, int MI, int NI>
__device__ void mma_3xtf32_add_slice(float (&acc)[MI][NI][4], const float* as, const float* bs, int wm0, int wn0,
                                     int lane) {
  float part[MI][NI][4];
  mma_3xtf32_slice<TA, TB>(part, as, bs, wm0, wn0, lane);
  add_tiles(acc, part);
}

// Writes a warp's MI x NI mma tiles of accumulators (d layout above) to C at (i0, j0) + the warp's
// offset (wm0, wn0), two neighbouring columns per store, skipping what falls outside m x n.
// `finish(v, i, j)` may replace each value (version 12 recomputes NaN), then the epilogue applies.
struct AsComputed {
  __device__ float operator()(float v, int64_t, int64_t) const { return v; }
};
// The 3xTF32 versions' finish (12, 17): C(i, j) summed again in plain f32 over k in [k0, k1) where
// it came out NaN. An infinite input splits into inf and inf - inf = NaN, so the split products
// give NaN where f32 gives inf; the f32 sum gives inf, or NaN where f32 does too. Finite data
// never takes this path. The sum is out of line: a store of unrolled tiles checks every element,
// and the loop inlined at each check made 17's kernel 19,808 instructions (4,560 now), whose
// blocks, each walking a short chunk of k once, spent most of their time fetching instructions
// (Nsight Compute, kernels/cuda/NOTES.md). Out of line, against the inlined loop in one call
// (H200, docs/runs/2026-11-29-h200-nan-out-of-line): 17 at the CNN's fc1, batch 64 (64x128x9216
// B^T), 15.0 [fig cuda.matmul.nan-out-of-line.fc1-b64.17.old.us] -> 13.5 µs [fig cuda.matmul.nan-out-of-line.fc1-b64.17.new.us],
// its input gradient 9.8 [fig cuda.matmul.nan-out-of-line.dx-b64.17.old.us] -> 9.3 [fig cuda.matmul.nan-out-of-line.dx-b64.17.new.us],
// 12 at its weight gradient (9216x128x64 A^T) 20.4 [fig cuda.matmul.nan-out-of-line.dw-b64.12.old.us]
// -> 10.5 [fig cuda.matmul.nan-out-of-line.dw-b64.12.new.us]; the f32 CNN's step at batch 64
// 281.4 [fig cuda.matmul.nan-out-of-line.step.b64.old.us] -> 270.6 µs [fig cuda.matmul.nan-out-of-line.step.b64.new.us]
// of kernel time, epoch 2 0.237 [fig cuda.matmul.nan-out-of-line.cnn.b64.old.epoch2] -> 0.221 s [fig cuda.matmul.nan-out-of-line.cnn.b64.new.epoch2]
// (batch 512: 0.115 [fig cuda.matmul.nan-out-of-line.cnn.b512.old.epoch2] -> 0.115 s [fig cuda.matmul.nan-out-of-line.cnn.b512.new.epoch2]).
__device__ __noinline__ inline float dot_f32(const Panel<float>& a, const Panel<float>& b, int64_t k0, int64_t k1, int64_t i,
                                             int64_t j) {
  float sum = 0;
  for (int64_t p = k0; p < k1; ++p) sum = fmaf(a.get(p, i), b.get(p, j), sum);
  return sum;
}
struct RecomputeNan {
  Panel<float> a, b;
  int64_t k0, k1;
  __device__ float operator()(float v, int64_t i, int64_t j) const { return v == v ? v : dot_f32(a, b, k0, k1, i, j); }
};
// Two neighbouring elements of C in one store (j even, and Args::vec_c: the row's pairs aligned).
__device__ inline void store_pair(float* p, float v0, float v1) { *reinterpret_cast<float2*>(p) = make_float2(v0, v1); }
__device__ inline void store_pair(bf16* p, float v0, float v1) {
  *reinterpret_cast<uint32_t*>(p) = bf16(v0).bits | uint32_t{bf16(v1).bits} << 16;
}

template <int MI, int NI, class T, class Finish = AsComputed>
__device__ void store_mma_tiles(const Args<T>& args, const float (&acc)[MI][NI][4], int64_t i0, int64_t j0,
                                int wm0, int wn0, int lane, Finish finish = {}) {
  const int g = lane / 4, t = lane % 4;
  T* C = args.c_entry();
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t i = i0 + wm0 + mi * 16 + g + half * 8;
      if (i >= args.m) continue;
      T* row = C + i * args.n;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int64_t j = j0 + wn0 + ni * 8 + 2 * t;
        const float v0 = finish(acc[mi][ni][half * 2], i, j), v1 = finish(acc[mi][ni][half * 2 + 1], i, j + 1);
        // the epilogue only on columns inside C: it reads the bias of the column; a bf16 C is
        // rounded once, after it
        if (args.vec_c && j + 1 < args.n) {
          store_pair(row + j, args.epilogue(v0, j), args.epilogue(v1, j + 1));
        } else {
          if (j < args.n) row[j] = cast<T>(args.epilogue(v0, j));
          if (j + 1 < args.n) row[j + 1] = cast<T>(args.epilogue(v1, j + 1));
        }
      }
    }
}

// The geometry of a cp.async tensor-core kernel (versions 10-12): BM x BN block tiles cut into
// WM x WN warp tiles (MI x NI mma tiles each), slices of BK values of k through STAGES stages of
// shared memory, and the operands' layouts (A_KC, B_KC: whether each runs along k in memory).
// An instance says where the calling thread's block and warp sit, and holds its tile loaders.
template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, bool A_KC, bool B_KC>
struct AsyncGemm {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_;
  static constexpr int THREADS = (BM / WM) * (BN / WN) * 32, MI = WM / 16, NI = WN / 8;
  static_assert(BK % 8 == 0 && NI % 2 == 0, "k-steps of 8, B fragments in pairs of tiles");
  using LA = AsyncTileLoader<BK, BM, THREADS, A_KC>;
  using LB = AsyncTileLoader<BK, BN, THREADS, B_KC>;
  using TA = typename LA::T;
  using TB = typename LB::T;
  static constexpr int SMEM_BYTES = STAGES * (TA::SIZE + TB::SIZE) * static_cast<int>(sizeof(float));

  int lane, wm0, wn0;  // the warp's tile inside the block tile
  int64_t i0, j0;      // the block tile's first row and column of C
  LA load_a;
  LB load_b;
  __device__ explicit AsyncGemm(const Args<float>& args)
      : lane(static_cast<int>(threadIdx.x) % 32),
        wm0(static_cast<int>(threadIdx.x) / 32 / (BN / WN) * WM),
        wn0(static_cast<int>(threadIdx.x) / 32 % (BN / WN) * WN),
        i0(blockIdx.y * int64_t{BM}),
        j0(blockIdx.x * int64_t{BN}),
        load_a(args.panel_a(), i0, static_cast<int>(threadIdx.x)),
        load_b(args.panel_b(), j0, static_cast<int>(threadIdx.x)) {}
};

// Runs a cp.async version over the batch: kernel_for(std::bool_constant<A_KC>, std::bool_constant<
// B_KC>) gives the kernel for the operands' layouts (A runs along k when not transposed, B when
// transposed), and
// G<A_KC, B_KC> (an AsyncGemm) its block size and dynamic shared memory. Over 48 KB of it needs
// an opt-in, per device, which allow_dynamic_smem (check.h) makes at every launch (cheap).
template <template <bool, bool> class G, class KernelFor>
void launch_async(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
                  cudaStream_t stream, const char* name, KernelFor kernel_for) {
  launch_batched(p, a, b, c, e, G<true, true>::BM, G<true, true>::BN, name, [&](dim3 grid, const Args<float>& args) {
    auto launch = [&]<bool A_KC, bool B_KC>() {
      auto* kernel = kernel_for(std::bool_constant<A_KC>{}, std::bool_constant<B_KC>{});
      constexpr int bytes = G<A_KC, B_KC>::SMEM_BYTES;
      allow_dynamic_smem(kernel, bytes);
      kernel<<<grid, G<A_KC, B_KC>::THREADS, bytes, stream>>>(args);
    };
    if (!args.trans_a && args.trans_b) return launch.template operator()<true, true>();
    if (!args.trans_a) return launch.template operator()<true, false>();
    if (args.trans_b) return launch.template operator()<false, true>();
    return launch.template operator()<false, false>();
  });
}

}  // namespace kiln::cuda::matmul
