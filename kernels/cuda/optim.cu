// Optimizer steps on the GPU: SGD, Adam/AdamW, Adadelta and RMSprop, each one fused
// multi-tensor launch over a whole list of parameters.
//
// A step is elementwise and bound by memory bandwidth (kernels/cpu/optim.cpp says why each rule
// is one fused loop). On a GPU a second cost appears: launches. The MNIST CNN has 8 parameter
// tensors, some tiny (a bias of 10 floats), and one launch per tensor would cost more than the
// arithmetic. So one launch covers many tensors: the host packs, per tensor, its pointers (the
// parameter, its gradient, its state) and its length into a struct passed by value as the
// kernel's argument, and splits every tensor into chunks of kChunk elements; each block walks
// every kGridBlocks-th chunk, finding each one's tensor by a binary search of where the tensors'
// chunks start. A list of more tensors than one struct holds goes in several launches. This is
// the layout of NVIDIA apex's multi_tensor_apply, which PyTorch's foreach optimizers also use
// (there, one (tensor, chunk) per block).
//
// The per-element formulas are the CPU's (and PyTorch's), operation by operation, in the
// parameters' type: f32 in float, f64 in double, hyperparameters and derived constants formed
// in double on the host. This file is compiled with --fmad=false (kernels/cuda/CMakeLists.txt):
// by default nvcc contracts a * b + c into one fused multiply-add where the CPU rounds twice, and
// where a gradient nearly cancels its weight decay that last bit decides the step's direction.
//
// In a captured step (core/capture.h) the hyperparameters change from replay to replay (the
// scheduler's learning rate, Adam's bias corrections), so the rule struct is then also a replay
// value: the kernel takes a pointer to this replay's copy in device memory and reads it first.
// Built on the host from the optimizer's `next` by the same functions, it holds the same bits an
// eager step's argument would.
//
// Bench: the steps are timed as part of a training step (mnist-train --device cuda).
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda {

namespace {

// Chunks of 16 elements a thread: at 64 a thread, with a thread's elements one after another,
// the block count, not the bandwidth, set the pace: MNIST's 1.2M parameters made only 73 blocks
// (history: NOTES.md). A launch's blocks walk its chunks kGridBlocks apart, about what an H100
// holds at once, so that a list of any length up to kMaxTensors tensors is one launch (dist-bench
// ddp's 134M parameters took 33 launches when every block owned one chunk).
constexpr int kMaxTensors = 256;     // per launch
constexpr int64_t kGridBlocks = 1024;
constexpr int64_t kChunk = 4096;     // elements per chunk: 16 per thread at 256 threads

// The kernel's argument: Depth pointers per tensor (param, grad, state...), lengths, where each
// tensor's chunks start in the launch's run of chunks, and whether every operand of the tensor is
// 16-byte aligned (the vector path). About 14.6 KB at Depth 5: kernel arguments may take up to
// 32 KB since CUDA 12.1 (Volta and later), 4 KB before.
template <int Depth>
struct TensorLists {
  void* ptrs[Depth][kMaxTensors];
  int64_t sizes[kMaxTensors];
  int64_t first_chunk[kMaxTensors + 1];  // tensor i owns chunks [first_chunk[i], first_chunk[i + 1])
  bool aligned[kMaxTensors];
  int tensors;
};
static_assert(sizeof(TensorLists<5>) < 32764, "kernel arguments are limited to 32,764 bytes");

// A rule works on one element's values x[0..Depth) (parameter, gradient, state), loaded from the
// operands that exist (a null list, state the step does not keep, reads as 0 and is never
// written); everything but the gradient is stored back.
template <class T, int Depth, class Rule>
__device__ void apply_one(const Rule& rule, T* const* p, int64_t j) {
  T x[Depth];
  for (int d = 0; d < Depth; ++d) x[d] = p[d] ? p[d][j] : T(0);
  rule(x);
  for (int d = 0; d < Depth; ++d)
    if (d != 1 && p[d]) p[d][j] = x[d];
}

// Where a tensor's operands are all 16-byte aligned, a thread loads kUnroll vectors of N elements
// of every operand before it computes or stores any: 16 f32 elements' operands in flight a thread
// instead of one. One element at a time, each load waits for the store before it, which the
// compiler must assume may alias. kernel-bench --only optim, H100, both paths in one call: SGD on
// 134M parameters 556.1 µs [fig kernels.optim.sgd.vectors.us] in vectors,
// 96% [fig kernels.optim.sgd.vectors.pct-copy] of copy bandwidth, against
// 1275 µs [fig kernels.optim.sgd.scalar.us] an element at a time, 42% [fig kernels.optim.sgd.scalar.pct-copy];
// Adadelta on MNIST's 1.2M, 11.09 µs [fig kernels.optim.adadelta.vectors.us] against
// 16.65 µs [fig kernels.optim.adadelta.scalar.us] (their 34 MB stay in the 50 MB L2 from one timed
// step to the next). The vectors a thread takes sit blockDim.x apart, so a warp's loads stay
// coalesced.
template <class T, int Depth, class Rule>
__device__ void apply_vectors(const Rule& rule, T* const* p, int64_t begin, int64_t end) {
  // Five operands (Adam, RMSprop) four vectors deep took 158 registers a thread (one block an SM):
  // two vectors deep there.
  constexpr int N = 16 / sizeof(T), kUnroll = Depth >= 5 ? 2 : 4;
  using V = Vec<T, N>;
  const int64_t vectors = (end - begin) / N;  // begin is a multiple of kChunk, so of N
  for (int64_t k0 = threadIdx.x; k0 < vectors; k0 += static_cast<int64_t>(blockDim.x) * kUnroll) {
    V v[kUnroll][Depth];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + u * static_cast<int64_t>(blockDim.x);
#pragma unroll
      for (int d = 0; d < Depth; ++d)
        if (k < vectors && p[d]) v[u][d] = reinterpret_cast<const V*>(p[d] + begin)[k];
        else v[u][d] = V{};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int e = 0; e < N; ++e) {
        T x[Depth];
#pragma unroll
        for (int d = 0; d < Depth; ++d) x[d] = v[u][d].v[e];
        rule(x);
#pragma unroll
        for (int d = 0; d < Depth; ++d) v[u][d].v[e] = x[d];
      }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + u * static_cast<int64_t>(blockDim.x);
#pragma unroll
      for (int d = 0; d < Depth; ++d)
        if (d != 1 && k < vectors && p[d]) reinterpret_cast<V*>(p[d] + begin)[k] = v[u][d];
    }
  }
  for (int64_t j = begin + vectors * N + threadIdx.x; j < end; j += blockDim.x) apply_one<T, Depth>(rule, p, j);
}

template <class T, int Depth, class Rule>
__global__ void multi_tensor_kernel(const __grid_constant__ TensorLists<Depth> lists, Rule rule, const Rule* replay) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  if (replay) rule = *replay;  // captured: this replay's hyperparameters
  for (int64_t c = blockIdx.x; c < lists.first_chunk[lists.tensors]; c += gridDim.x) {
    const int t = chunk_owner(lists.first_chunk, lists.tensors, c);
    const int64_t begin = (c - lists.first_chunk[t]) * kChunk;
    const int64_t end = begin + kChunk < lists.sizes[t] ? begin + kChunk : lists.sizes[t];
    T* p[Depth];
    for (int d = 0; d < Depth; ++d) p[d] = static_cast<T*>(lists.ptrs[d][t]);
    if (lists.aligned[t]) {
      apply_vectors<T, Depth>(rule, p, begin, end);
    } else {
      for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) apply_one<T, Depth>(rule, p, j);
    }
  }
}

// Runs rule over every element of every tensor, lists[d][i] being the d-th operand of tensor i
// (lists[0]: the parameters). Empty lists (state a step does not keep) pass null pointers.
template <class T, int Depth, class Rule>
void multi_tensor_apply(cudaStream_t stream, const std::span<const TensorRef> (&lists)[Depth], const Rule& rule,
                        const Rule* replay, const char* op) {
  TensorLists<Depth> args{};
  auto launch = [&] {
    const int64_t chunks = args.first_chunk[args.tensors];
    if (chunks > 0) {
      const auto blocks = static_cast<unsigned>(chunks < kGridBlocks ? chunks : kGridBlocks);
      launch_dependent(multi_tensor_kernel<T, Depth, Rule>, blocks, kThreads, 0, stream, args, rule, replay);
      KILN_CUDA_LAUNCH_CHECK(op);
    }
    args.tensors = 0;
  };
  for (size_t i = 0; i < lists[0].size(); ++i) {
    const int64_t n = lists[0][i].numel();
    if (n == 0) continue;
    if (args.tensors == kMaxTensors) launch();
    const int t = args.tensors++;
    args.aligned[t] = true;
    for (int d = 0; d < Depth; ++d) {
      T* data = lists[d].empty() ? nullptr : lists[d][i].template data<T>();
      args.ptrs[d][t] = data;
      args.aligned[t] = args.aligned[t] && reinterpret_cast<uintptr_t>(data) % 16 == 0;
    }
    args.sizes[t] = n;
    args.first_chunk[t + 1] = args.first_chunk[t] + (n + kChunk - 1) / kChunk;
  }
  launch();
}

// ---- the rules: x[0] the parameter, x[1] its gradient, then the state ----

template <class T>
struct Sgd {
  T lr, wd, mu, keep;
  bool decay, momentum, init, nesterov;
  __device__ void operator()(T (&x)[3]) const {
    T d = x[1];
    if (decay) d += wd * x[0];
    if (momentum) {
      x[2] = init ? d : mu * x[2] + keep * d;
      d = nesterov ? d + mu * x[2] : x[2];
    }
    x[0] -= lr * d;
  }
};

template <class T>
struct Adam {
  T wd, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps;
  bool l2, decoupled, amsgrad;
  __device__ void operator()(T (&x)[5]) const {
    T d = x[1];
    if (l2) d += wd * x[0];
    if (decoupled) x[0] *= decay;
    const T m = x[2] = beta1 * x[2] + one_minus_beta1 * d;
    T v = x[3] = beta2 * x[3] + one_minus_beta2 * d * d;
    if (amsgrad) v = x[4] = x[4] > v ? x[4] : v;
    const T denom = sqrt(v) / bc2_sqrt + eps;
    x[0] -= step_size * (m / denom);
  }
};

template <class T>
struct Adadelta {
  T lr, wd, rho, one_minus_rho, eps;
  bool decay;
  __device__ void operator()(T (&x)[4]) const {
    T d = x[1];
    if (decay) d += wd * x[0];
    const T v = x[2] = rho * x[2] + one_minus_rho * d * d;
    const T delta = sqrt(x[3] + eps) / sqrt(v + eps) * d;
    x[3] = rho * x[3] + one_minus_rho * delta * delta;
    x[0] -= lr * delta;
  }
};

template <class T>
struct Rmsprop {
  T lr, wd, alpha, one_minus_alpha, eps, mu;
  bool decay, centered, momentum;
  __device__ void operator()(T (&x)[5]) const {
    T d = x[1];
    if (decay) d += wd * x[0];
    const T v = x[2] = alpha * x[2] + one_minus_alpha * d * d;
    T avg;
    if (centered) {
      const T g_avg = x[4] = alpha * x[4] + one_minus_alpha * d;
      avg = sqrt(v - g_avg * g_avg);
    } else {
      avg = sqrt(v);
    }
    avg += eps;
    if (momentum) {
      x[3] = mu * x[3] + d / avg;
      x[0] -= lr * x[3];
    } else {
      x[0] -= lr * (d / avg);
    }
  }
};

// The rules as the kernels take them, from the hyperparameters (in double, rounded once to T).
template <class T>
Sgd<T> sgd_rule(const SgdStep& h) {
  return {static_cast<T>(h.lr), static_cast<T>(h.weight_decay), static_cast<T>(h.momentum),
          static_cast<T>(1.0 - h.dampening), h.weight_decay != 0.0, h.momentum != 0.0, h.init_buffers,
          h.nesterov};
}

template <class T>
Adam<T> adam_rule(const AdamStep& h) {
  return {static_cast<T>(h.weight_decay),
          static_cast<T>(1.0 - h.lr * h.weight_decay),
          static_cast<T>(h.beta1),
          static_cast<T>(1.0 - h.beta1),
          static_cast<T>(h.beta2),
          static_cast<T>(1.0 - h.beta2),
          static_cast<T>(h.lr / h.bias_correction1),
          static_cast<T>(std::sqrt(h.bias_correction2)),
          static_cast<T>(h.eps),
          h.weight_decay != 0.0 && !h.decoupled_weight_decay,
          h.decoupled_weight_decay,
          h.amsgrad};
}

template <class T>
Adadelta<T> adadelta_rule(const AdadeltaStep& h) {
  return {static_cast<T>(h.lr), static_cast<T>(h.weight_decay), static_cast<T>(h.rho),
          static_cast<T>(1.0 - h.rho), static_cast<T>(h.eps), h.weight_decay != 0.0};
}

template <class T>
Rmsprop<T> rmsprop_rule(const RmspropStep& h) {
  return {static_cast<T>(h.lr),    static_cast<T>(h.weight_decay),   static_cast<T>(h.alpha),
          static_cast<T>(1.0 - h.alpha), static_cast<T>(h.eps), static_cast<T>(h.momentum),
          h.weight_decay != 0.0, h.centered, h.momentum > 0.0};
}

// Outside a capture, null: the kernel takes `rule` as its argument. Inside, the replay value that
// holds each replay's rule, made by `make` from the optimizer's `next`.
template <class Step, class Make>
auto replay_rule(CudaBackend& backend, const Step& h, Make make, const char* op)
    -> const decltype(make(h))* {
  using Rule = decltype(make(h));
  Capture* capture = backend.capture();
  if (!capture) return nullptr;
  KILN_CHECK(static_cast<bool>(h.next), CaptureError, "cuda ", op, ": captured without `next`, the "
             "hyperparameters of later replays (core/backend.h)");
  return capture->replay_value<Rule>(make(h), [next = h.next, make] { return make(next()); });
}

}  // namespace

void CudaBackend::sgd_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                           std::span<const TensorRef> momentum_buffers, const SgdStep& h) {
  check_sgd_step("cuda", params, grads, momentum_buffers, h);
  if (params.empty()) return;
  visit_floating(params[0].dtype, "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    const std::span<const TensorRef> lists[3] = {params, grads, momentum_buffers};
    multi_tensor_apply<T>(stream_, lists, sgd_rule<T>(h), replay_rule(*this, h, sgd_rule<T>, "sgd_step"), "sgd_step");
  });
}

void CudaBackend::adam_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                            std::span<const TensorRef> exp_avgs, std::span<const TensorRef> exp_avg_sqs,
                            std::span<const TensorRef> max_exp_avg_sqs, const AdamStep& h) {
  check_adam_step("cuda", params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, h);
  if (params.empty()) return;
  visit_floating(params[0].dtype, "adam_step", [&](auto tag) {
    using T = decltype(tag);
    const std::span<const TensorRef> lists[5] = {params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs};
    multi_tensor_apply<T>(stream_, lists, adam_rule<T>(h), replay_rule(*this, h, adam_rule<T>, "adam_step"),
                          "adam_step");
  });
}

void CudaBackend::adadelta_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                                std::span<const TensorRef> square_avgs, std::span<const TensorRef> acc_deltas,
                                const AdadeltaStep& h) {
  check_adadelta_step("cuda", params, grads, square_avgs, acc_deltas);
  if (params.empty()) return;
  visit_floating(params[0].dtype, "adadelta_step", [&](auto tag) {
    using T = decltype(tag);
    const std::span<const TensorRef> lists[4] = {params, grads, square_avgs, acc_deltas};
    multi_tensor_apply<T>(stream_, lists, adadelta_rule<T>(h),
                          replay_rule(*this, h, adadelta_rule<T>, "adadelta_step"), "adadelta_step");
  });
}

void CudaBackend::rmsprop_step(std::span<const TensorRef> params, std::span<const TensorRef> grads,
                               std::span<const TensorRef> square_avgs, std::span<const TensorRef> momentum_buffers,
                               std::span<const TensorRef> grad_avgs, const RmspropStep& h) {
  check_rmsprop_step("cuda", params, grads, square_avgs, momentum_buffers, grad_avgs, h);
  if (params.empty()) return;
  visit_floating(params[0].dtype, "rmsprop_step", [&](auto tag) {
    using T = decltype(tag);
    const std::span<const TensorRef> lists[5] = {params, grads, square_avgs, momentum_buffers, grad_avgs};
    multi_tensor_apply<T>(stream_, lists, rmsprop_rule<T>(h),
                          replay_rule(*this, h, rmsprop_rule<T>, "rmsprop_step"), "rmsprop_step");
  });
}

}  // namespace kiln::cuda
