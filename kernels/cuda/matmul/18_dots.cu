// Version 18, dot products: for tiny products, a C of a few thousand elements over a short k,
// such as the MNIST CNN's last layer (64 x 10 x 128 forward, 64 x 128 x 10 and 10 x 128 x 64
// backward at batch 64). 03 gives such a C one or two blocks of 32 x 32 threads, most of them
// outside C, and walks k in slices of 32, each a round trip to memory and two barriers; 09 splits
// k but then needs a second launch to add the splits. Here L lanes of a warp take one element of
// C: lane l multiplies the pairs p = l, l + L, ..., all of its loads in flight at once, and the L
// sums meet by shuffles, always in the same order, so the result does not depend on the launch.
// L is the smallest power of two that leaves each lane at most 4 pairs (1 for k <= 4, 32 from
// k = 65), so any k up to 128 is one round trip to memory; the product's whole time is one
// launch, one round of loads and a store.
// When memory runs along p (A not transposed, B transposed: a Linear layer's forward), a group's
// lanes read neighbouring addresses; when it runs along the rows or columns of C, neighbouring
// groups do. Any layout and alignment: every load is one element.
//
// Measured (one H200, kernel-bench, docs/runs/2026-11-29-h200-matmul-dots), µs, against the version
// production ran before (03, or 09 where k was long enough to split):
//   64 x 10 x 128 B^T (fc2 forward, batch 64)   3.219 [fig cuda.matmul.dots.64x10x128BT.18.us], 03 9.54 [fig cuda.matmul.dots.64x10x128BT.03.us]
//   512 x 10 x 128 B^T (batch 512)              4.416 [fig cuda.matmul.dots.512x10x128BT.18.us], 03 9.63 [fig cuda.matmul.dots.512x10x128BT.03.us]
//   64 x 128 x 10 (its input gradient)          3.416 [fig cuda.matmul.dots.64x128x10.18.us], 03 3.902 [fig cuda.matmul.dots.64x128x10.03.us]
//   512 x 128 x 10                              4.694 [fig cuda.matmul.dots.512x128x10.18.us], 03 4.407 [fig cuda.matmul.dots.512x128x10.03.us]
//   10 x 128 x 64 A^T (its weight gradient)     3.433 [fig cuda.matmul.dots.10x128x64AT.18.us], 03 5.64 [fig cuda.matmul.dots.10x128x64AT.03.us]
//   10 x 128 x 512 A^T                          7.32 [fig cuda.matmul.dots.10x128x512AT.18.us], 09 8.923 [fig cuda.matmul.dots.10x128x512AT.09.us]
// A second call on the reviewed tree (docs/runs/2026-11-29-h200-review-final) found every small
// product about a microsecond slower, 03's too: 4.8 µs [fig cuda.matmul.dots.final.64x10x128BT.18.us]
// against 9.7 [fig cuda.matmul.dots.final.64x10x128BT.03.us] at 64 x 10 x 128 B^T.
// A product whose k is 10 gives 03 a single slice, and there 18 gains little (and loses a little at
// 512 x 128 x 10, where its four lanes an element read four rows of B apart). In the f32 CNN's step
// at batch 64 (ncu, against the tree before, one call) fc2's three products went from
// 22.85 µs [fig cuda.matmul.dots.step.b64.old.fc2.us] to 9.4 [fig cuda.matmul.dots.step.b64.new.fc2.us], the
// step's kernel time from 291.9 [fig cuda.matmul.dots.step.b64.old.us] to 278.8 [fig cuda.matmul.dots.step.b64.new.us],
// epoch 2 from 0.246 s [fig cuda.matmul.dots.b64.old.epoch2] to 0.23 [fig cuda.matmul.dots.b64.new.epoch2]; the MLP's
// (batch 64) from 0.068 [fig cuda.matmul.dots.mlp.old.epoch2] to 0.054 [fig cuda.matmul.dots.mlp.new.epoch2]; the CNN's
// at batch 512 stayed 0.115 [fig cuda.matmul.dots.b512.old.epoch2] (0.115 [fig cuda.matmul.dots.b512.new.epoch2]
// after), its step bound by the convolutions.
#include <algorithm>

#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/matmul/common.cuh"
#include "kiln/kernels/cuda/matmul/matmul.cuh"

namespace kiln::cuda::matmul {
namespace {

constexpr int kThreads = 256;
constexpr int kPairsPerLane = 4;

// A block's 256 / L elements of C as a tile of TM x TN: TN columns, the smallest power of two that
// covers n (at most 256 / L), and TM rows.
struct DotsShape {
  int lanes, tm, tn;
};

DotsShape dots_shape(int64_t n, int64_t k) {
  int lanes = 1;
  while (lanes < 32 && int64_t{lanes} * kPairsPerLane < k) lanes *= 2;
  const int outputs = kThreads / lanes;
  int tn = 1;
  while (tn < outputs && tn < n) tn *= 2;
  return {lanes, outputs / tn, tn};
}

template <int L>
__global__ void __launch_bounds__(kThreads) dots_kernel(Args<float> args, int tn) {
  dependent_kernel_start<true>();  // launch.cuh: launched by launch_dependent
  const int tid = static_cast<int>(threadIdx.x), lane = tid % L, e = tid / L;
  const int64_t i = blockIdx.y * int64_t{kThreads / L / tn} + e / tn, j = blockIdx.x * int64_t{tn} + e % tn;
  const Panel<float> A = args.panel_a(), B = args.panel_b();
  const bool inside = i < args.m && j < args.n;
  float acc = 0.0f;
  if (inside) {
    // unrolled by the pairs a lane takes in one round; a longer k takes more rounds
    for (int64_t p0 = lane; p0 < args.k; p0 += int64_t{L} * kPairsPerLane) {
      float a[kPairsPerLane], b[kPairsPerLane];
#pragma unroll
      for (int u = 0; u < kPairsPerLane; ++u) {
        const int64_t p = p0 + int64_t{u} * L;
        a[u] = p < args.k ? A.get(p, i) : 0.0f;
        b[u] = p < args.k ? B.get(p, j) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kPairsPerLane; ++u) acc = fmaf(a[u], b[u], acc);
    }
  }
  // the group's sums, halves added pairwise (the whole warp takes part: shuffles need every lane)
#pragma unroll
  for (int d = L / 2; d > 0; d /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, d);
  if (inside && lane == 0) args.c_entry()[i * args.n + j] = args.epilogue(acc, j);
}

}  // namespace

void dots(const MatmulParams& p, const float* a, const float* b, float* c, const DeviceEpilogue<float>& e,
          cudaStream_t stream) {
  const DotsShape s = dots_shape(p.n, p.k);
  launch_batched(p, a, b, c, e, s.tm, s.tn, "matmul 18_dots", [&](dim3 grid, const Args<float>& args) {
    auto launch = [&](auto kernel) { launch_dependent(kernel, grid, kThreads, 0, stream, args, s.tn); };
    switch (s.lanes) {
      case 1: launch(dots_kernel<1>); break;
      case 2: launch(dots_kernel<2>); break;
      case 4: launch(dots_kernel<4>); break;
      case 8: launch(dots_kernel<8>); break;
      case 16: launch(dots_kernel<16>); break;
      default: launch(dots_kernel<32>); break;
    }
  });
}

}  // namespace kiln::cuda::matmul
