// The autograd graph. Each op output that needs a gradient points at a Node: the op's name,
// one edge per input, and a backward closure that maps the output's gradient to the inputs'
// gradients and holds only what it needs (see autograd/formulas.h).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace kiln::autograd {

// One gradient per op input, in order; an undefined Tensor where an input gets none.
using Grads = std::vector<Tensor>;
using BackwardFn = std::function<Grads(const Tensor& grad_output)>;

struct Node;

// Where an input's gradient goes: the node that produced the input, or the leaf itself
// (a tensor the user created with requires_grad), or nowhere (the input needs no gradient).
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool needed() const { return node || leaf; }
};

struct Node {
  std::string_view op;
  std::vector<Edge> inputs;
  std::vector<Shape> input_shapes;  // to check each formula's result
  std::vector<DType> input_dtypes;
  BackwardFn backward;              // emptied by backward() unless the graph is retained
};

// Gradients are recorded unless a NoGradGuard is alive on this thread.
bool is_grad_enabled();

class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// True when grad mode is on and some input requires grad: then the op must record a node.
bool is_recording(std::initializer_list<Tensor> inputs);

// Makes `output` the result of a recorded op: it requires grad and points at a new node.
void record(Tensor& output, std::string_view op, std::initializer_list<Tensor> inputs,
            BackwardFn backward);

}  // namespace kiln::autograd

namespace kiln {
using autograd::NoGradGuard;
}
