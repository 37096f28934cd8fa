// kernel-bench --only matmul: every version of the CUDA matmul ladder (kernels/cuda/matmul/), the
// production path (CudaBackend::matmul, FP32, with allow_tf32, and in bf16), cuBLAS SGEMM (FP32),
// cuBLAS with TF32 tensor cores and cuBLAS in bf16, in TFLOP/s (2 m n k flops per product), on C = op(A) op(B), A and B
// row-major, transposed where the shape says so (" A^T", " B^T": the layouts autograd hands the
// kernels for an MLP layer y = x W^T: forward with B^T, grad_x plain, grad_W = g^T x with A^T, since
// autograd computes a transposed operand's gradient transposed; the fc1 rows "9216x128xB A^T" are
// grad_W^T = x^T g, the layout benched before that was noticed).
// Each version is first checked against cuBLAS FP32: its note gives the largest error relative to
// max|C|; a version beyond its tolerance (1e-4 FP32, 1e-2 TF32) is reported and not timed.
// 01 and 02 run only up to 2048^3: at 4096^3 they take seconds per call.
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "apps/bench/kernel_bench.h"
#include "kiln/core/backend.h"
#include "kiln/core/error.h"
#include "kiln/core/precision.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

#define KILN_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                 \
    cublasStatus_t kiln_status_ = (call);                                                              \
    KILN_CHECK(kiln_status_ == CUBLAS_STATUS_SUCCESS, ::kiln::Error, "cuBLAS call ", #call, " failed: ", \
               static_cast<int>(kiln_status_));                                                        \
  } while (0)

namespace kiln::bench {

namespace {

struct Mnk {
  int64_t m, n, k;
  bool trans_a = false, trans_b = false;
};

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

}  // namespace

void bench_matmul(Bench& bench) {
  const std::vector<Mnk> shapes = bench.quick()
                                      ? std::vector<Mnk>{{4096, 4096, 4096}, {64, 128, 784},
                                                         {64, 128, 9216, false, true}}
                                      : std::vector<Mnk>{{4096, 4096, 4096},
                                                         // B^T: both operands K-major, which 13 reads from shared
                                                         // memory (in the plain product, B's rows go through registers)
                                                         {4096, 4096, 4096, false, true},
                                                         {2048, 2048, 2048}, {2048, 2048, 2048, false, true},
                                                         {1024, 1024, 1024}, {1024, 1024, 1024, false, true},
                                                         {64, 128, 784}, {64, 10, 128}, {784, 128, 64},
                                                         // the MNIST CNN's fc2 (128 -> 10) at batch 64 and 512:
                                                         // forward, input and weight gradients
                                                         {64, 10, 128, false, true}, {64, 128, 10},
                                                         {10, 128, 64, true, false}, {512, 10, 128, false, true},
                                                         {512, 128, 10}, {10, 128, 512, true, false},
                                                         // the MNIST CNN's fc1 (9216 -> 128) at batch 64
                                                         // and 512: forward, input and weight gradients
                                                         {64, 128, 9216, false, true}, {64, 9216, 128},
                                                         {9216, 128, 64, true, false}, {128, 9216, 64, true, false},
                                                         {512, 128, 9216, false, true}, {512, 9216, 128},
                                                         {9216, 128, 512, true, false}, {128, 9216, 512, true, false},
                                                         // a Linear(4096, 4096) at batch 512 (dist-bench ddp's
                                                         // layers): forward, input gradient, weight gradient
                                                         {512, 4096, 4096, false, true}, {512, 4096, 4096},
                                                         {4096, 4096, 512, true, false}};
  const cudaStream_t stream = bench.stream();
  cublasHandle_t handle;
  KILN_CUBLAS_CHECK(cublasCreate(&handle));
  KILN_CUBLAS_CHECK(cublasSetStream(handle, stream));
  cuda::CudaBackend& backend = cuda::backend(0);

  for (const Mnk& s : shapes) {
    const std::string shape = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k) +
                              (s.trans_a ? " A^T" : "") + (s.trans_b ? " B^T" : "");
    if (!bench.wants(shape)) continue;
    const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    const float* A = bench.random_floats(s.m * s.k, 1);
    const float* B = bench.random_floats(s.k * s.n, 2);
    auto* C = static_cast<float*>(bench.device_bytes(static_cast<size_t>(s.m * s.n) * sizeof(float)));
    MatmulParams p;
    p.m = s.m, p.n = s.n, p.k = s.k;
    // Stored A: [m, k], or [k, m] when transposed; stored B: [k, n], or [n, k].
    p.trans_a = s.trans_a, p.trans_b = s.trans_b;
    p.lda = s.trans_a ? s.m : s.k, p.ldb = s.trans_b ? s.k : s.n;

    // cuBLAS is column-major: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so
    // pass B first. A row-major matrix is its column-major transpose: a stored operand that is not
    // transposed goes in as is (OP_N), a transposed one with OP_T; the leading dimensions stay.
    const float one = 1, zero = 0;
    const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    auto cublas = [&](cublasMath_t mode) {
      return [&, mode] {
        KILN_CUBLAS_CHECK(cublasSetMathMode(handle, mode));
        KILN_CUBLAS_CHECK(cublasSgemm(handle, op_b, op_a, static_cast<int>(s.n), static_cast<int>(s.m),
                                      static_cast<int>(s.k), &one, B, static_cast<int>(p.ldb), A,
                                      static_cast<int>(p.lda), &zero, C, static_cast<int>(s.n)));
      };
    };
    auto fp32 = cublas(CUBLAS_DEFAULT_MATH);
    fp32();
    const std::vector<float> want = to_host(C, s.m * s.n, stream);

    // Checks fn's result against `expected` (cuBLAS FP32's, through the epilogue for the rows that
    // have one), then times it (or reports it wrong).
    auto run_against = [&](const std::vector<float>& expected, const std::string& version, bool tf32, bool reference,
                           const std::function<void()>& fn) {
      KILN_CUDA_CHECK(cudaMemsetAsync(C, 0, static_cast<size_t>(s.m * s.n) * sizeof(float), stream));
      fn();
      const double err = max_rel_err(to_host(C, s.m * s.n, stream), expected);
      const double tol = tf32 ? 1e-2 : 1e-4;
      if (!(err <= tol)) {
        bench.record({"matmul", version, shape, 0, 0, "TFLOP/s", reference,
                      "wrong: " + rel_err_note(err) + " > " + sci(tol) + ", not timed"});
        return;
      }
      const double ms = bench.time_ms(fn);
      bench.record({"matmul", version, shape, ms, flops / (ms * 1e-3) / 1e12, "TFLOP/s", reference,
                    rel_err_note(err)});
    };
    auto run = [&](const std::string& version, bool tf32, bool reference, const std::function<void()>& fn) {
      run_against(want, version, tf32, reference, fn);
    };

    run("cuBLAS SGEMM", false, true, fp32);
    run("cuBLAS TF32", true, true, cublas(CUBLAS_TF32_TENSOR_OP_MATH));
    for (const auto& v : cuda::matmul::versions()) {
      const bool slow = std::string(v.name) == "01_naive" || std::string(v.name) == "02_coalesced";
      if (slow && flops > 2.0 * 2048.0 * 2048.0 * 2048.0) continue;
      run(v.name, v.tf32, false, [&, fn = v.run] { fn(p, A, B, C, {}, stream); });
    }
    // The backend reads the data pointers and p; the refs carry the stored shapes.
    const TensorRef ra = f32_ref(A, s.trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k});
    const TensorRef rb = f32_ref(B, s.trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n});
    const TensorRef rc = f32_ref(C, Shape{s.m, s.n});
    // The production path runs on the backend's stream, which is the bench's stream.
    run("production (FP32)", false, false, [&] { backend.matmul(ra, rb, rc, p, {}); });
    set_allow_tf32(true);
    run("production (TF32)", true, false, [&] { backend.matmul(ra, rb, rc, p, {}); });
    set_allow_tf32(false);

    // A Linear layer's bias and ReLU: in the product's epilogue, or as two passes of their own
    // (the broadcast add and the ReLU kernels) after it.
    const float* bias = bench.random_floats(s.n, 3);
    const std::vector<float> host_bias = to_host(bias, s.n, stream);
    std::vector<float> want_relu(want.size());
    for (size_t e = 0; e < want.size(); ++e) want_relu[e] = std::max(want[e] + host_bias[e % static_cast<size_t>(s.n)], 0.0f);
    const TensorRef rbias = f32_ref(bias, Shape{s.n});
    TensorRef rbias_rows = f32_ref(bias, Shape{s.m, s.n});  // broadcast along the rows
    rbias_rows.strides = Strides{0, 1};
    run_against(want_relu, "production + bias + ReLU in the epilogue", false, false,
                [&] { backend.matmul(ra, rb, rc, p, Epilogue{rbias, Activation::relu}); });
    run_against(want_relu, "production, then bias and ReLU passes", false, false, [&] {
      backend.matmul(ra, rb, rc, p, {});
      backend.binary(BinaryOp::add, rc, rbias_rows, rc);
      backend.unary(UnaryOp::relu, rc, rc, 0.0);
    });

    // bf16 (mixed precision): the same A and B rounded to bf16, against cuBLAS with bf16 operands
    // and result and f32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F), whose result each bf16
    // version must match to 1e-2 of max|C| (an ulp of bf16 is 2^-8 relative).
    auto* A16 = bench.device_bytes(static_cast<size_t>(s.m * s.k) * 2);
    auto* B16 = bench.device_bytes(static_cast<size_t>(s.k * s.n) * 2);
    auto* C16 = bench.device_bytes(static_cast<size_t>(s.m * s.n) * 2);
    const TensorRef ra16 = device_ref(A16, ra.shape, DType::bf16), rb16 = device_ref(B16, rb.shape, DType::bf16),
                    rc16 = device_ref(C16, rc.shape, DType::bf16);
    backend.copy(ra, ra16);
    backend.copy(rb, rb16);
    auto bf16_result = [&] {  // C16 widened into C, to compare as f32
      backend.copy(rc16, rc);
      return to_host(C, s.m * s.n, stream);
    };
    auto cublas_bf16 = [&] {
      KILN_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
      KILN_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, static_cast<int>(s.n), static_cast<int>(s.m),
                                     static_cast<int>(s.k), &one, B16, CUDA_R_16BF, static_cast<int>(p.ldb), A16,
                                     CUDA_R_16BF, static_cast<int>(p.lda), &zero, C16, CUDA_R_16BF,
                                     static_cast<int>(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    cublas_bf16();
    const std::vector<float> want16 = bf16_result();
    auto run_bf16 = [&](const std::string& version, bool reference, const std::function<void()>& fn) {
      KILN_CUDA_CHECK(cudaMemsetAsync(C16, 0, static_cast<size_t>(s.m * s.n) * 2, stream));
      fn();
      const double err = max_rel_err(bf16_result(), want16);
      if (!(err <= 1e-2)) {
        bench.record({"matmul", version, shape, 0, 0, "TFLOP/s", reference,
                      "wrong: " + rel_err_note(err) + " > 1.0e-02, not timed"});
        return;
      }
      const double ms = bench.time_ms(fn);
      bench.record({"matmul", version, shape, ms, flops / (ms * 1e-3) / 1e12, "TFLOP/s", reference,
                    rel_err_note(err)});
    };
    run_bf16("cuBLAS BF16", true, cublas_bf16);
    run_bf16("14_bf16_mma", false, [&] {
      cuda::matmul::bf16_mma(p, static_cast<const bf16*>(A16), static_cast<const bf16*>(B16), static_cast<bf16*>(C16),
                             {}, stream);
    });
    run_bf16("15_bf16_wgmma", false, [&] {
      cuda::matmul::bf16_wgmma(p, static_cast<const bf16*>(A16), static_cast<const bf16*>(B16),
                               static_cast<bf16*>(C16), {}, stream);
    });
    {  // 16 at the chunk count production would give it
      const int64_t splits =
          cuda::matmul::bf16_wgmma_split_k_splits(p, cuda::device_attribute(cudaDevAttrMultiProcessorCount));
      void* ws = bench.device_bytes(cuda::matmul::bf16_wgmma_split_k_workspace(
          p, static_cast<const bf16*>(A16), static_cast<const bf16*>(B16), splits));
      run_bf16("16_bf16_wgmma_split_k", false, [&] {
        cuda::matmul::bf16_wgmma_split_k_run(p, static_cast<const bf16*>(A16), static_cast<const bf16*>(B16),
                                             static_cast<bf16*>(C16), {}, splits, ws, stream);
      });
    }
    {  // 09 on bf16 operands, at the split count production would give it
      const int64_t splits = cuda::matmul::split_k_splits(p, cuda::device_attribute(cudaDevAttrMultiProcessorCount));
      auto* ws = static_cast<float*>(bench.device_bytes(static_cast<size_t>(splits * s.m * s.n) * sizeof(float)));
      run_bf16("09_split_k (BF16)", false, [&] {
        cuda::matmul::split_k_run(p, static_cast<const bf16*>(A16), static_cast<const bf16*>(B16),
                                  static_cast<bf16*>(C16), {}, splits, ws, stream);
      });
    }
    run_bf16("production (BF16)", false, [&] { backend.matmul(ra16, rb16, rc16, p, {}); });
  }
  KILN_CUBLAS_CHECK(cublasDestroy(handle));
}

}  // namespace kiln::bench
