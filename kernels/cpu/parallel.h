// A small persistent thread pool for the CPU kernels.
#pragma once

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

}  // namespace kiln::cpu
