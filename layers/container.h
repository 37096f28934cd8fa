// Containers: Sequential chains modules, each fed the previous one's output; ModuleList and
// ModuleDict hold modules, in order or by name, for a forward of the program's own. Flatten
// reshapes between the convolutional and the linear part of a network.
//
//   auto net = std::make_shared<nn::Sequential>(
//       nn::Conv2d(1, 8, 3), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(8 * 13 * 13, 10));
//   Tensor logits = net->forward(images);   // parameters named "0.weight", "0.bias", "4.weight", ...
#pragma once

#include <concepts>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/layers/module.h"

namespace kiln::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start = 1, int64_t end = -1) : start_dim(start), end_dim(end) {}
  Tensor forward(const Tensor& x) override;  // a view where the layout allows
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

// Dimension dim made into `sizes` (one may be -1), Flatten's inverse: Unflatten(1, {32, 7, 7})
// takes [N, 1568] to [N, 32, 7, 7].
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim_, std::vector<int64_t> sizes_) : dim(dim_), sizes(std::move(sizes_)) {}
  Tensor forward(const Tensor& x) override;  // a view where the layout allows
  std::string extra_repr() const override;
  int64_t dim;
  std::vector<int64_t> sizes;
};

// x as it is: a placeholder where a model's structure wants a module (an optional layer left out).
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
};

// `child` (held by `holder` under `key`) as an M; ValueError naming the class it is when it is not
// one. What ModuleList::at and ModuleDict::at return.
template <class M>
std::shared_ptr<M> child_as(const Module& holder, const std::shared_ptr<Module>& child, const std::string& key) {
  std::shared_ptr<M> typed = std::dynamic_pointer_cast<M>(child);
  KILN_CHECK(typed != nullptr, ValueError, holder.name(), "[", key, "] is a ", child->name(), ", not the class asked for");
  return typed;
}

// Modules in order under "0", "1", ...: the blocks a model's forward walks, say. Like PyTorch's
// ModuleList it has no forward of its own.
//
//   nn::ModuleList blocks;                                   // a member, registered with
//   for (int i = 0; i < 4; ++i) blocks.push_back(nn::Linear(64, 64));   // register_module
//   for (const auto& block : blocks) x = relu((*block)(x));  // parameters "blocks.0.weight", ...
class ModuleList : public Module {
 public:
  ModuleList() = default;
  // Each argument is a std::shared_ptr to a module, or a module by value (moved into one).
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && !(sizeof...(Ms) == 1 && (std::derived_from<std::remove_cvref_t<Ms>, ModuleList> && ...)))
  explicit ModuleList(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  // Appends a module under the next index ("0", "1", ...) or under the given name.
  template <class M>
  void push_back(std::shared_ptr<M> module) {
    push_back(std::to_string(size()), std::move(module));
  }
  template <class M>
  void push_back(std::string name, std::shared_ptr<M> module) {
    register_module(std::move(name), std::move(module));
  }
  template <class M>
    requires std::derived_from<std::remove_cvref_t<M>, Module>
  void push_back(M&& module) {
    push_back(std::make_shared<std::remove_cvref_t<M>>(std::forward<M>(module)));
  }

  size_t size() const { return named_children().size(); }
  bool empty() const { return size() == 0; }
  // Module i; ValueError past the end.
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // Module i as an M (libtorch's ptr<M>(i)); ValueError naming its class when it is not one.
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    return child_as<M>(*this, (*this)[i], std::to_string(i));
  }
  // The modules, in order (for (const auto& m : list)).
  class Iterator {
   public:
    using Base = std::vector<std::pair<std::string, std::shared_ptr<Module>>>::const_iterator;
    explicit Iterator(Base at) : at_(at) {}
    const std::shared_ptr<Module>& operator*() const { return at_->second; }
    Iterator& operator++() {
      ++at_;
      return *this;
    }
    bool operator==(const Iterator&) const = default;

   private:
    Base at_;
  };
  Iterator begin() const { return Iterator(named_children().begin()); }
  Iterator end() const { return Iterator(named_children().end()); }
};

class Sequential : public ModuleList {
 public:
  Sequential() = default;
  using ModuleList::ModuleList;  // Sequential(modules...)

  // x through every module, in order. A Linear or Conv2d followed by a ReLU runs as one kernel,
  // the layer's forward with the ReLU in its epilogue (forward(x, Activation::relu)): the same
  // values and gradients to the bit, one pass over the activations fewer each way. Only those exact
  // classes are fused, never subclasses, which may have forwards of their own, and never modules
  // with hooks.
  Tensor forward(const Tensor& x) override;
};

// Modules under names of the program's choosing, in insertion order (PyTorch's ModuleDict): heads
// chosen at run time, say. No forward of its own.
//
//   nn::ModuleDict heads({{"digits", std::make_shared<nn::Linear>(128, 10)},
//                         {"parity", std::make_shared<nn::Linear>(128, 2)}});
//   Tensor logits = (*heads["digits"])(features);        // parameters "heads.digits.weight", ...
class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);

  // Adds module under `key` (unique, no '.': ValueError otherwise).
  template <class M>
  void insert(std::string key, std::shared_ptr<M> module) {
    register_module(std::move(key), std::move(module));
  }
  size_t size() const { return named_children().size(); }
  bool contains(const std::string& key) const;
  std::vector<std::string> keys() const;
  // The module under key; ValueError naming the key and the keys there are.
  const std::shared_ptr<Module>& operator[](const std::string& key) const;
  template <class M>
  std::shared_ptr<M> at(const std::string& key) const {
    return child_as<M>(*this, (*this)[key], "\"" + key + "\"");
  }
  // (key, module) pairs in insertion order.
  auto begin() const { return named_children().begin(); }
  auto end() const { return named_children().end(); }
};

}  // namespace kiln::nn
