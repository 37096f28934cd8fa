// Indexing on the GPU along the middle axis of contiguous [outer, n, inner]:
//   gather     out[o, j, i] = x[o, indices[j], i]            out [outer, m, inner]
//   index_add  out[o, indices[j], i] += src[o, j, i]          out [outer, n, inner]
// gather is how a batch is drawn from a data set held on the device (x [60000, 1, 784], m = 64)
// and an embedding's lookup; gather_many draws a batch's images and labels in one launch.
//
// gather: one thread per output element. Consecutive threads own consecutive elements of an
// output row and read consecutive elements of the source row, so loads and stores coalesce.
//
// index_add: one thread per source element, adding with atomicAdd because repeated indices send
// several source rows to one output row. Atomics make the order of those additions vary between
// runs, so f32 sums of repeated indices can differ in their last bits from run to run (the CPU
// adds in index order); with distinct indices (a permutation, the usual case) no two threads
// touch one element and the result is exact.
//
// An index outside [0, n) cannot throw from a kernel: the thread skips the element (gather
// writes 0) and records the fault, which the host throws at the next synchronisation as the CPU
// would have thrown at once (fault.cuh).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/fault.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda {

namespace {

// Output element e of a gather (both kernels below).
template <class T>
__device__ inline void gather_element(const T* x, const int32_t* idx, T* out, int64_t e, int64_t m, int64_t n,
                                      int64_t inner, DeviceFault* fault) {
  const int64_t i = e % inner, j = (e / inner) % m, o = e / (inner * m);
  const int32_t row = idx[j];
  if (row >= 0 && row < n) {
    out[e] = x[(o * n + row) * inner + i];
  } else {
    out[e] = T{};
    report_fault(fault, FaultOp::gather, row, j, n);
  }
}

template <class T>
__global__ void gather_kernel(const T* x, const int32_t* idx, T* out, int64_t m, int64_t n, int64_t inner,
                              int64_t total, DeviceFault* fault) {
  KILN_GRID_STRIDE(e, total) gather_element(x, idx, out, e, m, n, inner, fault);
}

template <class T>
__global__ void index_add_kernel(const T* src, const int32_t* idx, T* out, int64_t m, int64_t n, int64_t inner,
                                 int64_t total, DeviceFault* fault) {
  KILN_GRID_STRIDE(e, total) {
    int64_t i = e % inner, j = (e / inner) % m, o = e / (inner * m);
    int32_t row = idx[j];
    if (row >= 0 && row < n) atomicAdd(&out[(o * n + row) * inner + i], src[e]);
    else report_fault(fault, FaultOp::index_add, row, j, n);
  }
}

// gather_many: up to kGatherMany sources gathered by the same indices in one launch, each as 4-byte
// words (images in f32, labels in i32), one grid row (blockIdx.y) a source.
constexpr int kGatherMany = 8;

struct GatherList {
  const uint32_t* x[kGatherMany];
  uint32_t* out[kGatherMany];
  int64_t n[kGatherMany], inner[kGatherMany], total[kGatherMany];  // inner and total in words
};

// The indices at idx, or, where idx_at is given, at the address it holds (gather_many_indirect:
// a captured step's batch, read at each replay).
__global__ void gather_many_kernel(const __grid_constant__ GatherList list, const int32_t* idx,
                                   const int32_t* const* idx_at, int64_t m, DeviceFault* fault) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  const int k = static_cast<int>(blockIdx.y);
  if (idx_at) idx = *idx_at;
  KILN_GRID_STRIDE(e, list.total[k]) gather_element(list.x[k], idx, list.out[k], e, m, list.n[k], list.inner[k], fault);
}

// Whether gather_many_kernel takes these: at most kGatherMany sources, each row whole 4-byte words.
bool gathers_words(std::span<const TensorRef> xs, std::span<const TensorRef> outs) {
  auto words = [](const TensorRef& t) {
    const size_t bytes = static_cast<size_t>(t.shape[2]) * dtype_size(t.dtype);
    return bytes % 4 == 0 && reinterpret_cast<uintptr_t>(t.address()) % 4 == 0;
  };
  bool fits = xs.size() <= kGatherMany;
  for (size_t k = 0; k < xs.size() && fits; ++k) fits = words(xs[k]) && words(outs[k]);
  return fits;
}

void gather_words(cudaStream_t stream, std::span<const TensorRef> xs, const int32_t* idx, const int32_t* const* idx_at,
                  int64_t m, std::span<const TensorRef> outs, DeviceFault* fault) {
  GatherList list{};
  int64_t most = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    const int64_t inner = xs[k].shape[2] * static_cast<int64_t>(dtype_size(xs[k].dtype)) / 4;
    list.x[k] = static_cast<const uint32_t*>(xs[k].address());
    list.out[k] = static_cast<uint32_t*>(outs[k].address());
    list.n[k] = xs[k].shape[1];
    list.inner[k] = inner;
    list.total[k] = inner > 0 ? outs[k].numel() / outs[k].shape[2] * inner : 0;
    most = std::max(most, list.total[k]);
  }
  if (most == 0) return;
  const dim3 grid(blocks_for(most), static_cast<unsigned>(xs.size()));
  launch_dependent(gather_many_kernel, grid, kThreads, 0, stream, list, idx, idx_at, m, fault);
  KILN_CUDA_LAUNCH_CHECK(idx_at ? "gather_many_indirect" : "gather_many");
}

template <class T>
__global__ void one_hot_kernel(const int32_t* idx, T* out, int64_t classes, int64_t total, DeviceFault* fault) {
  KILN_GRID_STRIDE(e, total) {
    int64_t k = e / classes, c = e % classes;
    int32_t v = idx[k];
    out[e] = cast<T>(v == c);
    if (c == 0 && (v < 0 || v >= classes)) report_fault(fault, FaultOp::one_hot, v, k, classes);
  }
}

void check_indices(const char* op, const TensorRef& indices) {
  KILN_CHECK(indices.dtype == DType::i32, DTypeError, "cuda backend: ", op, " takes i32 indices, got ",
             indices.dtype);
}

}  // namespace

void CudaBackend::gather(const TensorRef& x, const TensorRef& indices, const TensorRef& out) {
  check_indices("gather", indices);
  const int64_t n = x.shape[1], inner = x.shape[2], m = indices.numel(), total = out.numel();
  if (total == 0) return;
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    gather_kernel<T><<<blocks_for(total), kThreads, 0, stream_>>>(x.data<T>(), indices.data<int32_t>(),
                                                                  out.data<T>(), m, n, inner, total, fault_);
  };
  switch (x.dtype) {
    case DType::f32: launch(float{}); break;
    case DType::f64: launch(double{}); break;
    case DType::i32: launch(int32_t{}); break;
    case DType::u8: launch(uint8_t{}); break;
    case DType::bf16: launch(bf16{}); break;
  }
  KILN_CUDA_LAUNCH_CHECK("gather");
}

// One launch where every source's rows are whole 4-byte words (a bf16 or u8 row of odd length
// is not): the rest gather one by one.
void CudaBackend::gather_many(std::span<const TensorRef> xs, const TensorRef& indices,
                              std::span<const TensorRef> outs) {
  KILN_CHECK(xs.size() == outs.size(), ValueError, "cuda gather_many: ", xs.size(), " sources for ", outs.size(),
             " outputs");
  check_indices("gather_many", indices);
  if (!gathers_words(xs, outs)) return Backend::gather_many(xs, indices, outs);
  gather_words(stream_, xs, indices.data<int32_t>(), nullptr, indices.numel(), outs, fault_);
}

void CudaBackend::gather_many_indirect(std::span<const TensorRef> xs, const int32_t* const* indices, int64_t m,
                                       std::span<const TensorRef> outs) {
  KILN_CHECK(xs.size() == outs.size(), ValueError, "cuda gather_many_indirect: ", xs.size(), " sources for ",
             outs.size(), " outputs");
  KILN_CHECK(gathers_words(xs, outs), ValueError, "cuda gather_many_indirect: takes at most ", kGatherMany,
             " sources whose rows are whole 4-byte words at 4-byte aligned addresses");
  gather_words(stream_, xs, nullptr, indices, m, outs, fault_);
}

void CudaBackend::index_add(const TensorRef& src, const TensorRef& indices, const TensorRef& out) {
  check_indices("index_add", indices);
  const int64_t n = out.shape[1], inner = out.shape[2], m = indices.numel(), total = src.numel();
  if (total == 0) return;
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    index_add_kernel<T><<<blocks_for(total), kThreads, 0, stream_>>>(src.data<T>(), indices.data<int32_t>(),
                                                                     out.data<T>(), m, n, inner, total, fault_);
  };
  switch (out.dtype) {
    case DType::f32: launch(float{}); break;
    case DType::f64: launch(double{}); break;
    case DType::i32: launch(int32_t{}); break;
    case DType::u8: KILN_FAIL(DTypeError, "cuda backend: index_add does not take u8 (no byte atomics)");
    case DType::bf16: KILN_FAIL(DTypeError, "cuda backend: index_add does not take bf16 (it would round every "
                                "addition: add in f32 and convert)");
  }
  KILN_CUDA_LAUNCH_CHECK("index_add");
}

void CudaBackend::one_hot(const TensorRef& indices, const TensorRef& out) {
  check_indices("one_hot", indices);
  const int64_t classes = out.shape.back(), total = out.numel();
  if (total == 0) return;
  auto launch = [&](auto tag) {
    using T = decltype(tag);
    one_hot_kernel<T><<<blocks_for(total), kThreads, 0, stream_>>>(indices.data<int32_t>(), out.data<T>(), classes,
                                                                   total, fault_);
  };
  switch (out.dtype) {
    case DType::f32: launch(float{}); break;
    case DType::f64: launch(double{}); break;
    case DType::i32: launch(int32_t{}); break;
    case DType::u8: launch(uint8_t{}); break;
    case DType::bf16: launch(bf16{}); break;
  }
  KILN_CUDA_LAUNCH_CHECK("one_hot");
}

}  // namespace kiln::cuda
