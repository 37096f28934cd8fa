#include "kiln/autograd/engine.h"

#include <unordered_map>
#include <unordered_set>

#include "kiln/autograd/node.h"
#include "kiln/autograd/ops.h"
#include "kiln/core/backend.h"

namespace kiln::autograd {

namespace {

// Nodes reachable from `root`, each after every node that feeds gradient into it
// (so running the list front to back visits consumers before producers).
std::vector<Node*> reverse_topological_order(Node* root) {
  std::vector<Node*> order;
  std::unordered_set<Node*> seen{root};
  // Iterative depth-first search: a deep graph (a long RNN, say) must not overflow the stack.
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      Node* child = node->inputs[next++].node.get();
      if (child && seen.insert(child).second) stack.emplace_back(child, 0);
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }
  return {order.rbegin(), order.rend()};
}

// Gradients reaching one node from several consumers add up.
void accumulate(Tensor& sum, const Tensor& g) {
  if (!sum.defined()) {
    sum = g;
    return;
  }
  sum = add(sum, g);
}

// A leaf keeps its gradient across steps, so the first gradient it receives must not alias a
// tensor that someone else holds (the same gradient flows to both inputs of an add, say).
// Later gradients add in place.
void accumulate_into_leaf(TensorImpl& leaf, const Tensor& g) {
  Tensor& grad = leaf.grad;
  if (!grad.defined()) {
    bool exclusive = g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous();
    grad = exclusive ? g.detach() : g.clone();
    return;
  }
  grad.backend().binary(BinaryOp::add, grad.ref(), g.ref(), grad.ref());
}

}  // namespace

void backward(const Tensor& root, const Tensor& grad_output, bool retain_graph) {
  KILN_CHECK(root.defined(), AutogradError, "backward: called on an undefined tensor");
  KILN_CHECK(root.requires_grad(), AutogradError, "backward: the tensor of shape ", root.shape(),
             " does not require grad: no input of the ops that made it requires grad (or they "
             "ran under NoGradGuard)");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    KILN_CHECK(root.numel() == 1, AutogradError, "backward: without an explicit gradient the "
               "tensor must hold one element (a loss); this one has shape ", root.shape());
    seed = ones(root.shape(), TensorOptions(root.dtype()).device(root.device()));
  }
  KILN_CHECK(seed.shape() == root.shape() && seed.dtype() == root.dtype(), ShapeError,
             "backward: the gradient has shape ", seed.shape(), " and dtype ", seed.dtype(),
             "; the tensor has shape ", root.shape(), " and dtype ", root.dtype());

  NoGradGuard no_grad;  // formulas are ops too; their results need no graph of their own
  if (root.is_leaf()) {
    accumulate_into_leaf(*root.impl(), seed);
    return;
  }

  Node* start = node_of(root).get();
  std::unordered_map<Node*, Tensor> pending{{start, seed}};
  for (Node* node : reverse_topological_order(start)) {
    auto it = pending.find(node);
    if (it == pending.end()) continue;  // no gradient reached it (every path was cut)
    Tensor grad = std::move(it->second);
    pending.erase(it);

    KILN_CHECK(node->backward, AutogradError, "backward through '", node->op, "': its graph was "
               "freed by an earlier backward(); pass retain_graph = true to run backward twice");
    std::vector<bool> needed;
    for (const Edge& e : node->inputs) needed.push_back(e.needed());
    Grads grads = node->backward(grad, needed);
    if (!retain_graph) node->backward = nullptr;
    KILN_CHECK(grads.size() == node->inputs.size(), AutogradError, "backward of '", node->op,
               "' returned ", grads.size(), " gradients for ", node->inputs.size(), " inputs");

    for (size_t i = 0; i < grads.size(); ++i) {
      const Edge& edge = node->inputs[i];
      if (!edge.needed()) continue;
      const Tensor& g = grads[i];
      KILN_CHECK(g.defined(), AutogradError, "backward of '", node->op, "' gave no gradient for ",
                 "input ", i, ", which requires one");
      KILN_CHECK(g.shape() == node->input_shapes[i] && g.dtype() == node->input_dtypes[i],
                 AutogradError, "backward of '", node->op, "': gradient ", i, " has shape ",
                 g.shape(), " and dtype ", g.dtype(), ", but the input has shape ",
                 node->input_shapes[i], " and dtype ", node->input_dtypes[i]);
      if (edge.node) accumulate(pending[edge.node.get()], g);
      else accumulate_into_leaf(*edge.leaf, g);
    }
  }
}

}  // namespace kiln::autograd

namespace kiln {

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward(*this, grad, retain_graph);
}

}  // namespace kiln
