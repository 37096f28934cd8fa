// The middle-axis versions of reduce.cu on raw device pointers, for kernel-bench and the tests.
// CudaBackend::reduce is the production path: it picks a version by the op and the layout.
//
// x [outer, n, inner] (contiguous) -> out [outer, inner]; `values` receives sum/mean/max/min,
// `index` (i32) argmax/argmin, the other one may be null. f32, f64, i32 and bf16 are instantiated,
// and values of f32 from bf16 and of bf16 from f32 (the stages of a sum over several axes).
// Every function queues its kernels on `stream` and returns.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kiln/core/backend.h"

namespace kiln::cuda::reduce {

// version 3: a block of 32 x 8 threads per 32 neighbouring outputs; every op. n > 0.
template <class T, class Out = T>
void column_tiles(ReduceOp op, const T* x, Out* values, int32_t* index, int64_t outer, int64_t n, int64_t inner,
                  cudaStream_t stream);

// version 4 (sum and mean): 16-byte loads, several in flight, and the reduced axis cut into
// `splits` chunks summed by a second pass in a fixed order. column_packs_splits gives the
// production count, from the shape alone; the workspace holds column_packs_workspace_bytes
// (none when splits is 1; `workspace` may then be null). n > 0.
int64_t column_packs_splits(int64_t outer, int64_t n, int64_t inner);
// version 6 (inner == 1, rows longer than a warp takes): the elements of a row each block takes.
// A row of n is cut into ceil(n / chunk) chunks; one chunk (chunk >= n) is version 2.
int64_t row_chunk(int64_t rows, int64_t n);
template <class T>
size_t column_packs_workspace_bytes(int64_t outer, int64_t inner, int64_t splits);
template <class T, class Out = T>
void column_packs(ReduceOp op, const T* x, Out* values, int64_t outer, int64_t n, int64_t inner, int64_t splits,
                  void* workspace, cudaStream_t stream);

}  // namespace kiln::cuda::reduce
