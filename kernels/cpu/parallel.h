// A small persistent thread pool for the CPU kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>

namespace kiln::cpu {

// Threads the pool uses: KILN_NUM_THREADS if set, else the machine's hardware threads.
int num_threads();
void set_num_threads(int n);

// Calls fn(begin, end) on disjoint chunks covering [0, n), each at least `grain` long (but the
// last), spread over the pool; runs inline when n <= grain or the pool has one thread.
// Returns when every chunk is done; an exception thrown by fn is rethrown here.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);

// For the kernels that walk the middle axis of x [outer, n, inner] (reductions, softmax): calls
// fn(p, q0, width) for every tile, row p of outer and columns q0 .. q0 + width - 1 of inner (at
// most `tile` of them, walked side by side), the tiles spread over the pool in chunks of about
// `grain` elements of x.
template <class Fn>
void parallel_tiles(int64_t outer, int64_t n, int64_t inner, int64_t tile, int64_t grain, Fn fn) {
  const int64_t tiles = (inner + tile - 1) / tile;
  const int64_t work_per_task = std::max<int64_t>(1, n * std::min(inner, tile));
  parallel_for(outer * tiles, std::max<int64_t>(1, grain / work_per_task), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t q0 = task % tiles * tile;
      fn(task / tiles, q0, std::min(tile, inner - q0));
    }
  });
}

}  // namespace kiln::cpu
