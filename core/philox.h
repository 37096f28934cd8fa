// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter-based generator. Output block j of a stream is a pure function of (key, counter j),
// so any backend, thread or shader can compute element i directly, with no shared state.
// That is what lets CPU, CUDA and Vulkan draw identical numbers for init, dropout and shuffling.
//
// kiln's stream, exactly (every backend must follow it):
// - key     = (low 32 bits of seed, high 32 bits of seed)
// - counter = (low 32 bits of c, high 32 bits of c, 0, 0) with c = offset + i / 4,
//   where `offset` is the generator's position (in blocks) when the draw starts;
// - element i of a draw takes word i % 4 of that block; a draw of n elements advances the
//   generator by ceil(n / 4) blocks.
// - uniform in (0, 1): u = ((word >> 8) + 0.5) * 2^-24, exact in f32, never 0 or 1;
//   uniform(low, high) = low + (high - low) * u.
// - normal: Box-Muller on the pair of elements (2j, 2j + 1) with u1, u2 the uniforms of those
//   two elements: r = sqrt(-2 ln u1); element 2j = r cos(2 pi u2), element 2j + 1 = r sin(2 pi u2).
#pragma once

#include <array>
#include <cstdint>

#include "kiln/core/philox_key.h"  // KILN_HOST_DEVICE, philox::Key

namespace kiln::philox {

using Block = std::array<uint32_t, 4>;

KILN_HOST_DEVICE inline Block philox4x32_10(Block counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // golden ratio, sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t{kMul0} * counter[0];
    uint64_t p1 = uint64_t{kMul1} * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ key0, static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ key1, static_cast<uint32_t>(p0)};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// Block c of the stream of `seed`: the four words for elements 4(c - offset) .. 4(c - offset) + 3.
KILN_HOST_DEVICE inline Block block(uint64_t seed, uint64_t c) {
  return philox4x32_10({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0u, 0u},
                       static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// The 32-bit word for element i of a draw that starts at `offset`.
KILN_HOST_DEVICE inline uint32_t word(uint64_t seed, uint64_t offset, uint64_t i) {
  return block(seed, offset + i / 4)[i % 4];
}

KILN_HOST_DEVICE inline float to_unit(uint32_t w) {
  return (static_cast<float>(w >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

// Blocks a draw of n elements uses.
KILN_HOST_DEVICE inline uint64_t blocks_for(uint64_t n) { return (n + 3) / 4; }

}  // namespace kiln::philox
