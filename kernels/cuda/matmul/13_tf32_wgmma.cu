// Version 13, TF32 on Hopper's warpgroup tensor cores: wgmma.mma_async fed by the tensor memory
// accelerator (TMA). C = op(A) op(B) as every version (matmul.cuh), inputs truncated to TF32 as in
// 10 and 11, f32 accumulation. Needs an sm_90 GPU (H100, H200) and this file built for sm_90a
// (kernels/cuda/CMakeLists.txt); elsewhere it runs 11. Version 15, bf16 (mixed precision), is the
// same kernel on bf16 tiles: see the paragraph before bf16_wgmma_run, at the end.
// Bench: `kernel-bench --only matmul` (rows 13_tf32_wgmma, _128x128, _128x64; 4096^3 is the plain
// product, whose B goes through registers, 4096^3 B^T the layout read from shared memory alone).
//
// Why 11 stops near 46% [fig cuda.matmul.11.4096.pct-cublas] of cuBLAS at 4096^3: mma.sync
// multiplies 16 x 8 x 8 tiles out of registers, so each warp first copies its operands from shared
// memory into registers. At 64 x 64 warp tiles that is 16 flops per byte read from shared memory,
// and shared memory, not the tensor cores, sets the pace. Hopper adds three things that lift that
// limit:
// - wgmma: the four warps of a warpgroup issue one 64 x N x 8 product together (N up to 256),
//   reading both operands straight from shared memory through "matrix descriptors" (address,
//   stride between groups of 8 rows, swizzle mode) into accumulators in registers, and
//   asynchronously: a warpgroup issues a slice's products, then waits for them only when it
//   must hand the slice's shared memory back. A 64 x 256 x 8 product reads 10 KB for 262K flops
//   (26 per byte), with no register staging.
// - TMA: one thread asks the copy engine for a whole box of a tensor (here 32 floats of k by 128
//   or 256 rows). It lands in shared memory already swizzled, zero-filled where it overhangs the
//   tensor (odd m, n and k cost nothing), and counts its bytes on an mbarrier when done.
// - Warp specialization: warpgroup 0 only issues copies (one thread), warpgroups 1 and 2 only
//   multiply, each owning 64 rows of the 128 x 256 block tile (128 accumulators per thread; the
//   producer hands them registers with setmaxnreg). They meet at two mbarriers per stage of a
//   3-deep ring: "full" (the copy engine's bytes have landed) and "empty" (all 8 consumer warps
//   are done reading the stage).
// The 128-byte swizzle: a stage holds each operand as rows of exactly 32 floats (128 bytes) of k,
// and the 16-byte chunk c of row r is stored at chunk c ^ (r % 8). Eight consecutive rows then
// cover all 32 banks whichever chunk column the tensor cores read, and this one layout is what
// both TMA (CU_TENSOR_MAP_SWIZZLE_128B) and wgmma (descriptor swizzle mode 1) speak: a k-step of
// 8 floats is the descriptor's start address moved by 32 bytes.
// Layouts: for TF32, wgmma reads its operands from shared memory only K-major (k contiguous): it
// has no transpose for 32-bit types. A not transposed and B transposed are K-major in memory and
// TMA reads them in place. An operand that runs along m or n instead (A^T, or B in the plain
// product: the input and weight gradients of a Linear layer) is copied as it lies, and its
// consumers load it from shared memory into registers in the fragment layout wgmma takes for its
// first operand, which may come from registers (Mode::kRegisters). That operand gives the block
// tile its rows: A^T directly, and B by computing C^T = B^T A^T and storing it transposed. When
// both run along m and n, the smaller is first copied K-major into a workspace by a transposing
// kernel (pack_k_major_kernel, whose time is part of 13's), as is any operand whose rows are not
// 16-byte aligned.
// Tiles: 128 x 256 for products that fill the GPU with them several times over, 128 x 128 and
// 128 x 64 where that would leave SMs idle (a 1024^3 product has 32 tiles of 128 x 256 for an
// H100's 132 SMs); pick_tile_n chooses by a count of waves.
//
// Measured by kernel-bench (H100 80GB HBM3, docs/runs/2026-11-26-h100-wgmma; the rows in
// kernels/README.md), against cuBLAS TF32 in the same run:
// - 4096^3 on 128 x 256 tiles: plain (B's rows through registers) 0.402 ms [fig cuda.matmul.13.4096.ms] =
//   342 TFLOP/s [fig cuda.matmul.13.4096.tflops], 95% [fig cuda.matmul.13.4096.pct-cublas] of cuBLAS's
//   0.383 ms [fig cuda.matmul.cublas-tf32.4096.ms] (359 TFLOP/s [fig cuda.matmul.cublas-tf32.4096.tflops]),
//   where 11 took 0.832 [fig cuda.matmul.11.4096.ms]; B^T (both operands from shared memory)
//   0.409 ms [fig cuda.matmul.13.4096Bt.ms] = 336 TFLOP/s [fig cuda.matmul.13.4096Bt.tflops],
//   92% [fig cuda.matmul.13.4096Bt.pct-cublas]. When B was first transposed into a workspace, the
//   plain product took 0.480 ms [fig cuda.matmul.13-packed.4096.ms] (docs/runs/2026-11-26-h100).
// - 2048^3: 94% [fig cuda.matmul.13.2048.pct-cublas] of cuBLAS plain, 92% [fig cuda.matmul.13.2048Bt.pct-cublas] B^T.
// - 1024^3, where 128 x 256 tiles number 32: 0.0258 ms [fig cuda.matmul.13.1024.ms] on them,
//   0.0166 [fig cuda.matmul.13-128.1024.ms] on 128 x 128 and 0.0122 [fig cuda.matmul.13-64.1024.ms] on
//   128 x 64 tiles, against cuBLAS's 0.0168 [fig cuda.matmul.cublas-tf32.1024.ms].
// - A Linear(4096, 4096) at batch 512, on the tiles the production path picks: forward
//   (512x4096x4096 B^T) 92% [fig cuda.matmul.tf32.linear-fwd.pct-cublas] of cuBLAS, input gradient
//   (512x4096x4096) 95% [fig cuda.matmul.tf32.linear-dx.pct-cublas], weight gradient (4096x4096x512
//   A^T: A packed, B's rows through registers) 112% [fig cuda.matmul.tf32.linear-dw.pct-cublas].
// How it got there, the stage counts, tiles and multicast tried and dropped, and what is not yet
// explained: kernels/cuda/NOTES.md.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#include <algorithm>
#include <cstdint>

#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"
#include "kiln/kernels/cuda/matmul/wgmma.cuh"

// wgmma and setmaxnreg exist only in the arch-specific target sm_90a (KILN_WGMMA, wgmma.cuh). The
// other device passes of this file (sm_90 from CMAKE_CUDA_ARCHITECTURES) compile the kernel to a
// trap, never launched.

namespace kiln::cuda::matmul {

CUtensorMap tiled_map(CUtensorMapDataType type, int rank, const void* data, const uint64_t* dims,
                      const uint64_t* strides, const uint32_t* box, CUtensorMapSwizzle swizzle, const char* who) {
  // cuTensorMapEncodeTiled from the driver, found through the runtime (no link against libcuda)
  static const auto encode = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    KILN_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found));
    KILN_CHECK(found == cudaDriverEntryPointSuccess && f != nullptr, Error,
               "cuda: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  CUtensorMap map;
  const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
  const CUresult res = encode(&map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(data), dims, strides, box,
                              unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  KILN_CHECK(res == CUDA_SUCCESS, Error, "cuda ", who, ": cuTensorMapEncodeTiled failed (", res, ")");
  return map;
}

namespace {

// The block tile is BM x BN, the two consumer warpgroups owning 64 rows each; slices of k (rows of
// 128 bytes: kStageK values) go through a ring of STAGES stages. Shared memory: STAGES x (A tile
// BM x 128 bytes, B tile BN x 128 bytes), then the mbarriers, full[STAGES] and empty[STAGES]. Three widths: 256 for products
// with tiles enough to fill the GPU several times over, 128 and 64 for those whose 128 x 256 tiles
// would leave SMs idle (a 1024^3 product has 32 of them for 132 SMs, 128 of 128 x 64). Narrower
// tiles take less shared memory per stage, so they get deeper rings.
constexpr int BM = 128;
constexpr int THREADS = 384;  // warpgroup 0 produces, 1 and 2 consume
// Values of k per stage for element type E (float: 32, bf16: 64): a stage's rows are 128 bytes,
// the 128-byte swizzle's width, whatever the type, so the tiles, the swizzle and the descriptors are the same bytes for both,
// and a wgmma k-step (8 floats, 16 bf16) is 32 bytes of a row either way.
template <class E>
constexpr int kStageK = 128 / static_cast<int>(sizeof(E));
// EXACT: version 17's 3xTF32, whose stages also hold the columns operand's tail (after the two
// tiles, in B's layout), on 128 x 64 tiles only (the width measured; its sums and a stage's parts
// are 64 registers a thread there).
template <int BN_, bool EXACT_ = false>
struct Tile {
  static constexpr int BN = BN_;
  static constexpr bool EXACT = EXACT_;
  static constexpr int STAGES = BN == 256 ? 3 : BN == 128 ? 4 : 6;
  static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, LOAD_BYTES = A_BYTES + B_BYTES;
  static constexpr int STAGE_BYTES = EXACT ? LOAD_BYTES + B_BYTES : LOAD_BYTES;
  static constexpr int BARRIERS = STAGES * STAGE_BYTES;
  // kRegisters with B as the rows operand stores C^T's tile through shared memory, transposed:
  // each consumer warpgroup's BN columns of 64 rows, with columns TRANSPOSED_LD floats apart.
  static constexpr int TRANSPOSED_LD = 66;
  // PERSISTENT (3xTF32): a block an SM takes item after item, the producer loading the next
  // item's slices while the consumers finish and store this one. Its transposed store then has
  // shared memory of its own (STORE) after the barriers; otherwise it goes through the ring,
  // which the block is done with by then.
  static constexpr bool PERSISTENT = EXACT;
  static constexpr int STORE = PERSISTENT ? BARRIERS + 2 * STAGES * 8 : 0;
  // + 1024: the base is rounded up to 1024 bytes, the swizzle's period (8 rows of 128 bytes).
  static constexpr int SMEM_BYTES =
      BARRIERS + 2 * STAGES * 8 + (PERSISTENT ? 2 * BN * TRANSPOSED_LD * 4 : 0) + 1024;
  static_assert(BN == 256 || BN == 128 || BN == 64, "wgmma_tf32 has these widths");
  static_assert(!EXACT || BN == 64, "3xTF32 runs on 128 x 64 tiles");
  static_assert(A_BYTES % 1024 == 0 && STAGE_BYTES % 1024 == 0, "every tile starts on a swizzle period");
  static_assert(SMEM_BYTES <= 227 * 1024, "an H100 block has at most 227 KB of shared memory");
  static_assert(PERSISTENT || 2 * BN * TRANSPOSED_LD * 4 <= BARRIERS, "the transposed tile fits in the ring");
  static_assert(STORE % 16 == 0, "the transposed tile's own shared memory starts on 16 bytes");
};

// How the kernel reads its operands. The block tile has BM rows (split between the two consumer
// warpgroups) and BN columns, over the product's "rows operand" (map_a) and "columns operand"
// (map_b). The columns operand is always K-major and read by wgmma from shared memory.
// - kShared: the rows operand is K-major too, read the same way (A not transposed, B transposed).
// - kRegisters: the rows operand runs along its rows in memory (MN-major: A transposed, or B in
//   the plain product, which then becomes the rows operand of C^T = B^T A^T). wgmma cannot read
//   a 32-bit operand that way from shared memory, so the consumers load it into registers in
//   wgmma's fragment layout, with one 32-bit load per value, and wgmma takes it from there.
enum class Mode { kShared, kRegisters };

// What the kernel needs besides the two tensor maps. The operands' batch strides live in the maps;
// an operand broadcast over the batch has a map of one matrix.
template <class E>
struct WgmmaArgs {
  E* c;
  int64_t m, n;        // C's extents
  int64_t rows, cols;  // the product's: m, n, or n, m when `swap`
  int slices;          // ceil(k / kStageK<E>)
  int64_t tiles_m, tiles_n;  // block tiles along rows and cols
  int64_t items;             // tiles_m x tiles_n x (batch entries, or chunks of a split k)
  bool broadcast_a, broadcast_b, vec_c;
  bool swap;  // the rows run along C's columns: the kernel computes C^T
  DeviceEpilogue<E> epilogue;
  // Split k (version 16, batch 1): block z of the grid sums chunk z, chunk_slices slices of k, and
  // stores those f32 sums at partials + z m n, without the epilogue; null: C as above.
  float* partials = nullptr;
  int chunk_slices = 0;
  bool vec_partials = false;
  // Version 17 (3xTF32): the operands as given, batch entry 0 (batch strides below), for the
  // results that come out NaN (RecomputeNan).
  Panel<float> a{}, b{};
  int64_t batch_stride_a = 0, batch_stride_b = 0;
};

#ifdef KILN_WGMMA
// ---- wgmma ----
// The same for an MN-major bf16 tile (version 15): boxes of 64 values of m or n (128 bytes, swizzled)
// by 64 of k, each 128-byte line one k. The leading byte offset steps between the boxes along m or
// n (8192 bytes), the stride byte offset between groups of 8 k (1024); a k-step of 16 moves the
// start by 16 lines, 2048 bytes (128 in the descriptor's units).
__device__ inline uint64_t mn_descriptor(uint32_t addr) {
  return uint64_t{(addr & 0x3FFFF) >> 4} | uint64_t{8192 >> 4} << 16 | uint64_t{1024 >> 4} << 32 | uint64_t{1} << 62;
}
// One k-step of both operands from shared memory, in E's instruction (TF32: both K-major).
template <class E, bool A_MN, bool B_MN, int R>
__device__ inline void wgmma_shared(float (&d)[R], uint64_t a, uint64_t b) {
  if constexpr (std::is_same_v<E, float>) wgmma_tf32(d, a, b);
  else wgmma_bf16<A_MN, B_MN>(d, a, b);
}

#endif  // KILN_WGMMA

#ifdef KILN_WGMMA
__device__ inline uint32_t ld_shared(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}

// Waits for `count` threads (whole warps) at barrier `id` (1-15; __syncthreads is 0).
__device__ inline void named_barrier(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
// The same, and whether `p` holds for any of the `count` threads
__device__ inline bool named_barrier_or(int id, int count, bool p) {
  uint32_t any;
  asm volatile(
      "{\n .reg .pred p, q;\n setp.ne.u32 p, %2, 0;\n bar.red.or.pred q, %1, %3, p;\n selp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(id), "r"(static_cast<uint32_t>(p)), "r"(count)
      : "memory");
  return any != 0;
}

// kRegisters: where this thread's fragment values of the rows operand lie in a stage. The operand
// arrives as boxes of 32 rows x 32 values of k, each a row of 128 bytes per k (so rows run along
// the box's 128-byte lines) under the 128-byte swizzle: the 16-byte chunk c of line p is stored at
// chunk c ^ (p % 8). A fragment needs, per warp and k-step of 8, rows g and g + 8 (g = lane / 4)
// at k = t and t + 4 (t = lane % 4). Taking the warp's 16 rows in their natural order would put
// lanes t = 0 and 1 on the same two chunks (chunk ^ 0 and chunk ^ 1 coincide for chunks {0, 1}),
// so the accumulators' row r of the warp stands for row row_of(r) of the tile instead: rows g of
// chunk pairs {c, c + 4}, which the four lines' XORs map to eight different chunks, 32 banks.
// The permutation is undone when storing (rows are independent in a product).
struct RowFragment {
  int rows[2];      // the tile rows of the warp's fragment rows g (h = 0) and g + 8 (h = 1)
  uint32_t at[4];   // byte offsets in the stage of a[0..3] at k-step 0; k-step kk adds kk * 1024
  __device__ RowFragment(int wg, int warp, int lane) {
    const int g = lane / 4, t = lane % 4, box = 2 * wg + warp / 2;
    for (int h = 0; h < 2; ++h) {
      const int chunk = 2 * (warp % 2) + h + 4 * (g / 4);
      rows[h] = box * 32 + chunk * 4 + g % 4;
      for (int hi = 0; hi < 2; ++hi) {
        const int p = t + 4 * hi;  // the value's k within the k-step, and its line's swizzle
        at[h + 2 * hi] = static_cast<uint32_t>(box * 32 * 128 + p * 128 + ((chunk ^ p) * 16) + (g % 4) * 4);
      }
    }
  }
};
#endif  // KILN_WGMMA

// One block per BM x BN tile of the product (grid: blocks in a line, the batch entries one after
// another).
// E: float (TF32, version 13: both modes) or bf16 (version 15: kShared, where A_MN and B_MN say which
// operands wgmma reads MN-major).
template <class E, class T, Mode MODE, bool A_MN = false, bool B_MN = false>
__global__ void __launch_bounds__(THREADS, 1)
    wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                 const WgmmaArgs<E> args) {
  dependent_kernel_start();  // launch.cuh: launched by launch_dependent
#ifdef KILN_WGMMA
  static_assert(MODE == Mode::kShared || std::is_same_v<E, float>, "only TF32 takes an operand from registers");
  static_assert(!(A_MN || B_MN) || !std::is_same_v<E, float>, "wgmma reads 32-bit operands K-major only");
  [[maybe_unused]] constexpr int MN_BOX = 64 * 128;  // an MN-major box: 64 values of m or n (128 bytes) by 64 of k
  constexpr int BN = T::BN, STAGES = T::STAGES, A_BYTES = T::A_BYTES, STAGE_BYTES = T::STAGE_BYTES;
  constexpr int SK = kStageK<E>;
  constexpr int CONSUMER_WARPS = 8;
  constexpr int64_t GROUP_M = 16;  // block tiles walk 16 rows of tiles before moving along n
  extern __shared__ __align__(1024) uint8_t smem_wgmma[];
  // The swizzle repeats every 1024 bytes, and the descriptors take tiles to start on a period.
  uint8_t* smem = smem_wgmma + ((1024 - smem_u32(smem_wgmma) % 1024) % 1024);
  auto* full = reinterpret_cast<uint64_t*>(smem + T::BARRIERS);
  uint64_t* empty = full + STAGES;

  // Item i of args.items: the tile and batch entry (or chunk of a split k) it computes. Blocks go
  // in groups of GROUP_M tile rows, down each column of the group before the next, so that the
  // items running at once share rows of A and columns of B in L2. A block takes item blockIdx.x,
  // and where T::PERSISTENT (a grid of at most a block an SM) blockIdx.x + gridDim.x and so on.
  const bool split = args.partials != nullptr;  // z is then the chunk of k, and the batch entry 0
  struct Item {
    int64_t z, tile_m, tile_n;
    int first_slice, slices, za, zb;
  };
  auto item_at = [&](int64_t i) {
    const int64_t per_entry = args.tiles_m * args.tiles_n, z = i / per_entry, r = i % per_entry;
    const int64_t group = GROUP_M * args.tiles_n, first = r / group * GROUP_M;
    const int64_t rows = std::min(args.tiles_m - first, GROUP_M);
    const int first_slice = split ? static_cast<int>(z) * args.chunk_slices : 0;
    return Item{z, first + r % group % rows, r % group / rows, first_slice,
                split ? min(args.chunk_slices, args.slices - first_slice) : args.slices,
                split || args.broadcast_a ? 0 : static_cast<int>(z),
                split || args.broadcast_b ? 0 : static_cast<int>(z)};
  };
  // Both sides walk the ring (RingWalk) in the same order, slice after slice of item after item.

  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);                // the producer's arrive.expect_tx
      mbar_init(&empty[s], CONSUMER_WARPS);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the copy engine
  }
  __syncthreads();

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  if (warpgroup == 0) {
    // Producer: one thread keeps the ring full, each slice to the next stage once the consumers
    // have released that stage's slice of the lap before.
    // The block starts with 168 registers a thread (65536 / 384, its cap under
    // __launch_bounds__(384, 1)); the producer drops to 40 and the consumers, which hold the
    // accumulators, rise to 232 (128 x 40 + 256 x 232 <= 65536).
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      RingWalk walk;
      for (int64_t i = blockIdx.x; i < args.items; i = T::PERSISTENT ? i + gridDim.x : args.items) {
        const Item it = item_at(i);
        for (int s = 0; s < it.slices; ++s, walk.next(STAGES)) {
          const int stage = walk.stage, k0 = (it.first_slice + s) * SK;
          if (walk.lap > 0) mbar_wait(&empty[stage], (walk.lap - 1) & 1);
          uint8_t* st = smem + stage * STAGE_BYTES;
          mbar_arrive_expect_tx(&full[stage], T::LOAD_BYTES);
          if constexpr (MODE == Mode::kShared && !A_MN) {
            tma_load(st, &map_a, k0, static_cast<int>(it.tile_m * BM), it.za, &full[stage]);
          } else if constexpr (MODE == Mode::kShared) {
            for (int box = 0; box < BM / 64; ++box)  // boxes of 64 rows (128 bytes) x SK
              tma_load(st + box * MN_BOX, &map_a, static_cast<int>(it.tile_m * BM + box * 64), k0, it.za, &full[stage]);
          } else {
            for (int box = 0; box < BM / 32; ++box)  // boxes of 32 rows (128 bytes) x SK
              tma_load(st + box * 32 * SK * 4, &map_a, static_cast<int>(it.tile_m * BM + box * 32), k0, it.za,
                       &full[stage]);
          }
          if constexpr (!B_MN) {
            tma_load(st + A_BYTES, &map_b, k0, static_cast<int>(it.tile_n * BN), it.zb, &full[stage]);
          } else {
            for (int box = 0; box < BN / 64; ++box)
              tma_load(st + A_BYTES + box * MN_BOX, &map_b, static_cast<int>(it.tile_n * BN + box * 64), k0, it.zb,
                       &full[stage]);
          }
        }
      }
    }
  } else {
    // Consumers: warpgroup 1 multiplies rows 0-63 of the tile, warpgroup 2 rows 64-127.
    setmaxnreg_inc<232>();
    const int wg = warpgroup - 1, lane = static_cast<int>(threadIdx.x) % 32;
    const int warp = static_cast<int>(threadIdx.x) / 32 % 4;
    // the warpgroup's 64 rows of A: 64 lines of 128 bytes K-major, the box wg MN-major (the same offset)
    const uint32_t a0 = smem_u32(smem) + wg * 64 * 128, b0 = smem_u32(smem) + A_BYTES;
    [[maybe_unused]] const RowFragment frag(wg, warp, lane);  // kRegisters: its loads and its rows
    RingWalk walk;  // as the producer's
    for (int64_t item = blockIdx.x; item < args.items; item = T::PERSISTENT ? item + gridDim.x : args.items) {
      const Item it = item_at(item);
      const int64_t z = it.z, tile_m = it.tile_m, tile_n = it.tile_n;
      const int first_slice = it.first_slice, slices = it.slices;
      float d[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) d[i] = 0;
      if constexpr (T::EXACT) {
        // Version 17, 3xTF32. The rows operand's fragments are loaded from shared memory (kShared:
        // its K-major lines under the 128-byte swizzle; kRegisters: RowFragment's places) and split
        // in registers. The columns operand, which wgmma reads from shared memory, is split there:
        // once a stage has landed, the 256 consumer threads round its B tile in place and write the
        // rest after the stage's two tiles (B's swizzled layout again, since LOAD_BYTES is a whole
        // number of its periods), then meet at a named barrier. Each product is lo_a * hi_b +
        // hi_a * lo_b + hi_a * hi_b. A stage's 12 products sum from zero into `part`, which joins d
        // in an ordinary f32 add: the tensor cores truncate as they add (version 12). The next
        // stage is split while a stage's products run, and a stage goes back to the producer once
        // they are done. (A second set of parts, added while the next stage's products run, made
        // ptxas serialise the products: it reads them as accumulators in use.)
        constexpr int R = BN / 2, KF = SK / 8;
        float part[R];
        auto split_stage = [&](const RingWalk& at) {
          mbar_wait(&full[at.stage], at.lap & 1);
          auto* v4 = reinterpret_cast<uint4*>(smem + at.stage * STAGE_BYTES + A_BYTES);
          constexpr int kLoads = T::B_BYTES / 16;
          for (int i = static_cast<int>(threadIdx.x) - 128; i < kLoads; i += 256) {
            const uint4 v = v4[i];
            uint4 hi, lo;
            split_tf32(v.x, hi.x, lo.x), split_tf32(v.y, hi.y, lo.y);
            split_tf32(v.z, hi.z, lo.z), split_tf32(v.w, hi.w, lo.w);
            v4[i] = hi, v4[i + kLoads] = lo;
          }
          fence_async_shared();  // the writes, seen by the tensor cores after the barrier
          named_barrier(1, 256);
        };
        // kShared: the byte offsets in a stage of this thread's fragment values at k-step kk, rows
        // g and g + 8 of its warp's 16 (h) at k = t and t + 4 (hi), register h + 2 hi: row r's
        // 16-byte chunk c lies at chunk c ^ (r % 8).
        const int g = lane / 4, t = lane % 4;
        auto k_major = [&](int kk, int i) {
          const int r = wg * 64 + warp * 16 + g + 8 * (i % 2), chunk = 2 * kk + i / 2;
          return static_cast<uint32_t>(r * 128 + ((chunk ^ (r % 8)) * 16) + t * 4);
        };
        if (slices > 0) split_stage(walk);
        for (int s = 0; s < slices; ++s) {
          const int stage = walk.stage;
          const uint32_t base = smem_u32(smem) + stage * STAGE_BYTES;
          const uint64_t db = swizzled_descriptor(base + A_BYTES), db_lo = swizzled_descriptor(base + T::LOAD_BYTES);
          uint32_t hi[KF][4], lo[KF][4];
#pragma unroll
          for (int kk = 0; kk < KF; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              const uint32_t at = MODE == Mode::kShared ? k_major(kk, i) : frag.at[i] + kk * 1024;
              split_tf32(ld_shared(base + at), hi[kk][i], lo[kk][i]);
            }
#pragma unroll
          for (int i = 0; i < R; ++i) part[i] = 0.0f;
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < KF; ++kk) {
            wgmma_tf32(part, lo[kk], db + 2 * kk);
            wgmma_tf32(part, hi[kk], db_lo + 2 * kk);
            wgmma_tf32(part, hi[kk], db + 2 * kk);
          }
          wgmma_commit();
          RingWalk after = walk;  // the next slice's stage
          after.next(STAGES);
          if (s + 1 < slices) split_stage(after);
          wgmma_wait<0>();
          fence_accumulators(part);
#pragma unroll
          for (int i = 0; i < R; ++i) d[i] += part[i];
          if (lane == 0) mbar_arrive(&empty[stage]);
          walk = after;
        }
      } else if constexpr (MODE == Mode::kShared) {
        int before = 0;  // the stage of the slice before
        for (int s = 0; s < slices; ++s, walk.next(STAGES)) {
          const int stage = walk.stage;
          mbar_wait(&full[stage], walk.lap & 1);
          const uint32_t sa = a0 + stage * STAGE_BYTES, sb = b0 + stage * STAGE_BYTES;
          const uint64_t da = A_MN ? mn_descriptor(sa) : swizzled_descriptor(sa);
          const uint64_t db = B_MN ? mn_descriptor(sb) : swizzled_descriptor(sb);
          // a k-step: 32 bytes along a K-major line (2 in the descriptor's units), 16 lines MN-major (128)
          constexpr uint64_t step_a = A_MN ? 128 : 2, step_b = B_MN ? 128 : 2;
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < 4; ++kk) wgmma_shared<E, A_MN, B_MN>(d, da + step_a * kk, db + step_b * kk);
          wgmma_commit();
          // Keep this slice's products in flight; the previous slice's are done after this wait,
          // and its stage goes back to the producer.
          wgmma_wait<1>();
          if (s > 0 && lane == 0) mbar_arrive(&empty[before]);
          before = stage;
        }
        if constexpr (T::PERSISTENT) {  // the last slice's stage, for the next item
          wgmma_wait<0>();
          if (slices > 0 && lane == 0) mbar_arrive(&empty[before]);
        }
      } else {
        for (int s = 0; s < slices; ++s, walk.next(STAGES)) {
          const int stage = walk.stage;
          mbar_wait(&full[stage], walk.lap & 1);
          const uint32_t base = smem_u32(smem) + stage * STAGE_BYTES;
          uint32_t f[SK / 8][4];
#pragma unroll
          for (int kk = 0; kk < SK / 8; ++kk)
#pragma unroll
            for (int i = 0; i < 4; ++i) f[kk][i] = ld_shared(base + frag.at[i] + kk * 1024);
          const uint64_t db = swizzled_descriptor(b0 + stage * STAGE_BYTES);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < SK / 8; ++kk) wgmma_tf32(d, f[kk], db + 2 * kk);
          wgmma_commit();
          wgmma_wait<0>();
          if (lane == 0) mbar_arrive(&empty[stage]);
        }
      }
      wgmma_wait<0>();
      fence_accumulators(d);
      E* c = args.c + (split ? 0 : z) * args.m * args.n;
      // 3xTF32's NaN results summed again in f32 over this block's k (RecomputeNan), on the
      // operands of its batch entry. The check is made once: a thread (or, where the tile goes
      // through shared memory, a warpgroup) whose results hold no NaN stores them as computed, with
      // no test and call at each (17's paragraph, before tf32x3_wgmma_splits, says what it saved).
      const auto recompute = [&] {
        if constexpr (T::EXACT) {
          const int64_t entry = split ? 0 : z;
          Panel<float> pa = args.a, pb = args.b;
          pa.data += entry * args.batch_stride_a, pb.data += entry * args.batch_stride_b;
          return RecomputeNan{pa, pb, int64_t{first_slice} * SK,
                              std::min(args.a.k, int64_t{first_slice + slices} * SK)};
        } else {
          return AsComputed{};
        }
      }();
      bool nan = false;
      if constexpr (T::EXACT) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) nan |= d[i] != d[i];
      }
      // store(finish) for the thread's own results, or the warpgroup's once `nan` is its
      const auto either = [&](const auto& store) {
        if (T::EXACT && nan) store(recompute);
        else store(AsComputed{});
      };
      if constexpr (MODE == Mode::kShared) {
        // Straight from the registers to C, skipping what falls outside m x n: wgmma's accumulator
        // layout is that of mma.sync's tiles, so store_mma_tiles (which reads C's batch entry, extents
        // and alignment from an Args) writes them, a bf16 C rounded once after the epilogue; a chunk
        // of a split k its f32 sums as they are.
        const auto& acc = reinterpret_cast<const float(&)[1][BN / 8][4]>(d);
        either([&](const auto& finish) {
          if (split) {
            Args<float> out{nullptr, nullptr, args.partials + z * args.m * args.n, args.m, args.n, 0, 0, 0, 0, 0,
                            false, false, false, false, args.vec_partials, {}};
            store_mma_tiles(out, acc, tile_m * BM, tile_n * BN, wg * 64 + warp * 16, 0, lane, finish);
          } else {
            Args<E> out{nullptr, nullptr, c, args.m, args.n, 0, 0, 0, 0, 0,
                        false, false, false, false, args.vec_c, args.epilogue};
            store_mma_tiles(out, acc, tile_m * BM, tile_n * BN, wg * 64 + warp * 16, 0, lane, finish);
          }
        });
      } else {
        // The accumulators' rows are the tile rows RowFragment loaded (h = 0: d[4j], d[4j + 1];
        // h = 1: d[4j + 2], d[4j + 3]), their columns those of mma.sync's tiles. A chunk of a split k
        // stores its f32 sums to its partials, without the epilogue (E is float here).
        float* dst = split ? args.partials + z * args.m * args.n : c;
        const bool vec = split ? args.vec_partials : args.vec_c;
        // C's element (i, j), through the finish and, outside a split, the epilogue
        auto value = [&](const auto& finish, float v, int64_t i, int64_t j) {
          v = finish(v, i, j);
          return split ? v : args.epilogue(v, j);
        };
        const int t = lane % 4;
        if (!args.swap) {
          either([&](const auto& finish) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int64_t row = tile_m * BM + frag.rows[h];
              if (row >= args.rows) continue;
#pragma unroll
              for (int j = 0; j < BN / 8; ++j) {
                const int64_t col = tile_n * BN + j * 8 + 2 * t;
                const float v0 = d[4 * j + 2 * h], v1 = d[4 * j + 2 * h + 1];
                if (vec && col + 1 < args.cols) {  // col even, n % 4 == 0: aligned
                  *reinterpret_cast<float2*>(dst + row * args.n + col) =
                      make_float2(value(finish, v0, row, col), value(finish, v1, row, col + 1));
                } else {
                  if (col < args.cols) dst[row * args.n + col] = value(finish, v0, row, col);
                  if (col + 1 < args.cols) dst[row * args.n + col + 1] = value(finish, v1, row, col + 1);
                }
              }
            }
          });
        } else {
          // C^T's tile (row, col) is C's (col, row): straight from the registers, a warp's store
          // would cover 4 rows of C with 16-byte pieces. The warpgroup's 64 x BN accumulators go
          // through the ring's shared memory instead, transposed (column-major, columns of
          // TRANSPOSED_LD floats: 66, so that the four t of a store fall 4 banks apart and with the
          // rows' {0..3, 16..19} cover all 32), then out along C's rows, 64 contiguous floats per
          // warp. Both warpgroups must be done reading the ring first. A warp stores values of the
          // whole warpgroup's, so the warpgroup's barrier ORs `nan` over it.
          constexpr int LD = T::TRANSPOSED_LD;
          named_barrier(1, 256);
          float* tile = reinterpret_cast<float*>(smem + T::STORE) + wg * BN * LD;
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                tile[(j * 8 + 2 * t + e) * LD + frag.rows[h] - wg * 64] = d[4 * j + 2 * h + e];
          if constexpr (T::EXACT) nan = named_barrier_or(2 + wg, 128, nan);
          else named_barrier(2 + wg, 128);
          const int64_t row = tile_m * BM + wg * 64 + 2 * lane;  // C's column of this lane's pair
          either([&](const auto& finish) {
            for (int col = warp; col < BN && tile_n * BN + col < args.cols; col += 4) {
              const int64_t i = tile_n * BN + col;  // C's row
              float* out = dst + i * args.n + row;
              const float v0 = tile[col * LD + 2 * lane], v1 = tile[col * LD + 2 * lane + 1];
              if (vec && row + 1 < args.rows) {  // row even, n % 4 == 0: aligned
                *reinterpret_cast<float2*>(out) = make_float2(value(finish, v0, i, row), value(finish, v1, i, row + 1));
              } else {
                if (row < args.rows) out[0] = value(finish, v0, i, row);
                if (row + 1 < args.rows) out[1] = value(finish, v1, i, row + 1);
              }
            }
          });
        }
      }
    }  // the block's items
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// out[z][x][p] = P(p, x): the operand as a K-major matrix with rows of ld_out floats, 32 x 32
// tiles per block of 32 x 8 threads. A tile whose memory runs along x goes through shared memory,
// so that the reads (along x) and the writes (along p) are both coalesced; one that runs along p
// already (an operand packed only for its alignment) is copied row by row.
template <class E>
__global__ void pack_k_major_kernel(Panel<E> P, int64_t batch_stride, E* out, int64_t ld_out, int64_t tiles_x,
                                    int64_t tiles_k) {
  __shared__ E tile[32][33];  // + 1: a column of the tile spans all 32 banks (f32)
  const int64_t t = blockIdx.x, per_entry = tiles_x * tiles_k, z = t / per_entry;
  const int64_t x0 = t % per_entry / tiles_k * 32, p0 = t % tiles_k * 32;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  P.data += z * batch_stride;
  out += z * P.x * ld_out;
  if (P.x_contiguous) {
    for (int i = ty; i < 32; i += 8) tile[i][tx] = P.at(p0 + i, x0 + tx);
    __syncthreads();
    for (int i = ty; i < 32; i += 8)
      if (x0 + i < P.x && p0 + tx < P.k) out[(x0 + i) * ld_out + p0 + tx] = tile[tx][i];
  } else {
    for (int i = ty; i < 32; i += 8)
      if (x0 + i < P.x && p0 + tx < P.k) out[(x0 + i) * ld_out + p0 + tx] = P.get(p0 + tx, x0 + i);
  }
}

// An operand as the kernel reads it: `batches` matrices of `rows` x k with row stride ld, either
// K-major (memory row r holds the matrix's row r: k values) or MN-major (memory row p holds the
// value at k = p of every row).
struct Operand {
  const void* data;
  int64_t rows, ld, batch_stride, batches;
  bool k_major;
};

// The panels' batch counts: a broadcast operand (batch stride 0) is one matrix.
int64_t batches_of(const MatmulParams& p, int64_t batch_stride) { return batch_stride == 0 ? 1 : p.batch; }

// Whether TMA can read a matrix of `lines` rows of E in memory where it is: a 16-byte aligned base
// and row stride, and (when there are several matrices) a batch stride that is a whole number of
// rows past the matrix before, as a tensor map's strides must be.
template <class E>
bool readable(const E* data, int64_t lines, int64_t ld, int64_t batch_stride, int64_t batches) {
  const bool stacked = batches == 1 || (ld > 0 && batch_stride % ld == 0 && batch_stride >= lines * ld);
  return stacked && aligned16(data, ld, batch_stride);
}

// Elements of workspace an operand needs when it must be packed: rows of k rounded up to 16 bytes.
template <class E>
int64_t packed_elements(int64_t rows, int64_t k, int64_t batches) {
  constexpr int64_t v = 16 / sizeof(E);
  return batches * rows * ((k + v - 1) / v * v);
}

// How a product runs: which operand gives the tile's rows, and which are first packed K-major.
// Both K-major (after packing): kShared, rows from A. One MN-major: kRegisters with that one as
// the rows operand (B's: the kernel computes C^T = B^T A^T). Both MN-major: the smaller is packed.
// An operand TMA cannot read in place (misaligned, oddly strided) is packed. bf16 (version 15)
// runs kShared with each operand read as it lies, K-major or MN-major (a_mn, b_mn).
struct Plan {
  Mode mode = Mode::kShared;
  bool a_mn = false, b_mn = false;  // bf16: read MN-major by wgmma, in place
  bool swap = false;  // the rows operand is B
  bool pack_a = false, pack_b = false;
};

template <class E>
Plan plan_for(const MatmulParams& p, const E* a, const E* b) {
  const int64_t batches_a = batches_of(p, p.batch_stride_a), batches_b = batches_of(p, p.batch_stride_b);
  const bool a_mn = p.trans_a, b_mn = !p.trans_b;
  Plan plan;
  plan.pack_a = !readable(a, a_mn ? p.k : p.m, p.lda, p.batch_stride_a, batches_a);
  plan.pack_b = !readable(b, b_mn ? p.k : p.n, p.ldb, p.batch_stride_b, batches_b);
  bool rows_a = a_mn && !plan.pack_a, rows_b = b_mn && !plan.pack_b;  // MN-major as read
  if constexpr (!std::is_same_v<E, float>) {
    plan.a_mn = rows_a, plan.b_mn = rows_b;
    return plan;
  }
  if (rows_a && rows_b) {
    (batches_a * p.m <= batches_b * p.n ? plan.pack_a : plan.pack_b) = true;
    (plan.pack_a ? rows_a : rows_b) = false;
  }
  if (rows_a || rows_b) plan.mode = Mode::kRegisters, plan.swap = rows_b;
  return plan;
}

// The operand as the plan reads it: packed into `workspace` by pack_k_major_kernel, or in place.
template <class E>
Operand operand(const Panel<E>& P, int64_t batch_stride, int64_t batches, bool pack, E* workspace,
                cudaStream_t stream) {
  if (!pack) return {P.data, P.x, P.ld, batch_stride, batches, !P.x_contiguous};
  constexpr int64_t v = 16 / sizeof(E);
  const int64_t ld = (P.k + v - 1) / v * v, tiles_x = (P.x + 31) / 32, tiles_k = (P.k + 31) / 32;
  const int64_t blocks = batches * tiles_x * tiles_k;
  KILN_CHECK(blocks <= 2147483647, ShapeError, "cuda matmul wgmma: operand too large to pack");
  pack_k_major_kernel<E><<<static_cast<unsigned>(blocks), dim3(32, 8), 0, stream>>>(P, batch_stride, workspace, ld,
                                                                                    tiles_x, tiles_k);
  KILN_CUDA_LAUNCH_CHECK("matmul wgmma pack");
  return {workspace, P.x, ld, P.x * ld, batches, true};
}

// The 3-D tensor map (along memory rows, memory rows, batch) of an operand of E with the 128-byte
// swizzle, read in boxes of SK x box_rows (K-major: SK = kStageK<E> values of k from each of
// box_rows rows) or SK x SK (MN-major: SK rows, 128 bytes, from each of SK values of k; TF32's
// register path, bf16's transposed reads); reads outside the tensor return zeros.
template <class E>
CUtensorMap tensor_map(const Operand& op, int64_t k, int box_rows) {
  constexpr cuuint32_t SK = kStageK<E>;
  constexpr cuuint64_t size = sizeof(E);
  const int64_t x = op.k_major ? k : op.rows, y = op.k_major ? op.rows : k;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(x), static_cast<cuuint64_t>(y),
                              static_cast<cuuint64_t>(op.batches)};
  const int64_t batch_stride = op.batches > 1 ? op.batch_stride : y * op.ld;
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(op.ld) * size, static_cast<cuuint64_t>(batch_stride) * size};
  // the inner extent is always 128 bytes: SK values of k (K-major), or of m or n (MN-major)
  const cuuint32_t box[3] = {SK, op.k_major ? static_cast<cuuint32_t>(box_rows) : SK, 1};
  const CUtensorMapDataType type =
      std::is_same_v<E, float> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return tiled_map(type, 3, op.data, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, "matmul 13_tf32_wgmma");
}

// Where a launch's blocks go: C (one block per tile and batch entry), or, for a split k, f32
// partial sums (one block per tile and chunk of `chunk_slices` slices; batch 1).
struct SplitK {
  float* partials = nullptr;
  int64_t chunks = 1;
  int chunk_slices = 0;
};

// Version 17's operands as given, from which it recomputes its NaN results; none: TF32 or bf16.
struct Exact {
  const float* a;
  const float* b;
};

template <class E, int BN, Mode MODE, bool A_MN = false, bool B_MN = false, bool EXACT = false>
void launch_wgmma(const MatmulParams& p, const Operand& rows, const Operand& cols, bool swap, E* c,
                  const DeviceEpilogue<E>& e, const SplitK& split, const Exact* exact, cudaStream_t stream) {
  using T = Tile<BN, EXACT>;
  const int64_t tiles_m = (rows.rows + BM - 1) / BM, tiles_n = (cols.rows + BN - 1) / BN;
  const int64_t blocks = tiles_m * tiles_n * (split.partials ? split.chunks : p.batch);
  KILN_CHECK(blocks <= 2147483647, ShapeError, "cuda matmul 13_tf32_wgmma: ", p.batch, " x ", p.m, " x ", p.n,
             " is too large a product for one launch");
  const CUtensorMap map_a = tensor_map<E>(rows, p.k, BM), map_b = tensor_map<E>(cols, p.k, BN);
  const int64_t grid = T::PERSISTENT ? std::min<int64_t>(blocks, device_attribute(cudaDevAttrMultiProcessorCount))
                                     : blocks;
  WgmmaArgs<E> args{.c = c,
                       .m = p.m,
                       .n = p.n,
                       .rows = rows.rows,
                       .cols = cols.rows,
                       .slices = static_cast<int>((p.k + kStageK<E> - 1) / kStageK<E>),
                       .tiles_m = tiles_m,
                       .tiles_n = tiles_n,
                       .items = blocks,
                       .broadcast_a = rows.batches == 1,
                       .broadcast_b = cols.batches == 1,
                       .vec_c = aligned16(c, p.n, p.m * p.n),
                       .swap = swap,
                       .epilogue = e,
                       .partials = split.partials,
                       .chunk_slices = split.chunk_slices,
                       .vec_partials = split.partials && aligned16(split.partials, p.n, p.m * p.n)};
  if constexpr (EXACT) {
    args.a = {exact->a, p.lda, p.k, p.m, p.trans_a}, args.b = {exact->b, p.ldb, p.k, p.n, !p.trans_b};
    args.batch_stride_a = p.batch_stride_a, args.batch_stride_b = p.batch_stride_b;
  }
  const auto kernel = wgmma_kernel<E, T, MODE, A_MN, B_MN>;
  allow_dynamic_smem(kernel, T::SMEM_BYTES);
  launch_dependent(kernel, static_cast<unsigned>(grid), THREADS, T::SMEM_BYTES, stream, map_a, map_b, args);
  KILN_CUDA_LAUNCH_CHECK("matmul 13_tf32_wgmma");
}

template <class E, int BN>
void launch_wgmma(const MatmulParams& p, const Plan& plan, const Operand& a, const Operand& b, E* c,
                  const DeviceEpilogue<E>& e, const SplitK& split, const Exact* exact, cudaStream_t stream) {
  const Operand& rows = plan.swap ? b : a;
  const Operand& cols = plan.swap ? a : b;
  constexpr Mode S = Mode::kShared, R = Mode::kRegisters;
  if constexpr (std::is_same_v<E, float> && BN == 64) {
    if (exact && plan.mode == R)
      return launch_wgmma<E, BN, R, false, false, true>(p, rows, cols, plan.swap, c, e, split, exact, stream);
    if (exact) return launch_wgmma<E, BN, S, false, false, true>(p, rows, cols, false, c, e, split, exact, stream);
  }
  KILN_CHECK(!exact, Error, "cuda matmul 17_3xtf32_wgmma: 128 x 64 tiles only, not 128 x ", BN);
  if constexpr (std::is_same_v<E, float>) {
    if (plan.mode == R) return launch_wgmma<E, BN, R>(p, rows, cols, plan.swap, c, e, split, nullptr, stream);
    return launch_wgmma<E, BN, S>(p, rows, cols, false, c, e, split, nullptr, stream);
  } else {
    if (plan.a_mn && plan.b_mn)
      return launch_wgmma<E, BN, S, true, true>(p, rows, cols, false, c, e, split, nullptr, stream);
    if (plan.a_mn) return launch_wgmma<E, BN, S, true, false>(p, rows, cols, false, c, e, split, nullptr, stream);
    if (plan.b_mn) return launch_wgmma<E, BN, S, false, true>(p, rows, cols, false, c, e, split, nullptr, stream);
    launch_wgmma<E, BN, S>(p, rows, cols, false, c, e, split, nullptr, stream);
  }
}

// The tile width (256, 128 or 64) with the least estimated time for this plan on `sms` SMs:
// time ~ waves x (time of one tile), a tile's time ~ its width x the cost per column of that
// width (narrower tiles read more bytes per product and pay the ring's fill more often). The
// costs per column are what full waves of each width measured against 128 x 256 tiles at 2048^3
// and 4096^3 (kernels/cuda/NOTES.md).
int pick_tile_n(const MatmulParams& p, const Plan& plan, int sms) {
  const int64_t rows = plan.swap ? p.n : p.m, cols = plan.swap ? p.m : p.n;
  struct Width { int n; double per_column; };
  static constexpr Width widths[] = {{256, 1.0}, {128, 1.15}, {64, 1.6}};
  int best = 256;
  double best_cost = 0;
  for (const Width& w : widths) {
    const int64_t tiles = p.batch * ((rows + BM - 1) / BM) * ((cols + w.n - 1) / w.n);
    const int64_t waves = (tiles + sms - 1) / std::max(sms, 1);
    const double cost = static_cast<double>(waves) * w.n * w.per_column;
    if (w.n == 256 || cost < best_cost) best = w.n, best_cost = cost;
  }
  return best;
}

// exact: version 17 (f32 on 128 x 64 tiles).
template <class E>
void wgmma_run(const MatmulParams& p, const E* a, const E* b, E* c, const DeviceEpilogue<E>& e, int tile_n,
               void* workspace, cudaStream_t stream, const SplitK& split = {}, bool exact = false) {
  KILN_CHECK(tile_n == 0 || tile_n == 256 || tile_n == 128 || tile_n == 64, Error,
             "cuda matmul wgmma: tiles are 128 x 256, 128 x 128 or 128 x 64, not 128 x ", tile_n);
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  // A tensor map has no empty extents: an empty sum (zeros through the epilogue) goes to 11 or 14.
  if (p.k == 0) {
    if constexpr (std::is_same_v<E, float>) return tf32_ldmatrix(p, a, b, c, e, stream);
    else return bf16_mma(p, a, b, c, e, stream);
  }
  const Plan plan = plan_for(p, a, b);
  if (tile_n == 0) {
    int device = 0;
    KILN_CUDA_CHECK(cudaGetDevice(&device));
    tile_n = pick_tile_n(p, plan, device_attribute(cudaDevAttrMultiProcessorCount, device));
  }
  const Panel<E> pa{a, p.lda, p.k, p.m, p.trans_a}, pb{b, p.ldb, p.k, p.n, !p.trans_b};
  const int64_t batches_a = batches_of(p, p.batch_stride_a), batches_b = batches_of(p, p.batch_stride_b);
  auto* ws = static_cast<E*>(workspace);
  const Operand oa = operand(pa, p.batch_stride_a, batches_a, plan.pack_a, ws, stream);
  if (plan.pack_a) ws += packed_elements<E>(p.m, p.k, batches_a);
  const Operand ob = operand(pb, p.batch_stride_b, batches_b, plan.pack_b, ws, stream);
  Exact operands{};
  if constexpr (std::is_same_v<E, float>) operands = {a, b};
  const Exact* ex = exact ? &operands : nullptr;
  switch (tile_n) {
    case 256: return launch_wgmma<E, 256>(p, plan, oa, ob, c, e, split, ex, stream);
    case 128: return launch_wgmma<E, 128>(p, plan, oa, ob, c, e, split, ex, stream);
    default: return launch_wgmma<E, 64>(p, plan, oa, ob, c, e, split, ex, stream);
  }
}

template <class E>
size_t wgmma_workspace(const MatmulParams& p, const E* a, const E* b) {
  const Plan plan = plan_for(p, a, b);
  int64_t elements = 0;
  if (plan.pack_a) elements += packed_elements<E>(p.m, p.k, batches_of(p, p.batch_stride_a));
  if (plan.pack_b) elements += packed_elements<E>(p.n, p.k, batches_of(p, p.batch_stride_b));
  return static_cast<size_t>(elements) * sizeof(E);
}

}  // namespace

void tf32_wgmma_run(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
                    int tile_n, void* workspace, cudaStream_t stream) {
  wgmma_run(p, a, b, c, e, tile_n, workspace, stream);
}

bool tf32_wgmma_applies(const MatmulParams& p, int device) {
  // Tensor-map coordinates are 32-bit.
  return wgmma_runs(device) && std::max({p.m, p.n, p.k}) < (int64_t{1} << 31) - 256;
}

size_t tf32_wgmma_workspace(const MatmulParams& p, const float* a, const float* b) { return wgmma_workspace(p, a, b); }

namespace {

// A version of the ladder: 13 (15 for bf16) on tiles of width tile_n (0: its own pick), its
// workspace from cudaMallocAsync; 11 (14) on a GPU that is not an sm_90.
template <class E>
void run_version(const MatmulParams& p, const E* a, const E* b, E* c, const DeviceEpilogue<E>& e, int tile_n,
                 cudaStream_t stream) {
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  if (!tf32_wgmma_applies(p, device)) {
    if constexpr (std::is_same_v<E, float>) return tf32_ldmatrix(p, a, b, c, e, stream);
    else return bf16_mma(p, a, b, c, e, stream);
  }
  const size_t bytes = wgmma_workspace(p, a, b);
  void* workspace = nullptr;
  if (bytes > 0) KILN_CUDA_CHECK(cudaMallocAsync(&workspace, bytes, stream));
  wgmma_run(p, a, b, c, e, tile_n, workspace, stream);
  if (workspace) KILN_CUDA_CHECK(cudaFreeAsync(workspace, stream));
}

}  // namespace

void tf32_wgmma(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
                cudaStream_t stream) {
  run_version(p, a, b, c, e, 256, stream);
}
void tf32_wgmma_128x128(const MatmulParams& p, const float* a, const float* b, float* c,
                        const DeviceEpilogue<float>& e, cudaStream_t stream) {
  run_version(p, a, b, c, e, 128, stream);
}
void tf32_wgmma_128x64(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
                       cudaStream_t stream) {
  run_version(p, a, b, c, e, 64, stream);
}

// ---- version 15: bf16 ----
// The kernel above on bf16 tiles (mixed precision): a stage's rows are still 128 bytes, now of 64
// values of k, so the ring, the swizzle and the descriptors are byte for byte those of TF32, and
// each 32-byte k-step is one wgmma m64nNk16 bf16 product (f32 accumulation) instead of m64nNk8
// TF32. Both operands are read from shared memory (kShared), each as it lies: wgmma transposes
// 16-bit operands, so an MN-major one (A^T, B in the plain product) arrives by TMA in boxes of 64
// rows (128 bytes) by 64 values of k and is read through a descriptor whose lines are values of
// k (mn_descriptor); only an operand TMA cannot read in place (misaligned) is packed. Each
// element of C is rounded to bf16 once, after the epilogue (store_mma_tiles).
// Measured (H100 80GB HBM3, kernel-bench, docs/runs/2026-11-27-h100-bf16-wgmma), against cuBLAS
// BF16 in the same run: 4096^3 B^T 0.2292 ms [fig cuda.matmul.15.4096Bt.ms] against
// 0.1993 [fig cuda.matmul.cublas-bf16.4096Bt.ms], 87% [fig cuda.matmul.15.4096Bt.pct-cublas] of its
// speed (89% [fig cuda.matmul.15-packed.4096Bt.pct-cublas] in the call before, where this layout ran
// the same code: the spread of these runs), plain
// 84% [fig cuda.matmul.15.4096.pct-cublas], 2048^3 79% [fig cuda.matmul.15.2048.pct-cublas], 1024^3
// 99% [fig cuda.matmul.15.1024.pct-cublas]; a Linear(4096, 4096) at batch 512: forward
// 91% [fig cuda.matmul.15.linear-fwd.pct-cublas], input gradient
// 89% [fig cuda.matmul.15.linear-dx.pct-cublas], weight gradient (k = 512: a short ring for a large
// tile) 54% [fig cuda.matmul.15.linear-dw.pct-cublas]. When MN-major operands were first packed
// K-major, the plain 4096^3 ran at 66% [fig cuda.matmul.15-packed.4096.pct-cublas] and the input
// gradient at 29% [fig cuda.matmul.15-packed.linear-dx.pct-cublas] (docs/runs/2026-11-27-h100-bf16).
// On its narrow tiles it also runs the MNIST MLP's first layer (64x128x784) at
// 118% [fig cuda.matmul.15.mlp-fc1.pct-cublas] of cuBLAS, where version 14 (mma.sync, one
// 128 x 128 block for the whole product) managed 15% [fig cuda.matmul.14.mlp-fc1.pct-cublas]; 14
// reached 21% [fig cuda.matmul.14.4096Bt.pct-cublas] at 4096^3 B^T.

void bf16_wgmma_run(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c, const DeviceEpilogue<bf16>& e,
                    int tile_n, void* workspace, cudaStream_t stream) {
  wgmma_run(p, a, b, c, e, tile_n, workspace, stream);
}

size_t bf16_wgmma_workspace(const MatmulParams& p, const bf16* a, const bf16* b) { return wgmma_workspace(p, a, b); }

void bf16_wgmma(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c, const DeviceEpilogue<bf16>& e,
                cudaStream_t stream) {
  run_version(p, a, b, c, e, 0, stream);
}

// ---- version 16: bf16 with k split ----
// A product of few tiles and a long k, the MNIST CNN's fc1 (64 x 128 x 9216 at batch 64): 15 would
// walk its 144 slices of k in one or two blocks while the other SMs idle, and 09 splits k but
// multiplies on the CUDA cores. 16 gives each block of 15's kernel one tile and one chunk of at
// least kMinChunkSlices slices, as many chunks as fill the SMs once; each block stores its f32
// sums, and 09's reduce kernel adds a tile's chunks in order (deterministic), applies the epilogue
// and rounds each element once.
// Measured (H100 80GB HBM3, kernel-bench, docs/runs/2026-11-27-h100-split-k): fc1 at batch 64
// (64 x 128 x 9216 B^T) in 8.3 µs [fig cuda.matmul.16.64x128x9216.split.us], against 09's
// 18.6 [fig cuda.matmul.09-bf16.64x128x9216.split.us] on the CUDA cores, 15's
// 33.2 [fig cuda.matmul.15.64x128x9216.split.us] and cuBLAS BF16's
// 15.9 [fig cuda.matmul.cublas-bf16.64x128x9216.split.us] (193% [fig cuda.matmul.16.64x128x9216.pct-cublas]
// of its speed); at batch 512 (512 x 128 x 9216) in 12.7 µs [fig cuda.matmul.16.512x128x9216.split.us],
// against 09's 104.2 [fig cuda.matmul.09-bf16.512x128x9216.split.us], 15's
// 33.5 [fig cuda.matmul.15.512x128x9216.split.us] and cuBLAS's
// 11.7 [fig cuda.matmul.cublas-bf16.512x128x9216.split.us]: 92% [fig cuda.matmul.16.512x128x9216.pct-cublas]
// of its speed. The prediction was 8 and 12 µs [nofig]: a chunk's four slices load in one turn of
// the ring, and the partials (36 chunks of 64 x 128 floats at batch 64) cost about what the
// reduce kernel takes to read them.

namespace {
constexpr int64_t kMinChunkSlices = 4;  // 256 values of k in bf16, 128 in f32: a ring of 4 stages, filled once
int split_tile_n(const MatmulParams& p) { return p.n > 64 ? 128 : 64; }
template <class E>
int64_t slices_of(const MatmulParams& p) {
  return (p.k + kStageK<E> - 1) / kStageK<E>;
}
template <class E>
int64_t chunk_slices_for(const MatmulParams& p, int64_t splits) {
  splits = std::max<int64_t>(splits, 1);
  return std::max(kMinChunkSlices, (slices_of<E>(p) + splits - 1) / splits);
}
// The chunks for `tiles` block tiles on `sms` SMs: as many as fill the SMs once (one for k = 0).
template <class E>
int64_t chunks_for(const MatmulParams& p, int64_t tiles, int sms) {
  const int64_t chunk = chunk_slices_for<E>(p, std::max<int64_t>(sms / std::max<int64_t>(tiles, 1), 1));
  return std::max<int64_t>((slices_of<E>(p) + chunk - 1) / chunk, 1);
}
template <class E>
size_t partials_offset(const MatmulParams& p, const E* a, const E* b) {
  return (wgmma_workspace(p, a, b) + 255) / 256 * 256;
}
// 16 and 17: the product in `splits` chunks of k at most (one: no split), its partial sums after
// the packed operands in `workspace`, added in order by 09's reduce kernel.
template <class E>
void split_k_wgmma(const MatmulParams& p, const E* a, const E* b, E* c, const DeviceEpilogue<E>& e, int tile_n,
                   int64_t splits, void* workspace, cudaStream_t stream, bool exact, const char* name) {
  KILN_CHECK(splits >= 1, ValueError, "cuda matmul ", name, ": ", splits, " chunks of k");
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  const int64_t chunk = chunk_slices_for<E>(p, splits), chunks = (slices_of<E>(p) + chunk - 1) / chunk;
  if (chunks <= 1) return wgmma_run(p, a, b, c, e, tile_n, workspace, stream, {}, exact);
  KILN_CHECK(p.batch == 1, ShapeError, "cuda matmul ", name, ": k is split for one product at a time, got a batch of ",
             p.batch);
  auto* partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + partials_offset(p, a, b));
  wgmma_run(p, a, b, c, e, tile_n, workspace, stream, SplitK{partials, chunks, static_cast<int>(chunk)}, exact);
  split_k_reduce(partials, c, p.m, p.n, chunks, e, stream);
}
}  // namespace

int64_t bf16_wgmma_split_k_splits(const MatmulParams& p, int sms) {
  return chunks_for<bf16>(p, ((p.m + BM - 1) / BM) * ((p.n + split_tile_n(p) - 1) / split_tile_n(p)), sms);
}

size_t bf16_wgmma_split_k_workspace(const MatmulParams& p, const bf16* a, const bf16* b, int64_t splits) {
  return partials_offset(p, a, b) + static_cast<size_t>(splits * p.m * p.n) * sizeof(float);
}

void bf16_wgmma_split_k_run(const MatmulParams& p, const bf16* a, const bf16* b, bf16* c,
                            const DeviceEpilogue<bf16>& e, int64_t splits, void* workspace, cudaStream_t stream) {
  KILN_CHECK(p.batch == 1, ShapeError, "cuda matmul 16_bf16_wgmma_split_k: one product at a time, got a batch of ",
             p.batch);
  split_k_wgmma(p, a, b, c, e, split_tile_n(p), splits, workspace, stream, false, "16_bf16_wgmma_split_k");
}

// ---- version 17: 3xTF32 ----
// f32 accuracy from Hopper's tensor cores: 12's 3xTF32 (each input split into a TF32 head and the
// rest, three products each, sums of one stage at a time from zero, NaN results recomputed in f32)
// on 13's warp-specialised kernel. The consumers split the rows operand's fragments in registers
// and the columns operand's tile in shared memory after it lands (the kernel's comment says how),
// on 128 x 64 tiles (a stage of 32 KB with B's tail, six of them). Products of a few tiles and a
// long k (the MNIST CNN's fc1) split k as 16 does, as many chunks as fill the SMs once; a chunk's
// NaN results are recomputed over its own k.
// Measured (one H200, kernel-bench, docs/runs/2026-11-28-h200-3xtf32-regs), against cuBLAS SGEMM
// (FP32) in the same call: 4096^3 at 81.2 TFLOP/s [fig cuda.matmul.x3.4096.17.tflops], B^T
// 1.72 ms [fig cuda.matmul.x3.4096Bt.17.ms] against 2.75 [fig cuda.matmul.x3.4096Bt.cublas-fp32.ms];
// the CNN's fc1 at batch 512 (512 x 128 x 9216 B^T, split) 26.8 µs [fig cuda.matmul.x3.fc1-b512.17.us]
// against 44.5 [fig cuda.matmul.x3.fc1-b512.cublas-fp32.us], its input gradient at batch 64
// (64 x 9216 x 128) 9.7 µs [fig cuda.matmul.x3.dx-b64.17.us] against 10.0 [fig cuda.matmul.x3.dx-b64.cublas-fp32.us],
// its weight gradient at batch 512 (9216 x 128 x 512 A^T, B packed: 144 tiles, one wave and a few
// blocks on 132 SMs) 46.6 µs [fig cuda.matmul.x3.dw-b512.17.us] against 12's 50.8 [fig cuda.matmul.x3.dw-b512.12.us].
// In production for f32 on sm_90 (matmul.cu), mnist-train's f32 epoch 2 went from
// 0.164 s [fig cuda.conv2d.weight-ring.cnn.b512.epoch2] to 0.151 [fig cuda.matmul.x3.epoch2.b512] at
// batch 512, and from 0.344 [fig cuda.conv2d.weight-ring.cnn.b64.epoch2] to 0.335 [fig cuda.matmul.x3.epoch2.b64]
// at batch 64. Its first form split both tiles in shared memory (72 KB of traffic a stage besides
// wgmma's reads, where B's split alone is 24 KB): 4096^3 took 2.12 ms [fig cuda.matmul.x3-smem.4096.17.ms]
// (docs/runs/2026-11-28-h200-3xtf32-wgmma). 3xTF32 costs three products, so its bound is a third of
// 13's TF32 rate, which was 328.9 TFLOP/s [fig cuda.matmul.x3.4096.13.tflops] at 4096^3 in the
// same call (kernels/cuda/NOTES.md).
// Its store checked each result for a NaN, a test and a branch around the call at every one. Now a
// thread, or a warpgroup where the tile goes through shared memory (the barrier ORs the flag),
// checks once and stores through RecomputeNan only where it holds a NaN. Against c2c87da in one
// call (one H200, docs/runs/2026-11-29-h200-nan-once), µs: fc1's input gradient at batch 512
// (512 x 9216 x 128) 38.17 [fig cuda.matmul.nan-once.dx.old.us] -> 36.25 [fig cuda.matmul.nan-once.dx.new.us],
// its weight gradient (9216 x 128 x 512 A^T) 39.61 [fig cuda.matmul.nan-once.dw.old.us]
// -> 37.84 [fig cuda.matmul.nan-once.dw.new.us]; TF32's (no check, but its store's code rearranged)
// 20.52 [fig cuda.matmul.nan-once.dx-tf32.old.us] -> 20.82 [fig cuda.matmul.nan-once.dx-tf32.new.us];
// the CNN's epochs moved within their spread (thousands of images a second, f32 at batch 512
// 620.4 [fig cuda.matmul.nan-once.b512.old.images-per-s] -> 621.7 [fig cuda.matmul.nan-once.b512.new.images-per-s],
// at batch 64 330.8 [fig cuda.matmul.nan-once.b64.old.images-per-s] -> 331.7 [fig cuda.matmul.nan-once.b64.new.images-per-s],
// TF32 at batch 512 859.8 [fig cuda.matmul.nan-once.b512tf32.old.images-per-s]
// -> 858.1 [fig cuda.matmul.nan-once.b512tf32.new.images-per-s]).
// Predicted: a sixth off, from the tests' share of ncu's stall samples
// (docs/runs/2026-11-29-h200-bn-fc1-ncu); got a twentieth. What bounds these short-k products is
// the tile's own latency, one tile a block and four slices of k (kernels/cuda/NOTES.md).
// So 17 is persistent (Tile::PERSISTENT): a grid of at most a block an SM, each block taking item
// after item, the producer loading the next item's slices while the consumers finish and store
// this one, the transposed store in shared memory of its own (the ring is no longer free then).
// Against 89c67de in one call (one H200, docs/runs/2026-11-29-h200-persistent-17), µs: fc1's
// input gradient at batch 512 (576 tiles) 36.16 [fig cuda.matmul.persistent.dx.old.us]
// -> 31.74 [fig cuda.matmul.persistent.dx.new.us], its weight gradient (144 tiles: 12 blocks take
// two) 37.87 [fig cuda.matmul.persistent.dw.old.us] -> 36.47 [fig cuda.matmul.persistent.dw.new.us];
// TF32's, not persistent, 20.82 [fig cuda.matmul.persistent.dx-tf32.old.us]
// -> 20.95 [fig cuda.matmul.persistent.dx-tf32.new.us]; the CNN's epochs, thousands of images a
// second, f32 at batch 512 625.3 [fig cuda.matmul.persistent.b512.old.images-per-s]
// -> 627.9 [fig cuda.matmul.persistent.b512.new.images-per-s], at batch 64 (where no 17 product has
// more tiles than SMs) 332.8 [fig cuda.matmul.persistent.b64.old.images-per-s]
// -> 330.3 [fig cuda.matmul.persistent.b64.new.images-per-s], TF32 at batch 512
// 860 [fig cuda.matmul.persistent.b512tf32.old.images-per-s]
// -> 857.8 [fig cuda.matmul.persistent.b512tf32.new.images-per-s]. Predicted about 20 µs [nofig] for the input
// gradient; the consumers still wait on each item's first stage and run its store before the
// next item's products, which one pair of consumer warpgroups on the same item cannot overlap.
// Large products moved within a few per cent (docs/runs/2026-11-29-h200-persistent-17-large), µs:
// 4096^3 1650 [fig cuda.matmul.persistent.4096.old.us] -> 1602 [fig cuda.matmul.persistent.4096.new.us]
// (B^T 1625 [fig cuda.matmul.persistent.4096-bt.old.us] -> 1647 [fig cuda.matmul.persistent.4096-bt.new.us]),
// 2048^3 217.2 [fig cuda.matmul.persistent.2048.old.us] -> 209.3 [fig cuda.matmul.persistent.2048.new.us]
// (B^T 212.3 [fig cuda.matmul.persistent.2048-bt.old.us] -> 210.8 [fig cuda.matmul.persistent.2048-bt.new.us]).

int64_t tf32x3_wgmma_splits(const MatmulParams& p, const float* a, const float* b, int sms) {
  if (p.batch != 1) return 1;
  const Plan plan = plan_for(p, a, b);
  const int64_t rows = plan.swap ? p.n : p.m, cols = plan.swap ? p.m : p.n;
  return chunks_for<float>(p, ((rows + BM - 1) / BM) * ((cols + 63) / 64), sms);
}

size_t tf32x3_wgmma_workspace(const MatmulParams& p, const float* a, const float* b, int64_t splits) {
  const int64_t chunks = splits > 1 && p.batch == 1 ? splits : 0;
  return partials_offset(p, a, b) + static_cast<size_t>(chunks * p.m * p.n) * sizeof(float);
}

void tf32x3_wgmma_run(const MatmulParams& p, const float* a, const float* b, float* c,
                      const DeviceEpilogue<float>& e, int64_t splits, void* workspace, cudaStream_t stream) {
  split_k_wgmma(p, a, b, c, e, 64, splits, workspace, stream, true, "17_3xtf32_wgmma");
}

void tf32x3_wgmma(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
                  cudaStream_t stream) {
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  int device = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&device));
  if (!tf32_wgmma_applies(p, device)) return split_tf32x3(p, a, b, c, e, stream);
  const int64_t splits = tf32x3_wgmma_splits(p, a, b, device_attribute(cudaDevAttrMultiProcessorCount, device));
  const size_t bytes = tf32x3_wgmma_workspace(p, a, b, splits);
  void* workspace = nullptr;
  if (bytes > 0) KILN_CUDA_CHECK(cudaMallocAsync(&workspace, bytes, stream));
  tf32x3_wgmma_run(p, a, b, c, e, splits, workspace, stream);
  if (workspace) KILN_CUDA_CHECK(cudaFreeAsync(workspace, stream));
}

}  // namespace kiln::cuda::matmul
