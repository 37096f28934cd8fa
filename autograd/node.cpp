#include "kiln/autograd/node.h"

namespace kiln::autograd {

namespace {
thread_local bool grad_enabled = true;
}

Node::~Node() {
  // Freeing a chain of N nodes through shared_ptr destructors recurses N deep. Instead, take
  // over every input node this one solely owns and free them one by one from a local stack.
  std::vector<std::shared_ptr<Node>> orphans;
  auto adopt = [&orphans](Node& node) {
    for (Edge& e : node.inputs)
      if (e.node && e.node.use_count() == 1) orphans.push_back(std::move(e.node));
  };
  adopt(*this);
  while (!orphans.empty()) {
    std::shared_ptr<Node> node = std::move(orphans.back());
    orphans.pop_back();
    adopt(*node);
  }  // `node` dies here with no sole-owned inputs left, so its destructor does not recurse
}

bool is_grad_enabled() { return grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }

bool is_recording(std::span<const Tensor> inputs) {
  if (!grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(Tensor& output, std::string_view op, std::span<const Tensor> inputs, BackwardFn backward) {
  auto node = std::make_shared<Node>();
  node->op = op;
  for (const Tensor& t : inputs) {
    Edge edge;
    if (t.defined() && t.requires_grad()) {
      if (t.grad_fn()) edge.node = node_of(t);
      else edge.leaf = t.impl_ptr();
    }
    node->inputs.push_back(std::move(edge));
    node->input_shapes.push_back(t.defined() ? t.shape() : Shape{});
    node->input_dtypes.push_back(t.defined() ? t.dtype() : DType::f32);
  }
  node->backward = std::move(backward);
  output.impl()->requires_grad = true;
  output.impl()->grad_fn = std::move(node);
}

}  // namespace kiln::autograd
