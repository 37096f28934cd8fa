// Elementwise kernels on the GPU: fill, arange, copy (with dtype conversion), unary,
// unary_backward, binary. Every operand is walked through a Layout (layout.cuh), so views and
// broadcasts need no copy; when all operands are contiguous the index is the offset itself.
//
// Each op is a functor (Convert, Unary, UnaryGrad, Binary) that one pair of kernels per arity
// maps over its operands. These kernels are bound by memory bandwidth: each element is read once
// per input and written once, so what matters is how the bytes move. map_kernel takes one element
// a thread, each operand through its Layout; where every operand is contiguous and aligned,
// map_vec_kernel takes 16 bytes of the widest type a thread (8 bf16, 4 f32) as one load per input
// and one store. One 2-byte load a thread left the memory system half used: the CNN's bf16 ReLU
// backward at batch 512 took 158.4 µs [fig kernels.step.b512-bf16.relu-backward.before.us] a step
// that way, 59.1 µs [fig kernels.step.b512-bf16.relu-backward.us] vectorised (Nsight Compute, H100,
// docs/runs/2026-11-27-h100-bf16-profile and -vec). The formulas match the CPU backend's
// (kernels/cpu/elementwise.cpp) operation by operation; results agree up to the last bits of the
// math library's exp/log/tanh/erf.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda {

namespace {

template <class T>
__global__ void fill_kernel(T* out, Layout lo, int64_t n, T value) {
  KILN_GRID_STRIDE(i, n) out[lo.at(i)] = value;
}

template <class T>
__global__ void arange_kernel(T* out, int64_t offset, int64_t n, double start, double step) {
  // __dadd_rn/__dmul_rn round each step as the CPU does; a fused multiply-add would differ.
  KILN_GRID_STRIDE(i, n) out[offset + i] = cast<T>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
}

// ---- the two kernels every op runs on ----

template <class>
using LayoutOf = Layout;  // one Layout per input
template <class>
using RefOf = const TensorRef&;  // one tensor per input

// out[i] = fn(in[i]...) for every element, each operand through its Layout.
template <class Fn, class D, class... S>
__global__ void map_kernel(Fn fn, D* out, Layout lo, int64_t n, const S*... in, LayoutOf<S>... li) {
  KILN_GRID_STRIDE(i, n) out[lo.at(i)] = fn(in[li.at(i)]...);
}

// The same on contiguous operands aligned for Vec<., N> (layout.cuh), given at their first
// element: N elements a thread as one load per input and one store, the last n % N one by one.
template <int N, class Fn, class D, class... S>
__global__ void map_vec_kernel(Fn fn, D* out, int64_t n, const S*... in) {
  const int64_t packs = n / N;
  KILN_GRID_STRIDE(p, packs) {
    Vec<D, N> r;
    [&](const Vec<S, N>&... v) {  // each input's pack loaded once
#pragma unroll
      for (int k = 0; k < N; ++k) r.v[k] = fn(v.v[k]...);
    }(reinterpret_cast<const Vec<S, N>*>(in)[p]...);
    reinterpret_cast<Vec<D, N>*>(out)[p] = r;
  }
  KILN_GRID_STRIDE(i, n - packs * N) out[packs * N + i] = fn(in[packs * N + i]...);
}

// Runs fn over n elements: map_vec_kernel where every operand allows it, else map_kernel.
template <class Fn, class D, class... S>
void map(cudaStream_t stream, Fn fn, const TensorRef& out, const char* op, RefOf<S>... in) {
  const int64_t n = out.numel();
  constexpr int N = static_cast<int>(16 / std::max({sizeof(D), sizeof(S)...}));
  const Layout lo = layout_of(out, op);
  D* o = static_cast<D*>(out.buffer);
  if (vec_aligned<D, N>(o, lo) && (vec_aligned<S, N>(in.buffer, layout_of(in, op)) && ...)) {
    map_vec_kernel<N><<<blocks_for(std::max<int64_t>(n / N, 1)), kThreads, 0, stream>>>(
        fn, o + lo.offset, n, (static_cast<const S*>(in.buffer) + in.offset)...);
  } else {
    map_kernel<Fn, D, S...><<<blocks_for(n), kThreads, 0, stream>>>(fn, o, lo, n, static_cast<const S*>(in.buffer)...,
                                                                    layout_of(in, op)...);
  }
  KILN_CUDA_LAUNCH_CHECK(op);
}

// ---- the ops ----

// The conversion rules are cast's (layout.cuh): the CPU's, bf16 through f32.
template <class S, class D>
struct Convert {
  __device__ D operator()(S v) const { return cast<D>(v); }
};

template <class T>
__device__ T normal_cdf(T v) { return T(0.5) * (T(1) + erf(v * T(0.70710678118654752440))); }
template <class T>
__device__ T normal_pdf(T v) { return T(0.39894228040143267794) * exp(T(-0.5) * v * v); }

// Whether v is finite: its exponent bits are not all ones (NaN and the infinities have them all
// set). A test of the bits rather than isfinite(v) or v - v == 0, which a compiler allowed to
// assume finite math (-use_fast_math, say) may fold to true.
__device__ bool finite_bits(float v) { return (__float_as_uint(v) & 0x7f800000u) != 0x7f800000u; }
__device__ bool finite_bits(double v) {
  return (static_cast<unsigned long long>(__double_as_longlong(v)) & 0x7ff0000000000000ull) != 0x7ff0000000000000ull;
}

template <class T>
__device__ T apply_unary(UnaryOp op, T v, T alpha) {
  switch (op) {
    case UnaryOp::neg: return -v;
    case UnaryOp::exp: return exp(v);
    case UnaryOp::log: return log(v);
    case UnaryOp::sqrt: return sqrt(v);
    case UnaryOp::abs: return fabs(v);
    case UnaryOp::sign: return static_cast<T>((T(0) < v) - (v < T(0)));
    case UnaryOp::relu: return v < T(0) ? T(0) : v;
    case UnaryOp::leaky_relu: return v > T(0) ? v : alpha * v;
    case UnaryOp::gelu: return v * normal_cdf(v);
    case UnaryOp::tanh: return tanh(v);
    case UnaryOp::sigmoid: return T(1) / (T(1) + exp(-v));
    case UnaryOp::pow: return pow(v, alpha);
    case UnaryOp::add_scalar: return v + alpha;
    case UnaryOp::mul_scalar: return v * alpha;
    case UnaryOp::isfinite: return finite_bits(v) ? T(1) : T(0);
  }
  return v;
}

// i32: arithmetic in 64 bits, wrapped back to 32 bits as on the CPU.
__device__ int32_t apply_unary_int(UnaryOp op, int32_t v, int64_t alpha) {
  switch (op) {
    case UnaryOp::neg: return static_cast<int32_t>(-int64_t{v});
    case UnaryOp::abs: return static_cast<int32_t>(v < 0 ? -int64_t{v} : int64_t{v});
    case UnaryOp::sign: return (0 < v) - (v < 0);
    case UnaryOp::relu: return v < 0 ? 0 : v;
    case UnaryOp::add_scalar: return static_cast<int32_t>(int64_t{v} + alpha);
    case UnaryOp::mul_scalar: return static_cast<int32_t>(int64_t{v} * alpha);
    case UnaryOp::isfinite: return 1;  // every integer is finite
    default: return v;
  }
}

// Floating ops compute in C = compute_t<T> (float for bf16) and round once at the store.
template <class T>
struct Unary {
  UnaryOp op;
  double alpha;
  __device__ T operator()(T x) const {
    using C = compute_t<T>;
    if constexpr (std::is_floating_point_v<C>) return cast<T>(apply_unary<C>(op, cast<C>(x), static_cast<C>(alpha)));
    else return apply_unary_int(op, x, static_cast<int64_t>(alpha));
  }
};

// The gradient of an activation at x, given the gradient g of its output.
template <class T>
struct UnaryGrad {
  UnaryOp op;
  compute_t<T> alpha;
  __device__ T operator()(T x, T g) const {
    using C = compute_t<T>;
    C v = cast<C>(x), gv = cast<C>(g), r = gv;
    if (op == UnaryOp::relu) r = v <= C(0) ? C(0) : gv;
    else if (op == UnaryOp::leaky_relu) r = v > C(0) ? gv : gv * alpha;
    else if (op == UnaryOp::gelu) r = gv * (normal_cdf(v) + v * normal_pdf(v));
    return cast<T>(r);
  }
};

__device__ int32_t int_pow(int32_t base, int32_t e) {
  int64_t result = 1, b = base;
  while (e > 0) {
    if (e & 1) result = static_cast<int32_t>(result * b);
    b = static_cast<int32_t>(b * b);
    e >>= 1;
  }
  return static_cast<int32_t>(result);
}

template <class T>
__device__ T apply_binary(BinaryOp op, T x, T y) {
  using W = std::conditional_t<std::is_integral_v<T>, int64_t, T>;
  switch (op) {
    case BinaryOp::add: return static_cast<T>(W{x} + W{y});
    case BinaryOp::sub: return static_cast<T>(W{x} - W{y});
    case BinaryOp::mul: return static_cast<T>(W{x} * W{y});
    case BinaryOp::div:
      if constexpr (std::is_integral_v<T>) return y == 0 ? T(0) : static_cast<T>(W{x} / W{y});  // the CPU throws
      else return x / y;
    case BinaryOp::pow:
      if constexpr (std::is_same_v<T, int32_t>) return y < 0 ? T(0) : int_pow(x, y);  // the CPU throws on y < 0
      else if constexpr (std::is_integral_v<T>) return static_cast<T>(int_pow(x, y));
      else return pow(x, y);
    case BinaryOp::maximum: return x != x || x > y ? x : y;  // NaN wins, as on the CPU
    case BinaryOp::minimum: return x != x || x < y ? x : y;
    case BinaryOp::eq: return static_cast<T>(x == y);
    case BinaryOp::ne: return static_cast<T>(x != y);
    case BinaryOp::gt: return static_cast<T>(x > y);
    case BinaryOp::ge: return static_cast<T>(x >= y);
    case BinaryOp::lt: return static_cast<T>(x < y);
    case BinaryOp::le: return static_cast<T>(x <= y);
  }
  return x;
}

template <class T>
struct Binary {
  BinaryOp op;
  __device__ T operator()(T a, T b) const {
    using C = compute_t<T>;
    return cast<T>(apply_binary<C>(op, cast<C>(a), cast<C>(b)));
  }
};

// copy_many: contiguous pairs, a launch for up to kManyTensors of them. The list is the kernel's
// argument (about 5 KB); its tensors are cut into chunks of kManyChunk elements, which the blocks
// walk gridDim.x apart, as the optimizers' multi-tensor launch does. A thread loads its
// kManyPerThread elements of a chunk before it stores any, and a chunk is small, so that a small
// list (a batch of MNIST images) still spreads over many blocks with its loads in flight at once.
constexpr int kManyTensors = 128;
constexpr int kManyPerThread = 4;
constexpr int64_t kManyChunk = kThreads * kManyPerThread;

struct CopyList {
  const void* src[kManyTensors];
  void* out[kManyTensors];
  int64_t sizes[kManyTensors];
  int64_t first_chunk[kManyTensors + 1];  // tensor i owns chunks [first_chunk[i], first_chunk[i + 1])
  int tensors;
};

template <class S, class D>
__global__ void copy_many_kernel(const __grid_constant__ CopyList list) {
  for (int64_t c = blockIdx.x; c < list.first_chunk[list.tensors]; c += gridDim.x) {
    const int t = chunk_owner(list.first_chunk, list.tensors, c);
    const int64_t begin = (c - list.first_chunk[t]) * kManyChunk;
    const int64_t end = begin + kManyChunk < list.sizes[t] ? begin + kManyChunk : list.sizes[t];
    const auto* src = static_cast<const S*>(list.src[t]);
    auto* out = static_cast<D*>(list.out[t]);
    S v[kManyPerThread];
#pragma unroll
    for (int k = 0; k < kManyPerThread; ++k) {
      const int64_t j = begin + threadIdx.x + k * static_cast<int64_t>(blockDim.x);
      if (j < end) v[k] = src[j];
    }
#pragma unroll
    for (int k = 0; k < kManyPerThread; ++k) {
      const int64_t j = begin + threadIdx.x + k * static_cast<int64_t>(blockDim.x);
      if (j < end) out[j] = Convert<S, D>{}(v[k]);
    }
  }
}

}  // namespace

void CudaBackend::fill(const TensorRef& out, double value) {
  int64_t n = out.numel();
  if (n == 0) return;
  visit_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<blocks_for(n), kThreads, 0, stream_>>>(static_cast<T*>(out.buffer), layout_of(out, "fill"), n,
                                                            cast<T>(value));
  });
  KILN_CUDA_LAUNCH_CHECK("fill");
}

void CudaBackend::arange(const TensorRef& out, double start, double step) {
  int64_t n = out.numel();
  if (n == 0) return;
  visit_dtype(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    arange_kernel<T><<<blocks_for(n), kThreads, 0, stream_>>>(static_cast<T*>(out.buffer), out.offset, n, start, step);
  });
  KILN_CUDA_LAUNCH_CHECK("arange");
}

void CudaBackend::copy(const TensorRef& src, const TensorRef& out) {
  KILN_CHECK(src.numel() == out.numel(), ShapeError, "cuda copy: src ", src.shape, " and out ", out.shape,
             " hold different numbers of elements");
  if (out.numel() == 0) return;
  visit_dtype(src.dtype, [&](auto s) {
    visit_dtype(out.dtype, [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      map<Convert<S, D>, D, S>(stream_, {}, out, "copy", src);
    });
  });
}

namespace {

// One launch of copy_many_kernel<S, D> per kManyTensors of the pairs (src[i], out[i], n[i]):
// contiguous runs of n[i] elements.
template <class S, class D>
void copy_runs(cudaStream_t stream, std::span<const void* const> src, std::span<void* const> out,
               std::span<const int64_t> n) {
  CopyList list{};
  auto launch = [&] {
    const int64_t chunks = list.first_chunk[list.tensors];
    if (chunks > 0) {
      const auto blocks = static_cast<unsigned>(std::min<int64_t>(chunks, 1024));
      copy_many_kernel<S, D><<<blocks, kThreads, 0, stream>>>(list);
      KILN_CUDA_LAUNCH_CHECK("copy_many");
    }
    list.tensors = 0;
  };
  for (size_t i = 0; i < src.size(); ++i) {
    if (n[i] == 0) continue;
    if (list.tensors == kManyTensors) launch();
    const int t = list.tensors++;
    list.src[t] = src[i];
    list.out[t] = out[i];
    list.sizes[t] = n[i];
    list.first_chunk[t + 1] = list.first_chunk[t] + (n[i] + kManyChunk - 1) / kManyChunk;
  }
  launch();
}

}  // namespace

// Contiguous pairs go in one launch (per kManyTensors): pairs of one dtype each side, converted
// (autocast's casts of a model's parameters); or pairs that each keep their dtype, whatever it
// is (a captured step's inputs: images and labels), copied as 4-byte words where every size and
// address allows, else as bytes. Anything else, one copy each.
void CudaBackend::copy_many(std::span<const TensorRef> src, std::span<const TensorRef> out) {
  KILN_CHECK(src.size() == out.size(), ValueError, "cuda copy_many: ", src.size(), " sources for ", out.size(),
             " outputs");
  bool contiguous = !src.empty(), one_pair = true, same_each = true, words = true;
  for (size_t i = 0; i < src.size() && contiguous; ++i) {
    contiguous = src[i].is_contiguous() && out[i].is_contiguous() && src[i].numel() == out[i].numel();
    one_pair = one_pair && src[i].dtype == src[0].dtype && out[i].dtype == out[0].dtype;
    same_each = same_each && src[i].dtype == out[i].dtype;
    const auto bytes = static_cast<uintptr_t>(src[i].numel()) * dtype_size(src[i].dtype);
    words = words && (bytes | reinterpret_cast<uintptr_t>(src[i].address()) |
                      reinterpret_cast<uintptr_t>(out[i].address())) % 4 == 0;
  }
  if (!contiguous || !(one_pair || same_each)) return Backend::copy_many(src, out);
  std::vector<const void*> from(src.size());
  std::vector<void*> to(src.size());
  std::vector<int64_t> n(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    from[i] = src[i].address();  // the first element's, whatever the dtype
    to[i] = out[i].address();
    n[i] = src[i].numel();
  }
  if (!one_pair) {  // same_each: raw words or bytes
    for (size_t i = 0; i < src.size(); ++i) n[i] *= static_cast<int64_t>(dtype_size(src[i].dtype)) / (words ? 4 : 1);
    if (words) copy_runs<uint32_t, uint32_t>(stream_, from, to, n);
    else copy_runs<uint8_t, uint8_t>(stream_, from, to, n);
    return;
  }
  visit_dtype(src[0].dtype, [&](auto s) {
    visit_dtype(out[0].dtype, [&](auto d) { copy_runs<decltype(s), decltype(d)>(stream_, from, to, n); });
  });
}

namespace {

// ring_push in one block: every thread reads `next` before thread 0 moves it on. The rows are a
// step's outputs (a loss, a few metrics), so one block copies them; T is a word of the element's
// size, since the copy only moves bits.
template <class T>
__global__ void ring_push_kernel(const T* src, T* ring, int64_t n, int32_t slots, int32_t* next) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  const int32_t r = *next;
  T* row = ring + r * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) row[i] = src[i];
  __syncthreads();
  if (threadIdx.x == 0) *next = r + 1 == slots ? 0 : r + 1;
}

template <class T>
void push_words(cudaStream_t stream, const TensorRef& src, const TensorRef& ring, const TensorRef& next) {
  launch_dependent(ring_push_kernel<T>, 1, kThreads, 0, stream, static_cast<const T*>(src.address()),
                   static_cast<T*>(ring.address()), src.numel(), static_cast<int32_t>(ring.shape[0]),
                   next.data<int32_t>());
  KILN_CUDA_LAUNCH_CHECK("ring_push");
}

}  // namespace

void CudaBackend::ring_push(const TensorRef& src, const TensorRef& ring, const TensorRef& next) {
  switch (dtype_size(src.dtype)) {
    case 1: return push_words<uint8_t>(stream_, src, ring, next);
    case 2: return push_words<uint16_t>(stream_, src, ring, next);
    case 4: return push_words<uint32_t>(stream_, src, ring, next);
    default: return push_words<uint64_t>(stream_, src, ring, next);
  }
}

void CudaBackend::unary(UnaryOp op, const TensorRef& x, const TensorRef& out, double alpha) {
  if (out.numel() == 0) return;
  const char* name = unary_op_name(op).data();
  visit_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, uint8_t>) {
      KILN_FAIL(DTypeError, "cuda backend: unary ", name, " does not take u8");
    } else {
      map<Unary<T>, T, T>(stream_, {op, alpha}, out, name, x);
    }
  });
}

void CudaBackend::unary_backward(UnaryOp op, const TensorRef& x, const TensorRef& grad, const TensorRef& out,
                                 double alpha) {
  KILN_CHECK(op == UnaryOp::relu || op == UnaryOp::leaky_relu || op == UnaryOp::gelu, ValueError,
             "cuda unary_backward: ", unary_op_name(op), " has a composed formula, not a fused kernel");
  if (out.numel() == 0) return;
  visit_dtype(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_floating_point_v<compute_t<T>>) {
      KILN_FAIL(DTypeError, "cuda backend: unary_backward takes f32, f64 or bf16");
    } else {
      map<UnaryGrad<T>, T, T, T>(stream_, {op, static_cast<compute_t<T>>(alpha)}, out, "unary_backward", x, grad);
    }
  });
}

void CudaBackend::binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) {
  if (out.numel() == 0) return;
  const char* name = binary_op_name(op).data();
  visit_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, uint8_t>) {
      if (op < BinaryOp::eq) KILN_FAIL(DTypeError, "cuda backend: binary ", name, " does not take u8");
    }
    map<Binary<T>, T, T, T>(stream_, {op}, out, name, a, b);
  });
}

}  // namespace kiln::cuda
