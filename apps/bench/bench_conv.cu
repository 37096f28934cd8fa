// kernel-bench --only conv: every conv2d version of kernels/cuda/conv2d.cuh against cuDNN, f32
// NCHW, forward, backward-input and backward-weight, at the MNIST CNN's two layers (batch 64 and
// 512), one large layer and one with a single output channel (a segmentation head's); then cuDNN
// with TF32 allowed (the TF32 versions' peer), and the production path in bf16 against cuDNN in
// bf16. The FP32 reference runs with CUDNN_FMA_MATH (plain FP32 FMA: no TF32, which cuDNN would
// otherwise allow for conv), each pass with the fastest algorithm that cudnnFind*AlgorithmEx
// measures, given a 256 MiB workspace. Each kiln version is first checked against cuDNN's result
// (max error relative to the largest |value|; over 1e-3 is reported as wrong and not timed; the
// TF32 versions get 1e-2). No bias in the timings (cuDNN's convolution has none) but for two
// forward rows: the production path with a bias and ReLU in its epilogue, and the same followed by
// bias and ReLU passes. TFLOP/s counts 2*N*O*OH*OW*C/G*KH*KW flops for each of the three passes.
#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/bench/kernel_bench.h"
#include "kiln/core/backend.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/conv2d.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"

#define KILN_CUDNN_CHECK(call)                                                                    \
  do {                                                                                            \
    cudnnStatus_t kiln_status_ = (call);                                                          \
    if (kiln_status_ != CUDNN_STATUS_SUCCESS)                                                     \
      throw std::runtime_error(std::string("cuDNN call ") + #call + " failed: " +                \
                               cudnnGetErrorString(kiln_status_) + " (" __FILE__ ":" +            \
                               std::to_string(__LINE__) + ")");                                   \
  } while (0)

namespace kiln::bench {

namespace {

namespace cv = kiln::cuda::conv2d;

// The TF32 versions truncate their inputs to 10 mantissa bits: judged against cuDNN's FP32 result
// with this bound instead of 1e-3.
constexpr double kTf32Tolerance = 1e-2;

struct ConvShape {
  const char* layer;
  int64_t n, c, h, w, o, k, pad;
};

std::string shape_str(const ConvShape& s) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "%s x[%lld,%lld,%lld,%lld] w[%lld,%lld,%lld,%lld]%s", s.layer,
                static_cast<long long>(s.n), static_cast<long long>(s.c), static_cast<long long>(s.h),
                static_cast<long long>(s.w), static_cast<long long>(s.o), static_cast<long long>(s.c),
                static_cast<long long>(s.k), static_cast<long long>(s.k), s.pad ? " pad 1" : "");
  return buf;
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op math";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op math (conversion)";
    case CUDNN_FMA_MATH: return "FMA math";
  }
  return "?";
}

// The cuDNN objects for one shape, its tensors of `type` (the convolution accumulates in f32) at
// `math`.
struct Cudnn {
  cudnnHandle_t handle = nullptr;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Cudnn(const ConvShape& s, int64_t oh, int64_t ow, cudaStream_t stream, cudnnDataType_t type = CUDNN_DATA_FLOAT,
        cudnnMathType_t math = CUDNN_FMA_MATH) {
    KILN_CUDNN_CHECK(cudnnCreate(&handle));
    KILN_CUDNN_CHECK(cudnnSetStream(handle, stream));
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y));
    KILN_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
    KILN_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv));
    auto i = [](int64_t v) { return static_cast<int>(v); };
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, i(s.n), i(s.c), i(s.h), i(s.w)));
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, i(s.n), i(s.o), i(oh), i(ow)));
    KILN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, i(s.o), i(s.c), i(s.k), i(s.k)));
    KILN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, i(s.pad), i(s.pad), 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                     CUDNN_DATA_FLOAT));
    KILN_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math));
  }
  ~Cudnn() {
    cudnnDestroyConvolutionDescriptor(conv);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroy(handle);
  }
  Cudnn(const Cudnn&) = delete;
  Cudnn& operator=(const Cudnn&) = delete;
};

// The first successful result of a Find call (they come sorted by time).
template <class Perf>
const Perf& best(const Perf* perf, int count, const char* what) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) return perf[i];
  throw std::runtime_error(std::string("cuDNN found no ") + what + " algorithm");
}

template <class Perf>
std::string algo_note(const Perf& p) {
  return "algo " + std::to_string(static_cast<int>(p.algo)) + ", " + math_name(p.mathType) + ", workspace " +
         std::to_string(p.memory >> 10) + " KiB";
}

// cuDNN's three passes on `dnn`'s types and math, each with the fastest algorithm that
// cudnnFind*AlgorithmEx measures: timed and recorded as "fwd cuDNN <label>" and so on, their
// results left in y, gx and gw. False (and a row saying so) where cuDNN has no algorithm for one.
bool cudnn_passes(Bench& bench, const Cudnn& dnn, const std::string& label, const std::string& shape, double flops,
                  const void* x, const void* w, const void* gy, void* y, void* gx, void* gw, void* workspace,
                  size_t workspace_bytes) {
  const float one = 1, zero = 0;
  auto run = [&](const std::string& version, auto&& find, auto&& pass) {
    try {
      const auto p = find();
      pass(p);
      KILN_CUDA_CHECK(cudaStreamSynchronize(bench.stream()));
      const double ms = bench.time_ms([&] { pass(p); });
      bench.record({"conv2d", version, shape, ms, flops / (ms * 1e-3) / 1e12, "TFLOP/s", true, algo_note(p)});
      return true;
    } catch (const std::runtime_error& e) {
      bench.record({"conv2d", version, shape, 0, 0, "TFLOP/s", true, e.what()});
      return false;
    }
  };
  const bool fwd = run("fwd cuDNN " + label, [&] {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    KILN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(dnn.handle, dnn.x, x, dnn.w, w, dnn.conv, dnn.y, y,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf, workspace,
                                                            workspace_bytes));
    return best(perf, count, "forward");
  }, [&](const cudnnConvolutionFwdAlgoPerf_t& p) {
    KILN_CUDNN_CHECK(cudnnConvolutionForward(dnn.handle, &one, dnn.x, x, dnn.w, w, dnn.conv, p.algo, workspace, p.memory,
                                             &zero, dnn.y, y));
  });
  const bool data = run("bwd-input cuDNN " + label, [&] {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(dnn.handle, dnn.w, w, dnn.y, gy, dnn.conv, dnn.x, gx,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf,
                                                                 workspace, workspace_bytes));
    return best(perf, count, "backward-data");
  }, [&](const cudnnConvolutionBwdDataAlgoPerf_t& p) {
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(dnn.handle, &one, dnn.w, w, dnn.y, gy, dnn.conv, p.algo, workspace,
                                                  p.memory, &zero, dnn.x, gx));
  });
  const bool filter = run("bwd-weight cuDNN " + label, [&] {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(dnn.handle, dnn.x, x, dnn.y, gy, dnn.conv, dnn.w, gw,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count,
                                                                   perf, workspace, workspace_bytes));
    return best(perf, count, "backward-filter");
  }, [&](const cudnnConvolutionBwdFilterAlgoPerf_t& p) {
    KILN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dnn.handle, &one, dnn.x, x, dnn.y, gy, dnn.conv, p.algo, workspace,
                                                    p.memory, &zero, dnn.w, gw));
  });
  return fwd && data && filter;
}

void bench_shape(Bench& bench, const ConvShape& s, void* workspace, size_t workspace_bytes) {
  cudaStream_t stream = bench.stream();
  cv::Geometry g;
  g.n = s.n, g.c = s.c, g.h = s.h, g.w = s.w, g.o = s.o, g.kh = s.k, g.kw = s.k;
  g.pad_h = g.pad_w = s.pad;
  g.oh = s.h + 2 * s.pad - s.k + 1, g.ow = s.w + 2 * s.pad - s.k + 1;
  const int64_t nx = s.n * s.c * s.h * s.w, nw = s.o * s.c * s.k * s.k, ny = s.n * s.o * g.oh * g.ow;
  const double flops = 2.0 * static_cast<double>(ny) * static_cast<double>(s.c * s.k * s.k);
  const std::string shape = shape_str(s);

  float* x = bench.random_floats(nx, 1);
  float* w = bench.random_floats(nw, 2);
  float* gy = bench.random_floats(ny, 3);
  auto buffer = [&](int64_t n) { return static_cast<float*>(bench.device_bytes(sizeof(float) * static_cast<size_t>(n))); };
  float* y_ref = buffer(ny);
  float* y = buffer(ny);
  float* gx_ref = buffer(nx);
  float* gx = buffer(nx);
  float* gw_ref = buffer(nw);
  float* gw = buffer(nw);
  float* kiln_ws = buffer(std::max<int64_t>(1, cv::backward_weight_workspace(g)));
  float* kiln_wt = buffer(std::max<int64_t>(1, cv::backward_input_as_forward_workspace(g)));  // flipped w
  float* kiln_wp = buffer(std::max<int64_t>(1, cv::forward_patch_workspace(g)));  // packed w (version 7)
  float* kiln_wq = buffer(std::max<int64_t>(  // packed w (versions 10, 11 and 12)
      {1, cv::forward_wgmma_workspace(g), cv::backward_input_wgmma_workspace(g), cv::forward_window_workspace(g),
       cv::backward_input_window_workspace(g), cv::forward_ring_workspace(g), cv::backward_input_ring_workspace(g)}));

  Cudnn dnn(s, g.oh, g.ow, stream);
  const float one = 1, zero = 0;
  auto tflops = [&](double ms) { return flops / (ms * 1e-3) / 1e12; };
  // Checks a kiln version's output against cuDNN's, then times it (or reports it wrong).
  auto kiln_version = [&](const std::string& version, const std::function<void()>& fn, const float* out,
                          const float* ref, int64_t n, double tolerance = 1e-3) {
    KILN_CUDA_CHECK(cudaMemsetAsync(const_cast<float*>(out), 0xff, sizeof(float) * static_cast<size_t>(n), stream));
    fn();
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    const double err = max_rel_err(to_host(out, n, stream), to_host(ref, n, stream));
    if (!(err <= tolerance)) {
      bench.record({"conv2d", version, shape, 0, 0, "TFLOP/s", false, "wrong: " + rel_err_note(err) + "; not timed"});
      return;
    }
    const double ms = bench.time_ms(fn);
    bench.record({"conv2d", version, shape, ms, tflops(ms), "TFLOP/s", false, rel_err_note(err)});
  };

  // Runs cuDNN's pick for one pass once (its output is the reference the versions are checked
  // against), then times and records it.
  auto cudnn_reference = [&](const std::string& version, const std::string& note, const std::function<void()>& run) {
    run();
    KILN_CUDA_CHECK(cudaStreamSynchronize(stream));
    const double ms = bench.time_ms(run);
    bench.record({"conv2d", version, shape, ms, tflops(ms), "TFLOP/s", true, note});
  };

  // ---- forward ----
  {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int count = 0;
    KILN_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(dnn.handle, dnn.x, x, dnn.w, w, dnn.conv, dnn.y, y_ref,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf,
                                                            workspace, workspace_bytes));
    const auto& p = best(perf, count, "forward");
    cudnn_reference("fwd cuDNN", algo_note(p), [&] {
      KILN_CUDNN_CHECK(cudnnConvolutionForward(dnn.handle, &one, dnn.x, x, dnn.w, w, dnn.conv, p.algo, workspace,
                                               p.memory, &zero, dnn.y, y_ref));
    });
    kiln_version("fwd 1 direct", [&] { cv::forward_direct<float>(x, w, {}, y, g, stream); }, y, y_ref, ny);
    kiln_version("fwd 2 implicit GEMM", [&] { cv::forward_implicit_gemm<float>(x, w, {}, y, g, stream); }, y,
                 y_ref, ny);
    kiln_version("fwd 3 implicit GEMM prefetch",
                 [&] { cv::forward_implicit_gemm_prefetch<float>(x, w, {}, y, g, stream); }, y, y_ref, ny);
    kiln_version("fwd 4 implicit GEMM 8x8 thread tile",
                 [&] { cv::forward_implicit_gemm_wide<float>(x, w, {}, y, g, stream); }, y, y_ref, ny);
    kiln_version("fwd 5 tensor cores 3xTF32",
                 [&] { cv::forward_tensor_cores<float>(x, w, {}, y, g, cv::TensorMath::tf32x3, stream); }, y,
                 y_ref, ny);
    kiln_version("fwd 5 tensor cores TF32",
                 [&] { cv::forward_tensor_cores<float>(x, w, {}, y, g, cv::TensorMath::tf32, stream); }, y,
                 y_ref, ny, kTf32Tolerance);
    kiln_version("fwd 7 input patch in shared memory 3xTF32",
                 [&] { cv::forward_patch<float>(x, w, {}, y, kiln_wp, g, cv::TensorMath::tf32x3, stream); }, y,
                 y_ref, ny);
    kiln_version("fwd 7 input patch in shared memory TF32",
                 [&] { cv::forward_patch<float>(x, w, {}, y, kiln_wp, g, cv::TensorMath::tf32, stream); }, y,
                 y_ref, ny, kTf32Tolerance);
    if (cv::forward_wgmma_applies(g, cv::TensorMath::tf32x3)) {  // an sm_90 GPU
      kiln_version("fwd 10 wgmma 3xTF32",
                   [&] { cv::forward_wgmma(x, w, {}, y, kiln_wq, g, cv::TensorMath::tf32x3, stream); }, y, y_ref, ny);
      kiln_version("fwd 10 wgmma TF32",
                   [&] { cv::forward_wgmma(x, w, {}, y, kiln_wq, g, cv::TensorMath::tf32, stream); }, y, y_ref, ny,
                   kTf32Tolerance);
    }
    if (cv::forward_window_applies(g, cv::TensorMath::tf32x3)) {
      kiln_version("fwd 11 wgmma window 3xTF32", [&] {
        cv::forward_window(x, w, {}, y, kiln_wq, g, cv::TensorMath::tf32x3, stream, cv::WindowSums::pairs);
      }, y, y_ref, ny);
      kiln_version("fwd 11 wgmma window 3xTF32 stage sums", [&] {
        cv::forward_window(x, w, {}, y, kiln_wq, g, cv::TensorMath::tf32x3, stream, cv::WindowSums::stages);
      }, y, y_ref, ny);
      kiln_version("fwd 11 wgmma window TF32",
                   [&] { cv::forward_window(x, w, {}, y, kiln_wq, g, cv::TensorMath::tf32, stream); }, y, y_ref, ny,
                   kTf32Tolerance);
    }
    if (cv::forward_ring_applies(g, cv::TensorMath::tf32x3)) {
      kiln_version("fwd 12 wgmma ring 3xTF32",
                   [&] { cv::forward_ring(x, w, {}, y, kiln_wq, g, cv::TensorMath::tf32x3, stream); }, y, y_ref, ny);
    }
    if (cv::forward_ring_applies(g, cv::TensorMath::tf32)) {
      kiln_version("fwd 12 wgmma ring TF32",
                   [&] { cv::forward_ring(x, w, {}, y, kiln_wq, g, cv::TensorMath::tf32, stream); }, y, y_ref, ny,
                   kTf32Tolerance);
    }
    if (s.o <= 32)  // version 8 takes up to 32 outputs a pixel (else it runs 6, else 3)
      kiln_version("fwd 8 few outputs, input rows in shared memory",
                   [&] { cv::forward_few_outputs_rows<float>(x, w, {}, y, g, stream); }, y, y_ref, ny);
    if (cv::forward_columns_applies<float>(g))
      kiln_version("fwd 13 few outputs, a warp across a row",
                   [&] { cv::forward_columns<float>(x, w, {}, y, g, stream); }, y, y_ref, ny);

    // A conv layer's bias and ReLU: in the production kernel's epilogue, or as two passes of their
    // own (the broadcast add and the ReLU kernels) after it; checked against cuDNN's result passed
    // through the same bias and ReLU on the host.
    const float* bias = bench.random_floats(s.o, 4);
    std::vector<float> host(static_cast<size_t>(ny)), host_bias(static_cast<size_t>(s.o));
    KILN_CUDA_CHECK(cudaMemcpy(host.data(), y_ref, sizeof(float) * host.size(), cudaMemcpyDeviceToHost));
    KILN_CUDA_CHECK(cudaMemcpy(host_bias.data(), bias, sizeof(float) * host_bias.size(), cudaMemcpyDeviceToHost));
    const int64_t plane = g.oh * g.ow;
    for (size_t e = 0; e < host.size(); ++e)
      host[e] = std::max(host[e] + host_bias[static_cast<size_t>(static_cast<int64_t>(e) / plane % s.o)], 0.0f);
    float* y_relu_ref = buffer(ny);
    KILN_CUDA_CHECK(cudaMemcpy(y_relu_ref, host.data(), sizeof(float) * host.size(), cudaMemcpyHostToDevice));
    const TensorRef rx = f32_ref(x, Shape{s.n, s.c, s.h, s.w}), rw = f32_ref(w, Shape{s.o, s.c, s.k, s.k});
    const TensorRef ry = f32_ref(y, Shape{s.n, s.o, g.oh, g.ow}), rb = f32_ref(bias, Shape{s.o});
    TensorRef rb_planes = ry;  // the bias broadcast over the output: stride 1 along channels only
    rb_planes.buffer = const_cast<float*>(bias);
    rb_planes.strides = Strides{0, 1, 0, 0};
    Conv2dParams params;
    params.pad_h = params.pad_w = s.pad;
    cuda::CudaBackend& backend = cuda::backend(0);  // its stream is the bench's
    kiln_version("fwd production + bias + ReLU in the epilogue",
                 [&] { backend.conv2d(rx, rw, ry, params, Epilogue{rb, Activation::relu}); }, y, y_relu_ref, ny);
    kiln_version("fwd production, then bias and ReLU passes", [&] {
      backend.conv2d(rx, rw, ry, params, {});
      backend.binary(BinaryOp::add, ry, rb_planes, ry);
      backend.unary(UnaryOp::relu, ry, ry, 0.0);
    }, y, y_relu_ref, ny);
  }

  // ---- backward input ----
  {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(dnn.handle, dnn.w, w, dnn.y, gy, dnn.conv, dnn.x,
                                                                 gx_ref, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                                                                 &count, perf, workspace, workspace_bytes));
    const auto& p = best(perf, count, "backward-data");
    cudnn_reference("bwd-input cuDNN", algo_note(p), [&] {
      KILN_CUDNN_CHECK(cudnnConvolutionBackwardData(dnn.handle, &one, dnn.w, w, dnn.y, gy, dnn.conv, p.algo,
                                                    workspace, p.memory, &zero, dnn.x, gx_ref));
    });
    kiln_version("bwd-input 1 direct", [&] { cv::backward_input_direct<float>(gy, w, gx, g, stream); }, gx, gx_ref,
                 nx);
    kiln_version("bwd-input 2 implicit GEMM",
                 [&] { cv::backward_input_implicit_gemm<float>(gy, w, gx, g, stream); }, gx, gx_ref, nx);
    // every bench shape has stride 1 and pad <= kernel-1 (the timing includes the weight flip)
    if (cv::backward_input_as_forward_applies(g))
      kiln_version("bwd-input 3 as forward conv",
                   [&] { cv::backward_input_as_forward<float>(gy, w, gx, kiln_wt, g, stream); }, gx, gx_ref, nx);
    if (cv::backward_input_as_forward_applies(g))
      kiln_version("bwd-input 4 as forward conv 8x8 thread tile",
                   [&] { cv::backward_input_as_forward_wide<float>(gy, w, gx, kiln_wt, g, stream); }, gx, gx_ref, nx);
    if (cv::backward_input_as_forward_applies(g) && g.c / g.groups <= 16)
      kiln_version("bwd-input 6 as forward conv, direct, few channels",
                   [&] { cv::backward_input_few_outputs<float>(gy, w, gx, kiln_wt, g, stream); }, gx, gx_ref, nx);
    if (cv::backward_input_as_forward_applies(g) && g.c / g.groups <= 16)
      kiln_version("bwd-input 8 as forward conv, direct, few channels, rows in shared memory",
                   [&] { cv::backward_input_few_outputs_rows<float>(gy, w, gx, kiln_wt, g, stream); }, gx, gx_ref,
                   nx);
    if (cv::backward_input_columns_applies<float>(g))
      kiln_version("bwd-input 13 as forward conv, few channels, a warp across a row",
                   [&] { cv::backward_input_columns<float>(gy, w, gx, g, stream); }, gx, gx_ref, nx);
    if (cv::backward_input_as_forward_applies(g)) {
      kiln_version("bwd-input 5 tensor cores 3xTF32", [&] {
        cv::backward_input_tensor_cores<float>(gy, w, gx, kiln_wt, g, cv::TensorMath::tf32x3, stream);
      }, gx, gx_ref, nx);
      kiln_version("bwd-input 5 tensor cores TF32", [&] {
        cv::backward_input_tensor_cores<float>(gy, w, gx, kiln_wt, g, cv::TensorMath::tf32, stream);
      }, gx, gx_ref, nx, kTf32Tolerance);
      kiln_version("bwd-input 7 input patch in shared memory 3xTF32", [&] {
        cv::backward_input_patch<float>(gy, w, gx, kiln_wt, g, cv::TensorMath::tf32x3, stream);
      }, gx, gx_ref, nx);
      kiln_version("bwd-input 7 input patch in shared memory TF32", [&] {
        cv::backward_input_patch<float>(gy, w, gx, kiln_wt, g, cv::TensorMath::tf32, stream);
      }, gx, gx_ref, nx, kTf32Tolerance);
      if (cv::backward_input_wgmma_applies(g, cv::TensorMath::tf32x3)) {
        kiln_version("bwd-input 10 wgmma 3xTF32", [&] {
          cv::backward_input_wgmma(gy, w, gx, kiln_wq, g, cv::TensorMath::tf32x3, stream);
        }, gx, gx_ref, nx);
        kiln_version("bwd-input 10 wgmma TF32", [&] {
          cv::backward_input_wgmma(gy, w, gx, kiln_wq, g, cv::TensorMath::tf32, stream);
        }, gx, gx_ref, nx, kTf32Tolerance);
      }
      if (cv::backward_input_window_applies(g, cv::TensorMath::tf32x3)) {
        kiln_version("bwd-input 11 wgmma window 3xTF32", [&] {
          cv::backward_input_window(gy, w, gx, kiln_wq, g, cv::TensorMath::tf32x3, stream, cv::WindowSums::pairs);
        }, gx, gx_ref, nx);
        kiln_version("bwd-input 11 wgmma window 3xTF32 stage sums", [&] {
          cv::backward_input_window(gy, w, gx, kiln_wq, g, cv::TensorMath::tf32x3, stream, cv::WindowSums::stages);
        }, gx, gx_ref, nx);
        kiln_version("bwd-input 11 wgmma window TF32", [&] {
          cv::backward_input_window(gy, w, gx, kiln_wq, g, cv::TensorMath::tf32, stream);
        }, gx, gx_ref, nx, kTf32Tolerance);
      }
      if (cv::backward_input_ring_applies(g, cv::TensorMath::tf32x3))
        kiln_version("bwd-input 12 wgmma ring 3xTF32", [&] {
          cv::backward_input_ring(gy, w, gx, kiln_wq, g, cv::TensorMath::tf32x3, stream);
        }, gx, gx_ref, nx);
      if (cv::backward_input_ring_applies(g, cv::TensorMath::tf32))
        kiln_version("bwd-input 12 wgmma ring TF32", [&] {
          cv::backward_input_ring(gy, w, gx, kiln_wq, g, cv::TensorMath::tf32, stream);
        }, gx, gx_ref, nx, kTf32Tolerance);
    }
  }

  // ---- backward weight ----
  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    KILN_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(dnn.handle, dnn.x, x, dnn.y, gy, dnn.conv, dnn.w,
                                                                   gw_ref, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                                   &count, perf, workspace, workspace_bytes));
    const auto& p = best(perf, count, "backward-filter");
    cudnn_reference("bwd-weight cuDNN", algo_note(p), [&] {
      KILN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dnn.handle, &one, dnn.x, x, dnn.y, gy, dnn.conv, p.algo,
                                                      workspace, p.memory, &zero, dnn.w, gw_ref));
    });
    kiln_version("bwd-weight 1 implicit GEMM split-K",
                 [&] { cv::backward_weight_implicit_gemm<float>(x, gy, gw, kiln_ws, g, stream); }, gw, gw_ref, nw);
    kiln_version("bwd-weight 2 split-K 64x128 tile, 8x8 thread tile",
                 [&] { cv::backward_weight_implicit_gemm_wide<float>(x, gy, gw, kiln_ws, g, stream); }, gw, gw_ref,
                 nw);
    kiln_version("bwd-weight 3 tensor cores 3xTF32", [&] {
      cv::backward_weight_tensor_cores<float>(x, gy, gw, kiln_ws, g, cv::TensorMath::tf32x3, stream);
    }, gw, gw_ref, nw);
    kiln_version("bwd-weight 3 tensor cores TF32", [&] {
      cv::backward_weight_tensor_cores<float>(x, gy, gw, kiln_ws, g, cv::TensorMath::tf32, stream);
    }, gw, gw_ref, nw, kTf32Tolerance);
    for (const cv::TensorMath math : {cv::TensorMath::tf32x3, cv::TensorMath::tf32}) {
      if (!cv::backward_weight_ring_applies(g, math)) continue;
      const bool tf32 = math == cv::TensorMath::tf32;
      float* ws = buffer(std::max<int64_t>(1, cv::backward_weight_ring_workspace(g, math)));
      kiln_version(std::string("bwd-weight 6 wgmma ring ") + (tf32 ? "TF32" : "3xTF32"),
                   [&] { cv::backward_weight_ring(x, gy, gw, ws, g, math, stream); }, gw, gw_ref, nw,
                   tf32 ? kTf32Tolerance : 1e-3);
      if (!cv::backward_weight_ring_takes_bias(g, math)) continue;
      float* wsb = buffer(std::max<int64_t>(1, cv::backward_weight_ring_workspace(g, math, true)));
      float* gb = buffer(s.o);
      kiln_version("bwd-weight 6 wgmma ring 3xTF32 with the bias",
                   [&] { cv::backward_weight_ring(x, gy, gw, wsb, g, math, stream, gb); }, gw, gw_ref, nw);
    }
    if (const int64_t bytes = cv::backward_weight_rows_workspace<float>(g); bytes > 0) {
      void* ws = bench.device_bytes(static_cast<size_t>(bytes));
      kiln_version("bwd-weight 5 short reduction, input rows in shared memory",
                   [&] { cv::backward_weight_rows<float>(x, gy, gw, ws, g, stream); }, gw, gw_ref, nw);
    }
  }

  // ---- cuDNN with TF32 allowed: the peer of kiln's TF32 versions above ----
  {
    Cudnn tf32(s, g.oh, g.ow, stream, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH);
    cudnn_passes(bench, tf32, "TF32", shape, flops, x, w, gy, y, gx, gw, workspace, workspace_bytes);
  }

  // ---- bf16 (mixed precision) ----
  // x, w and grad_y rounded to bf16. cuDNN with bf16 tensors (NCHW, as kiln's) accumulating in
  // f32 with tensor-op math is the reference; kiln's production path (CudaBackend: the bf16 versions
  // where they apply, else the f32 versions on widened operands) must match its result to 1e-2 of
  // max |value| (an ulp of bf16 is 2^-8 relative).
  {
    cuda::CudaBackend& backend = cuda::backend(0);
    auto bf16_buffer = [&](int64_t n) { return bench.device_bytes(2 * static_cast<size_t>(n)); };
    const Shape sx{s.n, s.c, s.h, s.w}, sw{s.o, s.c, s.k, s.k}, sy{s.n, s.o, g.oh, g.ow};
    const TensorRef x16 = device_ref(bf16_buffer(nx), sx, DType::bf16), w16 = device_ref(bf16_buffer(nw), sw, DType::bf16);
    const TensorRef gy16 = device_ref(bf16_buffer(ny), sy, DType::bf16), y16 = device_ref(bf16_buffer(ny), sy, DType::bf16);
    const TensorRef gx16 = device_ref(bf16_buffer(nx), sx, DType::bf16), gw16 = device_ref(bf16_buffer(nw), sw, DType::bf16);
    backend.copy(f32_ref(x, sx), x16);
    backend.copy(f32_ref(w, sw), w16);
    backend.copy(f32_ref(gy, sy), gy16);
    Cudnn dnn16(s, g.oh, g.ow, stream, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_OP_MATH);
    const bool found = cudnn_passes(bench, dnn16, "BF16", shape, flops, x16.buffer, w16.buffer, gy16.buffer, y16.buffer,
                                    gx16.buffer, gw16.buffer, workspace, workspace_bytes);
    // cuDNN's results widened into the f32 reference buffers, kiln's into the f32 output buffers.
    auto widen = [&](const TensorRef& from, float* to) {
      backend.copy(from, f32_ref(to, from.shape));
      return to_host(to, from.numel(), stream);
    };
    const std::vector<float> want_y = widen(y16, y_ref), want_gx = widen(gx16, gx_ref), want_gw = widen(gw16, gw_ref);
    Conv2dParams params;
    params.pad_h = params.pad_w = s.pad;
    auto production = [&](const std::string& version, const std::function<void()>& fn, const TensorRef& out,
                          float* out_f32, const std::vector<float>& want) {
      fn();
      const double err = max_rel_err(widen(out, out_f32), want);
      if (!found || !(err <= 1e-2)) {
        bench.record({"conv2d", version, shape, 0, 0, "TFLOP/s", false,
                      found ? "wrong: " + rel_err_note(err) + " > 1.0e-02, not timed" : "no cuDNN reference"});
        return;
      }
      const double ms = bench.time_ms(fn);
      bench.record({"conv2d", version, shape, ms, flops / (ms * 1e-3) / 1e12, "TFLOP/s", false, rel_err_note(err)});
    };
    production("fwd production (BF16)", [&] { backend.conv2d(x16, w16, y16, params, {}); }, y16, y, want_y);
    production("bwd-input production (BF16)", [&] { backend.conv2d_backward_input(gy16, w16, gx16, params); }, gx16,
               gx, want_gx);
    production("bwd-weight production (BF16)", [&] { backend.conv2d_backward_weight(x16, gy16, gw16, params); },
               gw16, gw, want_gw);
    void* ws16 = bench.device_bytes(static_cast<size_t>(cv::backward_weight_bf16_workspace(g)));
    const auto* bx = static_cast<const bf16*>(x16.buffer);
    const auto* bgy = static_cast<const bf16*>(gy16.buffer);
    if (s.o <= 32) {
      production("fwd 3 implicit GEMM prefetch BF16", [&] {
        cv::forward_implicit_gemm_prefetch<bf16>(bx, static_cast<const bf16*>(w16.buffer), {},
                                                 static_cast<bf16*>(y16.buffer), g, stream);
      }, y16, y, want_y);
      production("fwd 8 few outputs, input rows in shared memory BF16", [&] {
        cv::forward_few_outputs_rows_applies<bf16>(bx, static_cast<const bf16*>(w16.buffer), {},
                                                   static_cast<bf16*>(y16.buffer), g, stream);
      }, y16, y, want_y);
    }
    if (cv::forward_columns_applies<bf16>(g))
      production("fwd 13 few outputs, a warp across a row BF16", [&] {
        cv::forward_columns<bf16>(bx, static_cast<const bf16*>(w16.buffer), {}, static_cast<bf16*>(y16.buffer), g,
                                  stream);
      }, y16, y, want_y);
    if (cv::backward_input_columns_applies<bf16>(g))
      production("bwd-input 13 few channels, a warp across a row BF16", [&] {
        cv::backward_input_columns<bf16>(bgy, static_cast<const bf16*>(w16.buffer), static_cast<bf16*>(gx16.buffer), g,
                                         stream);
      }, gx16, gx, want_gx);
    // the bf16 versions the production path chooses between for the forward and the backward input
    for (const cv::Bf16PatchVersion& v : cv::kBf16PatchVersions) {
      const int64_t bytes = std::max(v.forward_workspace(g), v.input_workspace(g));
      void* ws = bench.device_bytes(static_cast<size_t>(std::max<int64_t>(bytes, 16)));
      const auto* bw = static_cast<const bf16*>(w16.buffer);
      if (v.forward_applies(g))
        production(std::string("fwd ") + v.name,
                   [&] { v.forward(bx, bw, {}, static_cast<bf16*>(y16.buffer), ws, g, stream); }, y16, y, want_y);
      if (v.input_applies(g))
        production(std::string("bwd-input ") + v.name,
                   [&] { v.input(bgy, bw, static_cast<bf16*>(gx16.buffer), ws, g, stream); }, gx16, gx, want_gx);
    }
    if (cv::backward_weight_ring_bf16_applies(bx, bgy, g)) {
      void* ws = bench.device_bytes(static_cast<size_t>(cv::backward_weight_ring_bf16_workspace(g)));
      production("bwd-weight 6 wgmma ring BF16", [&] {
        cv::backward_weight_ring_bf16(bx, bgy, static_cast<bf16*>(gw16.buffer), ws, g, stream);
      }, gw16, gw, want_gw);
    }
    if (cv::backward_weight_cells_bf16_applies(g))
      production("bwd-weight 4 cells BF16", [&] {
        cv::backward_weight_cells_bf16(bx, bgy, static_cast<bf16*>(gw16.buffer), ws16, g, stream);
      }, gw16, gw, want_gw);
    if (const int64_t bytes = cv::backward_weight_rows_workspace<bf16>(g); bytes > 0) {
      void* ws = bench.device_bytes(static_cast<size_t>(bytes));
      production("bwd-weight 5 short reduction, input rows in shared memory BF16", [&] {
        cv::backward_weight_rows<bf16>(bx, bgy, static_cast<bf16*>(gw16.buffer), ws, g, stream);
      }, gw16, gw, want_gw);
    }
    production("bwd-weight 3 tensor cores BF16, image pairs", [&] {
      cv::backward_weight_tensor_cores_bf16(bx, bgy, static_cast<bf16*>(gw16.buffer), ws16, g, stream);
    }, gw16, gw, want_gw);
    production("bwd-weight 1 implicit GEMM BF16", [&] {
      cv::backward_weight_implicit_gemm_bf16(bx, bgy, static_cast<bf16*>(gw16.buffer), ws16, g, stream);
    }, gw16, gw, want_gw);
  }
}

}  // namespace

void bench_conv(Bench& bench) {
  std::vector<ConvShape> shapes = {{"conv1", 64, 1, 28, 28, 32, 3, 0}, {"conv2", 64, 32, 26, 26, 64, 3, 0}};
  if (!bench.quick()) {
    shapes.push_back({"conv1", 512, 1, 28, 28, 32, 3, 0});
    shapes.push_back({"conv2", 512, 32, 26, 26, 64, 3, 0});
    shapes.push_back({"large", 64, 128, 56, 56, 128, 3, 1});
    shapes.push_back({"head", 64, 64, 56, 56, 1, 3, 1});  // one output channel: forward 13's
  }
  const size_t workspace_bytes = size_t{256} << 20;
  void* workspace = bench.device_bytes(workspace_bytes);
  for (const ConvShape& s : shapes)
    if (bench.wants(shape_str(s))) bench_shape(bench, s, workspace, workspace_bytes);
}

}  // namespace kiln::bench
