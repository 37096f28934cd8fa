// Where a Philox draw starts (core/philox.h has the stream itself): apart, so that the backend
// interface can name it without bringing the generator's code into every file that includes it.
#pragma once

#include <cstdint>

#include "kiln/core/host_device.h"

namespace kiln::philox {

// Where a draw starts: element i takes word i % 4 of block offset + i / 4 of seed's stream. In a
// step captured as a CUDA graph (core/capture.h) the generator stands elsewhere at every replay:
// `replay` then points at device memory holding the (seed, offset) of the generator at the
// replay's start, and the draw starts `offset` blocks after that.
struct Key {
  uint64_t seed = 0, offset = 0;
  const Key* replay = nullptr;
  KILN_HOST_DEVICE Key resolve() const {
    return replay ? Key{replay->seed, replay->offset + offset, nullptr} : Key{seed, offset, nullptr};
  }
};

}  // namespace kiln::philox
