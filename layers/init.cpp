#include "kiln/layers/init.h"

#include <cmath>

#include "kiln/autograd/node.h"

namespace kiln::nn::init {

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv2d:
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& weight) {
  KILN_CHECK(weight.dim() >= 2, ShapeError, "calculate_fan_in_and_fan_out: needs a weight of at least 2 "
             "dimensions [out, in, ...], got ", weight.shape());
  int64_t receptive_field = weight.numel() / (weight.size(0) * weight.size(1));
  return {weight.size(1) * receptive_field, weight.size(0) * receptive_field};
}

namespace {
// Writes `values` into `tensor`: the draw happens on the tensor's device in its dtype.
Tensor fill_from(Tensor& tensor, const Tensor& values) {
  NoGradGuard no_grad;
  tensor.copy_(values);
  return tensor;
}
TensorOptions like(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }
}  // namespace

Tensor uniform_(Tensor tensor, double low, double high, Generator* generator) {
  return fill_from(tensor, uniform(tensor.shape(), low, high, like(tensor), generator));
}

Tensor normal_(Tensor tensor, double mean, double stddev, Generator* generator) {
  return fill_from(tensor, normal(tensor.shape(), mean, stddev, like(tensor), generator));
}

Tensor constant_(Tensor tensor, double value) {
  NoGradGuard no_grad;
  tensor.fill_(value);
  return tensor;
}
Tensor zeros_(Tensor tensor) { return constant_(std::move(tensor), 0.0); }
Tensor ones_(Tensor tensor) { return constant_(std::move(tensor), 1.0); }

Tensor kaiming_uniform_(Tensor tensor, double a, FanMode mode, Nonlinearity nonlinearity,
                        Generator* generator) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(tensor);
  int64_t fan = mode == FanMode::fan_in ? fan_in : fan_out;
  KILN_CHECK(fan > 0, ValueError, "kaiming_uniform_: a tensor of shape ", tensor.shape(), " has no fan");
  // sqrt(3) * std turns the standard deviation into the bound of a uniform distribution.
  double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / static_cast<double>(fan));
  return uniform_(std::move(tensor), -bound, bound, generator);
}

}  // namespace kiln::nn::init
