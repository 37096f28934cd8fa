// The CPU backend's general matrix multiply and the epilogue of its products, shared by matmul.cpp
// and conv2d.cpp (internal to kernels/cpu; not part of kiln's API).
#pragma once

#include <cstdint>

#include "kiln/core/backend.h"

namespace kiln::cpu {

// Output element v of column (or channel) j through an epilogue (core/backend.h): v + bias[j] when
// there is a bias, then the activation.
template <class T>
inline T apply_epilogue(T v, const T* bias, int64_t j, const Epilogue& e) {
  if (bias) v += bias[j];
  return e.activation == Activation::relu && v < T(0) ? T(0) : v;  // a NaN passes, as UnaryOp::relu
}

// C = op(A) * op(B), or C += op(A) * op(B) when `accumulate`. Row-major throughout.
// op(A) is m x k: A is m x k with row stride lda, or, when trans_a, k x m with row stride lda.
// op(B) is k x n: B is k x n with row stride ldb, or, when trans_b, n x k with row stride ldb.
// C is m x n with row stride ldc. Runs on the thread pool when the product is large enough, and
// single-threaded when called from inside a parallel_for. Defined for float and double.
template <class T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
          const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate);

extern template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                 const float*, int64_t, float*, int64_t, bool);
extern template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t,
                                  const double*, int64_t, double*, int64_t, bool);

}  // namespace kiln::cpu
