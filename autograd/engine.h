// Reverse-mode differentiation: walks the graph from a root in reverse topological order,
// calls each node's backward closure once with the sum of the gradients that reached it, and
// accumulates into the leaves' grad(). Gradients always accumulate: call zero_grad() (or an
// optimizer's) between steps.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::autograd {

// grad_output must have root's shape; when undefined, root must hold one element and the
// gradient is 1. Formulas run with grad mode off. Unless retain_graph, each visited node drops
// its closure (and the tensors it saved) once it has run.
void backward(const Tensor& root, const Tensor& grad_output = {}, bool retain_graph = false);

}  // namespace kiln::autograd
