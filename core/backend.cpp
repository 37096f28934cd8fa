#include "kiln/core/backend.h"

#include <cstddef>
#include <memory>
#include <vector>

#include "kiln/core/error.h"

namespace kiln {

bool TensorRef::is_contiguous() const {
  if (numel() == 0) return true;  // no element to be out of place (and [3, 0]'s strides are [1, 1])
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

namespace {
// A read that finished before it was returned: Backend::read_async's default.
class FinishedRead final : public PendingRead {
 public:
  explicit FinishedRead(size_t bytes) : bytes_(bytes) {}
  bool ready() override { return true; }
  const void* wait() override { return bytes_.data(); }
  std::byte* data() { return bytes_.data(); }

 private:
  std::vector<std::byte> bytes_;
};
}  // namespace

std::unique_ptr<PendingRead> Backend::read_async(const void* buffer, size_t byte_offset, size_t bytes) {
  auto read_now = std::make_unique<FinishedRead>(bytes);
  read(buffer, byte_offset, read_now->data(), bytes);
  return read_now;
}

void Backend::copy_many(std::span<const TensorRef> src, std::span<const TensorRef> out) {
  KILN_CHECK(src.size() == out.size(), ValueError, "copy_many: ", src.size(), " sources for ", out.size(),
             " outputs");
  for (size_t i = 0; i < src.size(); ++i) copy(src[i], out[i]);
}

void Backend::ring_push(const TensorRef& src, const TensorRef& ring, const TensorRef& next) {
  int32_t row = 0;
  read(next.buffer, static_cast<size_t>(next.offset) * sizeof row, &row, sizeof row);
  TensorRef out = ring;
  out.offset += row * src.numel();
  out.shape = src.shape;
  out.strides = contiguous_strides(src.shape);
  copy(src, out);
  row = static_cast<int32_t>((row + 1) % ring.shape[0]);
  write(next.buffer, static_cast<size_t>(next.offset) * sizeof row, &row, sizeof row);
}

void Backend::gather_many(std::span<const TensorRef> xs, const TensorRef& indices, std::span<const TensorRef> outs) {
  KILN_CHECK(xs.size() == outs.size(), ValueError, "gather_many: ", xs.size(), " sources for ", outs.size(),
             " outputs");
  for (size_t i = 0; i < xs.size(); ++i) gather(xs[i], indices, outs[i]);
}

void Backend::gather_many_indirect(std::span<const TensorRef>, const int32_t* const*, int64_t,
                                   std::span<const TensorRef>) {
  KILN_FAIL(BackendUnavailable, "the ", name(), " backend does not gather from indices whose address the device "
            "holds (gather_many_indirect): only a backend that captures graphs does (CUDA)");
}

void Backend::batch_norm_train(const TensorRef& x, const TensorRef& weight, const TensorRef& bias, double eps,
                               const TensorRef& y, const TensorRef& mean, const TensorRef& var,
                               const TensorRef& invstd) {
  batch_norm_stats(x, mean, var);
  unary(UnaryOp::add_scalar, var, invstd, eps);
  unary(UnaryOp::pow, invstd, invstd, -0.5);
  batch_norm_apply(x, mean, invstd, weight, bias, y);
}

void Backend::conv2d_backward_input_relu(const TensorRef& grad_y, const TensorRef& w, const TensorRef& relu_x,
                                         const TensorRef& grad_x, const Conv2dParams& p) {
  conv2d_backward_input(grad_y, w, grad_x, p);
  unary_backward(UnaryOp::relu, relu_x, grad_x, grad_x, 0.0);
}

void Backend::max_pool2d_backward_relu(const TensorRef& grad_y, const TensorRef& indices, const TensorRef& relu_y,
                                       const TensorRef& grad_x, const Pool2dParams& p) {
  const Scratch buffer(*this, static_cast<size_t>(grad_y.numel()) * dtype_size(grad_y.dtype));
  const TensorRef masked = buffer.ref(grad_y.shape, grad_y.dtype);
  unary_backward(UnaryOp::relu, relu_y, grad_y, masked, 0.0);
  max_pool2d_backward(masked, indices, grad_x, p);
}

void Backend::max_pool2d_dropout_backward(const TensorRef&, const TensorRef&, const TensorRef&, const Pool2dParams&,
                                          double, bool) {
  KILN_FAIL(BackendUnavailable, "the ", name(),
            " backend has no max_pool2d_dropout_backward: it reads the codes of a max_pool2d_dropout it did not write");
}

void Backend::cross_entropy_reduced_counting(const TensorRef& logits, const TensorRef& targets, const TensorRef& out,
                                             double label_smoothing, bool mean, const TensorRef& count) {
  cross_entropy_reduced(logits, targets, out, label_smoothing, mean);
  count_correct(logits, targets, count);
}

void Backend::cross_entropy_reduced(const TensorRef& logits, const TensorRef& targets, const TensorRef& out,
                                    double label_smoothing, bool mean) {
  const int64_t n = logits.shape[0];
  const Scratch buffer(*this, static_cast<size_t>(n) * dtype_size(out.dtype));
  cross_entropy(logits, targets, buffer.ref({n}, out.dtype), label_smoothing);
  TensorRef in = buffer.ref({1, n, 1}, out.dtype), sum = out;  // reduce's [outer, n, inner] -> [outer, inner]
  sum.shape = {1, 1};
  sum.strides = {1, 1};
  reduce(mean ? ReduceOp::mean : ReduceOp::sum, in, sum);
}

void Backend::cross_entropy_reduced_backward(const TensorRef& logits, const TensorRef& targets,
                                             const TensorRef& grad, const TensorRef& grad_logits,
                                             double label_smoothing, bool mean) {
  const int64_t n = logits.shape[0];
  const Scratch buffer(*this, static_cast<size_t>(n) * dtype_size(grad.dtype));
  TensorRef each = grad;  // the one gradient broadcast to every row
  each.shape = {n};
  each.strides = {0};
  const TensorRef grad_losses = buffer.ref({n}, grad.dtype);
  unary(UnaryOp::mul_scalar, each, grad_losses, mean ? 1.0 / static_cast<double>(n) : 1.0);
  cross_entropy_backward(logits, targets, grad_losses, grad_logits, label_smoothing);
}

void Backend::dropout_relu(const TensorRef& grad, const TensorRef& relu_x, const TensorRef& out, double p,
                           const philox::Key& key) {
  dropout(grad, out, p, key);
  unary_backward(UnaryOp::relu, relu_x, out, out, 0.0);
}

void Backend::count_correct(const TensorRef& logits, const TensorRef& targets, const TensorRef& count) {
  const int64_t n = logits.shape[0];
  const Scratch predicted_buffer(*this, static_cast<size_t>(n) * sizeof(int32_t)),
      hits_buffer(*this, static_cast<size_t>(n) * sizeof(int32_t)), sum_buffer(*this, sizeof(int32_t));
  TensorRef rows = logits, predicted = predicted_buffer.ref({1, n}, DType::i32);
  rows.shape = {n, logits.shape[1], 1};  // reduce's [outer, n, inner] -> [outer, inner]
  rows.strides = contiguous_strides(rows.shape);
  reduce(ReduceOp::argmax, rows, predicted);
  TensorRef hits = hits_buffer.ref({1, n, 1}, DType::i32), sum = sum_buffer.ref({1, 1}, DType::i32);
  binary(BinaryOp::eq, predicted_buffer.ref({n}, DType::i32), targets, hits_buffer.ref({n}, DType::i32));
  reduce(ReduceOp::sum, hits, sum);
  binary(BinaryOp::add, count, sum_buffer.ref({}, DType::i32), count);
}

void Backend::begin_capture() {
  KILN_FAIL(BackendUnavailable, "the ", name(), " backend cannot capture a graph (CUDA graphs need a CUDA device)");
}

std::unique_ptr<Graph::Impl> Backend::end_capture(bool) {
  KILN_FAIL(BackendUnavailable, "the ", name(), " backend cannot capture a graph");
}

namespace {

void check_step_list(std::string_view backend, std::string_view kernel, std::string_view what,
                     std::span<const TensorRef> list, std::span<const TensorRef> params, bool optional) {
  if (optional && list.empty()) return;
  KILN_CHECK(list.size() == params.size(), ValueError, backend, " ", kernel, ": ", params.size(), " params but ",
             list.size(), " ", what);
  for (size_t i = 0; i < list.size(); ++i) {
    const TensorRef& t = list[i];
    KILN_CHECK(t.dtype == params[0].dtype, DTypeError, backend, " ", kernel, ": ", what, "[", i, "] is ", t.dtype,
               " but params[0] is ", params[0].dtype, "; one call takes one dtype");
    KILN_CHECK(t.numel() == params[i].numel(), ShapeError, backend, " ", kernel, ": ", what, "[", i,
               "] has shape ", t.shape, " but params[", i, "] has shape ", params[i].shape);
    KILN_CHECK(t.is_contiguous(), ValueError, backend, " ", kernel, ": ", what, "[", i,
               "] is not contiguous; the step kernels take contiguous tensors");
  }
}

void check_step_params(std::string_view backend, std::string_view kernel, std::span<const TensorRef> params,
                       std::span<const TensorRef> grads) {
  if (params.empty()) return;
  KILN_CHECK(is_floating(params[0].dtype), DTypeError, backend, " ", kernel, ": parameters must be f32 or f64, got ",
             params[0].dtype);
  check_step_list(backend, kernel, "params", params, params, false);
  check_step_list(backend, kernel, "grads", grads, params, false);
}

}  // namespace

void check_sgd_step(std::string_view backend, std::span<const TensorRef> params, std::span<const TensorRef> grads,
                    std::span<const TensorRef> momentum_buffers, const SgdStep& h) {
  check_step_params(backend, "sgd_step", params, grads);
  check_step_list(backend, "sgd_step", "momentum_buffers", momentum_buffers, params, h.momentum == 0.0);
}

void check_adam_step(std::string_view backend, std::span<const TensorRef> params, std::span<const TensorRef> grads,
                     std::span<const TensorRef> exp_avgs, std::span<const TensorRef> exp_avg_sqs,
                     std::span<const TensorRef> max_exp_avg_sqs, const AdamStep& h) {
  check_step_params(backend, "adam_step", params, grads);
  check_step_list(backend, "adam_step", "exp_avgs", exp_avgs, params, false);
  check_step_list(backend, "adam_step", "exp_avg_sqs", exp_avg_sqs, params, false);
  check_step_list(backend, "adam_step", "max_exp_avg_sqs", max_exp_avg_sqs, params, !h.amsgrad);
  KILN_CHECK(h.bias_correction1 > 0.0 && h.bias_correction2 > 0.0, ValueError, backend,
             " adam_step: bias corrections must be positive (1 - beta^t for a step t >= 1), got ", h.bias_correction1,
             " and ", h.bias_correction2);
}

void check_adadelta_step(std::string_view backend, std::span<const TensorRef> params,
                         std::span<const TensorRef> grads, std::span<const TensorRef> square_avgs,
                         std::span<const TensorRef> acc_deltas) {
  check_step_params(backend, "adadelta_step", params, grads);
  check_step_list(backend, "adadelta_step", "square_avgs", square_avgs, params, false);
  check_step_list(backend, "adadelta_step", "acc_deltas", acc_deltas, params, false);
}

void check_rmsprop_step(std::string_view backend, std::span<const TensorRef> params,
                        std::span<const TensorRef> grads, std::span<const TensorRef> square_avgs,
                        std::span<const TensorRef> momentum_buffers, std::span<const TensorRef> grad_avgs,
                        const RmspropStep& h) {
  check_step_params(backend, "rmsprop_step", params, grads);
  check_step_list(backend, "rmsprop_step", "square_avgs", square_avgs, params, false);
  check_step_list(backend, "rmsprop_step", "momentum_buffers", momentum_buffers, params, h.momentum <= 0.0);
  check_step_list(backend, "rmsprop_step", "grad_avgs", grad_avgs, params, !h.centered);
}

std::string_view unary_op_name(UnaryOp op) {
  switch (op) {
    case UnaryOp::neg: return "neg";
    case UnaryOp::exp: return "exp";
    case UnaryOp::log: return "log";
    case UnaryOp::sqrt: return "sqrt";
    case UnaryOp::abs: return "abs";
    case UnaryOp::sign: return "sign";
    case UnaryOp::relu: return "relu";
    case UnaryOp::leaky_relu: return "leaky_relu";
    case UnaryOp::gelu: return "gelu";
    case UnaryOp::tanh: return "tanh";
    case UnaryOp::sigmoid: return "sigmoid";
    case UnaryOp::pow: return "pow";
    case UnaryOp::add_scalar: return "add";
    case UnaryOp::mul_scalar: return "mul";
    case UnaryOp::isfinite: return "isfinite";
  }
  return "?";
}

std::string_view binary_op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
    case BinaryOp::pow: return "pow";
    case BinaryOp::maximum: return "maximum";
    case BinaryOp::minimum: return "minimum";
    case BinaryOp::eq: return "eq";
    case BinaryOp::ne: return "ne";
    case BinaryOp::gt: return "gt";
    case BinaryOp::ge: return "ge";
    case BinaryOp::lt: return "lt";
    case BinaryOp::le: return "le";
  }
  return "?";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::mean: return "mean";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::argmax: return "argmax";
    case ReduceOp::argmin: return "argmin";
  }
  return "?";
}

}  // namespace kiln
