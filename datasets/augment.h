// Data augmentation on the device, batch by batch.
#pragma once

#include <cstdint>

#include "kiln/core/random.h"
#include "kiln/core/tensor.h"

namespace kiln::data {

// x [N, C, H, W] -> the same shape, each sample moved by its own (dy, dx), both uniform in
// [-max_shift, max_shift], with `fill` moved in at the edges (the background: for normalised
// MNIST inputs that is -mean / stddev, not 0). The shifts come from `generator`
// (the default one when null) and the whole operation runs as device ops: a padded copy, an
// index grid built with broadcasting i32 arithmetic, and one index_select. Not differentiable
// (it is meant for inputs).
Tensor random_translate(const Tensor& x, int64_t max_shift, double fill = 0.0, Generator* generator = nullptr);

}  // namespace kiln::data
