// The consumer's own model interface, named as kiln's layers/module.h is.
#pragma once

#include "core/tensor.h"

namespace app {
struct Module {
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
};
}  // namespace app
