#include "kiln/autograd/engine.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kiln/autograd/autocast.h"
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
  grad.storage()->bump_version();  // a graph that saved this gradient must not read the sum
}

// The callback queues of the backward() calls running on this thread, innermost last: a hook
// may call backward() itself, and that call's callbacks must run before it returns.
thread_local std::vector<std::vector<std::function<void()>>*> callback_queues;

// One backward()'s queue, on the stack from its start to its end however it ends (an exception
// drops the callbacks still queued).
class CallbackScope {
 public:
  CallbackScope() { callback_queues.push_back(&queue_); }
  ~CallbackScope() { callback_queues.pop_back(); }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

  // Front to back, including what the callbacks queue while it runs.
  void run() {
    for (size_t i = 0; i < queue_.size(); ++i) {
      std::function<void()> fn = std::move(queue_[i]);  // the queue may grow (and move) in fn
      fn();
    }
    queue_.clear();
  }

 private:
  std::vector<std::function<void()>> queue_;
};

// A leaf's post-accumulate-grad hooks, in registration order. They run from a copy, so a hook
// may add or remove hooks (its own included) without breaking the loop.
void run_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  auto hooks = leaf->post_accumulate_grad_hooks;
  Tensor handle(leaf);
  for (auto& entry : hooks) entry.second(handle);
}

// For each leaf that has hooks: the edges into it, from the nodes this walk visits, not yet
// processed, and whether one of them brought a gradient. Its gradient is final (its hooks may
// fire) when none is left.
struct LeafWait {
  size_t edges_left = 0;
  bool reached = false;
};
using LeafWaits = std::unordered_map<TensorImpl*, LeafWait>;

// One pass over the edges: leaves without hooks (the common case) cost a test each.
LeafWaits count_leaf_edges(const std::vector<Node*>& order) {
  LeafWaits waits;
  for (Node* node : order)
    for (const Edge& e : node->inputs)
      if (e.leaf && !e.leaf->post_accumulate_grad_hooks.empty()) ++waits[e.leaf.get()].edges_left;
  return waits;
}

// An edge into `leaf` processed: it brought a gradient (its node ran) or not (the node was
// skipped). The last one fires the hooks, if any edge brought a gradient.
void edge_done(LeafWaits& waits, const std::shared_ptr<TensorImpl>& leaf, bool brought_gradient) {
  auto it = waits.find(leaf.get());
  if (it == waits.end()) return;
  it->second.reached = it->second.reached || brought_gradient;
  if (--it->second.edges_left == 0 && it->second.reached) run_hooks(leaf);
}

// A model under autocast casts each parameter to bf16, so each parameter's gradient comes back
// through a conversion node into its leaf: one small conversion launch each, a dozen a step.
// Where the leaf has no hooks (nobody waits for its gradient before the walk ends) the walk holds
// such gradients back and converts them at its end, together: one to_dtype of a list, one launch
// on CUDA. The values are the same; only when they arrive changes. Anomaly mode, which checks each
// formula's result as it runs, converts each at once.
struct HeldConversion {
  Tensor grad;  // in the conversion's output dtype
  std::shared_ptr<TensorImpl> leaf;
  DType to;
};

bool holds_back(const Node& node) {
  return node.converts && node.inputs.size() == 1 && node.inputs[0].leaf &&
         node.inputs[0].leaf->post_accumulate_grad_hooks.empty() && !is_anomaly_enabled();
}

void convert_held(std::vector<HeldConversion>& held) {
  while (!held.empty()) {
    const DType to = held.front().to;  // one list per dtype converted to
    std::vector<Tensor> grads;
    std::vector<std::shared_ptr<TensorImpl>> leaves;
    std::vector<HeldConversion> rest;
    for (HeldConversion& h : held) {
      if (h.to != to) {
        rest.push_back(std::move(h));
        continue;
      }
      grads.push_back(std::move(h.grad));
      leaves.push_back(std::move(h.leaf));
    }
    held = std::move(rest);
    std::vector<Tensor> converted = to_dtype(grads, to);
    grads.clear();  // the converted gradients alone hold their storage: the leaves keep them uncopied
    for (size_t i = 0; i < leaves.size(); ++i) accumulate_into_leaf(*leaves[i], std::exchange(converted[i], Tensor()));
  }
}

// The gradient reaching a node so far, and whether every part of it came with the node's relu
// mask applied (Needed: masked_relu); the root's seed did not.
struct Pending {
  Tensor grad;
  bool masked = true;
};

// The walk from a non-leaf root: every node reachable from `start`, consumers first.
void walk(Node* start, const Tensor& seed, bool retain_graph) {
  std::vector<Node*> order = reverse_topological_order(start);
  LeafWaits waits = count_leaf_edges(order);
  std::unordered_map<Node*, Pending> pending{{start, Pending{seed, false}}};
  std::vector<HeldConversion> held;
  for (Node* node : order) {
    auto it = pending.find(node);
    if (it == pending.end()) {  // no gradient reached it (every path was cut)
      if (!waits.empty())
        for (const Edge& e : node->inputs)
          if (e.leaf) edge_done(waits, e.leaf, false);
      continue;
    }
    Tensor grad = std::move(it->second.grad);
    const bool grad_masked = node->relu_output && it->second.masked;
    pending.erase(it);

    KILN_CHECK(node->backward, AutogradError, "backward through '", node->op, "': its graph was "
               "freed by an earlier backward(); pass retain_graph = true to run backward twice");
    if (holds_back(*node)) {
      if (!retain_graph) node->backward = nullptr;
      held.push_back({std::move(grad), node->inputs[0].leaf, node->input_dtypes[0]});
      continue;
    }
    check_saved(*node);
    std::vector<bool> needed, relu_inputs;
    for (const Edge& e : node->inputs) {
      needed.push_back(e.needed());
      relu_inputs.push_back(e.node && e.node->relu_output);
    }
    Needed need(std::move(needed), std::move(relu_inputs), grad_masked);
    Grads grads = node->backward(grad, need);
    if (!retain_graph) {
      node->backward = nullptr;
      node->saved.clear();
    }
    KILN_CHECK(grads.size() == node->inputs.size(), AutogradError, "backward of '", node->op,
               "' returned ", grads.size(), " gradients for ", node->inputs.size(), " inputs");
    if (is_anomaly_enabled()) check_backward_anomaly(*node, grad, grads);
    // Let go of the incoming gradient: a view of it passed on (a transpose's) then owns its
    // storage alone, and a leaf can keep it without a copy (accumulate_into_leaf).
    grad = Tensor();

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
      if (edge.node) {
        Pending& p = pending[edge.node.get()];
        accumulate(p.grad, g);
        p.masked = p.masked && need.masked(i);
      } else {
        accumulate_into_leaf(*edge.leaf, g);
        if (!waits.empty()) edge_done(waits, edge.leaf, true);
      }
    }
  }
  convert_held(held);
}

// The seed of a loss's backward: ones of its shape, one tensor per device, dtype and shape, made
// once and never written (a formula reads the gradient it is given, and a leaf keeps a copy of one
// that someone else holds: accumulate_into_leaf), so that a training step's backward launches no
// fill for it, captured or not. Made outside captures only: inside one, a new tensor's fill runs at
// the replays alone (a captured step's first, eager call has made it by then).
Tensor seed_of(const Tensor& root) {
  static std::mutex mutex;
  // never destroyed: at exit its tensors would outlive their backends
  static auto& seeds = *new std::map<std::string, Tensor>();
  const std::string key = detail::concat(root.device(), " ", root.dtype(), " ", root.shape());
  const TensorOptions options = TensorOptions(root.dtype()).device(root.device());
  std::lock_guard<std::mutex> lock(mutex);
  Tensor& seed = seeds[key];
  if (seed.defined()) return seed;
  if (root.backend().capture()) return ones(root.shape(), options);
  seed = ones(root.shape(), options);
  return seed;
}

}  // namespace

void queue_callback(std::function<void()> fn) {
  KILN_CHECK(!callback_queues.empty(), AutogradError, "queue_callback: no backward() is running "
             "on this thread; queue callbacks from a hook (or from another callback) while one runs");
  KILN_CHECK(fn != nullptr, ValueError, "queue_callback: the callback is empty");
  callback_queues.back()->push_back(std::move(fn));
}

void backward(const Tensor& root, const Tensor& grad_output, bool retain_graph) {
  KILN_CHECK(root.defined(), AutogradError, "backward: called on an undefined tensor");
  KILN_CHECK(root.requires_grad(), AutogradError, "backward: the tensor of shape ", root.shape(),
             " does not require grad: no input of the ops that made it requires grad (or they "
             "ran under NoGradGuard)");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    KILN_CHECK(root.numel() == 1, AutogradError, "backward: without an explicit gradient the "
               "tensor must hold one element (a loss); this one has shape ", root.shape());
    seed = seed_of(root);
  }
  KILN_CHECK(seed.shape() == root.shape() && seed.dtype() == root.dtype(), ShapeError,
             "backward: the gradient has shape ", seed.shape(), " and dtype ", seed.dtype(),
             "; the tensor has shape ", root.shape(), " and dtype ", root.dtype());

  NoGradGuard no_grad;  // formulas, hooks and callbacks run with grad mode off
  AutocastGuard no_autocast(DType::bf16, false);  // and in the dtypes their forward saw (autograd/autocast.h)
  CallbackScope callbacks;
  if (root.is_leaf()) {
    accumulate_into_leaf(*root.impl(), seed);
    if (!root.impl()->post_accumulate_grad_hooks.empty()) run_hooks(root.impl_ptr());
  } else {
    walk(node_of(root).get(), seed, retain_graph);
  }
  callbacks.run();
}

}  // namespace kiln::autograd

namespace kiln {

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward(*this, grad, retain_graph);
}

}  // namespace kiln
