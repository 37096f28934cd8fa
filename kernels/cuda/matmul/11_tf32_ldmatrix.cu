// Version 11, TF32 with 64 x 64 warp tiles and ldmatrix: 10's cp.async pipeline and shared-memory
// layouts, with the changes that let its tensor cores be fed from shared memory fast enough.
// - Warp tiles of 64 x 64 (4 x 8 mma tiles) instead of 64 x 32. Per k-step of 8 a warp reads
//   64 x 8 values of A and 8 x 64 of B (4 KB) for 32 mma (64K flops): 16 flops per byte of shared
//   memory read, where 10 read 3 KB for 16 mma (10.7). With the cp.async writes counted too, 10
//   needed about 1,400 flops per clock out of shared memory's 128 bytes per clock per SM, close
//   to what mma.sync delivers on an H100: both units were near their limit. A thread now holds
//   128 accumulators, so a 128 x 256 block tile of 8 warps runs one block per SM.
// - ldmatrix for operands stored with k along their rows (A not transposed, B transposed): one
//   ldmatrix.x4 loads a whole A fragment, or the B fragments of two 8-column tiles (tensor_core.cuh
//   says why a b16 "matrix" row is 4 floats of a fragment), where 32-bit loads took 4. Operands
//   stored k-major keep 10's conflict-free 32-bit loads: ldmatrix's transposing form moves 16-bit
//   halves, which would split a float.
// - Inputs truncated to TF32 as in 10 (raw f32 bits into mma): rounding them first (cvt.rna, as 08)
//   measured slower (history: kernels/cuda/NOTES.md).
// - B's fragments for a k-step are loaded first, then A's one 16-row tile at a time, so that a
//   thread holds 16 + 4 fragment registers beside its accumulators; with the tile loader's
//   addresses worked out once (AsyncTileLoader), nothing spills.
// - Two block tiles: 128 x 256 (8 warps, one block per SM) for large products, 128 x 128 (4 warps,
//   two blocks per SM) where 128 x 256 tiles would not fill the GPU twice over: 1024^3 has 32 such
//   tiles for 132 SMs and ran at 0.055 ms [fig cuda.matmul.11.1024.ms] against
//   0.035 [fig cuda.matmul.11-128x128.1024.ms] with 128 x 128 (H100, kernel-bench,
//   docs/runs/2026-11-26-h100).
// BK = 32, 3 stages. Needs 16-byte aligned operands for cp.async (async_applies); else runs 08.
// Figures: kernels/README.md, from kernel-bench; the other tiles and pipelines tried:
// kernels/cuda/NOTES.md.
#include <cstdint>

#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::matmul {
namespace {

template <class G, int MIN_BLOCKS>
__global__ void __launch_bounds__(G::THREADS, MIN_BLOCKS) tf32_ldmatrix_kernel(Args<float> args) {
  extern __shared__ __align__(16) float smem_tf32_ldmatrix[];
  const G g(args);
  float acc[G::MI][G::NI][4] = {};
  cp_async_pipeline<G::STAGES>(g.load_a, g.load_b, args.k, smem_tf32_ldmatrix, [&](const float* as, const float* bs) {
    // raw f32 bits, truncated to TF32 by mma (as in 10)
    mma_slice<typename G::TA, typename G::TB>(acc, as, bs, g.wm0, g.wn0, g.lane);
  });
  store_mma_tiles(args, acc, g.i0, g.j0, g.wm0, g.wn0, g.lane);
}

// 64 x 64 warp tiles, BK = 32, 3 stages; 8 warps on 128 x 256 (one block per SM) or 4 on 128 x 128.
template <bool A_KC, bool B_KC>
using Gemm11 = AsyncGemm<128, 256, 32, 64, 64, 3, A_KC, B_KC>;
template <bool A_KC, bool B_KC>
using Gemm11Narrow = AsyncGemm<128, 128, 32, 64, 64, 3, A_KC, B_KC>;

}  // namespace

void tf32_ldmatrix(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  if (!async_applies(p, a, b)) return tf32_mma(p, a, b, c, e, stream);
  launch_async<Gemm11>(p, a, b, c, e, stream, "matmul 11_tf32_ldmatrix",
                       [](auto a_kc, auto b_kc) { return tf32_ldmatrix_kernel<Gemm11<a_kc, b_kc>, 1>; });
}
void tf32_ldmatrix_128x128(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  if (!async_applies(p, a, b)) return tf32_mma(p, a, b, c, e, stream);
  launch_async<Gemm11Narrow>(p, a, b, c, e, stream, "matmul 11_tf32_ldmatrix_128x128",
                             [](auto a_kc, auto b_kc) { return tf32_ldmatrix_kernel<Gemm11Narrow<a_kc, b_kc>, 2>; });
}

}  // namespace kiln::cuda::matmul
