#include "kiln/layers/linear.h"

#include <cmath>

#include "kiln/layers/init.h"

namespace kiln::nn {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation activation) {
  KILN_CHECK(weight.dim() == 2, ShapeError, "linear: weight must be [out, in], got ", weight.shape());
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), ShapeError, "linear: input ", x.shape(),
             " does not end in the weight's ", weight.size(1), " input features (weight ", weight.shape(), ")");
  // Leading dimensions fold into the rows of one GEMM (and one GEMM for each gradient), rather
  // than a batch of small products against the same weight.
  Tensor rows = x.dim() == 2 ? x : x.reshape({-1, weight.size(1)});
  Tensor y = matmul(rows, weight.t(), bias, activation);
  if (x.dim() == 2) return y;
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = weight.size(0);
  return y.reshape(out_shape);
}

Linear::Linear(const LinearOptions& options_) : options(options_) {
  KILN_CHECK(options.in_features() > 0 && options.out_features() > 0, ValueError,
             "Linear: in_features and out_features must be positive, got ", options.in_features(), " and ",
             options.out_features());
  weight = register_parameter("weight", empty({options.out_features(), options.in_features()}));
  if (options.bias()) bias = register_parameter("bias", empty({options.out_features()}));
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = 1.0 / std::sqrt(static_cast<double>(options.in_features()));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }
Tensor Linear::forward(const Tensor& x, Activation activation) { return linear(x, weight, bias, activation); }

std::string Linear::extra_repr() const {
  return detail::concat("in_features=", options.in_features(), ", out_features=", options.out_features(),
                        ", bias=", options.bias() ? "true" : "false");
}

}  // namespace kiln::nn
