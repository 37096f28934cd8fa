// The Tensor methods that are ops (core/tensor.h declares them): each calls its functional op
// (autograd/ops.h), which records the node. They live here because core records nothing.
#include "kiln/autograd/ops.h"

namespace kiln {

Tensor Tensor::to(const Device& device) const { return to_device(*this, device); }
Tensor Tensor::to(DType t) const { return to_dtype(*this, t); }
Tensor Tensor::contiguous() const { return kiln::contiguous(*this); }
Tensor Tensor::clone() const { return kiln::clone(*this); }

Tensor Tensor::reshape(const Shape& s) const { return kiln::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return kiln::view(*this, s); }
Tensor Tensor::flatten(int64_t start, int64_t end) const { return kiln::flatten(*this, start, end); }
Tensor Tensor::transpose(int64_t a, int64_t b) const { return kiln::transpose(*this, a, b); }
Tensor Tensor::permute(const std::vector<int64_t>& order) const { return kiln::permute(*this, order); }
Tensor Tensor::slice(int64_t axis, int64_t start, int64_t end, int64_t step) const {
  return kiln::slice(*this, axis, start, end, step);
}
Tensor Tensor::squeeze(int64_t axis) const { return kiln::squeeze(*this, axis); }
Tensor Tensor::unsqueeze(int64_t axis) const { return kiln::unsqueeze(*this, axis); }
Tensor Tensor::expand(const Shape& s) const { return kiln::expand(*this, s); }

Tensor Tensor::sum(const std::vector<int64_t>& axes, bool keepdim) const { return kiln::sum(*this, axes, keepdim); }
Tensor Tensor::mean(const std::vector<int64_t>& axes, bool keepdim) const { return kiln::mean(*this, axes, keepdim); }
Tensor Tensor::max(const std::vector<int64_t>& axes, bool keepdim) const { return kiln::max(*this, axes, keepdim); }
Tensor Tensor::min(const std::vector<int64_t>& axes, bool keepdim) const { return kiln::min(*this, axes, keepdim); }
Tensor Tensor::argmax(int64_t axis, bool keepdim) const { return kiln::argmax(*this, axis, keepdim); }
Tensor Tensor::matmul(const Tensor& other) const { return kiln::matmul(*this, other); }

}  // namespace kiln
