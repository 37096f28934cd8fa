#include "kiln/layers/loss.h"

namespace kiln::nn {

namespace {
const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::none: return "none";
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
  }
  return "?";
}
}  // namespace

CrossEntropyLoss::CrossEntropyLoss(const CrossEntropyLossOptions& options_) : options(options_) {
  KILN_CHECK(options.label_smoothing() >= 0.0 && options.label_smoothing() <= 1.0, ValueError,
             "CrossEntropyLoss: label_smoothing must be in [0, 1], got ", options.label_smoothing());
}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return cross_entropy(input, target, options.reduction(), options.label_smoothing());
}

std::string CrossEntropyLoss::extra_repr() const {
  return detail::concat("reduction=", reduction_name(options.reduction()), ", label_smoothing=",
                        options.label_smoothing());
}

MSELoss::MSELoss(const MSELossOptions& options_) : options(options_) {}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) {
  return mse_loss(input, target, options.reduction());
}

std::string MSELoss::extra_repr() const { return detail::concat("reduction=", reduction_name(options.reduction())); }

}  // namespace kiln::nn
