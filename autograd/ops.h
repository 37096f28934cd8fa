// kiln's functional ops: one function each. An op checks its arguments (errors name the op and
// show the shapes), allocates its output, runs one backend kernel and, when autograd is
// recording and an input requires grad, records its gradient formula. Each family's ops, checks,
// kernel calls and gradients live together in one file of autograd/ops/ (view, elementwise,
// reduce, index, matmul, softmax, loss, conv2d, pool, batch_norm, dropout).
//
// Every tensor argument must sit on the same device. Floating-point ops take f32 or f64;
// arithmetic and comparisons also take i32; binary ops need both operands of one dtype.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "kiln/core/backend.h"  // Activation
#include "kiln/core/tensor.h"

namespace kiln {

// ---- views: share storage, record a node so gradients flow back to the base ----
Tensor reshape(const Tensor& x, const Shape& shape);  // one dimension may be -1; copies if it must
Tensor view(const Tensor& x, const Shape& shape);     // like reshape, but never copies (throws instead)
Tensor flatten(const Tensor& x, int64_t start = 0, int64_t end = -1);
Tensor transpose(const Tensor& x, int64_t a, int64_t b);
Tensor permute(const Tensor& x, const std::vector<int64_t>& order);
Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step = 1);
Tensor squeeze(const Tensor& x, int64_t axis);
Tensor unsqueeze(const Tensor& x, int64_t axis);
Tensor expand(const Tensor& x, const Shape& shape);  // size-1 dimensions repeat with stride 0
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to_dtype(const Tensor& x, DType dtype);   // differentiable between floating dtypes; keeps a dense input's memory order
// Each of xs as to_dtype does, the contiguous ones in one backend call (copy_many: one launch on CUDA).
std::vector<Tensor> to_dtype(const std::vector<Tensor>& xs, DType dtype);
Tensor to_device(const Tensor& x, const Device& device);
// Sums x down to `shape` (the reverse of broadcasting): the gradient of expand.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- elementwise, with broadcasting ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, double exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);  // not differentiable
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor gelu(const Tensor& x);  // exact (erf) form, PyTorch's default
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);

// Comparisons: 1 where true, 0 where false, in the operands' dtype. Not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
// 1 where x is finite, 0 where it is NaN, +inf or -inf, in x's dtype (i32 and u8: all ones), as
// torch.isfinite gives in bool. Not differentiable.
Tensor isfinite(const Tensor& x);
// How many of x's values are NaN or infinite (0 for integer dtypes): one value read from the
// device when there are none, a copy to the host when there are.
int64_t count_nonfinite(const Tensor& x);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// ---- reductions: empty `axes` means every axis ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
// max/min of values (PyTorch's amax/amin): the gradient is shared evenly between ties.
Tensor max(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
Tensor min(const Tensor& x, const std::vector<int64_t>& axes = {}, bool keepdim = false);
// i32 index of the first largest (smallest) element along `axis`. Not differentiable.
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t axis, bool keepdim = false);
// count (i32 [], in place) += the rows i of scores [N, C] whose argmax is targets[i] (i32 [N]):
// what count.add_(sum(eq(argmax(scores, 1), targets))) adds, in one kernel on CUDA where that takes
// four. A classifier's correct predictions, counted on the device over an epoch and read once.
void add_correct(const Tensor& count, const Tensor& scores, const Tensor& targets);

// ---- linear algebra ----
// 1-D, 2-D and batched (leading dimensions broadcast) products, as torch.matmul. Transposed
// views are handed to the kernel as transposed operands, not copied.
Tensor matmul(const Tensor& a, const Tensor& b);
// activation(a b + bias) in one kernel (the matmul's epilogue, core/backend.h): a [m, k], b [k, n],
// bias [n] or undefined. A Linear layer and its activation without a pass of their own; the
// gradient reads the output (relu's mask is y > 0).
Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias, Activation activation);

// ---- neural-network ops ----
Tensor softmax(const Tensor& x, int64_t axis);
Tensor log_softmax(const Tensor& x, int64_t axis);

enum class Reduction : uint8_t { none, mean, sum };

// logits [N, C], targets i32 [N] with values in [0, C): log-softmax and NLL in one kernel. bf16
// logits give an f32 loss under autocast (computed in f32, without a cast of the logits).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     Reduction reduction = Reduction::mean, double label_smoothing = 0.0);
// cross_entropy (reduction mean or sum) and add_correct(count, logits, targets) in one pass over
// the logits: a training step's loss and its correct predictions, in one kernel on CUDA for a
// batch the loss's own kernel takes (up to 65,536 logits, rows up to 1,024 classes) where the two
// take two. count: i32 [], added to in place.
Tensor cross_entropy_counting(const Tensor& logits, const Tensor& targets, const Tensor& count,
                              Reduction reduction = Reduction::mean, double label_smoothing = 0.0);
// log_probs [N, C], targets i32 [N]: -log_probs[i, targets[i]], reduced.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, Reduction reduction = Reduction::mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// indices i32 [N] -> [N, classes] with 1 at each index. Not differentiable.
Tensor one_hot(const Tensor& indices, int64_t classes, DType dtype = DType::f32);

struct Conv2dConfig {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
};
// x [N, C, H, W], weight [O, C / groups, KH, KW], bias [O] or undefined -> [N, O, OH, OW], then
// the activation, in the same kernel (the conv's epilogue; relu's gradient reads the output)
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const Conv2dConfig& config = {}, Activation activation = Activation::none);

struct Pool2dConfig {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0 means "equal to the kernel", as in PyTorch
  std::array<int64_t, 2> padding{0, 0};
  bool count_include_pad = true;        // avg_pool2d only
};
Tensor max_pool2d(const Tensor& x, const Pool2dConfig& config = {});
Tensor avg_pool2d(const Tensor& x, const Pool2dConfig& config = {});
class Generator;
// dropout(max_pool2d(x, config), p, training, generator): the same values, gradient and draw from
// the generator, in one pass each way where the backend has a kernel for the pool (CUDA: 2 x 2
// windows at stride 2 on an even size), keeping one byte a window for the gradient; else those
// two ops.
Tensor max_pool2d_dropout(const Tensor& x, const Pool2dConfig& config, double p, bool training,
                          Generator* generator = nullptr);

// x [N, C] or [N, C, ...]. In training, normalises with the batch's statistics and updates the
// running ones in place (unbiased variance, as PyTorch); in eval, uses the running ones.
// weight and bias [C] may be undefined; running_mean and running_var may be undefined in training.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training,
                  double momentum = 0.1, double eps = 1e-5);

// Zeroes each element with probability p (Philox mask) and scales the rest by 1 / (1 - p), in one
// kernel; the mask is drawn again from the same seed and offset for the gradient, not stored.
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator = nullptr);

// The slices of x at `indices` (i32 [m], values in [0, x.size(axis))) along `axis`:
// x [.., n, ..] -> [.., m, ..]. Indices may repeat; their gradients add up.
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& indices);

Tensor concat(const std::vector<Tensor>& tensors, int64_t axis = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t axis = 0);

// ---- backward kernels as ops: the fused kernels the gradients call. Not differentiable. ----
// zeros(x_shape) with grad's slices added at `indices` along `axis`: index_select's gradient.
Tensor index_select_backward(const Tensor& grad, int64_t axis, const Tensor& indices, const Shape& x_shape);
Tensor relu_backward(const Tensor& x, const Tensor& grad);
Tensor leaky_relu_backward(const Tensor& x, const Tensor& grad, double negative_slope);
Tensor gelu_backward(const Tensor& x, const Tensor& grad);
// batch_norm's training-mode gradient in one backend call: {grad_x, grad_weight, grad_bias}, x seen
// as [N, C, S] = nc_s, mean and invstd [C] the batch's, weight [C] or undefined.
std::vector<Tensor> batch_norm_backward(const Tensor& x, const Tensor& grad, const Tensor& mean,
                                        const Tensor& invstd, const Tensor& weight, const Shape& nc_s);
// grad through the dropout mask of (p, key): the mask dropout drew in the forward pass; relu_x, where
// defined, is dropout's input, the output of a relu: the gradient is then also taken back through
// that relu, zero wherever relu_x <= 0
Tensor dropout_backward(const Tensor& grad, double p, const philox::Key& key, const Tensor& relu_x = {});
// the losses' gradient -> logits' gradient [N, C] (logits' dtype): grad [N] per sample for
// Reduction::none, else grad [] of their mean or sum; f32 for bf16 logits
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& grad,
                              double label_smoothing, Reduction reduction = Reduction::none);
// relu_x, where defined, is x itself, the output of a relu: the gradient is then also taken back
// through that relu in the same pass, zero wherever relu_x <= 0 (relu_backward(relu_x, grad_x)).
Tensor conv2d_backward_input(const Tensor& grad_y, const Tensor& weight, const Shape& x_shape,
                             const Conv2dConfig& config, const Tensor& relu_x = {});
Tensor conv2d_backward_weight(const Tensor& x, const Tensor& grad_y, const Shape& weight_shape,
                              const Conv2dConfig& config);
struct PoolResult {
  Tensor values;
  Tensor indices;  // i32, position h * W + w of each maximum in its input plane
};
PoolResult max_pool2d_with_indices(const Tensor& x, const Pool2dConfig& config = {});
Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& indices, const Shape& x_shape,
                           const Pool2dConfig& config, const Tensor& relu_y = {});
// relu_y, where defined, is the pool's output y where x is the output of a relu: the gradient is then
// also taken back through that relu, read from y (each window's maximum is x's value where the
// window's gradient goes), zero wherever relu_y <= 0.
Tensor avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape, const Pool2dConfig& config);

}  // namespace kiln
