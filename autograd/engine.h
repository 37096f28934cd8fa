// Reverse-mode differentiation: walks the graph from a root in reverse topological order,
// calls each node's backward closure once with the sum of the gradients that reached it, and
// accumulates into the leaves' grad(). Gradients always accumulate: call zero_grad() (or an
// optimizer's) between steps. Hooks on leaves and queued callbacks let a caller act during the
// walk (data-parallel training all-reduces each gradient as soon as it is final).
#pragma once

#include <functional>

#include "kiln/core/tensor.h"

namespace kiln::autograd {

// grad_output must have root's shape; when undefined, root must hold one element and the
// gradient is 1. Formulas run with grad mode off. A node whose saved tensors were written in
// place since its op ran is refused (AutogradError, autograd/node.h: check_saved) before its
// formula runs. Unless retain_graph, each visited node drops its closure (and the tensors it
// saved) once it has run.
// Each leaf's post-accumulate-grad hooks (Tensor::register_post_accumulate_grad_hook) run, in
// registration order, as soon as the walk has sent that leaf its last gradient of this call, and
// only if it sent it one. Then the callbacks queued during the call run (queue_callback).
void backward(const Tensor& root, const Tensor& grad_output = {}, bool retain_graph = false);

// Queues fn to run once at the end of the backward() running on this thread: after the graph
// walk and every hook, before backward() returns, in queue order, with grad mode off. How
// data-parallel training finishes its last gradient buckets (PyTorch's queue_callback). Only
// valid while a backward() runs on this thread (from a hook, or from another callback: that one
// runs too); elsewhere it throws AutogradError. A backward() started inside a hook keeps a queue
// of its own and runs it before it returns. When the walk, a hook or a callback throws, the
// callbacks still queued are dropped.
void queue_callback(std::function<void()> fn);

}  // namespace kiln::autograd
