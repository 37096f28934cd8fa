#include "kiln/autograd/ops/common.h"

#include <algorithm>
#include <numeric>

namespace kiln::detail {

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.device() == b.device(), DeviceError, op, ": operands on different devices (",
             a.device(), " and ", b.device(), "); move one with .to(device)");
}

void check_correct_count(const char* op, const Tensor& count, const Tensor& scores) {
  check_same_device(op, scores, count);
  KILN_CHECK(count.dtype() == DType::i32 && count.dim() == 0, ShapeError, op,
             ": count must be an i32 scalar ([]), got ", count.dtype(), " ", count.shape());
}

void check_floating(const char* op, const Tensor& x) {
  KILN_CHECK(is_floating(x.dtype()), DTypeError, op, ": takes f32, f64 or bf16 tensors, got ",
             x.dtype(), " of shape ", x.shape());
}

Tensor empty_as(const Shape& shape, const Tensor& like, DType dtype) {
  return empty(shape, TensorOptions(dtype).device(like.device()));
}

std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op) {
  std::vector<int64_t> out;
  if (axes.empty()) {
    out.resize(static_cast<size_t>(rank));
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  for (int64_t a : axes) out.push_back(normalize_axis(a, rank, op));
  std::sort(out.begin(), out.end());
  KILN_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), ValueError, op,
             ": an axis appears twice in the list of axes");
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim) {
  Shape out;
  for (size_t i = 0; i < shape.size(); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(i)) != axes.end();
    if (!reduced) out.push_back(shape[i]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

Tensor before_activation(Activation activation, const Tensor& y, const Tensor& g, const Needed& need) {
  return activation == Activation::relu && !need.grad_masked() ? relu_backward(y, g) : g;
}

void mark_relu_output(const Tensor& y, bool relu) {
  if (relu && y.grad_fn()) autograd::node_of(y)->relu_output = true;
}

}  // namespace kiln::detail
