#include "kiln/layers/container.h"

#include <typeinfo>

#include "kiln/layers/activation.h"
#include "kiln/layers/conv.h"
#include "kiln/layers/linear.h"

namespace kiln::nn {

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }

std::string Flatten::extra_repr() const { return detail::concat("start_dim=", start_dim, ", end_dim=", end_dim); }

Tensor Sequential::forward(const Tensor& x) {
  const auto& children = named_children();
  Tensor y = x;
  for (size_t i = 0; i < children.size(); ++i) {
    Module& m = *children[i].second;
    const Module* next = i + 1 < children.size() ? children[i + 1].second.get() : nullptr;
    const bool relu_next = next && typeid(*next) == typeid(ReLU);
    if (relu_next && typeid(m) == typeid(Linear)) {
      y = static_cast<Linear&>(m).forward(y, Activation::relu);
      ++i;
    } else if (relu_next && typeid(m) == typeid(Conv2d)) {
      y = static_cast<Conv2d&>(m).forward(y, Activation::relu);
      ++i;
    } else {
      y = m.forward(y);
    }
  }
  return y;
}

}  // namespace kiln::nn
