// Views and copies: reshape, transpose, slice, expand, ... share storage with their input;
// contiguous, clone, concat and the conversions copy. Each op's gradient sits beside it.
#include <algorithm>
#include <functional>
#include <optional>

#include "kiln/autograd/ops/common.h"

namespace kiln {

namespace {

// A view of x with a new layout that records `op` when x needs a gradient; `gradient` builds the
// formula only then.
Tensor view_of(const Tensor& x, Shape shape, Strides strides, int64_t offset, std::string_view op,
               const std::function<BackwardFn()>& gradient) {
  Tensor y = make_view(x, std::move(shape), std::move(strides), offset);
  if (autograd::is_recording({x})) autograd::record(y, op, {x}, gradient());
  return y;
}

// The gradient of reshape, view, flatten, squeeze and unsqueeze: the same values in x's shape.
BackwardFn reshape_gradient(const Shape& x_shape) {
  return [x_shape](const Tensor& g, const Needed&) -> Grads { return {reshape(g, x_shape)}; };
}

// The gradient of contiguous, clone and an added scalar: passed through.
BackwardFn identity_gradient() {
  return [](const Tensor& g, const Needed&) -> Grads { return {g}; };
}

Shape resolve_shape(const Shape& x_shape, const Shape& requested, const char* op) {
  Shape shape = requested;
  int64_t known = 1;
  int64_t infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      KILN_CHECK(infer < 0, ShapeError, op, ": only one dimension of ", requested, " may be -1");
      infer = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(shape[i] >= 0, ShapeError, op, ": ", requested, " has a negative dimension");
      KILN_CHECK(!__builtin_mul_overflow(known, shape[i], &known), ShapeError, op, ": cannot reshape ", x_shape,
                 " into ", requested, " (its sizes multiply past 2^63 - 1)");
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && x_shape.numel() % known == 0, ShapeError, op, ": cannot reshape ",
               x_shape, " into ", requested);
    shape[static_cast<size_t>(infer)] = x_shape.numel() / known;
  }
  KILN_CHECK(shape.numel() == x_shape.numel(), ShapeError, op, ": cannot reshape ", x_shape, " (",
             x_shape.numel(), " elements) into ", requested, " (", shape.numel(), " elements)");
  return shape;
}

}  // namespace

// ---- views ----

Tensor view(const Tensor& x, const Shape& shape) {
  Shape s = resolve_shape(x.shape(), shape, "view");
  KILN_CHECK(x.is_contiguous(), ShapeError, "view: the tensor of shape ", x.shape(), " and strides ",
             x.strides(), " is not contiguous; use reshape() (which copies) or contiguous() first");
  Shape x_shape = x.shape();
  return view_of(x, s, contiguous_strides(s), x.offset(), "view", [&] { return reshape_gradient(x_shape); });
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape s = resolve_shape(x.shape(), shape, "reshape");
  Tensor c = x.contiguous();
  Shape x_shape = x.shape();
  return view_of(c, s, contiguous_strides(s), c.offset(), "reshape", [&] { return reshape_gradient(x_shape); });
}

Tensor flatten(const Tensor& x, int64_t start, int64_t end) {
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = normalize_axis(start, x.dim(), "flatten");
  int64_t e = normalize_axis(end, x.dim(), "flatten");
  KILN_CHECK(s <= e, ValueError, "flatten: start axis ", start, " comes after end axis ", end);
  Shape out;
  for (int64_t i = 0; i < s; ++i) out.push_back(x.shape()[static_cast<size_t>(i)]);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= x.shape()[static_cast<size_t>(i)];
  out.push_back(merged);
  for (int64_t i = e + 1; i < x.dim(); ++i) out.push_back(x.shape()[static_cast<size_t>(i)]);
  return reshape(x, out);
}

Tensor transpose(const Tensor& x, int64_t a, int64_t b) {
  int64_t i = normalize_axis(a, x.dim(), "transpose");
  int64_t j = normalize_axis(b, x.dim(), "transpose");
  if (x.dim() == 0) return x;
  Shape shape = x.shape();
  Strides strides = x.strides();
  std::swap(shape[static_cast<size_t>(i)], shape[static_cast<size_t>(j)]);
  std::swap(strides[static_cast<size_t>(i)], strides[static_cast<size_t>(j)]);
  return view_of(x, shape, strides, x.offset(), "transpose", [&]() -> BackwardFn {
    return [i, j](const Tensor& g, const Needed&) -> Grads { return {transpose(g, i, j)}; };
  });
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& order) {
  KILN_CHECK(static_cast<int64_t>(order.size()) == x.dim(), ShapeError, "permute: ", order.size(),
             " axes given for a tensor of shape ", x.shape());
  std::vector<int64_t> axes;
  for (int64_t a : order) axes.push_back(normalize_axis(a, x.dim(), "permute"));
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  KILN_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), ValueError,
             "permute: the order must name each axis once");
  Shape shape;
  Strides strides;
  for (int64_t a : axes) {
    shape.push_back(x.shape()[static_cast<size_t>(a)]);
    strides.push_back(x.strides()[static_cast<size_t>(a)]);
  }
  return view_of(x, shape, strides, x.offset(), "permute", [&]() -> BackwardFn {
    std::vector<int64_t> inverse(axes.size());  // the permutation that undoes this one
    for (size_t k = 0; k < axes.size(); ++k) inverse[static_cast<size_t>(axes[k])] = static_cast<int64_t>(k);
    return [inverse](const Tensor& g, const Needed&) -> Grads { return {permute(g, inverse)}; };
  });
}

Tensor slice(const Tensor& x, int64_t axis, int64_t start, int64_t end, int64_t step) {
  int64_t a = normalize_axis(axis, x.dim(), "slice");
  KILN_CHECK(x.dim() > 0, ShapeError, "slice: a scalar has no axis to slice");
  KILN_CHECK(step > 0, ValueError, "slice: step must be positive, got ", step);
  int64_t n = x.shape()[static_cast<size_t>(a)];
  // Python's rules: negative indices count from the end, out-of-range ones clamp.
  auto clamp = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  int64_t s = clamp(start), e = std::max(clamp(end), clamp(start));
  Shape shape = x.shape();
  shape[static_cast<size_t>(a)] = (e - s + step - 1) / step;
  Strides strides = x.strides();
  int64_t offset = x.offset() + s * strides[static_cast<size_t>(a)];
  strides[static_cast<size_t>(a)] *= step;
  Shape x_shape = x.shape();
  return view_of(x, shape, strides, offset, "slice", [&]() -> BackwardFn {
    // zeros in x's shape, the gradient written into the sliced positions
    return [x_shape, a, s, e, step](const Tensor& g, const Needed&) -> Grads {
      Tensor grad = zeros(x_shape, TensorOptions(g.dtype()).device(g.device()));
      slice(grad, a, s, e, step).copy_(g);
      return {grad};
    };
  });
}

Tensor squeeze(const Tensor& x, int64_t axis) {
  int64_t a = normalize_axis(axis, x.dim(), "squeeze");
  if (x.dim() == 0 || x.shape()[static_cast<size_t>(a)] != 1) return x;  // as PyTorch: a no-op
  Shape shape = x.shape();
  Strides strides = x.strides();
  shape.erase(static_cast<size_t>(a));
  strides.erase(static_cast<size_t>(a));
  Shape x_shape = x.shape();
  return view_of(x, shape, strides, x.offset(), "squeeze", [&] { return reshape_gradient(x_shape); });
}

Tensor unsqueeze(const Tensor& x, int64_t axis) {
  int64_t a = normalize_axis(axis, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape();
  Strides strides = x.strides();
  int64_t stride = a < x.dim() ? strides[static_cast<size_t>(a)] * shape[static_cast<size_t>(a)] : 1;
  shape.insert(static_cast<size_t>(a), 1);
  strides.insert(static_cast<size_t>(a), stride);
  Shape x_shape = x.shape();
  return view_of(x, shape, strides, x.offset(), "unsqueeze", [&] { return reshape_gradient(x_shape); });
}

Tensor expand(const Tensor& x, const Shape& shape) {
  KILN_CHECK(shape.size() >= x.shape().size(), ShapeError, "expand: cannot expand ", x.shape(),
             " to fewer dimensions ", shape);
  size_t lead = shape.size() - x.shape().size();
  Shape out = shape;
  for (size_t i = 0; i < lead; ++i)
    KILN_CHECK(shape[i] >= 0, ShapeError, "expand: cannot expand ", x.shape(), " to ", shape, " (new dimension ", i,
               ": size ", shape[i], "; -1 keeps an existing size only)");
  for (size_t i = 0; i < x.shape().size(); ++i) {
    int64_t have = x.shape()[i];
    int64_t& want = out[lead + i];
    if (want == -1) want = have;
    KILN_CHECK(have == want || have == 1, ShapeError, "expand: cannot expand ", x.shape(), " to ",
               shape, " (dimension ", lead + i, ": size ", have, " is neither ", want, " nor 1)");
  }
  if (out == x.shape()) return x;
  TensorRef r = broadcast_ref(x, out);
  Shape x_shape = x.shape();
  return view_of(x, out, r.strides, x.offset(), "expand", [&]() -> BackwardFn {
    return [x_shape](const Tensor& g, const Needed&) -> Grads { return {sum_to(g, x_shape)}; };
  });
}

// ---- copies and conversions ----

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return clone(x);
}

Tensor clone(const Tensor& x) {
  Tensor y = dense_copy(x, x.dtype());
  if (autograd::is_recording({x})) autograd::record(y, "clone", {x}, identity_gradient());
  return y;
}

namespace {
// x's elements as a row-major ref in memory order, and the strides that lay a dense copy of that
// ref out in x's shape, where x covers its elements densely in some order of its axes (a
// transposed weight: w.t() is w's memory read in reverse axis order); nothing where it has gaps
// or overlaps.
struct MemoryOrder {
  TensorRef ref;
  Strides strides;
};
std::optional<MemoryOrder> memory_order(const Tensor& x) {
  if (x.is_contiguous()) return MemoryOrder{x.ref(), x.strides()};
  const auto rank = static_cast<size_t>(x.dim());
  std::vector<size_t> order(rank);  // axes from the outermost in memory to the innermost
  for (size_t a = 0; a < rank; ++a) order[a] = a;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return x.strides()[a] > x.strides()[b]; });
  Shape memory_shape;
  for (size_t a : order) memory_shape.push_back(x.shape()[a]);
  const Strides dense = contiguous_strides(memory_shape);
  for (size_t k = 0; k < rank; ++k)
    if (x.shape()[order[k]] != 1 && x.strides()[order[k]] != dense[k]) return std::nullopt;
  MemoryOrder m{x.ref(), {}};
  m.ref.shape = memory_shape;
  m.ref.strides = dense;
  std::vector<int64_t> strides(rank);
  for (size_t k = 0; k < rank; ++k) strides[order[k]] = dense[k];
  m.strides = Strides(std::move(strides));
  return m;
}

// The dense tensor `to` holds x's elements in memory order (memory_order's ref), as x's shape.
Tensor as_laid_out(const Tensor& x, const Tensor& to, const MemoryOrder& m) {
  return x.is_contiguous() ? to : make_view(to, x.shape(), m.strides, 0);
}

// x converted to dtype, laid out in x's own memory order where x is dense in one (memory_order),
// else row-major. Keeping the order keeps the copy a straight pass through memory, a product
// reading the converted weight as it would read the weight (matmul's transposed operand), and the
// gradient coming back through the conversion in the weight's own order, with no copy to make it
// contiguous.
Tensor converted_copy(const Tensor& x, DType dtype) {
  const std::optional<MemoryOrder> m = x.numel() > 0 ? memory_order(x) : std::nullopt;
  if (!m) return dense_copy(x, dtype);
  Tensor c = empty(m->ref.shape, TensorOptions(dtype).device(x.device()));
  x.backend().copy(m->ref, c.ref());
  return as_laid_out(x, c, *m);
}

// y = x in another dtype: its gradient converts back. The node says so (Node::converts), so that
// backward converts the gradients of many such nodes together (autograd/engine.cpp).
void record_conversion(Tensor& y, const Tensor& x) {
  if (!is_floating(y.dtype()) || !autograd::is_recording({x})) return;
  autograd::record(y, "to_dtype", {x}, [from = x.dtype()](const Tensor& g, const Needed&) -> Grads {
    return {to_dtype(g, from)};
  });
  autograd::node_of(y)->converts = true;
}
}  // namespace

Tensor to_dtype(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor y = converted_copy(x, dtype);
  record_conversion(y, x);
  return y;
}

std::vector<Tensor> to_dtype(const std::vector<Tensor>& xs, DType dtype) {
  std::vector<Tensor> ys(xs.size());
  std::vector<TensorRef> from, to;
  std::vector<size_t> batched;  // those dense in some order, converted by one copy_many on xs[0]'s backend
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    KILN_CHECK(x.defined(), ValueError, "to_dtype: tensor ", i, " of the list is undefined");
    if (x.dtype() == dtype) {
      ys[i] = x;
      continue;
    }
    const std::optional<MemoryOrder> m =
        x.device() == xs[0].device() && x.numel() > 0 ? memory_order(x) : std::nullopt;
    if (!m) {
      ys[i] = to_dtype(x, dtype);
      continue;
    }
    Tensor c = empty(m->ref.shape, TensorOptions(dtype).device(x.device()));
    from.push_back(m->ref);
    to.push_back(c.ref());
    ys[i] = as_laid_out(x, c, *m);
    batched.push_back(i);
  }
  if (!from.empty()) xs[0].backend().copy_many(from, to);
  for (size_t i : batched) record_conversion(ys[i], xs[i]);
  return ys;
}

Tensor to_device(const Tensor& x, const Device& device) {
  if (x.device() == device) return x;
  Tensor c = x.contiguous();
  Tensor y = empty(c.shape(), TensorOptions(c.dtype()).device(device));
  size_t bytes = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
  size_t at = static_cast<size_t>(c.offset()) * dtype_size(c.dtype());
  // Through host memory: the backends only exchange data with the host.
  std::vector<unsigned char> staging(bytes);
  c.backend().read(c.storage()->data(), at, staging.data(), bytes);
  y.backend().write(y.storage()->data(), 0, staging.data(), bytes);
  if (autograd::is_recording({x})) {
    autograd::record(y, "to_device", {x}, [from = x.device()](const Tensor& g, const Needed&) -> Grads {
      return {to_device(g, from)};
    });
  }
  return y;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  KILN_CHECK(broadcast_shapes(shape, x.shape(), "sum_to") == x.shape(), ShapeError, "sum_to: ",
             x.shape(), " is not a broadcast of ", shape);
  size_t lead = x.shape().size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < x.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1)) axes.push_back(static_cast<int64_t>(i));
  Tensor s = sum(x, axes, true);
  // Drop the leading axes that `shape` does not have.
  return lead ? reshape(s, shape) : s;
}

// ---- concatenation ----

Tensor concat(const std::vector<Tensor>& tensors, int64_t axis) {
  KILN_CHECK(!tensors.empty(), ValueError, "concat: needs at least one tensor");
  const Tensor& first = tensors[0];
  KILN_CHECK(first.dim() > 0, ShapeError, "concat: scalars cannot be concatenated; use stack");
  int64_t a = normalize_axis(axis, first.dim(), "concat");
  Shape shape = first.shape();
  shape[static_cast<size_t>(a)] = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) {
    detail::check_same_device("concat", first, t);
    KILN_CHECK(t.dtype() == first.dtype(), DTypeError, "concat: mixes ", first.dtype(), " and ",
               t.dtype());
    bool fits = t.dim() == first.dim();
    for (int64_t i = 0; fits && i < t.dim(); ++i)
      fits = i == a || t.shape()[static_cast<size_t>(i)] == first.shape()[static_cast<size_t>(i)];
    KILN_CHECK(fits, ShapeError, "concat: shapes ", first.shape(), " and ", t.shape(),
               " differ outside axis ", a);
    sizes.push_back(t.shape()[static_cast<size_t>(a)]);
    shape[static_cast<size_t>(a)] += sizes.back();
  }
  Tensor y = empty_as(shape, first);
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    Tensor part = make_view(y, t.shape(), y.strides(), y.offset() + at * y.strides()[static_cast<size_t>(a)]);
    t.backend().copy(t.ref(), part.ref());
    at += t.shape()[static_cast<size_t>(a)];
  }
  if (autograd::is_recording(tensors)) {
    // each input's gradient: its slice of g along the axis
    autograd::record(y, "concat", tensors, [sizes, a](const Tensor& g, const Needed&) -> Grads {
      Grads grads;
      int64_t start = 0;
      for (int64_t n : sizes) {
        grads.push_back(slice(g, a, start, start + n));
        start += n;
      }
      return grads;
    });
  }
  return y;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t axis) {
  KILN_CHECK(!tensors.empty(), ValueError, "stack: needs at least one tensor");
  int64_t a = normalize_axis(axis, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    KILN_CHECK(t.shape() == tensors[0].shape(), ShapeError, "stack: shapes ", tensors[0].shape(),
               " and ", t.shape(), " differ; stack needs equal shapes");
    parts.push_back(unsqueeze(t, a));
  }
  return concat(parts, a);
}

}  // namespace kiln
