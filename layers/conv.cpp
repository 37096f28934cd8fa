#include "kiln/layers/conv.h"

#include <cmath>

#include "kiln/layers/init.h"

namespace kiln::nn {

Conv2d::Conv2d(const Conv2dOptions& options_) : options(options_) {
  const Conv2dOptions& o = options;
  KILN_CHECK(o.in_channels() > 0 && o.out_channels() > 0 && o.groups() > 0, ValueError,
             "Conv2d: channels and groups must be positive, got in ", o.in_channels(), ", out ",
             o.out_channels(), ", groups ", o.groups());
  KILN_CHECK(o.in_channels() % o.groups() == 0 && o.out_channels() % o.groups() == 0, ValueError,
             "Conv2d: in_channels (", o.in_channels(), ") and out_channels (", o.out_channels(),
             ") must both be divisible by groups (", o.groups(), ")");
  for (size_t i = 0; i < 2; ++i)
    KILN_CHECK(o.kernel_size()[i] > 0 && o.stride()[i] > 0 && o.dilation()[i] > 0 && o.padding()[i] >= 0,
               ValueError, "Conv2d: kernel_size ", o.kernel_size().str(), ", stride ", o.stride().str(),
               " and dilation ", o.dilation().str(), " must be positive, padding ", o.padding().str(),
               " non-negative");
  weight = register_parameter("weight", empty({o.out_channels(), o.in_channels() / o.groups(),
                                               o.kernel_size()[0], o.kernel_size()[1]}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) { return forward(x, Activation::none); }

Tensor Conv2d::forward(const Tensor& x, Activation activation) {
  return conv2d(x, weight, bias, {*options.stride(), *options.padding(), *options.dilation(), options.groups()},
                activation);
}

std::string Conv2d::extra_repr() const {
  // PyTorch's form: what differs from the defaults is shown, the rest left out.
  const Conv2dOptions& o = options;
  std::string s = detail::concat(o.in_channels(), ", ", o.out_channels(), ", kernel_size=", o.kernel_size().str(),
                                 ", stride=", o.stride().str());
  if (*o.padding() != std::array<int64_t, 2>{0, 0}) s += ", padding=" + o.padding().str();
  if (*o.dilation() != std::array<int64_t, 2>{1, 1}) s += ", dilation=" + o.dilation().str();
  if (o.groups() != 1) s += detail::concat(", groups=", o.groups());
  if (!o.bias()) s += ", bias=false";
  return s;
}

}  // namespace kiln::nn
