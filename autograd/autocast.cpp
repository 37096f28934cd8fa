#include "kiln/autograd/autocast.h"

#include <vector>

#include "kiln/autograd/node.h"
#include "kiln/autograd/ops.h"
#include "kiln/core/error.h"

namespace kiln {

namespace autograd {

namespace {
thread_local bool autocast_on = false;
thread_local DType autocast_to = DType::bf16;
thread_local AutocastGuard* innermost = nullptr;  // the guards live on the stack, nested
}  // namespace

bool is_autocast_enabled() { return autocast_on; }
DType autocast_dtype() { return autocast_to; }

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : enabled_(enabled), previous_enabled_(autocast_on), previous_dtype_(autocast_to), outer_(innermost) {
  KILN_CHECK(!enabled || dtype == DType::bf16, DTypeError, "AutocastGuard: autocast lowers products to bf16, got ",
             dtype, " (f32 and f64 need no guard: leave autocast off)");
  autocast_on = enabled;
  if (enabled) autocast_to = dtype;
  innermost = this;
}

AutocastGuard::~AutocastGuard() {
  autocast_on = previous_enabled_;
  autocast_to = previous_dtype_;
  innermost = outer_;
}

void AutocastGuard::cast_ahead(const std::vector<Tensor>& tensors) {
  if (!enabled_) return;
  std::vector<Tensor> sources;
  for (const Tensor& t : tensors)
    if (t.defined() && t.dtype() == DType::f32 && t.device().type != DeviceType::vulkan) sources.push_back(t);
  if (sources.empty()) return;
  std::vector<Tensor> casts = to_dtype(sources, autocast_to);
  for (size_t i = 0; i < sources.size(); ++i) casts_.push_back({sources[i], casts[i], sources[i].version()});
}

namespace {

// The order of source's axes that x's are (x = source.permute(order): the same storage and place,
// each of x's axes one of source's with its size and stride), or empty when x is not that. A Linear
// layer hands its product weight.t(): the transposed view of the cast serves it.
std::vector<int64_t> permutation_of(const Tensor& x, const Tensor& source) {
  if (x.storage() != source.storage() || x.offset() != source.offset() || x.dim() != source.dim()) return {};
  std::vector<int64_t> order;
  std::vector<bool> used(static_cast<size_t>(source.dim()), false);
  for (int64_t k = 0; k < x.dim(); ++k) {
    int64_t found = -1;
    for (int64_t j = 0; j < source.dim() && found < 0; ++j)
      if (!used[static_cast<size_t>(j)] && source.size(j) == x.size(k) &&
          source.strides()[static_cast<size_t>(j)] == x.strides()[static_cast<size_t>(k)])
        found = j;
    if (found < 0) return {};
    used[static_cast<size_t>(found)] = true;
    order.push_back(found);
  }
  return order;
}

}  // namespace

// x as a cast made ahead: the source itself or a permutation of it (the cast of a contiguous
// source has its strides, so the same permutation of the cast lies as x does), unwritten since,
// and asked for with autograd recording as it was at the cast (a cast under NoGradGuard has no
// node).
Tensor autocast_cached(const Tensor& x) {
  const bool recording = autograd::is_recording({x});
  for (const AutocastGuard* g = innermost; g; g = g->outer_) {
    for (const AutocastGuard::Cast& c : g->casts_) {
      if (x.version() != c.version || recording != static_cast<bool>(c.cast.grad_fn())) continue;
      if (!c.source.is_contiguous() || c.cast.strides() != c.source.strides()) continue;
      std::vector<int64_t> order = permutation_of(x, c.source);
      if (order.empty() && x.dim() > 0) continue;
      bool identity = true;
      for (size_t k = 0; k < order.size(); ++k) identity = identity && order[k] == static_cast<int64_t>(k);
      if (x.dim() == 0 && (x.storage() != c.source.storage() || x.offset() != c.source.offset())) continue;
      return identity ? c.cast : permute(c.cast, order);
    }
  }
  return Tensor();
}

}  // namespace autograd

namespace autocast {

Tensor lower(const Tensor& x, const char* op) {
  if (!autograd::is_autocast_enabled() || !x.defined() || x.dtype() != DType::f32) return x;
  KILN_CHECK(x.device().type != DeviceType::vulkan, DTypeError, op, " under autocast: the vulkan backend has no ",
             autograd::autocast_dtype(), " kernels (train in f32 on vulkan, or use cuda or the cpu)");
  if (Tensor cached = autograd::autocast_cached(x); cached.defined()) return cached;
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
