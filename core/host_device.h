// KILN_HOST_DEVICE: a function of core's small value types (bf16, philox::Key) that CUDA kernels
// call as well as host code; plain C++ outside nvcc.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
