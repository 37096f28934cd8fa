#include "kiln/layers/pooling.h"

namespace kiln::nn {

Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, {*options.kernel_size(), *options.stride(), *options.padding()});
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + options.kernel_size().str() + ", stride=" + options.stride().str() +
         ", padding=" + options.padding().str();
}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, {*options.kernel_size(), *options.stride(), *options.padding(), options.count_include_pad()});
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + options.kernel_size().str() + ", stride=" + options.stride().str() +
         ", padding=" + options.padding().str() +
         ", count_include_pad=" + (options.count_include_pad() ? "true" : "false");
}

}  // namespace kiln::nn
