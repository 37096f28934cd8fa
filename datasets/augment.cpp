#include "kiln/datasets/augment.h"

#include "kiln/autograd/node.h"
#include "kiln/autograd/ops.h"

namespace kiln::data {

Tensor random_translate(const Tensor& x, int64_t max_shift, double fill, Generator* generator) {
  KILN_CHECK(x.dim() == 4, ShapeError, "random_translate: expects [N, C, H, W], got ", x.shape());
  KILN_CHECK(max_shift >= 0, ValueError, "random_translate: max_shift must be >= 0, got ", max_shift);
  if (max_shift == 0) return x;
  NoGradGuard no_grad;
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t s = max_shift, hp = h + 2 * s, wp = w + 2 * s;
  TensorOptions ints = TensorOptions(DType::i32).device(x.device());

  // The batch in the middle of a frame of `fill`, s pixels wide.
  Tensor padded = full({n, c, hp, wp}, fill, TensorOptions(x.dtype()).device(x.device()));
  padded.slice(2, s, s + h).slice(3, s, s + w).copy_(x);

  // Per sample, where its window starts in the padded image: 0 .. 2s (a shift of -s .. s).
  auto start = [&] {
    return uniform({n, 1, 1, 1}, 0.0, static_cast<double>(2 * s + 1), TensorOptions(DType::f32).device(x.device()),
                   generator)
        .to(DType::i32);  // truncation: uniform in (0, 2s + 1) -> 0 .. 2s, equally likely
  };
  Tensor top = start(), left = start();

  // Flat index into `padded` of every output element [N, C, H, W].
  Tensor sample = arange(0, static_cast<double>(n), 1, ints).reshape({n, 1, 1, 1}) * static_cast<double>(c * hp * wp);
  Tensor channel = arange(0, static_cast<double>(c), 1, ints).reshape({1, c, 1, 1}) * static_cast<double>(hp * wp);
  Tensor row = (arange(0, static_cast<double>(h), 1, ints).reshape({1, 1, h, 1}) + top) * static_cast<double>(wp);
  Tensor col = arange(0, static_cast<double>(w), 1, ints).reshape({1, 1, 1, w}) + left;
  Tensor index = sample + channel + row + col;
  return index_select(padded.reshape({-1}), 0, index.reshape({-1})).reshape(x.shape());
}

}  // namespace kiln::data
