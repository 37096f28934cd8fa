// The consumer's own tensor, named as kiln's core/tensor.h is: kiln must not reach it.
#pragma once

#include <vector>

namespace app {
struct Tensor {
  std::vector<float> values;
};
}  // namespace app
