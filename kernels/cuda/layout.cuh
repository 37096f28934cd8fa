// How a kernel walks a strided tensor: element i of a row-major index space maps to an offset.
// Inputs that are broadcast to the output's shape carry stride 0 along repeated dimensions.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kiln/core/backend.h"
#include "kiln/core/error.h"

namespace kiln::cuda {

constexpr int kMaxDims = 8;

struct Layout {
  int rank = 0;
  bool contiguous = true;  // offset + i: the fast path
  int64_t offset = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};

  __device__ int64_t at(int64_t i) const {
    if (contiguous) return offset + i;
    int64_t off = offset;
    for (int d = rank - 1; d >= 0; --d) {
      off += (i % sizes[d]) * strides[d];
      i /= sizes[d];
    }
    return off;
  }
};

inline Layout layout_of(const TensorRef& t, const char* op) {
  KILN_CHECK(t.shape.rank() <= kMaxDims, ShapeError, "cuda ", op, ": tensors of rank ", t.shape.rank(),
             " exceed the ", kMaxDims, " dimensions the elementwise kernels walk");
  Layout l;
  l.rank = static_cast<int>(t.shape.rank());
  l.offset = t.offset;
  l.contiguous = t.is_contiguous();
  for (int d = 0; d < l.rank; ++d) {
    l.sizes[d] = t.shape[static_cast<size_t>(d)];
    l.strides[d] = t.strides[static_cast<size_t>(d)];
  }
  return l;
}

// N elements of T as one aligned load or store (N * sizeof(T) of 2 to 16 bytes): the vectorised
// path of the elementwise kernels (elementwise.cu).
template <class T, int N>
struct alignas(N * sizeof(T)) Vec {
  T v[N];
};
// Whether an operand at `base` walked through l is contiguous with its first element aligned for
// Vec<T, N>.
template <class T, int N>
bool vec_aligned(const void* base, const Layout& l) {
  const auto first = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(l.offset) * sizeof(T);
  return l.contiguous && first % (N * sizeof(T)) == 0;
}

// One thread per element, in a grid-stride loop so any size fits the grid.
constexpr int kThreads = 256;
inline unsigned blocks_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

// Multi-tensor launches (optim.cu's optimizer steps, elementwise.cu's copy_many) cut a list of
// tensors into chunks, tensor i owning chunks [first_chunk[i], first_chunk[i + 1]): the tensor
// that owns chunk c, by binary search over the first `tensors` + 1 entries.
__device__ inline int chunk_owner(const int64_t* first_chunk, int tensors, int64_t c) {
  int t = 0;  // the last tensor whose first chunk is <= c
  for (int lo = 0, hi = tensors - 1; lo < hi;) {
    const int mid = (lo + hi + 1) / 2;
    if (first_chunk[mid] <= c) lo = mid;
    else hi = mid - 1;
    t = lo;
  }
  return t;
}

#define KILN_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{gridDim.x} * blockDim.x)

// Calls fn(std::integral_constant<int, value>{}) for the one of Options that equals value (a
// runtime value to a template argument: a kernel's pack width, lane group or unroll).
template <int... Options, class Fn>
void dispatch(int value, Fn&& fn) {
  (void)((value == Options ? (fn(std::integral_constant<int, Options>{}), true) : false) || ...);
}

// Calls fn(T{}) with T the C++ type of a floating dtype (f32, f64); other dtypes are refused,
// naming the op.
template <class Fn>
void visit_floating(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    default: KILN_FAIL(DTypeError, "cuda backend: ", op, " takes f32 or f64, got ", t);
  }
}

// The same for kernels that also store bf16, computing in compute_t<T>.
template <class Fn>
void visit_floating_bf16(DType t, const char* op, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::bf16: return fn(bf16{});
    default: KILN_FAIL(DTypeError, "cuda backend: ", op, " takes f32, f64 or bf16, got ", t);
  }
}

// The type a kernel computes in when it stores T: float for bf16 (loaded exactly, rounded once at
// the store: core/bf16.h), T itself otherwise.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<bf16> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

// v as a T, by the CPU's (and PyTorch's) rules: a C++ cast, through float for bf16 both ways (as
// the CPU's widened kernels convert), and floating to integer truncated to 64 bits, then wrapped to
// T's width (-4.0 -> u8 252).
template <class T, class V>
__host__ __device__ T cast(V v) {
  if constexpr (std::is_same_v<V, bf16>) return cast<T>(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, bf16>) return bf16(static_cast<float>(v));
  else if constexpr (std::is_floating_point_v<V> && std::is_integral_v<T>) return static_cast<T>(static_cast<int64_t>(v));
  else return static_cast<T>(v);
}

}  // namespace kiln::cuda
