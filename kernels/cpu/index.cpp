// Indexing along the middle axis of a contiguous [outer, n, inner] tensor:
//   gather     out[o, j, i] = x[o, indices[j], i]          out [outer, m, inner]
//   index_add  out[o, indices[j], i] += src[o, j, i]        out [outer, n, inner]
// Each (o, j) moves one contiguous row of `inner` elements, so both are row copies. gather's rows
// are independent and split over threads; index_add's may collide (a repeated index adds twice),
// so it splits over `o` and runs j in order within each, which also keeps the sum's order fixed.
// Indices are validated first: an index outside [0, n) throws ValueError naming its position.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kGrain = 16 * 1024;  // elements per parallel chunk

void check_indices(const char* op, const TensorRef& indices, int64_t n) {
  KILN_CHECK(indices.dtype == DType::i32, DTypeError, "cpu backend: ", op, " takes i32 indices, got ",
             indices.dtype);
  const int32_t* idx = indices.data<int32_t>();
  for (int64_t j = 0; j < indices.numel(); ++j)
    KILN_CHECK(idx[j] >= 0 && idx[j] < n, ValueError, "cpu ", op, ": index ", idx[j], " at position ",
               j, " is outside [0, ", n, ")");
}

}  // namespace

void CpuBackend::gather(const TensorRef& x, const TensorRef& indices, const TensorRef& out) {
  const int64_t outer = x.shape[0], n = x.shape[1], inner = x.shape[2], m = indices.numel();
  check_indices("gather", indices, n);
  const int32_t* idx = indices.data<int32_t>();
  const size_t row_bytes = static_cast<size_t>(inner) * dtype_size(x.dtype);
  const auto* src = static_cast<const unsigned char*>(x.buffer) + static_cast<size_t>(x.offset) * dtype_size(x.dtype);
  auto* dst = static_cast<unsigned char*>(out.buffer) + static_cast<size_t>(out.offset) * dtype_size(out.dtype);
  // One task per output row (o, j); a chunk covers enough rows to be worth a thread.
  parallel_for(outer * m, std::max<int64_t>(1, kGrain / std::max<int64_t>(inner, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t o = r / m, j = r % m;
      std::memcpy(dst + static_cast<size_t>(r) * row_bytes,
                  src + static_cast<size_t>(o * n + idx[j]) * row_bytes, row_bytes);
    }
  });
}

void CpuBackend::index_add(const TensorRef& src, const TensorRef& indices, const TensorRef& out) {
  const int64_t outer = out.shape[0], n = out.shape[1], inner = out.shape[2], m = indices.numel();
  check_indices("index_add", indices, n);
  const int32_t* idx = indices.data<int32_t>();
  visit_arithmetic(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, uint8_t>) {
      KILN_FAIL(DTypeError, "cpu backend: index_add does not take u8");
    } else {
      const T* s = src.data<T>();
      T* d = out.data<T>();
      parallel_for(outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(m * inner, 1)), [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o)
          for (int64_t j = 0; j < m; ++j) {
            const T* from = s + (o * m + j) * inner;
            T* to = d + (o * n + idx[j]) * inner;
            for (int64_t i = 0; i < inner; ++i) to[i] += from[i];
          }
      });
    }
  });
}

}  // namespace kiln::cpu
