// argmax's order, shared by the reductions (reduce.cu) and the loss that counts a classifier's
// correct predictions as it goes (cross_entropy.cu): NaN first (the first NaN wins, as in
// PyTorch), then the larger value, then the lower index.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace kiln::cuda {

template <class T>
__device__ inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// Whether (a, ia) beats (b, ib) for max (largest) or min: NaN first, then value, then lower index.
template <class T>
__device__ inline bool beats(T a, int64_t ia, T b, int64_t ib, bool largest) {
  const bool na = is_nan(a), nb = is_nan(b);
  if (na || nb) return na && (!nb || ia < ib);
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

}  // namespace kiln::cuda
