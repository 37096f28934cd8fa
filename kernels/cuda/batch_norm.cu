// Batch normalisation on the GPU over x [N, C, S] per channel c, M = N * S values a channel
// (core/backend.h; the CPU oracle is kernels/cpu/batch_norm.cpp, with the same formulas):
//   stats     mean[c] = sum x / M, var[c] = sum (x - mean[c])^2 / M, invstd[c] = (var[c] + eps)^-1/2
//   apply     y = (x - mean[c]) * invstd[c] * weight[c] + bias[c]
//   backward  grad_bias[c] = sum g, grad_weight[c] = sum g * xhat, xhat = (x - mean[c]) * invstd[c],
//             grad_x = weight[c] * invstd[c] * (g - (grad_bias[c] + xhat * grad_weight[c]) / M)
//
// Both passes are a sum over each channel followed by an elementwise pass that needs the sum: the
// least they can move is x (and g) read once and y (grad_x) written once, as a copy does. What
// stands in the way is that the sums must be complete before the first output is written.
//
// The sums. A channel's values are N planes of S, one plane every C*S values. Each channel is cut
// into `parts` runs of whole planes, a block per (part, channel); a block's 256 threads walk its
// run as one sequence of 16-byte vectors (float4, or double2; single values where S or an address
// does not allow), thread t taking vectors t, t + 256, ..., so that a warp reads 512 contiguous
// bytes and a block keeps several loads in flight. Sums are in double, of x - x0 with x0 the
// channel's first value (one pass that keeps the digits a plain sum of squares loses to a large
// mean), added in a fixed order: each thread's, the block's warps, then a channel's parts by a
// warp's butterfly (the same in every block), so a run repeats its bits.
//
// Three ways to finish (Path in batch_norm.cuh):
// - cluster, on sm_90 GPUs (H100, H200), any size: a channel's runs are the blocks of one
//   thread-block cluster (up to 16 blocks, which the GPU places on one GPC at once). Each thread
//   copies its run's vectors into shared memory (cp.async: all in flight at once, no registers)
//   and its last few into registers, adds them, and the blocks' sums meet through distributed
//   shared memory behind the cluster's barrier (hardware, no global memory, no grid-wide wait);
//   every block adds them in rank order, then writes y from what it holds. Where a run is more
//   than a block holds (two blocks an SM: 8 vectors a thread in registers, about 100 KB of shared
//   memory), the rest is read again after the sums, latest first, from L2 where it still is. The
//   cluster's size is chosen per shape for the least time in waves of the clusters the GPU runs
//   at once (a size that leaves some of a GPC's SMs idle runs fewer). x is read once.
// - one_kernel, when every run fits in the registers of the GPU's resident threads at once (a few
//   vectors a thread; MNIST-sized inputs): one cooperative launch loads its run, stores the block's
//   sums, waits at a grid-wide barrier, adds its channel's parts and writes y from the registers.
//   x is read once, and there is one launch instead of three.
// - two_passes otherwise: the sums kernel, then the output kernel, whose blocks each add their
//   channel's parts (a few dozen doubles) and walk their run again, backwards: the first kernel's
//   blocks all run at once and end on the tails of their runs, which are still in L2 (50 MB on an
//   H100), so the second pass starts there instead of in DRAM; its loads and stores are marked
//   evict-first, so that its writes do not push out what it has yet to read. (What this gains is
//   small, a few per cent: NOTES.md.)
// The backward is the same with (x, g) for x and grad_x for y. Backend calls take cluster where the
// GPU has it, else one_kernel where it fits, else two_passes.
//
// Bench: `kernel-bench --only batch_norm`. Measured (H100 80GB HBM3, docs/runs/2026-11-27-h100-batch-norm,
// f32 training; GB/s counts x read and y written, x and g read and grad_x written, as a copy would):
// [64, 32, 26, 26] by one kernel, forward 0.0092 ms [fig cuda.batch_norm.fwd.one-kernel.64x32x26x26.ms],
// 40% [fig cuda.batch_norm.fwd.one-kernel.64x32x26x26.pct-copy] of copy bandwidth, backward
// 0.0117 ms [fig cuda.batch_norm.bwd.one-kernel.64x32x26x26.ms],
// 47% [fig cuda.batch_norm.bwd.one-kernel.64x32x26x26.pct-copy]; the same by two passes
// 0.0138 ms [fig cuda.batch_norm.fwd.two-passes.64x32x26x26.ms]
// (27% [fig cuda.batch_norm.fwd.two-passes.64x32x26x26.pct-copy]) and
// 0.0144 ms [fig cuda.batch_norm.bwd.two-passes.64x32x26x26.ms]
// (38% [fig cuda.batch_norm.bwd.two-passes.64x32x26x26.pct-copy]); [128, 64, 56, 56] by two passes,
// forward 0.117 ms [fig cuda.batch_norm.fwd.two-passes.128x64x56x56.ms],
// 58% [fig cuda.batch_norm.fwd.two-passes.128x64x56x56.pct-copy], backward
// 0.189 ms [fig cuda.batch_norm.bwd.two-passes.128x64x56x56.ms],
// 54% [fig cuda.batch_norm.bwd.two-passes.128x64x56x56.pct-copy]. The large shape's passes read
// x (and g) twice: counting those bytes too (three tensors' worth against two forward, five
// against three backward), they run at 87-90% [fig cuda.batch_norm.two-passes.128x64x56x56.pct-copy-moved]
// of the copy's bandwidth, and what holds them back is that second read, which L2 keeps only in
// part. The small shape's one kernel is not bandwidth-bound (NOTES.md: what Nsight Compute says of
// it). The version before these two (a separate statistics kernel, scalar loads): NOTES.md.
// The cluster path (docs/runs/2026-11-28-h100-batch-norm-cluster, same GPU): [64, 32, 26, 26]
// forward 0.0087 ms [fig cuda.batch_norm.fwd.cluster.64x32x26x26.ms]
// (42% [fig cuda.batch_norm.fwd.cluster.64x32x26x26.pct-copy]), backward
// 0.0101 ms [fig cuda.batch_norm.bwd.cluster.64x32x26x26.ms]
// (55% [fig cuda.batch_norm.bwd.cluster.64x32x26x26.pct-copy]); [128, 64, 56, 56] forward
// 0.101 ms [fig cuda.batch_norm.fwd.cluster.128x64x56x56.ms]
// (68% [fig cuda.batch_norm.fwd.cluster.128x64x56x56.pct-copy]), backward
// 0.176 ms [fig cuda.batch_norm.bwd.cluster.128x64x56x56.ms]
// (58% [fig cuda.batch_norm.bwd.cluster.128x64x56x56.pct-copy]); twice that, [256, 64, 56, 56],
// forward 63% [fig cuda.batch_norm.fwd.cluster.256x64x56x56.pct-copy] and backward
// 57% [fig cuda.batch_norm.bwd.cluster.256x64x56x56.pct-copy] (two passes:
// 60% [fig cuda.batch_norm.fwd.two-passes.256x64x56x56.pct-copy] and
// 55% [fig cuda.batch_norm.bwd.two-passes.256x64x56x56.pct-copy]). It gains most where it holds a
// whole channel (the large forward: a channel of 1.6 MB on 16 blocks); what holds it back is that
// its clusters run in waves, each reading everything before writing anything (NOTES.md).
#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>

#include "kiln/kernels/cuda/batch_norm.cuh"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/layout.cuh"

namespace kiln::cuda::batch_norm {

namespace {

constexpr int kBlock = 256;

template <class T, int V>
struct alignas(sizeof(T) * V) Vec {
  T v[V];
};

// x as [N, C, S] in vectors of V values, each channel cut into `parts` runs of `per` planes.
struct Dims {
  int64_t n, c, sv;  // sv: vectors a plane (S / V)
  int64_t parts, per;
  int64_t v;         // V
};

// The second pass's loads and stores, marked evict-first (ld.global.cs, st.global.cs): what it reads
// of x it reads for the last time, and what it writes is not read again here, so neither should
// push out of L2 the lines of x that the first pass left there and the second has yet to reach.
template <class T, int V>
__device__ Vec<T, V> load_last(const Vec<T, V>* p) {
  Vec<T, V> v;
  if constexpr (std::is_same_v<T, float> && V == 4) *reinterpret_cast<float4*>(&v) = __ldcs(reinterpret_cast<const float4*>(p));
  else if constexpr (std::is_same_v<T, double> && V == 2) *reinterpret_cast<double2*>(&v) = __ldcs(reinterpret_cast<const double2*>(p));
  else v.v[0] = __ldcs(&p->v[0]);
  return v;
}
template <class T, int V>
__device__ void store_streaming(Vec<T, V>* p, const Vec<T, V>& v) {
  if constexpr (std::is_same_v<T, float> && V == 4) __stcs(reinterpret_cast<float4*>(p), *reinterpret_cast<const float4*>(&v));
  else if constexpr (std::is_same_v<T, double> && V == 2) __stcs(reinterpret_cast<double2*>(p), *reinterpret_cast<const double2*>(&v));
  else __stcs(&p->v[0], v.v[0]);
}

// A thread's walk over run (part, c): its vectors j = t, t + kBlock, ... of the run, vector j
// being vector j % sv of plane first + j / sv of the channel. Steps of kBlock vectors move
// (plane, k) by (q, r) = divmod(kBlock, sv), without a division per step. Indices of type I: 32
// bits where the whole of x is fewer vectors than that (one_kernel's inputs), which frees registers.
template <class I>
struct Walk {
  I j, count;  // where the thread is in the run; the run's vectors
  I plane, k;
  I first, c, channels, sv, q, r;

  __device__ Walk(const Dims& d, int64_t c_, int64_t part, int64_t start)
      : first(static_cast<I>(part * d.per)), c(static_cast<I>(c_)), channels(static_cast<I>(d.c)),
        sv(static_cast<I>(d.sv)) {
    count = static_cast<I>(std::max<int64_t>(std::min<int64_t>(d.n, int64_t{first} + d.per) - first, 0) * d.sv);
    j = static_cast<I>(start);
    plane = first + j / sv;
    k = j % sv;
    q = kBlock / sv;
    r = kBlock % sv;
  }
  // To the thread's last vector of the run, for a backward walk (none: j stays past the end).
  __device__ void to_last() {
    if (j >= count) return;
    j += (count - 1 - j) / kBlock * kBlock;
    plane = first + j / sv;
    k = j % sv;
  }
  __device__ bool more() const { return j >= 0 && j < count; }
  __device__ I at() const { return (plane * channels + c) * sv + k; }  // the vector's index in x
  __device__ void next() {
    j += kBlock, k += r, plane += q;
    if (k >= sv) k -= sv, ++plane;
  }
  __device__ void previous() {
    j -= kBlock, k -= r, plane -= q;
    if (k < 0) k += sv, --plane;
  }
};

// The sum of v over the block, in every thread; `scratch` holds a value per warp. Every thread
// calls it (two barriers: before reading the warps' sums, and before `scratch` is written again).
__device__ double block_sum(double v, double* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < warps; ++w) total += scratch[w];  // the same order in every thread
  __syncthreads();
  return total;
}

// The block's two sums of run (part, c), into partial[(c * parts + part) * 2 + {0, 1}].
__device__ void store_part(double a, double b, double* partial, const Dims& d, int64_t c, int64_t part) {
  __shared__ double scratch[kBlock / 32];
  a = block_sum(a, scratch);
  b = block_sum(b, scratch);
  if (threadIdx.x == 0) partial[(c * d.parts + part) * 2] = a, partial[(c * d.parts + part) * 2 + 1] = b;
}

// Channel c's two sums, in every thread of the calling warp: lane l adds parts l, l + 32, ... and
// the lanes' sums meet in a butterfly, whose every step adds the same two values in each lane of a
// pair, so every lane (and every block of the channel) ends with the same bits. The parts' loads
// go out together: added one after another, each waited for the last, and the dozens of L2 round
// trips held up the second pass of every block.
__device__ void channel_sums(const double* partial, const Dims& d, int64_t c, double& a, double& b) {
  a = 0, b = 0;
  for (int64_t p = threadIdx.x % 32; p < d.parts; p += 32)
    a += partial[(c * d.parts + p) * 2], b += partial[(c * d.parts + p) * 2 + 1];
  for (int offset = 16; offset > 0; offset /= 2) {
    a += __shfl_xor_sync(0xffffffffu, a, offset);
    b += __shfl_xor_sync(0xffffffffu, b, offset);
  }
}

// ---- the forward ----

// A channel's mean and biased variance from its sums s1, s2 of (x - x0) and (x - x0)^2 over m
// elements, x0 the channel's first element.
struct Moments {
  double mean, var;
};
template <class T>
__device__ Moments moments(const T* x, double s1, double s2, const Dims& d, int64_t c) {
  const double m = static_cast<double>(d.n * d.sv * d.v);
  return {static_cast<double>(x[c * d.sv * d.v]) + s1 / m, std::max((s2 - s1 * s1 / m) / m, 0.0)};
}

// y = (x - mean) * invstd, times the channel's weight and plus its bias where the layer has them:
// the output pass of the forward in training and in evaluation.
template <class T>
struct Normalise {
  T mean, invstd, w, b;
  bool has_w, has_b;

  __device__ Normalise(T mean, T invstd, const T* weight, const T* bias, int64_t c)
      : mean(mean), invstd(invstd), w(weight ? weight[c] : T(1)), b(bias ? bias[c] : T(0)), has_w(weight != nullptr),
        has_b(bias != nullptr) {}
  template <int V>
  __device__ Vec<T, V> operator()(Vec<T, V> x) const {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      T v = (x.v[i] - mean) * invstd;
      if (has_w) v *= w;
      if (has_b) v += b;
      x.v[i] = v;
    }
    return x;
  }
};

// Training: channel c's statistics from its sums s1, s2; the run's first block (part 0) writes
// mean, var and invstd.
template <class T>
__device__ Normalise<T> normalise_from_sums(const T* x, double s1, double s2, const T* weight, const T* bias,
                                            double eps, T* mean_out, T* var_out, T* invstd_out, const Dims& d,
                                            int64_t c, int64_t part) {
  const Moments s = moments(x, s1, s2, d, c);
  const T mean = static_cast<T>(s.mean), invstd = static_cast<T>(1.0 / sqrt(s.var + eps));
  if (part == 0 && threadIdx.x == 0) mean_out[c] = mean, var_out[c] = static_cast<T>(s.var), invstd_out[c] = invstd;
  return Normalise<T>(mean, invstd, weight, bias, c);
}

// The same from the parts' sums in `partial`.
template <class T>
__device__ Normalise<T> normalise_from_parts(const T* x, const double* partial, const T* weight, const T* bias,
                                             double eps, T* mean_out, T* var_out, T* invstd_out, const Dims& d,
                                             int64_t c, int64_t part) {
  double s1, s2;
  channel_sums(partial, d, c, s1, s2);
  return normalise_from_sums(x, s1, s2, weight, bias, eps, mean_out, var_out, invstd_out, d, c, part);
}

// Adds a vector's (x - x0) and (x - x0)^2 to s1, s2.
template <class T, int V>
__device__ void add_stats(const Vec<T, V>& x, double x0, double& s1, double& s2) {
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const double u = static_cast<double>(x.v[i]) - x0;
    s1 += u;
    s2 += u * u;
  }
}

// Loads up to U vectors of the walk ahead of using them, so that U loads are in flight.
template <class T, int V, int U, class Fn>
__device__ void walk_forward(Walk<int64_t>& w, const Vec<T, V>* x, Fn&& fn) {
  while (w.more()) {
    Vec<T, V> buf[U];
    int got = 0;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (w.more()) buf[u] = x[w.at()], w.next(), got = u + 1;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < got) fn(buf[u]);
  }
}

// two_passes, first kernel: a block per (part, channel), the sums of its run.
template <class T, int V>
__global__ void __launch_bounds__(kBlock) stats_kernel(const T* x, double* partial, Dims d) {
  const int64_t part = blockIdx.x, c = blockIdx.y;
  const double x0 = x[c * d.sv * V];
  double s1 = 0, s2 = 0;
  Walk<int64_t> w(d, c, part, threadIdx.x);
  walk_forward<T, V, 4>(w, reinterpret_cast<const Vec<T, V>*>(x), [&](const Vec<T, V>& v) { add_stats(v, x0, s1, s2); });
  store_part(s1, s2, partial, d, c, part);
}

// two_passes, second kernel: the channel's statistics, then y over the run, backwards.
template <class T, int V>
__global__ void __launch_bounds__(kBlock)
    normalise_kernel(const T* x, const double* partial, const T* weight, const T* bias, double eps, T* y, T* mean,
                     T* var, T* invstd, Dims d) {
  const int64_t part = blockIdx.x, c = blockIdx.y;
  const Normalise<T> f = normalise_from_parts(x, partial, weight, bias, eps, mean, var, invstd, d, c, part);
  const auto* xv = reinterpret_cast<const Vec<T, V>*>(x);
  auto* yv = reinterpret_cast<Vec<T, V>*>(y);
  Walk<int64_t> w(d, c, part, threadIdx.x);
  w.to_last();
  for (; w.more(); w.previous()) store_streaming(yv + w.at(), f(load_last(xv + w.at())));
}

// one_kernel: the run in K vectors a thread, the sums, the grid's barrier, y from the registers.
template <class T, int V, int K>
__global__ void __launch_bounds__(kBlock)
    train_one_kernel(const T* x, double* partial, const T* weight, const T* bias, double eps, T* y, T* mean,
                     T* var, T* invstd, Dims d) {
  const int64_t part = blockIdx.x, c = blockIdx.y;
  const auto* xv = reinterpret_cast<const Vec<T, V>*>(x);
  Vec<T, V> held[K];
  Walk<int32_t> w(d, c, part, threadIdx.x);
#pragma unroll
  for (int i = 0; i < K; ++i, w.next())
    if (w.more()) held[i] = xv[w.at()];
  const double x0 = x[c * d.sv * V];
  double s1 = 0, s2 = 0;
  w = Walk<int32_t>(d, c, part, threadIdx.x);
#pragma unroll
  for (int i = 0; i < K; ++i, w.next())
    if (w.more()) add_stats(held[i], x0, s1, s2);
  store_part(s1, s2, partial, d, c, part);
  cooperative_groups::this_grid().sync();
  const Normalise<T> f = normalise_from_parts(x, partial, weight, bias, eps, mean, var, invstd, d, c, part);
  auto* yv = reinterpret_cast<Vec<T, V>*>(y);
  w = Walk<int32_t>(d, c, part, threadIdx.x);
#pragma unroll
  for (int i = 0; i < K; ++i, w.next())
    if (w.more()) yv[w.at()] = f(held[i]);
}

// The finish of Backend::batch_norm_stats (statistics without an output): a thread per channel.
template <class T>
__global__ void stats_finish_kernel(const T* x, const double* partial, T* mean, T* var, Dims d) {
  KILN_GRID_STRIDE(c, d.c) {
    double s1 = 0, s2 = 0;
    for (int64_t p = 0; p < d.parts; ++p) s1 += partial[(c * d.parts + p) * 2], s2 += partial[(c * d.parts + p) * 2 + 1];
    const Moments s = moments(x, s1, s2, d, c);
    mean[c] = static_cast<T>(s.mean), var[c] = static_cast<T>(s.var);
  }
}

// Backend::batch_norm_apply (evaluation: given statistics): y over each block's run.
template <class T, int V>
__global__ void __launch_bounds__(kBlock) apply_kernel(const T* x, const T* mean, const T* invstd, const T* weight,
                                                       const T* bias, T* y, Dims d) {
  const int64_t part = blockIdx.x, c = blockIdx.y;
  const Normalise<T> f(mean[c], invstd[c], weight, bias, c);
  const auto* xv = reinterpret_cast<const Vec<T, V>*>(x);
  auto* yv = reinterpret_cast<Vec<T, V>*>(y);
  for (Walk<int64_t> w(d, c, part, threadIdx.x); w.more(); w.next()) yv[w.at()] = f(xv[w.at()]);
}

// ---- the backward ----

// Adds a vector pair's g and g * xhat to sum_g, sum_gx.
template <class T, int V>
__device__ void add_grads(const Vec<T, V>& x, const Vec<T, V>& g, double mu, double r, double& sum_g,
                          double& sum_gx) {
#pragma unroll
  for (int i = 0; i < V; ++i) {
    sum_g += g.v[i];
    sum_gx += static_cast<double>(g.v[i]) * ((static_cast<double>(x.v[i]) - mu) * r);
  }
}

// grad_x of channel c from its sums; the run's first block writes grad_weight and grad_bias.
template <class T>
struct GradX {
  double mu, r, scale, mean_g, mean_gx;

  __device__ GradX(double sum_g, double sum_gx, const T* mean, const T* invstd, const T* weight, T* grad_weight,
                   T* grad_bias, const Dims& d, int64_t c, int64_t part) {
    const double m = static_cast<double>(d.n * d.sv * d.v);
    mu = mean[c], r = invstd[c], scale = (weight ? static_cast<double>(weight[c]) : 1.0) * r;
    mean_g = sum_g / m, mean_gx = sum_gx / m;
    if (part == 0 && threadIdx.x == 0) grad_bias[c] = static_cast<T>(sum_g), grad_weight[c] = static_cast<T>(sum_gx);
  }
  template <int V>
  __device__ Vec<T, V> operator()(const Vec<T, V>& x, const Vec<T, V>& g) const {
    Vec<T, V> out;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const double xhat = (static_cast<double>(x.v[i]) - mu) * r;
      out.v[i] = static_cast<T>(scale * (g.v[i] - mean_g - xhat * mean_gx));
    }
    return out;
  }
};

template <class T, int V>
__global__ void __launch_bounds__(kBlock)
    grad_sums_kernel(const T* x, const T* g, const T* mean, const T* invstd, double* partial, Dims d) {
  const int64_t part = blockIdx.x, c = blockIdx.y;
  const double mu = mean[c], r = invstd[c];
  const auto* xv = reinterpret_cast<const Vec<T, V>*>(x);
  const auto* gv = reinterpret_cast<const Vec<T, V>*>(g);
  double sum_g = 0, sum_gx = 0;
  Walk<int64_t> w(d, c, part, threadIdx.x);
  while (w.more()) {
    constexpr int U = 2;
    Vec<T, V> bx[U], bg[U];
    int got = 0;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (w.more()) bx[u] = xv[w.at()], bg[u] = gv[w.at()], w.next(), got = u + 1;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < got) add_grads(bx[u], bg[u], mu, r, sum_g, sum_gx);
  }
  store_part(sum_g, sum_gx, partial, d, c, part);
}

template <class T, int V>
__global__ void __launch_bounds__(kBlock)
    grad_x_kernel(const T* x, const T* g, const double* partial, const T* mean, const T* invstd, const T* weight,
                  T* grad_x, T* grad_weight, T* grad_bias, Dims d) {
  const int64_t part = blockIdx.x, c = blockIdx.y;
  double sum_g, sum_gx;
  channel_sums(partial, d, c, sum_g, sum_gx);
  const GradX<T> f(sum_g, sum_gx, mean, invstd, weight, grad_weight, grad_bias, d, c, part);
  const auto* xv = reinterpret_cast<const Vec<T, V>*>(x);
  const auto* gv = reinterpret_cast<const Vec<T, V>*>(g);
  auto* out = reinterpret_cast<Vec<T, V>*>(grad_x);
  Walk<int64_t> w(d, c, part, threadIdx.x);
  w.to_last();
  for (; w.more(); w.previous()) store_streaming(out + w.at(), f(load_last(xv + w.at()), load_last(gv + w.at())));
}

template <class T, int V, int K>
__global__ void __launch_bounds__(kBlock, 3)  // at most 85 registers: three blocks an SM (126 unbounded)
    backward_one_kernel(const T* x, const T* g, double* partial, const T* mean, const T* invstd, const T* weight,
                        T* grad_x, T* grad_weight, T* grad_bias, Dims d) {
  const int64_t part = blockIdx.x, c = blockIdx.y;
  const auto* xv = reinterpret_cast<const Vec<T, V>*>(x);
  const auto* gv = reinterpret_cast<const Vec<T, V>*>(g);
  Vec<T, V> hx[K], hg[K];
  Walk<int32_t> w(d, c, part, threadIdx.x);
#pragma unroll
  for (int i = 0; i < K; ++i, w.next())
    if (w.more()) hx[i] = xv[w.at()], hg[i] = gv[w.at()];
  const double mu = mean[c], r = invstd[c];
  double sum_g = 0, sum_gx = 0;
  w = Walk<int32_t>(d, c, part, threadIdx.x);
#pragma unroll
  for (int i = 0; i < K; ++i, w.next())
    if (w.more()) add_grads(hx[i], hg[i], mu, r, sum_g, sum_gx);
  store_part(sum_g, sum_gx, partial, d, c, part);
  cooperative_groups::this_grid().sync();
  channel_sums(partial, d, c, sum_g, sum_gx);
  const GradX<T> f(sum_g, sum_gx, mean, invstd, weight, grad_weight, grad_bias, d, c, part);
  auto* out = reinterpret_cast<Vec<T, V>*>(grad_x);
  w = Walk<int32_t>(d, c, part, threadIdx.x);
#pragma unroll
  for (int i = 0; i < K; ++i, w.next())
    if (w.more()) out[w.at()] = f(hx[i], hg[i]);
}

// ---- cluster: a channel on one thread-block cluster (sm_90) ----

// P vectors at one place of P tensors (x; or x and g).
template <class T, int V, int P>
struct Vecs {
  Vec<T, V> v[P];
};

// Copies one vector from global to shared memory without passing through registers (cp.async, in
// L1 for vectors under 16 bytes): a thread's copies are all in flight at once, until
// cp.async.wait_all.
template <class T, int V>
__device__ void copy_async(Vec<T, V>* to, const Vec<T, V>* from) {
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(to));
  if constexpr (sizeof(Vec<T, V>) == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(from) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(shared), "l"(from), "n"(sizeof(Vec<T, V>))
                 : "memory");
}

// A block's pass over its run (part, c) when the channel's runs are the blocks of one cluster.
// Each thread keeps the last K of its vectors (of every input) in registers and the `slots`
// before them in shared memory, and reads the rest again once the channel's sums are known:
//   in order: the copies into shared memory (cp.async, all at once), the loads into registers,
//   the loads of the vectors to read again (U at a time, added as they come), then once the
//   copies land their vectors are added too: the two sums (`add`) of every vector, in an order
//   fixed by the shape;
//   the blocks' sums meet through distributed shared memory, and every block adds the cluster's
//   in rank order, so all of them (and every run) have the same bits;
//   `finish(a, b)` turns the channel's sums into the output function, out[i] = f(inputs at i),
//   written from the registers first (which frees them), then from shared memory, then for the
//   vectors read again, backwards, so that the last ones read (likeliest still in L2) come first,
//   U at a time and evict-first, as the two passes' second kernel does.
template <class T, int V, int K, int P, class Add, class Finish>
__device__ void cluster_pass(const T* const (&in)[P], T* out, const Dims& d, int64_t slots, Add&& add,
                             Finish&& finish) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using Vs = Vecs<T, V, P>;
  constexpr int U = 4 / P;  // vectors of each input in flight a thread, in the loops that load U at a time
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  const int64_t part = blockIdx.x, c = blockIdx.y, t = threadIdx.x;
  // slot s of input p of this thread: [slot][input][thread], so that a warp's vectors are adjacent
  auto slot = [&](int64_t s, int p) { return reinterpret_cast<Vec<T, V>*>(dynamic_smem) + (s * P + p) * kBlock + t; };
  auto source = [&](int p) { return reinterpret_cast<const Vec<T, V>*>(in[p]); };
  auto load = [&](int64_t at) {
    Vs v;
#pragma unroll
    for (int p = 0; p < P; ++p) v.v[p] = source(p)[at];
    return v;
  };
  auto load_again = [&](int64_t at) {
    Vs v;
#pragma unroll
    for (int p = 0; p < P; ++p) v.v[p] = load_last(source(p) + at);
    return v;
  };
  auto from_slot = [&](int64_t s) {
    Vs v;
#pragma unroll
    for (int p = 0; p < P; ++p) v.v[p] = *slot(s, p);
    return v;
  };
  // the thread's vectors: [0, first_kept) read again, [first_kept, lead) in shared memory, the
  // rest (at most K) in registers
  const Walk<int64_t> start(d, c, part, t);
  const int64_t n = start.count > t ? (start.count - t + kBlock - 1) / kBlock : 0;
  const int64_t lead = std::max<int64_t>(n - K, 0), first_kept = std::max<int64_t>(lead - slots, 0);
  Walk<int64_t> w(d, c, part, t + first_kept * kBlock);
  for (int64_t i = first_kept; i < lead; ++i, w.next())
#pragma unroll
    for (int p = 0; p < P; ++p) copy_async(slot(i - first_kept, p), source(p) + w.at());
  const Walk<int64_t> at_registers = w;
  Vs held[K];
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lead + k < n) held[k] = load(w.at()), w.next();
  double a = 0, b = 0;
  w = start;
  for (int64_t i = 0; i < first_kept;) {
    Vs buf[U];
    int got = 0;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (i + u < first_kept) buf[u] = load(w.at()), w.next(), got = u + 1;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < got) add(buf[u], a, b);
    i += got;
  }
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lead + k < n) add(held[k], a, b);
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // a thread reads back only its own copies
  for (int64_t s = 0; s < lead - first_kept; ++s) add(from_slot(s), a, b);

  __shared__ double scratch[kBlock / 32];
  __shared__ double sums[2];
  a = block_sum(a, scratch);
  b = block_sum(b, scratch);
  if (t == 0) sums[0] = a, sums[1] = b;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
  a = 0, b = 0;
  for (unsigned r = 0; r < cluster.num_blocks(); ++r) {
    const double* s = cluster.map_shared_rank(sums, static_cast<int>(r));
    a += s[0], b += s[1];
  }
  // the other blocks may still read this block's sums: it leaves only once they all have
  auto read = cluster.barrier_arrive();
  const auto f = finish(a, b);

  auto* o = reinterpret_cast<Vec<T, V>*>(out);
  w = at_registers;
#pragma unroll
  for (int k = 0; k < K; ++k)
    if (lead + k < n) o[w.at()] = f(held[k]), w.next();
  w = Walk<int64_t>(d, c, part, t + first_kept * kBlock);
  for (int64_t s = 0; s < lead - first_kept; ++s, w.next()) o[w.at()] = f(from_slot(s));
  if (first_kept > 0) {
    Walk<int64_t> back(d, c, part, t + (first_kept - 1) * kBlock);
    for (int64_t i = first_kept - 1; i >= 0;) {
      Vs buf[U];
      int64_t at[U];
      int got = 0;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (i - u >= 0) at[u] = back.at(), buf[u] = load_again(at[u]), back.previous(), got = u + 1;
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (u < got) store_streaming(o + at[u], f(buf[u]));
      i -= got;
    }
  }
  cluster.barrier_wait(std::move(read));
#else
  (void)in, (void)out, (void)d, (void)slots, (void)add, (void)finish;
  __trap();  // the host runs this path only on sm_90 code (cluster_limits)
#endif
}

template <class T, int V, int K>
__global__ void __launch_bounds__(kBlock, 2)
    train_cluster_kernel(const T* x, const T* weight, const T* bias, double eps, T* y, T* mean, T* var, T* invstd,
                         Dims d, int64_t slots) {
  const int64_t part = blockIdx.x, c = blockIdx.y;
  const double x0 = x[c * d.sv * V];
  const T* in[1] = {x};
  cluster_pass<T, V, K, 1>(
      in, y, d, slots, [&](const Vecs<T, V, 1>& v, double& s1, double& s2) { add_stats(v.v[0], x0, s1, s2); },
      [&](double s1, double s2) {
        const Normalise<T> f = normalise_from_sums(x, s1, s2, weight, bias, eps, mean, var, invstd, d, c, part);
        return [f](const Vecs<T, V, 1>& v) { return f(v.v[0]); };
      });
}

template <class T, int V, int K>
__global__ void __launch_bounds__(kBlock, 2)
    backward_cluster_kernel(const T* x, const T* g, const T* mean, const T* invstd, const T* weight, T* grad_x,
                            T* grad_weight, T* grad_bias, Dims d, int64_t slots) {
  const int64_t part = blockIdx.x, c = blockIdx.y;
  const double mu = mean[c], r = invstd[c];
  const T* in[2] = {x, g};
  cluster_pass<T, V, K, 2>(
      in, grad_x, d, slots,
      [&](const Vecs<T, V, 2>& v, double& sum_g, double& sum_gx) { add_grads(v.v[0], v.v[1], mu, r, sum_g, sum_gx); },
      [&](double sum_g, double sum_gx) {
        const GradX<T> f(sum_g, sum_gx, mean, invstd, weight, grad_weight, grad_bias, d, c, part);
        return [f](const Vecs<T, V, 2>& v) { return f(v.v[0], v.v[1]); };
      });
}

// ---- the host side ----

constexpr int kVectorsOneKernel = 4;  // one_kernel's vectors a thread: 64 bytes of x (and of g)
// cluster's vectors a thread in registers: 128 bytes of x, or 64 of x and of g (ptxas: no spills
// under two blocks an SM)
constexpr int kRegistersForward = 8, kRegistersBackward = 4;

// x [N, C, S] contiguous, read in vectors of `v` (1, or 16 bytes' worth where S and every tensor
// the pass touches allow), cut into runs of `per` planes.
Dims dims_of(const TensorRef& x, int64_t v, int64_t per) {
  Dims d{x.shape[0], x.shape[1], x.shape[2] / v, 1, per, v};
  d.parts = (d.n + per - 1) / per;
  return d;
}

void check_shape(const char* op, const TensorRef& x) {
  KILN_CHECK(x.shape.size() == 3 && x.is_contiguous(), ShapeError, "cuda ", op,
             ": x must be a contiguous [N, C, S], got ", x.shape);
  KILN_CHECK(x.shape[1] <= 65535, ShapeError, "cuda ", op, ": at most 65535 channels, got ", x.shape[1]);
}

// The vector width every tensor of `tensors` allows: 16 bytes when S divides into them and
// every address is 16-byte aligned, else 1.
template <class T>
int64_t vector_width(const TensorRef& x, std::initializer_list<const TensorRef*> tensors) {
  constexpr int64_t wide = 16 / sizeof(T);
  if (x.shape[2] % wide != 0) return 1;
  for (const TensorRef* t : tensors)
    if (reinterpret_cast<uintptr_t>(t->data<T>()) % 16 != 0) return 1;
  return wide;
}

// Calls fn(T{}, std::integral_constant<int, V>{}) for x's dtype T and the vector width V that
// every tensor of `tensors` allows.
template <class Fn>
void visit_vectors(const char* op, const TensorRef& x, std::initializer_list<const TensorRef*> tensors, Fn&& fn) {
  visit_floating(x.dtype, op, [&](auto tag) {
    using T = decltype(tag);
    dispatch<1, 16 / sizeof(T)>(static_cast<int>(vector_width<T>(x, tensors)), [&](auto width) { fn(tag, width); });
  });
}

// Runs of about eight blocks per SM in all (a channel's planes shared out), no part without a plane.
int64_t planes_per_run(const TensorRef& x, int sms) {
  const int64_t n = std::max<int64_t>(x.shape[0], 1), c = std::max<int64_t>(x.shape[1], 1);
  const int64_t parts = std::clamp<int64_t>((8 * int64_t{sms} + c - 1) / c, 1, n);
  return (n + parts - 1) / parts;
}

// one_kernel's runs: as many planes as K vectors a thread hold; 0 when one plane is more.
int64_t planes_one_kernel(const TensorRef& x, int64_t v) {
  const int64_t sv = x.shape[2] / v, room = int64_t{kVectorsOneKernel} * kBlock;
  return sv > room ? 0 : room / sv;
}

// How many blocks of `kernel` the device holds at once. The occupancy is a kernel's alone (one
// architecture a build), asked once: every call of the op would otherwise ask again.
int resident_blocks(const void* kernel, int sms) {
  static std::mutex mutex;
  static std::map<const void*, int> per_sm;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = per_sm.find(kernel);
  if (it == per_sm.end()) {
    int blocks = 0;
    KILN_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kBlock, 0));
    it = per_sm.emplace(kernel, blocks).first;
  }
  return it->second * sms;
}

// Launches `kernel` on a block per (part, channel) with one launch attribute: cooperative
// (one_kernel), or a cluster of a channel's parts (cluster, with `smem` bytes of shared memory).
template <class Kernel, class... Args>
void launch_with(cudaLaunchAttribute attribute, size_t smem, Kernel kernel, const Dims& d, cudaStream_t stream,
                 Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(d.parts), static_cast<unsigned>(d.c));
  config.blockDim = dim3(kBlock);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  KILN_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

cudaLaunchAttribute cooperative() {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeCooperative;
  a.val.cooperative = 1;
  return a;
}

cudaLaunchAttribute cluster_of(int64_t blocks) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = static_cast<unsigned>(blocks);
  a.val.clusterDim.y = 1;
  a.val.clusterDim.z = 1;
  return a;
}

// What cluster can do with `kernel` (P inputs a place) on the current GPU, found once per kernel:
// the most shared-memory slots a thread, sized for two blocks an SM, and for each cluster size up
// to 16 how many such clusters the GPU runs at once (a cluster's blocks must share one GPC, so a
// size that leaves a GPC's last SMs idle runs fewer blocks in all). No size runs where the GPU or
// the code is older than sm_90.
constexpr int kMaxCluster = 16;
struct ClusterLimits {
  int64_t slots = 0;
  int active[kMaxCluster + 1] = {};  // active[b]: clusters of b blocks at once (0: none)
  bool any() const { return active[1] > 0; }
};

template <int P, class T, int V, class Kernel>
ClusterLimits cluster_limits(Kernel kernel) {
  static std::mutex mutex;
  static std::map<const void*, ClusterLimits> known;
  std::lock_guard<std::mutex> lock(mutex);
  const void* key = reinterpret_cast<const void*>(kernel);
  if (auto it = known.find(key); it != known.end()) return it->second;
  ClusterLimits limits;
  cudaFuncAttributes attributes{};
  KILN_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  if (device_attribute(cudaDevAttrComputeCapabilityMajor) >= 9 && attributes.ptxVersion >= 90) {
    const int64_t per_sm = device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor),
                  per_block = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin),
                  reserved = device_attribute(cudaDevAttrReservedSharedMemoryPerBlock);
    const int64_t room = std::min(per_block, per_sm / 2 - reserved) - static_cast<int64_t>(attributes.sharedSizeBytes);
    limits.slots = std::max<int64_t>(room / static_cast<int64_t>(sizeof(Vecs<T, V, P>) * kBlock), 0);
    const size_t smem = static_cast<size_t>(limits.slots) * sizeof(Vecs<T, V, P>) * kBlock;
    KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    for (int blocks = 1; blocks <= kMaxCluster; ++blocks) {
      cudaLaunchAttribute attribute = cluster_of(blocks);
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(static_cast<unsigned>(blocks));
      config.blockDim = dim3(kBlock);
      config.dynamicSmemBytes = smem;
      config.attrs = &attribute;
      config.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess) limits.active[blocks] = clusters;
      (void)cudaGetLastError();  // a size the GPU refuses is an answer, not a fault
    }
  }
  known.emplace(key, limits);
  return limits;
}

// cluster's runs of x: a channel's planes cut into `blocks` runs, the cluster's size, chosen for
// the least estimated time. The clusters run in waves of limits.active[blocks]; a wave takes as
// long as a run's bytes take to read and write, plus those of it that its block cannot hold (K
// vectors a thread in registers, the slots in shared memory) and reads again. With the slots a
// thread takes (where a run does not fit, all of them).
struct ClusterPlan {
  Dims d;
  int64_t slots;
  size_t smem;
};

template <int P, class T, int V>
ClusterPlan plan_cluster(const TensorRef& x, const ClusterLimits& limits, int K) {
  const int64_t n = std::max<int64_t>(x.shape[0], 1), c = std::max<int64_t>(x.shape[1], 1), sv = x.shape[2] / V;
  auto vectors_a_thread = [&](int64_t per) { return (per * sv + kBlock - 1) / kBlock; };
  int64_t best_per = n;
  double best = -1;
  for (int64_t cut = 1; cut <= std::min<int64_t>(n, kMaxCluster); ++cut) {
    const int64_t per = (n + cut - 1) / cut, parts = (n + per - 1) / per;  // parts <= cut
    if (parts < cut || limits.active[parts] == 0) continue;  // a cut seen already, or a size the GPU lacks
    const double waves = static_cast<double>((c + limits.active[parts] - 1) / limits.active[parts]);
    const double vectors = static_cast<double>(vectors_a_thread(per));
    const double again = std::max(vectors - static_cast<double>(K + limits.slots), 0.0);
    const double time = waves * (2 * vectors + again);
    if (best < 0 || time < best) best = time, best_per = per;
  }
  const int64_t slots = std::clamp<int64_t>(vectors_a_thread(best_per) - K, 0, limits.slots);
  return {dims_of(x, V, best_per), slots, static_cast<size_t>(slots) * sizeof(Vecs<T, V, P>) * kBlock};
}

dim3 grid_of(const Dims& d) { return dim3(static_cast<unsigned>(d.parts), static_cast<unsigned>(d.c)); }

template <class T>
const T* data_or_null(const TensorRef& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Whether one_kernel takes x (`path` automatic or one_kernel), its runs in *per when it does and
// two_passes' otherwise.
template <class Kernel>
bool use_one_kernel(CudaBackend& b, Kernel kernel, const TensorRef& x, int64_t v, Path path, int64_t* per,
                    const char* op) {
  const int sms = device_attribute(cudaDevAttrMultiProcessorCount, b.device());
  *per = planes_one_kernel(x, v);
  const bool fits = *per > 0 && x.shape[1] * ((x.shape[0] + *per - 1) / *per) <=
                                    resident_blocks(reinterpret_cast<const void*>(kernel), sms);
  KILN_CHECK(path != Path::one_kernel || fits, ValueError, "cuda ", op, ": one kernel cannot hold ", x.shape,
             " on this GPU (take two_passes)");
  if (path == Path::two_passes || !fits) *per = planes_per_run(x, sms);
  return path != Path::two_passes && fits;
}

// A training pass's launch: the path (automatic becomes cluster where the GPU has it, else
// one_kernel where it fits, else two_passes), x's runs for it, cluster's slots and shared memory,
// and for the other two the buffer of the runs' sums (from b's stream-ordered pool; the caller
// frees it right after queuing its kernels).
struct Plan {
  Path path;
  Dims d;
  int64_t slots = 0;
  size_t smem = 0;
  double* partial = nullptr;
};

// P inputs a place (1 forward, 2 backward); K: the cluster kernel's vectors a thread in registers.
template <int P, class T, int V, int K, class OneKernel, class ClusterKernel>
Plan plan(CudaBackend& b, OneKernel one_kernel, ClusterKernel cluster_kernel, const TensorRef& x, Path path,
          const char* op) {
  if (path == Path::automatic || path == Path::cluster) {
    const ClusterLimits limits = cluster_limits<P, T, V>(cluster_kernel);
    KILN_CHECK(path != Path::cluster || limits.any(), ValueError, "cuda ", op,
               ": the cluster path needs an sm_90 GPU and code built for sm_90 (take one_kernel or two_passes)");
    if (limits.any()) {
      const ClusterPlan c = plan_cluster<P, T, V>(x, limits, K);
      return {Path::cluster, c.d, c.slots, c.smem};
    }
  }
  int64_t per = 0;
  const bool one = use_one_kernel(b, one_kernel, x, V, path, &per, op);
  const Dims d = dims_of(x, V, per);
  return {one ? Path::one_kernel : Path::two_passes, d, 0, 0,
          static_cast<double*>(b.allocate(sizeof(double) * static_cast<size_t>(2 * d.c * d.parts)))};
}

}  // namespace

bool one_kernel_fits(CudaBackend& b, const TensorRef& x, bool backward) {
  check_shape("batch_norm", x);
  bool fits = false;
  visit_vectors("batch_norm", x, {&x}, [&](auto tag, auto width) {
    using T = decltype(tag);
    constexpr int V = decltype(width)::value;
    int64_t per = 0;
    fits = backward ? use_one_kernel(b, backward_one_kernel<T, V, kVectorsOneKernel>, x, V, Path::automatic, &per, "")
                    : use_one_kernel(b, train_one_kernel<T, V, kVectorsOneKernel>, x, V, Path::automatic, &per, "");
  });
  return fits;
}

bool cluster_available(CudaBackend& b, const TensorRef& x) {
  check_shape("batch_norm", x);
  (void)b;  // the current device's, as every kernel's attributes here
  bool available = false;
  visit_vectors("batch_norm", x, {&x}, [&](auto tag, auto width) {
    using T = decltype(tag);
    constexpr int V = decltype(width)::value;
    available = cluster_limits<1, T, V>(train_cluster_kernel<T, V, kRegistersForward>).any() &&
                cluster_limits<2, T, V>(backward_cluster_kernel<T, V, kRegistersBackward>).any();
  });
  return available;
}

void train(CudaBackend& b, const TensorRef& x, const TensorRef& weight, const TensorRef& bias, double eps,
           const TensorRef& y, const TensorRef& mean, const TensorRef& var, const TensorRef& invstd, Path path) {
  check_shape("batch_norm_train", x);
  if (x.shape[0] * x.shape[1] * x.shape[2] == 0) return;
  visit_vectors("batch_norm_train", x, {&x, &y}, [&](auto tag, auto width) {
    using T = decltype(tag);
    constexpr int V = decltype(width)::value, K = kRegistersForward;
    const auto one_kernel = train_one_kernel<T, V, kVectorsOneKernel>;
    const auto cluster = train_cluster_kernel<T, V, K>;
    const Plan p = plan<1, T, V, K>(b, one_kernel, cluster, x, path, "batch_norm_train");
    const T *w = data_or_null<T>(weight), *bi = data_or_null<T>(bias);
    if (p.path == Path::cluster) {
      launch_with(cluster_of(p.d.parts), p.smem, cluster, p.d, b.stream(), x.data<T>(), w, bi, eps, y.data<T>(),
                  mean.data<T>(), var.data<T>(), invstd.data<T>(), p.d, p.slots);
    } else if (p.path == Path::one_kernel) {
      launch_with(cooperative(), 0, one_kernel, p.d, b.stream(), x.data<T>(), p.partial, w, bi, eps, y.data<T>(),
                  mean.data<T>(), var.data<T>(), invstd.data<T>(), p.d);
    } else {
      stats_kernel<T, V><<<grid_of(p.d), kBlock, 0, b.stream()>>>(x.data<T>(), p.partial, p.d);
      KILN_CUDA_LAUNCH_CHECK("batch_norm_train");
      normalise_kernel<T, V><<<grid_of(p.d), kBlock, 0, b.stream()>>>(
          x.data<T>(), p.partial, w, bi, eps, y.data<T>(), mean.data<T>(), var.data<T>(), invstd.data<T>(), p.d);
      KILN_CUDA_LAUNCH_CHECK("batch_norm_train");
    }
    if (p.partial) b.deallocate(p.partial);  // the pool is stream-ordered: free once the kernels queued before are done
  });
}

void backward(CudaBackend& b, const TensorRef& x, const TensorRef& grad, const TensorRef& mean,
              const TensorRef& invstd, const TensorRef& weight, const TensorRef& grad_x,
              const TensorRef& grad_weight, const TensorRef& grad_bias, Path path) {
  check_shape("batch_norm_backward", x);
  if (x.shape[0] * x.shape[1] * x.shape[2] == 0) return;
  visit_vectors("batch_norm_backward", x, {&x, &grad, &grad_x}, [&](auto tag, auto width) {
    using T = decltype(tag);
    constexpr int V = decltype(width)::value, K = kRegistersBackward;
    const auto one_kernel = backward_one_kernel<T, V, kVectorsOneKernel>;
    const auto cluster = backward_cluster_kernel<T, V, K>;
    const Plan p = plan<2, T, V, K>(b, one_kernel, cluster, x, path, "batch_norm_backward");
    const T* w = data_or_null<T>(weight);
    if (p.path == Path::cluster) {
      launch_with(cluster_of(p.d.parts), p.smem, cluster, p.d, b.stream(), x.data<T>(), grad.data<T>(),
                  mean.data<T>(), invstd.data<T>(), w, grad_x.data<T>(), grad_weight.data<T>(), grad_bias.data<T>(),
                  p.d, p.slots);
    } else if (p.path == Path::one_kernel) {
      launch_with(cooperative(), 0, one_kernel, p.d, b.stream(), x.data<T>(), grad.data<T>(), p.partial,
                  mean.data<T>(), invstd.data<T>(), w, grad_x.data<T>(), grad_weight.data<T>(), grad_bias.data<T>(),
                  p.d);
    } else {
      grad_sums_kernel<T, V><<<grid_of(p.d), kBlock, 0, b.stream()>>>(x.data<T>(), grad.data<T>(), mean.data<T>(),
                                                                      invstd.data<T>(), p.partial, p.d);
      KILN_CUDA_LAUNCH_CHECK("batch_norm_backward");
      grad_x_kernel<T, V><<<grid_of(p.d), kBlock, 0, b.stream()>>>(x.data<T>(), grad.data<T>(), p.partial,
                                                                   mean.data<T>(), invstd.data<T>(), w,
                                                                   grad_x.data<T>(), grad_weight.data<T>(),
                                                                   grad_bias.data<T>(), p.d);
      KILN_CUDA_LAUNCH_CHECK("batch_norm_backward");
    }
    if (p.partial) b.deallocate(p.partial);
  });
}

}  // namespace kiln::cuda::batch_norm

namespace kiln::cuda {

void CudaBackend::batch_norm_stats(const TensorRef& x, const TensorRef& mean, const TensorRef& var) {
  using namespace batch_norm;
  check_shape("batch_norm_stats", x);
  if (x.shape[1] == 0 || x.shape[0] * x.shape[2] == 0) return;
  visit_vectors("batch_norm_stats", x, {&x}, [&](auto tag, auto width) {
    using T = decltype(tag);
    constexpr int V = decltype(width)::value;
    const Dims d = dims_of(x, V, planes_per_run(x, device_attribute(cudaDevAttrMultiProcessorCount, device_)));
    auto* partial = static_cast<double*>(allocate(sizeof(double) * static_cast<size_t>(2 * d.c * d.parts)));
    stats_kernel<T, V><<<grid_of(d), kBlock, 0, stream_>>>(x.data<T>(), partial, d);
    KILN_CUDA_LAUNCH_CHECK("batch_norm_stats");
    stats_finish_kernel<T><<<blocks_for(d.c), kThreads, 0, stream_>>>(x.data<T>(), partial, mean.data<T>(),
                                                                      var.data<T>(), d);
    KILN_CUDA_LAUNCH_CHECK("batch_norm_stats");
    deallocate(partial);
  });
}

void CudaBackend::batch_norm_apply(const TensorRef& x, const TensorRef& mean, const TensorRef& invstd,
                                   const TensorRef& weight, const TensorRef& bias, const TensorRef& y) {
  using namespace batch_norm;
  check_shape("batch_norm_apply", x);
  if (x.shape[0] * x.shape[1] * x.shape[2] == 0) return;
  visit_vectors("batch_norm_apply", x, {&x, &y}, [&](auto tag, auto width) {
    using T = decltype(tag);
    constexpr int V = decltype(width)::value;
    const Dims d = dims_of(x, V, planes_per_run(x, device_attribute(cudaDevAttrMultiProcessorCount, device_)));
    apply_kernel<T, V><<<grid_of(d), kBlock, 0, stream_>>>(x.data<T>(), mean.data<T>(), invstd.data<T>(),
                                                           data_or_null<T>(weight), data_or_null<T>(bias),
                                                           y.data<T>(), d);
    KILN_CUDA_LAUNCH_CHECK("batch_norm_apply");
  });
}

void CudaBackend::batch_norm_train(const TensorRef& x, const TensorRef& weight, const TensorRef& bias, double eps,
                                   const TensorRef& y, const TensorRef& mean, const TensorRef& var,
                                   const TensorRef& invstd) {
  batch_norm::train(*this, x, weight, bias, eps, y, mean, var, invstd);
}

void CudaBackend::batch_norm_backward(const TensorRef& x, const TensorRef& grad, const TensorRef& mean,
                                      const TensorRef& invstd, const TensorRef& weight, const TensorRef& grad_x,
                                      const TensorRef& grad_weight, const TensorRef& grad_bias) {
  batch_norm::backward(*this, x, grad, mean, invstd, weight, grad_x, grad_weight, grad_bias);
}

}  // namespace kiln::cuda
