#include "kiln/autograd/node.h"

#include <atomic>
#include <string>

#include "kiln/autograd/ops.h"

namespace kiln::autograd {

namespace {
std::atomic<bool> anomaly_enabled{false};  // for every thread, as PyTorch's

// "[2, 3] f32" and, when t holds values that are not finite, how many.
std::string describe(const Tensor& t, int64_t nonfinite) {
  std::string s = t.shape().str() + " " + std::string(dtype_name(t.dtype()));
  if (nonfinite > 0) s += " holding " + std::to_string(nonfinite) + " NaN or infinite";
  return s;
}
std::string describe(const Tensor& t) { return t.defined() ? describe(t, count_nonfinite(t)) : "none"; }

// Whether a and b are the same view of the same storage (a saved tensor is a detached handle of
// the op's input or output, not the same TensorImpl).
bool same_view(const Tensor& a, const Tensor& b) {
  return b.defined() && a.storage() == b.storage() && a.offset() == b.offset() && a.shape() == b.shape() &&
         a.strides() == b.strides() && a.dtype() == b.dtype();
}

}  // namespace

std::string SavedTensor::role() const {
  if (input >= 0) return "its input " + std::to_string(input);
  if (output) return "its output";
  if (!name.empty()) return "its " + std::string(name);
  return "a tensor it computed";
}

Tensor Saves::operator()(const Tensor& t, std::string_view name) {
  if (!t.defined()) return t;
  SavedTensor s;
  s.tensor = t.detach();
  s.version = t.version();
  s.name = name;
  tensors_.push_back(s);
  return s.tensor;
}

void check_saved(const Node& node) {
  for (const SavedTensor& s : node.saved) {
    const uint64_t now = s.tensor.version();
    KILN_CHECK(now == s.version, AutogradError, "one of the tensors saved by '", node.op, "' for its backward (",
               s.role(), ", ", s.tensor.shape(), " ", s.tensor.dtype(), ") was modified in place: version ", now,
               ", expected ", s.version, "; an in-place write (copy_, fill_, an optimizer's step) changed it "
               "after the forward: write before the forward, or into a clone()");
  }
}

bool is_anomaly_enabled() { return anomaly_enabled.load(std::memory_order_relaxed); }
void set_detect_anomaly(bool on) { anomaly_enabled.store(on, std::memory_order_relaxed); }

DetectAnomalyGuard::DetectAnomalyGuard() : previous_(is_anomaly_enabled()) { set_detect_anomaly(true); }
DetectAnomalyGuard::~DetectAnomalyGuard() { set_detect_anomaly(previous_); }

void check_backward_anomaly(const Node& node, const Tensor& grad_output, const Grads& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() || !node.inputs[i].needed()) continue;
    const int64_t bad = count_nonfinite(grads[i]);
    KILN_CHECK(bad == 0, NonFiniteError, "anomaly mode: the backward of '", node.op, "' gave ", bad, " NaN or infinite ",
               "value", bad == 1 ? "" : "s", " of ", grads[i].numel(), " in the gradient of its input ", i, " (",
               describe(grads[i], 0), "), from a gradient of its output ", describe(grad_output));
  }
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

bool is_grad_enabled() { return detail::grad_mode(); }

NoGradGuard::NoGradGuard() : previous_(detail::grad_mode()) { detail::set_grad_mode(false); }
NoGradGuard::~NoGradGuard() { detail::set_grad_mode(previous_); }

bool is_recording(std::span<const Tensor> inputs) {
  if (!detail::grad_mode()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(Tensor& output, std::string_view op, std::span<const Tensor> inputs, BackwardFn backward,
            const Saves& saved) {
  auto node = std::make_shared<Node>();
  node->op = op;
  node->saved = saved.tensors();
  for (SavedTensor& s : node->saved) {
    for (size_t i = 0; i < inputs.size() && s.input < 0; ++i)
      if (same_view(s.tensor, inputs[i])) s.input = static_cast<int64_t>(i);
    s.output = s.input < 0 && same_view(s.tensor, output);
  }
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
  if (is_anomaly_enabled()) {
    NoGradGuard no_grad;
    const int64_t bad = count_nonfinite(output);
    if (bad == 0) return;
    std::string ins;
    for (const Tensor& t : inputs) ins += (ins.empty() ? "" : ", ") + describe(t);
    KILN_FAIL(NonFiniteError, "anomaly mode: the forward of '", op, "' gave ", bad, " NaN or infinite value",
              bad == 1 ? "" : "s", " of ", output.numel(), " in its output (", describe(output, 0), ") from inputs ", ins);
  }
}

}  // namespace kiln::autograd
