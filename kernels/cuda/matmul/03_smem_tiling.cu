// Version 03, shared-memory tiling: a block of BS x BS threads owns a BS x BS tile of C. For each
// slice of BS values of p it copies the BS x BS tiles of op(A) and op(B) into shared memory (each
// element read from global memory once per block instead of once per thread: BS times less
// traffic), synchronises, and every thread accumulates its dot product from shared memory.
// Also the f64 kernel (gradchecks): the arithmetic is the same in any type.
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

template <class T, int BS>
// BS * BS = 1024 threads: the bound makes the compiler fit in 64 registers (it takes 70 unbounded,
// and 1024 x 70 exceeds the 65536 an SM has, so the launch would fail).
__global__ void __launch_bounds__(BS * BS) smem_tiling_kernel(Args<T> args) {
  // [p][x] tiles. The +1 pad: when memory runs along p, the loader writes down a column of the
  // tile, and a row length of BS (a multiple of 32 banks) would put the whole column in one bank.
  __shared__ T As[BS][BS + 1];
  __shared__ T Bs[BS][BS + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * BS + tx;
  const int64_t i0 = blockIdx.y * int64_t{BS}, j0 = blockIdx.x * int64_t{BS};
  const Panel<T> A = args.panel_a(), B = args.panel_b();
  T acc = 0;
  for (int64_t p0 = 0; p0 < args.k; p0 += BS) {
    load_tile<BS, BS, BS + 1, BS * BS>(A, p0, i0, &As[0][0], tid);
    load_tile<BS, BS, BS + 1, BS * BS>(B, p0, j0, &Bs[0][0], tid);
    __syncthreads();
    // As[p][ty] is one address for the warp (a broadcast); Bs[p][tx] 32 consecutive words, 32 banks.
    for (int p = 0; p < BS; ++p) acc += As[p][ty] * Bs[p][tx];
    __syncthreads();  // before the next slice overwrites the tiles
  }
  const int64_t i = i0 + ty, j = j0 + tx;
  if (i < args.m && j < args.n) args.c_entry()[i * args.n + j] = args.epilogue(acc, j);
}

template <class T>
void run(const MatmulParams& p, const T* a, const T* b, T* c, const DeviceEpilogue<T>& e, cudaStream_t stream, const char* name) {
  constexpr int BS = 32;
  launch_batched(p, a, b, c, e, BS, BS, name, [&](dim3 grid, const Args<T>& args) {
    smem_tiling_kernel<T, BS><<<grid, dim3(BS, BS), 0, stream>>>(args);
  });
}

}  // namespace

void smem_tiling(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e, cudaStream_t stream) {
  run(p, a, b, c, e, stream, "matmul 03_smem_tiling");
}

void smem_tiling_f64(const MatmulParams& p, const double* a, const double* b, double* c, const DeviceEpilogue<double>& e, cudaStream_t stream) {
  run(p, a, b, c, e, stream, "matmul 03_smem_tiling f64");
}

}  // namespace kiln::cuda::matmul
