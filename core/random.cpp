#include "kiln/core/random.h"

#include "kiln/core/backend.h"
#include "kiln/core/philox.h"

namespace kiln {

uint64_t Generator::advance(uint64_t n) {
  uint64_t start = offset_;
  offset_ += philox::blocks_for(n);
  return start;
}

struct Generator::Captured {
  uint64_t capture = 0;       // Capture::id()
  uint64_t start = 0;         // the offset at the capture's first draw
  uint64_t used = 0;          // blocks the captured work draws
  const philox::Key* base = nullptr;  // the replay value: (seed, offset) as each replay begins
};

philox::Key Generator::reserve(uint64_t n, Backend& backend) {
  Capture* capture = backend.capture();
  if (!capture) return {seed_, advance(n), nullptr};
  if (!captured_ || captured_->capture != capture->id()) {
    auto c = std::make_shared<Captured>();
    c->capture = capture->id();
    c->start = offset_;
    // The capture stands for the first replay, which starts where the generator stands now; each
    // later one starts where the generator stands then, and moves it on as the eager step would.
    c->base = capture->replay_value<philox::Key>({seed_, offset_, nullptr}, [this, c] {
      const philox::Key at{seed_, offset_, nullptr};
      offset_ += c->used;
      return at;
    });
    captured_ = std::move(c);
  }
  const uint64_t at = advance(n);
  captured_->used = offset_ - captured_->start;
  return {seed_, at - captured_->start, captured_->base};
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
  kernel(t, g.reserve(static_cast<uint64_t>(t.numel()), t.backend()));
  if (options.requires_grad_) t.requires_grad_();
  return t;
}
}  // namespace

Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& options,
               Generator* generator) {
  KILN_CHECK(low <= high, ValueError, "uniform: low (", low, ") must not exceed high (", high, ")");
  return draw("uniform", shape, options, generator, [&](Tensor& t, const philox::Key& key) {
    t.backend().uniform(t.ref(), low, high, key);
  });
}

Tensor normal(const Shape& shape, double mean, double stddev, const TensorOptions& options,
              Generator* generator) {
  KILN_CHECK(stddev >= 0.0, ValueError, "normal: stddev (", stddev, ") must be >= 0");
  return draw("normal", shape, options, generator, [&](Tensor& t, const philox::Key& key) {
    t.backend().normal(t.ref(), mean, stddev, key);
  });
}

}  // namespace kiln
