// Version 10, TF32 tensor cores fed by cp.async: 08's arithmetic (mma.sync m16n8k8 TF32, a 128 x
// 128 block tile, 8 warps of 64 x 32, 4 x 4 mma tiles per warp and k-step of 8) with the data path
// rebuilt so that the tensor cores wait less:
// - Global -> shared by cp.async.cg (16 bytes, bypassing L1 and the registers): 08 staged every
//   chunk through registers and converted it there, which costs registers and issue slots and
//   serialises load and store. Here a thread only issues copies.
// - A 3-stage ring of BK = 32 slices (08: 2 stages of 16): while the warps multiply slice s,
//   slices s + 1 and s + 2 are in flight (cp.async.commit_group / wait_group 1; the loop is
//   cp_async_pipeline in tensor_core.cuh, shared with 11 and 12). 110.6 KB of dynamic shared
//   memory per block, 2 blocks per SM on an H100.
// - Shared tiles are kept in the layout memory already has, so cp.async copies straight through
//   with no transpose: an operand that runs along k (A not transposed, B transposed) is stored
//   x-major S[x][p] with rows of BK + 4 floats, one that runs along x is stored k-major S[p][x]
//   with rows of BX + 8. Either padding puts the 32 lanes of a fragment load (lane = 4g + t
//   reads (p0 + t, x0 + g)) on 32 different banks: 4g + t for rows of 36, 8t + g for rows of 136.
//   Fragments are plain 32-bit shared loads (ldmatrix has no 32-bit transposing form for tf32).
// - Precision: fragments go to mma as raw f32 bits. The tensor core reads the top 19 bits (sign,
//   exponent, 10 mantissa bits), so each input is truncated toward zero to TF32 rather than
//   rounded (08: cvt.rna): up to 2^-10 relative per input instead of 2^-11, still ~1e-3 relative
//   on a product (core/precision.h), f32 accumulation. Used only when kiln::allow_tf32() is on.
// - Edges: a chunk that crosses the edge of its operand copies only its valid bytes (cp.async's
//   src-size operand, the rest zero-filled), a chunk outside copies none, so any m, n and k work.
// The fast path needs 16-byte cp.async sources: both base pointers 16-byte aligned and lda, ldb
// and both batch strides multiples of 4 (async_applies); any transposes. Otherwise it runs
// 08. Figures: kernels/README.md, from kernel-bench.
#include <cstdint>

#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"

namespace kiln::cuda::matmul {
namespace {

template <class G>
__global__ void __launch_bounds__(G::THREADS, 2) tf32_async_kernel(Args<float> args) {
  extern __shared__ __align__(16) float smem_tf32_async[];
  const G g(args);
  float acc[G::MI][G::NI][4] = {};
  cp_async_pipeline<G::STAGES>(g.load_a, g.load_b, args.k, smem_tf32_async, [&](const float* as, const float* bs) {
#pragma unroll
    for (int kk = 0; kk < G::BK; kk += 8) {
      // Raw f32 bits straight into mma: truncated to TF32.
      uint32_t a[G::MI][4], b[G::NI][2];
#pragma unroll
      for (int mi = 0; mi < G::MI; ++mi) load_a_fragment<typename G::TA, false>(a[mi], as, kk, g.wm0 + mi * 16, g.lane);
#pragma unroll
      for (int ni = 0; ni < G::NI; ni += 2)
        load_b_fragments<typename G::TB, false>(b[ni], b[ni + 1], bs, kk, g.wn0 + ni * 8, g.lane);
#pragma unroll
      for (int mi = 0; mi < G::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < G::NI; ++ni) mma_16x8x8(acc[mi][ni], a[mi], b[ni]);
    }
  });
  store_mma_tiles(args, acc, g.i0, g.j0, g.wm0, g.wn0, g.lane);
}

// 128 x 128 block tiles of 8 warps of 64 x 32, BK = 32, 3 stages.
template <bool A_KC, bool B_KC>
using Gemm10 = AsyncGemm<128, 128, 32, 64, 32, 3, A_KC, B_KC>;

}  // namespace

void tf32_async(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  if (!async_applies(p, a, b)) return tf32_mma(p, a, b, c, e, stream);
  launch_async<Gemm10>(p, a, b, c, e, stream, "matmul 10_tf32_async",
                       [](auto a_kc, auto b_kc) { return tf32_async_kernel<Gemm10<a_kc, b_kc>>; });
}

}  // namespace kiln::cuda::matmul
