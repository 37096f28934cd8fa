// Module: the base of every layer and model, as in PyTorch's C++ frontend.
//
// A module owns named parameters (leaves that require grad), named buffers (state that is saved
// but not trained, such as BatchNorm's running statistics) and named child modules, all kept in
// registration order. That order is the contract: parameters() lists the same tensors in the
// same order on every rank (what data-parallel gradient reduction relies on), and state_dict()
// produces PyTorch's keys in PyTorch's order ("conv1.weight", "0.bias"), so checkpoints line up
// with a PyTorch model of the same structure.
//
//   struct Net : nn::Module {
//     Net() {
//       fc1 = register_module("fc1", std::make_shared<nn::Linear>(784, 128));
//       fc2 = register_module("fc2", std::make_shared<nn::Linear>(128, 10));
//     }
//     Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }
//     std::shared_ptr<nn::Linear> fc1, fc2;
//   };
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/autograd/node.h"
#include "kiln/autograd/ops.h"

namespace kiln::nn {

struct ModuleHooks;  // a module's hooks (module.cpp)

// Named tensors in a fixed order: parameters, buffers, state dicts.
using StateDict = NamedTensors;  // kiln::NamedTensors (core/tensor.h)

class Module {
 public:
  Module() = default;
  // The name printed by summary() and used in errors; by default the class name (demangled).
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  // Not copyable: a copy would share every tensor and silently train the same weights twice.
  // Movable, so a layer built in place can be handed to a Sequential by value.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = default;
  Module& operator=(Module&&) = default;

  std::string name() const;

  // ---- the forward pass ----
  // Layers that map one tensor to one tensor override this. The default throws: a module that
  // takes other inputs (a loss takes input and target) defines its own forward overloads.
  virtual Tensor forward(const Tensor& x);
  // forward(x) with the module's hooks around it (below); Sequential calls its modules so.
  Tensor operator()(const Tensor& x);

  // ---- hooks, as PyTorch's (they run when the module is called, m(x), not on m.forward(x)) ----
  // Before forward: the input, and a replacement for it or nothing.
  using ForwardPreHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input)>;
  // After forward: the input and output, and a replacement for the output or nothing.
  using ForwardHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input, const Tensor& output)>;
  // In backward, once the gradient of the module's input is known (PyTorch's full backward hook):
  // that gradient (undefined where the input needs none) and the output's, and a replacement for
  // the input's gradient or nothing. The module must outlive the backward.
  using BackwardHook =
      std::function<std::optional<Tensor>(Module& module, const Tensor& grad_input, const Tensor& grad_output)>;
  // What a register_*_hook returns: remove() takes the hook away (a handle outliving its module
  // does nothing).
  class HookHandle {
   public:
    HookHandle() = default;
    HookHandle(std::weak_ptr<ModuleHooks> table, uint64_t id) : table_(std::move(table)), id_(id) {}
    void remove();

   private:
    std::weak_ptr<ModuleHooks> table_;
    uint64_t id_ = 0;
  };
  HookHandle register_forward_pre_hook(ForwardPreHook hook);
  HookHandle register_forward_hook(ForwardHook hook);
  HookHandle register_full_backward_hook(BackwardHook hook);
  bool has_hooks() const;

  // ---- registration (names must be unique within a module and contain no '.') ----
  // Makes `tensor` a leaf parameter (a tensor an op produced is detached first, sharing its data)
  // that requires grad unless told otherwise, and returns the handle the module keeps.
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  // State that is saved and moved with the module but not trained. Any dtype.
  Tensor register_buffer(std::string name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module: M must derive from nn::Module");
    add_child(std::move(name), module);
    return module;
  }

  // ---- what the module holds ----
  // Parameters in registration order: a module's own first, then each child's, depth first.
  // A tensor registered twice (tied weights) is listed once, as in PyTorch.
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;  // dotted names: "fc1.weight"
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // Calls fn on every descendant, then on this module (PyTorch's order), e.g. for a custom init.
  void apply(const std::function<void(Module&)>& fn);

  // ---- mode, placement, gradients ----
  // Training mode (the default) or evaluation mode, for this module and all descendants:
  // Dropout is the identity and BatchNorm uses its running statistics in evaluation.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves (converts) every parameter and buffer, and their gradients, in place: the handles
  // that layers and optimizers hold stay valid. to(dtype) converts floating-point tensors only
  // (BatchNorm's num_batches_tracked stays i32) and takes a floating dtype.
  void to(const Device& device);
  void to(DType dtype);
  void zero_grad();  // drops every parameter's gradient (PyTorch's set_to_none=True)

  // ---- checkpoints ----
  // Every parameter and buffer under its dotted name, in torch.nn.Module.state_dict()'s order:
  // a module's parameters, then its buffers, then each child's entries. The tensors share data
  // with the module (detached): copying into them changes the model.
  StateDict state_dict() const;
  // Copies values in place (across devices, and between floating dtypes). All problems are
  // found before anything is written and reported together in one ValueError, each naming its
  // key: a missing or unexpected key (ignored when !strict), a shape mismatch (both shapes), a
  // dtype that cannot convert (floating-point data into an integer buffer or back).
  void load_state_dict(const StateDict& state, bool strict = true);

  // ---- printing ----
  // The module tree as PyTorch prints it, each leaf with its extra_repr() and its parameters'
  // shapes, then the total parameter count.
  std::string summary() const;
  // What goes between the parentheses of this module's line: "in_features=784, ...".
  virtual std::string extra_repr() const { return {}; }

 private:
  void check_new_name(const std::string& name, const char* what) const;
  void add_child(std::string name, std::shared_ptr<Module> module);
  void collect_parameters(const std::string& prefix, bool recurse, NamedTensors& out) const;
  void collect_buffers(const std::string& prefix, bool recurse, NamedTensors& out) const;
  void collect_state(const std::string& prefix, NamedTensors& out) const;

  std::shared_ptr<ModuleHooks> hooks_;  // made by the first register_*_hook
  std::string name_;  // empty: derived from the class name
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& out, const Module& module);

// An option that is 1 number or one per spatial dimension: `3` means {3, 3}, as PyTorch's
// ExpandingArray. Kernel sizes, strides, paddings and dilations of Conv2d and the pools.
template <size_t D>
class ExpandingArray {
 public:
  ExpandingArray(int64_t all) { values_.fill(all); }  // NOLINT: Conv2dOptions(1, 32, 3)
  ExpandingArray(std::initializer_list<int64_t> values) {  // NOLINT: Conv2dOptions(1, 32, {3, 5})
    KILN_CHECK(values.size() == D, ValueError, "expected ", D, " values, got ", values.size());
    std::copy(values.begin(), values.end(), values_.begin());
  }
  ExpandingArray(const std::array<int64_t, D>& values) : values_(values) {}  // NOLINT
  const std::array<int64_t, D>& operator*() const { return values_; }
  int64_t operator[](size_t i) const { return values_[i]; }
  std::string str() const {  // "(3, 3)", as PyTorch prints tuples
    std::string s = "(";
    for (size_t i = 0; i < D; ++i) s += (i ? ", " : "") + std::to_string(values_[i]);
    return s + ")";
  }

 private:
  std::array<int64_t, D> values_{};
};

}  // namespace kiln::nn

// KILN_ARG(type, name): an option with a chained setter and a getter, as PyTorch's TORCH_ARG:
//   struct LinearOptions { KILN_ARG(bool, bias) = true; };   LinearOptions(..).bias(false).bias()
#define KILN_ARG(T, name)                        \
 public:                                         \
  auto& name(const T& value) {                   \
    name##_ = value;                             \
    return *this;                                \
  }                                              \
  const T& name() const { return name##_; }      \
                                                 \
 private:                                        \
  T name##_
