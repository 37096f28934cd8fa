// Gradient clipping by norm: torch.nn.utils.clip_grad_norm_.
#pragma once

#include <limits>
#include <vector>

#include "kiln/autograd/ops.h"

namespace kiln::optim {

// Scales the gradients of `params` in place so that their joint norm is at most max_norm, and
// returns the norm they had before, as a one-element tensor on the first gradient's device and
// in its dtype (0 on the CPU when no parameter has a gradient). As PyTorch:
//   total = norm([norm(g_1), ..., norm(g_n)])   (norm of order norm_type; inf: the largest |g|)
//   g_i *= min(max_norm / (total + 1e-6), 1)
// All of it runs as ops on the device, so the host waits for nothing, unless
// error_if_nonfinite: then the norm is read back and a NaN or infinite one throws ValueError
// (naming the norm) before any gradient changes. Parameters without a gradient are skipped.
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                      bool error_if_nonfinite = false);

inline constexpr double kInfNorm = std::numeric_limits<double>::infinity();

}  // namespace kiln::optim
