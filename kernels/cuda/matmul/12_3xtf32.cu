// Version 12, f32 accuracy from TF32 tensor cores ("3xTF32"). Every input x is split into a TF32
// head hi = tf32(x) (rounded) and the rest lo = x - hi (exact in f32; the tensor core reads its
// top 11 bits), and each product a * b is formed as lo_a * hi_b + hi_a * lo_b + hi_a * hi_b, three
// mma instead of one. What is left out (lo_a * lo_b, and lo's truncation) is about 2^-21 of the
// product, where f32's own rounding is 2^-24: with errors of either sign over a sum of k products
// the result lands within a few f32 roundings of the exact one (tests/cuda/test_cuda_matmul.cpp
// measures it against 07 on every layout). Three mma still cost less than the FFMA they replace.
// Two things keep it there:
// - Short sums on the tensor cores. mma adds into its accumulator rounding toward zero, a bias of
//   up to an ulp per addition that grows with k: accumulating all of a 4096-long k in the mma
//   registers gave an error that grew linearly with k (history: NOTES.md). So the mma sum only one
//   slice (BK = 32 values of k, 12 mma per tile, the first with a zero accumulator), and each
//   slice's partial joins the running sum through an ordinary, correctly rounded f32 add (the error
//   kernel-bench measures: kernels/README.md's 12_3xtf32 rows). That takes a second set of
//   accumulators, so warp tiles are 64 x 32 (as in 10): with 3 mma per fragment load, shared memory
//   is not the limit.
// - Infinities and NaN. inf splits into hi = inf and lo = inf - inf = NaN, so a row or column that
//   holds an inf comes out NaN where f32 gives inf. Guarding every split would cost the hot loop a
//   third of its instructions; instead the epilogue recomputes any NaN result as a plain f32 dot
//   product of its row and column (tensor_core.cuh's RecomputeNan), which gives f32's inf, or NaN
//   where f32 does too. Finite data never takes that path; data full of infinities takes it often
//   and slowly.
// - The split in three instructions (tensor_core.cuh's split_tf32: add, mask, subtract) instead of
//   the conversion instruction's five, which also test for inf and NaN: the same bits for every
//   input but NaN, in less time (kernels/cuda/NOTES.md).
// Otherwise 11's data path: cp.async pipeline (3 stages), ldmatrix for KC tiles. Without 16-byte
// aligned operands it runs 07 (f32 on the CUDA cores). Figures: kernels/README.md.
#include <cstdint>

#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::matmul {
namespace {

template <class G>
__global__ void __launch_bounds__(G::THREADS, 1) split_tf32x3_kernel(Args<float> args) {
  constexpr int MI = G::MI, NI = G::NI;
  extern __shared__ __align__(16) float smem_split_tf32x3[];
  const G g(args);
  float acc[MI][NI][4] = {};
  cp_async_pipeline<G::STAGES>(g.load_a, g.load_b, args.k, smem_split_tf32x3, [&](const float* as, const float* bs) {
    mma_3xtf32_add_slice<typename G::TA, typename G::TB>(acc, as, bs, g.wm0, g.wn0, g.lane);
  });
  store_mma_tiles(args, acc, g.i0, g.j0, g.wm0, g.wn0, g.lane, RecomputeNan{args.panel_a(), args.panel_b(), 0, args.k});
}

// 128 x 128 block tiles of 8 warps of 64 x 32, BK = 32, 3 stages.
template <bool A_KC, bool B_KC>
using Gemm12 = AsyncGemm<128, 128, 32, 64, 32, 3, A_KC, B_KC>;

}  // namespace

void split_tf32x3(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  if (!async_applies(p, a, b)) return warptile(p, a, b, c, e, stream);
  launch_async<Gemm12>(p, a, b, c, e, stream, "matmul 12_3xtf32",
                       [](auto a_kc, auto b_kc) { return split_tf32x3_kernel<Gemm12<a_kc, b_kc>>; });
}

}  // namespace kiln::cuda::matmul
