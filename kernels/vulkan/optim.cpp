// Optimizer steps of the Vulkan backend (shaders/optim.comp): SGD, Adam/AdamW, Adadelta and
// RMSprop, a dispatch per parameter (version 1; MNIST's models have 4 to 8 parameters). The
// hyperparameters' derived constants are formed in double, as the CPU forms them.
#include <cmath>
#include <cstdint>

#include "kiln/core/error.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"

namespace kiln::vulkan {

namespace {

struct Params {  // optim.comp's
  int32_t numel = 0, p_offset = 0, g_offset = 0, s1_offset = 0, s2_offset = 0, s3_offset = 0;
  int32_t flag_a = 0, flag_b = 0, flag_c = 0, flag_d = 0;
  float lr = 0, wd = 0, c1 = 0, c2 = 0, c3 = 0, c4 = 0, c5 = 0, c6 = 0, eps = 0;
};

void check_f32(std::span<const TensorRef> params, const char* op) {
  KILN_CHECK(params.empty() || params[0].dtype == DType::f32, DTypeError, "vulkan ", op, ": ", params[0].dtype,
             " is not supported by the Vulkan backend yet (f32 so far)");
  for (const TensorRef& t : params)
    KILN_CHECK(t.numel() < (int64_t{1} << 31) && t.offset < (int64_t{1} << 31), ShapeError, "vulkan ", op, ": ",
               t.numel(), " elements exceed the 32-bit indices of the Vulkan kernels");
}

float f(double v) { return static_cast<float>(v); }

// The state tensor i of a list, or null when the step keeps no such state.
const TensorRef* state(std::span<const TensorRef> list, size_t i) { return list.empty() ? nullptr : &list[i]; }

// One dispatch of `shader` for one parameter: p, its gradient and up to three state tensors (an
// absent one binds p again, unread).
void step(VulkanBackend& b, const char* shader, Params h, const TensorRef& p, const TensorRef& g, const TensorRef* s1,
          const TensorRef* s2, const TensorRef* s3) {
  h.numel = static_cast<int32_t>(p.numel());
  h.p_offset = static_cast<int32_t>(p.offset);
  h.g_offset = static_cast<int32_t>(g.offset);
  h.s1_offset = s1 ? static_cast<int32_t>(s1->offset) : 0;
  h.s2_offset = s2 ? static_cast<int32_t>(s2->offset) : 0;
  h.s3_offset = s3 ? static_cast<int32_t>(s3->offset) : 0;
  b.record({shader, {}, &h, sizeof h,
            {allocation(p), allocation(g), allocation(s1 ? *s1 : p), allocation(s2 ? *s2 : p), allocation(s3 ? *s3 : p)},
            p.numel()});
}

}  // namespace

void VulkanBackend::sgd_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                             std::span<const TensorRef> momentum_buffers, const SgdStep& hyper) {
  check_sgd_step("vulkan", params, grads, momentum_buffers, hyper);
  check_f32(params, "sgd_step");
  Params h;
  h.flag_a = hyper.weight_decay != 0.0;
  h.flag_b = hyper.momentum != 0.0;
  h.flag_c = hyper.nesterov;
  h.flag_d = hyper.init_buffers;
  h.lr = f(hyper.lr), h.wd = f(hyper.weight_decay), h.c1 = f(hyper.momentum), h.c2 = f(1.0 - hyper.dampening);
  for (size_t i = 0; i < params.size(); ++i)
    step(*this, "optim_sgd", h, params[i], grads[i], h.flag_b ? &momentum_buffers[i] : nullptr, nullptr, nullptr);
}

void VulkanBackend::adam_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                              std::span<const TensorRef> exp_avgs, std::span<const TensorRef> exp_avg_sqs,
                              std::span<const TensorRef> max_exp_avg_sqs, const AdamStep& hyper) {
  check_adam_step("vulkan", params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, hyper);
  check_f32(params, "adam_step");
  Params h;
  h.flag_a = hyper.weight_decay != 0.0 && !hyper.decoupled_weight_decay;
  h.flag_b = hyper.decoupled_weight_decay;
  h.flag_c = hyper.amsgrad;
  h.wd = f(hyper.weight_decay);
  h.lr = f(1.0 - hyper.lr * hyper.weight_decay);  // AdamW's decay factor (optim.comp)
  h.c1 = f(hyper.beta1), h.c2 = f(1.0 - hyper.beta1), h.c3 = f(hyper.beta2), h.c4 = f(1.0 - hyper.beta2);
  h.c5 = f(hyper.lr / hyper.bias_correction1), h.c6 = f(std::sqrt(hyper.bias_correction2)), h.eps = f(hyper.eps);
  for (size_t i = 0; i < params.size(); ++i)
    step(*this, "optim_adam", h, params[i], grads[i], &exp_avgs[i], &exp_avg_sqs[i], state(max_exp_avg_sqs, i));
}

void VulkanBackend::adadelta_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                                  std::span<const TensorRef> square_avgs, std::span<const TensorRef> acc_deltas,
                                  const AdadeltaStep& hyper) {
  check_adadelta_step("vulkan", params, grads, square_avgs, acc_deltas);
  check_f32(params, "adadelta_step");
  Params h;
  h.flag_a = hyper.weight_decay != 0.0;
  h.lr = f(hyper.lr), h.wd = f(hyper.weight_decay), h.c1 = f(hyper.rho), h.c2 = f(1.0 - hyper.rho), h.eps = f(hyper.eps);
  for (size_t i = 0; i < params.size(); ++i)
    step(*this, "optim_adadelta", h, params[i], grads[i], &square_avgs[i], &acc_deltas[i], nullptr);
}

void VulkanBackend::rmsprop_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                                 std::span<const TensorRef> square_avgs, std::span<const TensorRef> momentum_buffers,
                                 std::span<const TensorRef> grad_avgs, const RmspropStep& hyper) {
  check_rmsprop_step("vulkan", params, grads, square_avgs, momentum_buffers, grad_avgs, hyper);
  check_f32(params, "rmsprop_step");
  Params h;
  h.flag_a = hyper.weight_decay != 0.0;
  h.flag_b = hyper.momentum > 0.0;
  h.flag_c = hyper.centered;
  h.lr = f(hyper.lr), h.wd = f(hyper.weight_decay), h.c1 = f(hyper.alpha), h.c2 = f(1.0 - hyper.alpha);
  h.c3 = f(hyper.momentum), h.eps = f(hyper.eps);
  for (size_t i = 0; i < params.size(); ++i)
    step(*this, "optim_rmsprop", h, params[i], grads[i], state(momentum_buffers, i), &square_avgs[i], state(grad_avgs, i));
}

}  // namespace kiln::vulkan
