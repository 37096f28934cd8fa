#include "core/precision.h"

#include <atomic>

namespace kiln {

namespace {
std::atomic<bool> tf32{false};
}

void set_allow_tf32(bool allow) { tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32.load(std::memory_order_relaxed); }

}  // namespace kiln
