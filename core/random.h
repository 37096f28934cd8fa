// Random numbers: a Philox4x32-10 stream keyed by (seed, offset); see core/philox.h.
// The same seed gives the same numbers on every backend.
#pragma once

#include <cstdint>
#include <memory>

#include "kiln/core/philox_key.h"
#include "kiln/core/tensor.h"

namespace kiln {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }  // position in the stream, in Philox blocks
  void manual_seed(uint64_t seed) { seed_ = seed; offset_ = 0; }
  void set_state(uint64_t seed, uint64_t offset) { seed_ = seed; offset_ = offset; }
  // Reserves the blocks a draw of n elements uses and returns where the draw starts.
  uint64_t advance(uint64_t n);
  // The same for a draw by a kernel of `backend`. Inside a capture (core/capture.h) the key's
  // offset counts from where the generator stands when a replay begins: the host sets that, and
  // moves the generator on by what the captured step draws, before every replay, so that replays
  // draw what the same steps run eagerly would. The generator must outlive the graph.
  philox::Key reserve(uint64_t n, Backend& backend);

 private:
  struct Captured;  // the capture this generator last drew in, and what it drew there
  uint64_t seed_ = 0;
  uint64_t offset_ = 0;
  std::shared_ptr<Captured> captured_;
};

// The generator that draws when none is given (init, dropout, shuffling).
Generator& default_generator();
void manual_seed(uint64_t seed);

// Floating-point tensors of independent draws.
Tensor uniform(const Shape& shape, double low = 0.0, double high = 1.0,
               const TensorOptions& options = {}, Generator* generator = nullptr);
Tensor normal(const Shape& shape, double mean = 0.0, double stddev = 1.0,
              const TensorOptions& options = {}, Generator* generator = nullptr);

}  // namespace kiln
