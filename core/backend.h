// The backend interface: what CPU, CUDA and Vulkan each implement, and nothing more.
//
// A backend runs kernels on raw buffers it allocated. It owns nothing beyond those buffers and
// knows nothing of autograd: the functional ops (autograd/ops.h) check shapes and dtypes, allocate the
// outputs and call exactly one of these methods per kernel. Every backend implements the same
// list; a kernel a backend lacks throws BackendUnavailable naming the backend and the op.
//
// Conventions for every kernel:
// - A TensorRef describes a tensor: buffer, offset and strides in elements, shape and dtype.
// - Inputs are contiguous unless the method says it takes strides; outputs are contiguous
//   (but those of fill and copy, which write through views) and already allocated with the
//   right shape and dtype.
// - Floating-point kernels take f32 and f64. On the CPU, reductions, softmax and losses of f32
//   accumulate in double; matmul and conv accumulate in the working type, as BLAS does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>

#include "kiln/core/capture.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/philox_key.h"
#include "kiln/core/shape.h"

namespace kiln {

struct TensorRef {
  void* buffer = nullptr;  // the backend's buffer handle (a plain pointer on CPU and CUDA)
  int64_t offset = 0;      // where the first element sits in the buffer, in elements
  Shape shape;
  Strides strides;         // in elements; 0 along broadcast dimensions
  DType dtype = DType::f32;

  bool defined() const { return buffer != nullptr; }
  int64_t numel() const { return shape.numel(); }
  bool is_contiguous() const;
  template <class T> T* data() const { return static_cast<T*>(buffer) + offset; }
  // The first element's address, for backends whose buffers are plain pointers (CPU, CUDA).
  void* address() const { return static_cast<char*>(buffer) + offset * static_cast<int64_t>(dtype_size(dtype)); }
};

enum class UnaryOp : uint8_t {
  neg, exp, log, sqrt, abs, sign,
  relu, leaky_relu,  // leaky_relu: x if x > 0 else alpha*x
  gelu,              // exact: x * Phi(x), Phi the standard normal CDF (PyTorch's default)
  tanh, sigmoid,
  pow,               // x ** alpha
  add_scalar,        // x + alpha
  mul_scalar,        // x * alpha
  isfinite,          // 1 where x is finite, 0 where NaN or +-inf, in x's dtype (i32: all ones)
};

enum class BinaryOp : uint8_t {
  add, sub, mul, div, pow, maximum, minimum,
  eq, ne, gt, ge, lt, le,  // 1 where true, 0 where false, in the inputs' dtype
};

enum class ReduceOp : uint8_t { sum, mean, max, min, argmax, argmin };

// What matmul and conv2d apply to each output element before storing it, so that a layer's bias
// and activation cost no pass of their own: y = activation(acc + bias), the bias indexed by the
// output's column (matmul: j of C[b][i][j], a Linear layer's output feature) or by the output
// channel (conv2d). relu(v) = v < 0 ? 0 : v, a NaN passing, as UnaryOp::relu; its gradient can be
// read from the output alone (relu_backward(y, g) == relu_backward(x, g)).
enum class Activation : uint8_t { none, relu };

struct Epilogue {
  TensorRef bias;  // matmul: [n]; conv2d: [O]; undefined: no bias. The output's dtype.
  Activation activation = Activation::none;
};

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

struct Pool2dParams {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // avg_pool2d: divide by the full window, padding included
};

// C[b] = op(A[b]) * op(B[b]) for b in [0, batch). C is contiguous [batch, m, n].
// op(A) is m x k: A is row-major m x k with row stride lda, or, when trans_a, row-major
// k x m with row stride lda (so op(A) = A^T). Likewise op(B) is k x n. A batch stride of
// 0 uses the same matrix for every batch entry (broadcasting).
struct MatmulParams {
  int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0;
  int64_t batch_stride_a = 0, batch_stride_b = 0;
};

// ---- optimizer steps: the hyperparameters of Backend::sgd_step, adam_step, adadelta_step and
// rmsprop_step ----
// One call updates a whole list of parameters in place, so that a GPU backend can do it in one
// multi-tensor launch. In a captured step (core/capture.h) the values change from replay to
// replay (the learning rate, the bias corrections): the optimizer then sets `next`, which gives
// the values of each later replay's step, and the backend's kernel reads them from a replay value. The formulas are PyTorch's (torch.optim.SGD, Adam, AdamW, Adadelta,
// RMSprop with maximize=False; their foreach and single-tensor forms compute the same values).
// Per element, with p the parameter, g its gradient and the state named as in PyTorch.

// SGD:
//   g = g + weight_decay * p                          (when weight_decay != 0)
//   when momentum != 0:
//     buf = g                                         (first step: init_buffers)
//     buf = momentum * buf + (1 - dampening) * g      (later steps)
//     g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool init_buffers = false;  // the buffers are new: they take g itself, undamped, as PyTorch does
  std::function<SgdStep()> next;  // in a captured step: the values of each later replay's step
};

// Adam (decoupled_weight_decay = false) and AdamW (true), at step t (counted from 1):
//   Adam:  g = g + weight_decay * p                   (L2 penalty folded into the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)            (the weights decay directly)
//   m = beta1 * m + (1 - beta1) * g                   (exp_avg)
//   v = beta2 * v + (1 - beta2) * g^2                 (exp_avg_sq)
//   amsgrad: v_max = max(v_max, v), and v_max stands for v below (max_exp_avg_sq)
//   p = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
// with the bias corrections bc1 = 1 - beta1^t and bc2 = 1 - beta2^t computed by the caller
// (parameters at different steps go to different calls). As PyTorch's code (not its docs):
// amsgrad keeps the maximum of the uncorrected v.
struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled_weight_decay = false;
  bool amsgrad = false;
  double bias_correction1 = 1, bias_correction2 = 1;
  std::function<AdamStep()> next;  // in a captured step: the values of each later replay's step
};

// Adadelta:
//   g = g + weight_decay * p
//   v = rho * v + (1 - rho) * g^2                     (square_avg)
//   delta = sqrt(u + eps) / sqrt(v + eps) * g         (u: acc_delta)
//   u = rho * u + (1 - rho) * delta^2
//   p = p - lr * delta
struct AdadeltaStep {
  double lr = 0, rho = 0, eps = 0, weight_decay = 0;
  std::function<AdadeltaStep()> next;  // in a captured step: the values of each later replay's step
};

// RMSprop:
//   g = g + weight_decay * p
//   v = alpha * v + (1 - alpha) * g^2                 (square_avg)
//   centered: g_avg = alpha * g_avg + (1 - alpha) * g, and avg = sqrt(v - g_avg^2) + eps
//   else:     avg = sqrt(v) + eps
//   momentum > 0: buf = momentum * buf + g / avg, p = p - lr * buf   (momentum_buffer)
//   else:         p = p - lr * g / avg
struct RmspropStep {
  double lr = 0, alpha = 0, eps = 0, weight_decay = 0, momentum = 0;
  bool centered = false;
  std::function<RmspropStep()> next;  // in a captured step: the values of each later replay's step
};

// A copy from the device to the host queued behind the work before it (Backend::read_async): the
// host goes on, and wait() blocks until the bytes have landed. How a training loop reads its
// losses without draining the device each time.
class PendingRead {
 public:
  virtual ~PendingRead() = default;
  virtual bool ready() = 0;  // the bytes have landed: wait() will not block
  // Blocks until they have, then returns them. A fault found on the device (an index out of
  // range) throws here, as read() throws it.
  virtual const void* wait() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;  // "cpu", "cuda", "vulkan"

  // ---- memory ----
  // Throws OutOfMemory naming the request and, where the device reports them, free and total bytes.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* buffer) noexcept = 0;
  virtual void write(void* buffer, size_t byte_offset, const void* host, size_t bytes) = 0;
  virtual void read(const void* buffer, size_t byte_offset, void* host, size_t bytes) = 0;
  virtual void synchronize() = 0;  // waits for every kernel queued so far
  // Queues a copy of `bytes` bytes to host memory the returned read owns. By default a blocking
  // read() (a backend whose reads do not drain it keeps that); CUDA copies into pinned memory
  // behind an event.
  virtual std::unique_ptr<PendingRead> read_async(const void* buffer, size_t byte_offset, size_t bytes);

  // ---- capture (core/capture.h) ----
  // Opens a capture of the work queued from now on; a backend that cannot capture (all but CUDA)
  // throws BackendUnavailable saying so. end_capture closes it and returns the graph, or, when
  // `keep` is false (the work threw), discards what was recorded and returns null.
  virtual void begin_capture();
  virtual std::unique_ptr<Graph::Impl> end_capture(bool keep);
  virtual Capture* capture() { return nullptr; }  // the capture open now, or null
  virtual bool can_capture() const { return false; }

  // ---- creation and copies ----
  virtual void fill(const TensorRef& out, double value) = 0;  // out may be strided (a view)
  virtual void arange(const TensorRef& out, double start, double step) = 0;
  // out[i] = src[i] with any strides on both sides and conversion between dtypes
  // (floating to integer truncates toward zero to 64 bits, then wraps to the target's width:
  // -4.0 -> u8 252, as in PyTorch).
  virtual void copy(const TensorRef& src, const TensorRef& out) = 0;
  // copy(src[i], out[i]) for each i, in order. By default one call each; a backend may take a list
  // of contiguous pairs in one launch (CUDA), which is how autocast casts a model's parameters.
  virtual void copy_many(std::span<const TensorRef> src, std::span<const TensorRef> out);
  // Appends src (contiguous) to a ring: row `next` of `ring` (contiguous [slots, n], n =
  // src.numel(), src's dtype) takes src's elements, and next (one i32) moves on to the row after,
  // 0 after the last. next is read and moved on by the device, so that the replays of a captured
  // step append in turn (optim::CapturedStep::keep). By default next is read back (which drains
  // the device), the row copied and next written; CUDA does it in one kernel.
  virtual void ring_push(const TensorRef& src, const TensorRef& ring, const TensorRef& next);
  // Philox4x32-10 draws starting at `key` (its seed and offset, read from device memory at replay
  // in a captured step); see core/philox.h for the exact stream.
  virtual void uniform(const TensorRef& out, double low, double high, const philox::Key& key) = 0;
  virtual void normal(const TensorRef& out, double mean, double stddev, const philox::Key& key) = 0;
  // Dropout in one pass: out[i] = x[i] * (u_i > p ? 1 / (1 - p) : 0), u_i element i of the draw
  // uniform(0, 1) would make at `key`, compared in x's dtype; the scale too is x's dtype. With the
  // same key it is also dropout's backward (the gradient takes the same mask).
  // x and out contiguous, f32 or f64; 0 < p < 1.
  virtual void dropout(const TensorRef& x, const TensorRef& out, double p, const philox::Key& key) = 0;
  // dropout's backward where the dropped tensor is the output of a relu (relu_x, contiguous), taken
  // back through that relu too: out = 0 where relu_x <= 0, else dropout(grad) (NaN in relu_x
  // passing, as unary_backward(relu)). By default those two passes; CUDA masks in the dropout kernel.
  virtual void dropout_relu(const TensorRef& grad, const TensorRef& relu_x, const TensorRef& out, double p,
                            const philox::Key& key);

  // ---- elementwise (inputs take strides, so broadcasts and views need no copy) ----
  virtual void unary(UnaryOp op, const TensorRef& x, const TensorRef& out, double alpha) = 0;
  // out = grad * f'(x) for the activations whose derivative is not a short composition of
  // other ops: relu, leaky_relu (alpha) and gelu. grad and x take strides.
  virtual void unary_backward(UnaryOp op, const TensorRef& x, const TensorRef& grad,
                              const TensorRef& out, double alpha) = 0;
  // a and b are already broadcast to out's shape (stride 0 where they repeat).
  virtual void binary(BinaryOp op, const TensorRef& a, const TensorRef& b, const TensorRef& out) = 0;

  // ---- reductions: x is contiguous [outer, n, inner], out is [outer, inner] ----
  // argmax/argmin write i32 indices in [0, n) (the first one on ties); the others write x's dtype,
  // but for sum and mean, which also go from bf16 to f32 and from f32 to bf16: the stages of a
  // bf16 sum over several axes keep their partial results in f32 (backends without bf16 never
  // see those).
  virtual void reduce(ReduceOp op, const TensorRef& x, const TensorRef& out) = 0;
  // softmax over the middle axis of contiguous [outer, n, inner]; log_softmax when `log`.
  virtual void softmax(const TensorRef& x, const TensorRef& out, bool log) = 0;

  // ---- indexing: x contiguous [outer, n, inner], indices i32 [m] with values in [0, n) ----
  // out [outer, m, inner]: out[o, j, i] = x[o, indices[j], i]. How a batch is gathered from a
  // data set held on the device, and an embedding's lookup.
  virtual void gather(const TensorRef& x, const TensorRef& indices, const TensorRef& out) = 0;
  // gather(xs[k], indices, outs[k]) for every k, with the same indices (a batch's images and labels
  // from their data sets): the default gathers each in turn; CUDA's takes one launch.
  virtual void gather_many(std::span<const TensorRef> xs, const TensorRef& indices, std::span<const TensorRef> outs);
  // gather_many with the indices' address in device memory: `*indices` (read when the work runs)
  // points at the m indices. How a captured step gathers its own batch, whose place in the loader's
  // order changes at every replay (a replay value, core/capture.h: DataLoader::batch_at). Only a
  // backend that captures takes it (CUDA); by default BackendUnavailable.
  virtual void gather_many_indirect(std::span<const TensorRef> xs, const int32_t* const* indices, int64_t m,
                                    std::span<const TensorRef> outs);
  // The reverse, accumulating: out[o, indices[j], i] += src[o, j, i], out [outer, n, inner]
  // already holding what to add to. Repeated indices add up.
  virtual void index_add(const TensorRef& src, const TensorRef& indices, const TensorRef& out) = 0;

  // ---- losses ----
  // logits [N, C], targets i32 [N] in [0, C), losses [N]:
  //   losses[i] = (1 - s) * -log p[i, t_i] + s * mean_c(-log p[i, c]),  p = softmax(logits[i])
  // bf16 logits (on the backends that store bf16) are read as they are and the losses are f32, the
  // same values as from the logits converted to f32 first; otherwise the losses are the logits' dtype.
  virtual void cross_entropy(const TensorRef& logits, const TensorRef& targets,
                             const TensorRef& losses, double label_smoothing) = 0;
  // grad_logits[i, c] = grad_losses[i] * (p[i, c] - (1 - s) * [c == t_i] - s / C), grad_losses
  // of the losses' dtype, grad_logits of the logits' (bf16: computed in f32, rounded once).
  virtual void cross_entropy_backward(const TensorRef& logits, const TensorRef& targets,
                                      const TensorRef& grad_losses, const TensorRef& grad_logits,
                                      double label_smoothing) = 0;
  // The losses' mean (or sum) in one call: out [] of the losses' dtype. By default cross_entropy
  // into a buffer, then a reduce; CUDA sums a small batch's losses in the kernel that makes them,
  // one launch where a training step's loss took three.
  virtual void cross_entropy_reduced(const TensorRef& logits, const TensorRef& targets, const TensorRef& out,
                                     double label_smoothing, bool mean);
  // Its gradient: cross_entropy_backward with every row's loss given grad [] (divided by N for a
  // mean). By default that gradient is written out per row first; CUDA reads the one value.
  virtual void cross_entropy_reduced_backward(const TensorRef& logits, const TensorRef& targets,
                                              const TensorRef& grad, const TensorRef& grad_logits,
                                              double label_smoothing, bool mean);
  // count (i32 [], accumulating) += the rows i of logits [N, C] whose argmax (the first maximum;
  // a NaN counts as the maximum) is targets[i] (i32 [N]; one outside [0, C) matches no row): a
  // classifier's correct predictions. By default argmax, eq, sum and an add, four passes with
  // their buffers; CUDA counts in one kernel.
  virtual void count_correct(const TensorRef& logits, const TensorRef& targets, const TensorRef& count);
  // cross_entropy_reduced and count_correct on the same logits and targets: by default the two
  // calls; CUDA counts in the loss's kernel where that takes the batch, one launch where a
  // training step's loss and its correct predictions took two.
  virtual void cross_entropy_reduced_counting(const TensorRef& logits, const TensorRef& targets, const TensorRef& out,
                                              double label_smoothing, bool mean, const TensorRef& count);
  // indices i32 [N] in [0, C) -> out [N, C] of out's dtype, 1 at the index and 0 elsewhere.
  virtual void one_hot(const TensorRef& indices, const TensorRef& out) = 0;

  // ---- matmul: out = epilogue(op(a) * op(b)) ----
  virtual void matmul(const TensorRef& a, const TensorRef& b, const TensorRef& out,
                      const MatmulParams& p, const Epilogue& e) = 0;

  // ---- convolution: x [N, C, H, W], w [O, C/groups, KH, KW], y [N, O, OH, OW] ----
  // The forward applies the epilogue (bias [O], activation).
  virtual void conv2d(const TensorRef& x, const TensorRef& w, const TensorRef& y,
                      const Conv2dParams& p, const Epilogue& e) = 0;
  virtual void conv2d_backward_input(const TensorRef& grad_y, const TensorRef& w,
                                     const TensorRef& grad_x, const Conv2dParams& p) = 0;
  // The same, where x is the output of a relu (relu_x: x itself, contiguous), taken back through
  // it: grad_x is 0 wherever relu_x <= 0, as unary_backward(relu, relu_x, grad_x) would make it.
  // By default those two passes; a backend may zero grad_x in the kernel that writes it (CUDA).
  virtual void conv2d_backward_input_relu(const TensorRef& grad_y, const TensorRef& w, const TensorRef& relu_x,
                                          const TensorRef& grad_x, const Conv2dParams& p);
  // Whether conv2d_backward_input_relu zeroes grad_x in the kernel that writes it for these
  // operands (relu_x has grad_x's shape and dtype), rather than in a pass of its own. Where it does
  // not, autograd leaves relu's gradient to the node that made relu_x, whose own kernels may take
  // it (conv2d_backward_weight_and_bias's relu_y). By default no.
  virtual bool conv2d_backward_input_relu_fused(const TensorRef& grad_y, const TensorRef& w, const TensorRef& relu_x,
                                                const Conv2dParams& p) const {
    (void)grad_y, (void)w, (void)relu_x, (void)p;
    return false;
  }
  virtual void conv2d_backward_weight(const TensorRef& x, const TensorRef& grad_y,
                                      const TensorRef& grad_w, const Conv2dParams& p) = 0;
  // The weight's gradient and the bias's, grad_b [O] = grad_y summed over images and pixels, from
  // one pass over grad_y, where the backend has a kernel that does both for this geometry (CUDA:
  // a first layer's). Where relu_y is defined (grad_y's shape and dtype, both contiguous), grad_y is
  // first taken back through the relu whose output is relu_y, as unary_backward(relu, relu_y,
  // grad_y) would (0 where relu_y <= 0). Returns false, having written nothing, where it has no
  // such kernel: the caller then masks and sums grad_y itself. By default none.
  virtual bool conv2d_backward_weight_and_bias(const TensorRef& x, const TensorRef& grad_y, const TensorRef& grad_w,
                                               const TensorRef& grad_b, const Conv2dParams& p,
                                               const TensorRef& relu_y) {
    (void)x, (void)grad_y, (void)grad_w, (void)grad_b, (void)p, (void)relu_y;
    return false;
  }

  // ---- pooling: x [N, C, H, W], y [N, C, OH, OW] ----
  // indices i32, same shape as y: the argmax's position h * W + w in its input plane.
  virtual void max_pool2d(const TensorRef& x, const TensorRef& y, const TensorRef& indices,
                          const Pool2dParams& p) = 0;
  virtual void max_pool2d_backward(const TensorRef& grad_y, const TensorRef& indices,
                                   const TensorRef& grad_x, const Pool2dParams& p) = 0;
  // The same, where x is the output of a relu, taken back through it: relu_y is the pool's output
  // (contiguous), which holds x's value at each window's maximum, so grad_y is zeroed wherever
  // relu_y <= 0 before it goes to x. By default a masked copy of grad_y, then max_pool2d_backward;
  // a backend may mask in the kernel that scatters grad_y (CUDA).
  virtual void max_pool2d_backward_relu(const TensorRef& grad_y, const TensorRef& indices, const TensorRef& relu_y,
                                        const TensorRef& grad_x, const Pool2dParams& p);
  // Max pooling with dropout on its output, in one pass, where the backend has a kernel for this
  // geometry (CUDA: 2 x 2 windows that tile x, x aligned): y = dropout(max_pool2d(x)) at `key`,
  // the bits of those two kernels, and instead of the indices, codes (u8, y's shape), one byte a
  // window: bits 0-5 the maximum's place in its window in row-major order (windows of at most 64
  // elements), bit 6 set where dropout kept the output, bit 7 where the maximum is not <= 0 (the
  // gradient of a relu that made x lets it through). 0 < p < 1. Returns false, having written
  // nothing, where it has no such kernel: the caller then pools and drops in two passes. By default
  // none.
  virtual bool max_pool2d_dropout(const TensorRef& x, const TensorRef& y, const TensorRef& codes,
                                  const Pool2dParams& pool, double p, const philox::Key& key) {
    (void)x, (void)y, (void)codes, (void)pool, (void)p, (void)key;
    return false;
  }
  // Its backward from the codes it wrote: grad_x (overwritten) is 0 but at each window's maximum,
  // which takes dropout's backward of grad_y there (grad_y * (kept ? 1 / (1 - p) : 0), as
  // Backend::dropout computes it), and, where `relu`, 0 where bit 7 is clear. Only a backend whose
  // max_pool2d_dropout wrote the codes is asked; by default it throws BackendUnavailable.
  virtual void max_pool2d_dropout_backward(const TensorRef& grad_y, const TensorRef& codes, const TensorRef& grad_x,
                                           const Pool2dParams& pool, double p, bool relu);
  virtual void avg_pool2d(const TensorRef& x, const TensorRef& y, const Pool2dParams& p) = 0;
  virtual void avg_pool2d_backward(const TensorRef& grad_y, const TensorRef& grad_x,
                                   const Pool2dParams& p) = 0;

  // ---- batch norm over x [N, C, S] per channel c (S: the axes after C, 1 for [N, C]); M = N * S ----
  // A training batch's statistics: mean[c] and the biased variance var[c] = sum (x - mean)^2 / M.
  virtual void batch_norm_stats(const TensorRef& x, const TensorRef& mean, const TensorRef& var) = 0;
  // y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]; weight and bias [C] may be undefined.
  virtual void batch_norm_apply(const TensorRef& x, const TensorRef& mean, const TensorRef& invstd,
                                const TensorRef& weight, const TensorRef& bias, const TensorRef& y) = 0;
  // The training forward: mean and var as batch_norm_stats, invstd[c] = (var[c] + eps)^-1/2, and y
  // as batch_norm_apply with them. By default those three steps; a backend may do it in fewer
  // passes over x (CUDA: one, where the GPU holds x at once).
  virtual void batch_norm_train(const TensorRef& x, const TensorRef& weight, const TensorRef& bias, double eps,
                                const TensorRef& y, const TensorRef& mean, const TensorRef& var,
                                const TensorRef& invstd);
  // The training-mode gradient, with xhat = (x - mean[c]) * invstd[c]: grad_bias[c] = sum g,
  // grad_weight[c] = sum g * xhat (both always written: grad_x needs them), and
  // grad_x = weight[c] * invstd[c] * (g - (grad_bias[c] + xhat * grad_weight[c]) / M).
  // weight may be undefined (1). All contiguous, of one dtype.
  virtual void batch_norm_backward(const TensorRef& x, const TensorRef& grad, const TensorRef& mean,
                                   const TensorRef& invstd, const TensorRef& weight, const TensorRef& grad_x,
                                   const TensorRef& grad_weight, const TensorRef& grad_bias) = 0;

  // ---- optimizer steps: the update rules above the class ----
  // Every list holds one tensor per parameter, in the same order, each contiguous with the
  // parameter's element count; all share params[0]'s dtype (f32 or f64) and device. params and
  // the state lists are updated in place; grads are read. A state list the step does not use
  // is empty (momentum_buffers when momentum == 0, max_exp_avg_sqs without amsgrad, grad_avgs
  // unless centered).
  virtual void sgd_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                        std::span<const TensorRef> momentum_buffers, const SgdStep& h) = 0;
  virtual void adam_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                         std::span<const TensorRef> exp_avgs, std::span<const TensorRef> exp_avg_sqs,
                         std::span<const TensorRef> max_exp_avg_sqs, const AdamStep& h) = 0;
  virtual void adadelta_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                             std::span<const TensorRef> square_avgs,
                             std::span<const TensorRef> acc_deltas, const AdadeltaStep& h) = 0;
  virtual void rmsprop_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                            std::span<const TensorRef> square_avgs,
                            std::span<const TensorRef> momentum_buffers,
                            std::span<const TensorRef> grad_avgs, const RmspropStep& h) = 0;
};

// A buffer of a backend's for the length of one call (a default method's intermediate, a kernel's
// workspace), handed back when it leaves scope: right after the launches that use it are queued,
// which keep their order on the backend's queue as for any tensor's storage.
struct Scratch {
  Scratch(Backend& b, size_t bytes) : backend(b), p(bytes > 0 ? b.allocate(bytes) : nullptr) {}
  ~Scratch() { backend.deallocate(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  // The buffer seen as a contiguous tensor (it must hold shape.numel() elements of dtype).
  TensorRef ref(const Shape& shape, DType dtype) const { return {p, 0, shape, contiguous_strides(shape), dtype}; }

  Backend& backend;
  void* const p;
};

// The backend that serves `device`; throws BackendUnavailable when kiln was built without it
// or when it has no such device. core names no backend: this is defined by kernels/registry.cpp,
// which lists the backends this build compiled.
Backend& backend_for(const Device& device);

// The checks every backend's optimizer step makes before touching memory (the rules above
// Backend::sgd_step): params and grads hold f32 or f64 tensors, one per parameter; each state
// list (or none, where the step keeps no such state) holds one contiguous tensor per parameter,
// of params[0]'s dtype and its parameter's element count; Adam's bias corrections are positive.
// Errors name the backend and the kernel ("cuda adam_step: ...").
void check_sgd_step(std::string_view backend, std::span<const TensorRef> params, std::span<const TensorRef> grads,
                    std::span<const TensorRef> momentum_buffers, const SgdStep& h);
void check_adam_step(std::string_view backend, std::span<const TensorRef> params, std::span<const TensorRef> grads,
                     std::span<const TensorRef> exp_avgs, std::span<const TensorRef> exp_avg_sqs,
                     std::span<const TensorRef> max_exp_avg_sqs, const AdamStep& h);
void check_adadelta_step(std::string_view backend, std::span<const TensorRef> params,
                         std::span<const TensorRef> grads, std::span<const TensorRef> square_avgs,
                         std::span<const TensorRef> acc_deltas);
void check_rmsprop_step(std::string_view backend, std::span<const TensorRef> params,
                        std::span<const TensorRef> grads, std::span<const TensorRef> square_avgs,
                        std::span<const TensorRef> momentum_buffers, std::span<const TensorRef> grad_avgs,
                        const RmspropStep& h);

std::string_view unary_op_name(UnaryOp op);
std::string_view binary_op_name(BinaryOp op);
std::string_view reduce_op_name(ReduceOp op);

}  // namespace kiln
