// The CUDA conv2d kernels against the CPU backend: every conv2d version of
// kernels/cuda/conv2d.cuh called directly on device buffers, on random geometries (sizes 1 and odd
// sizes, kernels 1..5, stride 1..3, padding 0..2, dilation 1..2, groups 1..3, with and without
// bias), f32 and f64, and the weight and wide versions on long reductions; the backward input as a
// forward convolution on stride-1 geometries of its own, with the cases it refuses
// (padding > dilation*(kernel-1)) checked to fall back; versions 7, 8, 10 and 11 (input rows in shared
// memory) on stride-1 geometries with wide rows and channels past one stage; conv2d under
// allow_tf32; the bf16 versions against the CPU's bf16; the MNIST CNN's layers at the batches that
// take the production versions, with the fused bias and ReLU. (conv2d and pooling through the ops on every backend: test_backend_ops.)
#include "tests/cuda/cuda_test.h"
#include "tests/conv_cases.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>
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

TEST_CASE("every conv2d version matches the CPU on device buffers") {
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  std::mt19937 rng(14);
  int wgmma_runs = 0, window_runs = 0, ring_runs = 0;  // versions 10's, 11's and 12's, on an sm_90 GPU
  int weight_ring_runs = 0;                            // backward weight 6's
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
        if constexpr (std::is_same_v<T, float>) {
          // versions 10 and 11 (an sm_90 GPU): each writes a buffer of `shape` (filled with 7s) with
          // a workspace of its own, checked against `expect`
          const double fwd_tol = atol(c.w[1] * c.w[2] * c.w[3]),
                       in_tol = atol(c.w[0] / c.config.groups * c.w[2] * c.w[3]);
          auto check_version = [&](const Shape& shape, int64_t workspace, const Tensor& expect, double tol,
                                   const std::string& what, auto&& launch) {
            Tensor out = full(shape, 7.0, TensorOptions(t).device(kCuda));
            Tensor space = full({std::max<int64_t>(1, workspace)}, 7.0, TensorOptions(t).device(kCuda));
            launch(device_ptr<float>(out), device_ptr<float>(space));
            check_close(out, expect, r, tol, what + name + c.str());
          };
          const float *x_ = device_ptr<float>(dx), *w_ = device_ptr<float>(dw), *gy_ = device_ptr<float>(dgy);
          if (cv::forward_wgmma_applies(g, math)) {
            check_version(c.y, cv::forward_wgmma_workspace(g), want, fwd_tol, "forward_wgmma", [&](float* y, float* space) {
              cv::forward_wgmma(x_, w_, epilogue, y, space, g, math, stream);
            });
            ++wgmma_runs;
          }
          if (cv::backward_input_wgmma_applies(g, math)) {
            check_version(c.x, cv::backward_input_wgmma_workspace(g), want_gx, in_tol, "backward_input_wgmma",
                          [&](float* gx, float* space) { cv::backward_input_wgmma(gy_, w_, gx, space, g, math, stream); });
            ++wgmma_runs;
          }
          if (cv::forward_ring_applies(g, math)) {
            check_version(c.y, cv::forward_ring_workspace(g), want, fwd_tol, "forward_ring", [&](float* y, float* space) {
              cv::forward_ring(x_, w_, epilogue, y, space, g, math, stream);
            });
            ++ring_runs;
          }
          if (cv::backward_input_ring_applies(g, math)) {
            check_version(c.x, cv::backward_input_ring_workspace(g), want_gx, in_tol, "backward_input_ring",
                          [&](float* gx, float* space) { cv::backward_input_ring(gy_, w_, gx, space, g, math, stream); });
            ++ring_runs;
          }
          for (const cv::WindowSums sums : {cv::WindowSums::pairs, cv::WindowSums::stages}) {
            const std::string sums_name = sums == cv::WindowSums::pairs ? " (pairs)" : " (stages)";
            if (cv::forward_window_applies(g, math)) {
              check_version(c.y, cv::forward_window_workspace(g), want, fwd_tol, "forward_window" + sums_name,
                            [&](float* y, float* space) {
                              cv::forward_window(x_, w_, epilogue, y, space, g, math, stream, sums);
                            });
              ++window_runs;
            }
            if (cv::backward_input_window_applies(g, math)) {
              check_version(c.x, cv::backward_input_window_workspace(g), want_gx, in_tol,
                            "backward_input_window" + sums_name, [&](float* gx, float* space) {
                              cv::backward_input_window(gy_, w_, gx, space, g, math, stream, sums);
                            });
              ++window_runs;
            }
          }
        }
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
        if (std::is_same_v<T, float> && cv::backward_weight_ring_applies(g, math)) {  // version 6 (sm_90)
          Tensor gw6 = full(c.w, 7.0, TensorOptions(t).device(kCuda));
          Tensor ws6 = full({std::max<int64_t>(1, cv::backward_weight_ring_workspace(g, math))}, 7.0,
                            TensorOptions(t).device(kCuda));
          cv::backward_weight_ring(device_ptr<float>(dx), device_ptr<float>(dgy), device_ptr<float>(gw6),
                                   device_ptr<float>(ws6), g, math, stream);
          check_close(gw6, conv2d_backward_weight(x, gy, c.w, c.config), r, atol(c.y[0] * c.y[2] * c.y[3]),
                      "backward_weight_ring" + name + c.str());
          ++weight_ring_runs;
        }
      }
    };
    run(float{}, DType::f32);
    run(double{}, DType::f64);
  }
  MESSAGE("version 10 ran on ", wgmma_runs, " of the random geometries, version 11 on ", window_runs, ", version 12 on ",
          ring_runs, ", backward weight 6 on ", weight_ring_runs);
  if (cuda::wgmma_runs()) CHECK((wgmma_runs > 0 && window_runs > 0 && ring_runs > 0 && weight_ring_runs > 0));
}

namespace {

// A configuration with the same stride, padding and dilation along both axes.
Conv2dConfig square_config(int64_t stride, int64_t pad, int64_t dilation, int64_t groups) {
  Conv2dConfig k;
  k.stride = {stride, stride}, k.padding = {pad, pad}, k.dilation = {dilation, dilation}, k.groups = groups;
  return k;
}

// The output's shape for c's input, weights and configuration.
Shape output_shape(const ConvCase& c) {
  auto out = [&](int i) {
    const int64_t in = c.x[2 + i], k = c.w[2 + i];
    return (in + 2 * c.config.padding[i] - c.config.dilation[i] * (k - 1) - 1) / c.config.stride[i] + 1;
  };
  return {c.x[0], c.w[0], out(0), out(1)};
}

// The layers the wgmma versions 10-12 are tested on, forward and backward input: 32 and 64 outputs
// a block, several stages of channels with a short last one, padding, dilation, groups.
struct WgShape {
  Shape x, w;
  int64_t pad, dilation, groups;
};
const std::vector<WgShape> kWgShapes = {
    {{8, 32, 26, 26}, {64, 32, 3, 3}, 0, 1, 1},   // conv2
    {{160, 32, 26, 26}, {64, 32, 3, 3}, 0, 1, 1}, // conv2 with more tiles than SMs: version 12's blocks take several
    {{3, 20, 30, 17}, {40, 20, 3, 3}, 1, 1, 1},   // a short last stage, 40 outputs: 64 a block
    {{2, 13, 19, 23}, {24, 13, 5, 3}, 2, 1, 1},   // 32 outputs a block, a 5 x 3 kernel
    {{2, 16, 21, 18}, {96, 8, 3, 3}, 2, 2, 2},    // dilation, two groups of 48 outputs
    {{1, 64, 56, 56}, {130, 64, 3, 3}, 1, 1, 1},  // wide rows, outputs past a block's 64
};

ConvCase wg_case(const WgShape& s) {
  ConvCase c;
  c.x = s.x, c.w = s.w;
  c.config = square_config(1, s.pad, s.dilation, s.groups);
  c.y = output_shape(c);
  return c;
}

}  // namespace

TEST_CASE("versions 10, 11 and 12 (wgmma) match the CPU at the MNIST CNN's conv2, wide layers, odd sizes and groups") {
  // forward and backward input, 3xTF32 within f32's tolerance and TF32 within TF32's; version 11
  // with 3xTF32's sums by pairs of taps and by stages; version 12 on a conv2 of more tiles than SMs
  namespace cv = cuda::conv2d;
  if (!cuda::wgmma_runs()) return;
  cudaStream_t stream = cuda::backend(0).stream();
  const std::vector<WgShape>& shapes = kWgShapes;
  // a version: whether it applies, its workspace and its run, forward and backward input
  struct Version {
    std::string name;
    std::function<bool(const cv::Geometry&, cv::TensorMath)> applies, input_applies;
    std::function<int64_t(const cv::Geometry&)> workspace, input_workspace;
    std::function<void(const float*, const float*, const cuda::DeviceEpilogue<float>&, float*, float*,
                       const cv::Geometry&, cv::TensorMath)>
        forward;
    std::function<void(const float*, const float*, float*, float*, const cv::Geometry&, cv::TensorMath)> input;
  };
  auto window = [&](cv::WindowSums sums, const std::string& name) {
    return Version{name,
                   cv::forward_window_applies,
                   cv::backward_input_window_applies,
                   cv::forward_window_workspace,
                   cv::backward_input_window_workspace,
                   [=](const float* x, const float* w, const cuda::DeviceEpilogue<float>& e, float* y, float* ws,
                       const cv::Geometry& g, cv::TensorMath math) { cv::forward_window(x, w, e, y, ws, g, math, stream, sums); },
                   [=](const float* gy, const float* w, float* gx, float* ws, const cv::Geometry& g, cv::TensorMath math) {
                     cv::backward_input_window(gy, w, gx, ws, g, math, stream, sums);
                   }};
  };
  const std::vector<Version> versions = {
      {"version 10",
       cv::forward_wgmma_applies,
       cv::backward_input_wgmma_applies,
       cv::forward_wgmma_workspace,
       cv::backward_input_wgmma_workspace,
       [&](const float* x, const float* w, const cuda::DeviceEpilogue<float>& e, float* y, float* ws,
           const cv::Geometry& g, cv::TensorMath math) { cv::forward_wgmma(x, w, e, y, ws, g, math, stream); },
       [&](const float* gy, const float* w, float* gx, float* ws, const cv::Geometry& g, cv::TensorMath math) {
         cv::backward_input_wgmma(gy, w, gx, ws, g, math, stream);
       }},
      window(cv::WindowSums::pairs, "version 11 (pairs)"),
      window(cv::WindowSums::stages, "version 11 (stages)"),
      {"version 12",
       cv::forward_ring_applies,
       cv::backward_input_ring_applies,
       cv::forward_ring_workspace,
       cv::backward_input_ring_workspace,
       [&](const float* x, const float* w, const cuda::DeviceEpilogue<float>& e, float* y, float* ws,
           const cv::Geometry& g, cv::TensorMath math) { cv::forward_ring(x, w, e, y, ws, g, math, stream); },
       [&](const float* gy, const float* w, float* gx, float* ws, const cv::Geometry& g, cv::TensorMath math) {
         cv::backward_input_ring(gy, w, gx, ws, g, math, stream);
       }},
  };
  int runs = 0;
  for (const WgShape& s : shapes) {
    const ConvCase c = wg_case(s);
    const cv::Geometry g = geometry(c);
    Tensor x = uniform(c.x, -1, 1), w = uniform(c.w, -1, 1), gy = uniform(c.y, -1, 1), b = uniform({c.w[0]}, -1, 1);
    Tensor dx = x.to(kCuda), dw = w.to(kCuda), dgy = gy.to(kCuda), db = b.to(kCuda);
    const Tensor want = conv2d(x, w, b, c.config, Activation::relu);
    const Tensor want_gx = conv2d_backward_input(gy, w, c.x, c.config);
    for (const Version& v : versions)
      for (const cv::TensorMath math : {cv::TensorMath::tf32x3, cv::TensorMath::tf32}) {
        const bool tf32 = math == cv::TensorMath::tf32;
        const std::string name = v.name + (tf32 ? " (TF32) " : " (3xTF32) ") + c.str();
        const int64_t fwd_len = c.w[1] * c.w[2] * c.w[3], in_len = c.w[0] / s.groups * c.w[2] * c.w[3];
        REQUIRE_MESSAGE(v.applies(g, math), name);
        Tensor y = full(c.y, 7.0, kCuda);
        Tensor packed = full({v.workspace(g)}, 7.0, kCuda);
        v.forward(device_ptr<float>(dx), device_ptr<float>(dw), {device_ptr<float>(db), Activation::relu},
                  device_ptr<float>(y), device_ptr<float>(packed), g, math);
        check_close(y, want, tf32 ? kTf32Rtol : rtol_for(DType::f32),
                    tf32 ? tf32_atol(fwd_len) : atol_for(DType::f32, fwd_len), "forward " + name);
        REQUIRE_MESSAGE(v.input_applies(g, math), name);
        Tensor gx = full(c.x, 7.0, kCuda);
        Tensor packed_in = full({v.input_workspace(g)}, 7.0, kCuda);
        v.input(device_ptr<float>(dgy), device_ptr<float>(dw), device_ptr<float>(gx), device_ptr<float>(packed_in), g,
                math);
        check_close(gx, want_gx, tf32 ? kTf32Rtol : rtol_for(DType::f32),
                    tf32 ? tf32_atol(in_len) : atol_for(DType::f32, in_len), "backward input " + name);
        runs += 2;
      }
  }
  CHECK(runs == 96);

  // FLT_MAX in x (in grad_y for the backward input): its 3xTF32 split overflows, the outputs it
  // reaches come out NaN, and version 12 sums those again in f32, then adds the bias and applies the
  // relu (w small, so that the true sums stay finite)
  ConvCase c;
  c.x = shapes[1].x, c.w = shapes[1].w, c.y = {c.x[0], c.w[0], 24, 24};
  const cv::Geometry g = geometry(c);
  std::vector<float> xv = uniform(c.x, -1, 1).to_vector<float>(), gyv = uniform(c.y, -1, 1).to_vector<float>();
  xv[(37 * 32 + 5) * 26 * 26 + 11 * 26 + 7] = std::numeric_limits<float>::max();
  gyv[(101 * 64 + 9) * 24 * 24 + 23 * 24 + 23] = std::numeric_limits<float>::max();
  const Tensor x = from_vector(xv, c.x), gy = from_vector(gyv, c.y), w = uniform(c.w, -1e-3, 1e-3),
               b = uniform({c.w[0]}, -1, 1);
  const Tensor want = conv2d(x, w, b, c.config, Activation::relu), want_gx = conv2d_backward_input(gy, w, c.x, c.config);
  Tensor dx = x.to(kCuda), dgy = gy.to(kCuda), dw = w.to(kCuda), db = b.to(kCuda);
  Tensor y = full(c.y, 7.0, kCuda), gx = full(c.x, 7.0, kCuda);
  Tensor ws = full({std::max(cv::forward_ring_workspace(g), cv::backward_input_ring_workspace(g))}, 7.0, kCuda);
  cv::forward_ring(device_ptr<float>(dx), device_ptr<float>(dw), {device_ptr<float>(db), Activation::relu},
                   device_ptr<float>(y), device_ptr<float>(ws), g, cv::TensorMath::tf32x3, stream);
  cv::backward_input_ring(device_ptr<float>(dgy), device_ptr<float>(dw), device_ptr<float>(gx), device_ptr<float>(ws), g,
                          cv::TensorMath::tf32x3, stream);
  const double atol = 1e-6 * std::numeric_limits<float>::max() * 1e-3;
  check_close(y, want, rtol_for(DType::f32), atol, "version 12 forward (3xTF32) with FLT_MAX in x");
  check_close(gx, want_gx, rtol_for(DType::f32), atol, "version 12 backward input (3xTF32) with FLT_MAX in grad_y");
  // an output the large value reaches is that large (check_close alone would pass zeros)
  CHECK(std::abs(gx.to_vector<float>()[(101 * 32) * 26 * 26 + 25 * 26 + 25]) > 1e30);
}

TEST_CASE("version 12 in bf16 (wgmma ring) matches the CPU's bf16 at conv2, wide layers, odd sizes and groups") {
  // The layers above, bf16 operands and result against the CPU's bf16 (exact products summed in f32,
  // rounded once; kRtol as the other bf16 versions'), forward with bias and relu, and backward
  // input; a large layer of 128 outputs a block, whose weights come with each stage.
  namespace cv = cuda::conv2d;
  if (!cuda::wgmma_runs()) return;
  cudaStream_t stream = cuda::backend(0).stream();
  constexpr double kRtol = 8e-3;
  std::vector<WgShape> shapes = kWgShapes;
  shapes.push_back({{2, 128, 20, 20}, {128, 128, 3, 3}, 1, 1, 1});
  for (const WgShape& s : shapes) {
    const ConvCase c = wg_case(s);
    const cv::Geometry g = geometry(c);
    const std::string name = c.str();
    auto bf16_uniform = [](const Shape& shape) { return uniform(shape, -1, 1).to(DType::bf16); };
    const Tensor x = bf16_uniform(c.x), w = bf16_uniform(c.w), gy = bf16_uniform(c.y), b = bf16_uniform({c.w[0]});
    const Tensor dx = x.to(kCuda), dw = w.to(kCuda), dgy = gy.to(kCuda), db = b.to(kCuda);
    const int64_t fwd_len = c.w[1] * c.w[2] * c.w[3], in_len = c.w[0] / s.groups * c.w[2] * c.w[3];
    REQUIRE_MESSAGE(cv::forward_ring_bf16_applies(g), name);
    Tensor y = full(c.y, 7.0, TensorOptions(DType::bf16).device(kCuda));
    Tensor ws = full({cv::forward_ring_bf16_workspace(g) / 4 + 1}, 7.0, kCuda);
    cv::forward_ring_bf16(device_ptr<bf16>(dx), device_ptr<bf16>(dw), {device_ptr<bf16>(db), Activation::relu},
                          device_ptr<bf16>(y), device_ptr<float>(ws), g, stream);
    check_close(y, conv2d(x, w, b, c.config, Activation::relu), kRtol, 1e-6 * static_cast<double>(fwd_len),
                "forward " + name);
    REQUIRE_MESSAGE(cv::backward_input_ring_bf16_applies(g), name);
    Tensor gx = full(c.x, 7.0, TensorOptions(DType::bf16).device(kCuda));
    Tensor ws_in = full({cv::backward_input_ring_bf16_workspace(g) / 4 + 1}, 7.0, kCuda);
    cv::backward_input_ring_bf16(device_ptr<bf16>(dgy), device_ptr<bf16>(dw), device_ptr<bf16>(gx),
                                 device_ptr<float>(ws_in), g, stream);
    check_close(gx, conv2d_backward_input(gy, w, c.x, c.config), kRtol, 1e-6 * static_cast<double>(in_len),
                "backward input " + name);
  }
}

TEST_CASE("backward weight version 6 in bf16 (wgmma ring, TMA) matches the CPU's bf16, and refuses what TMA cannot read") {
  // bf16 operands against the CPU's bf16 (exact products summed in f32, rounded once): 32, 64 and
  // 128 outputs a block and a second block, several blocks of taps, strides, dilation, groups,
  // padded planes and lines, images whose last stage is short, one split and many, an odd output
  // width (a pixel pair of A across two output rows)
  namespace cv = cuda::conv2d;
  if (!cuda::wgmma_runs()) return;
  cudaStream_t stream = cuda::backend(0).stream();
  auto config = square_config;
  std::vector<ConvCase> cases = {
      {{2, 128, 24, 24}, {128, 128, 3, 3}, config(1, 1, 1, 1), false, {}},  // 1152 taps, 128 outputs a block
      {{4, 32, 16, 16}, {64, 32, 3, 3}, config(1, 1, 1, 1), false, {}},     // 64 outputs, 256 pixels an image
      {{3, 16, 40, 40}, {24, 16, 3, 3}, config(1, 1, 1, 1), false, {}},     // 32 outputs a block, 1600 pixels
      {{2, 8, 12, 20}, {16, 8, 3, 1}, {}, false, {}},                        // x's rows as lines (W = 20)
      {{2, 8, 8, 16}, {16, 8, 1, 8}, {}, false, {}},  // an odd output width (9)
      {{8, 16, 32, 32}, {40, 8, 3, 3}, config(1, 1, 1, 2), false, {}},      // groups of 20 outputs
      {{6, 24, 32, 32}, {130, 24, 3, 3}, config(2, 1, 1, 1), false, {}},    // stride 2, 130 outputs: two blocks
      {{4, 16, 24, 24}, {16, 16, 3, 3}, config(1, 2, 2, 1), false, {}},     // dilation 2
      {{1, 8, 8, 8}, {16, 8, 1, 1}, {}, false, {}},                          // 1 x 1, one image: one split
  };
  for (ConvCase& c : cases) c.y = output_shape(c);
  for (const ConvCase& c : cases) {
    const cv::Geometry g = geometry(c);
    const Tensor x = uniform(c.x, -1, 1).to(DType::bf16), gy = uniform(c.y, -1, 1).to(DType::bf16);
    const Tensor dx = x.to(kCuda), dgy = gy.to(kCuda);
    REQUIRE_MESSAGE(cv::backward_weight_ring_bf16_applies(device_ptr<bf16>(dx), device_ptr<bf16>(dgy), g), c.str());
    Tensor gw = full(c.w, 7.0, TensorOptions(DType::bf16).device(kCuda));
    Tensor ws = full({cv::backward_weight_ring_bf16_workspace(g) / 4}, 7.0, kCuda);
    cv::backward_weight_ring_bf16(device_ptr<bf16>(dx), device_ptr<bf16>(dgy), device_ptr<bf16>(gw),
                                  device_ptr<float>(ws), g, stream);
    check_close(gw, conv2d_backward_weight(x, gy, c.w, c.config), 8e-3, 1e-6 * static_cast<double>(c.y[0] * c.y[2] * c.y[3]),
                "backward weight 6 (bf16) " + c.str());
  }
  // what TMA cannot read: x off 16 bytes, and MNIST's conv2 (rows of 26 bf16, 52 bytes)
  ConvCase c2{{4, 32, 26, 26}, {64, 32, 3, 3}, {}, false, {}};
  c2.y = {4, 64, 24, 24};
  const Tensor x2 = zeros({4 * 32 * 26 * 26 + 8}, TensorOptions(DType::bf16).device(kCuda));
  const Tensor gy2 = zeros(c2.y, TensorOptions(DType::bf16).device(kCuda));
  CHECK_FALSE(cv::backward_weight_ring_bf16_applies(device_ptr<bf16>(x2), device_ptr<bf16>(gy2), geometry(c2)));
  ConvCase c3{{2, 16, 16, 16}, {16, 16, 3, 3}, config(1, 1, 1, 1), false, {}};
  c3.y = {2, 16, 16, 16};
  CHECK(cv::backward_weight_ring_bf16_applies(device_ptr<bf16>(x2), device_ptr<bf16>(gy2), geometry(c3)));
  CHECK_FALSE(cv::backward_weight_ring_bf16_applies(device_ptr<bf16>(x2) + 1, device_ptr<bf16>(gy2), geometry(c3)));
}

TEST_CASE("backward weight version 6 (wgmma ring) matches the CPU at conv2, wide layers, strides, groups and tails") {
  // 3xTF32 within f32's tolerance and TF32 within TF32's: 32, 64 and 128 outputs a block (and a
  // second block of them), taps past a block's tiles (several blocks of taps), images whose last
  // stage is short, pixel counts not a multiple of 4 (grad_y copied by the element), one split
  // and many; stages copied by TMA (x's rows as lines or its padded planes, boxes overhanging the
  // group's channels and outputs, strides and dilation) and by cp.async (shapes TMA does not take,
  // and an x that does not start on 16 bytes); in 3xTF32 with the bias's gradient as one more row
  // where the taps leave it spare, and not where they fill their tiles (256, 1152) or in TF32; and
  // 3xTF32's NaN fallback, where an input of FLT_MAX splits into inf and -inf
  namespace cv = cuda::conv2d;
  if (!cuda::wgmma_runs()) return;
  cudaStream_t stream = cuda::backend(0).stream();
  auto config = square_config;
  std::vector<ConvCase> cases = {
      {{64, 32, 26, 26}, {64, 32, 3, 3}, {}, false, {}},                 // conv2 at batch 64
      {{16, 32, 26, 26}, {64, 32, 3, 3}, config(1, 1, 1, 1), false, {}},  // 676 pixels: a short last stage
      {{3, 7, 23, 19}, {130, 7, 5, 3}, config(2, 1, 2, 1), false, {}},  // 128 outputs a block and 2; odd pixels
      {{5, 66, 17, 15}, {70, 33, 3, 3}, config(1, 0, 1, 2), false, {}},  // two groups of 35 outputs
      {{4, 256, 9, 9}, {48, 256, 1, 1}, {}, false, {}},                  // 1 x 1: 256 taps, 32 outputs a block
      {{2, 128, 20, 20}, {128, 128, 3, 3}, config(1, 1, 1, 1), false, {}},  // 1152 taps: several blocks of them
      {{50, 8, 5, 5}, {16, 8, 3, 3}, {}, false, {}},                     // 9 pixels an image: 64-pixel stages of one
      {{1, 5, 300, 7}, {12, 5, 3, 3}, config(3, 0, 1, 1), false, {}},    // 1 image, few pixels: one split
      {{8, 16, 28, 28}, {40, 8, 3, 3}, config(1, 1, 1, 2), false, {}},   // TMA planes, groups of 20 outputs
      {{6, 12, 20, 20}, {24, 12, 3, 3}, config(2, 1, 1, 1), false, {}},  // TMA planes, stride 2
      {{4, 16, 24, 24}, {16, 16, 3, 3}, config(1, 2, 2, 1), false, {}},  // TMA planes, dilation 2
      {{3, 10, 12, 10}, {36, 5, 2, 3}, config(1, 0, 1, 2), false, {}},   // TMA lines, groups, a 2 x 3 kernel
  };
  for (ConvCase& c : cases) c.y = output_shape(c);
  int by_tma = 0, by_cp_async = 0, with_bias = 0;
  for (const ConvCase& c : cases) {
    const cv::Geometry g = geometry(c);
    const Tensor x = uniform(c.x, -1, 1), gy = uniform(c.y, -1, 1);
    const Tensor want = conv2d_backward_weight(x, gy, c.w, c.config), want_b = sum(gy, {0, 2, 3});
    const int64_t taps = c.w[1] * c.w[2] * c.w[3];
    CHECK_MESSAGE(cv::backward_weight_ring_takes_bias(g, cv::TensorMath::tf32x3) == (taps % 64 != 0), c.str());
    CHECK_MESSAGE(!cv::backward_weight_ring_takes_bias(g, cv::TensorMath::tf32), c.str());
    // x as given, and one float into a larger buffer (not on 16 bytes: cp.async)
    std::vector<float> shifted = x.to_vector<float>();
    shifted.insert(shifted.begin(), 0.0f);
    const Tensor dx = x.to(kCuda), dx_shifted = from_vector(shifted, {x.numel() + 1}).to(kCuda), dgy = gy.to(kCuda);
    for (const bool shift : {false, true}) {
      const float* xp = shift ? device_ptr<float>(dx_shifted) + 1 : device_ptr<float>(dx);
      for (const cv::TensorMath math : {cv::TensorMath::tf32x3, cv::TensorMath::tf32}) {
        const bool tf32 = math == cv::TensorMath::tf32;
        const bool tma = cv::backward_weight_ring_uses_tma(xp, device_ptr<float>(dgy), g, math);
        const std::string name = std::string(tf32 ? "(TF32, " : "(3xTF32, ") + (tma ? "TMA) " : "cp.async) ") + c.str();
        REQUIRE_MESSAGE(cv::backward_weight_ring_applies(g, math), name);
        CHECK_MESSAGE(!(shift && tma), name);
        ++(tma ? by_tma : by_cp_async);
        Tensor gw = full(c.w, 7.0, kCuda);
        Tensor ws = full({std::max<int64_t>(1, cv::backward_weight_ring_workspace(g, math))}, 7.0, kCuda);
        cv::backward_weight_ring(xp, device_ptr<float>(dgy), device_ptr<float>(gw), device_ptr<float>(ws), g, math,
                                 stream);
        const int64_t len = c.y[0] * c.y[2] * c.y[3];
        check_close(gw, want, tf32 ? kTf32Rtol : rtol_for(DType::f32),
                    tf32 ? tf32_atol(len) : atol_for(DType::f32, len), "backward_weight_ring " + name);
        if (!cv::backward_weight_ring_takes_bias(g, math)) continue;
        ++with_bias;
        Tensor gwb = full(c.w, 7.0, kCuda), gb = full({c.w[0]}, 7.0, kCuda);
        Tensor wsb = full({std::max<int64_t>(1, cv::backward_weight_ring_workspace(g, math, true))}, 7.0, kCuda);
        cv::backward_weight_ring(xp, device_ptr<float>(dgy), device_ptr<float>(gwb), device_ptr<float>(wsb), g, math,
                                 stream, device_ptr<float>(gb));
        check_close(gwb, want, rtol_for(DType::f32), atol_for(DType::f32, len), "backward_weight_ring with bias " + name);
        check_close(gb, want_b, rtol_for(DType::f32), atol_for(DType::f32, len), "the bias's gradient " + name);
      }
    }
  }
  CHECK(with_bias == 2 * 10);  // 3xTF32, x as given and shifted; all but 4 x 256 x 9 x 9 and 2 x 128 x 20 x 20
  // by TMA: conv2, 2 x 128 x 20 x 20 and the last four, in both precisions; the six others and the
  // twelve shifted by cp.async
  CHECK(by_tma == 2 * 6);
  CHECK(by_cp_async == 2 * (6 + 12));
  // FLT_MAX in x: its 3xTF32 split overflows, the products come out NaN, and the kernel sums those
  // outputs again in f32 (grad_y small, so that the true sums stay finite)
  const ConvCase& c = cases[0];
  const cv::Geometry g = geometry(c);
  std::vector<float> xv = uniform(c.x, -1, 1).to_vector<float>();
  xv[5 * 26 + 7] = std::numeric_limits<float>::max();
  const Tensor x = from_vector(xv, c.x), gy = uniform(c.y, -1e-3, 1e-3);
  const Tensor want = conv2d_backward_weight(x, gy, c.w, c.config);
  Tensor dx = x.to(kCuda), dgy = gy.to(kCuda), gw = full(c.w, 7.0, kCuda);
  Tensor ws = full({std::max<int64_t>(1, cv::backward_weight_ring_workspace(g, cv::TensorMath::tf32x3))}, 7.0, kCuda);
  cv::backward_weight_ring(device_ptr<float>(dx), device_ptr<float>(dgy), device_ptr<float>(gw), device_ptr<float>(ws),
                           g, cv::TensorMath::tf32x3, stream);
  check_close(gw, want, rtol_for(DType::f32), 1e-6 * std::numeric_limits<float>::max() * 1e-3,
              "backward_weight_ring (3xTF32) with FLT_MAX in x");
  // FLT_MAX in grad_y, with the bias: its row multiplies the split's low part, 0, by inf, and the
  // outputs whose products overflowed are summed again in f32, the bias's too (x small)
  std::vector<float> gyv = uniform(c.y, -1, 1).to_vector<float>();
  gyv[(9 * 64 + 17) * 24 * 24 + 3 * 24 + 5] = std::numeric_limits<float>::max();
  const Tensor gy_max = from_vector(gyv, c.y), x_small = uniform(c.x, -1e-3, 1e-3);
  const Tensor want_w = conv2d_backward_weight(x_small, gy_max, c.w, c.config), want_b = sum(gy_max, {0, 2, 3});
  Tensor dxs = x_small.to(kCuda), dgym = gy_max.to(kCuda), gw2 = full(c.w, 7.0, kCuda), gb = full({c.w[0]}, 7.0, kCuda);
  Tensor ws2 = full({std::max<int64_t>(1, cv::backward_weight_ring_workspace(g, cv::TensorMath::tf32x3, true))}, 7.0,
                    kCuda);
  cv::backward_weight_ring(device_ptr<float>(dxs), device_ptr<float>(dgym), device_ptr<float>(gw2), device_ptr<float>(ws2),
                           g, cv::TensorMath::tf32x3, stream, device_ptr<float>(gb));
  const double atol = 1e-6 * std::numeric_limits<float>::max() * 1e-3;
  check_close(gw2, want_w, rtol_for(DType::f32), atol, "backward_weight_ring (3xTF32) with FLT_MAX in grad_y");
  check_close(gb, want_b, rtol_for(DType::f32), atol, "the bias's gradient (3xTF32) with FLT_MAX in grad_y");
  CHECK(gb.to_vector<float>()[17] > 1e38f);  // the large value itself, not a NaN or zero
}

TEST_CASE("backward input as a forward convolution matches the CPU at stride 1, and falls back otherwise") {
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
      if (!tf32) {  // version 8 (CUDA cores, O/G <= 32; else version 6)
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

TEST_CASE("version 8 matches the CPU at large batches and over chunks of channels, f32, f64 and bf16") {
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  // thousands of blocks (bands of an image): conv1 at batch 600; twelve channels, past one chunk
  // of eight, padded; groups with 5 x 5 taps (not the unrolled 3 x 3); dilation 2; bias and ReLU
  // on some
  Conv2dConfig padded, grouped, dilated;
  padded.padding = {1, 1};
  grouped.groups = 2, grouped.padding = {2, 2};
  dilated.dilation = {2, 2}, dilated.padding = {1, 1};
  const std::vector<ConvCase> cases = {
      {{600, 1, 28, 28}, {32, 1, 3, 3}, {}, true, {600, 32, 26, 26}},
      {{300, 12, 20, 20}, {8, 12, 3, 3}, padded, false, {300, 8, 20, 20}},
      {{200, 6, 17, 23}, {10, 3, 5, 5}, grouped, true, {200, 10, 17, 23}},
      {{250, 4, 15, 15}, {16, 4, 3, 3}, dilated, true, {250, 16, 13, 13}},
  };
  int index = 0;
  for (const ConvCase& c : cases) {
    const cv::Geometry g = geometry(c);
    const Activation act = index++ % 2 == 0 ? Activation::relu : Activation::none;
    auto check = [&](auto tag, DType t) {
      using T = decltype(tag);
      Tensor x = uniform(c.x, -1, 1).to(t), w = uniform(c.w, -1, 1).to(t), b = uniform({c.w[0]}, -1, 1).to(t);
      Tensor dx = x.to(kCuda), dw = w.to(kCuda), db = b.to(kCuda);
      const cuda::DeviceEpilogue<T> epilogue{c.bias ? device_ptr<T>(db) : nullptr, act};
      Tensor y = full(c.y, 7.0, TensorOptions(t).device(kCuda));
      const std::string what = "version 8 " + std::string(dtype_name(t)) + " " + c.str();
      REQUIRE_MESSAGE(cv::forward_few_outputs_rows_applies<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue,
                                                              device_ptr<T>(y), g, stream),
                      what);
      const Tensor want = conv2d(x, w, c.bias ? b : Tensor(), c.config, act);
      const int64_t length = c.w[1] * c.w[2] * c.w[3];
      if (t == DType::bf16) check_close(y, want, 8e-3, 1e-6 * static_cast<double>(length), what);
      else check_close(y, want, rtol_for(t), atol_for(t, length), what);
    };
    check(float{}, DType::f32);
    check(double{}, DType::f64);
    check(bf16{}, DType::bf16);
  }
}

TEST_CASE("version 13 (few outputs, a warp across a row) matches the CPU, f32, f64 and bf16") {
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  std::mt19937 rng(29);
  int forwards = 0, inputs = 0, wide = 0, one_warp = 0;
  for (int trial = 0; trial < 36; ++trial) {
    // 3 x 3 or 5 x 5; few outputs (the forward: O/G <= 4) or few inputs (the backward input's
    // forward form: C/G <= 4), the other side 1 to 70 channels (one to eight warps a tile, channels
    // not a multiple of them); rows wider than a warp's 30 or 28 columns, heights that cut bands
    // of 8; any padding up to K - 1 each way; groups; bias and ReLU
    const int64_t k = trial % 3 == 2 ? 5 : 3, groups = pick(rng, 1, 2), n = pick(rng, 1, 3);
    const bool few_out = trial % 2 == 0;
    const int64_t few = pick(rng, 1, 4), many = trial % 5 == 0 ? pick(rng, 1, 7) : pick(rng, 8, 70);
    const int64_t cg = few_out ? many : few, og = few_out ? few : many;
    ConvCase c;
    c.config.groups = groups;
    c.config.padding[0] = pick(rng, 0, k - 1), c.config.padding[1] = pick(rng, 0, k - 1);
    const int64_t h = pick(rng, k, 30), w = pick(rng, k, trial % 4 < 2 ? 90 : 30);
    c.x = {n, cg * groups, h, w};
    c.w = {og * groups, cg, k, k};
    c.y = {n, og * groups, h + 2 * c.config.padding[0] - k + 1, w + 2 * c.config.padding[1] - k + 1};
    c.bias = trial % 3 == 0;
    const cv::Geometry g = geometry(c);
    const Activation act = trial % 4 == 1 ? Activation::relu : Activation::none;
    wide += c.y[3] > 30 || w > 30;
    one_warp += many < 8;
    auto run = [&](auto tag, DType t) {
      using T = decltype(tag);
      auto random = [&](const Shape& s) { return uniform(s, -1, 1).to(t); };
      Tensor x = random(c.x), wt = random(c.w), gy = random(c.y), b = random({c.w[0]});
      Tensor dx = x.to(kCuda), dw = wt.to(kCuda), dgy = gy.to(kCuda), db = b.to(kCuda);
      // bf16 on both sides: exact products summed in f32 and rounded once (an ulp of bf16 apart)
      const bool half = t == DType::bf16;
      const double rtol = half ? 8e-3 : rtol_for(t);
      auto atol = [&](int64_t length) { return half ? 1e-6 * static_cast<double>(length) : atol_for(t, length); };
      const std::string name = " " + std::string(dtype_name(t)) + " " + c.str();
      if (few_out) {
        REQUIRE_MESSAGE((cv::forward_columns_applies<T>(g) || t == DType::f64), name);
        if (!cv::forward_columns_applies<T>(g)) return;
        ++forwards;
        const cuda::DeviceEpilogue<T> epilogue{c.bias ? device_ptr<T>(db) : nullptr, act};
        Tensor y = full(c.y, 7.0, TensorOptions(t).device(kCuda));
        cv::forward_columns<T>(device_ptr<T>(dx), device_ptr<T>(dw), epilogue, device_ptr<T>(y), g, stream);
        check_close(y, conv2d(x, wt, c.bias ? b : Tensor(), c.config, act), rtol, atol(cg * k * k),
                    "forward_columns" + name);
      } else {
        REQUIRE_MESSAGE((cv::backward_input_columns_applies<T>(g) || t == DType::f64), name);
        if (!cv::backward_input_columns_applies<T>(g)) return;
        ++inputs;
        Tensor gx = full(c.x, 7.0, TensorOptions(t).device(kCuda));
        cv::backward_input_columns<T>(device_ptr<T>(dgy), device_ptr<T>(dw), device_ptr<T>(gx), g, stream);
        check_close(gx, conv2d_backward_input(gy, wt, c.x, c.config), rtol, atol(og * k * k),
                    "backward_input_columns" + name);
      }
    };
    run(float{}, DType::f32);
    run(double{}, DType::f64);
    run(bf16{}, DType::bf16);
  }
  CHECK(forwards >= 2 * 18);  // f32 and bf16 every time, f64 where its registers and shared memory allow
  CHECK(inputs >= 2 * 18);
  CHECK(wide >= 5);
  CHECK(one_warp >= 3);
  // where it does not apply: stride 2, dilation 2, 5 outputs a group, a 1 x 3 or 4 x 4 kernel
  auto geometry_for = [](const Shape& x, const Shape& w, int64_t stride, int64_t dilation) {
    ConvCase c;
    c.config.stride[0] = c.config.stride[1] = stride;
    c.config.dilation[0] = c.config.dilation[1] = dilation;
    c.x = x, c.w = w;
    auto out = [&](int i) { return (x[i] - dilation * (w[i] - 1) - 1) / stride + 1; };
    c.y = {x[0], w[0], out(2), out(3)};
    return geometry(c);
  };
  CHECK(cv::forward_columns_applies<float>(geometry_for({2, 16, 12, 12}, {4, 16, 3, 3}, 1, 1)));
  CHECK_FALSE(cv::forward_columns_applies<float>(geometry_for({2, 16, 12, 12}, {4, 16, 3, 3}, 2, 1)));
  CHECK_FALSE(cv::forward_columns_applies<float>(geometry_for({2, 16, 12, 12}, {4, 16, 3, 3}, 1, 2)));
  CHECK_FALSE(cv::forward_columns_applies<float>(geometry_for({2, 16, 12, 12}, {5, 16, 3, 3}, 1, 1)));
  CHECK_FALSE(cv::forward_columns_applies<float>(geometry_for({2, 16, 12, 12}, {4, 16, 1, 3}, 1, 1)));
  CHECK_FALSE(cv::forward_columns_applies<float>(geometry_for({2, 16, 12, 12}, {4, 16, 4, 4}, 1, 1)));
  CHECK_THROWS_AS(cv::forward_columns<float>(nullptr, nullptr, {}, nullptr,
                                             geometry_for({2, 16, 12, 12}, {5, 16, 3, 3}, 1, 1), stream),
                  ValueError);
}

TEST_CASE("conv2d weight and wide versions match the CPU with many K splits, odd sizes, f32 and f64") {
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

TEST_CASE("with allow_tf32, conv2d runs on TF32 tensor cores within its error bound") {
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

TEST_CASE("conv2d at the MNIST CNN's shapes matches the CPU, with a fused bias and ReLU through autograd too") {
  // batch 64 and 16: version 3 for the first layer (C*KH*KW < 32), the tensor cores for the second
  const Run run{.device = kCuda, .takes = {{DType::f32, {1e-4, 1e-6}}}};
  conv2d_layer_cases(run, mnist_conv_layers(64, 16));
  conv2d_bias_relu_cases({.device = kCuda, .takes = {{DType::f32, 1e-4}}}, mnist_conv_layers(64, 16));
}

TEST_CASE("the weight gradient's version 5 (a short reduction per output) matches the CPU, f32, f64 and bf16") {
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  std::mt19937 rng(31);
  // random geometries whose K = C/G*KH*KW is at most 32 (any stride, padding, dilation, groups),
  // then a wide input (bands of a few rows), many small images (several a block) and conv1
  std::vector<ConvCase> cases;
  for (int trial = 0; cases.size() < 40; ++trial) {
    const ConvCase c = random_conv(rng, trial);
    if (c.w[1] * c.w[2] * c.w[3] <= 32) cases.push_back(c);
  }
  Conv2dConfig grouped_padded;
  grouped_padded.groups = 3, grouped_padded.padding = {1, 2};
  // bands of 15 rows (f64: 6)
  cases.push_back({{2, 3, 40, 700}, {6, 1, 3, 3}, grouped_padded, false, {2, 6, 40, 702}});
  cases.push_back({{600, 2, 9, 11}, {9, 2, 3, 3}, {}, false, {600, 9, 7, 9}});  // 3 images a block
  cases.push_back({{64, 1, 28, 28}, {32, 1, 3, 3}, {}, false, {64, 32, 26, 26}});  // conv1
  // the window kernel's shapes (3 x 3 of 1 to 3 channels, 5 x 5 of one; row stride = row
  // dilation), with bands shorter and longer than its grad_y loads ahead; and a 3 x 3 that does not
  // slide (stride 2, dilation 1), for the taps kernel
  Conv2dConfig strided_dilated, grouped_dilated, padded, strided;
  strided_dilated.stride = {1, 2}, strided_dilated.dilation = {1, 2}, strided_dilated.padding = {1, 0};
  grouped_dilated.groups = 2, grouped_dilated.stride = {2, 1}, grouped_dilated.dilation = {2, 1};
  grouped_dilated.padding = {2, 1};
  padded.padding = {2, 2};
  strided.stride = {2, 1};
  cases.push_back({{3, 2, 13, 17}, {4, 2, 3, 3}, strided_dilated, false, {3, 4, 13, 7}});
  cases.push_back({{2, 6, 15, 12}, {6, 3, 3, 3}, grouped_dilated, false, {2, 6, 8, 12}});
  cases.push_back({{2, 1, 20, 19}, {5, 1, 5, 5}, padded, false, {2, 5, 20, 19}});
  cases.push_back({{4, 1, 6, 9}, {2, 1, 3, 3}, {}, false, {4, 2, 4, 7}});
  cases.push_back({{3, 2, 11, 11}, {3, 2, 3, 3}, strided, false, {3, 3, 5, 9}});
  for (const ConvCase& c : cases) {
    const cv::Geometry g = geometry(c);
    auto check = [&](auto tag, DType t) {
      using T = decltype(tag);
      Tensor x = uniform(c.x, -1, 1).to(t), gy = uniform(c.y, -1, 1).to(t);
      Tensor dx = x.to(kCuda), dgy = gy.to(kCuda), got = full(c.w, 7.0, TensorOptions(t).device(kCuda));
      const int64_t bytes = cv::backward_weight_rows_workspace<T>(g);
      REQUIRE_MESSAGE(bytes > 0, c.str());
      Tensor ws = full({bytes / 4 + 1}, 7.0, TensorOptions(DType::f32).device(kCuda));
      const Tensor want = conv2d_backward_weight(x, gy, c.w, c.config), want_b = sum(gy, {0, 2, 3});
      const int64_t length = c.y[0] * c.y[2] * c.y[3];
      const std::string what = "version 5 " + std::string(dtype_name(t)) + " " + c.str();
      auto close = [&](const Tensor& a, const Tensor& b, const std::string& note) {
        if (t == DType::bf16) check_close(a, b, 8e-3, 1e-6 * static_cast<double>(length), what + note);
        else check_close(a, b, rtol_for(t), atol_for(t, length), what + note);
      };
      // the weight's gradient alone, then with the bias's from the same pass
      cv::backward_weight_rows<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(got), device_ptr<float>(ws), g,
                                  stream);
      close(got, want, "");
      Tensor got_b = full({c.w[0]}, 7.0, TensorOptions(t).device(kCuda));
      got = full(c.w, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_weight_rows<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(got), device_ptr<float>(ws), g,
                                  stream, device_ptr<T>(got_b));
      close(got, want, " (with the bias)");
      close(got_b, want_b, " bias");
      // grad_y taken back through a relu as it is read: relu_y's zeros, negatives and a NaN (which
      // passes grad_y), against relu_backward's pass first
      std::vector<float> r = uniform(c.y, -1, 1).to_vector<float>();
      r[0] = std::numeric_limits<float>::quiet_NaN(), r[r.size() / 2] = 0.0f;
      Tensor relu_y = from_vector(r, c.y).to(t), masked = relu_backward(relu_y, gy);
      Tensor drelu = relu_y.to(kCuda);
      got = full(c.w, 7.0, TensorOptions(t).device(kCuda)), got_b = full({c.w[0]}, 7.0, TensorOptions(t).device(kCuda));
      cv::backward_weight_rows<T>(device_ptr<T>(dx), device_ptr<T>(dgy), device_ptr<T>(got), device_ptr<float>(ws), g,
                                  stream, device_ptr<T>(got_b), device_ptr<T>(drelu));
      close(got, conv2d_backward_weight(x, masked, c.w, c.config), " through a relu");
      close(got_b, sum(masked, {0, 2, 3}), " bias through a relu");
    };
    check(float{}, DType::f32);
    check(double{}, DType::f64);
    check(bf16{}, DType::bf16);
  }
  // where it does not apply: K past 32
  ConvCase wide{{2, 4, 9, 9}, {3, 4, 3, 3}, {}, false, {2, 3, 7, 7}};
  CHECK(cv::backward_weight_rows_workspace<float>(geometry(wide)) == 0);
}

TEST_CASE("the bf16 weight gradient's version 4 (cells, 3 x 3 kernels) matches the CPU's bf16") {
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  std::mt19937 rng(29);
  constexpr double kRtol = 8e-3;  // as for the other bf16 versions
  int vec = 0, pairs = 0;
  for (int trial = 0; trial < 24; ++trial) {
    // channels past one cell of 16 and odd counts, outputs past one tile of 64, batches of a few
    // images (bands of several rows, the last one short), widths even (pixel pairs) and odd, and
    // every third case an output width that is a multiple of 8 (grad_y read 16 bytes at a time)
    const int64_t groups = pick(rng, 1, 2), n = pick(rng, 1, 5), cg = pick(rng, 8, 40), og = pick(rng, 1, 70);
    const int64_t k[2] = {3, 3};
    ConvCase c;
    do {
      c = stride1_case(rng, groups, n, cg, og, k, [&](int) { return pick(rng, 0, 40); });
    } while (trial % 3 == 0 && c.y[3] % 8 != 0);
    const cv::Geometry g = geometry(c);
    REQUIRE_MESSAGE(cv::backward_weight_cells_bf16_applies(g), c.str());
    vec += c.y[3] % 8 == 0;
    pairs += c.x[3] % 2 == 0;
    Tensor x = uniform(c.x, -1, 1).to(DType::bf16), gy = uniform(c.y, -1, 1).to(DType::bf16);
    Tensor dx = x.to(kCuda), dgy = gy.to(kCuda);
    Tensor ws = full({std::max<int64_t>(1, cv::backward_weight_bf16_workspace(g) / 4)}, 7.0,
                     TensorOptions(DType::f32).device(kCuda));
    Tensor gw = full(c.w, 7.0, TensorOptions(DType::bf16).device(kCuda));
    cv::backward_weight_cells_bf16(device_ptr<bf16>(dx), device_ptr<bf16>(dgy), device_ptr<bf16>(gw),
                                   device_ptr<float>(ws), g, stream);
    check_close(gw, conv2d_backward_weight(x, gy, c.w, c.config), kRtol, 1e-6 * static_cast<double>(n * c.y[2] * c.y[3]),
                "backward_weight_cells_bf16 " + c.str());
  }
  CHECK(vec >= 8);
  CHECK(pairs >= 3);
  CHECK(24 - pairs >= 3);
  // where it does not run, production takes version 3 on image pairs
  auto geometry_of = [](Shape x, Shape w, int64_t stride) {
    cv::Geometry g;
    g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3], g.o = w[0], g.kh = w[2], g.kw = w[3];
    g.stride_h = g.stride_w = stride;
    g.oh = (g.h - g.kh) / stride + 1, g.ow = (g.w - g.kw) / stride + 1;
    return g;
  };
  CHECK(cv::backward_weight_cells_bf16_applies(geometry_of({2, 16, 12, 12}, {8, 16, 3, 3}, 1)));
  CHECK_FALSE(cv::backward_weight_cells_bf16_applies(geometry_of({2, 16, 12, 12}, {8, 16, 3, 3}, 2)));
  CHECK_FALSE(cv::backward_weight_cells_bf16_applies(geometry_of({2, 16, 12, 12}, {8, 16, 5, 5}, 1)));
  CHECK_FALSE(cv::backward_weight_cells_bf16_applies(geometry_of({2, 4, 12, 12}, {8, 4, 3, 3}, 1)));
}

TEST_CASE("the bf16 versions (12 on wgmma, 9 in cells, 7 on channel pairs, 3 on image pairs, 1 and 3 on the CUDA cores) match the CPU's bf16") {
  namespace cv = cuda::conv2d;
  cudaStream_t stream = cuda::backend(0).stream();
  std::mt19937 rng(23);
  // bf16 on both sides: exact products summed in f32 (in another order on each) and rounded once,
  // so a rounding can tip by an ulp of bf16 (2^-8 of the value), plus f32's drift per term.
  constexpr double kRtol = 8e-3;
  auto atol = [](int64_t length) { return 1e-6 * static_cast<double>(length); };
  auto bf16_uniform = [](const Shape& s) { return uniform(s, -1, 1).to(DType::bf16); };
  auto device_buffer = [](int64_t bytes) {
    return full({std::max<int64_t>(1, bytes / 4)}, 7.0, TensorOptions(DType::f32).device(kCuda));
  };
  // each version of conv2d.cuh's table, and how many cases it took each way
  struct PatchVersion : cv::Bf16PatchVersion {
    int forwards = 0, inputs = 0;
  };
  std::vector<PatchVersion> patch_versions;
  for (const cv::Bf16PatchVersion& v : cv::kBf16PatchVersions) patch_versions.push_back({v});
  int input_form = 0, small = 0, short_k = 0, rows = 0, even_width = 0;
  for (int trial = 0; trial < 40; ++trial) {
    // odd channel counts (a pair with a zero partner) and counts past one stage of 16; odd batches
    // (an image pair with a zero partner); widths past 32; any padding and dilation; bias and ReLU
    const int64_t groups = pick(rng, 1, 2), n = pick(rng, 1, 5);
    const int64_t cg = trial % 3 == 0 ? pick(rng, 1, 7) : pick(rng, 8, 40), og = pick(rng, 1, 70);
    const int64_t k[2] = {pick(rng, 1, 4), pick(rng, 1, 4)};
    ConvCase c = stride1_case(rng, groups, n, cg, og, k, [&](int i) { return pick(rng, 0, i == 1 ? 40 : 20); });
    c.bias = trial % 2 == 0;
    const cv::Geometry g = geometry(c);
    const Activation act = trial % 4 < 2 ? Activation::relu : Activation::none;
    Tensor x = bf16_uniform(c.x), w = bf16_uniform(c.w), gy = bf16_uniform(c.y), b = bf16_uniform({c.w[0]});
    Tensor dx = x.to(kCuda), dw = w.to(kCuda), dgy = gy.to(kCuda), db = b.to(kCuda);
    const std::string name = c.str();
    input_form += cv::backward_input_as_forward_applies(g);
    // versions 7 (channel pairs) and 9 (cells): the forward, and the backward input in its forward form
    Tensor want_y = conv2d(x, w, c.bias ? b : Tensor(), c.config, act);
    Tensor want_x = conv2d_backward_input(gy, w, c.x, c.config);
    const cuda::DeviceEpilogue<bf16> epilogue{c.bias ? device_ptr<bf16>(db) : nullptr, act};
    even_width += c.x[3] % 2 == 0;  // version 9 reads pixel pairs
    for (PatchVersion& v : patch_versions) {
      if (v.forward_applies(g)) {
        ++v.forwards;
        Tensor ws = device_buffer(v.forward_workspace(g));
        Tensor y = full(c.y, 7.0, TensorOptions(DType::bf16).device(kCuda));
        v.forward(device_ptr<bf16>(dx), device_ptr<bf16>(dw), epilogue, device_ptr<bf16>(y), device_ptr<float>(ws), g,
                  stream);
        check_close(y, want_y, kRtol, atol(cg * k[0] * k[1]), std::string("forward ") + v.name + " " + name);
      }
      if (v.input_applies(g)) {
        ++v.inputs;
        Tensor ws = device_buffer(v.input_workspace(g));
        Tensor gx = full(c.x, 7.0, TensorOptions(DType::bf16).device(kCuda));
        v.input(device_ptr<bf16>(dgy), device_ptr<bf16>(dw), device_ptr<bf16>(gx), device_ptr<float>(ws), g, stream);
        check_close(gx, want_x, kRtol, atol(og * k[0] * k[1]), std::string("backward input ") + v.name + " " + name);
        if (v.input == cv::backward_input_cells_bf16) {  // through the relu that made x (dx: about half <= 0)
          Tensor masked = full(c.x, 7.0, TensorOptions(DType::bf16).device(kCuda));
          cv::backward_input_relu_cells_bf16(device_ptr<bf16>(dgy), device_ptr<bf16>(dw), device_ptr<bf16>(dx),
                                             device_ptr<bf16>(masked), device_ptr<float>(ws), g, stream);
          CHECK_MESSAGE(masked.to(DType::f32).to_vector<float>() ==
                            relu_backward(dx, gx).to(DType::f32).to_vector<float>(),
                        "backward input through relu, version 9 " << name);
        }
      }
    }
    // version 3 on image pairs, and version 1 (32 x 32 tiles where the layer is small)
    small += cg * k[0] * k[1] <= 32 && og <= 32;
    Tensor want_w = conv2d_backward_weight(x, gy, c.w, c.config);
    for (const bool tensor_cores : {true, false}) {
      Tensor ws = device_buffer(cv::backward_weight_bf16_workspace(g));
      Tensor gw = full(c.w, 7.0, TensorOptions(DType::bf16).device(kCuda));
      auto* run = tensor_cores ? cv::backward_weight_tensor_cores_bf16 : cv::backward_weight_implicit_gemm_bf16;
      run(device_ptr<bf16>(dx), device_ptr<bf16>(dgy), device_ptr<bf16>(gw), device_ptr<float>(ws), g, stream);
      check_close(gw, want_w, kRtol, atol(n * c.y[2] * c.y[3]),
                  (tensor_cores ? "backward_weight_tensor_cores_bf16 " : "backward_weight_implicit_gemm_bf16 ") + name);
    }
    if (cg * k[0] * k[1] < 32) {  // forward version 3 (CUDA cores) in bf16
      ++short_k;
      Tensor y = full(c.y, 7.0, TensorOptions(DType::bf16).device(kCuda));
      cv::forward_implicit_gemm_prefetch<bf16>(device_ptr<bf16>(dx), device_ptr<bf16>(dw), epilogue,
                                               device_ptr<bf16>(y), g, stream);
      check_close(y, want_y, kRtol, atol(cg * k[0] * k[1]), "forward_implicit_gemm_prefetch<bf16> " + name);
      // and version 8 (a thread per pixel, O/G <= 32), which production runs there first
      Tensor y8 = full(c.y, 7.0, TensorOptions(DType::bf16).device(kCuda));
      if (cv::forward_few_outputs_rows_applies<bf16>(device_ptr<bf16>(dx), device_ptr<bf16>(dw), epilogue,
                                                     device_ptr<bf16>(y8), g, stream)) {
        ++rows;
        check_close(y8, want_y, kRtol, atol(cg * k[0] * k[1]), "forward_few_outputs_rows_applies<bf16> " + name);
      }
    }
  }
  // every case fits both patches' shared memory (the backward input where its forward form
  // applies); both of version 9's copies ran; both weight-gradient versions and forward version 3
  for (const PatchVersion& v : patch_versions) {
    if (v.forward == cv::forward_ring_bf16) {  // sm_90 only, and a patch of at most 512 pixels
      MESSAGE("bf16 version 12 ran ", v.forwards, " forwards and ", v.inputs, " backward inputs of 40");
      if (cuda::wgmma_runs()) CHECK((v.forwards >= 10 && v.inputs >= 5));
      continue;
    }
    CHECK_MESSAGE(v.forwards == 40, v.name);
    CHECK_MESSAGE(v.inputs == input_form, v.name);
  }
  CHECK(even_width >= 5);
  CHECK(40 - even_width >= 5);
  CHECK(small >= 5);
  CHECK(40 - small >= 5);
  CHECK(short_k >= 5);
  CHECK(rows >= 1);
}
