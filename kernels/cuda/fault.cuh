// How a kernel reports a bad index it cannot throw (see DeviceFault in cuda_backend.h): the first
// fault wins the compare-and-swap on `op`; the host throws it at the next synchronisation.
// Threads that find a fault skip the element (they write nothing out of bounds).
#pragma once

#include "kiln/kernels/cuda/cuda_backend.h"

namespace kiln::cuda {

__device__ inline void report_fault(DeviceFault* f, FaultOp op, int32_t value, int64_t position, int64_t bound) {
  if (atomicCAS(&f->op, 0, static_cast<int32_t>(op)) == 0) {
    f->value = value;
    f->position = position;
    f->bound = bound;
  }
}

}  // namespace kiln::cuda
