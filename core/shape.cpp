#include "kiln/core/shape.h"

#include <algorithm>

#include "kiln/core/error.h"

namespace kiln {

namespace {

// A shape's sizes must multiply within int64, zeros counted as ones: then its element count, its
// contiguous strides and every offset into it can be counted (a shape [2^40, 2^40] would wrap to 0).
[[noreturn]] void too_large(const Shape& shape) {
  KILN_FAIL(ShapeError, "shape ", shape, " is too large: its sizes multiply past 2^63 - 1, more elements than a "
            "tensor can count");
}

}  // namespace

int64_t Shape::numel() const {
  int64_t n = 1, extent = 1;
  for (int64_t d : dims_)
    if (__builtin_mul_overflow(n, d, &n) || __builtin_mul_overflow(extent, std::max<int64_t>(d, 1), &extent))
      too_large(*this);
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides = shape;
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = step;
    if (__builtin_mul_overflow(step, std::max<int64_t>(shape[i], 1), &step)) too_large(shape);
  }
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(std::vector<int64_t>(rank, 1));
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, ShapeError, op, ": shapes ", a, " and ", b,
               " do not broadcast (dimension ", i, " of the result: ", da, " vs ", db,
               "; sizes must be equal or 1)");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
  int64_t r = std::max<int64_t>(rank, 1);
  KILN_CHECK(axis >= -r && axis < r, ValueError, op, ": axis ", axis,
             " is out of range for a tensor of rank ", rank, " (expected ", -r, " <= axis < ", r, ")");
  return axis < 0 ? axis + r : axis;
}

}  // namespace kiln
