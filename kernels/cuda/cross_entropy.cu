// Cross-entropy on the GPU, log-softmax fused in: logits [N, C], targets i32 [N], per sample
//
//   losses[i] = (1 - s) * -log p[i, t_i] + s * mean_c(-log p[i, c]),   p = softmax(logits[i])
//   grad_logits[i, c] = grad_losses[i] * (p[i, c] - (1 - s) * [c == t_i] - s / C)
//
// with s the label smoothing. With m the row's max and S = sum_c exp(logits[i, c] - m),
// -log p[i, c] = (m - logits[i, c]) + log S, so one pass over the row (the online (max, sum)
// state of softmax.cuh, plus the plain sum of the logits for the smoothing term) gives the loss.
// The passes over a row are softmax.cu's, from softmax.cuh; the versions add the target's terms.
//
// Bench: `kernel-bench --only cross_entropy` (GB/s against the copy bandwidth). How the versions
// came to be: kernels/cuda/NOTES.md. Figures below: ms and share of the copy bandwidth, f32 (H100
// 80GB HBM3, kernel-bench, docs/runs/2026-11-26-h100; every row: kernels/README.md).
//
// warp per row (forward and backward): softmax.cu's version 2; lane 0 writes the loss, or every
//   lane its elements' p - target times the incoming gradient. [65536, 10] forward
//   0.0311 ms [fig cuda.cross_entropy.fwd-warp.65536x10.ms],
//   3% [fig cuda.cross_entropy.fwd-warp.65536x10.pct-copy]; backward
//   0.0258 ms [fig cuda.cross_entropy.bwd-warp.65536x10.ms],
//   7% [fig cuda.cross_entropy.bwd-warp.65536x10.pct-copy].
// block per row (forward and backward): version 3, 512 threads per row, 16-byte loads where the row
//   allows. [8192, 32000] forward 0.4124 ms [fig cuda.cross_entropy.fwd-block.8192x32000.ms],
//   85% [fig cuda.cross_entropy.fwd-block.8192x32000.pct-copy]; backward
//   1.0943 ms [fig cuda.cross_entropy.bwd-block.8192x32000.ms],
//   64% [fig cuda.cross_entropy.bwd-block.8192x32000.pct-copy].
// rows per warp (forward and backward, C <= 32): version 5, a group of 1 to 8 lanes per row.
//   [65536, 10] forward 0.0061 ms [fig cuda.cross_entropy.fwd-lanes.65536x10.ms],
//   17% [fig cuda.cross_entropy.fwd-lanes.65536x10.pct-copy]; backward
//   0.0066 ms [fig cuda.cross_entropy.bwd-lanes.65536x10.ms],
//   29% [fig cuda.cross_entropy.bwd-lanes.65536x10.pct-copy].
// backward, row in registers (C >= 512, up to 32768 f32, 8192 f64): version 6, the logits read once
//   and the gradient written once. [8192, 32000]
//   0.7151 ms [fig cuda.cross_entropy.bwd-registers.8192x32000.ms],
//   98% [fig cuda.cross_entropy.bwd-registers.8192x32000.pct-copy].
// forward, block per row, unrolled (C > 1024): kUnrolledThreads (256) threads per row, each loading
//   kUnroll packs of 16 bytes before it uses any; a step's max rescales the running sum once, then
//   one exp and no branch per element; one barrier per row. [8192, 32000]
//   0.3417 ms [fig cuda.cross_entropy.fwd-unrolled.8192x32000.ms],
//   102% [fig cuda.cross_entropy.fwd-unrolled.8192x32000.pct-copy].
// backward, row split between registers and shared memory (C >= kSplitRowMin): 512 threads hold 8
//   packs each in registers (4 in f64) and the rest of the row in shared memory (cp.async), so two
//   rows share an SM: one row's loads run while the other reduces and writes. [8192, 32000]
//   0.7205 ms [fig cuda.cross_entropy.bwd-split.8192x32000.ms],
//   97% [fig cuda.cross_entropy.bwd-split.8192x32000.pct-copy].
// the batch's loss in one block (forward, a mean or sum of rows * C <= kReducedMaxElements, 65536,
//   C <= 1024): version 8. Each row's loss as versions 5 and 2 make it, added by the lane that
//   makes it to its own double in row order, then the block's in a fixed order; with the backward
//   reading the one incoming gradient (RowGrads) it is the whole loss of a training step, one
//   launch each way where the widened logits, the losses, their mean, the mean's gradient, the
//   backward and its narrowing took six. MNIST's bf16 step: 4.68 µs [fig kernels.loss.b64-bf16.forward.us] at
//   batch 64, 7.32 µs [fig kernels.loss.b512-bf16.forward.us] at 512 (Nsight Compute,
//   docs/runs/2026-11-27-h100-loss-kernels).
// Production picks by C: rows per warp up to 32, then warp per row; the forward uses the unrolled
//   block version above 1024; the backward the registers version from 512 and the split version
//   from kSplitRowMin, 2048, where the two tied on an H100 (history: NOTES.md; block where it does
//   not fit). A mean or sum takes version 8 where the batch fits it. bf16 logits are read by
//   versions 2, 5 and 8 as they are, computing in f32 (the losses f32, the gradient rounded to bf16
//   once); the block versions read f32 and f64, so longer bf16 rows are widened first.
//
// Precision: the (max, sum) state accumulates in the working type (float for f32, as softmax.cu
// explains); the loss itself is assembled in double from m, the target's logit and log S, and
// the logits' sum runs in double, so a loss that is the small difference of large logits
// (1e3 and up) keeps its digits, as on the CPU.
//
// A target outside [0, C) cannot throw from a kernel: its loss (its row of gradient) is NaN,
// and the kernel records the fault, which the host throws as a ValueError at the next
// synchronisation (fault.cuh), where the CPU throws at once. Non-finite logits give what the CPU
// (and PyTorch) gives: a NaN or +inf in the row, or a row of -inf, makes its loss and gradient NaN;
// a -inf logit off the target has probability 0 and leaves the loss finite without smoothing
// (+inf with it, as its -log p is +inf); the target at -inf gives +inf.
#include <cuda_pipeline.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiln/kernels/cuda/argmax.cuh"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/fault.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/softmax.cuh"

namespace kiln::cuda::softmax {

using namespace detail;

namespace {

__device__ inline bool valid(int32_t t, int64_t classes) { return t >= 0 && t < classes; }

// The loss of one row from its state a (finished), the target's logit and the sum of its logits.
template <class T>
__device__ inline T row_loss(const MaxSum<T>& a, T target_logit, double total, int64_t classes, double s) {
  const double m = a.m, log_s = log_of(static_cast<double>(a.s));
  const double nll = (m - static_cast<double>(target_logit)) + log_s;       // -log p[i, t_i]
  const double smooth = (m - total / static_cast<double>(classes)) + log_s;  // mean_c(-log p[i, c])
  // Without smoothing the term is left out, not multiplied by 0: a -inf logit off the target makes
  // it +inf, and 0 * inf would turn a finite loss into NaN (PyTorch adds it only for s > 0).
  return static_cast<T>(s > 0 ? (1.0 - s) * nll + s * smooth : nll);
}

// grad_losses[i] * (p[i, c] - target[c]) for one element.
template <class T>
__device__ inline T grad_of(T v, const MaxSum<T>& a, T g, bool is_target, T on, T off) {
  return g * (exp_of(v - a.m) / a.s - (is_target ? on : off));
}

// Row r's loss: row_loss where the target t is in [0, C), else NaN and the fault recorded.
// target_logit() reads the target's logit; it is called only for a valid t.
template <class T, class Logit>
__device__ inline T loss_or_fault(int64_t r, int32_t t, int64_t classes, const MaxSum<T>& a, double total, double s,
                                  DeviceFault* fault, Logit target_logit) {
  if (valid(t, classes)) return row_loss(a, static_cast<T>(target_logit()), total, classes, s);
  if (fault) report_fault(fault, FaultOp::cross_entropy, t, r, classes);
  return T(NAN);
}

// The backward's check of row r's target: outside [0, C) the row's sum becomes NaN, so its whole
// gradient is NaN, and one thread of the row (`reports`) records the fault.
template <class T>
__device__ inline void check_target(MaxSum<T>& a, int32_t t, int64_t r, int64_t classes, bool reports,
                                    DeviceFault* fault) {
  if (!valid(t, classes)) {
    a.s = NAN;
    if (reports && fault) report_fault(fault, FaultOp::cross_entropy_backward, t, r, classes);
  }
}

// Row at.r's loss, made by the G lanes of its group: version 5's pass (G <= 8, C <= 4G lanes' worth)
// or version 2's (G = 32: a warp a row, any C). Every lane of the warp calls it (the group's
// shuffles); the group's first lane gets the loss of a live row (it reads the target and records a
// fault), the others 0. S is the logits' storage type (bf16 too); the loss is compute_t<S>.
template <int G, class S, class T = compute_t<S>>
__device__ inline T group_row_loss(const S* x, const int32_t* targets, const GroupRow& at, int64_t classes, double s,
                                   DeviceFault* fault) {
  double total = 0;
  auto add_up = [&](T v) { total += static_cast<double>(v); };
  MaxSum<T> a;
  if constexpr (G == 32) {
    a = warp_row_state(x + at.r * classes, classes, add_up);  // one row a warp: every lane's row is live
  } else {
    T v[kGroupValues];
    a = group_row_state<G>(x, classes, at, v, add_up);
  }
  total = group_sum<G>(total);
  if (!at.live || at.sub != 0) return T(0);
  const int32_t t = targets[at.r];
  return loss_or_fault(at.r, t, classes, a, total, s, fault, [&] { return x[at.r * classes + t]; });
}

// Whether row at.r's argmax is its target, known to the group's first lane: each lane the best of
// its elements, the group's bests combined by beats() (argmax.cuh's order) in log2(G) shuffles.
template <int G, class S>
__device__ inline bool group_row_hit(const S* x, const int32_t* targets, const GroupRow& at, int64_t classes) {
  using T = compute_t<S>;
  T best{};
  int64_t best_i = -1;
  if (at.live)
    for (int64_t c = at.sub; c < classes; c += G) {
      const T v = cast<T>(x[at.r * classes + c]);
      if (best_i < 0 || beats(v, c, best, best_i, true)) best = v, best_i = c;
    }
  for (int offset = G / 2; offset > 0; offset /= 2) {  // within the group: its lanes are neighbours
    const T v = __shfl_xor_sync(0xffffffffu, best, offset);
    const int64_t i = __shfl_xor_sync(0xffffffffu, best_i, offset);
    if (i >= 0 && (best_i < 0 || beats(v, i, best, best_i, true))) best = v, best_i = i;
  }
  return at.live && at.sub == 0 && best_i == targets[at.r];
}

// Versions 2 (G = 32) and 5: each row's loss, written by its group's first lane.
template <class S, int G>
__global__ void cross_entropy_rows_kernel(const S* x, const int32_t* targets, compute_t<S>* losses, int64_t rows,
                                          int64_t classes, double s, DeviceFault* fault) {
  for_each_group_row<G>(rows, [&](const GroupRow& at) {
    const compute_t<S> loss = group_row_loss<G>(x, targets, at, classes, s, fault);
    if (at.live && at.sub == 0) losses[at.r] = loss;
  });
}

// Version 8: the batch's loss, summed (or averaged) in the kernel that makes the rows' losses, in
// one block: each lane that makes a loss adds it (as rounded to compute_t<S>, the losses a
// per-row kernel would write) to its own double, in row order, and the block adds those in a fixed
// order, so the bits repeat. A block of kReducedThreads handles kReducedMaxElements of logits in a
// few microseconds; a larger batch takes the per-row kernel and a reduce, where one more launch
// costs little beside the rows. With a count, the block also counts the rows whose argmax is their
// target (a training step's correct predictions, which count_correct would take a launch of its
// own for): the group reads its row again from L1, finds its argmax, and the block adds the hits.
constexpr int kReducedThreads = 1024;

template <class S, int G>
__global__ void __launch_bounds__(kReducedThreads)
    cross_entropy_reduced_kernel(const S* x, const int32_t* targets, compute_t<S>* out, int32_t* count,
                                 int64_t rows, int64_t classes, double s, double divisor, DeviceFault* fault) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  __shared__ double warps[kReducedThreads / 32];
  __shared__ int warp_hits[kReducedThreads / 32];
  double sum = 0;
  int hits = 0;
  for_each_group_row<G>(rows, [&](const GroupRow& at) {
    const compute_t<S> loss = group_row_loss<G>(x, targets, at, classes, s, fault);
    if (at.live && at.sub == 0) sum += static_cast<double>(loss);
    if (count && group_row_hit<G>(x, targets, at, classes)) ++hits;  // count: the same for the block
  });
  sum = warp_sum(sum);
  hits = __reduce_add_sync(0xffffffffu, hits);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = sum, warp_hits[threadIdx.x / 32] = hits;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    int total_hits = 0;
    for (int w = 0; w < kReducedThreads / 32; ++w) total += warps[w], total_hits += warp_hits[w];
    out[0] = static_cast<compute_t<S>>(total / divisor);  // a mean of no rows: 0 / 0, NaN as PyTorch
    if (count) count[0] += total_hits;  // the one block: no other adds meanwhile
  }
}

template <class T, int V>
__global__ void cross_entropy_block_kernel(const T* x, const int32_t* targets, T* losses, int64_t rows,
                                           int64_t classes, double s, DeviceFault* fault) {
  __shared__ MaxSum<T> scratch[kBlock / 32];
  __shared__ double totals[kBlock / 32];
  const int64_t packs = classes / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * classes;
    double total = 0;
    MaxSum<T> a = thread_row_state(reinterpret_cast<const Pack<T, V>*>(row), packs,
                                   [&](T v) { total += static_cast<double>(v); });
    total = warp_sum(total);
    if (threadIdx.x % 32 == 0) totals[threadIdx.x / 32] = total;
    a = finish(block_combine(a, scratch));  // its first barrier also publishes totals
    if (threadIdx.x == 0) {
      total = 0;
      for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total += totals[w];
      const int32_t t = targets[r];
      losses[r] = loss_or_fault(r, t, classes, a, total, s, fault, [&] { return row[t]; });
    }
    __syncthreads();  // thread 0 has read totals before the next row overwrites it
  }
}

template <class S>
__global__ void cross_entropy_backward_warp_kernel(const S* x, const int32_t* targets, RowGrads<compute_t<S>> grads,
                                                   S* grad_x, int64_t rows, int64_t classes, double s,
                                                   DeviceFault* fault) {
  using T = compute_t<S>;
  const int lane = threadIdx.x % 32;
  const int64_t warps_per_block = blockDim.x / 32;
  const T on = static_cast<T>(1.0 - s + s / static_cast<double>(classes)), off = static_cast<T>(s / static_cast<double>(classes));
  for (int64_t r = blockIdx.x * warps_per_block + threadIdx.x / 32; r < rows; r += gridDim.x * warps_per_block) {
    const S* row = x + r * classes;
    S* gx = grad_x + r * classes;
    MaxSum<T> a = warp_row_state(row, classes);
    const int32_t t = targets[r];
    check_target(a, t, r, classes, lane == 0, fault);
    const T g = grads[r];
    for (int64_t c = lane; c < classes; c += 32)
      gx[c] = cast<S>(grad_of(static_cast<T>(row[c]), a, g, c == t, on, off));
  }
}

template <class T, int V>
__global__ void cross_entropy_backward_block_kernel(const T* x, const int32_t* targets, const T* grad_losses,
                                                    T* grad_x, int64_t rows, int64_t classes, double s,
                                                    DeviceFault* fault) {
  __shared__ MaxSum<T> scratch[kBlock / 32];
  const T on = static_cast<T>(1.0 - s + s / static_cast<double>(classes)), off = static_cast<T>(s / static_cast<double>(classes));
  const int64_t packs = classes / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto* row = reinterpret_cast<const Pack<T, V>*>(x + r * classes);
    auto* gx = reinterpret_cast<Pack<T, V>*>(grad_x + r * classes);
    MaxSum<T> a = block_row_state(row, packs, scratch);
    const int32_t t = targets[r];
    check_target(a, t, r, classes, threadIdx.x == 0, fault);
    const T g = grad_losses[r];
    for (int64_t j = threadIdx.x; j < packs; j += blockDim.x) {
      Pack<T, V> p = row[j];
#pragma unroll
      for (int e = 0; e < V; ++e) p.v[e] = grad_of(p.v[e], a, g, j * V + e == t, on, off);
      gx[j] = p;
    }
  }
}

// Rows of C <= 4G classes, G lanes per row, 32 / G rows per warp (softmax.cu's version 5): each
// lane keeps its elements in registers between the row's state and its writes.
template <class S, int G>
__global__ void cross_entropy_backward_rows_per_warp_kernel(const S* x, const int32_t* targets,
                                                            RowGrads<compute_t<S>> grads, S* grad_x, int64_t rows,
                                                            int64_t classes, double s, DeviceFault* fault) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  using T = compute_t<S>;
  const T on = static_cast<T>(1.0 - s + s / static_cast<double>(classes)), off = static_cast<T>(s / static_cast<double>(classes));
  for_each_group_row<G>(rows, [&](const GroupRow& at) {
    T v[kGroupValues];
    MaxSum<T> a = group_row_state<G>(x, classes, at, v);
    if (!at.live) return;
    const int64_t r = at.r;
    const int32_t t = targets[r];
    check_target(a, t, r, classes, at.sub == 0, fault);
    const T g = grads[r];
#pragma unroll
    for (int k = 0; k < kGroupValues; ++k) {
      const int64_t c = at.sub + k * G;
      if (c < classes) grad_x[r * classes + c] = cast<S>(grad_of(v[k], a, g, c == t, on, off));
    }
  });
}

// The row in registers (softmax.cu's version 6): logits read once, the gradient written once.
template <class T, int V, int P>
__global__ void __launch_bounds__(1024)
    cross_entropy_backward_registers_kernel(const T* x, const int32_t* targets, const T* grad_losses, T* grad_x,
                                            int64_t rows, int64_t classes, double s, DeviceFault* fault) {
  __shared__ MaxSum<T> scratch[32];
  const T on = static_cast<T>(1.0 - s + s / static_cast<double>(classes)), off = static_cast<T>(s / static_cast<double>(classes));
  const int64_t packs = classes / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto* row = reinterpret_cast<const Pack<T, V>*>(x + r * classes);
    auto* gx = reinterpret_cast<Pack<T, V>*>(grad_x + r * classes);
    Pack<T, V> p[P];
    const MaxSum<T> own = load_row_in_registers(row, packs, p, true);  // e = exp(v - m) replaces v
    MaxSum<T> a = finish(block_combine(own, scratch));
    const int32_t t = targets[r];
    check_target(a, t, r, classes, threadIdx.x == 0, fault);
    const T g = grad_losses[r];
    const T scale = exp_of(own.m - a.m) / a.s;  // p = e * exp(m - M) / S; NaN where the row is
    store_row_in_registers(gx, packs, p, [&](T e, int64_t c) { return g * (e * scale - (c == t ? on : off)); });
  }
}


// The forward with U packs in flight per thread. Each step loads U packs, takes their max, rescales
// the running sum once, then adds U * V exps: the online state without add()'s branch and second
// exp per element. fmax drops a NaN, but exp(NaN - m) makes the sum NaN, and finish() makes it NaN
// where the max is infinite, so the row's loss is NaN as before. One barrier per row: the warps'
// partials go to one of two scratch rows by the row's parity, and warp 0 combines them while
// the other warps start the next row.
template <class T, int V, int U, int Threads>
__global__ void __launch_bounds__(Threads)
    cross_entropy_block_unrolled_kernel(const T* x, const int32_t* targets, T* losses, int64_t rows, int64_t classes,
                                        double s, DeviceFault* fault) {
  struct Partial {
    MaxSum<T> a;
    double total;
  };
  constexpr int warps = Threads / 32;
  __shared__ Partial scratch[2][warps];
  const int64_t packs = classes / V;
  const int lane = threadIdx.x % 32;
  int parity = 0;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x, parity ^= 1) {
    const T* row = x + r * classes;
    // thread 0 fetches the target and its logit first: their latency hides behind the row's
    int32_t t = 0;
    T target_logit = 0;
    if (threadIdx.x == 0) {
      t = targets[r];
      if (valid(t, classes)) target_logit = row[t];
    }
    const auto* packed = reinterpret_cast<const Pack<T, V>*>(row);
    T m = -INFINITY, sum = 0;
    double total = 0;
    for (int64_t j0 = threadIdx.x; j0 < packs; j0 += int64_t{Threads} * U) {
      Pack<T, V> p[U];
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (j0 + u * Threads < packs) p[u] = packed[j0 + u * Threads];
      T step_max = m;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (j0 + u * Threads < packs)
#pragma unroll
          for (int e = 0; e < V; ++e) step_max = max_of(step_max, p[u].v[e]);
      sum *= shifted_exp(m, step_max);
      m = step_max;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (j0 + u * Threads < packs)
#pragma unroll
          for (int e = 0; e < V; ++e) {
            sum += shifted_exp(p[u].v[e], m);
            total += static_cast<double>(p[u].v[e]);
          }
    }
    MaxSum<T> a = warp_combine(MaxSum<T>{m, sum});
    total = warp_sum(total);
    if (lane == 0) scratch[parity][threadIdx.x / 32] = Partial{a, total};
    // Warp 0 reads scratch[parity] after this barrier; a warp writes it again two rows on, after
    // passing the next row's barrier, which warp 0 reaches only once it has read it.
    __syncthreads();
    if (threadIdx.x < 32) {
      a = lane < warps ? scratch[parity][lane].a : none<T>();
      total = lane < warps ? scratch[parity][lane].total : 0.0;
      a = finish(warp_combine(a));
      total = warp_sum(total);
      if (lane == 0) {
        losses[r] = loss_or_fault(r, t, classes, a, total, s, fault, [&] { return target_logit; });
      }
    }
  }
}

// The backward with the row split between registers (P packs a thread) and shared memory (q packs
// a thread, copied there by cp.async, which needs no register while in flight). kSplitThreads
// threads hold P * kSplitThreads packs in registers at 64 registers a thread, so two blocks, two
// rows, share an SM: one row's loads run while the other row reduces and writes. Each thread
// reads back only the shared-memory slots it filled itself, so no barrier guards them. The
// target and the incoming gradient are fetched at the row's start.
constexpr int kSplitThreads = 512;
// f64's exps need more registers: at 8 packs (16 doubles) a thread spills (ptxas -v)
template <class T>
constexpr int kSplitRegisterPacks = sizeof(T) == 8 ? 4 : 8;

template <class T, int V, int P>
__global__ void __launch_bounds__(kSplitThreads, 2)
    cross_entropy_backward_split_kernel(const T* x, const int32_t* targets, const T* grad_losses, T* grad_x,
                                        int64_t rows, int64_t classes, int q, double s, DeviceFault* fault) {
  __shared__ MaxSum<T> scratch[kSplitThreads / 32];
  extern __shared__ __align__(16) unsigned char stash_bytes[];
  auto* stash = reinterpret_cast<Pack<T, V>*>(stash_bytes) + threadIdx.x;  // slot i at stash[i * kSplitThreads]
  const T on = static_cast<T>(1.0 - s + s / static_cast<double>(classes)), off = static_cast<T>(s / static_cast<double>(classes));
  const int64_t packs = classes / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int32_t t = targets[r];
    const T g = grad_losses[r];
    const auto* row = reinterpret_cast<const Pack<T, V>*>(x + r * classes);
    auto* gx = reinterpret_cast<Pack<T, V>*>(grad_x + r * classes);
    // pack j of slot i: registers j = threadIdx.x + i * kSplitThreads (i < P), then shared memory
    auto at = [&](int i) { return threadIdx.x + static_cast<int64_t>(i) * kSplitThreads; };
    for (int i = 0; i < q; ++i)
      if (at(P + i) < packs) __pipeline_memcpy_async(&stash[i * kSplitThreads], &row[at(P + i)], sizeof(Pack<T, V>));
    __pipeline_commit();
    Pack<T, V> p[P];
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (at(i) < packs) p[i] = row[at(i)];
    T m = -INFINITY;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (at(i) < packs)
#pragma unroll
        for (int e = 0; e < V; ++e) m = max_of(m, p[i].v[e]);
    __pipeline_wait_prior(0);
    for (int i = 0; i < q; ++i)
      if (at(P + i) < packs)
#pragma unroll
        for (int e = 0; e < V; ++e) m = max_of(m, stash[i * kSplitThreads].v[e]);
    // e = exp(v - m) replaces v, as in the registers version (fmax and NaN: see the forward above)
    T sum = 0;
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (at(i) < packs)
#pragma unroll
        for (int e = 0; e < V; ++e) {
          p[i].v[e] = shifted_exp(p[i].v[e], m);
          sum += p[i].v[e];
        }
    for (int i = 0; i < q; ++i)
      if (at(P + i) < packs) {
        Pack<T, V> w = stash[i * kSplitThreads];
#pragma unroll
        for (int e = 0; e < V; ++e) {
          w.v[e] = shifted_exp(w.v[e], m);
          sum += w.v[e];
        }
        stash[i * kSplitThreads] = w;
      }
    MaxSum<T> a = finish(block_combine(MaxSum<T>{m, sum}, scratch));
    check_target(a, t, r, classes, threadIdx.x == 0, fault);
    const T scale = exp_of(m - a.m) / a.s;  // p = e * exp(m - M) / S; NaN where the row is
#pragma unroll
    for (int i = 0; i < P; ++i)
      if (at(i) < packs) {
#pragma unroll
        for (int e = 0; e < V; ++e) p[i].v[e] = g * (p[i].v[e] * scale - (at(i) * V + e == t ? on : off));
        gx[at(i)] = p[i];
      }
    for (int i = 0; i < q; ++i)
      if (at(P + i) < packs) {
        Pack<T, V> w = stash[i * kSplitThreads];
#pragma unroll
        for (int e = 0; e < V; ++e) w.v[e] = g * (w.v[e] * scale - (at(P + i) * V + e == t ? on : off));
        gx[at(P + i)] = w;
      }
  }
}

constexpr int kUnrolledThreads = 256, kUnroll = 4;  // the forward's block and packs in flight per thread

constexpr int kWarps = kThreads / 32;

}  // namespace

template <class S>
void cross_entropy_warp(const S* logits, const int32_t* targets, compute_t<S>* losses, int64_t rows, int64_t classes,
                        double label_smoothing, DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_rows_kernel<S, 32><<<row_blocks((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      logits, targets, losses, rows, classes, label_smoothing, fault);
  KILN_CUDA_LAUNCH_CHECK("cross_entropy");
}

template <class T>
void cross_entropy_block(const T* logits, const int32_t* targets, T* losses, int64_t rows, int64_t classes,
                         double label_smoothing, DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  constexpr int v = 16 / sizeof(T);
  dispatch<1, v>(packable<T>(classes, logits, logits) ? v : 1, [&](auto pack) {
    cross_entropy_block_kernel<T, pack()><<<row_blocks(rows), kBlock, 0, stream>>>(logits, targets, losses, rows,
                                                                                     classes, label_smoothing, fault);
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy");
}

template <class S>
void cross_entropy_backward_warp(const S* logits, const int32_t* targets, RowGrads<compute_t<S>> grad_losses,
                                 S* grad_logits, int64_t rows, int64_t classes, double label_smoothing,
                                 DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_backward_warp_kernel<S><<<row_blocks((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault);
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

template <class T>
void cross_entropy_backward_block(const T* logits, const int32_t* targets, const T* grad_losses, T* grad_logits,
                                  int64_t rows, int64_t classes, double label_smoothing, DeviceFault* fault,
                                  cudaStream_t stream) {
  if (rows == 0) return;
  constexpr int v = 16 / sizeof(T);
  dispatch<1, v>(packable<T>(classes, logits, grad_logits) ? v : 1, [&](auto pack) {
    cross_entropy_backward_block_kernel<T, pack()><<<row_blocks(rows), kBlock, 0, stream>>>(
        logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault);
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

template <class S>
void cross_entropy_rows_per_warp(const S* logits, const int32_t* targets, compute_t<S>* losses, int64_t rows,
                                 int64_t classes, double label_smoothing, DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  if (classes > kSubWarpRowMax || classes == 0)
    return cross_entropy_warp(logits, targets, losses, rows, classes, label_smoothing, fault, stream);
  dispatch<1, 2, 4, 8>(lane_group(classes), [&](auto group) {
    constexpr int64_t rows_per_block = kWarps * (32 / group());
    cross_entropy_rows_kernel<S, group()><<<row_blocks((rows + rows_per_block - 1) / rows_per_block), kThreads, 0,
                                            stream>>>(logits, targets, losses, rows, classes, label_smoothing, fault);
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy");
}

template <class S>
void cross_entropy_backward_rows_per_warp(const S* logits, const int32_t* targets, RowGrads<compute_t<S>> grad_losses,
                                          S* grad_logits, int64_t rows, int64_t classes, double label_smoothing,
                                          DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  if (classes > kSubWarpRowMax || classes == 0)
    return cross_entropy_backward_warp(logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault,
                                       stream);
  dispatch<1, 2, 4, 8>(lane_group(classes), [&](auto group) {
    constexpr int64_t rows_per_block = kWarps * (32 / group());
    launch_dependent(cross_entropy_backward_rows_per_warp_kernel<S, group()>,
                     row_blocks((rows + rows_per_block - 1) / rows_per_block), kThreads, 0, stream, logits, targets,
                     grad_losses, grad_logits, rows, classes, label_smoothing, fault);
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

template <class S>
bool cross_entropy_reduced(const S* logits, const int32_t* targets, compute_t<S>* out, int32_t* count, int64_t rows,
                           int64_t classes, double label_smoothing, bool mean, DeviceFault* fault, cudaStream_t stream) {
  if (classes == 0 || classes > kWarpRowMax || rows * classes > kReducedMaxElements) return false;
  const double divisor = mean ? static_cast<double>(rows) : 1.0;
  dispatch<1, 2, 4, 8, 32>(classes <= kSubWarpRowMax ? lane_group(classes) : 32, [&](auto group) {
    launch_dependent(cross_entropy_reduced_kernel<S, group()>, 1, kReducedThreads, 0, stream, logits, targets, out,
                     count, rows, classes, label_smoothing, divisor, fault);
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy");
  return true;
}

template <class T>
void cross_entropy_backward_registers(const T* logits, const int32_t* targets, const T* grad_losses, T* grad_logits,
                                      int64_t rows, int64_t classes, double label_smoothing, DeviceFault* fault,
                                      cudaStream_t stream) {
  if (rows == 0) return;
  constexpr int v = 16 / sizeof(T);
  const bool packed = packable<T>(classes, logits, grad_logits);
  const RegisterShape shape = register_shape(packed ? classes / v : classes, sizeof(T) == 8 ? 4 : 8);
  if (shape.per_thread == 0 || classes == 0)
    return cross_entropy_backward_block(logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing,
                                        fault, stream);
  dispatch<1, v>(packed ? v : 1, [&](auto pack) {
    dispatch<1, 2, 4, 8>(shape.per_thread, [&](auto per_thread) {
      cross_entropy_backward_registers_kernel<T, pack(), per_thread()><<<row_blocks(rows), shape.threads, 0, stream>>>(
          logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing, fault);
    });
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

template <class T>
void cross_entropy_block_unrolled(const T* logits, const int32_t* targets, T* losses, int64_t rows, int64_t classes,
                                  double label_smoothing, DeviceFault* fault, cudaStream_t stream) {
  if (rows == 0) return;
  constexpr int v = 16 / sizeof(T);
  // single elements keep as many bytes in flight as the packs: kUnroll * v of them
  dispatch<1, v>(packable<T>(classes, logits, logits) ? v : 1, [&](auto pack) {
    cross_entropy_block_unrolled_kernel<T, pack(), kUnroll * v / pack(), kUnrolledThreads>
        <<<row_blocks(rows), kUnrolledThreads, 0, stream>>>(logits, targets, losses, rows, classes, label_smoothing,
                                                          fault);
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy");
}

template <class T>
void cross_entropy_backward_split(const T* logits, const int32_t* targets, const T* grad_losses, T* grad_logits,
                                  int64_t rows, int64_t classes, double label_smoothing, DeviceFault* fault,
                                  cudaStream_t stream) {
  if (rows == 0) return;
  constexpr int v = 16 / sizeof(T);
  const bool packed = packable<T>(classes, logits, grad_logits);
  const int64_t packs = packed ? classes / v : classes;
  const int64_t q = std::max<int64_t>(0, (packs + kSplitThreads - 1) / kSplitThreads - kSplitRegisterPacks<T>);
  const size_t bytes = static_cast<size_t>(q) * kSplitThreads * (packed ? 16 : sizeof(T));
  const int limit = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  if (classes == 0 || bytes + 1024 > static_cast<size_t>(limit))  // 1 KiB for the static scratch
    return cross_entropy_backward_block(logits, targets, grad_losses, grad_logits, rows, classes, label_smoothing,
                                        fault, stream);
  dispatch<1, v>(packed ? v : 1, [&](auto pack) {
    auto kernel = cross_entropy_backward_split_kernel<T, pack(), kSplitRegisterPacks<T>>;
    // above 48 KiB a block's dynamic shared memory must be asked for
    allow_dynamic_smem(kernel, bytes);
    kernel<<<row_blocks(rows), kSplitThreads, bytes, stream>>>(logits, targets, grad_losses, grad_logits, rows, classes,
                                                               static_cast<int>(q), label_smoothing, fault);
  });
  KILN_CUDA_LAUNCH_CHECK("cross_entropy_backward");
}

#define KILN_CROSS_ENTROPY_INSTANTIATE_ROWS(S)                                                                    \
  template void cross_entropy_warp<S>(const S*, const int32_t*, compute_t<S>*, int64_t, int64_t, double, DeviceFault*, \
                                      cudaStream_t);                                                                 \
  template void cross_entropy_rows_per_warp<S>(const S*, const int32_t*, compute_t<S>*, int64_t, int64_t, double,      \
                                               DeviceFault*, cudaStream_t);                                          \
  template void cross_entropy_backward_warp<S>(const S*, const int32_t*, RowGrads<compute_t<S>>, S*, int64_t,          \
                                               int64_t, double, DeviceFault*, cudaStream_t);                         \
  template void cross_entropy_backward_rows_per_warp<S>(const S*, const int32_t*, RowGrads<compute_t<S>>, S*,          \
                                                        int64_t, int64_t, double, DeviceFault*, cudaStream_t);       \
  template bool cross_entropy_reduced<S>(const S*, const int32_t*, compute_t<S>*, int32_t*, int64_t, int64_t, double, \
                                         bool, DeviceFault*, cudaStream_t);
#define KILN_CROSS_ENTROPY_INSTANTIATE_BLOCKS(T)                                                                   \
  template void cross_entropy_block<T>(const T*, const int32_t*, T*, int64_t, int64_t, double, DeviceFault*,         \
                                       cudaStream_t);                                                                \
  template void cross_entropy_backward_block<T>(const T*, const int32_t*, const T*, T*, int64_t, int64_t, double,    \
                                                DeviceFault*, cudaStream_t);                                         \
  template void cross_entropy_backward_registers<T>(const T*, const int32_t*, const T*, T*, int64_t, int64_t,        \
                                                    double, DeviceFault*, cudaStream_t);                             \
  template void cross_entropy_block_unrolled<T>(const T*, const int32_t*, T*, int64_t, int64_t, double, DeviceFault*, \
                                                cudaStream_t);                                                       \
  template void cross_entropy_backward_split<T>(const T*, const int32_t*, const T*, T*, int64_t, int64_t, double,    \
                                                DeviceFault*, cudaStream_t);
KILN_CROSS_ENTROPY_INSTANTIATE_ROWS(float)
KILN_CROSS_ENTROPY_INSTANTIATE_ROWS(double)
KILN_CROSS_ENTROPY_INSTANTIATE_ROWS(bf16)
KILN_CROSS_ENTROPY_INSTANTIATE_BLOCKS(float)
KILN_CROSS_ENTROPY_INSTANTIATE_BLOCKS(double)
#undef KILN_CROSS_ENTROPY_INSTANTIATE_ROWS
#undef KILN_CROSS_ENTROPY_INSTANTIATE_BLOCKS

}  // namespace kiln::cuda::softmax

namespace kiln::cuda {

namespace {

namespace ce = cuda::softmax;

void check_loss_refs(const char* op, const TensorRef& logits, const TensorRef& targets, const TensorRef& losses) {
  KILN_CHECK(logits.shape.size() == 2, ShapeError, "cuda ", op, ": logits must be [N, C], got ", logits.shape);
  KILN_CHECK(targets.dtype == DType::i32, DTypeError, "cuda ", op, ": targets must be i32, got ", targets.dtype);
  KILN_CHECK(losses.dtype == compute_dtype(logits.dtype), DTypeError, "cuda ", op, ": ", logits.dtype,
             " logits take ", compute_dtype(logits.dtype), " losses and gradients, got ", losses.dtype);
}

// The backward from each row's gradient (grads [N]) or from one for every row (one_grad: grads [],
// times scale): the version that fits C. Production picks rows per warp up to 32 classes, warp per
// row below kRegisterRowMin, then the registers and split versions, which read f32 and f64 only (so
// longer bf16 rows are widened first) and each row's own gradient (the reduced backward does not
// send them one).
void backward_rows(CudaBackend& be, const TensorRef& logits, const TensorRef& targets, const TensorRef& grads,
                   bool one_grad, double scale, const TensorRef& grad_logits, double s) {
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  if (logits.dtype == DType::bf16 && classes >= ce::kRegisterRowMin) {
    const Widened x(be, logits), gx(be, grad_logits, false);
    backward_rows(be, x.ref, targets, grads, one_grad, scale, gx.ref, s);
    be.copy(gx.ref, grad_logits);
    return;
  }
  visit_floating_bf16(logits.dtype, "cross_entropy_backward", [&](auto tag) {
    using S = decltype(tag);
    using T = compute_t<S>;
    const ce::RowGrads<T> g(grads.data<T>(), one_grad ? 0 : 1, static_cast<T>(scale));
    const S* x = logits.data<S>();
    const int32_t* t = targets.data<int32_t>();
    S* gx = grad_logits.data<S>();
    if (classes < ce::kRegisterRowMin) {  // rows per warp (warp per row past kSubWarpRowMax)
      ce::cross_entropy_backward_rows_per_warp<S>(x, t, g, gx, rows, classes, s, be.fault_slot(), be.stream());
    } else if constexpr (!std::is_same_v<S, bf16>) {
      KILN_CHECK(!one_grad, ValueError, "cuda cross_entropy_backward: one gradient for every row of ", classes,
                 " classes (the reduced backward sends rows this long their own)");
      auto version = classes < ce::kSplitRowMin ? ce::cross_entropy_backward_registers<S>
                                                : ce::cross_entropy_backward_split<S>;
      version(x, t, grads.data<T>(), gx, rows, classes, s, be.fault_slot(), be.stream());
    }
  });
}

}  // namespace

// Production picks by C: rows per warp up to 32 classes, warp per row to kWarpRowMax, then the
// unrolled block version, which reads f32 and f64 only (longer bf16 rows are widened first).
void CudaBackend::cross_entropy(const TensorRef& logits, const TensorRef& targets, const TensorRef& losses,
                                double label_smoothing) {
  check_loss_refs("cross_entropy", logits, targets, losses);
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  if (logits.dtype == DType::bf16 && classes > ce::kWarpRowMax) {
    const Widened x(*this, logits);
    return cross_entropy(x.ref, targets, losses, label_smoothing);
  }
  visit_floating_bf16(logits.dtype, "cross_entropy", [&](auto tag) {
    using S = decltype(tag);
    const S* x = logits.data<S>();
    const int32_t* t = targets.data<int32_t>();
    compute_t<S>* out = losses.data<compute_t<S>>();
    if (classes <= ce::kWarpRowMax)  // rows per warp (warp per row past kSubWarpRowMax)
      ce::cross_entropy_rows_per_warp<S>(x, t, out, rows, classes, label_smoothing, fault_, stream_);
    else if constexpr (!std::is_same_v<S, bf16>)
      ce::cross_entropy_block_unrolled<S>(x, t, out, rows, classes, label_smoothing, fault_, stream_);
  });
}

void CudaBackend::cross_entropy_backward(const TensorRef& logits, const TensorRef& targets,
                                         const TensorRef& grad_losses, const TensorRef& grad_logits,
                                         double label_smoothing) {
  check_loss_refs("cross_entropy_backward", logits, targets, grad_losses);
  backward_rows(*this, logits, targets, grad_losses, false, 1.0, grad_logits, label_smoothing);
}

// Version 8 where the batch fits one block, else the per-row kernel and a reduce (Backend's).
void CudaBackend::cross_entropy_reduced(const TensorRef& logits, const TensorRef& targets, const TensorRef& out,
                                        double label_smoothing, bool mean) {
  check_loss_refs("cross_entropy", logits, targets, out);
  if (!reduced_loss(logits, targets, out, nullptr, label_smoothing, mean))
    Backend::cross_entropy_reduced(logits, targets, out, label_smoothing, mean);
}

// Version 8 counting as it goes where it takes the batch, else the two launches.
void CudaBackend::cross_entropy_reduced_counting(const TensorRef& logits, const TensorRef& targets,
                                                 const TensorRef& out, double label_smoothing, bool mean,
                                                 const TensorRef& count) {
  check_loss_refs("cross_entropy", logits, targets, out);
  if (!reduced_loss(logits, targets, out, count.data<int32_t>(), label_smoothing, mean))
    Backend::cross_entropy_reduced_counting(logits, targets, out, label_smoothing, mean, count);
}

bool CudaBackend::reduced_loss(const TensorRef& logits, const TensorRef& targets, const TensorRef& out,
                               int32_t* count, double label_smoothing, bool mean) {
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  bool done = false;
  visit_floating_bf16(logits.dtype, "cross_entropy", [&](auto tag) {
    using S = decltype(tag);
    done = ce::cross_entropy_reduced<S>(logits.data<S>(), targets.data<int32_t>(), out.data<compute_t<S>>(), count,
                                        rows, classes, label_smoothing, mean, fault_, stream_);
  });
  return done;
}

// The one gradient read by every row's kernel, where C is below kRegisterRowMin.
void CudaBackend::cross_entropy_reduced_backward(const TensorRef& logits, const TensorRef& targets,
                                                 const TensorRef& grad, const TensorRef& grad_logits,
                                                 double label_smoothing, bool mean) {
  check_loss_refs("cross_entropy_backward", logits, targets, grad);
  const int64_t rows = logits.shape[0], classes = logits.shape[1];
  if (classes >= cuda::softmax::kRegisterRowMin)
    return Backend::cross_entropy_reduced_backward(logits, targets, grad, grad_logits, label_smoothing, mean);
  backward_rows(*this, logits, targets, grad, true, mean ? 1.0 / static_cast<double>(rows) : 1.0, grad_logits,
                label_smoothing);
}

}  // namespace kiln::cuda
