// Sequential chains modules, each fed the previous one's output; Flatten reshapes between the
// convolutional and the linear part of a network.
//
//   auto net = std::make_shared<nn::Sequential>(
//       nn::Conv2d(1, 8, 3), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(8 * 13 * 13, 10));
//   Tensor logits = net->forward(images);   // parameters named "0.weight", "0.bias", "4.weight", ...
#pragma once

#include <concepts>

#include "kiln/layers/module.h"

namespace kiln::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start = 1, int64_t end = -1) : start_dim(start), end_dim(end) {}
  Tensor forward(const Tensor& x) override;  // a view where the layout allows
  std::string extra_repr() const override;
  int64_t start_dim, end_dim;
};

class Sequential : public Module {
 public:
  Sequential() = default;
  // Each argument is a std::shared_ptr to a module, or a module by value (moved into one).
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && !(sizeof...(Ms) == 1 && (std::same_as<std::remove_cvref_t<Ms>, Sequential> && ...)))
  explicit Sequential(Ms&&... modules) {
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
  const std::shared_ptr<Module>& operator[](size_t i) const { return named_children().at(i).second; }

  // x through every module, in order. A Linear or Conv2d followed by a ReLU runs as one kernel,
  // the layer's forward with the ReLU in its epilogue (forward(x, Activation::relu)): the same
  // values and gradients to the bit, one pass over the activations fewer each way. Only those exact
  // classes are fused, never subclasses, which may have forwards of their own.
  Tensor forward(const Tensor& x) override;
};

}  // namespace kiln::nn
