// Parameter initialisation, as torch.nn.init: each function fills a tensor in place (no autograd
// node, so it works on parameters that require grad), draws from the default generator unless
// given one (kiln::manual_seed makes inits reproducible), and returns the tensor.
#pragma once

#include <cstdint>
#include <utility>

#include "kiln/autograd/ops.h"
#include "kiln/core/random.h"

namespace kiln::nn::init {

enum class FanMode : uint8_t { fan_in, fan_out };
enum class Nonlinearity : uint8_t { linear, conv2d, sigmoid, tanh, relu, leaky_relu };

// The gain PyTorch recommends for a nonlinearity: relu sqrt(2), tanh 5/3, leaky_relu
// sqrt(2 / (1 + param^2)) with param its negative slope, 1 for linear, conv2d and sigmoid.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

// (fan_in, fan_out) of a weight [out, in, *kernel]: in * kernel size and out * kernel size.
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& weight);

Tensor uniform_(Tensor tensor, double low = 0.0, double high = 1.0, Generator* generator = nullptr);
Tensor normal_(Tensor tensor, double mean = 0.0, double stddev = 1.0, Generator* generator = nullptr);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);
Tensor constant_(Tensor tensor, double value);

// U(-b, b) with b = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a). Linear and
// Conv2d use a = sqrt(5), which makes b = 1 / sqrt(fan_in) (PyTorch's default init).
Tensor kaiming_uniform_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu, Generator* generator = nullptr);

}  // namespace kiln::nn::init
