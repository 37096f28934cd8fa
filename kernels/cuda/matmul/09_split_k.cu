// Version 09, split-K: for products with few output tiles and a long k, such as an MLP layer's
// 64 x 128 x 9216 (two 64 x 64 tiles: 2 blocks on a GPU of 132 SMs, each walking all of k).
// The k range is cut into S chunks of `chunk` values (a multiple of BK); block (x, y, s) computes
// the 64 x 64 tile (y, x) over chunk s only and writes it to partial s of a workspace [S, m, n].
// A second kernel then adds the S partials of every element in a fixed order, so the result is
// deterministic (no atomics) for a given S; S depends on the shape and the SM count only.
// The partial tile: 256 threads, each owning 4 x 4 results spaced 16 rows and 16 columns apart
// (for one p, a warp reads 2 addresses of As, broadcast, and 16 consecutive words of Bs); the next
// slice of A and B is fetched into registers while the current one is multiplied from shared
// memory. With S = 1 the partial tile is the result, and it goes straight into C.
// bf16 (mixed precision) runs the same kernels on bf16 operands: each element is widened as it
// is fetched, the partials stay f32, and each element of C is rounded once, after the epilogue.
// Any layout and alignment (every load is one element), so production bf16 also takes it for
// small products that 15 could not read in place.
#include <algorithm>

#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

constexpr int BM = 64, BN = 64, BK = 32, NT = 256;
constexpr int64_t kMinChunk = 64;   // no chunk shorter than this: below it the partial's store costs more
constexpr int64_t kMaxSplits = 256;

template <class T>
struct SplitArgs {
  const T* a;
  const T* b;
  float* partials;  // [S, m, n] when S > 1
  T* c;             // C, written here when S == 1
  int64_t m, n, k, lda, ldb, chunk;
  bool trans_a, trans_b;
  DeviceEpilogue<T> epilogue;  // applied when S == 1 (else by the reduce kernel)
};

// The staging of one BK x BX slice of P: each of the NT threads holds BK * BX / NT values in
// registers. Element e of the slice sits at (p, x) along memory's direction (as in load_tile), so
// neighbouring threads read neighbouring addresses.
template <int BX>
struct Stage {
  static constexpr int N = BK * BX / NT;
  static_assert(N * NT == BK * BX, "slices split evenly");
  float v[N];
  __device__ static void coords(bool x_contiguous, int e, int& p, int& x) {
    if (x_contiguous) p = e / BX, x = e % BX;
    else x = e / BK, p = e % BK;
  }
  template <class T>
  __device__ void fetch(const Panel<T>& P, int64_t p0, int64_t x0, int tid) {
#pragma unroll
    for (int q = 0; q < N; ++q) {
      int p, x;
      coords(P.x_contiguous, tid + q * NT, p, x);
      v[q] = static_cast<float>(P.at(p0 + p, x0 + x));
    }
  }
  // Into the k-major tile S[p * LD + x]. LD = BX + 1: a column store (memory along p) puts the 32
  // lanes' values of p in 32 different banks.
  template <int LD>
  __device__ void put(bool x_contiguous, float* S, int tid) const {
#pragma unroll
    for (int q = 0; q < N; ++q) {
      int p, x;
      coords(x_contiguous, tid + q * NT, p, x);
      S[p * LD + x] = v[q];
    }
  }
};

template <class T>
__global__ void __launch_bounds__(NT) split_k_partial_kernel(SplitArgs<T> args) {
  constexpr int LDA = BM + 1, LDB = BN + 1;
  __shared__ float As[BK * LDA];
  __shared__ float Bs[BK * LDB];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int64_t i0 = blockIdx.y * int64_t{BM}, j0 = blockIdx.x * int64_t{BN};
  const int64_t k0 = blockIdx.z * args.chunk, k1 = std::min(args.k, k0 + args.chunk);
  // The panels end at k1: Panel::at loads zeros past it, as past the matrix's edge.
  const Panel<T> A{args.a, args.lda, k1, args.m, args.trans_a};
  const Panel<T> B{args.b, args.ldb, k1, args.n, !args.trans_b};

  Stage<BM> a_next;
  Stage<BN> b_next;
  float acc[4][4] = {};
  if (k0 < k1) {
    a_next.fetch(A, k0, i0, tid);
    b_next.fetch(B, k0, j0, tid);
  }
  for (int64_t p0 = k0; p0 < k1; p0 += BK) {
    a_next.put<LDA>(A.x_contiguous, As, tid);
    b_next.put<LDB>(B.x_contiguous, Bs, tid);
    __syncthreads();
    if (p0 + BK < k1) {  // in flight while the block multiplies this slice
      a_next.fetch(A, p0 + BK, i0, tid);
      b_next.fetch(B, p0 + BK, j0, tid);
    }
#pragma unroll
    for (int p = 0; p < BK; ++p) {
      float ar[4], br[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) ar[r] = As[p * LDA + ty + 16 * r];
#pragma unroll
      for (int c = 0; c < 4; ++c) br[c] = Bs[p * LDB + tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[r][c] += ar[r] * br[c];
    }
    __syncthreads();  // before the next slice overwrites the tiles
  }

  float* out = args.partials + int64_t{blockIdx.z} * args.m * args.n;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t i = i0 + ty + 16 * r;
    if (i >= args.m) continue;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int64_t j = j0 + tx + 16 * c;
      if (j >= args.n) continue;
      // one chunk writes C itself, through the epilogue; S chunks write their partials as they are
      if (gridDim.z == 1) args.c[i * args.n + j] = cast<T>(args.epilogue(acc[r][c], j));
      else out[i * args.n + j] = acc[r][c];
    }
  }
}

// C[e] = sum over s of partial[s][e], e over the m * n elements. A block of 32 x 8 threads owns
// 32 consecutive elements; thread row g adds partials g, g + 8, g + 16, ... in turn, then thread
// row 0 adds the 8 row sums in order, and stores the total through the epilogue (column e % n).
// The order depends on S only: the same bits on every run.
// Eight rows of loads in flight instead of one: S can be ~100, and a lone thread walking them one
// after another would wait ~100 memory latencies.
template <class T>
__global__ void __launch_bounds__(256) split_k_reduce_kernel(const float* partials, T* c, int64_t mn, int64_t n,
                                                              int64_t splits, DeviceEpilogue<T> epilogue) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  __shared__ float rows[8][32];
  const int64_t e = blockIdx.x * int64_t{32} + threadIdx.x;
  float sum = 0;
  if (e < mn) {
#pragma unroll 4
    for (int64_t s = threadIdx.y; s < splits; s += 8) sum += partials[s * mn + e];
  }
  rows[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && e < mn) {
    float total = rows[0][threadIdx.x];
#pragma unroll
    for (int g = 1; g < 8; ++g) total += rows[g][threadIdx.x];
    c[e] = cast<T>(epilogue(total, e % n));
  }
}

// The reduce kernel over C's m x n elements, 32 a block.
template <class T>
void reduce(const float* partials, T* c, int64_t m, int64_t n, int64_t splits, const DeviceEpilogue<T>& e,
            cudaStream_t stream) {
  const int64_t mn = m * n;
  launch_dependent(split_k_reduce_kernel<T>, static_cast<unsigned>((mn + 31) / 32), dim3(32, 8), 0, stream, partials, c,
                   mn, n, splits, e);
  KILN_CUDA_LAUNCH_CHECK("matmul 09_split_k reduce");
}

// The chunk length for (about) `splits` chunks: a whole number of slices, at least one.
int64_t chunk_for(int64_t k, int64_t splits) {
  splits = std::clamp<int64_t>(splits, 1, kMaxSplits);
  const int64_t chunk = (k + splits - 1) / splits;
  return std::max<int64_t>((chunk + BK - 1) / BK * BK, BK);
}

}  // namespace

int64_t split_k_splits(const MatmulParams& p, int sms) {
  // Enough blocks for two per SM, but no chunk shorter than kMinChunk.
  const int64_t tiles = ((p.m + BM - 1) / BM) * ((p.n + BN - 1) / BN);
  const int64_t want = (2 * int64_t{sms} + tiles - 1) / std::max<int64_t>(tiles, 1);
  const int64_t splits = std::min(want, p.k / kMinChunk);
  const int64_t chunk = chunk_for(p.k, splits);
  return std::max<int64_t>((p.k + chunk - 1) / chunk, 1);
}

namespace {
template <class T>
void run_split_k(const MatmulParams& p, const T* a, const T* b, T* c, const DeviceEpilogue<T>& e, int64_t splits,
                 float* workspace, cudaStream_t stream) {
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  const int64_t chunk = chunk_for(p.k, splits);
  splits = std::max<int64_t>((p.k + chunk - 1) / chunk, 1);  // <= the splits asked for (or 1)
  const int64_t grid_x = (p.n + BN - 1) / BN, grid_y = (p.m + BM - 1) / BM, mn = p.m * p.n;
  KILN_CHECK(grid_y <= 65535 && grid_x <= 2147483647 && (mn + 31) / 32 <= 2147483647, ShapeError,
             "cuda matmul 09_split_k: ", p.m, " x ", p.n, " is too large a product for one launch");
  KILN_CHECK(splits == 1 || workspace != nullptr, Error, "cuda matmul 09_split_k: no workspace for ", splits,
             " splits");
  // One batch entry at a time: split-K is for products too small to fill the GPU, and the
  // workspace [S, m, n] is reused by each entry in stream order.
  for (int64_t z = 0; z < p.batch; ++z) {
    T* ce = c + z * mn;
    const SplitArgs<T> args{a + z * p.batch_stride_a, b + z * p.batch_stride_b, workspace, ce, p.m, p.n, p.k,
                            p.lda, p.ldb, chunk, p.trans_a, p.trans_b, e};
    dim3 grid(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y), static_cast<unsigned>(splits));
    split_k_partial_kernel<T><<<grid, NT, 0, stream>>>(args);
    KILN_CUDA_LAUNCH_CHECK("matmul 09_split_k partial");
    if (splits == 1) continue;
    reduce(workspace, ce, p.m, p.n, splits, e, stream);
  }
}
}  // namespace

void split_k_reduce(const float* partials, bf16* c, int64_t m, int64_t n, int64_t splits,
                    const DeviceEpilogue<bf16>& e, cudaStream_t stream) {
  reduce(partials, c, m, n, splits, e, stream);
}
void split_k_reduce(const float* partials, float* c, int64_t m, int64_t n, int64_t splits,
                    const DeviceEpilogue<float>& e, cudaStream_t stream) {
  reduce(partials, c, m, n, splits, e, stream);
}

void split_k_run(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
                 int64_t splits, float* workspace, cudaStream_t stream) {
  run_split_k(p, a, b, c, e, splits, workspace, stream);
}
void split_k_run(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c, const DeviceEpilogue<bf16>& e,
                 int64_t splits, float* workspace, cudaStream_t stream) {
  run_split_k(p, a, b, c, e, splits, workspace, stream);
}

void split_k(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  const int64_t splits = split_k_splits(p, device_attribute(cudaDevAttrMultiProcessorCount, device));
  float* workspace = nullptr;
  if (splits > 1)
    KILN_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&workspace),
                                    static_cast<size_t>(splits * p.m * p.n) * sizeof(float), stream));
  split_k_run(p, a, b, c, e, splits, workspace, stream);
  if (workspace) KILN_CUDA_CHECK(cudaFreeAsync(workspace, stream));
}

}  // namespace kiln::cuda::matmul
