// Indexing: index_select (a batch gathered from a data set, an embedding lookup) and its
// gradient, one_hot.
#include "kiln/autograd/ops/common.h"

namespace kiln {

namespace {
// x's layout as the indexing kernels see it: contiguous [outer, n, inner] around `axis`.
TensorRef around_axis(const Tensor& x, int64_t axis) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < axis) outer *= x.shape()[static_cast<size_t>(i)];
    if (i > axis) inner *= x.shape()[static_cast<size_t>(i)];
  }
  TensorRef r = x.ref();
  r.shape = {outer, x.shape()[static_cast<size_t>(axis)], inner};
  r.strides = contiguous_strides(r.shape);
  return r;
}

Tensor check_indices(const char* op, const Tensor& x, const Tensor& indices) {
  detail::check_same_device(op, x, indices);
  KILN_CHECK(indices.dtype() == DType::i32 && indices.dim() == 1, ShapeError, op,
             ": indices must be i32 of shape [m], got ", indices.dtype(), " ", indices.shape());
  return indices.contiguous();
}
}  // namespace

Tensor index_select(const Tensor& x, int64_t axis, const Tensor& indices) {
  KILN_CHECK(x.dim() > 0, ShapeError, "index_select: a scalar has no axis to index");
  int64_t a = normalize_axis(axis, x.dim(), "index_select");
  Tensor idx = check_indices("index_select", x, indices);
  Tensor xc = x.contiguous();
  Shape shape = x.shape();
  shape[static_cast<size_t>(a)] = idx.numel();
  Tensor y = empty_as(shape, x);
  x.backend().gather(around_axis(xc, a), idx.ref(), around_axis(y, a));
  if (autograd::is_recording({x})) {
    // each selected slice's gradient added back at its index (repeated indices add up)
    Saves saved;
    auto gradient = [x_shape = x.shape(), a, idx = saved(idx, "indices")](const Tensor& g, const Needed&) -> Grads {
      return {index_select_backward(g, a, idx, x_shape)};
    };
    autograd::record(y, "index_select", {x}, gradient, saved);
  }
  return y;
}

Tensor index_select_backward(const Tensor& grad, int64_t axis, const Tensor& indices, const Shape& x_shape) {
  Tensor idx = check_indices("index_select_backward", grad, indices);
  Tensor g = grad.contiguous();
  Tensor out = zeros(x_shape, TensorOptions(g.dtype()).device(g.device()));
  g.backend().index_add(around_axis(g, axis), idx.ref(), around_axis(out, axis));
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t classes, DType dtype) {
  KILN_CHECK(indices.dtype() == DType::i32 && indices.dim() == 1, ShapeError,
             "one_hot: expects i32 indices of shape [N], got ", indices.dtype(), " ", indices.shape());
  KILN_CHECK(classes > 0, ValueError, "one_hot: classes must be positive, got ", classes);
  Tensor idx = indices.contiguous();
  Tensor y = empty_as({idx.size(0), classes}, idx, dtype);
  idx.backend().one_hot(idx.ref(), y.ref());
  return y;
}

}  // namespace kiln
