// Helpers shared by the ops' source files (not part of the public API).
#pragma once

#include <string_view>

#include "kiln/autograd/formulas.h"
#include "kiln/autograd/node.h"
#include "kiln/core/backend.h"
#include "kiln/autograd/ops.h"

namespace kiln::detail {

void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& x);
// A contiguous tensor of this shape, dtype and device.
Tensor empty_as(const Shape& shape, const Tensor& like, DType dtype);
inline Tensor empty_as(const Shape& shape, const Tensor& like) { return empty_as(shape, like, like.dtype()); }
// Normalised, sorted, de-duplicated axes; all axes when `axes` is empty.
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op);
// x's shape with each reduced axis set to 1 (keepdim) or removed.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim);

}  // namespace kiln::detail
