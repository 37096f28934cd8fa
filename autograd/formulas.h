// The backward formula of every differentiable op, in one place. Each function is called by
// its op (core/ops_*.cpp) at forward time with what the formula needs, and returns the closure
// that maps the output's gradient to the inputs' gradients. Formulas are written with the
// functional ops themselves, so every backend runs them with no extra code; where a fused
// kernel pays (activations, cross-entropy, conv, pooling) the formula calls its backward op.
//
// Saved outputs are passed detached: a closure that held its own output would keep the graph
// alive through a reference cycle.
#pragma once

#include <vector>

#include "kiln/autograd/node.h"
#include "kiln/autograd/ops.h"

namespace kiln::autograd::formulas {

// ---- views and copies ----
BackwardFn identity();                    // contiguous, clone, add of a scalar
BackwardFn reshape(const Shape& x_shape);  // reshape, view, squeeze, unsqueeze, flatten
BackwardFn transpose(int64_t a, int64_t b);
BackwardFn permute(const std::vector<int64_t>& order);
BackwardFn slice(const Shape& x_shape, int64_t axis, int64_t start, int64_t end, int64_t step);
BackwardFn expand(const Shape& x_shape);
BackwardFn to_dtype(DType from);
BackwardFn to_device(const Device& from);
BackwardFn concat(const std::vector<int64_t>& sizes, int64_t axis);
BackwardFn index_select(const Shape& x_shape, int64_t axis, const Tensor& indices);

// ---- elementwise: (a, b, y = op(a, b)) ----
BackwardFn add(const Tensor& a, const Tensor& b, const Tensor& y);
BackwardFn sub(const Tensor& a, const Tensor& b, const Tensor& y);
BackwardFn mul(const Tensor& a, const Tensor& b, const Tensor& y);
BackwardFn div(const Tensor& a, const Tensor& b, const Tensor& y);
BackwardFn pow(const Tensor& a, const Tensor& b, const Tensor& y);
BackwardFn maximum(const Tensor& a, const Tensor& b, const Tensor& y);
BackwardFn minimum(const Tensor& a, const Tensor& b, const Tensor& y);
BackwardFn scale(double factor);  // y = x * factor (also neg)
BackwardFn pow_scalar(const Tensor& x, double exponent);
BackwardFn exp(const Tensor& y);
BackwardFn log(const Tensor& x);
BackwardFn sqrt(const Tensor& y);
BackwardFn abs(const Tensor& x);
BackwardFn relu(const Tensor& x);
BackwardFn leaky_relu(const Tensor& x, double negative_slope);
BackwardFn gelu(const Tensor& x);
BackwardFn tanh(const Tensor& y);
BackwardFn sigmoid(const Tensor& y);

// ---- reductions (axes normalised) ----
BackwardFn sum(const Shape& x_shape, const std::vector<int64_t>& axes, bool keepdim);
BackwardFn mean(const Shape& x_shape, const std::vector<int64_t>& axes, bool keepdim);
BackwardFn extremum(const Tensor& x, const Tensor& y, const std::vector<int64_t>& axes, bool keepdim);

// ---- neural-network ops ----
BackwardFn matmul(const Tensor& a, const Tensor& b);  // both of rank >= 2
// y = activation(a b + bias), a and b 2-D: the activation's gradient from y, then matmul's and the bias's
BackwardFn matmul_epilogue(const Tensor& a, const Tensor& b, bool has_bias, Activation activation,
                           const Tensor& y);
BackwardFn softmax(const Tensor& y, int64_t axis);
BackwardFn log_softmax(const Tensor& y, int64_t axis);
BackwardFn cross_entropy(const Tensor& logits, const Tensor& targets, double label_smoothing);
// y = activation(conv2d(x, weight) + bias): y is read only for an activation
// y = batch_norm(x) with x seen as [N, C, S] = nc_s, x (contiguous), mean, invstd the values the
// forward used. Training: the fused backward (the statistics depend on x); evaluation: the
// statistics are constants, so grad_x = g * weight * invstd.
BackwardFn batch_norm(const Tensor& x, const Tensor& mean, const Tensor& invstd, const Tensor& weight,
                      bool has_bias, bool training, const Shape& nc_s);
// y = dropout(x) with the mask of (p, seed, offset): the gradient takes the same mask
BackwardFn dropout(double p, uint64_t seed, uint64_t offset);
BackwardFn conv2d(const Tensor& x, const Tensor& weight, bool has_bias, const Conv2dConfig& config,
                  Activation activation, const Tensor& y);
BackwardFn max_pool2d(const Tensor& indices, const Shape& x_shape, const Pool2dConfig& config);
BackwardFn avg_pool2d(const Shape& x_shape, const Pool2dConfig& config);

}  // namespace kiln::autograd::formulas
