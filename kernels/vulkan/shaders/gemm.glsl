// The tiled GEMM that matmul.comp and conv2d.comp share: per batch (or group) g,
//   C[g][row, col] = sum over k of A[g][row, k] B[g][k, col]
// for rows < gemm_m(), columns < gemm_n(), k < gemm_k(), where the including shader says what A, B
// and C are by defining, before including this file:
//   int gemm_batches(), gemm_m(), gemm_n(), gemm_k(), gemm_splits(), gemm_k_chunk()
//   float load_a(int g, int row, int k)      called only inside the ranges
//   float load_b(int g, int k, int col)      likewise
//   void store_c(int g, int split, int row, int col, float v)
// and, where it defines GEMM_STEP, void gemm_step(int g, int k0, int col): called before each
// step's loads with the step's first k and, when B loads column-fastest, the one column of B this
// invocation loads in every step, so that what the step's loads share is computed once per step
// (conv2d.comp: the filter tap) and not once per load.
// (matmul.comp reads A and B as matrices; conv2d.comp makes them up from the image and the
// filters on the fly: an implicit GEMM). The shape of the work is set by specialisation constants:
//   1 TILE_M x 2 TILE_N   the tile of C a workgroup of 256 invocations computes (64 x 64 by default;
//                         32 x 128 where there are only 32 rows, 32 x 32 where the output is small)
//   3 THREAD              each invocation's THREAD x THREAD block of it (TILE_M TILE_N = 256 THREAD^2)
//   4 A_K_FASTEST         1 where A's consecutive k lie next to each other in memory (a row-major A,
//   5 B_K_FASTEST         a transposed B): consecutive invocations then load consecutive k, so the
//                         loads coalesce; 0: consecutive rows (columns of B) instead
//
// Version 3 (this; its figures are conv2d.comp's and matmul.comp's, from `vulkan-bench`; versions 1
// and 2: kernels/vulkan/NOTES.md): 16 k per step staged in shared memory, the next step's loads
// issued before the multiply-adds of this one (held in registers, stored to shared memory after
// them), so their latency hides behind arithmetic; an invocation's rows and columns interleaved
// (row tr + r TILE_M / THREAD), so the 32 lanes of a subgroup read 32 adjacent words of shared
// memory (no bank conflicts) and store adjacent columns; the tile shape chosen for the problem;
// rows of the shared tiles padded by 2 words, so the k-fastest stores hit distinct banks; and the
// gemm_step hook, where conv2d.comp works out once per step what the step's loads share.
// Tiles beyond the workgroup count loop (grid-stride). With gemm_splits() > 1, the k range is cut
// into chunks of gemm_k_chunk() (whole steps), one workgroup per (tile, chunk), and store_c gets
// the chunk's index (the caller sums the partial tiles in order: matmul.comp's REDUCE).

layout(constant_id = 1) const int TILE_M = 64;
layout(constant_id = 2) const int TILE_N = 64;
layout(constant_id = 3) const int THREAD = 4;
layout(constant_id = 4) const int A_K_FASTEST = 0;
layout(constant_id = 5) const int B_K_FASTEST = 0;

const int GEMM_THREADS = 256;  // the workgroup size the host always sets (constant 0)
const int BK = 16;             // k per step
const int TR = TILE_M / THREAD, TC = TILE_N / THREAD;  // the invocations' grid over the tile: TR x TC = 256
const int A_LOADS = BK * TILE_M / GEMM_THREADS, B_LOADS = BK * TILE_N / GEMM_THREADS;  // per invocation per step

shared float tile_a[BK][TILE_M + 2];  // A[r0 + i][k0 + kk] at [kk][i]
shared float tile_b[BK][TILE_N + 2];  // B[k0 + kk][c0 + j] at [kk][j]

// Element e (0 .. BK TILE - 1) of a step's slice: which k and which row (column) it is.
ivec2 slice_at(int e, int tile, int k_fastest) {
  return k_fastest != 0 ? ivec2(e % BK, e / BK) : ivec2(e / tile, e % tile);
}

void main() {
  const int t = int(gl_LocalInvocationID.x), tr = t / TC, tc = t % TC;
  const int m = gemm_m(), n = gemm_n(), k_total = gemm_k(), splits = gemm_splits();
  const int tiles_m = (m + TILE_M - 1) / TILE_M, tiles_n = (n + TILE_N - 1) / TILE_N;
  const int tiles = gemm_batches() * tiles_m * tiles_n * splits;
  for (int tile_s = int(gl_WorkGroupID.x); tile_s < tiles; tile_s += int(gl_NumWorkGroups.x)) {
    const int split = tile_s % splits, tile = tile_s / splits;
    const int k_begin = splits > 1 ? split * gemm_k_chunk() : 0;
    const int k_end = splits > 1 ? min(k_total, k_begin + gemm_k_chunk()) : k_total;
    const int g = tile / (tiles_m * tiles_n), rest = tile % (tiles_m * tiles_n);
    const int r0 = (rest / tiles_n) * TILE_M, c0 = (rest % tiles_n) * TILE_N;

    float acc[THREAD][THREAD];
    for (int r = 0; r < THREAD; ++r)
      for (int q = 0; q < THREAD; ++q) acc[r][q] = 0.0;
    float next_a[A_LOADS], next_b[B_LOADS];  // the coming step's slices, this invocation's part
#if defined(GEMM_STEP)
    gemm_step(g, k_begin, c0 + t % TILE_N);
#endif
    for (int s = 0; s < A_LOADS; ++s) {
      const ivec2 at = slice_at(t + s * GEMM_THREADS, TILE_M, A_K_FASTEST);
      const int k = k_begin + at.x, row = r0 + at.y;
      next_a[s] = k < k_end && row < m ? load_a(g, row, k) : 0.0;
    }
    for (int s = 0; s < B_LOADS; ++s) {
      const ivec2 at = slice_at(t + s * GEMM_THREADS, TILE_N, B_K_FASTEST);
      const int k = k_begin + at.x, col = c0 + at.y;
      next_b[s] = k < k_end && col < n ? load_b(g, k, col) : 0.0;
    }
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
      barrier();  // the previous step's reads of the shared tiles are done
      for (int s = 0; s < A_LOADS; ++s) {
        const ivec2 at = slice_at(t + s * GEMM_THREADS, TILE_M, A_K_FASTEST);
        tile_a[at.x][at.y] = next_a[s];
      }
      for (int s = 0; s < B_LOADS; ++s) {
        const ivec2 at = slice_at(t + s * GEMM_THREADS, TILE_N, B_K_FASTEST);
        tile_b[at.x][at.y] = next_b[s];
      }
      barrier();
      if (k0 + BK < k_end) {  // the next step's loads, in flight during this step's arithmetic
#if defined(GEMM_STEP)
        gemm_step(g, k0 + BK, c0 + t % TILE_N);
#endif
        for (int s = 0; s < A_LOADS; ++s) {
          const ivec2 at = slice_at(t + s * GEMM_THREADS, TILE_M, A_K_FASTEST);
          const int k = k0 + BK + at.x, row = r0 + at.y;
          next_a[s] = k < k_end && row < m ? load_a(g, row, k) : 0.0;
        }
        for (int s = 0; s < B_LOADS; ++s) {
          const ivec2 at = slice_at(t + s * GEMM_THREADS, TILE_N, B_K_FASTEST);
          const int k = k0 + BK + at.x, col = c0 + at.y;
          next_b[s] = k < k_end && col < n ? load_b(g, k, col) : 0.0;
        }
      }
      for (int kk = 0; kk < BK; ++kk) {
        float ra[THREAD], rb[THREAD];
        for (int r = 0; r < THREAD; ++r) ra[r] = tile_a[kk][tr + r * TR];
        for (int q = 0; q < THREAD; ++q) rb[q] = tile_b[kk][tc + q * TC];
        for (int r = 0; r < THREAD; ++r)
          for (int q = 0; q < THREAD; ++q) acc[r][q] = fma(ra[r], rb[q], acc[r][q]);
      }
    }
    for (int r = 0; r < THREAD; ++r) {
      const int row = r0 + tr + r * TR;
      if (row >= m) continue;
      for (int q = 0; q < THREAD; ++q) {
        const int col = c0 + tc + q * TC;
        if (col < n) store_c(g, split, row, col, acc[r][q]);
      }
    }
  }
}
