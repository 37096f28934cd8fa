// conv2d on the CPU, forward and both backwards, for f32 and f64, with stride, padding, dilation
// and groups:
//   x [N, C, H, W], w [O, C/G, KH, KW], bias [O] (optional), y [N, O, OH, OW]
//   y[n, o, i, j] = bias[o] + sum_{c, kh, kw} w[o, c, kh, kw] * x[n, g*C/G + c, i*sh - ph + kh*dh,
//                                                                        j*sw - pw + kw*dw]
//   (g = o / (O/G); x reads outside [0, H) x [0, W) are zeros.)
//
// Algorithm: im2col + gemm (kernels/cpu/gemm.h). For one image and one group, im2col lays the
// input out as a matrix col [C/G*KH*KW, OH*OW] whose column (i, j) holds the input values under
// the window of output pixel (i, j); the convolution is then one matrix product:
//   forward          y_g  [O/G, OH*OW]     = w_g [O/G, C/G*KH*KW] . col
//   backward input   gcol [C/G*KH*KW, OH*OW] = w_g^T . gy_g,  then col2im adds gcol back onto
//                                            the input pixels each column came from
//   backward weight  gw_g [O/G, C/G*KH*KW] += gy_g [O/G, OH*OW] . col^T, summed over the batch
// A 1x1 convolution with stride 1 and no padding needs no im2col: x itself is col.
//
// Threads: the batch is spread over the pool, each thread with its own col buffer, and each gemm
// runs single-threaded inside it. For MNIST's conv2 at batch 64 that beat the images in turn with a
// threaded gemm: no synchronisation per image, and im2col and col2im (memory-bound) run in parallel
// too (measurements: NOTES.md). With a batch smaller than the thread count the images run in turn
// and the gemm uses the pool instead. The weight gradient sums over the batch: each of S slots
// (S = threads) sums a fixed, contiguous range of images into its own buffer and the slots are
// added in order afterwards, so there are no races and the result does not depend on scheduling.
//
// im2col + gemm also serves the first MNIST layer (C*KH*KW = 9), where a direct loop might be
// expected to win: on one thread conv1's forward at batch 64 ran faster this way than a direct loop
// vectorised by the compiler (measurements: NOTES.md). Accumulation is in T (float for f32), as in gemm.
//
// Today's figures, batch 64, 2 threads, against PyTorch: docs/benchmarks.md's cpu-bench table (the
// recorded run docs/runs/2026-11-26-cpu). conv2 runs at 148-165 GFLOP/s [fig cpu.conv2.gflops] in the
// three passes, 0.47-0.55x [fig cpu.conv2.speed-vs-torch] PyTorch's speed; conv1's weight gradient
// at 0.38x [fig cpu.conv1.bwd-weight.speed-vs-torch]. An earlier table, which put kiln ahead: NOTES.md.
#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {
namespace {

// The sizes every part of the computation needs, read once from the shapes.
struct ConvShape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // x
  int64_t o = 0, kh = 0, kw = 0;       // weight [o, cg, kh, kw]
  int64_t oh = 0, ow = 0;              // y
  int64_t groups = 1, cg = 0, og = 0;  // channels per group, in and out
  int64_t ckk = 0;                     // cg*kh*kw: rows of col
  int64_t ohw = 0;                     // oh*ow: columns of col
  Conv2dParams p;
  bool pointwise = false;  // 1x1, stride 1, no padding: col is x itself
};

ConvShape conv_shape(const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p) {
  ConvShape s;
  s.n = x[0], s.c = x[1], s.h = x[2], s.w = x[3];
  s.o = w[0], s.kh = w[2], s.kw = w[3];
  s.oh = y[2], s.ow = y[3];
  s.groups = p.groups, s.cg = s.c / p.groups, s.og = s.o / p.groups;
  s.ckk = s.cg * s.kh * s.kw;
  s.ohw = s.oh * s.ow;
  s.p = p;
  s.pointwise = s.kh == 1 && s.kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 &&
                p.pad_w == 0;
  return s;
}

// For kernel column offset `kx` (already kx*dw - pw), the output columns j whose input column
// j*sw + kx lies in [0, w): [*lo, *hi). Everything outside reads padding.
void valid_range(int64_t kx, int64_t stride, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
  // smallest j with j*stride + kx >= 0, and smallest j with j*stride + kx >= in
  auto first_at_least = [&](int64_t bound) {
    int64_t need = bound - kx;
    return need <= 0 ? int64_t{0} : (need + stride - 1) / stride;
  };
  *lo = std::min(out, first_at_least(0));
  *hi = std::max(*lo, std::min(out, first_at_least(in)));
}

// x [cg, h, w] (one image, one group) -> col [ckk, ohw]; row (c, ky, kx), column (i, j).
template <class T>
void im2col(const T* x, const ConvShape& s, T* col) {
  const Conv2dParams& p = s.p;
  for (int64_t c = 0; c < s.cg; ++c) {
    for (int64_t ky = 0; ky < s.kh; ++ky) {
      for (int64_t kx = 0; kx < s.kw; ++kx) {
        T* dst = col + ((c * s.kh + ky) * s.kw + kx) * s.ohw;
        const int64_t x_off = kx * p.dilation_w - p.pad_w;
        int64_t lo = 0, hi = 0;
        valid_range(x_off, p.stride_w, s.w, s.ow, &lo, &hi);
        for (int64_t i = 0; i < s.oh; ++i, dst += s.ow) {
          const int64_t iy = i * p.stride_h - p.pad_h + ky * p.dilation_h;
          if (iy < 0 || iy >= s.h) {
            std::fill(dst, dst + s.ow, T(0));
            continue;
          }
          const T* src = x + (c * s.h + iy) * s.w + x_off;
          std::fill(dst, dst + lo, T(0));
          if (p.stride_w == 1) {
            std::memcpy(dst + lo, src + lo, sizeof(T) * static_cast<size_t>(hi - lo));
          } else {
            for (int64_t j = lo; j < hi; ++j) dst[j] = src[j * p.stride_w];
          }
          std::fill(dst + hi, dst + s.ow, T(0));
        }
      }
    }
  }
}

// The adjoint of im2col: x [cg, h, w] += each col value at the input pixel it was read from.
template <class T>
void col2im(const T* col, const ConvShape& s, T* x) {
  const Conv2dParams& p = s.p;
  for (int64_t c = 0; c < s.cg; ++c) {
    for (int64_t ky = 0; ky < s.kh; ++ky) {
      for (int64_t kx = 0; kx < s.kw; ++kx) {
        const T* src = col + ((c * s.kh + ky) * s.kw + kx) * s.ohw;
        const int64_t x_off = kx * p.dilation_w - p.pad_w;
        int64_t lo = 0, hi = 0;
        valid_range(x_off, p.stride_w, s.w, s.ow, &lo, &hi);
        for (int64_t i = 0; i < s.oh; ++i, src += s.ow) {
          const int64_t iy = i * p.stride_h - p.pad_h + ky * p.dilation_h;
          if (iy < 0 || iy >= s.h) continue;
          T* dst = x + (c * s.h + iy) * s.w + x_off;
          for (int64_t j = lo; j < hi; ++j) dst[j * p.stride_w] += src[j];
        }
      }
    }
  }
}

// This thread's col buffer, kept between calls (conv2 of MNIST: 288 x 576 floats).
template <class T>
T* col_buffer(int64_t count) {
  static thread_local std::vector<T> buffer;
  if (static_cast<int64_t>(buffer.size()) < count) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

// Runs fn(image) for every image, spread over the pool (see the file comment); images too small
// to be worth a thread (under ~64k multiply-adds, as in gemm) are grouped.
template <class Fn>
void for_each_image(const ConvShape& s, Fn fn) {
  const int64_t work = std::max<int64_t>(1, s.groups * s.og * s.ckk * s.ohw);
  parallel_for(s.n, std::max<int64_t>(1, (int64_t{1} << 16) / work), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) fn(i);
  });
}

template <class T>
void forward(const TensorRef& x, const TensorRef& w, const Epilogue& e, const TensorRef& y, const ConvShape& s) {
  const T* xd = x.data<T>();
  const T* wd = w.data<T>();
  const T* bd = e.bias.defined() ? e.bias.data<T>() : nullptr;
  T* yd = y.data<T>();
  for_each_image(s, [&](int64_t img) {
    const T* xn = xd + img * s.c * s.h * s.w;
    T* yn = yd + img * s.o * s.ohw;
    // With a bias, y starts as the bias and the gemm accumulates onto it: no second pass over y.
    if (bd)
      for (int64_t oc = 0; oc < s.o; ++oc) std::fill(yn + oc * s.ohw, yn + (oc + 1) * s.ohw, bd[oc]);
    T* col = s.pointwise ? nullptr : col_buffer<T>(s.ckk * s.ohw);
    for (int64_t g = 0; g < s.groups; ++g) {
      const T* xg = xn + g * s.cg * s.h * s.w;
      if (!s.pointwise) im2col(xg, s, col);
      gemm(false, false, s.og, s.ohw, s.ckk, wd + g * s.og * s.ckk, s.ckk, s.pointwise ? xg : col,
           s.ohw, yn + g * s.og * s.ohw, s.ohw, bd != nullptr);
    }
    if (e.activation != Activation::none)  // the bias is in already
      for (int64_t i = 0; i < s.o * s.ohw; ++i) yn[i] = apply_epilogue(yn[i], static_cast<const T*>(nullptr), 0, e);
  });
}

template <class T>
void backward_input(const TensorRef& grad_y, const TensorRef& w, const TensorRef& grad_x,
                    const ConvShape& s) {
  const T* gyd = grad_y.data<T>();
  const T* wd = w.data<T>();
  T* gxd = grad_x.data<T>();
  for_each_image(s, [&](int64_t img) {
    const T* gyn = gyd + img * s.o * s.ohw;
    T* gxn = gxd + img * s.c * s.h * s.w;
    // Pixels no window touches (stride > kernel, or cropped by the output size) get no col2im
    // contribution: zero the whole image first.
    if (!s.pointwise) std::fill(gxn, gxn + s.c * s.h * s.w, T(0));
    T* col = s.pointwise ? nullptr : col_buffer<T>(s.ckk * s.ohw);
    for (int64_t g = 0; g < s.groups; ++g) {
      T* gxg = gxn + g * s.cg * s.h * s.w;
      // gcol [ckk, ohw] = w_g^T [ckk, og] . gy_g [og, ohw]; w_g is stored [og, ckk].
      gemm(true, false, s.ckk, s.ohw, s.og, wd + g * s.og * s.ckk, s.ckk, gyn + g * s.og * s.ohw,
           s.ohw, s.pointwise ? gxg : col, s.ohw, false);
      if (!s.pointwise) col2im(col, s, gxg);
    }
  });
}

template <class T>
void backward_weight(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                     const ConvShape& s) {
  const T* xd = x.data<T>();
  const T* gyd = grad_y.data<T>();
  T* gwd = grad_w.data<T>();
  const int64_t w_numel = s.o * s.ckk;
  if (s.n == 0) {
    std::fill(gwd, gwd + w_numel, T(0));
    return;
  }
  // Slot 0 sums straight into grad_w; slots 1.. into their own partial buffers.
  const int64_t slots = std::min<int64_t>(num_threads(), s.n);
  std::vector<T> partials(static_cast<size_t>((slots - 1) * w_numel));
  parallel_for(slots, 1, [&](int64_t slot_begin, int64_t slot_end) {
    for (int64_t slot = slot_begin; slot < slot_end; ++slot) {
      T* gw = slot == 0 ? gwd : partials.data() + (slot - 1) * w_numel;
      const int64_t first = slot * s.n / slots, last = (slot + 1) * s.n / slots;
      T* col = s.pointwise ? nullptr : col_buffer<T>(s.ckk * s.ohw);
      for (int64_t img = first; img < last; ++img) {
        const T* xn = xd + img * s.c * s.h * s.w;
        const T* gyn = gyd + img * s.o * s.ohw;
        for (int64_t g = 0; g < s.groups; ++g) {
          const T* xg = xn + g * s.cg * s.h * s.w;
          if (!s.pointwise) im2col(xg, s, col);
          // gw_g [og, ckk] (+)= gy_g [og, ohw] . col^T; col is stored [ckk, ohw].
          gemm(false, true, s.og, s.ckk, s.ohw, gyn + g * s.og * s.ohw, s.ohw,
               s.pointwise ? xg : col, s.ohw, gw + g * s.og * s.ckk, s.ckk, img != first);
        }
      }
    }
  });
  for (int64_t slot = 1; slot < slots; ++slot) {
    const T* part = partials.data() + (slot - 1) * w_numel;
    for (int64_t i = 0; i < w_numel; ++i) gwd[i] += part[i];
  }
}

// Calls fn(T{}) for f32 and f64; anything else is a DTypeError naming the op.
template <class Fn>
void dispatch(const char* op, DType dtype, Fn fn) {
  switch (dtype) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    default: KILN_FAIL(DTypeError, "cpu backend: ", op, " does not support dtype ", dtype);
  }
}

void check_same_dtype(const char* op, const TensorRef& a, const TensorRef& b, const TensorRef& c) {
  KILN_CHECK(a.dtype == b.dtype && b.dtype == c.dtype, DTypeError, "cpu backend: ", op,
             " needs one dtype, got ", a.dtype, ", ", b.dtype, " and ", c.dtype);
}

}  // namespace

void CpuBackend::conv2d(const TensorRef& x, const TensorRef& w, const TensorRef& y, const Conv2dParams& p,
                        const Epilogue& e) {
  check_same_dtype("conv2d", x, w, y);
  KILN_CHECK(!e.bias.defined() || e.bias.dtype == y.dtype, DTypeError,
             "cpu backend: conv2d needs one dtype, got bias ", e.bias.dtype, " for ", y.dtype);
  const ConvShape s = conv_shape(x.shape, w.shape, y.shape, p);
  dispatch("conv2d", y.dtype, [&](auto tag) { forward<decltype(tag)>(x, w, e, y, s); });
}

void CpuBackend::conv2d_backward_input(const TensorRef& grad_y, const TensorRef& w,
                                       const TensorRef& grad_x, const Conv2dParams& p) {
  check_same_dtype("conv2d_backward_input", grad_y, w, grad_x);
  const ConvShape s = conv_shape(grad_x.shape, w.shape, grad_y.shape, p);
  dispatch("conv2d_backward_input", grad_x.dtype,
           [&](auto tag) { backward_input<decltype(tag)>(grad_y, w, grad_x, s); });
}

void CpuBackend::conv2d_backward_weight(const TensorRef& x, const TensorRef& grad_y,
                                        const TensorRef& grad_w, const Conv2dParams& p) {
  check_same_dtype("conv2d_backward_weight", x, grad_y, grad_w);
  const ConvShape s = conv_shape(x.shape, grad_w.shape, grad_y.shape, p);
  dispatch("conv2d_backward_weight", grad_w.dtype,
           [&](auto tag) { backward_weight<decltype(tag)>(x, grad_y, grad_w, s); });
}

}  // namespace kiln::cpu
