#include "kiln/layers/container.h"

namespace kiln::nn {

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }

std::string Flatten::extra_repr() const { return detail::concat("start_dim=", start_dim, ", end_dim=", end_dim); }

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, module] : named_children()) y = module->forward(y);
  return y;
}

}  // namespace kiln::nn
