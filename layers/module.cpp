#include "kiln/layers/module.h"

#include <cxxabi.h>

#include <any>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <typeinfo>

#include "kiln/autograd/function.h"

namespace kiln::nn {

namespace {

// "kiln::nn::Linear" -> "Linear", "(anonymous namespace)::Net" -> "Net": the name a user wrote.
std::string demangled_class_name(const std::type_info& type) {
  int status = 0;
  char* raw = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && raw ? raw : type.name();
  std::free(raw);
  size_t template_at = name.find('<');
  size_t scope = name.rfind("::", template_at);
  return scope == std::string::npos ? name : name.substr(scope + 2);
}

// Converts t's data (and its gradient) with fn, in place: every handle to t sees the result.
void convert_in_place(Tensor& t, const std::function<Tensor(const Tensor&)>& fn) {
  Tensor grad = t.grad();
  t.set_data(fn(t.detach()));
  if (grad.defined()) t.set_grad(fn(grad));
}

std::string with_thousands(int64_t n) {  // 1199882 -> "1,199,882"
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string Module::name() const { return name_.empty() ? demangled_class_name(typeid(*this)) : name_; }

Tensor Module::forward(const Tensor&) {
  KILN_FAIL(Error, name(), " has no forward(const Tensor&): it takes other inputs, call its own "
            "forward(...) overload");
}

// ---- hooks ----

struct ModuleHooks {
  uint64_t next_id = 1;
  std::vector<std::pair<uint64_t, Module::ForwardPreHook>> pre;
  std::vector<std::pair<uint64_t, Module::ForwardHook>> post;
  std::vector<std::pair<uint64_t, Module::BackwardHook>> backward;
  bool empty() const { return pre.empty() && post.empty() && backward.empty(); }
};

void Module::HookHandle::remove() {
  const std::shared_ptr<ModuleHooks> hooks = table_.lock();
  if (!hooks) return;
  auto drop = [this](auto& list) {
    std::erase_if(list, [this](const auto& entry) { return entry.first == id_; });
  };
  drop(hooks->pre);
  drop(hooks->post);
  drop(hooks->backward);
}

namespace {

// A call's backward hooks, shared by the two pass-through ops around the module: the hooks as
// they were at the call, and the output's gradient once backward has reached the output.
struct BackwardCall {
  Module* module = nullptr;
  std::vector<Module::BackwardHook> hooks;
  Tensor grad_output;
  bool input_tracked = false;  // the input needs a gradient: the hooks run when it is known
  Tensor run(Tensor grad_input) {
    for (const auto& hook : hooks)
      if (std::optional<Tensor> replaced = hook(*module, grad_input, grad_output)) grad_input = *replaced;
    return grad_input;
  }
};

std::shared_ptr<BackwardCall> call_of(autograd::Context& ctx) {
  return std::any_cast<std::shared_ptr<BackwardCall>>(ctx.data.at("call"));
}

// The identity on the module's output: its backward keeps the output's gradient, and where the
// input needs none, runs the hooks there (with no input gradient, as PyTorch gives None).
struct HookOutput : autograd::Function<HookOutput> {
  static constexpr const char* name = "module backward hook (output)";
  static Tensor forward(autograd::Context& ctx, const Tensor& y, const std::shared_ptr<BackwardCall>& call) {
    ctx.data["call"] = call;
    return y;
  }
  static autograd::Grads backward(autograd::Context& ctx, const Tensor& grad) {
    const std::shared_ptr<BackwardCall> call = call_of(ctx);
    call->grad_output = grad;
    if (!call->input_tracked) call->run(Tensor());
    return {grad};
  }
};

// The identity on the module's input: its backward runs the hooks on the input's gradient.
struct HookInput : autograd::Function<HookInput> {
  static constexpr const char* name = "module backward hook (input)";
  static Tensor forward(autograd::Context& ctx, const Tensor& x, const std::shared_ptr<BackwardCall>& call) {
    ctx.data["call"] = call;
    return x;
  }
  static autograd::Grads backward(autograd::Context& ctx, const Tensor& grad) { return {call_of(ctx)->run(grad)}; }
};

template <class List, class Hook>
Module::HookHandle add_hook(std::shared_ptr<ModuleHooks>& hooks, List ModuleHooks::*list, Hook hook) {
  KILN_CHECK(hook != nullptr, ValueError, "register hook: the hook is empty");
  if (!hooks) hooks = std::make_shared<ModuleHooks>();
  const uint64_t id = hooks->next_id++;
  ((*hooks).*list).emplace_back(id, std::move(hook));
  return {hooks, id};
}

}  // namespace

Module::HookHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  return add_hook(hooks_, &ModuleHooks::pre, std::move(hook));
}
Module::HookHandle Module::register_forward_hook(ForwardHook hook) {
  return add_hook(hooks_, &ModuleHooks::post, std::move(hook));
}
Module::HookHandle Module::register_full_backward_hook(BackwardHook hook) {
  return add_hook(hooks_, &ModuleHooks::backward, std::move(hook));
}

bool Module::has_hooks() const { return hooks_ && !hooks_->empty(); }

Tensor Module::operator()(const Tensor& x) {
  if (!has_hooks()) return forward(x);
  const ModuleHooks hooks = *hooks_;  // as they are now: a hook may add or remove hooks
  Tensor input = x;
  for (const auto& [id, hook] : hooks.pre)
    if (std::optional<Tensor> replaced = hook(*this, input)) input = *replaced;
  std::shared_ptr<BackwardCall> call;
  if (!hooks.backward.empty() && autograd::is_grad_enabled()) {
    call = std::make_shared<BackwardCall>();
    call->module = this;
    for (const auto& [id, hook] : hooks.backward) call->hooks.push_back(hook);
    call->input_tracked = input.defined() && input.requires_grad();
    if (call->input_tracked) input = HookInput::apply(input, call);
  }
  Tensor output = forward(input);
  for (const auto& [id, hook] : hooks.post)
    if (std::optional<Tensor> replaced = hook(*this, input, output)) output = *replaced;
  if (call) output = HookOutput::apply(output, call);
  return output;
}

// ---- registration ----

void Module::check_new_name(const std::string& name, const char* what) const {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, what, ": name '",
             name, "' must be non-empty and contain no '.' (dots separate the levels of the tree)");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& entry) { return entry.first == name; });
  };
  KILN_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), ValueError, what, ": ",
             this->name(), " already has a parameter, buffer or module named '", name, "'");
}

Tensor Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "register_parameter");
  KILN_CHECK(tensor.defined(), ValueError, "register_parameter: '", name, "' of ", this->name(),
             " is an undefined tensor; leave an optional parameter unregistered");
  // A parameter is a leaf: an op's result would pass gradients on instead of keeping them.
  if (!tensor.is_leaf()) tensor = tensor.detach();
  tensor.requires_grad_(requires_grad);
  parameters_.emplace_back(std::move(name), tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor) {
  check_new_name(name, "register_buffer");
  KILN_CHECK(tensor.defined(), ValueError, "register_buffer: '", name, "' of ", this->name(),
             " is an undefined tensor");
  buffers_.emplace_back(std::move(name), tensor);
  return tensor;
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_new_name(name, "register_module");
  KILN_CHECK(module != nullptr, ValueError, "register_module: '", name, "' of ", this->name(),
             " is a null module");
  KILN_CHECK(module.get() != this, ValueError, "register_module: ", this->name(),
             " cannot be its own child");
  children_.emplace_back(std::move(name), std::move(module));
}

// ---- what the module holds ----

void Module::collect_parameters(const std::string& prefix, bool recurse, NamedTensors& out) const {
  for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect_parameters(prefix + name + ".", true, out);
}

void Module::collect_buffers(const std::string& prefix, bool recurse, NamedTensors& out) const {
  for (const auto& [name, t] : buffers_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect_buffers(prefix + name + ".", true, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors all, unique;
  collect_parameters("", recurse, all);
  std::set<const TensorImpl*> seen;
  for (auto& entry : all)
    if (seen.insert(entry.second.impl()).second) unique.push_back(std::move(entry));
  return unique;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect_buffers("", recurse, out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, child] : children_) child->apply(fn);
  fn(*this);
}

// ---- mode, placement, gradients ----

void Module::train(bool on) {
  apply([on](Module& m) { m.training_ = on; });
}

void Module::to(const Device& device) {
  NoGradGuard no_grad;
  auto move = [&](const Tensor& t) { return t.to(device); };
  apply([&](Module& m) {
    for (auto& [name, t] : m.parameters_) convert_in_place(t, move);
    for (auto& [name, t] : m.buffers_) convert_in_place(t, move);
  });
}

void Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), DTypeError, "Module::to: converts floating-point tensors to a "
             "floating dtype, got ", dtype);
  NoGradGuard no_grad;
  auto convert = [&](const Tensor& t) { return t.to(dtype); };
  apply([&](Module& m) {
    for (auto& [name, t] : m.parameters_) convert_in_place(t, convert);
    for (auto& [name, t] : m.buffers_)
      if (is_floating(t.dtype())) convert_in_place(t, convert);
  });
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.zero_grad();
}

// ---- checkpoints ----

void Module::collect_state(const std::string& prefix, NamedTensors& out) const {
  for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  for (const auto& [name, t] : buffers_) out.emplace_back(prefix + name, t);
  for (const auto& [name, child] : children_) child->collect_state(prefix + name + ".", out);
}

StateDict Module::state_dict() const {
  StateDict state;
  collect_state("", state);
  for (auto& entry : state) entry.second = entry.second.detach();
  return state;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  NamedTensors own;
  collect_state("", own);
  std::vector<std::string> problems;
  std::map<std::string, const Tensor*> given;
  for (const auto& [key, t] : state)
    if (!given.emplace(key, &t).second) problems.push_back("key '" + key + "' appears twice");

  std::vector<std::pair<Tensor, const Tensor*>> copies;  // (destination, source)
  std::set<std::string> expected;
  for (const auto& [key, dst] : own) {
    expected.insert(key);
    auto it = given.find(key);
    if (it == given.end()) {
      if (strict) problems.push_back("missing key '" + key + "'");
      continue;
    }
    const Tensor& src = *it->second;
    if (!src.defined()) {
      problems.push_back("'" + key + "' is an undefined tensor");
    } else if (src.shape() != dst.shape()) {
      problems.push_back(detail::concat("shape mismatch for '", key, "': the state has ", src.shape(),
                                        ", the model ", dst.shape()));
    } else if (is_floating(src.dtype()) != is_floating(dst.dtype())) {
      problems.push_back(detail::concat("dtype mismatch for '", key, "': the state has ", src.dtype(),
                                        ", the model ", dst.dtype(),
                                        " (floating-point and integer values do not convert)"));
    } else {
      copies.emplace_back(dst, &src);
    }
  }
  if (strict)
    for (const auto& [key, t] : state)
      if (!expected.count(key)) problems.push_back("unexpected key '" + key + "'");

  if (!problems.empty()) {
    std::string list;
    for (const std::string& p : problems) list += "\n  " + p;
    KILN_FAIL(ValueError, "load_state_dict: ", problems.size(), problems.size() == 1 ? " problem" : " problems",
              " loading into ", name(), ", nothing was loaded:", list, "\n");
  }
  NoGradGuard no_grad;
  for (auto& [dst, src] : copies) dst.copy_(src->to(dst.device()));  // copy_ converts the dtype
}

// ---- printing ----

namespace {
// One line of the printed tree: the module's text, then (where it holds parameters) how many
// and their shapes, aligned in columns.
struct SummaryLine {
  explicit SummaryLine(std::string text_, int64_t count_ = -1, std::string shapes_ = {})
      : text(std::move(text_)), count(count_), shapes(std::move(shapes_)) {}
  std::string text;
  int64_t count;  // -1: no parameters on this line
  std::string shapes;
};

SummaryLine parameter_line(std::string text, const NamedTensors& params) {
  SummaryLine line(std::move(text), 0);
  for (const auto& [name, t] : params) {
    if (!line.shapes.empty()) line.shapes += ", ";
    line.shapes += name + " " + t.shape().str() + (t.requires_grad() ? "" : " (frozen)");
    line.count += t.numel();
  }
  return line;
}
}  // namespace

std::string Module::summary() const {
  std::vector<SummaryLine> lines;
  std::function<void(const Module&, const std::string&, const std::string&)> walk =
      [&](const Module& m, const std::string& pad, const std::string& label) {
        std::string head = pad + label + m.name() + "(";
        std::string extra = m.extra_repr();
        if (m.children_.empty()) {
          std::string text = head + extra + ")";
          lines.push_back(m.parameters_.empty() ? SummaryLine(text) : parameter_line(text, m.parameters_));
          return;
        }
        // A module with children prints one line per child, as PyTorch's repr.
        lines.emplace_back(head);
        std::string inner = pad + "  ";
        if (!extra.empty()) lines.emplace_back(inner + extra);
        for (const auto& [name, t] : m.parameters_)
          lines.push_back(parameter_line(inner + "(" + name + "): Parameter", {{name, t}}));
        for (const auto& [name, child] : m.children_) walk(*child, inner, "(" + name + "): ");
        lines.emplace_back(pad + ")");
      };
  walk(*this, "", "");

  size_t text_width = 0, count_width = 0;
  for (const SummaryLine& l : lines) {
    if (l.count < 0) continue;
    text_width = std::max(text_width, l.text.size());
    count_width = std::max(count_width, with_thousands(l.count).size());
  }
  std::ostringstream out;
  for (const SummaryLine& l : lines) {
    out << l.text;
    if (l.count >= 0) {
      std::string n = with_thousands(l.count);
      out << std::string(text_width - l.text.size() + 2 + count_width - n.size(), ' ') << n << "  " << l.shapes;
    }
    out << "\n";
  }
  int64_t total = 0, trainable = 0;
  for (const Tensor& p : parameters()) {
    total += p.numel();
    if (p.requires_grad()) trainable += p.numel();
  }
  out << "Total parameters: " << with_thousands(total);
  if (trainable != total) out << " (trainable: " << with_thousands(trainable) << ")";
  out << "\n";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Module& module) { return out << module.summary(); }

}  // namespace kiln::nn
