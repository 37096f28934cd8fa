// The cases of test_backend_ops's conv2d, pooling and batch norm rows, and the geometries they
// (and test_cuda's version sweeps) draw: random convolutions (sizes 1 and odd sizes, kernels 1..5,
// stride 1..3, padding 0..2, dilation 1..2, groups 1..3, with and without bias; every fourth wide
// enough to span several tiles) and random poolings. Tolerances are per term: f32's atol grows
// with the length of each sum (inputs in [-1, 1)).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/kiln.h"
#include "tests/backend_ops.h"

namespace kiln::test {

struct ConvCase {
  Shape x, w;
  Conv2dConfig config;
  bool bias = false;
  Shape y;
  std::string str() const {
    return "x " + x.str() + " w " + w.str() + " stride " + std::to_string(config.stride[0]) + "x" +
           std::to_string(config.stride[1]) + " pad " + std::to_string(config.padding[0]) + "x" +
           std::to_string(config.padding[1]) + " dilation " + std::to_string(config.dilation[0]) + "x" +
           std::to_string(config.dilation[1]) + " groups " + std::to_string(config.groups) +
           (bias ? " bias" : "");
  }
};

inline int64_t pick(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// A random convolution; every fourth is wide enough (C/G, O/G > 32, M > 128) to span several
// tiles of the implicit GEMM in every dimension.
inline ConvCase random_conv(std::mt19937& rng, int trial) {
  static const int64_t channels[] = {1, 2, 3, 5, 8};
  ConvCase c;
  const bool wide = trial % 4 == 3;
  const int64_t groups = pick(rng, 1, 3);
  const int64_t cg = wide ? pick(rng, 33, 40) : channels[pick(rng, 0, 4)];
  const int64_t og = wide ? pick(rng, 33, 70) : channels[pick(rng, 0, 4)];
  const int64_t n = pick(rng, 1, 3);
  c.config.groups = groups;
  for (int i = 0; i < 2; ++i) {
    c.config.stride[i] = pick(rng, 1, 3);
    c.config.padding[i] = pick(rng, 0, 2);
    c.config.dilation[i] = pick(rng, 1, 2);
  }
  const int64_t kh = pick(rng, 1, 5), kw = pick(rng, 1, 5);
  auto in_size = [&](int64_t k, int i) {
    const int64_t least = std::max<int64_t>(1, c.config.dilation[i] * (k - 1) + 1 - 2 * c.config.padding[i]);
    return least + pick(rng, 0, wide ? 12 : 9);
  };
  const int64_t h = in_size(kh, 0), w = in_size(kw, 1);
  c.x = {n, cg * groups, h, w};
  c.w = {og * groups, cg, kh, kw};
  c.bias = pick(rng, 0, 1) == 1;
  auto out = [&](int64_t in, int64_t k, int i) {
    return (in + 2 * c.config.padding[i] - c.config.dilation[i] * (k - 1) - 1) / c.config.stride[i] + 1;
  };
  c.y = {n, og * groups, out(h, kh, 0), out(w, kw, 1)};
  return c;
}

// test_cuda's tolerances for its conv2d versions, those of test_backend_ops's conv2d row: f32's
// rtol 1e-4 plus an absolute term that grows with the reduction length (inputs in [-1, 1)).
inline double rtol_for(DType t) { return t == DType::f32 ? 1e-4 : 1e-12; }
inline double atol_for(DType t, int64_t length) { return (t == DType::f32 ? 1e-6 : 1e-14) * static_cast<double>(length); }

struct PoolCase {
  Shape x;
  Pool2dConfig config;
  std::string str() const {
    return "x " + x.str() + " kernel " + std::to_string(config.kernel[0]) + "x" + std::to_string(config.kernel[1]) +
           " stride " + std::to_string(config.stride[0]) + "x" + std::to_string(config.stride[1]) + " pad " +
           std::to_string(config.padding[0]) + "x" + std::to_string(config.padding[1]) +
           (config.count_include_pad ? "" : " exclude pad");
  }
};

inline PoolCase random_pool(std::mt19937& rng) {
  PoolCase c;
  Shape x = {pick(rng, 1, 3), pick(rng, 1, 5), 0, 0};
  for (int i = 0; i < 2; ++i) {
    c.config.kernel[i] = pick(rng, 1, 4);
    c.config.stride[i] = pick(rng, 0, 3);  // 0: the kernel size
    c.config.padding[i] = pick(rng, 0, c.config.kernel[i] / 2);
    x[2 + i] = std::max<int64_t>(1, c.config.kernel[i] - 2 * c.config.padding[i]) + pick(rng, 0, 12);
  }
  c.config.count_include_pad = pick(rng, 0, 1) == 1;
  c.x = x;
  return c;
}

// An input and a weight shape: a layer, stride 1, no padding.
struct ConvLayer {
  Shape x, w;
};

// The MNIST CNN's two conv layers, at batches n1 and n2.
inline std::vector<ConvLayer> mnist_conv_layers(int64_t n1, int64_t n2) {
  return {{{n1, 1, 28, 28}, {32, 1, 3, 3}}, {{n2, 32, 26, 26}, {64, 32, 3, 3}}};
}

// conv2d, conv2d_backward_input and conv2d_backward_weight on one geometry, each with the row's
// tolerance per term of its sums.
inline void check_conv(const Run& r, const ConvCase& c, const Take& t) {
  Tensor x = uniform(c.x, -1, 1, t.dtype), w = uniform(c.w, -1, 1, t.dtype), gy = uniform(c.y, -1, 1, t.dtype);
  Tensor b = c.bias ? uniform({c.w[0]}, -1, 1, t.dtype) : Tensor();
  const std::string what = c.str() + " " + std::string(dtype_name(t.dtype));
  const int64_t og = c.w[0] / c.config.groups;
  r.check(conv2d(x.to(r.device), w.to(r.device), c.bias ? b.to(r.device) : Tensor(), c.config),
          conv2d(x, w, b, c.config), t.tol.atol_times(static_cast<double>(c.w[1] * c.w[2] * c.w[3])), "conv2d " + what);
  r.check(conv2d_backward_input(gy.to(r.device), w.to(r.device), c.x, c.config),
          conv2d_backward_input(gy, w, c.x, c.config), t.tol.atol_times(static_cast<double>(og * c.w[2] * c.w[3])),
          "conv2d_backward_input " + what);
  // taken back through a relu that made x (x's values as its output: about half of them <= 0)
  r.check(conv2d_backward_input(gy.to(r.device), w.to(r.device), c.x, c.config, x.to(r.device)),
          conv2d_backward_input(gy, w, c.x, c.config, x), t.tol.atol_times(static_cast<double>(og * c.w[2] * c.w[3])),
          "conv2d_backward_input through relu " + what);
  r.check(conv2d_backward_weight(x.to(r.device), gy.to(r.device), c.w, c.config),
          conv2d_backward_weight(x, gy, c.w, c.config), t.tol.atol_times(static_cast<double>(c.y[0] * c.y[2] * c.y[3])),
          "conv2d_backward_weight " + what);
}

// conv2d and both backward ops on 60 random geometries, then on geometries whose channels per
// group are whole steps of 16 (Vulkan's conv2d.comp orders k tap-major there), then the
// gradients of x (a transposed view, made contiguous by the op), the weight and the bias through
// autograd with and without a fused ReLU. (Under a ReLU,
// uniform inputs leave outputs within rounding of 0, whose mask bit may differ between the
// sides and move a gradient by a whole term.)
inline void conv2d_cases(const Run& r) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const ConvCase c = random_conv(rng, trial);
    for (const Take& t : r.takes) check_conv(r, c, t);
  }
  for (int trial = 1; trial < 24; trial += trial % 4 == 3 ? 2 : 1) {  // the narrow geometries
    ConvCase c = random_conv(rng, trial);
    const int64_t groups = c.config.groups, cg = trial % 2 ? 16 : 32, og = trial % 3 ? 16 : 48;
    c.x[1] = cg * groups, c.w[0] = og * groups, c.w[1] = cg, c.y[1] = og * groups;
    for (const Take& t : r.takes) check_conv(r, c, t);
  }
  std::mt19937 autograd_rng(13);
  for (int trial = 0; trial < 12; ++trial) {
    ConvCase c = random_conv(autograd_rng, trial);
    c.bias = true;
    for (const Take& t : r.takes)
      for (Activation act : {Activation::none, Activation::relu}) {
        // with the ReLU, quarters (exact sums): both sides take the same mask
        auto draw = [&](const Shape& s) { return act == Activation::relu ? quarters(s, t.dtype) : uniform(s, -1, 1, t.dtype); };
        Tensor x = draw({c.x[0], c.x[1], c.x[3], c.x[2]}).transpose(2, 3);
        Tensor w = draw(c.w), b = draw({c.w[0]}), gy = uniform(c.y, -1, 1, t.dtype);
        std::vector<Tensor> grads[2];
        for (int side = 0; side < 2; ++side) {
          const Device on = side ? r.device : Device::cpu();
          Tensor xl = x.to(on).detach().requires_grad_(), wl = w.to(on).detach().requires_grad_();
          Tensor bl = b.to(on).detach().requires_grad_();
          (conv2d(xl, wl, bl, c.config, act) * gy.to(on)).sum().backward();
          grads[side] = {xl.grad(), wl.grad(), bl.grad()};
        }
        const std::string what = c.str() + " " + std::string(dtype_name(t.dtype)) + (act == Activation::relu ? " relu" : "");
        const double og = static_cast<double>(c.w[0] / c.config.groups), outputs = static_cast<double>(c.y[0] * c.y[2] * c.y[3]);
        r.check(grads[1][0], grads[0][0], t.tol.atol_times(og * static_cast<double>(c.w[2] * c.w[3])), "grad x " + what);
        r.check(grads[1][1], grads[0][1], t.tol.atol_times(outputs), "grad w " + what);
        r.check(grads[1][2], grads[0][2], t.tol.atol_times(outputs), "grad bias " + what);
      }
  }
}

// conv2d (with a bias) and both backward ops on each of `layers` (stride 1, no padding).
inline void conv2d_layer_cases(const Run& r, const std::vector<ConvLayer>& layers) {
  for (const auto& [x, w] : layers) {
    const ConvCase c{x, w, {}, true, {x[0], w[0], x[2] - w[2] + 1, x[3] - w[3] + 1}};
    for (const Take& t : r.takes) check_conv(r, c, t);
  }
}

// Infinities and a NaN in conv2d's input, weight and output gradient: each output that f32
// makes inf (or NaN) comes out inf (or NaN) here too, and no other (CUDA's 3xTF32 would split an
// inf into inf + NaN; its kernels recompute such outputs in f32). [2, 40, 9, 9] * [48, 40, 3, 3].
struct ConvSpecials {
  Tensor x, w, gy;
  explicit ConvSpecials(DType t) {
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> xv = uniform({2, 40, 9, 9}, -1, 1, DType::f64).to_vector<double>();
    std::vector<double> wv = uniform({48, 40, 3, 3}, -1, 1, DType::f64).to_vector<double>();
    std::vector<double> gyv = uniform({2, 48, 7, 7}, -1, 1, DType::f64).to_vector<double>();
    xv[5 * 81 + 40] = inf;          // image 0, channel 5, the centre
    xv[(40 + 7) * 81 + 3] = -inf;   // image 1, channel 7, top row
    wv[3 * 360 + 2 * 9 + 4] = inf;  // output channel 3, input channel 2, the centre tap
    xv[(40 + 30) * 81 + 50] = std::nan("");
    gyv[48 * 49 + 10] = -inf;  // image 1
    x = from_vector(xv, {2, 40, 9, 9}).to(t), w = from_vector(wv, {48, 40, 3, 3}).to(t);
    gy = from_vector(gyv, {2, 48, 7, 7}).to(t);
  }
};

// conv2d and conv2d_backward_weight with the special values.
inline void conv2d_special_cases(const Run& r) {
  for (const Take& t : r.takes) {
    const ConvSpecials s(t.dtype);
    const std::string dtype(dtype_name(t.dtype));
    r.check(conv2d(s.x.to(r.device), s.w.to(r.device), Tensor(), {}), conv2d(s.x, s.w, Tensor(), {}),
            t.tol.atol_times(360), "conv2d with inf and NaN " + dtype);
    r.check(conv2d_backward_weight(s.x.to(r.device), s.gy.to(r.device), s.w.shape(), {}),
            conv2d_backward_weight(s.x, s.gy, s.w.shape(), {}), t.tol.atol_times(2 * 49),
            "conv2d_backward_weight with inf and NaN " + dtype);
  }
}

// conv2d_backward_input with the special values: the inputs a tap of the infinite weight never
// reaches stay finite.
inline void conv2d_backward_input_special_cases(const Run& r) {
  for (const Take& t : r.takes) {
    const ConvSpecials s(t.dtype);
    r.check(conv2d_backward_input(s.gy.to(r.device), s.w.to(r.device), s.x.shape(), {}),
            conv2d_backward_input(s.gy, s.w, s.x.shape(), {}), t.tol.atol_times(48 * 9),
            "conv2d_backward_input with inf " + std::string(dtype_name(t.dtype)));
  }
}

// conv2d with a fused bias and ReLU (no padding, stride 1) and the weight's gradient through
// autograd, on each of `layers`. The inputs are quarters (exact products and sums): both sides
// take the same ReLU mask.
inline void conv2d_bias_relu_cases(const Run& r, const std::vector<ConvLayer>& layers) {
  for (const auto& [xs, ws] : layers)
    for (const Take& t : r.takes) {
      Tensor x = quarters(xs, t.dtype), w = quarters(ws, t.dtype), b = quarters({ws[0]}, t.dtype);
      const std::string what = "conv2d + bias + relu " + xs.str() + " " + ws.str() + " " + std::string(dtype_name(t.dtype));
      Tensor out[2], gw[2], gb[2];
      // x wants no gradient (a first layer): the weight's and the bias's gradients may take relu's
      // in the same kernel (Backend::conv2d_backward_weight_and_bias's relu_y)
      for (int side = 0; side < 2; ++side) {
        const Device on = side ? r.device : Device::cpu();
        Tensor wd = w.detach().to(on).requires_grad_(), bd = b.detach().to(on).requires_grad_();
        out[side] = conv2d(x.to(on), wd, bd, {}, Activation::relu);
        sum(out[side]).backward();
        gw[side] = wd.grad(), gb[side] = bd.grad();
      }
      // atol: 17 terms' worth for the output; the weight's and the bias's gradients sum N*H*W of them
      const Tol sums = t.tol.atol_times(10 * std::sqrt(static_cast<double>(xs.numel() / xs[1])));
      r.check(out[1], out[0], t.tol.atol_times(17), what);
      r.check(gw[1], gw[0], sums, what + " grad w");
      r.check(gb[1], gb[0], sums, what + " grad b");
    }
}

// x of small integers (ties are common), NaNs sprinkled on every third trial, a transposed view
// on odd ones, in dtype t.
inline Tensor pool_input(std::mt19937& rng, const Shape& s, int trial, DType t) {
  std::vector<double> values(static_cast<size_t>(s.numel()));
  for (double& v : values)
    v = trial % 3 == 0 && pick(rng, 0, 9) == 0 ? std::nan("") : static_cast<double>(pick(rng, -3, 3));
  Tensor x = from_vector<double>(values, s).to(t);
  return trial % 2 ? x.transpose(2, 3).contiguous().transpose(2, 3) : x;
}

// The gradient of pool(x) through autograd on 10 random poolings, in every dtype taken.
inline void pool_gradient_cases(const Run& r, Tensor (*pool)(const Tensor&, const Pool2dConfig&)) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 10; ++trial) {
    const PoolCase c = random_pool(rng);
    for (const Take& t : r.takes) {
      Tensor x = uniform(c.x, -1, 1, t.dtype), gy = uniform(pool(x, c.config).shape(), -1, 1, t.dtype), grads[2];
      for (int side = 0; side < 2; ++side) {
        const Device on = side ? r.device : Device::cpu();
        Tensor xl = x.detach().to(on).requires_grad_();
        (pool(xl, c.config) * gy.to(on)).sum().backward();
        grads[side] = xl.grad();
      }
      r.check(grads[1], grads[0], t.tol, "gradient " + c.str() + " " + std::string(dtype_name(t.dtype)));
    }
  }
}

// max_pool2d's values and indices exactly (ties: the first; NaN wins, the last NaN of a window, as
// in PyTorch's kernels), on 60 random poolings, on windows that tile the input exactly (CUDA: the
// backward's thread-per-window version) and on windows holding several NaNs; its backward with
// the row's tolerance (overlapping windows add in some order); and the gradient through autograd.
inline void max_pool2d_cases(const Run& r) {
  std::mt19937 rng(15);
  // x (in t's dtype) pooled on the device against the CPU; `view`: x goes there as a transposed view
  auto compare = [&](const PoolCase& c, const Tensor& x, const Take& t, bool view, const std::string& note) {
    Tensor on_dev = view ? x.transpose(2, 3).contiguous().to(r.device).transpose(2, 3) : x.to(r.device);
    const std::string what = c.str() + " " + std::string(dtype_name(t.dtype)) + note;
    PoolResult want = max_pool2d_with_indices(x, c.config), got = max_pool2d_with_indices(on_dev, c.config);
    r.check(got.values, want.values, {}, "max_pool2d " + what);
    r.check(got.indices, want.indices, {}, "max_pool2d indices " + what);
    Tensor gy = uniform(want.values.shape(), -1, 1, t.dtype);
    r.check(max_pool2d_backward(gy.to(r.device), got.indices, c.x, c.config),
            max_pool2d_backward(gy, want.indices, c.x, c.config), t.tol, "max_pool2d_backward " + what);
    // taken back through a relu that made x, read from y (values <= 0 and NaNs among them)
    r.check(max_pool2d_backward(gy.to(r.device), got.indices, c.x, c.config, got.values),
            max_pool2d_backward(gy, want.indices, c.x, c.config, want.values), t.tol,
            "max_pool2d_backward through relu " + what);
  };
  auto check = [&](const PoolCase& c, int trial) {
    for (const Take& t : r.takes) compare(c, pool_input(rng, c.x, trial, t.dtype), t, trial % 2 == 1, "");
  };
  for (int trial = 0; trial < 60; ++trial) check(random_pool(rng), trial);
  int trial = 0;
  for (const auto& [x, k0, k1] : {std::tuple{Shape{2, 3, 24, 24}, 2, 2}, std::tuple{Shape{1, 2, 6, 9}, 2, 3},
                                  std::tuple{Shape{3, 1, 5, 5}, 1, 1}, std::tuple{Shape{1, 2, 12, 8}, 4, 4}}) {
    PoolCase c;
    c.x = x;
    c.config.kernel[0] = c.config.stride[0] = k0;
    c.config.kernel[1] = c.config.stride[1] = k1;
    check(c, trial++);
  }
  // Windows of two and three NaNs beside -inf and ties: the last NaN wins, its value, its index and
  // so the gradient (the first would give 0, 8 and 10 for three of the 2x2 windows, not 5, 13 and
  // 14). 2x2 at stride 2 tiles the input (CUDA: thread per window), 3x3 at stride 3 does not
  // overlap (one window per element), 3x3 at stride 1 overlaps.
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const Tensor nans = from_vector<double>({nan,  1,   7,   2,    //
                                           -inf, nan, 7,   3,    //
                                           nan,  0,   nan, nan,  //
                                           5,    nan, nan, 5},
                                          {1, 1, 4, 4});
  for (const auto& [k, s, p] : {std::tuple{2, 2, 0}, std::tuple{3, 3, 1}, std::tuple{3, 1, 1}}) {
    PoolCase c;
    c.x = nans.shape();
    c.config.kernel = {k, k};
    c.config.stride = {s, s};
    c.config.padding = {p, p};
    for (const Take& t : r.takes) compare(c, nans.to(t.dtype), t, false, " (windows of several NaNs)");
  }
  pool_gradient_cases(r, [](const Tensor& x, const Pool2dConfig& c) { return max_pool2d(x, c); });
}

// max_pool2d_dropout on the device (CUDA: one kernel each way for 2 x 2 windows that tile x; else
// and elsewhere the two ops) against dropout(max_pool2d(x)) on the CPU with the same generator:
// the same values, the same gradient, the generator moved as far. 2 x 2 windows four to a row
// (OW a multiple of 4) and not (OW 7, OW 1), windows of ties and NaNs, x the output of a relu (the
// gradient masked for it: autograd::Needed) or not, x one element into its buffer (not aligned
// for the kernel's loads), poolings it does not fuse, and eval, p = 0 and p = 1.
inline void max_pool2d_dropout_cases(const Run& r) {
  std::mt19937 rng(18);
  auto compare = [&](const PoolCase& c, const Tensor& x, const Take& t, double p, bool training, bool relu_first,
                     const std::string& note) {
    const std::string what = "max_pool2d_dropout " + c.str() + " " + std::string(dtype_name(t.dtype)) + " p " +
                             std::to_string(p) + (training ? "" : " eval") + (relu_first ? " after a relu" : "") + note;
    const Tensor gy = uniform(max_pool2d(x.detach(), c.config).shape(), -1, 1, t.dtype);
    Tensor y[2], grads[2];
    uint64_t offsets[2];
    for (int side = 0; side < 2; ++side) {
      Generator gen(40 + static_cast<uint64_t>(p * 100));
      const Device on = side ? r.device : Device::cpu();
      Tensor xl = x.detach().to(on).requires_grad_();
      Tensor in = relu_first ? relu(xl) : xl;
      y[side] = side ? max_pool2d_dropout(in, c.config, p, training, &gen)
                     : dropout(max_pool2d(in, c.config), p, training, &gen);
      (y[side] * gy.to(on)).sum().backward();
      grads[side] = xl.grad();
      offsets[side] = gen.offset();
    }
    r.check(y[1], y[0], {}, what);
    r.check(grads[1], grads[0], {}, what + " gradient");
    CHECK_MESSAGE(offsets[1] == offsets[0], what << ": the generator moved as far");
  };
  auto cases = [&](const PoolCase& c, int trial) {
    for (const Take& t : r.takes) {
      const Tensor x = pool_input(rng, c.x, trial, t.dtype);
      compare(c, x, t, trial % 2 ? 0.5 : 0.25, true, trial % 4 < 2, "");
    }
  };
  int trial = 0;
  for (const Shape& x : {Shape{2, 3, 24, 24}, Shape{4, 64, 24, 24}, Shape{3, 5, 10, 14}, Shape{2, 3, 2, 2},
                         Shape{1, 1, 8, 16}, Shape{5, 2, 6, 6}, Shape{1, 3, 7, 8}}) {
    PoolCase c;
    c.x = x;
    c.config.kernel = {2, 2};
    for (int k = 0; k < 4; ++k) cases(c, trial++);
  }
  for (int i = 0; i < 12; ++i) cases(random_pool(rng), trial++);
  // x one element into its buffer: contiguous, but not aligned for the kernel's Pair loads
  PoolCase c;
  c.x = {2, 3, 12, 16};
  c.config.kernel = {2, 2};
  for (const Take& t : r.takes) {
    const Tensor buffer = uniform({c.x.numel() + 1}, -1, 1, t.dtype);
    compare(c, buffer.slice(0, 1, c.x.numel() + 1).reshape(c.x), t, 0.25, true, false, " one element in");
  }
  for (const auto& [p, training] : {std::pair{0.5, false}, std::pair{0.0, true}, std::pair{1.0, true}})
    for (const Take& t : r.takes) {
      compare(c, pool_input(rng, c.x, 1, t.dtype), t, p, training, true, "");
    }
}

// avg_pool2d and its backward on 60 random poolings, with and without the padding counted, and
// the gradient through autograd.
inline void avg_pool2d_cases(const Run& r) {
  std::mt19937 rng(16);
  for (int trial = 0; trial < 60; ++trial) {
    const PoolCase c = random_pool(rng);
    for (const Take& t : r.takes) {
      const std::string what = c.str() + " " + std::string(dtype_name(t.dtype));
      Tensor x = uniform(c.x, -1, 1, t.dtype);
      r.check(avg_pool2d(x.to(r.device), c.config), avg_pool2d(x, c.config), t.tol, "avg_pool2d " + what);
      Tensor gy = uniform(avg_pool2d(x, c.config).shape(), -1, 1, t.dtype);
      r.check(avg_pool2d_backward(gy.to(r.device), c.x, c.config), avg_pool2d_backward(gy, c.x, c.config), t.tol,
              "avg_pool2d_backward " + what);
    }
  }
  pool_gradient_cases(r, [](const Tensor& x, const Pool2dConfig& c) { return avg_pool2d(x, c); });
}

// batch_norm in training and eval, with and without weight and bias: the output, the running
// averages and every gradient. Shapes include channels of one value and channels long enough to
// be summed in several runs (Vulkan's batch_norm.comp: 8 runs of 2048, and uneven runs). The
// sums of the affine gradients get a tolerance per sqrt(term).
inline void batch_norm_cases(const Run& r) {
  const std::vector<Shape> shapes = {{64, 10}, {3, 7, 33},     {16, 32, 26, 26}, {2, 5, 1, 1},
                                     {1, 3, 40, 40}, {200, 1}, {4, 2, 64, 64},   {5, 2, 33, 31}};
  for (const Shape& s : shapes)
    for (const Take& k : r.takes)
      for (bool training : {true, false})
        for (bool affine : {true, false}) {
          const DType t = k.dtype;
          const int64_t c = s[1];
          // a mean far from 0 against the spread: the two-pass variance must keep its digits
          Tensor x = uniform(s, 3.0, 5.0, t), g = uniform(s, -1, 1, t);
          Tensor w = uniform({c}, 0.5, 1.5, t), b = uniform({c}, -1, 1, t);
          Tensor rm = uniform({c}, -1, 1, t), rv = uniform({c}, 0.5, 2, t);
          const std::string what = s.str() + " " + std::string(dtype_name(t)) + (training ? " train" : " eval") +
                                   (affine ? " affine" : "");
          Tensor out[2], gx[2], gw[2], gb[2], m[2], v[2];
          for (int d = 0; d < 2; ++d) {
            const Device on = d ? r.device : Device::cpu();
            Tensor xd = x.detach().to(on).requires_grad_();
            Tensor wd = affine ? w.detach().to(on).requires_grad_() : Tensor();
            Tensor bd = affine ? b.detach().to(on).requires_grad_() : Tensor();
            m[d] = rm.to(on).clone(), v[d] = rv.to(on).clone();
            out[d] = batch_norm(xd, m[d], v[d], wd, bd, training, 0.1, 1e-5);
            out[d].backward(g.to(on));
            gx[d] = xd.grad();
            if (affine) gw[d] = wd.grad(), gb[d] = bd.grad();
          }
          r.check(out[1], out[0], k.tol, "batch_norm " + what);
          r.check(gx[1], gx[0], k.tol, "grad x " + what);
          r.check(m[1], m[0], k.tol, "running mean " + what);
          r.check(v[1], v[0], k.tol, "running var " + what);
          if (affine) {
            const Tol sum_tol = k.tol.atol_times(std::sqrt(static_cast<double>(s.numel() / c)));
            r.check(gw[1], gw[0], sum_tol, "grad weight " + what);
            r.check(gb[1], gb[0], sum_tol, "grad bias " + what);
          }
        }
}


}  // namespace kiln::test
