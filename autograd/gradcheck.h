// Checks backprop against finite differences.
//
// Both checks compare gradients of L(inputs) = sum(f(inputs) * r), with r a fixed random
// tensor: a wrong entry of the vector-Jacobian product shows up for almost every r.
// - gradcheck: central differences, element by element, for every input that requires grad.
//   Use f64 inputs: then eps = 1e-6 leaves errors near 1e-9.
// - gradcheck_directional: one directional derivative per input along a random direction v,
//   (L(x + eps v) - L(x - eps v)) / 2 eps against <dL/dx, v>: two forward passes whatever the
//   size, so it suits large inputs and f32 on the GPU backends.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 1234;  // for r and v
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string message;  // on failure: which input, which element, both values
};

// The function checked: inputs in, one tensor out.
using CheckedFn = std::function<Tensor(const std::vector<Tensor>&)>;

GradcheckResult gradcheck(const CheckedFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});
GradcheckResult gradcheck_directional(const CheckedFn& f, const std::vector<Tensor>& inputs,
                                      const GradcheckOptions& options = {});

}  // namespace kiln::autograd
