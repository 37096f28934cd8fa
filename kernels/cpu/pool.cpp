// 2-D pooling over each plane of x [N, C, H, W] -> y [N, C, OH, OW], and the backward passes.
//
//   max_pool2d   y = max over the window; indices (i32, same shape as y) hold the winner's
//                position h * W + w in its input plane. Padding never wins (PyTorch pads with
//                -inf); a NaN does: the last one in row-major window order, as in PyTorch, whose
//                CPU and CUDA kernels take v when v > max or v is NaN. Ties: the first.
//   avg_pool2d   y = mean over the window. count_include_pad: divide by KH * KW, padding
//                included; otherwise by the number of real input elements in the window.
//   backward     grad_x is zeroed here, then each grad_y element is added to the input
//                element(s) it came from (one for max, the whole window for avg).
//
// Output sizes come from y; they must be PyTorch's floor((H + 2 pad - K) / stride) + 1 (ceil_mode
// is not supported), so every window lies inside the padded input. Padding is at most half the
// kernel, as PyTorch requires, so every window also holds at least one real element. Planes are
// independent (also in backward: windows never cross planes), so they split over threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kGrain = 32 * 1024;  // input elements per parallel chunk

struct Geometry {
  int64_t planes, h, w, oh, ow;
};

// Checks x [N, C, H, W] (or grad_x) against y [N, C, OH, OW] (or grad_y) and p.
Geometry check_pool(const char* op, const TensorRef& x, const TensorRef& y, const Pool2dParams& p) {
  KILN_CHECK(x.shape.size() == 4 && y.shape.size() == 4 && x.shape[0] == y.shape[0] &&
                 x.shape[1] == y.shape[1],
             ShapeError, "cpu ", op, ": expected x [N, C, H, W] and y [N, C, OH, OW], got ",
             x.shape, " and ", y.shape);
  KILN_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1 &&
                 p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h &&
                 2 * p.pad_w <= p.kernel_w,
             ValueError, "cpu ", op, ": kernel ", p.kernel_h, "x", p.kernel_w, ", stride ",
             p.stride_h, "x", p.stride_w, ", padding ", p.pad_h, "x", p.pad_w,
             " (kernel and stride must be >= 1, padding at most half the kernel)");
  const Geometry g{x.shape[0] * x.shape[1], x.shape[2], x.shape[3], y.shape[2], y.shape[3]};
  // A window larger than the padded input fits nowhere: no outputs.
  auto outputs = [](int64_t in, int64_t pad, int64_t k, int64_t stride) {
    return in + 2 * pad < k ? 0 : (in + 2 * pad - k) / stride + 1;
  };
  const int64_t oh = outputs(g.h, p.pad_h, p.kernel_h, p.stride_h);
  const int64_t ow = outputs(g.w, p.pad_w, p.kernel_w, p.stride_w);
  KILN_CHECK(g.oh == oh && g.ow == ow, ShapeError,
             "cpu ", op, ": y ", y.shape, " does not match x ", x.shape, " (expected ", oh, "x",
             ow, " outputs per plane)");
  return g;
}

// The input rows [h0, h1) and columns [w0, w1) that output (oh, ow) covers, clipped to the
// input; size() counts the real elements, without the padding.
struct Window {
  int64_t h0, h1, w0, w1;
  int64_t size() const { return (h1 - h0) * (w1 - w0); }
};
Window window_of(const Pool2dParams& p, const Geometry& g, int64_t oh, int64_t ow) {
  const int64_t h = oh * p.stride_h - p.pad_h, w = ow * p.stride_w - p.pad_w;
  return {std::max<int64_t>(h, 0), std::min(h + p.kernel_h, g.h), std::max<int64_t>(w, 0),
          std::min(w + p.kernel_w, g.w)};
}

int64_t planes_per_chunk(const Geometry& g) {
  return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, g.h * g.w));
}

template <class T>
void max_pool_kernel(const TensorRef& x, const TensorRef& y, const TensorRef& indices,
                     const Pool2dParams& p, const Geometry& g) {
  parallel_for(g.planes, planes_per_chunk(g), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* xp = x.data<T>() + plane * g.h * g.w;  // x[n, c]: [H, W]
      T* yp = y.data<T>() + plane * g.oh * g.ow;      // y[n, c]: [OH, OW]
      int32_t* ip = indices.data<int32_t>() + plane * g.oh * g.ow;
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const Window win = window_of(p, g, oh, ow);
          int64_t best_at = win.h0 * g.w + win.w0;  // start from a real element, not -inf,
          T best = xp[best_at];                     // so a window of -inf still has an index
          for (int64_t h = win.h0; h < win.h1; ++h)
            for (int64_t w = win.w0; w < win.w1; ++w) {
              const T v = xp[h * g.w + w];
              // v > NaN is false, so only a later NaN replaces a NaN: the last NaN wins.
              if (v > best || std::isnan(v)) {
                best = v;
                best_at = h * g.w + w;
              }
            }
          yp[oh * g.ow + ow] = best;
          ip[oh * g.ow + ow] = static_cast<int32_t>(best_at);
        }
    }
  });
}

template <class T>
void max_pool_backward_kernel(const TensorRef& grad_y, const TensorRef& indices,
                              const TensorRef& grad_x, const Geometry& g) {
  parallel_for(g.planes, planes_per_chunk(g), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      T* gx = grad_x.data<T>() + plane * g.h * g.w;
      const T* gy = grad_y.data<T>() + plane * g.oh * g.ow;
      const int32_t* ip = indices.data<int32_t>() + plane * g.oh * g.ow;
      std::fill(gx, gx + g.h * g.w, T(0));
      for (int64_t o = 0; o < g.oh * g.ow; ++o) {
        KILN_CHECK(ip[o] >= 0 && ip[o] < g.h * g.w, ValueError, "cpu max_pool2d_backward: index ",
                   ip[o], " is outside the ", g.h, "x", g.w, " input plane");
        gx[ip[o]] += gy[o];  // overlapping windows may pick the same input: accumulate
      }
    }
  });
}

template <class T>
void avg_pool_kernel(const TensorRef& x, const TensorRef& y, const Pool2dParams& p,
                     const Geometry& g) {
  const double full = static_cast<double>(p.kernel_h * p.kernel_w);
  parallel_for(g.planes, planes_per_chunk(g), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* xp = x.data<T>() + plane * g.h * g.w;
      T* yp = y.data<T>() + plane * g.oh * g.ow;
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const Window win = window_of(p, g, oh, ow);
          double sum = 0;
          for (int64_t h = win.h0; h < win.h1; ++h)
            for (int64_t w = win.w0; w < win.w1; ++w) sum += xp[h * g.w + w];
          const double count = p.count_include_pad ? full : static_cast<double>(win.size());
          yp[oh * g.ow + ow] = static_cast<T>(sum / count);
        }
    }
  });
}

template <class T>
void avg_pool_backward_kernel(const TensorRef& grad_y, const TensorRef& grad_x,
                              const Pool2dParams& p, const Geometry& g) {
  const double full = static_cast<double>(p.kernel_h * p.kernel_w);
  parallel_for(g.planes, planes_per_chunk(g), [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      T* gx = grad_x.data<T>() + plane * g.h * g.w;
      const T* gy = grad_y.data<T>() + plane * g.oh * g.ow;
      std::fill(gx, gx + g.h * g.w, T(0));
      for (int64_t oh = 0; oh < g.oh; ++oh)
        for (int64_t ow = 0; ow < g.ow; ++ow) {
          const Window win = window_of(p, g, oh, ow);
          const double count = p.count_include_pad ? full : static_cast<double>(win.size());
          const T share = static_cast<T>(gy[oh * g.ow + ow] / count);
          for (int64_t h = win.h0; h < win.h1; ++h)
            for (int64_t w = win.w0; w < win.w1; ++w) gx[h * g.w + w] += share;
        }
    }
  });
}

// Runs fn with the C++ type of `dtype`; pooling is floating-point only.
template <class Fn>
void visit_floating(DType dtype, const char* op, Fn fn) {
  visit_arithmetic(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) fn(T{});
    else KILN_FAIL(DTypeError, "cpu backend: ", op, " does not take ", dtype);
  });
}

void check_indices_dtype(const char* op, const TensorRef& indices) {
  KILN_CHECK(indices.dtype == DType::i32, DTypeError, "cpu ", op, ": indices must be i32, got ",
             indices.dtype);
}

}  // namespace

void CpuBackend::max_pool2d(const TensorRef& x, const TensorRef& y, const TensorRef& indices,
                            const Pool2dParams& p) {
  const Geometry g = check_pool("max_pool2d", x, y, p);
  check_indices_dtype("max_pool2d", indices);
  visit_floating(x.dtype, "max_pool2d", [&](auto tag) {
    max_pool_kernel<decltype(tag)>(x, y, indices, p, g);
  });
}

void CpuBackend::max_pool2d_backward(const TensorRef& grad_y, const TensorRef& indices,
                                     const TensorRef& grad_x, const Pool2dParams& p) {
  const Geometry g = check_pool("max_pool2d_backward", grad_x, grad_y, p);
  check_indices_dtype("max_pool2d_backward", indices);
  visit_floating(grad_y.dtype, "max_pool2d_backward", [&](auto tag) {
    max_pool_backward_kernel<decltype(tag)>(grad_y, indices, grad_x, g);
  });
}

void CpuBackend::avg_pool2d(const TensorRef& x, const TensorRef& y, const Pool2dParams& p) {
  const Geometry g = check_pool("avg_pool2d", x, y, p);
  visit_floating(x.dtype, "avg_pool2d", [&](auto tag) {
    avg_pool_kernel<decltype(tag)>(x, y, p, g);
  });
}

void CpuBackend::avg_pool2d_backward(const TensorRef& grad_y, const TensorRef& grad_x,
                                     const Pool2dParams& p) {
  const Geometry g = check_pool("avg_pool2d_backward", grad_x, grad_y, p);
  visit_floating(grad_y.dtype, "avg_pool2d_backward", [&](auto tag) {
    avg_pool_backward_kernel<decltype(tag)>(grad_y, grad_x, p, g);
  });
}

}  // namespace kiln::cpu
