// 2-D pooling on the GPU over each plane of x [N, C, H, W] -> y [N, C, OH, OW], and the backward
// passes, f32, f64 and bf16 (computed in f32, rounded at the store), matching kernels/cpu/pool.cpp
// (bf16: its widened f32 kernel) bit for bit:
//   max_pool2d   y = max over the window (clipped to the input: padding never wins); indices (i32,
//                same shape as y) hold the winner's position h * W + w in its plane. Ties go to
//                the first element in row-major window order; a NaN wins, the last one in that
//                order (as PyTorch's kernels, which take v when v > max or v is NaN).
//   avg_pool2d   y = mean over the window, summed in double; divided by KH * KW when
//                count_include_pad, else by the number of real input elements in the window.
//   backward     grad_x is overwritten: each input element gets the sum of the grad_y elements
//                that came from it; through a relu that made x (max_pool2d_backward_relu), each
//                grad_y element first zeroed where y <= 0 (y holds x's value at the maximum).
//   max_pool2d_dropout  dropout(max_pool2d(x)) with dropout's Philox mask (random.cu), in one pass
//                each way for 2 x 2 windows that tile x, a byte a window kept for the backward.
// Bench: none of its own yet (memory-bound); pooling runs inside a training step (`mnist-train
// --device cuda`). What its backward cost under ncu, step by step: kernels/cuda/NOTES.md.
//
// Forward: one thread per output element; neighbouring threads own neighbouring outputs of a row,
// so their windows overlap and the reads hit the same cache lines.
// Index arithmetic in int where the tensors allow (see Geom): the backward divides to place each
// element, and 64-bit division costs several times 32-bit's.
// Backward, gather form: one thread per grad_x element walks the outputs whose windows hold it
// (at most ceil(KH/SH) x ceil(KW/SW) of them) and adds their contributions: for max, grad_y where
// the output's index points here; for avg, grad_y / count. There are no atomics, every element is
// written once, and the additions happen in the CPU's order (outputs in row-major order, starting
// from 0), so overlapping windows give the same bits as the CPU's scatter. An index outside the
// plane (which the CPU reports) matches no input element and is dropped.
// Max backward where the windows tile the input (2x2 at stride 2 on an even size): one thread per
// window writes all of it, with no division per input element; where windows do not overlap, the
// one window of an element is found with one division.
// 2 x 2 windows that tile the input (the MNIST CNN's) have kernels of their own, forward and
// backward, whose window rows are one two-element load or store each: in the bf16 step at batch
// 512, 31.0 µs [fig kernels.fold.b512-bf16.pool.us] forward and 35.3 [fig kernels.fold.b512-bf16.pool-backward.us]
// backward with relu's mask read, where the general kernels took 45.7 [fig kernels.fold.b512-bf16.pool.before.us]
// and 42.2 [fig kernels.fold.b512-bf16.pool-backward.before.us] (ncu, H100,
// docs/runs/2026-11-27-h100-relu-fold). Both still move about two thirds of what a copy moves in
// that time: more outputs a thread is the next step.
#include <algorithm>
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/core/philox.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda {

namespace {

struct PoolDims {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;
  bool count_include_pad;
};

PoolDims pool_dims(const char* op, const TensorRef& x, const TensorRef& y, const Pool2dParams& p) {
  KILN_CHECK(x.shape.size() == 4 && y.shape.size() == 4 && x.shape[0] == y.shape[0] && x.shape[1] == y.shape[1],
             ShapeError, "cuda ", op, ": expected x [N, C, H, W] and y [N, C, OH, OW], got ", x.shape, " and ",
             y.shape);
  KILN_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 &&
                 p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w,
             ValueError, "cuda ", op, ": kernel ", p.kernel_h, "x", p.kernel_w, ", stride ", p.stride_h, "x",
             p.stride_w, ", padding ", p.pad_h, "x", p.pad_w,
             " (kernel and stride must be >= 1, padding at most half the kernel)");
  return {x.shape[0] * x.shape[1], x.shape[2], x.shape[3], y.shape[2], y.shape[3], p.kernel_h, p.kernel_w,
          p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.count_include_pad};
}

// The geometry in the index type the kernels compute with: int where every element of x and y has
// an int index (the usual case; 64-bit division costs several times 32-bit's, and the backward
// pass divides to find its element's place), else int64_t.
template <class I>
struct Geom {
  I h, w, oh, ow, kh, kw, sh, sw, ph, pw;
  bool count_include_pad;
};
template <class I>
Geom<I> geom(const PoolDims& d) {
  auto c = [](int64_t v) { return static_cast<I>(v); };
  return {c(d.h), c(d.w), c(d.oh), c(d.ow), c(d.kh), c(d.kw), c(d.sh), c(d.sw), c(d.ph), c(d.pw), d.count_include_pad};
}

// Calls fn(I{}) with I = int when indices into x and y (planes * H * W, planes * OH * OW) fit an
// int, else I = int64_t.
template <class Fn>
void with_index_type(const PoolDims& d, Fn&& fn) {
  const int64_t most = d.planes * std::max(d.h * d.w, d.oh * d.ow);
  if (most < (int64_t{1} << 31)) fn(int{});
  else fn(int64_t{});
}

// The input rows [h0, h1) and columns [w0, w1) of output (i, j), clipped to the input.
template <class I>
struct Window {
  I h0, h1, w0, w1;
};
template <class I>
__device__ Window<I> window_of(const Geom<I>& d, I i, I j) {
  const I h = i * d.sh - d.ph, w = j * d.sw - d.pw;
  return {max(h, I{0}), min(h + d.kh, d.h), max(w, I{0}), min(w + d.kw, d.w)};
}

// The outputs [first, last) along one axis whose windows hold input position `at`:
// i*stride - pad <= at < i*stride - pad + kernel.
template <class I>
__device__ void covering(I at, I pad, I kernel, I stride, I outputs, I* first, I* last) {
  const I t = at + pad;  // i*stride <= t and i*stride > t - kernel
  *first = t - kernel < 0 ? 0 : (t - kernel) / stride + 1;
  *last = min(t / stride + 1, outputs);
}

template <class T, class I>
__global__ void max_pool_kernel(const T* x, T* y, int32_t* indices, Geom<I> d, I total) {
  KILN_GRID_STRIDE(e64, total) {
    const I e = static_cast<I>(e64);
    const I j = e % d.ow, i = (e / d.ow) % d.oh, plane = e / (d.ow * d.oh);
    const T* xp = x + plane * d.h * d.w;
    const Window<I> win = window_of(d, i, j);
    I best_at = win.h0 * d.w + win.w0;  // start from a real element, as the CPU does
    compute_t<T> best = cast<compute_t<T>>(xp[best_at]);
    for (I h = win.h0; h < win.h1; ++h)
      for (I w = win.w0; w < win.w1; ++w) {
        const compute_t<T> v = cast<compute_t<T>>(xp[h * d.w + w]);
        if (v > best || v != v) {  // v != v: v is NaN; v > NaN is false, so the last NaN wins
          best = v;
          best_at = h * d.w + w;
        }
      }
    y[e] = cast<T>(best);
    indices[e] = static_cast<int32_t>(best_at);
  }
}

// Windows that do not overlap (kernel <= stride, as in the usual 2x2 pooling at stride 2): the one
// output whose window may hold `at`, found with one division instead of covering's two.
template <class I>
__device__ void covering_disjoint(I at, I pad, I kernel, I stride, I outputs, I* first, I* last) {
  const I t = at + pad, i = t / stride;
  *first = i;
  *last = i < outputs && t - i * stride < kernel ? i + 1 : i;
}

// grad_y[e], or 0 where relu_y (the pool's output, where a relu made x; or null) is <= 0: relu's
// gradient for the element of x that output e came from, which holds the same value.
template <class T, class I>
__device__ T grad_through_relu(const T* gy, const T* relu_y, I e) {
  return relu_y && cast<compute_t<T>>(relu_y[e]) <= compute_t<T>(0) ? T{} : gy[e];
}

template <class T, class I, bool kDisjoint>
__global__ void max_pool_backward_kernel(const T* gy, const T* relu_y, const int32_t* indices, T* gx, Geom<I> d,
                                         I total) {
  KILN_GRID_STRIDE(e64, total) {
    const I e = static_cast<I>(e64);
    const I w = e % d.w, h = (e / d.w) % d.h, plane = e / (d.w * d.h);
    const I at = h * d.w + w;
    const I first = plane * d.oh * d.ow;
    const int32_t* ip = indices + first;
    I i0, i1, j0, j1;
    if constexpr (kDisjoint) {
      covering_disjoint(h, d.ph, d.kh, d.sh, d.oh, &i0, &i1);
      covering_disjoint(w, d.pw, d.kw, d.sw, d.ow, &j0, &j1);
    } else {
      covering(h, d.ph, d.kh, d.sh, d.oh, &i0, &i1);
      covering(w, d.pw, d.kw, d.sw, d.ow, &j0, &j1);
    }
    compute_t<T> acc = 0;
    for (I i = i0; i < i1; ++i)
      for (I j = j0; j < j1; ++j)
        if (ip[i * d.ow + j] == at) acc += cast<compute_t<T>>(grad_through_relu(gy, relu_y, first + i * d.ow + j));
    gx[e] = cast<T>(acc);
  }
}

// Windows that tile the input exactly (kernel = stride, no padding, H = OH * KH, W = OW * KW: the
// usual 2x2 pooling of an even size): one thread per output writes its whole window, grad_y where
// its index points and 0 elsewhere, with no division per input element. The same values as the
// gather form, which also drops an index outside its window.
template <class T, class I>
__global__ void max_pool_backward_tiled_kernel(const T* gy, const T* relu_y, const int32_t* indices, T* gx, Geom<I> d,
                                               I total) {
  KILN_GRID_STRIDE(e64, total) {
    const I e = static_cast<I>(e64);
    const I j = e % d.ow, i = (e / d.ow) % d.oh, plane = e / (d.ow * d.oh);
    const I at = indices[e];
    const T g = grad_through_relu(gy, relu_y, e);
    T* gxp = gx + plane * d.h * d.w;
    for (I r = i * d.kh; r < (i + 1) * d.kh; ++r)
      for (I c = j * d.kw; c < (j + 1) * d.kw; ++c) gxp[r * d.w + c] = r * d.w + c == at ? g : T{};
  }
}

// ---- 2 x 2 windows that tile the input ----
//
// The MNIST CNN's pooling (kernel 2 x 2 at stride 2, no padding, H = 2 OH, W = 2 OW): no window is
// clipped, and each row of a window is two neighbouring elements at an even position, so one
// aligned load or store of a Pair (4 bytes in bf16). Output e = (plane * OH + i) * OW + j, so its
// window's top row starts at element 2 (e / OW) * W + 2 j of x.
template <class T>
struct alignas(2 * sizeof(T)) Pair {
  T lo, hi;
};

// The maximum of a 2 x 2 window given as its rows (top-left, top-right, bottom-left, bottom-right),
// as max_pool_kernel walks it: ties keep the first, the last NaN wins. Returns its place, 0 to 3.
template <class T>
__device__ int window_max(T a, T b, T c, T e, compute_t<T>* best) {
  const compute_t<T> v[4] = {cast<compute_t<T>>(a), cast<compute_t<T>>(b), cast<compute_t<T>>(c),
                             cast<compute_t<T>>(e)};
  *best = v[0];
  int at = 0;
#pragma unroll
  for (int k = 1; k < 4; ++k)
    if (v[k] > *best || v[k] != v[k]) *best = v[k], at = k;
  return at;
}

template <class T, class I>
__global__ void max_pool_2x2_kernel(const T* x, T* y, int32_t* indices, Geom<I> d, I total) {
  KILN_GRID_STRIDE(e64, total) {
    const I e = static_cast<I>(e64);
    const I j = e % d.ow, rows = e / d.ow;
    const T* top = x + 2 * rows * d.w + 2 * j;
    const Pair<T> r0 = *reinterpret_cast<const Pair<T>*>(top), r1 = *reinterpret_cast<const Pair<T>*>(top + d.w);
    compute_t<T> best;
    const int at = window_max(r0.lo, r0.hi, r1.lo, r1.hi, &best);
    y[e] = cast<T>(best);
    indices[e] = static_cast<int32_t>((2 * (rows % d.oh) + at / 2) * d.w + 2 * j + at % 2);
  }
}

template <class T, class I>
__global__ void max_pool_2x2_backward_kernel(const T* gy, const T* relu_y, const int32_t* indices, T* gx, Geom<I> d,
                                             I total) {
  KILN_GRID_STRIDE(e64, total) {
    const I e = static_cast<I>(e64);
    const I j = e % d.ow, rows = e / d.ow;
    const I first = 2 * (rows % d.oh) * d.w + 2 * j, at = indices[e];  // in the plane
    const T g = grad_through_relu(gy, relu_y, e);
    T* top = gx + 2 * rows * d.w + 2 * j;
    *reinterpret_cast<Pair<T>*>(top) = {at == first ? g : T{}, at == first + 1 ? g : T{}};
    *reinterpret_cast<Pair<T>*>(top + d.w) = {at == first + d.w ? g : T{}, at == first + d.w + 1 ? g : T{}};
  }
}

// Whether the 2 x 2 kernels above apply: such windows, and x (or grad_x) aligned for Pair loads.
bool tiles_2x2(const PoolDims& d, const TensorRef& x) {
  return d.kh == 2 && d.kw == 2 && d.sh == 2 && d.sw == 2 && d.ph == 0 && d.pw == 0 && d.h == 2 * d.oh &&
         d.w == 2 * d.ow && reinterpret_cast<uintptr_t>(x.address()) % (2 * dtype_size(x.dtype)) == 0;
}

// ---- 2 x 2 max pool with dropout in its epilogue (Backend::max_pool2d_dropout) ----
//
// y = dropout(max_pool2d(x)), the MNIST CNN's pool and dropout1, in one pass: a thread per Philox
// block, the four outputs whose uniforms it draws once. For the backward it keeps one byte a window
// (its maximum's place, whether dropout kept it, whether it is positive) where the two ops keep i32
// indices and y, and the backward draws no mask again: it reads grad_y and the bytes and writes
// grad_x. Where OW is a multiple of 4, a thread's four windows lie side by side in one pair of
// rows: each row's eight elements are one aligned load (16 bytes in bf16) or store, y's four one
// store, the codes one 4-byte store; otherwise each window is placed on its own, by Pairs.
// In the bf16 step at batch 512: 24.94 µs [fig kernels.pool-dropout.b512-bf16.forward.us] forward
// and 18.66 [fig kernels.pool-dropout.b512-bf16.backward.us] backward; with dropout2's kernels,
// 51.39 µs [fig kernels.pool-dropout.b512-bf16.pool-and-dropouts.after.us] a step where the pool
// and the two dropouts took 103.8 [fig kernels.pool-dropout.b512-bf16.pool-and-dropouts.before.us]
// (ncu, H100, docs/runs/2026-11-28-h100-pool-dropout). Both kernels still move their bytes at about
// half of DRAM's peak (NOTES.md).
constexpr uint8_t kPlace = 0x3f, kKept = 0x40, kPositive = 0x80;

// N elements as one aligned access (16-byte vectors where N * sizeof(T) is more).
template <class T, int N>
struct alignas(N * sizeof(T) < 16 ? N * sizeof(T) : 16) Vec {
  T v[N];
};

inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Element e's place: the top-left of its window in x, in x's elements.
template <class I>
__device__ I window_top(const Geom<I>& d, I e) {
  return 2 * (e / d.ow) * d.w + 2 * (e % d.ow);
}

template <class T, class I>
__global__ void max_pool_2x2_dropout_kernel(const T* x, T* y, uint8_t* codes, Geom<I> d, I total,
                                            compute_t<T> threshold, compute_t<T> scale, philox::Key key,
                                            bool rows_of_four) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  using C = compute_t<T>;
  const philox::Key at = key.resolve();  // in a captured step, read from its replay value
  KILN_GRID_STRIDE(b64, (total + 3) / 4) {
    const I b = static_cast<I>(b64), e0 = 4 * b;
    const philox::Block words = philox::block(at.seed, at.offset + static_cast<uint64_t>(b64));
    T window[4][4] = {};  // each output's window in row-major order (past the end: zeros)
    if (rows_of_four) {
      const T* top = x + window_top(d, e0);
      const Vec<T, 8> r0 = *reinterpret_cast<const Vec<T, 8>*>(top);
      const Vec<T, 8> r1 = *reinterpret_cast<const Vec<T, 8>*>(top + d.w);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        window[k][0] = r0.v[2 * k], window[k][1] = r0.v[2 * k + 1], window[k][2] = r1.v[2 * k],
        window[k][3] = r1.v[2 * k + 1];
    } else {
      for (int k = 0; k < 4 && e0 + k < total; ++k) {
        const T* top = x + window_top(d, e0 + k);
        const Pair<T> r0 = *reinterpret_cast<const Pair<T>*>(top), r1 = *reinterpret_cast<const Pair<T>*>(top + d.w);
        window[k][0] = r0.lo, window[k][1] = r0.hi, window[k][2] = r1.lo, window[k][3] = r1.hi;
      }
    }
    Vec<T, 4> out;
    Vec<uint8_t, 4> code;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      C best;
      const int place = window_max(window[k][0], window[k][1], window[k][2], window[k][3], &best);
      const C pooled = cast<C>(cast<T>(best));  // max_pool2d's y, then dropout's product of it
      const bool kept = static_cast<C>(philox::to_unit(words[k])) > threshold;
      out.v[k] = cast<T>(pooled * (kept ? scale : C(0)));
      code.v[k] = static_cast<uint8_t>(place | (kept ? kKept : 0) | (pooled <= C(0) ? 0 : kPositive));
    }
    if (rows_of_four) {
      *reinterpret_cast<Vec<T, 4>*>(y + e0) = out;
      *reinterpret_cast<Vec<uint8_t, 4>*>(codes + e0) = code;
    } else {
      for (int k = 0; k < 4 && e0 + k < total; ++k) y[e0 + k] = out.v[k], codes[e0 + k] = code.v[k];
    }
  }
}

// grad_x of the windows of grad_y's outputs: a thread per four, as the forward.
template <class T, class I>
__global__ void max_pool_2x2_dropout_backward_kernel(const T* gy, const uint8_t* codes, T* gx, Geom<I> d, I total,
                                                     compute_t<T> scale, bool relu, bool rows_of_four) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  using C = compute_t<T>;
  KILN_GRID_STRIDE(b64, (total + 3) / 4) {
    const I e0 = 4 * static_cast<I>(b64);
    Vec<T, 4> g;
    Vec<uint8_t, 4> code;
    if (rows_of_four) {
      g = *reinterpret_cast<const Vec<T, 4>*>(gy + e0);
      code = *reinterpret_cast<const Vec<uint8_t, 4>*>(codes + e0);
    } else {
      for (int k = 0; k < 4; ++k) {
        const bool in = e0 + k < total;
        g.v[k] = in ? gy[e0 + k] : T{};
        code.v[k] = in ? codes[e0 + k] : 0;
      }
    }
    T window[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      // dropout's backward (Backend::dropout's product), then relu's mask, at the maximum's place
      T v = cast<T>(cast<C>(g.v[k]) * (code.v[k] & kKept ? scale : C(0)));
      if (relu && !(code.v[k] & kPositive)) v = T{};
#pragma unroll
      for (int place = 0; place < 4; ++place) window[k][place] = (code.v[k] & kPlace) == place ? v : T{};
    }
    if (rows_of_four) {
      Vec<T, 8> r0, r1;
#pragma unroll
      for (int k = 0; k < 4; ++k)
        r0.v[2 * k] = window[k][0], r0.v[2 * k + 1] = window[k][1], r1.v[2 * k] = window[k][2],
        r1.v[2 * k + 1] = window[k][3];
      T* top = gx + window_top(d, e0);
      *reinterpret_cast<Vec<T, 8>*>(top) = r0;
      *reinterpret_cast<Vec<T, 8>*>(top + d.w) = r1;
    } else {
      for (int k = 0; k < 4 && e0 + k < total; ++k) {
        T* top = gx + window_top(d, e0 + k);
        *reinterpret_cast<Pair<T>*>(top) = {window[k][0], window[k][1]};
        *reinterpret_cast<Pair<T>*>(top + d.w) = {window[k][2], window[k][3]};
      }
    }
  }
}

// grad_x in 16-byte pieces, a thread each: the piece's V = 16 / sizeof(T) elements of one input
// row, below (or above) V / 2 windows. Consecutive threads store consecutive pieces, so a warp's
// store is 512 contiguous bytes, where the kernel above, a thread per four windows, stores two
// 32-byte runs a thread two rows apart, half a sector an instruction; each window's gradient and
// code are loaded twice (once for each of its rows), the second time mostly from L1. Needs W a
// multiple of V and grad_x, grad_y and the codes aligned for the vectors (pieces_apply). In the
// f32 CNN's step (ncu, one H200, docs/runs/2026-11-29-h200-pool-pieces) it takes
// 34.06 µs [fig kernels.pool-pieces.b512.new.us] at batch 512 where the kernel above took
// 50.49 [fig kernels.pool-pieces.b512.old.us] (the same 99 MB moved in two thirds of the time), and
// 6.26 [fig kernels.pool-pieces.b64.new.us] at batch 64 where it took 9.39 [fig kernels.pool-pieces.b64.old.us].
template <class T, class I>
__global__ void max_pool_2x2_dropout_backward_pieces_kernel(const T* gy, const uint8_t* codes, T* gx, Geom<I> d,
                                                            I pieces, compute_t<T> scale, bool relu) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  using C = compute_t<T>;
  constexpr int V = 16 / sizeof(T);
  KILN_GRID_STRIDE(p64, pieces) {
    const I e = static_cast<I>(p64) * V;  // the piece's first element of grad_x
    const I plane = e / (d.h * d.w), r = e - plane * d.h * d.w, y = r / d.w, x = r - y * d.w;
    const I o = (plane * d.oh + y / 2) * d.ow + x / 2;  // its first window
    const Vec<T, V / 2> g = *reinterpret_cast<const Vec<T, V / 2>*>(gy + o);
    const Vec<uint8_t, V / 2> code = *reinterpret_cast<const Vec<uint8_t, V / 2>*>(codes + o);
    const int row = static_cast<int>(y & 1) * 2;  // the places of this row in a window: row, row + 1
    Vec<T, V> out;
#pragma unroll
    for (int k = 0; k < V / 2; ++k) {
      // dropout's backward (Backend::dropout's product), then relu's mask, at the maximum's place
      T v = cast<T>(cast<C>(g.v[k]) * (code.v[k] & kKept ? scale : C(0)));
      if (relu && !(code.v[k] & kPositive)) v = T{};
      const int place = code.v[k] & kPlace;
      out.v[2 * k] = place == row ? v : T{};
      out.v[2 * k + 1] = place == row + 1 ? v : T{};
    }
    *reinterpret_cast<Vec<T, V>*>(gx + e) = out;
  }
}

template <class T>
bool pieces_apply(const PoolDims& d, const void* gx, const void* gy, const void* codes) {
  constexpr int V = 16 / sizeof(T);
  return d.w % V == 0 && aligned(gx, 16) && aligned(gy, sizeof(T) * V / 2) && aligned(codes, V / 2);
}

// Whether the four-a-row path applies to these buffers: OW a multiple of 4, each buffer aligned
// for its vectors (x and grad_x: 8 elements, y and grad_y: 4, the codes: 4 bytes).
template <class T>
bool rows_of_four(const PoolDims& d, const void* x, const void* y, const void* codes) {
  return d.ow % 4 == 0 && aligned(x, alignof(Vec<T, 8>)) && aligned(y, alignof(Vec<T, 4>)) &&
         aligned(codes, 4);
}

template <class I>
__device__ double avg_count(const Geom<I>& d, const Window<I>& win) {
  return d.count_include_pad ? static_cast<double>(d.kh * d.kw)
                             : static_cast<double>((win.h1 - win.h0) * (win.w1 - win.w0));
}

template <class T, class I>
__global__ void avg_pool_kernel(const T* x, T* y, Geom<I> d, I total) {
  KILN_GRID_STRIDE(e64, total) {
    const I e = static_cast<I>(e64);
    const I j = e % d.ow, i = (e / d.ow) % d.oh, plane = e / (d.ow * d.oh);
    const T* xp = x + plane * d.h * d.w;
    const Window<I> win = window_of(d, i, j);
    double sum = 0;
    for (I h = win.h0; h < win.h1; ++h)
      for (I w = win.w0; w < win.w1; ++w) sum += cast<compute_t<T>>(xp[h * d.w + w]);
    y[e] = cast<T>(sum / avg_count(d, win));
  }
}

template <class T, class I>
__global__ void avg_pool_backward_kernel(const T* gy, T* gx, Geom<I> d, I total) {
  KILN_GRID_STRIDE(e64, total) {
    const I e = static_cast<I>(e64);
    const I w = e % d.w, h = (e / d.w) % d.h, plane = e / (d.w * d.h);
    const T* gyp = gy + plane * d.oh * d.ow;
    I i0, i1, j0, j1;
    covering(h, d.ph, d.kh, d.sh, d.oh, &i0, &i1);
    covering(w, d.pw, d.kw, d.sw, d.ow, &j0, &j1);
    compute_t<T> acc = 0;
    for (I i = i0; i < i1; ++i)
      for (I j = j0; j < j1; ++j)
        // the CPU's share: grad_y / count in double, rounded to T (f32 for bf16), then added
        acc += static_cast<compute_t<T>>(cast<compute_t<T>>(gyp[i * d.ow + j]) / avg_count(d, window_of(d, i, j)));
    gx[e] = cast<T>(acc);
  }
}

void check_indices(const char* op, const TensorRef& indices) {
  KILN_CHECK(indices.dtype == DType::i32, DTypeError, "cuda ", op, ": indices must be i32, got ", indices.dtype);
}

}  // namespace

void CudaBackend::max_pool2d(const TensorRef& x, const TensorRef& y, const TensorRef& indices,
                             const Pool2dParams& p) {
  const PoolDims d = pool_dims("max_pool2d", x, y, p);
  check_indices("max_pool2d", indices);
  const int64_t total = y.numel();
  if (total == 0) return;
  const bool two_by_two = tiles_2x2(d, x);
  visit_floating_bf16(x.dtype, "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    with_index_type(d, [&](auto index) {
      using I = decltype(index);
      auto kernel = two_by_two ? max_pool_2x2_kernel<T, I> : max_pool_kernel<T, I>;
      kernel<<<blocks_for(total), kThreads, 0, stream_>>>(x.data<T>(), y.data<T>(), indices.data<int32_t>(),
                                                          geom<I>(d), static_cast<I>(total));
    });
  });
  KILN_CUDA_LAUNCH_CHECK("max_pool2d");
}

void CudaBackend::max_pool2d_backward(const TensorRef& grad_y, const TensorRef& indices, const TensorRef& grad_x,
                                      const Pool2dParams& p) {
  max_pool2d_backward_relu(grad_y, indices, TensorRef{}, grad_x, p);
}

void CudaBackend::max_pool2d_backward_relu(const TensorRef& grad_y, const TensorRef& indices, const TensorRef& relu_y,
                                           const TensorRef& grad_x, const Pool2dParams& p) {
  const PoolDims d = pool_dims("max_pool2d_backward", grad_x, grad_y, p);
  check_indices("max_pool2d_backward", indices);
  KILN_CHECK(!relu_y.defined() || (relu_y.dtype == grad_y.dtype && relu_y.shape == grad_y.shape &&
                                   relu_y.is_contiguous()),
             ShapeError, "cuda max_pool2d_backward: relu_y ", relu_y.shape, " ", relu_y.dtype,
             " must be contiguous and match the gradient ", grad_y.shape, " ", grad_y.dtype);
  const int64_t total = grad_x.numel();
  if (total == 0) return;
  const bool tiled = d.kh == d.sh && d.kw == d.sw && d.ph == 0 && d.pw == 0 && d.h == d.oh * d.kh &&
                     d.w == d.ow * d.kw;
  visit_floating_bf16(grad_y.dtype, "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const T* mask = relu_y.defined() ? relu_y.data<T>() : nullptr;
    with_index_type(d, [&](auto index) {
      using I = decltype(index);
      if (tiled) {
        const int64_t outputs = grad_y.numel();
        auto kernel = tiles_2x2(d, grad_x) ? max_pool_2x2_backward_kernel<T, I> : max_pool_backward_tiled_kernel<T, I>;
        kernel<<<blocks_for(outputs), kThreads, 0, stream_>>>(grad_y.data<T>(), mask, indices.data<int32_t>(),
                                                              grad_x.data<T>(), geom<I>(d), static_cast<I>(outputs));
        return;
      }
      auto kernel = d.kh <= d.sh && d.kw <= d.sw ? max_pool_backward_kernel<T, I, true>
                                                 : max_pool_backward_kernel<T, I, false>;
      kernel<<<blocks_for(total), kThreads, 0, stream_>>>(grad_y.data<T>(), mask, indices.data<int32_t>(),
                                                          grad_x.data<T>(), geom<I>(d), static_cast<I>(total));
    });
  });
  KILN_CUDA_LAUNCH_CHECK("max_pool2d_backward");
}

bool CudaBackend::max_pool2d_dropout(const TensorRef& x, const TensorRef& y, const TensorRef& codes,
                                     const Pool2dParams& pool, double p, const philox::Key& key) {
  const PoolDims d = pool_dims("max_pool2d_dropout", x, y, pool);
  KILN_CHECK(codes.dtype == DType::u8 && codes.shape == y.shape && y.dtype == x.dtype, ShapeError,
             "cuda max_pool2d_dropout: codes ", codes.shape, " ", codes.dtype, " and y ", y.dtype,
             " for an output ", y.shape, " of x ", x.dtype, " (codes: u8 of y's shape)");
  KILN_CHECK(p > 0.0 && p < 1.0, ValueError, "cuda max_pool2d_dropout: p must be in (0, 1), got ", p);
  if (!tiles_2x2(d, x)) return false;
  const int64_t total = y.numel();
  if (total == 0) return true;
  visit_floating_bf16(x.dtype, "max_pool2d_dropout", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const bool four = rows_of_four<T>(d, x.address(), y.address(), codes.address());
    with_index_type(d, [&](auto index) {
      using I = decltype(index);
      launch_dependent(max_pool_2x2_dropout_kernel<T, I>, blocks_for((total + 3) / 4), kThreads, 0, stream_,
                       x.data<T>(), y.data<T>(), codes.data<uint8_t>(), geom<I>(d), static_cast<I>(total),
                       static_cast<C>(p), static_cast<C>(1.0 / (1.0 - p)), key, four);
    });
  });
  KILN_CUDA_LAUNCH_CHECK("max_pool2d_dropout");
  return true;
}

void CudaBackend::max_pool2d_dropout_backward(const TensorRef& grad_y, const TensorRef& codes,
                                              const TensorRef& grad_x, const Pool2dParams& pool, double p,
                                              bool relu) {
  const PoolDims d = pool_dims("max_pool2d_dropout_backward", grad_x, grad_y, pool);
  KILN_CHECK(codes.dtype == DType::u8 && codes.shape == grad_y.shape && grad_x.dtype == grad_y.dtype, ShapeError,
             "cuda max_pool2d_dropout_backward: codes ", codes.shape, " ", codes.dtype, " and grad_x ",
             grad_x.dtype, " for a gradient ", grad_y.shape, " ", grad_y.dtype);
  KILN_CHECK(tiles_2x2(d, grad_x), ValueError,
             "cuda max_pool2d_dropout_backward: takes the 2 x 2 windows (stride 2, no padding, an even size, "
             "grad_x aligned) that max_pool2d_dropout fuses, got ", grad_x.shape, " -> ", grad_y.shape);
  const int64_t total = grad_y.numel();
  if (total == 0) return;
  visit_floating_bf16(grad_y.dtype, "max_pool2d_dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const bool four = rows_of_four<T>(d, grad_x.address(), grad_y.address(), codes.address());
    with_index_type(d, [&](auto index) {
      using I = decltype(index);
      if (pieces_apply<T>(d, grad_x.address(), grad_y.address(), codes.address())) {
        const int64_t pieces = grad_x.numel() / (16 / static_cast<int64_t>(sizeof(T)));
        launch_dependent(max_pool_2x2_dropout_backward_pieces_kernel<T, I>, blocks_for(pieces), kThreads, 0, stream_,
                         grad_y.data<T>(), codes.data<uint8_t>(), grad_x.data<T>(), geom<I>(d), static_cast<I>(pieces),
                         static_cast<C>(1.0 / (1.0 - p)), relu);
        return;
      }
      launch_dependent(max_pool_2x2_dropout_backward_kernel<T, I>, blocks_for((total + 3) / 4), kThreads, 0, stream_,
                       grad_y.data<T>(), codes.data<uint8_t>(), grad_x.data<T>(), geom<I>(d), static_cast<I>(total),
                       static_cast<C>(1.0 / (1.0 - p)), relu, four);
    });
  });
  KILN_CUDA_LAUNCH_CHECK("max_pool2d_dropout_backward");
}

void CudaBackend::avg_pool2d(const TensorRef& x, const TensorRef& y, const Pool2dParams& p) {
  const PoolDims d = pool_dims("avg_pool2d", x, y, p);
  const int64_t total = y.numel();
  if (total == 0) return;
  visit_floating_bf16(x.dtype, "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    with_index_type(d, [&](auto index) {
      using I = decltype(index);
      avg_pool_kernel<T, I><<<blocks_for(total), kThreads, 0, stream_>>>(x.data<T>(), y.data<T>(), geom<I>(d),
                                                                          static_cast<I>(total));
    });
  });
  KILN_CUDA_LAUNCH_CHECK("avg_pool2d");
}

void CudaBackend::avg_pool2d_backward(const TensorRef& grad_y, const TensorRef& grad_x, const Pool2dParams& p) {
  const PoolDims d = pool_dims("avg_pool2d_backward", grad_x, grad_y, p);
  const int64_t total = grad_x.numel();
  if (total == 0) return;
  visit_floating_bf16(grad_y.dtype, "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    with_index_type(d, [&](auto index) {
      using I = decltype(index);
      avg_pool_backward_kernel<T, I><<<blocks_for(total), kThreads, 0, stream_>>>(grad_y.data<T>(), grad_x.data<T>(),
                                                                                   geom<I>(d), static_cast<I>(total));
    });
  });
  KILN_CUDA_LAUNCH_CHECK("avg_pool2d_backward");
}

}  // namespace kiln::cuda
