// The CUDA conv2d and pooling kernels against the CPU backend: the public ops (forward, the
// functional backward ops and autograd) on random geometries (sizes 1 and odd sizes, kernels 1..5,
// stride 1..3, padding 0..2, dilation 1..2, groups 1..3, with and without bias), f32 and f64, and
// every conv2d version of kernels/cuda/conv2d.cuh called directly on device buffers; the backward
// input as a forward convolution also on stride-1 geometries of its own, with the cases it
// refuses (padding > dilation*(kernel-1)) checked to fall back; versions 7 and 8 (input rows in
// shared memory) on stride-1 geometries with wide rows and channels past one stage.
#include "tests/cuda/cuda_test.h"
#include "tests/conv_cases.h"

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "kiln/core/precision.h"
#include "kiln/kernels/cuda/conv2d.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// TF32 (inputs truncated to 10 mantissa bits): each product is off by up to ~2e-3 of itself, with
// either sign, so a sum of `length` products of inputs in [-1, 1) drifts like sqrt(length).
constexpr double kTf32Rtol = 2e-3;
double tf32_atol(int64_t length) { return 4e-3 * std::sqrt(static_cast<double>(length)); }

cuda::conv2d::Geometry geometry(const ConvCase& c) {
  cuda::conv2d::Geometry g;
  g.n = c.x[0], g.c = c.x[1], g.h = c.x[2], g.w = c.x[3];
  g.o = c.w[0], g.kh = c.w[2], g.kw = c.w[3], g.oh = c.y[2], g.ow = c.y[3];
  g.stride_h = c.config.stride[0], g.stride_w = c.config.stride[1];
  g.pad_h = c.config.padding[0], g.pad_w = c.config.padding[1];
  g.dilation_h = c.config.dilation[0], g.dilation_w = c.config.dilation[1];
  g.groups = c.config.groups;
  return g;
}

// A stride-1 case: x [n, cg*groups, H, W], w [og*groups, cg, k[0], k[1]], padding 0..2 and
// dilation 1..2 along each axis, each input size its smallest (at least 1) plus extra(axis).
template <class Extra>
ConvCase stride1_case(std::mt19937& rng, int64_t groups, int64_t n, int64_t cg, int64_t og, const int64_t (&k)[2],
                      Extra extra) {
  ConvCase c;
  int64_t in[2], out[2];
  c.config.groups = groups;
  for (int i = 0; i < 2; ++i) {
    c.config.stride[i] = 1;
    c.config.padding[i] = pick(rng, 0, 2);
    c.config.dilation[i] = pick(rng, 1, 2);
    const int64_t span = c.config.dilation[i] * (k[i] - 1) + 1;
    in[i] = std::max<int64_t>(1, span - 2 * c.config.padding[i]) + extra(i);
    out[i] = in[i] + 2 * c.config.padding[i] - span + 1;
  }
  c.x = {n, cg * groups, in[0], in[1]};
  c.w = {og * groups, cg, k[0], k[1]};
  c.y = {n, og * groups, out[0], out[1]};
  return c;
}

template <class T>
T* device_ptr(const Tensor& t) {
  return t.ref().data<T>();
}

}  // namespace

TEST_CASE("conv2d forward matches the CPU on random geometries, f32 and f64") {
  if (!have_cuda()) return;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const ConvCase c = random_conv(rng, trial);
    for (DType t : {DType::f32, DType::f64}) {
      Tensor x = uniform(c.x, -1, 1, t), w = uniform(c.w, -1, 1, t);
      Tensor b = c.bias ? uniform({c.w[0]}, -1, 1, t) : Tensor();
      Tensor want = conv2d(x, w, b, c.config);
      Tensor got = conv2d(x.to(kCuda), w.to(kCuda), c.bias ? b.to(kCuda) : Tensor(), c.config);
      check_close(got, want, rtol_for(t), atol_for(t, c.w[1] * c.w[2] * c.w[3]), "conv2d " + c.str());
    }
  }
}

TEST_CASE("conv2d backward input and weight match the CPU on random geometries, f32 and f64") {
  if (!have_cuda()) return;
  std::mt19937 rng(12);
  for (int trial = 0; trial < 60; ++trial) {
    const ConvCase c = random_conv(rng, trial);
    for (DType t : {DType::f32, DType::f64}) {
      Tensor x = uniform(c.x, -1, 1, t), w = uniform(c.w, -1, 1, t), gy = uniform(c.y, -1, 1, t);
      const int64_t og = c.w[0] / c.config.groups;
      check_close(conv2d_backward_input(gy.to(kCuda), w.to(kCuda), c.x, c.config),
                  conv2d_backward_input(gy, w, c.x, c.config), rtol_for(t), atol_for(t, og * c.w[2] * c.w[3]),
                  "conv2d_backward_input " + c.str());
      check_close(conv2d_backward_weight(x.to(kCuda), gy.to(kCuda), c.w, c.config),
                  conv2d_backward_weight(x, gy, c.w, c.config), rtol_for(t), atol_for(t, c.y[0] * c.y[2] * c.y[3]),
                  "conv2d_backward_weight " + c.str());
    }
  }
}

TEST_CASE("conv2d gradients through autograd match the CPU, non-contiguous input") {
  if (!have_cuda()) return;
  std::mt19937 rng(13);
  for (int trial = 0; trial < 12; ++trial) {
    ConvCase c = random_conv(rng, trial);
    c.bias = true;
    for (DType t : {DType::f32, DType::f64}) {
      // x is a transposed view: the op makes it contiguous before the kernel
      Tensor x = uniform({c.x[0], c.x[1], c.x[3], c.x[2]}, -1, 1, t).transpose(2, 3);
      Tensor w = uniform(c.w, -1, 1, t), b = uniform({c.w[0]}, -1, 1, t), gy = uniform(c.y, -1, 1, t);
      std::vector<Tensor> grads[2];
      for (int side = 0; side < 2; ++side) {
        const Device dev = side == 0 ? Device::cpu() : kCuda;
        Tensor xl = x.to(dev).detach().requires_grad_(), wl = w.to(dev).detach().requires_grad_();
        Tensor bl = b.to(dev).detach().requires_grad_();
        (conv2d(xl, wl, bl, c.config) * gy.to(dev)).sum().backward();
        grads[side] = {xl.grad(), wl.grad(), bl.grad()};
      }
      const int64_t og = c.w[0] / c.config.groups, outputs = c.y[0] * c.y[2] * c.y[3];
      check_close(grads[1][0], grads[0][0], rtol_for(t), atol_for(t, og * c.w[2] * c.w[3]), "grad x " + c.str());
      check_close(grads[1][1], grads[0][1], rtol_for(t), atol_for(t, outputs), "grad w " + c.str());
      check_close(grads[1][2], grads[0][2], rtol_for(t), atol_for(t, outputs), "grad bias " + c.str());
    }
  }
}

TEST_CASE("every conv2d version matches the CPU on device buffers") {
  if (!have_cuda()) return;
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  std::mt19937 rng(14);
  for (int trial = 0; trial < 50; ++trial) {
    const ConvCase c = random_conv(rng, trial);
    const cv::Geometry g = geometry(c);
    auto run = [&](auto tag, DType t) {
      using T = decltype(tag);
      Tensor x = uniform(c.x, -1, 1, t), w = uniform(c.w, -1, 1, t), gy = uniform(c.y, -1, 1, t);
      Tensor b = uniform({c.w[0]}, -1, 1, t);
      Tensor dx = x.to(kCuda), dw = w.to(kCuda), dgy = gy.to(kCuda), db = b.to(kCuda);
      // the forward versions store through an epilogue: the bias (where the case has one), and
      // ReLU on odd trials
      const Activation act = trial % 2 ? Activation::relu : Activation::none;
      const cuda::DeviceEpilogue<T> epilogue{c.bias ? device_ptr<T>(db) : nullptr, act};
      const double rtol = rtol_for(t);

      Tensor want = conv2d(x, w, c.bias ? b : Tensor(), c.config, act);
      const double fwd_atol = atol_for(t, c.w[1] * c.w[2] * c.w[3]);
      Tensor y1 = full(c.y, 7.0, TensorOptions(t).device(kCuda));  // outputs start as garbage
      cv::forward_direct<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue, device_ptr<T>(y1), g, stream);
      check_close(y1, want, rtol, fwd_atol, "forward_direct " + c.str());
      Tensor y2 = full(c.y, 7.0, TensorOptions(t).device(kCuda));
      cv::forward_implicit_gemm<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue, device_ptr<T>(y2), g, stream);
      check_close(y2, want, rtol, fwd_atol, "forward_implicit_gemm " + c.str());
      Tensor y3 = full(c.y, 7.0, TensorOptions(t).device(kCuda));
      cv::forward_implicit_gemm_prefetch<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue, device_ptr<T>(y3), g, stream);
      check_close(y3, want, rtol, fwd_atol, "forward_implicit_gemm_prefetch " + c.str());
      Tensor y4 = full(c.y, 7.0, TensorOptions(t).device(kCuda));
      cv::forward_implicit_gemm_wide<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue, device_ptr<T>(y4), g, stream);
      check_close(y4, want, rtol, fwd_atol, "forward_implicit_gemm_wide " + c.str());

      Tensor want_gx = conv2d_backward_input(gy, w, c.x, c.config);
      const double in_atol = atol_for(t, c.w[0] / c.config.groups * c.w[2] * c.w[3]);
      Tensor gx1 = full(c.x, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_input_direct<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx1), g, stream);
      check_close(gx1, want_gx, rtol, in_atol, "backward_input_direct " + c.str());
      Tensor gx2 = full(c.x, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_input_implicit_gemm<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx2), g, stream);
      check_close(gx2, want_gx, rtol, in_atol, "backward_input_implicit_gemm " + c.str());
      if (cv::backward_input_as_forward_applies(g)) {
        Tensor gx3 = full(c.x, 7.0, TensorOptions(t).device(kCuda));
        Tensor wt = full({std::max<int64_t>(1, cv::backward_input_as_forward_workspace(g))}, 7.0,
                         TensorOptions(t).device(kCuda));
        cv::backward_input_as_forward<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx3), device_ptr<T>(wt),
                                         g, stream);
        check_close(gx3, want_gx, rtol, in_atol, "backward_input_as_forward " + c.str());
        Tensor gx4 = full(c.x, 7.0, TensorOptions(t).device(kCuda));
        cv::backward_input_as_forward_wide<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx4),
                                              device_ptr<T>(wt), g, stream);
        check_close(gx4, want_gx, rtol, in_atol, "backward_input_as_forward_wide " + c.str());
      }

      Tensor gw = full(c.w, 7.0, TensorOptions(t).device(kCuda));
      const int64_t ws_elems = cv::backward_weight_workspace(g);
      Tensor ws = full({std::max<int64_t>(1, ws_elems)}, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_weight_implicit_gemm<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(gw),
                                           device_ptr<T>(ws), g, stream);
      check_close(gw, conv2d_backward_weight(x, gy, c.w, c.config), rtol, atol_for(t, c.y[0] * c.y[2] * c.y[3]),
                  "backward_weight_implicit_gemm " + c.str());
      Tensor gw2 = full(c.w, 7.0, TensorOptions(t).device(kCuda));
      Tensor ws2 = full({std::max<int64_t>(1, ws_elems)}, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_weight_implicit_gemm_wide<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(gw2),
                                                device_ptr<T>(ws2), g, stream);
      check_close(gw2, conv2d_backward_weight(x, gy, c.w, c.config), rtol, atol_for(t, c.y[0] * c.y[2] * c.y[3]),
                  "backward_weight_implicit_gemm_wide " + c.str());

      Tensor y6 = full(c.y, 7.0, TensorOptions(t).device(kCuda));
      cv::forward_few_outputs<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue, device_ptr<T>(y6), g, stream);
      check_close(y6, want, rtol, fwd_atol, "forward_few_outputs " + c.str());
      if (cv::backward_input_as_forward_applies(g)) {
        Tensor gx6 = full(c.x, 7.0, TensorOptions(t).device(kCuda));
        Tensor wt = full({std::max<int64_t>(1, cv::backward_input_as_forward_workspace(g))}, 7.0,
                         TensorOptions(t).device(kCuda));
        cv::backward_input_few_outputs<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx6), device_ptr<T>(wt),
                                          g, stream);
        check_close(gx6, want_gx, rtol, in_atol, "backward_input_few_outputs " + c.str());
        Tensor gx8 = full(c.x, 7.0, TensorOptions(t).device(kCuda));
        cv::backward_input_few_outputs_rows<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx8),
                                               device_ptr<T>(wt), g, stream);
        check_close(gx8, want_gx, rtol, in_atol, "backward_input_few_outputs_rows " + c.str());
      }
      Tensor y8 = full(c.y, 7.0, TensorOptions(t).device(kCuda));
      cv::forward_few_outputs_rows<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue, device_ptr<T>(y8), g, stream);
      check_close(y8, want, rtol, fwd_atol, "forward_few_outputs_rows " + c.str());

      // The tensor-core versions, 3xTF32 (f32 tolerances) and TF32 (TF32's); f64 runs their SIMT versions.
      for (const cv::TensorMath math : {cv::TensorMath::tf32x3, cv::TensorMath::tf32}) {
        const bool tf32 = math == cv::TensorMath::tf32 && t == DType::f32;
        const std::string name = math == cv::TensorMath::tf32 ? " (TF32) " : " (3xTF32) ";
        const double r = tf32 ? kTf32Rtol : rtol;
        auto atol = [&](int64_t length) { return tf32 ? tf32_atol(length) : atol_for(t, length); };
        Tensor y5 = full(c.y, 7.0, TensorOptions(t).device(kCuda));
        cv::forward_tensor_cores<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue, device_ptr<T>(y5), g, math, stream);
        check_close(y5, want, r, atol(c.w[1] * c.w[2] * c.w[3]), "forward_tensor_cores" + name + c.str());
        Tensor y7 = full(c.y, 7.0, TensorOptions(t).device(kCuda));
        Tensor packed = full({std::max<int64_t>(1, cv::forward_patch_workspace(g))}, 7.0,
                             TensorOptions(t).device(kCuda));
        cv::forward_patch<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue, device_ptr<T>(y7), device_ptr<T>(packed),
                             g, math, stream);
        check_close(y7, want, r, atol(c.w[1] * c.w[2] * c.w[3]), "forward_patch" + name + c.str());
        if (cv::backward_input_as_forward_applies(g)) {
          Tensor gx5 = full(c.x, 7.0, TensorOptions(t).device(kCuda));
          Tensor wt = full({std::max<int64_t>(1, cv::backward_input_as_forward_workspace(g))}, 7.0,
                           TensorOptions(t).device(kCuda));
          cv::backward_input_tensor_cores<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx5),
                                             device_ptr<T>(wt), g, math, stream);
          check_close(gx5, want_gx, r, atol(c.w[0] / c.config.groups * c.w[2] * c.w[3]),
                      "backward_input_tensor_cores" + name + c.str());
          Tensor gx7 = full(c.x, 7.0, TensorOptions(t).device(kCuda));
          cv::backward_input_patch<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx7), device_ptr<T>(wt), g,
                                      math, stream);
          check_close(gx7, want_gx, r, atol(c.w[0] / c.config.groups * c.w[2] * c.w[3]),
                      "backward_input_patch" + name + c.str());
        }
        Tensor gw3 = full(c.w, 7.0, TensorOptions(t).device(kCuda));
        Tensor ws3 = full({std::max<int64_t>(1, ws_elems)}, 7.0, TensorOptions(t).device(kCuda));
        cv::backward_weight_tensor_cores<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(gw3),
                                            device_ptr<T>(ws3), g, math, stream);
        check_close(gw3, conv2d_backward_weight(x, gy, c.w, c.config), r, atol(c.y[0] * c.y[2] * c.y[3]),
                    "backward_weight_tensor_cores" + name + c.str());
      }
    };
    run(float{}, DType::f32);
    run(double{}, DType::f64);
  }
}

TEST_CASE("backward input as a forward convolution matches the CPU at stride 1, and falls back otherwise") {
  if (!have_cuda()) return;
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  std::mt19937 rng(18);
  int applied = 0, fell_back = 0;
  for (int trial = 0; trial < 60; ++trial) {
    // stride 1, pad 0..2, dilation 1..2, groups 1..2, odd sizes; kernels 1..4, so some pads
    // exceed dilation*(kernel-1) (pad' < 0): those must take the gather path.
    const int64_t groups = pick(rng, 1, 2), n = pick(rng, 1, 3);
    // C/G picks the forward GEMM's N tile in version 3: 16 (<= 16), 32 (17..32) or 64 (> 32)
    const int trial_kind = trial % 5;
    const int64_t cg = trial_kind == 4 ? pick(rng, 33, 40) : trial_kind == 3 ? pick(rng, 17, 32) : pick(rng, 1, 9);
    const int64_t og = trial_kind >= 3 ? pick(rng, 17, 70) : pick(rng, 1, 9);
    const int64_t k[2] = {pick(rng, 1, 4), pick(rng, 1, 4)};
    const ConvCase c = stride1_case(rng, groups, n, cg, og, k, [&](int) { return 2 * pick(rng, 0, 6); });  // often odd
    const cv::Geometry g = geometry(c);
    const bool applies = cv::backward_input_as_forward_applies(g);
    const bool pad_fits = c.config.padding[0] <= c.config.dilation[0] * (k[0] - 1) &&
                          c.config.padding[1] <= c.config.dilation[1] * (k[1] - 1);
    CHECK_MESSAGE(applies == pad_fits, c.str());
    (applies ? applied : fell_back) += 1;
    auto run = [&](auto tag, DType t) {
      using T = decltype(tag);
      Tensor w = uniform(c.w, -1, 1, t), gy = uniform(c.y, -1, 1, t);
      Tensor want = conv2d_backward_input(gy, w, c.x, c.config);
      const double atol = atol_for(t, og * k[0] * k[1]);
      // the production path, whichever version it takes
      check_close(conv2d_backward_input(gy.to(kCuda), w.to(kCuda), c.x, c.config), want, rtol_for(t), atol,
                  "conv2d_backward_input " + c.str());
      if (!applies) return;
      Tensor dw = w.to(kCuda), dgy = gy.to(kCuda);
      Tensor gx = full(c.x, 7.0, TensorOptions(t).device(kCuda));
      Tensor wt = full({std::max<int64_t>(1, cv::backward_input_as_forward_workspace(g))}, 7.0,
                       TensorOptions(t).device(kCuda));
      cv::backward_input_as_forward<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx), device_ptr<T>(wt), g,
                                       stream);
      check_close(gx, want, rtol_for(t), atol, "backward_input_as_forward " + c.str());
      // version 7 (the input patch in shared memory) in 3xTF32: its rows of odd widths, its
      // channel stages cut short, dilation and groups
      Tensor gx7 = full(c.x, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_input_patch<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx7), device_ptr<T>(wt), g,
                                  cv::TensorMath::tf32x3, stream);
      check_close(gx7, want, rtol_for(t), atol, "backward_input_patch " + c.str());
    };
    run(float{}, DType::f32);
    run(double{}, DType::f64);
  }
  CHECK(applied > 10);
  CHECK(fell_back > 5);

  // A 1x1 kernel with padding 1: pad' = -1, so version 3 refuses and production falls back.
  ConvCase c;
  c.config.padding[0] = c.config.padding[1] = 1;
  c.x = {2, 3, 5, 7};
  c.w = {4, 3, 1, 1};
  c.y = {2, 4, 7, 9};
  const cv::Geometry g = geometry(c);
  CHECK_FALSE(cv::backward_input_as_forward_applies(g));
  Tensor w = uniform(c.w, -1, 1), gy = uniform(c.y, -1, 1);
  Tensor dw = w.to(kCuda), dgy = gy.to(kCuda);
  check_close(conv2d_backward_input(dgy, dw, c.x, c.config), conv2d_backward_input(gy, w, c.x, c.config), 1e-4,
              atol_for(DType::f32, 4), "conv2d_backward_input " + c.str());
  Tensor gx = full(c.x, 7.0, TensorOptions(DType::f32).device(kCuda));
  Tensor wt = full({12}, 7.0, TensorOptions(DType::f32).device(kCuda));
  CHECK_THROWS_AS(cv::backward_input_as_forward<float>(device_ptr<float>(dgy), device_ptr<float>(dw),
                                                      device_ptr<float>(gx), device_ptr<float>(wt), g, stream),
                  ValueError);
}

TEST_CASE("versions 7 and 8 (input rows in shared memory) match the CPU at stride 1") {
  if (!have_cuda()) return;
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  std::mt19937 rng(21);
  int patched = 0;
  for (int trial = 0; trial < 50; ++trial) {
    // channels past one stage of 8 and not a multiple of it; widths past 32 (a patch line longer
    // than a warp) and heights that cut 128-pixel tiles mid-row; any padding; bias and ReLU
    const int64_t groups = pick(rng, 1, 2), n = pick(rng, 1, 3);
    const int64_t cg = trial % 3 == 0 ? pick(rng, 1, 7) : pick(rng, 8, 20), og = pick(rng, 1, 70);
    const int64_t k[2] = {pick(rng, 1, 4), pick(rng, 1, 4)};
    ConvCase c = stride1_case(rng, groups, n, cg, og, k, [&](int i) { return pick(rng, 0, i == 1 ? 40 : 20); });
    c.bias = trial % 2 == 0;
    const cv::Geometry g = geometry(c);
    patched += cv::forward_patch_workspace(g) > 0;
    Tensor x = uniform(c.x, -1, 1), w = uniform(c.w, -1, 1), gy = uniform(c.y, -1, 1), b = uniform({c.w[0]}, -1, 1);
    Tensor dx = x.to(kCuda), dw = w.to(kCuda), dgy = gy.to(kCuda), db = b.to(kCuda);
    const Activation act = trial % 4 < 2 ? Activation::relu : Activation::none;
    const cuda::DeviceEpilogue<float> epilogue{c.bias ? device_ptr<float>(db) : nullptr, act};
    Tensor want = conv2d(x, w, c.bias ? b : Tensor(), c.config, act);
    Tensor want_gx = conv2d_backward_input(gy, w, c.x, c.config);
    for (const cv::TensorMath math : {cv::TensorMath::tf32x3, cv::TensorMath::tf32}) {
      const bool tf32 = math == cv::TensorMath::tf32;
      const std::string name = (tf32 ? " (TF32) " : " (3xTF32) ") + c.str();
      auto atol = [&](int64_t length) { return tf32 ? tf32_atol(length) : atol_for(DType::f32, length); };
      const double rtol = tf32 ? kTf32Rtol : rtol_for(DType::f32);
      Tensor y = full(c.y, 7.0, TensorOptions(DType::f32).device(kCuda));
      Tensor packed = full({std::max<int64_t>(1, cv::forward_patch_workspace(g))}, 7.0,
                           TensorOptions(DType::f32).device(kCuda));
      cv::forward_patch<float>(device_ptr<float>(dx), device_ptr<float>(dw), epilogue, device_ptr<float>(y),
                               device_ptr<float>(packed), g, math, stream);
      check_close(y, want, rtol, atol(cg * k[0] * k[1]), "forward_patch" + name);
      if (!tf32) {  // version 8 (CUDA cores, O/G <= 16; else version 6)
        Tensor y8 = full(c.y, 7.0, TensorOptions(DType::f32).device(kCuda));
        cv::forward_few_outputs_rows<float>(device_ptr<float>(dx), device_ptr<float>(dw), epilogue,
                                            device_ptr<float>(y8), g, stream);
        check_close(y8, want, rtol, atol(cg * k[0] * k[1]), "forward_few_outputs_rows" + name);
      }
      if (cv::backward_input_as_forward_applies(g)) {
        Tensor gx = full(c.x, 7.0, TensorOptions(DType::f32).device(kCuda));
        Tensor wt = full({std::max<int64_t>(1, cv::backward_input_as_forward_workspace(g))}, 7.0,
                         TensorOptions(DType::f32).device(kCuda));
        cv::backward_input_patch<float>(device_ptr<float>(dgy), device_ptr<float>(dw), device_ptr<float>(gx),
                                        device_ptr<float>(wt), g, math, stream);
        check_close(gx, want_gx, rtol, atol(og * k[0] * k[1]), "backward_input_patch" + name);
        if (!tf32) {
          Tensor gx8 = full(c.x, 7.0, TensorOptions(DType::f32).device(kCuda));
          cv::backward_input_few_outputs_rows<float>(device_ptr<float>(dgy), device_ptr<float>(dw),
                                                     device_ptr<float>(gx8), device_ptr<float>(wt), g, stream);
          check_close(gx8, want_gx, rtol, atol(og * k[0] * k[1]), "backward_input_few_outputs_rows" + name);
        }
      }
    }
  }
  CHECK(patched == 50);  // every case fits version 7's shared memory
}

TEST_CASE("conv2d at the MNIST CNN's shapes matches the CPU") {
  if (!have_cuda()) return;
  struct Layer { Shape x, w; };
  for (const Layer& l : {Layer{{64, 1, 28, 28}, {32, 1, 3, 3}}, Layer{{16, 32, 26, 26}, {64, 32, 3, 3}}}) {
    Tensor x = uniform(l.x, -1, 1), w = uniform(l.w, -1, 1), b = uniform({l.w[0]}, -1, 1);
    Tensor y = conv2d(x, w, b);
    Tensor gy = uniform(y.shape(), -1, 1);
    const std::string what = "x " + l.x.str() + " w " + l.w.str();
    const int64_t ckk = l.w[1] * 9, okk = l.w[0] * 9, outputs = y.size(0) * y.size(2) * y.size(3);
    check_close(conv2d(x.to(kCuda), w.to(kCuda), b.to(kCuda)), y, 1e-4, atol_for(DType::f32, ckk), "conv2d " + what);
    check_close(conv2d_backward_input(gy.to(kCuda), w.to(kCuda), l.x, {}), conv2d_backward_input(gy, w, l.x, {}),
                1e-4, atol_for(DType::f32, okk), "conv2d_backward_input " + what);
    check_close(conv2d_backward_weight(x.to(kCuda), gy.to(kCuda), l.w, {}), conv2d_backward_weight(x, gy, l.w, {}),
                1e-4, atol_for(DType::f32, outputs), "conv2d_backward_weight " + what);
  }
}

TEST_CASE("conv2d weight and wide versions match the CPU with many K splits, odd sizes, f32 and f64") {
  if (!have_cuda()) return;
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  // Long reductions (many splits) with M and N that are not tile multiples, one grouped, one padded.
  const ConvCase cases[] = {
      {{9, 7, 23, 19}, {45, 7, 3, 2}, {}, false, {9, 45, 21, 18}},
      {{5, 66, 17, 15}, {70, 33, 3, 3}, [] { Conv2dConfig k; k.groups = 2; return k; }(), false, {5, 70, 15, 13}},
      {{16, 32, 26, 26}, {64, 32, 3, 3}, [] { Conv2dConfig k; k.padding[0] = k.padding[1] = 1; return k; }(), false,
       {16, 64, 26, 26}},
  };
  for (const ConvCase& c : cases) {
    const cv::Geometry g = geometry(c);
    auto run = [&](auto tag, DType t) {
      using T = decltype(tag);
      Tensor x = uniform(c.x, -1, 1, t), w = uniform(c.w, -1, 1, t), gy = uniform(c.y, -1, 1, t);
      Tensor dx = x.to(kCuda), dw = w.to(kCuda), dgy = gy.to(kCuda);
      const double rtol = rtol_for(t);
      Tensor want_w = conv2d_backward_weight(x, gy, c.w, c.config);
      const int64_t ws_elems = std::max<int64_t>(1, cv::backward_weight_workspace(g));
      Tensor ws = full({ws_elems}, 7.0, TensorOptions(t).device(kCuda));
      Tensor gw1 = full(c.w, 7.0, TensorOptions(t).device(kCuda)), gw2 = full(c.w, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_weight_implicit_gemm<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(gw1), device_ptr<T>(ws),
                                           g, stream);
      check_close(gw1, want_w, rtol, atol_for(t, c.y[0] * c.y[2] * c.y[3]), "backward_weight_implicit_gemm " + c.str());
      cv::backward_weight_implicit_gemm_wide<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(gw2),
                                                device_ptr<T>(ws), g, stream);
      check_close(gw2, want_w, rtol, atol_for(t, c.y[0] * c.y[2] * c.y[3]),
                  "backward_weight_implicit_gemm_wide " + c.str());
      Tensor y4 = full(c.y, 7.0, TensorOptions(t).device(kCuda));
      cv::forward_implicit_gemm_wide<T>(device_ptr<T>(dx), device_ptr<T>(dw), {}, device_ptr<T>(y4), g, stream);
      check_close(y4, conv2d(x, w, Tensor(), c.config), rtol, atol_for(t, c.w[1] * c.w[2] * c.w[3]),
                  "forward_implicit_gemm_wide " + c.str());
      Tensor gw3 = full(c.w, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_weight_tensor_cores<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(gw3), device_ptr<T>(ws),
                                          g, cv::TensorMath::tf32x3, stream);
      check_close(gw3, want_w, rtol, atol_for(t, c.y[0] * c.y[2] * c.y[3]),
                  "backward_weight_tensor_cores (3xTF32) " + c.str());
      Tensor gw4 = full(c.w, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_weight_tensor_cores<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(gw4), device_ptr<T>(ws),
                                          g, cv::TensorMath::tf32, stream);
      const bool tf32 = t == DType::f32;
      check_close(gw4, want_w, tf32 ? kTf32Rtol : rtol,
                  tf32 ? tf32_atol(c.y[0] * c.y[2] * c.y[3]) : atol_for(t, c.y[0] * c.y[2] * c.y[3]),
                  "backward_weight_tensor_cores (TF32) " + c.str());
    };
    run(float{}, DType::f32);
    run(double{}, DType::f64);
  }
}

TEST_CASE("conv2d on the tensor cores: infinities and NaN come out as in f32") {
  if (!have_cuda()) return;
  // 3xTF32 splits an inf into inf + NaN; the kernels recompute NaN results in plain f32, so each
  // output that f32 makes inf (or NaN) is inf (or NaN) here too, in all three passes.
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = uniform({2, 40, 9, 9}, -1, 1), w = uniform({48, 40, 3, 3}, -1, 1);
  std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>();
  xv[5 * 81 + 40] = inf;                 // image 0, channel 5, the centre
  xv[(40 + 7) * 81 + 3] = -inf;          // image 1, channel 7, top row
  wv[3 * 360 + 2 * 9 + 4] = inf;         // output channel 3, input channel 2
  xv[(40 + 30) * 81 + 50] = std::nanf("");
  x = from_vector(xv, x.shape());
  w = from_vector(wv, w.shape());
  Tensor gy = uniform({2, 48, 7, 7}, -1, 1);
  std::vector<float> gyv = gy.to_vector<float>();
  gyv[48 * 49 + 10] = -inf;
  gy = from_vector(gyv, gy.shape());
  check_close(conv2d(x.to(kCuda), w.to(kCuda), Tensor(), {}), conv2d(x, w, Tensor(), {}), 1e-4,
              atol_for(DType::f32, 360), "conv2d with inf and NaN");
  check_close(conv2d_backward_input(gy.to(kCuda), w.to(kCuda), x.shape(), {}), conv2d_backward_input(gy, w, x.shape(), {}),
              1e-4, atol_for(DType::f32, 48 * 9), "conv2d_backward_input with inf");
  check_close(conv2d_backward_weight(x.to(kCuda), gy.to(kCuda), w.shape(), {}),
              conv2d_backward_weight(x, gy, w.shape(), {}), 1e-4, atol_for(DType::f32, 2 * 49),
              "conv2d_backward_weight with inf and NaN");
}

TEST_CASE("with allow_tf32, conv2d runs on TF32 tensor cores within its error bound") {
  if (!have_cuda()) return;
  struct Tf32Guard {
    Tf32Guard() { set_allow_tf32(true); }
    ~Tf32Guard() { set_allow_tf32(false); }
  } guard;
  Tensor x = uniform({16, 32, 26, 26}, -1, 1), w = uniform({64, 32, 3, 3}, -1, 1), b = uniform({64}, -1, 1);
  Tensor y = conv2d(x, w, b);
  Tensor gy = uniform(y.shape(), -1, 1);
  check_close(conv2d(x.to(kCuda), w.to(kCuda), b.to(kCuda)), y, kTf32Rtol, tf32_atol(32 * 9), "conv2d TF32");
  check_close(conv2d_backward_input(gy.to(kCuda), w.to(kCuda), x.shape(), {}), conv2d_backward_input(gy, w, x.shape(), {}),
              kTf32Rtol, tf32_atol(64 * 9), "conv2d_backward_input TF32");
  check_close(conv2d_backward_weight(x.to(kCuda), gy.to(kCuda), w.shape(), {}),
              conv2d_backward_weight(x, gy, w.shape(), {}), kTf32Rtol, tf32_atol(16 * 24 * 24),
              "conv2d_backward_weight TF32");
}


TEST_CASE("max_pool2d and its backward match the CPU exactly: ties, NaNs, overlapping windows") {
  if (!have_cuda()) return;
  std::mt19937 rng(15);
  auto check = [&](const PoolCase& c, int trial) {
    for (DType t : {DType::f32, DType::f64}) {
      // Small integers make ties common; some trials sprinkle NaNs; odd trials use a view.
      std::vector<double> values(static_cast<size_t>(c.x.numel()));
      for (double& v : values)
        v = trial % 3 == 0 && pick(rng, 0, 9) == 0 ? std::nan("") : static_cast<double>(pick(rng, -3, 3));
      Tensor x = from_vector<double>(values, c.x).to(t);
      if (trial % 2 == 1) x = x.transpose(2, 3).contiguous().transpose(2, 3);
      Tensor x_device = x.to(kCuda);
      if (trial % 2 == 1) x_device = x.transpose(2, 3).contiguous().to(kCuda).transpose(2, 3);
      PoolResult want = max_pool2d_with_indices(x, c.config);
      PoolResult got = max_pool2d_with_indices(x_device, c.config);
      check_close(got.values, want.values, 0, 0, "max_pool2d " + c.str());
      check_close(got.indices, want.indices, 0, 0, "max_pool2d indices " + c.str());
      Tensor gy = uniform(want.values.shape(), -1, 1, t);
      check_close(max_pool2d_backward(gy.to(kCuda), got.indices, c.x, c.config),
                  max_pool2d_backward(gy, want.indices, c.x, c.config), 0, 0, "max_pool2d_backward " + c.str());
    }
  };
  for (int trial = 0; trial < 60; ++trial) check(random_pool(rng), trial);
  // Windows that tile the input exactly take the backward's one-thread-per-window path.
  int trial = 0;
  for (const auto& [x, k0, k1] : {std::tuple{Shape{2, 3, 24, 24}, 2, 2}, std::tuple{Shape{1, 2, 6, 9}, 2, 3},
                                  std::tuple{Shape{3, 1, 5, 5}, 1, 1}, std::tuple{Shape{1, 2, 12, 8}, 4, 4}}) {
    PoolCase c;
    c.x = x;
    c.config.kernel[0] = c.config.stride[0] = k0;
    c.config.kernel[1] = c.config.stride[1] = k1;
    check(c, trial++);
  }
}

TEST_CASE("avg_pool2d and its backward match the CPU, with and without the padding counted") {
  if (!have_cuda()) return;
  std::mt19937 rng(16);
  for (int trial = 0; trial < 60; ++trial) {
    const PoolCase c = random_pool(rng);
    for (DType t : {DType::f32, DType::f64}) {
      const double tol = t == DType::f32 ? 1e-6 : 1e-14;
      Tensor x = uniform(c.x, -1, 1, t);
      check_close(avg_pool2d(x.to(kCuda), c.config), avg_pool2d(x, c.config), tol, tol, "avg_pool2d " + c.str());
      Tensor gy = uniform(avg_pool2d(x, c.config).shape(), -1, 1, t);
      check_close(avg_pool2d_backward(gy.to(kCuda), c.x, c.config), avg_pool2d_backward(gy, c.x, c.config), tol, tol,
                  "avg_pool2d_backward " + c.str());
    }
  }
}

TEST_CASE("pooling gradients through autograd match the CPU") {
  if (!have_cuda()) return;
  std::mt19937 rng(17);
  for (int trial = 0; trial < 10; ++trial) {
    const PoolCase c = random_pool(rng);
    Tensor x = uniform(c.x, -1, 1);
    Tensor gy = uniform(max_pool2d(x, c.config).shape(), -1, 1);
    std::vector<Tensor> grads[2];
    for (int side = 0; side < 2; ++side) {
      const Device dev = side == 0 ? Device::cpu() : kCuda;
      Tensor xl = x.to(dev).detach().requires_grad_();
      (max_pool2d(xl, c.config) * gy.to(dev) + avg_pool2d(xl, c.config) * gy.to(dev)).sum().backward();
      grads[side] = {xl.grad()};
    }
    check_close(grads[1][0], grads[0][0], 1e-6, 1e-6, "pool grads " + c.str());
  }
}
