#include "kiln/autograd/autocast.h"

#include "kiln/autograd/ops.h"
#include "kiln/core/error.h"

namespace kiln {

namespace autograd {

namespace {
thread_local bool autocast_on = false;
thread_local DType autocast_to = DType::bf16;
}  // namespace

bool is_autocast_enabled() { return autocast_on; }
DType autocast_dtype() { return autocast_to; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : previous_enabled_(autocast_on), previous_dtype_(autocast_to) {
  KILN_CHECK(!enabled || dtype == DType::bf16, DTypeError, "AutocastGuard: autocast lowers products to bf16, got ",
             dtype, " (f32 and f64 need no guard: leave autocast off)");
  autocast_on = enabled;
  if (enabled) autocast_to = dtype;
}

AutocastGuard::~AutocastGuard() {
  autocast_on = previous_enabled_;
  autocast_to = previous_dtype_;
}

}  // namespace autograd

namespace autocast {

Tensor lower(const Tensor& x, const char* op) {
  if (!autograd::is_autocast_enabled() || !x.defined() || x.dtype() != DType::f32) return x;
  KILN_CHECK(x.device().type != DeviceType::vulkan, DTypeError, op, " under autocast: the vulkan backend has no ",
             autograd::autocast_dtype(), " kernels (train in f32 on vulkan, or use cuda or the cpu)");
  return to_dtype(x, autograd::autocast_dtype());
}

Tensor widen(const Tensor& x) {
  if (!autograd::is_autocast_enabled() || !x.defined() || x.dtype() != DType::bf16) return x;
  return to_dtype(x, DType::f32);
}

std::pair<Tensor, Tensor> promote(const Tensor& a, const Tensor& b) {
  if (!autograd::is_autocast_enabled() || a.dtype() == b.dtype()) return {a, b};
  const bool mixed = (a.dtype() == DType::bf16 && b.dtype() == DType::f32) ||
                     (a.dtype() == DType::f32 && b.dtype() == DType::bf16);
  if (!mixed) return {a, b};
  return {to_dtype(a, DType::f32), to_dtype(b, DType::f32)};
}

}  // namespace autocast

}  // namespace kiln
