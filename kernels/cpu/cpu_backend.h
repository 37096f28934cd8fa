// The CPU backend: kiln's reference for every other backend and a real path on machines with no
// GPU. Kernels are written to be read first: each accumulates f32 in double where sums are long,
// and the heavy ones (matmul, conv2d) are cache-blocked and spread over the thread pool
// (kernels/cpu/parallel.h). One file per op family, named as in the other backends.
#pragma once

#include "kiln/core/backend.h"
#include "kiln/core/error.h"

namespace kiln::cpu {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  // memory.cpp
  void* allocate(size_t bytes) override;
  void deallocate(void* buffer) noexcept override;
  void write(void* buffer, size_t byte_offset, const void* host, size_t bytes) override;
  void read(const void* buffer, size_t byte_offset, void* host, size_t bytes) override;
  void synchronize() override {}

  // elementwise.cpp
  void fill(const TensorRef& out, double value) override;
  void arange(const TensorRef& out, double start, double step) override;
  void copy(const TensorRef& src, const TensorRef& out) override;
  void unary(UnaryOp op, const TensorRef& x, const TensorRef& out, double alpha) override;
  void unary_backward(UnaryOp op, const TensorRef& x, const TensorRef& grad, const TensorRef& out,
                      double alpha) override;
  void binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) override;

  // random.cpp
  void uniform(const TensorRef& out, double low, double high, const philox::Key& key) override;
  void normal(const TensorRef& out, double mean, double stddev, const philox::Key& key) override;
  void dropout(const TensorRef& x, const TensorRef& out, double p, const philox::Key& key) override;

  // reduce.cpp
  void reduce(ReduceOp op, const TensorRef& x, const TensorRef& out) override;

  // softmax.cpp
  void softmax(const TensorRef& x, const TensorRef& out, bool log) override;

  // index.cpp
  void gather(const TensorRef& x, const TensorRef& indices, const TensorRef& out) override;
  void index_add(const TensorRef& src, const TensorRef& indices, const TensorRef& out) override;

  // cross_entropy.cpp
  void cross_entropy(const TensorRef& logits, const TensorRef& targets, const TensorRef& losses,
                     double label_smoothing) override;
  void cross_entropy_backward(const TensorRef& logits, const TensorRef& targets,
                              const TensorRef& grad_losses, const TensorRef& grad_logits,
                              double label_smoothing) override;
  void one_hot(const TensorRef& indices, const TensorRef& out) override;

  // matmul.cpp
  void matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& p,
              const Epilogue& e) override;

  // conv2d.cpp
  void conv2d(const TensorRef& x, const TensorRef& w, const TensorRef& y, const Conv2dParams& p,
              const Epilogue& e) override;
  void conv2d_backward_input(const TensorRef& grad_y, const TensorRef& w, const TensorRef& grad_x,
                             const Conv2dParams& p) override;
  void conv2d_backward_weight(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                              const Conv2dParams& p) override;

  // batch_norm.cpp
  void batch_norm_stats(const TensorRef& x, const TensorRef& mean, const TensorRef& var) override;
  void batch_norm_apply(const TensorRef& x, const TensorRef& mean, const TensorRef& invstd, const TensorRef& weight,
                        const TensorRef& bias, const TensorRef& y) override;
  void batch_norm_backward(const TensorRef& x, const TensorRef& grad, const TensorRef& mean, const TensorRef& invstd,
                           const TensorRef& weight, const TensorRef& grad_x, const TensorRef& grad_weight,
                           const TensorRef& grad_bias) override;

  // pool.cpp
  void max_pool2d(const TensorRef& x, const TensorRef& y, const TensorRef& indices,
                  const Pool2dParams& p) override;
  void max_pool2d_backward(const TensorRef& grad_y, const TensorRef& indices,
                           const TensorRef& grad_x, const Pool2dParams& p) override;
  void avg_pool2d(const TensorRef& x, const TensorRef& y, const Pool2dParams& p) override;
  void avg_pool2d_backward(const TensorRef& grad_y, const TensorRef& grad_x,
                           const Pool2dParams& p) override;

  // optim.cpp
  void sgd_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                std::span<const TensorRef> momentum_buffers, const SgdStep& h) override;
  void adam_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                 std::span<const TensorRef> exp_avgs, std::span<const TensorRef> exp_avg_sqs,
                 std::span<const TensorRef> max_exp_avg_sqs, const AdamStep& h) override;
  void adadelta_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                     std::span<const TensorRef> square_avgs, std::span<const TensorRef> acc_deltas,
                     const AdadeltaStep& h) override;
  void rmsprop_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                    std::span<const TensorRef> square_avgs,
                    std::span<const TensorRef> momentum_buffers,
                    std::span<const TensorRef> grad_avgs, const RmspropStep& h) override;
};

CpuBackend& backend();

// CpuBackend with bf16: every bf16 operand converted to f32 around the f32 kernel, results rounded
// back to bf16 once (widen.cpp). What backend_for(cpu) returns: kiln's reference for bf16, where a
// bf16 op means "compute in f32, round the result", as the GPUs' bf16 kernels do.
Backend& widening_backend();

// visit_dtype (core/dtype.h) for the kernels here, which compute in their operands' type: bf16
// never reaches them (widening_backend converts it first), and is refused should it.
template <class Fn>
decltype(auto) visit_arithmetic(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::i32: return fn(int32_t{});
    case DType::u8: return fn(uint8_t{});
    case DType::bf16: break;
  }
  KILN_FAIL(DTypeError, "cpu backend: a bf16 operand reached a kernel that computes in its operands' type "
            "(widening_backend converts bf16 to f32 first)");
}

}  // namespace kiln::cpu
