// Batch norm of the Vulkan backend (shaders/batch_norm.comp): the batch's statistics, the
// normalisation, and the training-mode gradient (two dispatches: the channel sums, then grad_x).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

struct Params {  // batch_norm.comp's
  int32_t n = 0, c = 0, s = 0;
  int32_t x_offset = 0, g_offset = 0, y_offset = 0, mean_offset = 0, invstd_offset = 0, weight_offset = 0,
          bias_offset = 0, gw_offset = 0, gb_offset = 0;
  int32_t has_weight = 0, has_bias = 0;
  int32_t chunks = 1, chunk = 0;  // runs per channel and values per run (STATS, SUMS)
  Divisor s_;
};

// x [N, C, S...] as [N, C, S]
Params params_for(const TensorRef& x, const char* op) {
  KILN_CHECK(x.shape.size() >= 2 && x.is_contiguous(), ShapeError, "vulkan ", op, ": x must be contiguous [N, C, ...], got ",
             x.shape);
  KILN_CHECK(x.dtype == DType::f32, DTypeError, "vulkan ", op, ": ", x.dtype,
             " is not supported by the Vulkan backend yet (f32 so far)");
  Params p;
  p.n = index32(x.shape[0], op);
  p.c = index32(x.shape[1], op);
  p.s = index32(x.shape[1] == 0 ? 0 : x.numel() / std::max<int64_t>(1, x.shape[0] * x.shape[1]), op);
  index32(x.numel(), op);
  p.x_offset = index32(x.offset, op);
  p.s_ = divisor(p.s);
  // each channel's M = N S values in runs of at least 2048, about 512 workgroups in all
  const int64_t m = int64_t{p.n} * p.s;
  const int64_t chunks = std::clamp<int64_t>((512 + p.c - 1) / std::max(p.c, 1), 1, std::max<int64_t>(1, m / 2048));
  p.chunk = index32((m + chunks - 1) / chunks, op);
  p.chunks = index32(p.chunk > 0 ? (m + p.chunk - 1) / p.chunk : 1, op);
  return p;
}

// The allocation of t, or `absent` (bound, unread) when t is undefined.
const Allocation* maybe(const TensorRef& t, const TensorRef& absent) { return allocation(t.defined() ? t : absent); }

constexpr int64_t kMaxGroups = 65535;

// The per-run workgroups of STATS or SUMS (PASS 0 and, for STATS, 1), then PASS 2 over the runs.
int64_t run_invocations(const Params& p) { return std::min<int64_t>(int64_t{p.c} * p.chunks, kMaxGroups) * kWorkgroupSize; }

}  // namespace

void VulkanBackend::batch_norm_stats(const TensorRef& x, const TensorRef& mean, const TensorRef& var) {
  Params p = params_for(x, "batch_norm_stats");
  p.mean_offset = index32(mean.offset, "batch_norm_stats");
  p.invstd_offset = index32(var.offset, "batch_norm_stats");
  const Allocation* xa = allocation(x);
  Workspace parts(*this, static_cast<size_t>(2 * std::max(p.c, 1) * p.chunks) * sizeof(float));
  const std::vector<const Allocation*> buffers{xa, allocation(mean), allocation(var), xa, xa, xa, xa, xa, xa,
                                               parts.allocation()};
  record({"batch_norm_stats", {0}, &p, sizeof p, buffers, run_invocations(p)});  // the runs' sums
  record({"batch_norm_stats", {1}, &p, sizeof p, buffers, run_invocations(p)});  // their squared deviations
  record({"batch_norm_stats", {2}, &p, sizeof p, buffers, p.c});                 // the runs in order
}

void VulkanBackend::batch_norm_apply(const TensorRef& x, const TensorRef& mean, const TensorRef& invstd,
                                     const TensorRef& weight, const TensorRef& bias, const TensorRef& y) {
  Params p = params_for(x, "batch_norm_apply");
  p.mean_offset = index32(mean.offset, "batch_norm_apply");
  p.invstd_offset = index32(invstd.offset, "batch_norm_apply");
  p.has_weight = weight.defined(), p.has_bias = bias.defined();
  p.weight_offset = weight.defined() ? index32(weight.offset, "batch_norm_apply") : 0;
  p.bias_offset = bias.defined() ? index32(bias.offset, "batch_norm_apply") : 0;
  p.y_offset = index32(y.offset, "batch_norm_apply");
  const Allocation* xa = allocation(x);
  record({"batch_norm_apply", {}, &p, sizeof p,
          {xa, allocation(mean), allocation(invstd), maybe(weight, x), maybe(bias, x), xa, allocation(y), xa, xa, xa},
          x.numel()});
}

void VulkanBackend::batch_norm_backward(const TensorRef& x, const TensorRef& grad, const TensorRef& mean,
                                        const TensorRef& invstd, const TensorRef& weight, const TensorRef& grad_x,
                                        const TensorRef& grad_weight, const TensorRef& grad_bias) {
  Params p = params_for(x, "batch_norm_backward");
  p.g_offset = index32(grad.offset, "batch_norm_backward");
  p.mean_offset = index32(mean.offset, "batch_norm_backward");
  p.invstd_offset = index32(invstd.offset, "batch_norm_backward");
  p.has_weight = weight.defined();
  p.weight_offset = weight.defined() ? index32(weight.offset, "batch_norm_backward") : 0;
  p.y_offset = index32(grad_x.offset, "batch_norm_backward");
  p.gw_offset = index32(grad_weight.offset, "batch_norm_backward");
  p.gb_offset = index32(grad_bias.offset, "batch_norm_backward");
  const Allocation* xa = allocation(x);
  Workspace parts(*this, static_cast<size_t>(2 * std::max(p.c, 1) * p.chunks) * sizeof(float));
  const std::vector<const Allocation*> buffers{xa, allocation(mean), allocation(invstd), maybe(weight, x), xa,
                                               allocation(grad), allocation(grad_x), allocation(grad_weight),
                                               allocation(grad_bias), parts.allocation()};
  record({"batch_norm_sums", {0}, &p, sizeof p, buffers, run_invocations(p)});  // per run
  record({"batch_norm_sums", {2}, &p, sizeof p, buffers, p.c});                 // the runs in order
  record({"batch_norm_grad_x", {}, &p, sizeof p, buffers, x.numel()});
}

}  // namespace kiln::vulkan
