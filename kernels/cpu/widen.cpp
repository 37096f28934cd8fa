// bf16 on the CPU: every kernel of CpuBackend, with each bf16 operand converted to f32 around it.
//
// What a bf16 op means in kiln: convert the inputs to f32 (exact), compute in f32, round each
// result to bf16 once (core/bf16.h). The GPU kernels do the same in registers; here the CPU's f32
// kernels do it on widened copies, so one file gives the reference every bf16 kernel is tested
// against, and no kernel of the CPU backend needs a bf16 version of its own.
//
// A widened operand is the span of its buffer the view can reach, converted, with the view's own
// offset and strides: broadcasts (stride 0), transposed operands and outputs written through
// views keep their layout. Outputs are widened too (index_add and the optimizers add into them,
// fill and copy leave the rest of a view's span as it was) and rounded back after the kernel;
// inputs are never written back.
#include <algorithm>
#include <deque>
#include <vector>

#include "kiln/kernels/cpu/cpu_backend.h"

namespace kiln::cpu {

namespace {

// The operands of one kernel call, widened, and the outputs to round back.
class Widen {
 public:
  Widen() = default;
  Widen(const Widen&) = delete;
  Widen& operator=(const Widen&) = delete;

  TensorRef in(const TensorRef& r) { return widen(r, false); }
  TensorRef out(const TensorRef& r) { return widen(r, true); }
  Epilogue in(const Epilogue& e) { return Epilogue{in(e.bias), e.activation}; }
  std::span<const TensorRef> in(std::span<const TensorRef> rs) { return widen(rs, false); }
  std::span<const TensorRef> out(std::span<const TensorRef> rs) { return widen(rs, true); }

  // Rounds every widened output back into its bf16 buffer.
  void finish() {
    for (const Stored& s : outputs_) {
      bf16* dst = static_cast<bf16*>(s.target) + s.lo;
      for (size_t i = 0; i < s.wide->size(); ++i) dst[i] = bf16((*s.wide)[i]);
    }
  }

 private:
  struct Stored {
    void* target;  // the bf16 buffer
    int64_t lo;    // the span's first element in it
    const std::vector<float>* wide;
  };

  TensorRef widen(const TensorRef& r, bool output) {
    if (!r.defined() || r.dtype != DType::bf16) return r;
    // The elements the view reaches: offset plus each axis's extent, forwards or backwards.
    int64_t lo = r.offset, hi = r.offset;
    if (r.numel() > 0) {
      for (size_t d = 0; d < r.shape.size(); ++d) {
        const int64_t reach = (r.shape[d] - 1) * r.strides[d];
        (reach < 0 ? lo : hi) += reach;
      }
    }
    std::vector<float>& wide = buffers_.emplace_back(static_cast<size_t>(hi - lo + 1));
    const bf16* src = static_cast<const bf16*>(r.buffer) + lo;
    for (size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<float>(src[i]);
    if (output) outputs_.push_back({r.buffer, lo, &wide});
    TensorRef w = r;
    w.buffer = wide.data();
    w.offset = r.offset - lo;
    w.dtype = DType::f32;
    return w;
  }

  std::span<const TensorRef> widen(std::span<const TensorRef> rs, bool output) {
    std::vector<TensorRef>& list = lists_.emplace_back();
    for (const TensorRef& r : rs) list.push_back(widen(r, output));
    return list;
  }

  std::deque<std::vector<float>> buffers_;  // a deque: widened buffers never move
  std::deque<std::vector<TensorRef>> lists_;
  std::vector<Stored> outputs_;
};

class WideningBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  void* allocate(size_t bytes) override { return cpu_.allocate(bytes); }
  void deallocate(void* buffer) noexcept override { cpu_.deallocate(buffer); }
  void write(void* buffer, size_t byte_offset, const void* host, size_t bytes) override {
    cpu_.write(buffer, byte_offset, host, bytes);
  }
  void read(const void* buffer, size_t byte_offset, void* host, size_t bytes) override {
    cpu_.read(buffer, byte_offset, host, bytes);
  }
  void synchronize() override {}

  void fill(const TensorRef& out, double value) override {
    Widen w;
    cpu_.fill(w.out(out), value);
    w.finish();
  }
  void arange(const TensorRef& out, double start, double step) override {
    Widen w;
    cpu_.arange(w.out(out), start, step);
    w.finish();
  }
  void copy(const TensorRef& src, const TensorRef& out) override {
    Widen w;
    cpu_.copy(w.in(src), w.out(out));
    w.finish();
  }
  void uniform(const TensorRef& out, double low, double high, const philox::Key& key) override {
    Widen w;
    cpu_.uniform(w.out(out), low, high, key);
    w.finish();
  }
  void normal(const TensorRef& out, double mean, double stddev, const philox::Key& key) override {
    Widen w;
    cpu_.normal(w.out(out), mean, stddev, key);
    w.finish();
  }
  void dropout(const TensorRef& x, const TensorRef& out, double p, const philox::Key& key) override {
    Widen w;
    cpu_.dropout(w.in(x), w.out(out), p, key);
    w.finish();
  }
  void unary(UnaryOp op, const TensorRef& x, const TensorRef& out, double alpha) override {
    Widen w;
    cpu_.unary(op, w.in(x), w.out(out), alpha);
    w.finish();
  }
  void unary_backward(UnaryOp op, const TensorRef& x, const TensorRef& grad, const TensorRef& out,
                      double alpha) override {
    Widen w;
    cpu_.unary_backward(op, w.in(x), w.in(grad), w.out(out), alpha);
    w.finish();
  }
  void binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) override {
    Widen w;
    cpu_.binary(op, w.in(a), w.in(b), w.out(out));
    w.finish();
  }
  void reduce(ReduceOp op, const TensorRef& x, const TensorRef& out) override {
    Widen w;
    cpu_.reduce(op, w.in(x), w.out(out));
    w.finish();
  }
  void softmax(const TensorRef& x, const TensorRef& out, bool log) override {
    Widen w;
    cpu_.softmax(w.in(x), w.out(out), log);
    w.finish();
  }
  void gather(const TensorRef& x, const TensorRef& indices, const TensorRef& out) override {
    Widen w;
    cpu_.gather(w.in(x), indices, w.out(out));
    w.finish();
  }
  void index_add(const TensorRef& src, const TensorRef& indices, const TensorRef& out) override {
    Widen w;
    cpu_.index_add(w.in(src), indices, w.out(out));
    w.finish();
  }
  void cross_entropy(const TensorRef& logits, const TensorRef& targets, const TensorRef& losses,
                     double label_smoothing) override {
    Widen w;
    cpu_.cross_entropy(w.in(logits), targets, w.out(losses), label_smoothing);
    w.finish();
  }
  void cross_entropy_backward(const TensorRef& logits, const TensorRef& targets, const TensorRef& grad_losses,
                              const TensorRef& grad_logits, double label_smoothing) override {
    Widen w;
    cpu_.cross_entropy_backward(w.in(logits), targets, w.in(grad_losses), w.out(grad_logits), label_smoothing);
    w.finish();
  }
  void one_hot(const TensorRef& indices, const TensorRef& out) override {
    Widen w;
    cpu_.one_hot(indices, w.out(out));
    w.finish();
  }
  void matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out, const MatmulParams& p,
              const Epilogue& e) override {
    Widen w;
    cpu_.matmul(w.in(a), w.in(b), w.out(out), p, w.in(e));
    w.finish();
  }
  void conv2d(const TensorRef& x, const TensorRef& wt, const TensorRef& y, const Conv2dParams& p,
              const Epilogue& e) override {
    Widen w;
    cpu_.conv2d(w.in(x), w.in(wt), w.out(y), p, w.in(e));
    w.finish();
  }
  void conv2d_backward_input(const TensorRef& grad_y, const TensorRef& wt, const TensorRef& grad_x,
                             const Conv2dParams& p) override {
    Widen w;
    cpu_.conv2d_backward_input(w.in(grad_y), w.in(wt), w.out(grad_x), p);
    w.finish();
  }
  void conv2d_backward_weight(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                              const Conv2dParams& p) override {
    Widen w;
    cpu_.conv2d_backward_weight(w.in(x), w.in(grad_y), w.out(grad_w), p);
    w.finish();
  }
  void max_pool2d(const TensorRef& x, const TensorRef& y, const TensorRef& indices, const Pool2dParams& p) override {
    Widen w;
    cpu_.max_pool2d(w.in(x), w.out(y), indices, p);
    w.finish();
  }
  void max_pool2d_backward(const TensorRef& grad_y, const TensorRef& indices, const TensorRef& grad_x,
                           const Pool2dParams& p) override {
    Widen w;
    cpu_.max_pool2d_backward(w.in(grad_y), indices, w.out(grad_x), p);
    w.finish();
  }
  void avg_pool2d(const TensorRef& x, const TensorRef& y, const Pool2dParams& p) override {
    Widen w;
    cpu_.avg_pool2d(w.in(x), w.out(y), p);
    w.finish();
  }
  void avg_pool2d_backward(const TensorRef& grad_y, const TensorRef& grad_x, const Pool2dParams& p) override {
    Widen w;
    cpu_.avg_pool2d_backward(w.in(grad_y), w.out(grad_x), p);
    w.finish();
  }
  void batch_norm_stats(const TensorRef& x, const TensorRef& mean, const TensorRef& var) override {
    Widen w;
    cpu_.batch_norm_stats(w.in(x), w.out(mean), w.out(var));
    w.finish();
  }
  void batch_norm_apply(const TensorRef& x, const TensorRef& mean, const TensorRef& invstd, const TensorRef& weight,
                        const TensorRef& bias, const TensorRef& y) override {
    Widen w;
    cpu_.batch_norm_apply(w.in(x), w.in(mean), w.in(invstd), w.in(weight), w.in(bias), w.out(y));
    w.finish();
  }
  void batch_norm_backward(const TensorRef& x, const TensorRef& grad, const TensorRef& mean, const TensorRef& invstd,
                           const TensorRef& weight, const TensorRef& grad_x, const TensorRef& grad_weight,
                           const TensorRef& grad_bias) override {
    Widen w;
    cpu_.batch_norm_backward(w.in(x), w.in(grad), w.in(mean), w.in(invstd), w.in(weight), w.out(grad_x),
                             w.out(grad_weight), w.out(grad_bias));
    w.finish();
  }
  void sgd_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                std::span<const TensorRef> momentum_buffers, const SgdStep& h) override {
    Widen w;
    cpu_.sgd_step(w.out(params), w.in(grads), w.out(momentum_buffers), h);
    w.finish();
  }
  void adam_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                 std::span<const TensorRef> exp_avgs, std::span<const TensorRef> exp_avg_sqs,
                 std::span<const TensorRef> max_exp_avg_sqs, const AdamStep& h) override {
    Widen w;
    cpu_.adam_step(w.out(params), w.in(grads), w.out(exp_avgs), w.out(exp_avg_sqs), w.out(max_exp_avg_sqs), h);
    w.finish();
  }
  void adadelta_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                     std::span<const TensorRef> square_avgs, std::span<const TensorRef> acc_deltas,
                     const AdadeltaStep& h) override {
    Widen w;
    cpu_.adadelta_step(w.out(params), w.in(grads), w.out(square_avgs), w.out(acc_deltas), h);
    w.finish();
  }
  void rmsprop_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                    std::span<const TensorRef> square_avgs, std::span<const TensorRef> momentum_buffers,
                    std::span<const TensorRef> grad_avgs, const RmspropStep& h) override {
    Widen w;
    cpu_.rmsprop_step(w.out(params), w.in(grads), w.out(square_avgs), w.out(momentum_buffers), w.out(grad_avgs), h);
    w.finish();
  }

 private:
  CpuBackend& cpu_ = backend();
};

}  // namespace

Backend& widening_backend() {
  static WideningBackend instance;
  return instance;
}

}  // namespace kiln::cpu
