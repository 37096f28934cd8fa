#include "kiln/core/random.h"

#include "kiln/core/backend.h"
#include "kiln/core/philox.h"

namespace kiln {

uint64_t Generator::advance(uint64_t n) {
  uint64_t start = offset_;
  offset_ += philox::blocks_for(n);
  return start;
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {
Tensor draw(const char* op, const Shape& shape, const TensorOptions& options, Generator* generator,
            auto&& kernel) {
  KILN_CHECK(is_floating(options.dtype_), DTypeError, op, ": draws floating-point values; ",
             options.dtype_, " was asked for");
  Generator& g = generator ? *generator : default_generator();
  Tensor t = empty(shape, TensorOptions(options.dtype_).device(options.device_));
  uint64_t offset = g.advance(static_cast<uint64_t>(t.numel()));
  kernel(t, g.seed(), offset);
  if (options.requires_grad_) t.requires_grad_();
  return t;
}
}  // namespace

Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& options,
               Generator* generator) {
  KILN_CHECK(low <= high, ValueError, "uniform: low (", low, ") must not exceed high (", high, ")");
  return draw("uniform", shape, options, generator, [&](Tensor& t, uint64_t seed, uint64_t offset) {
    t.backend().uniform(t.ref(), low, high, seed, offset);
  });
}

Tensor normal(const Shape& shape, double mean, double stddev, const TensorOptions& options,
              Generator* generator) {
  KILN_CHECK(stddev >= 0.0, ValueError, "normal: stddev (", stddev, ") must be >= 0");
  return draw("normal", shape, options, generator, [&](Tensor& t, uint64_t seed, uint64_t offset) {
    t.backend().normal(t.ref(), mean, stddev, seed, offset);
  });
}

}  // namespace kiln
