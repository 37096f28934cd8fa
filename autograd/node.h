// The autograd graph. Each op output that needs a gradient points at a Node: the op's name,
// one edge per input, the tensors its formula reads (saved, with their versions), and a backward
// closure that maps the output's gradient to the inputs' gradients and holds only what it needs
// (each op writes its own beside it: autograd/ops/).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::autograd {

// One gradient per op input, in order; an undefined Tensor where an input gets none.
using Grads = std::vector<Tensor>;

// What backward tells a formula about its inputs and its incoming gradient, and what the formula
// tells it back.
//
// need[i] says whether input i wants a gradient, so a formula can skip work nobody uses (the
// input gradient of a network's first layer, say).
//
// ReLU's gradient, folded into the pass before it. A node whose formula starts with relu's
// gradient read from its own output y (relu, and matmul or conv2d with a ReLU epilogue:
// Node::relu_output) spends a pass over y on g -> (y > 0 ? g : 0), NaN passing. The formula of a
// node that reads y (a max pool, the next convolution) often writes y's gradient in a kernel of
// its own, which could zero it there for the price of reading y. So:
//   may_mask_relu(i)  input i is such a node's output;
//   masked_relu(i)    the formula returned gradient i already zeroed where input i is <= 0;
//   grad_masked()     every gradient that reached this node was masked so: its formula skips
//                     the pass.
// Masking twice is masking once, so where only some of the gradients reaching a node were masked,
// it masks their sum and the result is the same. The masked gradient of y itself is seen by
// nobody: y is not a leaf, and kiln keeps no gradient of a non-leaf.
class Needed {
 public:
  explicit Needed(std::vector<bool> needed, std::vector<bool> relu_inputs = {}, bool grad_masked = false)
      : needed_(std::move(needed)), relu_inputs_(std::move(relu_inputs)), masked_(needed_.size()),
        grad_masked_(grad_masked) {}
  bool operator[](size_t i) const { return needed_[i]; }
  size_t size() const { return needed_.size(); }
  bool may_mask_relu(size_t i) const { return i < relu_inputs_.size() && relu_inputs_[i]; }
  void masked_relu(size_t i) { masked_[i] = may_mask_relu(i); }
  bool masked(size_t i) const { return masked_[i]; }
  bool grad_masked() const { return grad_masked_; }

 private:
  std::vector<bool> needed_, relu_inputs_, masked_;
  bool grad_masked_ = false;
};

using BackwardFn = std::function<Grads(const Tensor& grad_output, Needed& need)>;

struct Node;

// Where an input's gradient goes: the node that produced the input, or the leaf itself
// (a tensor the user created with requires_grad), or nowhere (the input needs no gradient).
struct Edge {
  std::shared_ptr<Node> node;
  std::shared_ptr<TensorImpl> leaf;
  bool needed() const { return node || leaf; }
};

// A tensor that a node's formula reads, as the op saved it: the version its storage had then
// (core/tensor.h, Storage::version) and what it was to the op, for the error that names it.
struct SavedTensor {
  Tensor tensor;     // detached: the same storage, without a hold on the graph
  uint64_t version = 0;
  int64_t input = -1;     // its position among the op's inputs, or -1
  bool output = false;    // the op's output
  std::string_view name;  // otherwise, what it is to the op ("targets"); empty: a tensor the op computed
  std::string role() const;  // "its input 1", "its output", "its targets", ...
};

// The tensors an op's gradient formula reads, saved as its closure is built. Each is captured
// through a Saves, so that the capture list says what the formula reads and the node knows it:
//
//   autograd::Saves saved;
//   auto gradient = [a = saved(a), b = saved(b)](const Tensor& g, const Needed& need) -> Grads {...};
//   autograd::record(y, "matmul", {a, b}, gradient, saved);
//
// record() works out what each one is to the op (an input, the output) and hands them to the
// node; backward() refuses to run the formula when one was written in place since (check_saved).
// A closure must capture no tensor in any other way.
class Saves {
 public:
  // t detached, noted with its storage's version; `name` says what it is to the op when it is
  // neither an input nor the output. An undefined t is returned as it is and not noted.
  Tensor operator()(const Tensor& t, std::string_view name = {});
  const std::vector<SavedTensor>& tensors() const { return tensors_; }

 private:
  std::vector<SavedTensor> tensors_;
};

// GradFn (core/tensor.h) holds the op's name: what core shows of a node.
struct Node : GradFn {
  std::vector<Edge> inputs;
  std::vector<Shape> input_shapes;  // to check each formula's result
  std::vector<DType> input_dtypes;
  std::vector<SavedTensor> saved;   // what the formula reads; emptied with it
  BackwardFn backward;              // emptied by backward() unless the graph is retained
  // A conversion (to_dtype): its formula is to_dtype(g, input_dtypes[0]), so backward may convert
  // the gradients of many such nodes together instead of running each formula alone.
  bool converts = false;
  // Its formula starts with relu's gradient read from its output (Needed: may_mask_relu).
  bool relu_output = false;

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node() override;  // iterative: a long chain of nodes must not recurse through destructors
};

// The node that produced t (null for a leaf): every GradFn on a tensor is a Node.
inline std::shared_ptr<Node> node_of(const Tensor& t) { return std::static_pointer_cast<Node>(t.grad_fn()); }

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

// Anomaly mode (PyTorch's detect_anomaly), for finding where a NaN is born: while on, every op
// that records a node checks its output, and backward every gradient a formula returns; the first
// that holds NaN or an infinity throws NonFiniteError naming the op and the shapes, and whether
// what came in was finite. Each check waits for the device: a debugging mode, not a training one.
// Ops that record nothing (under NoGradGuard, or on inputs that need no gradient) are not checked.
bool is_anomaly_enabled();
void set_detect_anomaly(bool on);

class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard();
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// Anomaly mode's check of a gradient formula's results (autograd/engine.cpp).
void check_backward_anomaly(const Node& node, const Tensor& grad_output, const Grads& grads);

// Before a formula runs: every tensor its node saved still has the version it was saved at, or
// AutogradError names the op, the tensor (its role, shape and dtype) and both versions. A write
// after the save (copy_, fill_, an optimizer's step, through any view of the same storage) would
// otherwise give a wrong gradient without a word.
void check_saved(const Node& node);

// True when grad mode is on and some input requires grad: then the op must record a node.
bool is_recording(std::span<const Tensor> inputs);
inline bool is_recording(std::initializer_list<Tensor> inputs) {
  return is_recording(std::span<const Tensor>(inputs.begin(), inputs.size()));
}

// Makes `output` the result of a recorded op: it requires grad and points at a new node, which
// keeps `saved`, the tensors that `backward` captured.
void record(Tensor& output, std::string_view op, std::span<const Tensor> inputs, BackwardFn backward,
            const Saves& saved = {});
inline void record(Tensor& output, std::string_view op, std::initializer_list<Tensor> inputs,
                   BackwardFn backward, const Saves& saved = {}) {
  record(output, op, std::span<const Tensor>(inputs.begin(), inputs.size()), std::move(backward), saved);
}

}  // namespace kiln::autograd

namespace kiln {
using autograd::DetectAnomalyGuard;
using autograd::NoGradGuard;
}
