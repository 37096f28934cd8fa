// The consumer's own optimizer settings, named as kiln's optim/optimizer.h is.
#pragma once

namespace app {
struct Optimizer {
  double learning_rate = 0.5;
};
}  // namespace app
