// Every CUDA runtime call goes through KILN_CUDA_CHECK: a failure throws with the call, the
// error's name and text, and file:line. KILN_CUDA_LAUNCH_CHECK(op) checks a kernel launch and
// names the op that launched it.
#pragma once

#include <cuda_runtime.h>

#include "kiln/core/error.h"

#define KILN_CUDA_CHECK(call)                                                                     \
  do {                                                                                            \
    cudaError_t kiln_err_ = (call);                                                               \
    KILN_CHECK(kiln_err_ == cudaSuccess, ::kiln::Error, "CUDA call ", #call, " failed: ",          \
               cudaGetErrorName(kiln_err_), " (", cudaGetErrorString(kiln_err_), ")");           \
  } while (0)

#define KILN_CUDA_LAUNCH_CHECK(op)                                                                \
  do {                                                                                            \
    cudaError_t kiln_err_ = cudaGetLastError();                                                   \
    KILN_CHECK(kiln_err_ == cudaSuccess, ::kiln::Error, "cuda ", op, ": kernel launch failed: ",    \
               cudaGetErrorName(kiln_err_), " (", cudaGetErrorString(kiln_err_), ")");           \
  } while (0)
