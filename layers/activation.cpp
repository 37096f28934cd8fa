#include "kiln/layers/activation.h"

namespace kiln::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope); }
std::string LeakyReLU::extra_repr() const { return detail::concat("negative_slope=", negative_slope); }

Tensor GELU::forward(const Tensor& x) { return gelu(x); }

Tensor Tanh::forward(const Tensor& x) { return tanh(x); }

Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }

}  // namespace kiln::nn
