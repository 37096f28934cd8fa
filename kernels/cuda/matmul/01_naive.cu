// Version 01, naive: one thread per element of C, each walking its row of op(A) and its column of
// op(B) straight from global memory. Thread x picks the row, so the 32 threads of a warp hold 32
// different rows: their reads of A and writes of C are 32 scattered addresses (uncoalesced),
// and their reads of B one broadcast address. The baseline the ladder climbs from.
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

template <int BS>
// BS * BS threads: the bound tells the compiler to fit in 64 registers, or a 1024-thread block fails
// to launch.
__global__ void __launch_bounds__(BS * BS) naive_kernel(Args<float> args) {
  const int64_t i = blockIdx.y * int64_t{BS} + threadIdx.x;  // threadIdx.x -> row: the mistake 02 fixes
  const int64_t j = blockIdx.x * int64_t{BS} + threadIdx.y;
  if (i >= args.m || j >= args.n) return;
  const Panel<float> A = args.panel_a(), B = args.panel_b();
  float acc = 0;
  for (int64_t p = 0; p < args.k; ++p) acc += A.get(p, i) * B.get(p, j);
  args.c_entry()[i * args.n + j] = args.epilogue(acc, j);
}

}  // namespace

void naive(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  constexpr int BS = 32;
  launch_batched(p, a, b, c, e, BS, BS, "matmul 01_naive", [&](dim3 grid, const Args<float>& args) {
    naive_kernel<BS><<<grid, dim3(BS, BS), 0, stream>>>(args);
  });
}

}  // namespace kiln::cuda::matmul
