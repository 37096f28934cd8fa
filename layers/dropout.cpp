#include "kiln/layers/dropout.h"

namespace kiln::nn {

Dropout::Dropout(double p_) : p(p_) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, ValueError, "Dropout: p must be in [0, 1], got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

std::string Dropout::extra_repr() const { return detail::concat("p=", p); }

}  // namespace kiln::nn
