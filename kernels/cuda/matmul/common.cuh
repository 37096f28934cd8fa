// What every matmul version shares: how it sees its operands, how it loads tiles of them into
// shared memory, and how it is launched over the batch. Included by the version files only.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kiln/core/backend.h"
#include "kiln/core/error.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"

namespace kiln::cuda::matmul {

// Both operands as "panels": K x X matrices indexed (p, x), p the reduction index. A's panel is
// op(A)^T (k x m), B's is op(B) (k x n), so C[i][j] = sum_p A(p, i) * B(p, j). Seen this way, the
// four transpose combinations reduce to one question per operand: does memory run along x or
// along p? Every loader asks it to keep neighbouring threads on neighbouring addresses.
template <class T>
struct Panel {
  const T* data;
  int64_t ld;           // row stride of the matrix in memory
  int64_t k, x;         // extents: k along p, x along x
  bool x_contiguous;    // element (p, x) at data[p*ld + x]; else at data[x*ld + p]
  __device__ T get(int64_t p, int64_t i) const { return x_contiguous ? data[p * ld + i] : data[i * ld + p]; }
  // Zero outside the matrix: edge tiles load zeros, which add nothing to the sums.
  __device__ T at(int64_t p, int64_t i) const { return p < k && i < x ? get(p, i) : T{}; }
};

// What each kernel receives, for the batch entries of one launch (blockIdx.z picks the entry).
template <class T>
struct Args {
  const T* a;
  const T* b;
  T* c;
  int64_t m, n, k, lda, ldb, batch_stride_a, batch_stride_b;
  bool trans_a, trans_b;
  bool vec_a, vec_b, vec_c;  // 16-byte loads/stores are legal: aligned16 (base, ld and batch stride)
  DeviceEpilogue<T> epilogue;  // applied to every element of C as it is stored: epilogue(v, j)
  // op(A) is A^T when trans_a; A's panel op(A)^T then runs along x (= i) in memory.
  __device__ Panel<T> panel_a() const { return {a + int64_t{blockIdx.z} * batch_stride_a, lda, k, m, trans_a}; }
  // op(B) runs along x (= j) in memory unless trans_b.
  __device__ Panel<T> panel_b() const { return {b + int64_t{blockIdx.z} * batch_stride_b, ldb, k, n, !trans_b}; }
  __device__ T* c_entry() const { return c + int64_t{blockIdx.z} * m * n; }
};

// Whether rows of T at p (row stride ld, batch stride in elements) start on 16 bytes: 16-byte loads
// and stores of 4 floats or 8 bf16 are legal.
template <class T>
bool aligned16(const T* p, int64_t ld, int64_t batch_stride) {
  constexpr int64_t v = 16 / static_cast<int64_t>(sizeof(T));
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld % v == 0 && batch_stride % v == 0;
}

// Launches `launch(grid, args)` with one block per tile_m x tile_n tile of C (grid.x over columns,
// grid.y over rows) and one grid z-layer per batch entry, in chunks of 65535 entries (gridDim.z's
// limit). Empty products launch nothing; k == 0 runs the kernels, which then write zeros.
template <class T, class Launch>
void launch_batched(const MatmulParams& p, const T* a, const T* b, T* c, const DeviceEpilogue<T>& e, int64_t tile_m,
                    int64_t tile_n, const char* name, Launch&& launch) {
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  const int64_t grid_x = (p.n + tile_n - 1) / tile_n, grid_y = (p.m + tile_m - 1) / tile_m;
  KILN_CHECK(grid_y <= 65535 && grid_x <= 2147483647, ShapeError, "cuda ", name, ": ", p.m, " x ", p.n,
             " is too large a product for one launch");
  constexpr int64_t kMaxZ = 65535;
  for (int64_t b0 = 0; b0 < p.batch; b0 += kMaxZ) {
    Args<T> args{a + b0 * p.batch_stride_a, b + b0 * p.batch_stride_b, c + b0 * p.m * p.n,
                 p.m, p.n, p.k, p.lda, p.ldb, p.batch_stride_a, p.batch_stride_b, p.trans_a, p.trans_b,
                 false, false, false, e};
    args.vec_a = aligned16(args.a, p.lda, p.batch_stride_a);
    args.vec_b = aligned16(args.b, p.ldb, p.batch_stride_b);
    args.vec_c = aligned16(args.c, p.n, p.m * p.n);
    dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y),
              static_cast<unsigned>(std::min(kMaxZ, p.batch - b0)));
    launch(grid, args);
    KILN_CUDA_LAUNCH_CHECK(name);
  }
}

// ---- scalar tile loads (versions 03-05) ----
// Copies the BK x BX tile of P at (p0, x0) into S[p * LD + x], one element per thread per step.
// Consecutive threads take consecutive elements along the direction memory runs in, so every
// warp reads runs of neighbouring addresses (coalesced) whatever the transposes.
template <int BK, int BX, int LD, int NT, class T>
__device__ void load_tile(const Panel<T>& P, int64_t p0, int64_t x0, T* S, int tid) {
  for (int e = tid; e < BK * BX; e += NT) {
    int p, x;
    if (P.x_contiguous) p = e / BX, x = e % BX;
    else x = e / BK, p = e % BK;
    S[p * LD + x] = P.at(p0 + p, x0 + x);
  }
}

// ---- float4 tile loads (versions 06-08) ----
// The tile is cut into chunks of 4 elements along memory's direction. Chunk c starts at (p, x).
// Along p (A not transposed, B transposed), neighbouring threads take the chunks of one row, so a
// row's BK floats come in one or two full 32-byte sectors.
template <int BK, int BX>
__device__ void chunk_coords(bool x_contiguous, int c, int& p, int& x) {
  static_assert(BK % 4 == 0 && BX % 4 == 0, "tiles must be whole chunks");
  if (x_contiguous) p = c / (BX / 4), x = c % (BX / 4) * 4;
  else x = c / (BK / 4), p = c % (BK / 4) * 4;
}

// The 4 values of a chunk: one 16-byte load when it lies wholly inside the matrix and alignment
// allows, else 4 guarded loads (zero outside), so edges and odd strides still work.
__device__ inline float4 fetch4(const Panel<float>& P, bool vec, int64_t p, int64_t x) {
  if (P.x_contiguous) {
    if (vec && p < P.k && x + 3 < P.x) return *reinterpret_cast<const float4*>(P.data + p * P.ld + x);
    return {P.at(p, x), P.at(p, x + 1), P.at(p, x + 2), P.at(p, x + 3)};
  }
  if (vec && x < P.x && p + 3 < P.k) return *reinterpret_cast<const float4*>(P.data + x * P.ld + p);
  return {P.at(p, x), P.at(p + 1, x), P.at(p + 2, x), P.at(p + 3, x)};
}

// Stores a chunk into the k-major tile S[p * LD + x]: one 16-byte store when it runs along x,
// else 4 stores down a column (the transpose that lets the inner loop read rows of S).
template <int LD, class V, class E>
__device__ void put4(E* S, bool x_contiguous, int p, int x, V v) {
  if (x_contiguous) {
    *reinterpret_cast<V*>(S + p * LD + x) = v;
  } else {
    S[p * LD + x] = v.x;
    S[(p + 1) * LD + x] = v.y;
    S[(p + 2) * LD + x] = v.z;
    S[(p + 3) * LD + x] = v.w;
  }
}

// A float4 into 4 registers of a thread's fragment array (not a vector store into the array: a
// float array has no 16-byte alignment should it ever live in local memory).
__device__ inline void unpack4(float* dst, float4 v) {
  dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
}

// Writes e(v[0..3]) to row `row` of C at columns j..j+3, with one 16-byte store when legal.
__device__ inline void store4(float* row, bool vec, int64_t j, int64_t n, const float* v,
                              const DeviceEpilogue<float>& e) {
  if (vec && j + 3 < n) {
    *reinterpret_cast<float4*>(row + j) = make_float4(e(v[0], j), e(v[1], j + 1), e(v[2], j + 2), e(v[3], j + 3));
    return;
  }
  for (int c = 0; c < 4; ++c)
    if (j + c < n) row[j + c] = e(v[c], j + c);
}

}  // namespace kiln::cuda::matmul
