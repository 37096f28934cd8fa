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

Tensor adaptive_avg_pool2d(const Tensor& x, ExpandingArray<2> output_size) {
  KILN_CHECK(x.dim() == 4, ShapeError, "adaptive_avg_pool2d: input must be [N, C, H, W], got ", x.shape());
  const int64_t h = x.size(2), w = x.size(3), oh = output_size[0], ow = output_size[1];
  KILN_CHECK(oh > 0 && ow > 0, ValueError, "adaptive_avg_pool2d: the output size ", output_size.str(),
             " must be positive");
  KILN_CHECK(h > 0 && w > 0, ShapeError, "adaptive_avg_pool2d: the input ", x.shape(), " has no pixels to average");
  if (h % oh == 0 && w % ow == 0) return avg_pool2d(x, {{h / oh, w / ow}, {h / oh, w / ow}, {0, 0}});
  std::vector<Tensor> cells;  // [N, C] each, row by row
  for (int64_t i = 0; i < oh; ++i) {
    const Tensor rows = slice(x, 2, i * h / oh, ((i + 1) * h + oh - 1) / oh);
    for (int64_t j = 0; j < ow; ++j) cells.push_back(mean(slice(rows, 3, j * w / ow, ((j + 1) * w + ow - 1) / ow), {2, 3}));
  }
  return stack(cells, 2).reshape({x.size(0), x.size(1), oh, ow});
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size); }

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + output_size.str(); }

}  // namespace kiln::nn
