#include "kiln/core/precision.h"

#include <atomic>

namespace kiln {

namespace {
std::atomic<bool> tf32{false}, f16_products{false};
}

void set_allow_tf32(bool allow) { tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32.load(std::memory_order_relaxed); }

void set_allow_f16_products(bool allow) { f16_products.store(allow, std::memory_order_relaxed); }
bool allow_f16_products() { return f16_products.load(std::memory_order_relaxed); }

}  // namespace kiln
