// Optimizer steps: SGD, Adam/AdamW, Adadelta and RMSprop, each one call over a list of parameters.
//
// An optimizer step is elementwise. For each parameter p with gradient g, every element is
// updated from g, p and a few running averages of the same shape (the optimizer's state),
// independently of every other element. So a step is a loop over elements that reads
// 2 + (state count) numbers and writes 1 + (state count): it is bound by memory bandwidth, and
// the one thing that matters for speed is touching each number once. That is why each rule is
// one fused loop here rather than a chain of tensor ops (PyTorch's single-tensor Adam runs 8
// elementwise kernels per parameter, 9 with weight decay), and why the interface takes a whole
// list of parameters: a GPU backend turns the list into one multi-tensor launch instead of one
// per parameter.
//
// The formulas follow PyTorch's code (torch/optim/*.py, _single_tensor_*) operation by
// operation, so f64 results agree with PyTorch's to rounding. core/backend.h gives each rule
// as a formula beside its hyperparameter struct; the comments below say why each step is there.
//
// Choices:
// - f32 is computed in float, as PyTorch and the GPU kernels do. Hyperparameters arrive in
//   double and are converted once per call; derived constants (1 - beta1, lr / bc1, ...) are
//   formed in double first, as PyTorch forms them in Python.
// - Parameters are split into chunks of kGrain elements spread over the thread pool; a small
//   parameter (a bias) runs inline on the calling thread.
// - Weight decay is skipped when 0 (adding 0 * p would turn an inf parameter into NaN, and
//   PyTorch skips it too).
#include <algorithm>
#include <cmath>
#include <span>
#include <string_view>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/parallel.h"

namespace kiln::cpu {

namespace {

// Elements per parallel chunk. A step costs ~10-20 flops per element and is bandwidth bound,
// so chunks are smaller than the elementwise kernels' but still large enough to pay a handoff.
constexpr int64_t kGrain = 16 * 1024;

// Calls fn(tag, i) for each parameter i, with tag a value of the parameters' C++ type.
template <class Fn>
void for_each_param(std::span<const TensorRef> params, Fn&& fn) {
  if (params.empty()) return;
  visit_arithmetic(params[0].dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      for (size_t i = 0; i < params.size(); ++i) fn(tag, i);
    }
  });
}

// Runs body(j) for j in [0, n), in parallel chunks.
template <class Body>
void elements(int64_t n, const Body& body) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) body(j);
  });
}

}  // namespace

// ---- SGD ----
//
// Plain SGD walks down the gradient: p -= lr * g. Momentum keeps a running sum of past
// gradients in buf, so that steps build up along directions the gradient keeps pointing to and
// cancel along those where it flips sign. dampening scales down the new gradient's share.
// Nesterov momentum looks one step ahead: it steps along g + momentum * buf, the direction the
// buffer will have after this step, rather than the buffer itself.
void CpuBackend::sgd_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                          std::span<const TensorRef> momentum_buffers, const SgdStep& h) {
  check_sgd_step("cpu", params, grads, momentum_buffers, h);
  const bool use_momentum = h.momentum != 0.0;
  for_each_param(params, [&](auto tag, size_t i) {
    using T = decltype(tag);
    T* p = params[i].data<T>();
    const T* g = grads[i].data<T>();
    T* buf = use_momentum ? momentum_buffers[i].data<T>() : nullptr;
    const T lr = static_cast<T>(h.lr), wd = static_cast<T>(h.weight_decay);
    const T mu = static_cast<T>(h.momentum), keep = static_cast<T>(1.0 - h.dampening);
    elements(params[i].numel(), [&](int64_t j) {
      T d = g[j];
      if (h.weight_decay != 0.0) d += wd * p[j];  // L2 penalty 0.5 * wd * p^2 has gradient wd * p
      if (use_momentum) {
        // The first step seeds the buffer with the gradient itself: no zeros to warm up from.
        buf[j] = h.init_buffers ? d : mu * buf[j] + keep * d;
        d = h.nesterov ? d + mu * buf[j] : buf[j];
      }
      p[j] -= lr * d;
    });
  });
}

// ---- Adam and AdamW ----
//
// Adam divides a running mean of the gradient (m, the first moment) by the square root of a
// running mean of its square (v, the second moment), so every element takes a step of about lr
// whatever the scale of its gradient. Both averages start at 0 and are biased towards it in the
// first steps; dividing by bc = 1 - beta^t undoes that (after one step, m / bc1 is exactly g).
// eps keeps the division finite where the gradient has always been 0.
//
// Weight decay: Adam adds wd * p to the gradient, so the decay too is divided by sqrt(v) and
// elements with large gradients barely decay. AdamW (decoupled) shrinks p by lr * wd directly,
// the same for every element: the fix that made AdamW the usual choice.
//
// amsgrad keeps the largest v seen so far and divides by that, so an element's step never
// grows back after its gradient has been large once (a fix for Adam's convergence proof).
void CpuBackend::adam_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                           std::span<const TensorRef> exp_avgs, std::span<const TensorRef> exp_avg_sqs,
                           std::span<const TensorRef> max_exp_avg_sqs, const AdamStep& h) {
  check_adam_step("cpu", params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, h);
  const bool l2 = h.weight_decay != 0.0 && !h.decoupled_weight_decay;
  for_each_param(params, [&](auto tag, size_t i) {
    using T = decltype(tag);
    T* p = params[i].data<T>();
    const T* g = grads[i].data<T>();
    T* m = exp_avgs[i].data<T>();
    T* v = exp_avg_sqs[i].data<T>();
    T* v_max = h.amsgrad ? max_exp_avg_sqs[i].data<T>() : nullptr;
    const T wd = static_cast<T>(h.weight_decay);
    const T decay = static_cast<T>(1.0 - h.lr * h.weight_decay);
    const T beta1 = static_cast<T>(h.beta1), one_minus_beta1 = static_cast<T>(1.0 - h.beta1);
    const T beta2 = static_cast<T>(h.beta2), one_minus_beta2 = static_cast<T>(1.0 - h.beta2);
    // Both corrections fold into two scalars: the step size lr / bc1 and sqrt(bc2).
    const T step_size = static_cast<T>(h.lr / h.bias_correction1);
    const T bc2_sqrt = static_cast<T>(std::sqrt(h.bias_correction2));
    const T eps = static_cast<T>(h.eps);
    elements(params[i].numel(), [&](int64_t j) {
      T d = g[j];
      if (l2) d += wd * p[j];
      if (h.decoupled_weight_decay) p[j] *= decay;
      m[j] = beta1 * m[j] + one_minus_beta1 * d;
      v[j] = beta2 * v[j] + one_minus_beta2 * d * d;
      T second = v[j];
      if (h.amsgrad) second = v_max[j] = std::max(v_max[j], v[j]);
      const T denom = std::sqrt(second) / bc2_sqrt + eps;
      p[j] -= step_size * (m[j] / denom);
    });
  });
}

// ---- Adadelta ----
//
// Adadelta needs no learning rate in principle (lr = 1 is the default): it scales the gradient
// by the ratio of two running RMS values, that of past updates (u) over that of past gradients
// (v). The ratio carries the parameter's units, so the step has the units of p, not of
// 1 / gradient as in plain SGD. eps seeds the very first update, when u is still 0.
void CpuBackend::adadelta_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                               std::span<const TensorRef> square_avgs,
                               std::span<const TensorRef> acc_deltas, const AdadeltaStep& h) {
  check_adadelta_step("cpu", params, grads, square_avgs, acc_deltas);
  for_each_param(params, [&](auto tag, size_t i) {
    using T = decltype(tag);
    T* p = params[i].data<T>();
    const T* g = grads[i].data<T>();
    T* v = square_avgs[i].data<T>();
    T* u = acc_deltas[i].data<T>();
    const T lr = static_cast<T>(h.lr), wd = static_cast<T>(h.weight_decay);
    const T rho = static_cast<T>(h.rho), one_minus_rho = static_cast<T>(1.0 - h.rho);
    const T eps = static_cast<T>(h.eps);
    elements(params[i].numel(), [&](int64_t j) {
      T d = g[j];
      if (h.weight_decay != 0.0) d += wd * p[j];
      v[j] = rho * v[j] + one_minus_rho * d * d;
      const T delta = std::sqrt(u[j] + eps) / std::sqrt(v[j] + eps) * d;
      u[j] = rho * u[j] + one_minus_rho * delta * delta;
      p[j] -= lr * delta;
    });
  });
}

// ---- RMSprop ----
//
// RMSprop divides the gradient by the root of a running mean of its square, as Adam does, but
// without a first moment and without bias correction (so its first steps are large: v starts
// at (1 - alpha) * g^2). Centered RMSprop subtracts the squared running mean of the gradient,
// dividing by an estimate of its standard deviation instead of its RMS. With momentum, the
// normalised gradient accumulates in a buffer as in SGD.
void CpuBackend::rmsprop_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                              std::span<const TensorRef> square_avgs,
                              std::span<const TensorRef> momentum_buffers,
                              std::span<const TensorRef> grad_avgs, const RmspropStep& h) {
  check_rmsprop_step("cpu", params, grads, square_avgs, momentum_buffers, grad_avgs, h);
  const bool use_momentum = h.momentum > 0.0;
  for_each_param(params, [&](auto tag, size_t i) {
    using T = decltype(tag);
    T* p = params[i].data<T>();
    const T* g = grads[i].data<T>();
    T* v = square_avgs[i].data<T>();
    T* buf = use_momentum ? momentum_buffers[i].data<T>() : nullptr;
    T* g_avg = h.centered ? grad_avgs[i].data<T>() : nullptr;
    const T lr = static_cast<T>(h.lr), wd = static_cast<T>(h.weight_decay);
    const T alpha = static_cast<T>(h.alpha), one_minus_alpha = static_cast<T>(1.0 - h.alpha);
    const T eps = static_cast<T>(h.eps), mu = static_cast<T>(h.momentum);
    elements(params[i].numel(), [&](int64_t j) {
      T d = g[j];
      if (h.weight_decay != 0.0) d += wd * p[j];
      v[j] = alpha * v[j] + one_minus_alpha * d * d;
      T avg;
      if (h.centered) {
        g_avg[j] = alpha * g_avg[j] + one_minus_alpha * d;
        avg = std::sqrt(v[j] - g_avg[j] * g_avg[j]);  // E[g^2] - E[g]^2: the variance
      } else {
        avg = std::sqrt(v[j]);
      }
      avg += eps;
      if (use_momentum) {
        buf[j] = mu * buf[j] + d / avg;
        p[j] -= lr * buf[j];
      } else {
        p[j] -= lr * (d / avg);
      }
    });
  });
}

}  // namespace kiln::cpu
