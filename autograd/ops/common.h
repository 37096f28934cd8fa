// What the op files (autograd/ops/*.cpp) share: argument checks, output allocation, axis
// bookkeeping, and the names of autograd's graph. Not part of the public API (not installed).
#pragma once

#include <string_view>
#include <vector>

#include "kiln/autograd/node.h"
#include "kiln/autograd/ops.h"
#include "kiln/core/backend.h"

namespace kiln {

// A gradient formula: the closure an op records, mapping the output's gradient to one gradient
// per input (autograd/node.h). `need` says which inputs want one. Every tensor it reads is
// captured through a Saves (autograd/node.h), so that backward can tell when one was written in
// place after the op ran.
using autograd::BackwardFn;
using autograd::Grads;
using autograd::Saves;
using autograd::Needed;

// t when `other` requires grad, else undefined (nothing to save): what a formula saves of a tensor
// it reads only for other's gradient (mul reads a for b's), so that, as in PyTorch, writing to t
// before a backward that does not need it is no error.
inline Tensor for_grad_of(const Tensor& other, const Tensor& t) {
  return other.defined() && other.requires_grad() ? t : Tensor();
}

namespace detail {

void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& x);
// A count of correct predictions (add_correct, cross_entropy_counting): an i32 scalar on scores' device.
void check_correct_count(const char* op, const Tensor& count, const Tensor& scores);
// A contiguous tensor of this shape, dtype and device.
Tensor empty_as(const Shape& shape, const Tensor& like, DType dtype);
inline Tensor empty_as(const Shape& shape, const Tensor& like) { return empty_as(shape, like, like.dtype()); }
// Normalised, sorted, de-duplicated axes; all axes when `axes` is empty.
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op);
// x's shape with each reduced axis set to 1 (keepdim) or removed.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim);
// The gradient g of a fused epilogue's output y (matmul, conv2d) taken back through its activation,
// read from y alone (relu: y > 0 exactly where the input was; relu_backward(y, g) ==
// relu_backward(x, g), NaN included); g itself where the consumers of y applied relu's mask already
// (Needed: grad_masked).
Tensor before_activation(Activation activation, const Tensor& y, const Tensor& g, const Needed& need);
// dropout(x, p) with the mask of the draw at `key` (reserved already, x.numel() elements), 0 < p < 1.
Tensor dropout_at(const Tensor& x, double p, const philox::Key& key);
// Records y's op as one whose formula starts with relu's gradient (autograd::Node::relu_output),
// when y was recorded and `relu` holds.
void mark_relu_output(const Tensor& y, bool relu = true);

}  // namespace detail

using detail::empty_as;

}  // namespace kiln
