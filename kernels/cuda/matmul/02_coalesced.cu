// Version 02, coalesced: the same arithmetic as 01, but threadIdx.x now picks the column. The 32
// threads of a warp hold one row of C and 32 neighbouring columns, so their reads of op(B) (when B
// is not transposed) and their writes of C are 32 consecutive floats: one 128-byte transaction
// instead of 32. Their reads of op(A) are all one address, a broadcast.
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

template <int BS>
__global__ void __launch_bounds__(BS * BS) coalesced_kernel(Args<float> args) {
  const int64_t i = blockIdx.y * int64_t{BS} + threadIdx.y;
  const int64_t j = blockIdx.x * int64_t{BS} + threadIdx.x;  // neighbouring threads, neighbouring columns
  if (i >= args.m || j >= args.n) return;
  const Panel<float> A = args.panel_a(), B = args.panel_b();
  float acc = 0;
  for (int64_t p = 0; p < args.k; ++p) acc += A.get(p, i) * B.get(p, j);
  args.c_entry()[i * args.n + j] = args.epilogue(acc, j);
}

}  // namespace

void coalesced(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  constexpr int BS = 32;
  launch_batched(p, a, b, c, e, BS, BS, "matmul 02_coalesced", [&](dim3 grid, const Args<float>& args) {
    coalesced_kernel<BS><<<grid, dim3(BS, BS), 0, stream>>>(args);
  });
}

}  // namespace kiln::cuda::matmul
