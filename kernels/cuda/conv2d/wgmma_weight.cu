// The weight gradient on Hopper's warpgroup tensor cores: backward weight version 6 (kernels/cuda/
// conv2d.cu gives the versions, kernels/cuda/NOTES.md their story). Built for sm_90a
// (kernels/cuda/CMakeLists.txt); runs on an sm_90 GPU only.
//
// grad_w's GEMM sums over every pixel of every image (K = N_img*OH*OW, hundreds of thousands) into
// a small result (O/G outputs by C/G*KH*KW taps), so the work is split along K over the SMs and the
// splits' partial results are summed in order afterwards (version 1's split-K, deterministic).
// wgmma wants both operands K-major in shared memory, and grad_y is: an output channel's pixels lie
// side by side. The im2col matrix is not: a tap's row is the input moved by the tap's offset, one
// element (4 bytes) for each step of kx, and a wgmma descriptor moves in 16-byte steps. So the
// product is taken the other way round, grad_w^T = im2col^T . grad_y^T (M = C/G*KH*KW taps, N = the
// outputs), with A, the im2col rows, from registers: wgmma reads A from registers in mma.sync's
// fragment layout, and a thread may load its four values of a fragment from anywhere. The block
// keeps the input rows that a stage's pixels read in shared memory (the "patch": every channel of
// the block's taps, padding as zeros), and a fragment's values are single loads from it, at the
// tap's offset in the patch plus the pixel's.
//
// The kernel is warp-specialised like conv2d version 12: warpgroup 0 copies stages of 64 pixels
// (the patch and grad_y's 64 pixels of the block's outputs, zero-filled past the image and the
// input; by TMA where the shapes allow, else by cp.async) into a ring; warpgroups 1 and 2
// multiply, each owning alternate m64 tiles of taps, and they meet at a "full" and an "empty"
// mbarrier a stage. Each k-step of 8 pixels is one
// m64nNk8 product a tile, its fragments loaded while the step before runs (two sets of registers:
// wgmma may read A until the group that reads it is waited for). 3xTF32 splits A as it loads it and
// grad_y in place once a stage has landed: by TMA, the producer's warps that copy nothing split it
// before "full"; by cp.async, the consumers do, and then meet at a named barrier before either
// multiplies. It sums each stage's three products from zero before adding them to the
// accumulators in f32, as version 12: the tensor cores truncate as they add, and a split covers
// thousands of pixels.
// The bias's gradient, grad_y summed over the pixels, comes with it in 3xTF32 where the taps leave
// a spare row in their last m64 tile (conv2's 288 fill 4.5): row `taps` of the product reads its
// im2col values from a plane of ones beside the patch's plane of zeros, and its results are summed
// over the splits in the same launch as the weights'. (In TF32 the row would sum grad_y truncated
// to 10 bits, so the bias is left to a sum of its own there.)
//
// The producer sets the pace, and how it copies is most of this kernel's story (kernels/cuda/
// NOTES.md, "Backward weight version 6"). One warp per scheduler has nothing to hide its latencies
// behind, so each instruction of its copy loop costs several cycles: the first form, which worked
// out each patch row's addresses afresh (about 40 instructions a row, the tiles' products under a
// runtime `if` that ptxas serialized besides), took twice as long at conv2 in TF32;
// a table of the plane rows in shared memory, a copy loop without branches and a straight path
// for rows of up to 32 columns brought it to the first figures below, and Nsight Compute still
// found the producer busy in nearly all its samples, the consumers waiting on "full"
// (docs/runs/2026-11-29-h200-weight-ring-ncu-before). So where the shapes allow (grad_y's image
// rows and x's rows, or its planes, whole 16-byte pieces, both on 16 bytes: conv2, the large
// layer), the copy engine does the copying (TMA): one thread asks for a stage's three boxes, and
// the cp.async loop is left to the other shapes. grad_y lands under the 128-byte swizzle, as
// matmul 13's operands do, in both forms.
//
// Measured (one H200, kernel-bench, docs/runs/2026-11-28-h200-weight-ring), µs. conv2 at batch 512:
//   TF32 187.9 [fig cuda.conv2d.weight-ring.conv2-b512.bwd-weight.v6-tf32.us]
//     against version 3's 282.3 [fig cuda.conv2d.weight-ring.conv2-b512.bwd-weight.v3-tf32.us]
//     and cuDNN TF32's 309.2 [fig cuda.conv2d.weight-ring.conv2-b512.bwd-weight.cudnn-tf32.us];
//   3xTF32 340.2 [fig cuda.conv2d.weight-ring.conv2-b512.bwd-weight.v6-3xtf32.us]
//     against 3's 428.7 [fig cuda.conv2d.weight-ring.conv2-b512.bwd-weight.v3-3xtf32.us]
//     and cuDNN FP32's 545.1 [fig cuda.conv2d.weight-ring.conv2-b512.bwd-weight.cudnn.us].
// conv2 at batch 64: TF32 38.71 [fig cuda.conv2d.weight-ring.conv2-b64.bwd-weight.v6-tf32.us]
//   (3: 45.62 [fig cuda.conv2d.weight-ring.conv2-b64.bwd-weight.v3-tf32.us],
//   cuDNN TF32 54.36 [fig cuda.conv2d.weight-ring.conv2-b64.bwd-weight.cudnn-tf32.us]),
//   3xTF32 66.16 [fig cuda.conv2d.weight-ring.conv2-b64.bwd-weight.v6-3xtf32.us]
//   (3: 66.99 [fig cuda.conv2d.weight-ring.conv2-b64.bwd-weight.v3-3xtf32.us],
//   cuDNN FP32 65.63 [fig cuda.conv2d.weight-ring.conv2-b64.bwd-weight.cudnn.us]).
// The large layer (128 outputs a block):
//   3xTF32 1396 [fig cuda.conv2d.weight-ring.large.bwd-weight.v6-3xtf32.us]
//     against 3's 1978 [fig cuda.conv2d.weight-ring.large.bwd-weight.v3-3xtf32.us]
//     and cuDNN FP32's 2854 [fig cuda.conv2d.weight-ring.large.bwd-weight.cudnn.us];
//   TF32 1579 [fig cuda.conv2d.weight-ring.large.bwd-weight.v6-tf32.us]
//     against 3's 1294 [fig cuda.conv2d.weight-ring.large.bwd-weight.v3-tf32.us]
//     and cuDNN TF32's 427.1 [fig cuda.conv2d.weight-ring.large.bwd-weight.cudnn-tf32.us]:
//     that kernel spilled registers, and production kept version 3 there until the change below.
// In the CNN's f32 step at batch 512 (Nsight Compute) the weight gradient's kernel went from
// 431.6 µs [fig cuda.conv2d.weight-ring.step.b512.before.weight.us] to
// 333.1 [fig cuda.conv2d.weight-ring.step.b512.after.weight.us] (its split sums apart), the step's
// kernel time from 1517 [fig cuda.conv2d.weight-ring.step.b512.before.us] to
// 1407 [fig cuda.conv2d.weight-ring.step.b512.after.us]
// (docs/runs/2026-11-28-h200-weight-ring-profile, -ring-profile before).
// Registers (docs/runs/2026-11-28-h200-weight-regs). ptxas gives each of the 384 threads 168
// registers at entry and each warpgroup what its setmaxnreg says after; the producer's copy loop
// did not fit in 56 (the TF32 kernel for 128 outputs spilled 288 bytes), and 3xTF32's NaN
// recomputation, inlined among the stores, made ptxas spill the accumulators around it (480
// bytes stored, 888 loaded). With 96 for the producer, 200 for each consumer and the NaNs
// recomputed after every result is stored, nothing spills, and:
//   conv2 at batch 64: 3xTF32 51.55 µs [fig cuda.conv2d.weight-regs.conv2-b64.bwd-weight.v6-3xtf32.us]
//     (cuDNN FP32 66.91 [fig cuda.conv2d.weight-regs.conv2-b64.bwd-weight.cudnn.us]),
//     TF32 36.66 [fig cuda.conv2d.weight-regs.conv2-b64.bwd-weight.v6-tf32.us]
//     (3: 46.13 [fig cuda.conv2d.weight-regs.conv2-b64.bwd-weight.v3-tf32.us],
//     cuDNN TF32 59.89 [fig cuda.conv2d.weight-regs.conv2-b64.bwd-weight.cudnn-tf32.us]);
//   conv2 at batch 512: 3xTF32 310.7 [fig cuda.conv2d.weight-regs.conv2-b512.bwd-weight.v6-3xtf32.us]
//     (cuDNN FP32 552.3 [fig cuda.conv2d.weight-regs.conv2-b512.bwd-weight.cudnn.us]),
//     TF32 172.7 [fig cuda.conv2d.weight-regs.conv2-b512.bwd-weight.v6-tf32.us]
//     (3: 283.2 [fig cuda.conv2d.weight-regs.conv2-b512.bwd-weight.v3-tf32.us],
//     cuDNN TF32 314.6 [fig cuda.conv2d.weight-regs.conv2-b512.bwd-weight.cudnn-tf32.us]);
//   the large layer: 3xTF32 1349 [fig cuda.conv2d.weight-regs.large.bwd-weight.v6-3xtf32.us]
//     (cuDNN FP32 2875 [fig cuda.conv2d.weight-regs.large.bwd-weight.cudnn.us]),
//     TF32 974 [fig cuda.conv2d.weight-regs.large.bwd-weight.v6-tf32.us]
//     (3: 1310 [fig cuda.conv2d.weight-regs.large.bwd-weight.v3-tf32.us], so production takes
//     version 6 wherever it applies; cuDNN TF32 423.3 [fig cuda.conv2d.weight-regs.large.bwd-weight.cudnn-tf32.us],
//     still 2.3 times faster).
// The f32 CNN's epoch 2 at batch 64: 0.309 s [fig cuda.conv2d.weight-regs.cnn.b64.epoch2]
// (0.335 [fig cuda.matmul.x3.epoch2.b64] with the spills, docs/runs/2026-11-28-h200-3xtf32-regs), at batch 512
// 0.148 [fig cuda.conv2d.weight-regs.cnn.b512.epoch2].
// Copied by TMA, against the cp.async producer in one call (docs/runs/2026-11-29-h200-weight-tma), µs:
//   conv2 at batch 512: 3xTF32 313.1 [fig cuda.conv2d.weight-tma.conv2-b512.v6-3xtf32.old.us]
//     -> 203.0 [fig cuda.conv2d.weight-tma.conv2-b512.v6-3xtf32.new.us]
//     (cuDNN FP32 549.6 [fig cuda.conv2d.weight-tma.conv2-b512.cudnn.us]),
//     TF32 172.5 [fig cuda.conv2d.weight-tma.conv2-b512.v6-tf32.old.us]
//     -> 79.64 [fig cuda.conv2d.weight-tma.conv2-b512.v6-tf32.new.us]
//     (cuDNN TF32 312.5 [fig cuda.conv2d.weight-tma.conv2-b512.cudnn-tf32.us]);
//   conv2 at batch 64: 3xTF32 51.79 [fig cuda.conv2d.weight-tma.conv2-b64.v6-3xtf32.old.us]
//     -> 36.69 [fig cuda.conv2d.weight-tma.conv2-b64.v6-3xtf32.new.us]
//     (cuDNN FP32 59.8 [fig cuda.conv2d.weight-tma.conv2-b64.cudnn.us]),
//     TF32 36.68 [fig cuda.conv2d.weight-tma.conv2-b64.v6-tf32.old.us]
//     -> 22.9 [fig cuda.conv2d.weight-tma.conv2-b64.v6-tf32.new.us]
//     (cuDNN TF32 65.72 [fig cuda.conv2d.weight-tma.conv2-b64.cudnn-tf32.us]);
//   the large layer: 3xTF32 1335 [fig cuda.conv2d.weight-tma.large.v6-3xtf32.old.us]
//     -> 718.5 [fig cuda.conv2d.weight-tma.large.v6-3xtf32.new.us]
//     (cuDNN FP32 2876 [fig cuda.conv2d.weight-tma.large.cudnn.us]),
//     TF32 964.7 [fig cuda.conv2d.weight-tma.large.v6-tf32.old.us]
//     -> 294.1 [fig cuda.conv2d.weight-tma.large.v6-tf32.new.us], ahead of cuDNN TF32's
//     432.2 [fig cuda.conv2d.weight-tma.large.cudnn-tf32.us].
// The f32 CNN's epoch 2 at batch 64: 0.251 s [fig cuda.conv2d.weight-tma.cnn.b64.epoch2], at batch 512
// 0.121 [fig cuda.conv2d.weight-tma.cnn.b512.epoch2]; with --tf32
// 0.215 [fig cuda.conv2d.weight-tma.cnn.b64-tf32.epoch2] and
// 0.08 [fig cuda.conv2d.weight-tma.cnn.b512-tf32.epoch2] (docs/runs/2026-11-29-h200-weight-tma-train).
// The step's kernel time (Nsight Compute): 309.8 µs [fig cuda.conv2d.weight-tma.step.b64.us] at batch 64,
// this kernel 39.64 [fig cuda.conv2d.weight-tma.step.b64.weight.us] of it;
// 1055 [fig cuda.conv2d.weight-tma.step.b512.us] at 512, this kernel
// 202.6 [fig cuda.conv2d.weight-tma.step.b512.weight.us] of it.
// 3xTF32's grad_y then split by the producer's idle warps instead of the consumers, before and after in
// one call (docs/runs/2026-11-29-h200-weight-split), µs: conv2 at batch 512
//   204.4 [fig cuda.conv2d.weight-split.conv2-b512.v6-3xtf32.old.us]
//   -> 201.1 [fig cuda.conv2d.weight-split.conv2-b512.v6-3xtf32.new.us],
//   at batch 64 36.76 [fig cuda.conv2d.weight-split.conv2-b64.v6-3xtf32.old.us]
//   -> 35.46 [fig cuda.conv2d.weight-split.conv2-b64.v6-3xtf32.new.us],
//   the large layer 713.4 [fig cuda.conv2d.weight-split.large.v6-3xtf32.old.us]
//   -> 633.9 [fig cuda.conv2d.weight-split.large.v6-3xtf32.new.us].
// The bias's row (docs/runs/2026-11-29-h200-weight-bias, against 6efcc1d in one call): conv2 at batch
//   512 202.8 µs [fig cuda.conv2d.weight-bias.conv2-b512.plain.us] without it,
//   202.1 [fig cuda.conv2d.weight-bias.conv2-b512.bias.us] with it; at batch 64
//   37.24 [fig cuda.conv2d.weight-bias.conv2-b64.plain.us] and 37.29 [fig cuda.conv2d.weight-bias.conv2-b64.bias.us].
//   It takes the separate sum out of the f32 CNN's step: its reduction kernels
//   47.26 µs [fig cuda.conv2d.weight-bias.step.b512.old.sums.us] -> 12.73 [fig cuda.conv2d.weight-bias.step.b512.new.sums.us]
//   a step at batch 512 (fc1's and fc2's bias sums are what is left), the step's kernel time
//   1045 [fig cuda.conv2d.weight-bias.step.b512.old.us] -> 1003 [fig cuda.conv2d.weight-bias.step.b512.new.us]
//   µs, 38 [fig cuda.conv2d.weight-bias.step.b512.old.kernels] -> 36 [fig cuda.conv2d.weight-bias.step.b512.new.kernels]
//   kernels; at batch 64 302.7 [fig cuda.conv2d.weight-bias.step.b64.old.us]
//   -> 292.4 [fig cuda.conv2d.weight-bias.step.b64.new.us] µs, 34 [fig cuda.conv2d.weight-bias.step.b64.old.kernels]
//   -> 32 [fig cuda.conv2d.weight-bias.step.b64.new.kernels] kernels, the reductions
//   20.6 [fig cuda.conv2d.weight-bias.step.b64.old.sums.us] -> 8.07 [fig cuda.conv2d.weight-bias.step.b64.new.sums.us] µs;
//   epoch 2 at batch 512
//   0.119 s [fig cuda.conv2d.weight-bias.cnn.b512.old.epoch2] -> 0.115 [fig cuda.conv2d.weight-bias.cnn.b512.new.epoch2],
//   at batch 64 0.248 [fig cuda.conv2d.weight-bias.cnn.b64.old.epoch2] -> 0.242 [fig cuda.conv2d.weight-bias.cnn.b64.new.epoch2].
//
// bf16 (backward_weight_ring_bf16), by TMA only: the patch and grad_y's tile land in bf16, a
// product is m64nNk16, and a register of A holds two neighbouring pixels of a tap, loaded as two
// 2-byte values (the pixels 2t, 2t + 1, 2t + 8 and 2t + 9 of each k-step, walked from two starts);
// the results are f32 partials, summed in order and rounded once to bf16. Measured on the large
// layer (one H200, kernel-bench, docs/runs/2026-11-29-h200-weight-ring-lead), µs:
//   213.1 [fig cuda.conv2d.bf16-weight-ring.large.v6.us]
//     against version 3 on image pairs' 715.5 [fig cuda.conv2d.bf16-weight-ring.large.v3.us] (production before),
//     version 4's 880.5 [fig cuda.conv2d.bf16-weight-ring.large.v4.us],
//     this version's TF32 287.4 [fig cuda.conv2d.bf16-weight-ring.large.v6-tf32.us]
//     and cuDNN BF16's 185.6 [fig cuda.conv2d.bf16-weight-ring.large.cudnn.us].
// A k-step of a tile costs a consumer thread 8 shared loads in bf16 where TF32's costs 4 over half
// the pixels: the loads per pixel are TF32's, and bf16 gains only the products' half. The first
// build worked out the patch's lead (patch_lead) from the plan's element size, a division every
// stage: 226.2 µs [fig cuda.conv2d.bf16-weight-ring.first.large.v6.us] here (docs/runs/2026-11-29-h200-bf16-weight-ring),
// and it slowed the f32
// kernels too (docs/runs/2026-11-29-h200-weight-lead-division): 3xTF32 at conv2, batch 512,
// 222 µs [fig cuda.conv2d.weight-lead-division.conv2-b512.v6-3xtf32.new.us] against
// 205.3 [fig cuda.conv2d.weight-lead-division.conv2-b512.v6-3xtf32.old.us], the f32 CNN's epoch at
// batch 512 0.108 s [fig cuda.conv2d.weight-lead-division.b512.new.epoch] against
// 0.106 [fig cuda.conv2d.weight-lead-division.b512.old.epoch]. From the element type, as
// now, 3xTF32 there took 199.4 [fig cuda.conv2d.weight-ring-lead.conv2-b512.v6-3xtf32.new.us]
// against f0cba4b's 203.5 [fig cuda.conv2d.weight-ring-lead.conv2-b512.v6-3xtf32.old.us] in one
// call, the epoch 0.106 [fig cuda.conv2d.weight-ring-lead.b512.new.epoch] against
// 0.106 [fig cuda.conv2d.weight-ring-lead.b512.old.epoch].
//
// The pixel offsets (write_pixel_offsets). Nsight Compute then found the bf16 kernel issuing 90
// warp instructions for each product, a quarter of them IMAD: every consumer thread walked its own
// pixels through each stage (a multiply-add, a wrap test and a division at the stage's start for
// each of four pixels a k-step), though a stage's 64 offsets are the same for every thread and
// tile. Now the producer's warps that copy nothing (by cp.async, the copying threads before their
// copies) write them once a stage into a table beside the ring, counted on "full" like the data,
// and a consumer thread reads its two neighbouring pixels' offsets as one 8-byte load (TF32: two
// 4-byte loads). Predicted, before the run: the large layer's bf16 213 -> about 175 µs [nofig], TF32 and
// 3xTF32 a few per cent. Against 6aaef39 in one call (one H200, docs/runs/2026-11-29-h200-weight-offsets), µs:
//   the large layer in bf16 213.3 [fig cuda.conv2d.weight-offsets.large.bf16.old.us]
//     -> 181.9 [fig cuda.conv2d.weight-offsets.large.bf16.new.us]
//     (cuDNN BF16 183.8 [fig cuda.conv2d.weight-offsets.large.cudnn-bf16.us]),
//   TF32 292.1 [fig cuda.conv2d.weight-offsets.large.tf32.old.us]
//     -> 282.3 [fig cuda.conv2d.weight-offsets.large.tf32.new.us],
//   3xTF32 640.6 [fig cuda.conv2d.weight-offsets.large.3xtf32.old.us]
//     -> 590.0 [fig cuda.conv2d.weight-offsets.large.3xtf32.new.us];
//   conv2 at batch 512, 3xTF32 200.0 [fig cuda.conv2d.weight-offsets.conv2-b512.3xtf32.old.us]
//     -> 159.2 [fig cuda.conv2d.weight-offsets.conv2-b512.3xtf32.new.us],
//   TF32 98.4 [fig cuda.conv2d.weight-offsets.conv2-b512.tf32.old.us]
//     -> 82.1 [fig cuda.conv2d.weight-offsets.conv2-b512.tf32.new.us].
// The f32 kernels gained more than predicted at conv2 (its rows of 24 pixels wrapped each thread's
// walk every few steps, kernels/cuda/NOTES.md). The f32 CNN's epoch, against 72bd097 in one call
// (docs/runs/2026-11-29-h200-ring-producer-split, epochs 2 and 3): at batch 512
// 0.106 s [fig cuda.conv2d.ring-producer-split.b512.base.epoch] -> 0.101 [fig cuda.conv2d.ring-producer-split.b512.old.epoch],
// at batch 64 0.1935 [fig cuda.conv2d.ring-producer-split.b64.base.epoch] -> 0.188 [fig cuda.conv2d.ring-producer-split.b64.old.epoch].
// The producer's copy loop at 128
// outputs needed 8 more registers for the offsets (104 bytes spilled at 104; 112 now, the
// consumers 192).
// Every side of the ring (the TMA thread, the helpers, the cp.async producer, the consumers) had
// found its stage and phase as n % stages and n / stages, 64-bit divisions by a count known only
// at run time, every stage; now each steps a matmul::RingWalk, as version 12 and matmul 17 do.
// Against f7ac9e0 in one call (one H200, docs/runs/2026-11-29-h200-ring-walk), µs at conv2 (batch
// 512 [nofig]): 3xTF32 159 [fig cuda.conv2d.ring-walk.conv2.bwd-weight.3xtf32.old.us]
// -> 144.9 [fig cuda.conv2d.ring-walk.conv2.bwd-weight.3xtf32.new.us], TF32
// 81.7 [fig cuda.conv2d.ring-walk.conv2.bwd-weight.tf32.old.us]
// -> 78.6 [fig cuda.conv2d.ring-walk.conv2.bwd-weight.tf32.new.us]; version 12, whose code is the
// same instructions on the shared walk, 143.9 [fig cuda.conv2d.ring-walk.conv2.fwd.3xtf32.old.us]
// -> 143.9 [fig cuda.conv2d.ring-walk.conv2.fwd.3xtf32.new.us] (3xTF32 forward).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/conv2d.cuh"
#include "kiln/kernels/cuda/conv2d/common.cuh"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/cuda/layout.cuh"
#include "kiln/kernels/cuda/matmul/tensor_core.cuh"
#include "kiln/kernels/cuda/matmul/wgmma.cuh"

namespace kiln::cuda::conv2d {

namespace {

constexpr int kWtThreads = 384;  // warpgroup 0 produces, 1 and 2 consume
constexpr int kWtBK = 64;        // pixels a stage
constexpr int kWtMaxStages = 8;
constexpr int64_t kWtSmem = 227 * 1024;  // one block an SM

struct WeightRingPlan {
  int bn = 0;              // outputs a block: the products' N (32, 64 or 128)
  int tiles = 0;           // m64 tiles of taps a block, alternating between the two consumers
  int mblocks = 0;         // blocks of tiles along C/G*KH*KW
  int nblocks = 0;         // blocks of bn outputs along O/G
  int channels = 0;        // input channels a block's taps span: the patch's planes (and one of zeros)
  int rows = 0, cols = 0;  // a plane: the input rows of a stage's output rows, the padded width
  int plane = 0;           // a plane's floats: rows x cols, or (flat) the line TMA brings
  int per_image = 0;       // stages of an image's pixels
  int64_t chunks = 0;      // stages of the whole reduction
  int64_t splits = 0, per_split = 0;  // blocks along the reduction, and the stages of each
  int stages = 0;
  bool exact = false;
  int size = 4;  // an element's bytes: 4 (f32: TF32 or 3xTF32) or 2 (bf16)
  // 3xTF32 with the bias's gradient: row `taps` of the product, a spare one of the last tile, has
  // the patch's plane of ones for its im2col row, so its results are grad_y summed over the pixels
  bool bias = false;
  // The copies: by the tensor memory accelerator (`tma`, the producer says when), x's map either
  // a channel's rows as one line (`flat`) or its plane; else by cp.async.
  bool tma = false, flat = false;
  int64_t patch_bytes = 0, stage_bytes = 0, smem = 0;
  int64_t tma_bytes = 0;  // what TMA brings a stage
};

// The tiles of taps a consumer warpgroup holds at most: its accumulators (3xTF32: and a stage's
// sums) and two sets of fragments within about 160 registers a thread.
constexpr int tiles_max(int bn, bool exact) {
  return exact ? (bn == 32 ? 3 : bn == 64 ? 2 : 1) : (bn == 32 ? 4 : bn == 64 ? 3 : 2);
}

// aligned: x and grad_y start on 16 bytes, as TMA needs. bias: with a plane of ones (bias_row_fits).
// size: an element's bytes (4, or 2 for bf16). mblocks: the blocks of taps, from the fewest the
// consumers' registers allow (0) up while two stages do not fit in shared memory.
WeightRingPlan weight_ring_plan(const Dims& d, int64_t groups, bool exact, int sms, bool aligned, bool bias, int size,
                                int mblocks = 0) {
  WeightRingPlan p;
  p.exact = exact, p.bias = bias, p.size = size;
  const int64_t v = 16 / size;  // elements in 16 bytes
  p.bn = d.og > 64 ? 128 : d.og > 32 ? 64 : 32;
  p.nblocks = static_cast<int>((d.og + p.bn - 1) / p.bn);
  const int64_t taps = d.cg * d.khkw, all = (taps + 63) / 64;
  const int fewest = static_cast<int>((all + 2 * tiles_max(p.bn, exact) - 1) / (2 * tiles_max(p.bn, exact)));
  p.mblocks = std::max(mblocks, fewest);
  p.tiles = static_cast<int>((all + p.mblocks - 1) / p.mblocks);
  for (int64_t mb = 0; mb < p.mblocks; ++mb) {  // the widest span of channels
    const int64_t first = mb * p.tiles * 64, last = std::min(taps, first + p.tiles * 64) - 1;
    if (last >= first) p.channels = std::max(p.channels, static_cast<int>(last / d.khkw - first / d.khkw + 1));
  }
  const int64_t spanned = std::min(d.oh, (d.ow + kWtBK - 2) / d.ow + 1);  // output rows 64 pixels touch
  p.rows = static_cast<int>((spanned - 1) * d.sh + (d.kh - 1) * d.dh + 1);
  p.cols = static_cast<int>((d.ow - 1) * d.sw + (d.kw - 1) * d.dw + 1);
  p.plane = p.rows * p.cols;
  // TMA's rules (tiled_map, and a box's first column on 16 bytes): grad_y's image rows and x's
  // plane rows (or, without padding along the width, its planes) multiples of 16 bytes, a box's
  // extents at most 256 and its rows whole 16-byte pieces. A stage's patch is then one box:
  // padded rows of the plane, or its rows as one line (a plane row then exactly W columns), each
  // from up to v - 1 columns before the first it needs (`lead`, the producer).
  const int64_t lead = -d.pw & (v - 1), wide = (lead + p.cols + v - 1) / v * v;
  const int64_t line = (p.rows * d.w + 2 * (v - 1)) / v * v;
  if (aligned && d.ohw % v == 0 && p.channels <= 256 && d.n * d.c < (int64_t{1} << 31)) {
    if (d.w % v == 0 && wide <= 256 && p.rows <= 256) {
      p.tma = true, p.cols = static_cast<int>(wide), p.plane = p.rows * p.cols;
    } else if (d.pw == 0 && d.hw % v == 0 && line <= 256) {
      p.tma = p.flat = true, p.cols = static_cast<int>(d.w), p.plane = static_cast<int>(line);
    }
  }
  p.per_image = static_cast<int>((d.ohw + kWtBK - 1) / kWtBK);
  p.chunks = d.n * p.per_image;
  const int64_t per_split_blocks = groups * p.nblocks * p.mblocks;
  p.splits = std::clamp<int64_t>(sms / std::max<int64_t>(1, per_split_blocks), 1, std::max<int64_t>(1, p.chunks));
  p.per_split = (p.chunks + p.splits - 1) / p.splits;
  p.splits = (p.chunks + p.per_split - 1) / p.per_split;
  // the planes, one of zeros (and one of ones), then grad_y's tile on the 128-byte swizzle's period,
  // 1024 bytes
  p.patch_bytes = (int64_t{p.channels + 1 + bias} * p.plane * size + 1023) / 1024 * 1024;
  p.stage_bytes = p.patch_bytes + int64_t{p.bn} * kWtBK * size * (exact ? 2 : 1);
  p.tma_bytes = (int64_t{p.channels} * p.plane + int64_t{p.bn} * kWtBK) * size;
  // the base's alignment, the mbarriers (full, empty, landed), the cp.async producer's table of
  // plane rows; and a stage's pixel offsets, one int a pixel
  const int64_t fixed = 1024 + (3 * kWtMaxStages) * 8 + (p.tma ? 0 : int64_t{p.channels} * p.rows * 8);
  const int64_t per_stage = p.stage_bytes + kWtBK * 4;
  p.stages = static_cast<int>(std::min<int64_t>(kWtMaxStages, (kWtSmem - fixed) / per_stage));
  p.smem = fixed + p.stages * per_stage;
  if (p.stages < 2 && p.tiles > 1) return weight_ring_plan(d, groups, exact, sms, aligned, bias, size, p.mblocks + 1);
  return p;
}

// The bias's gradient as one more row of the product: in 3xTF32 only (TF32 would sum grad_y
// truncated to 10 bits; the ones split exactly, 1 + 0), and where the taps leave a spare row in
// their last m64 tile (the blocks of taps then always hold it: tiles x mblocks >= the tiles).
bool bias_row_fits(const Dims& d, bool exact) { return exact && d.cg * d.khkw % 64 != 0; }

// The plan where version 6 runs (a Hopper GPU, this file built for it, two stages within shared
// memory, patch rows of at most 32 columns a lane, offsets within an int), else an empty one
// (smem = 0); by TMA where `aligned` (x and grad_y on 16 bytes) and the shapes allow. bf16 (size
// 2) runs by TMA only.
WeightRingPlan weight_ring_plan_for(const Geometry& g, bool exact, bool aligned = false, bool bias = false,
                                    int size = 4) {
  if (g.n * g.oh * g.ow == 0 || g.o == 0 || g.c == 0 || !wgmma_runs()) return {};
  const Dims d = dims_of(g);
  if (bias && !bias_row_fits(d, exact)) return {};
  const int sms = device_attribute(cudaDevAttrMultiProcessorCount);
  auto fits = [&](const WeightRingPlan& p) {
    const int64_t blocks = p.splits * g.groups * p.nblocks * p.mblocks;
    return p.stages >= 2 && p.cols <= 32 * 32 && d.c * d.hw < (int64_t{1} << 31) &&
           d.o * d.ohw < (int64_t{1} << 31) && blocks < (int64_t{1} << 31) && p.chunks < (int64_t{1} << 31);
  };
  const WeightRingPlan first = weight_ring_plan(d, g.groups, exact, sms, aligned, bias, size);
  if (fits(first) && (first.tma || size == 4)) return first;
  if (size != 4) return {};
  const WeightRingPlan p = weight_ring_plan(d, g.groups, exact, sms, false, bias, size);
  return fits(p) ? p : WeightRingPlan{};
}

// TMA reads tensors that start on 16 bytes.
bool tma_aligned(const void* x, const void* gy) {
  return reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(gy) % 16 == 0;
}

template <class T>
struct WeightRingArgs {
  const T* x;   // [N, C, H, W]
  const T* gy;  // [N, O, OH, OW]
  // The splits' partial sums, split s's at s * split_stride: [O][C/G*KH*KW] from out and, with
  // plan.bias, [O] from bias_out (grad_w and grad_b themselves for one split)
  float* out;
  float* bias_out;
  int64_t split_stride;
  Dims d;
  int64_t groups;
  WeightRingPlan plan;
};

#ifdef KILN_WGMMA
// The two consumer warpgroups meet (named barrier 1: the producer is not held).
__device__ inline void consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// By TMA, the producer threads that copy nothing (warps 1-3): they write each stage's pixel offsets
// and, in 3xTF32, split its grad_y.
constexpr int kHelpers = 96;

// 3xTF32: a stage's grad_y tile (`pieces` 16-byte pieces) split in place, its high parts where it
// lies and the rest right after it (the same swizzled layout), piece first, first + step, ...;
// then made visible to the tensor cores' reads.
__device__ inline void split_grads(uint8_t* tile, int pieces, int first, int step) {
  auto* hi = reinterpret_cast<uint4*>(tile);
  for (int i = first; i < pieces; i += step) {
    const uint4 v = hi[i];
    uint4 h4, l4;
    matmul::split_tf32(v.x, h4.x, l4.x), matmul::split_tf32(v.y, h4.y, l4.y);
    matmul::split_tf32(v.z, h4.z, l4.z), matmul::split_tf32(v.w, h4.w, l4.w);
    hi[i] = h4, hi[i + pieces] = l4;
  }
  matmul::fence_async_shared();
}

// grad_w^T's element (tap, output) summed in f32 over the split's pixels (tap C/G*KH*KW: the
// bias's, grad_y alone): the 3xTF32 answer where it came out NaN (an infinite value splits into inf
// and NaN).
__device__ float weight_dot_f32(const WeightRingArgs<float>& a, int64_t group, int64_t o, int64_t tap, int64_t chunk_begin,
                                int64_t chunk_end) {
  const Dims& d = a.d;
  const bool ones = tap == d.cg * d.khkw;
  const int64_t c = ones ? 0 : tap / d.khkw, ky = tap % d.khkw / d.kw, kx = tap % d.kw;
  float sum = 0.0f;
  for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk) {
    const int64_t img = chunk / a.plan.per_image, q0 = chunk % a.plan.per_image * kWtBK;
    const float* x = a.x + (img * d.c + group * d.cg + c) * d.hw;
    const float* gy = a.gy + (img * d.o + group * d.og + o) * d.ohw;
    for (int64_t q = q0; q < std::min(q0 + kWtBK, d.ohw); ++q) {
      if (ones) {
        sum += gy[q];
        continue;
      }
      const int64_t ih = q / d.ow * d.sh - d.ph + ky * d.dh, iw = q % d.ow * d.sw - d.pw + kx * d.dw;
      if (ih >= 0 && ih < d.h && iw >= 0 && iw < d.w) sum += gy[q] * x[ih * d.w + iw];
    }
  }
  return sum;
}

// Where the patch of the stage whose first input row is ih0 starts along x's innermost dimension:
// its first column, -pw, or (flat) row ih0's first element; and, by TMA, the columns its box
// brings before that, to start on 16 bytes (0 by cp.async).
__device__ inline int patch_start(const WeightRingPlan& plan, const Dims& d, int ih0) {
  return plan.flat ? ih0 * static_cast<int>(d.w) : -d.pw;
}
template <class E>
__device__ inline int patch_lead(const WeightRingPlan& plan, const Dims& d, int ih0) {
  return plan.tma ? patch_start(plan, d, ih0) & (16 / static_cast<int>(sizeof(E)) - 1) : 0;
}

// The pixel offsets of the stage of `chunk`: where pixel p of its 64 (the image's q0 + p) reads the
// patch at tap 0 (a tap adds its own offset, the consumers' `base`), or 0 past the image (read, and
// multiplied by grad_y's zeros there). The same for every thread and tile, so written once a stage
// (pixels first, first + step, ...) where each consumer thread used to walk its pixels: the walks'
// multiply-adds, wraps and division were most of the consumers' instructions in bf16
// (kernels/cuda/NOTES.md).
template <class E>
__device__ inline void write_pixel_offsets(int* offsets, const WeightRingPlan& plan, const Dims& d, int64_t chunk,
                                           int first, int step) {
  const int ow = static_cast<int>(d.ow), ohw = static_cast<int>(d.ohw), row_step = d.sh * plan.cols;
  const int q0 = static_cast<int>(chunk % plan.per_image) * kWtBK, oh0 = q0 / ow;
  const int lead = patch_lead<E>(plan, d, oh0 * d.sh - d.ph);
  for (int p = first; p < kWtBK; p += step) {
    const int q = q0 + p;
    offsets[p] = q < ohw ? lead + (q / ow - oh0) * row_step + q % ow * d.sw : 0;
  }
}
#endif

// Block b: taps block b % mblocks, outputs block b / mblocks % nblocks, group b / (mblocks nblocks) %
// groups, split b / (mblocks nblocks groups), which takes stages [split per_split, + per_split).
// T: the tiles a consumer holds at most; consumer warpgroup wg owns the block's tiles wg, wg + 2, ...
// plan.tma: the copies read x, [N C][H][W] (or [N C][H W] when plan.flat), and grad_y, [N][O][OH OW],
// through map_x and map_gy, in boxes of a stage's patch and of 32 pixels by BN outputs (the
// 128-byte swizzle); the maps are kernel parameters of their own, as TMA wants them.
// E: the elements, float (TF32, or 3xTF32 with kExact) or bf16 (by TMA only).
template <class E, int BN, int T, bool kExact>
__global__ void __launch_bounds__(kWtThreads, 1)
    weight_ring_kernel(const __grid_constant__ WeightRingArgs<E> a, const __grid_constant__ CUtensorMap map_x,
                       const __grid_constant__ CUtensorMap map_gy) {
  dependent_kernel_start();  // launch.cuh: launched by launch_dependent
#ifdef KILN_WGMMA
  extern __shared__ __align__(1024) uint8_t smem_weight[];
  constexpr int R = BN / 2;  // accumulators a thread a tile
  constexpr bool kBf16 = std::is_same_v<E, bf16>;
  constexpr int kStepK = kBf16 ? 16 : 8;                          // pixels a product
  constexpr int kBoxPixels = 128 / static_cast<int>(sizeof(E));  // grad_y's box: 128 bytes of pixels
  // Registers a thread, for which ptxas -v finds nothing spilled: the producer's copy loop needs
  // more than 104 at 128 outputs once it writes the pixel offsets too (104 bytes spilled), and
  // 3xTF32's consumers more than 200 at 32 and 64 (two tiles and a stage's sums besides their
  // accumulators). The warpgroups share what the block was given,
  // 384 x 168 (__launch_bounds__): a consumer's setmaxnreg.inc past that waits for ever.
  constexpr bool kHeavyConsumers = kExact && BN < 128;
  constexpr int kProducerRegs = kHeavyConsumers ? 88 : 112, kConsumerRegs = kHeavyConsumers ? 208 : 192;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kWtThreads * 168, "the block's registers");
  const Dims& d = a.d;
  const WeightRingPlan& plan = a.plan;
  uint8_t* ring = smem_weight + (1024 - matmul::smem_u32(smem_weight) % 1024) % 1024;
  auto* full = reinterpret_cast<uint64_t*>(ring + plan.stages * plan.stage_bytes);
  uint64_t* empty = full + kWtMaxStages;
  uint64_t* landed = empty + kWtMaxStages;  // 3xTF32 by TMA: the boxes are in, grad_y not yet split
  const int tid = static_cast<int>(threadIdx.x), stages = plan.stages;
  const bool producer_splits = kExact && plan.tma;
  const int rows = plan.rows, cols = plan.cols, plane = plan.plane;
  const int64_t block = blockIdx.x;
  const int mb = static_cast<int>(block % plan.mblocks);
  const int64_t n0 = block / plan.mblocks % plan.nblocks * BN;
  const int64_t group = block / (int64_t{plan.mblocks} * plan.nblocks) % a.groups;
  const int64_t split = block / (int64_t{plan.mblocks} * plan.nblocks * a.groups);
  const int64_t chunk_begin = split * plan.per_split, chunk_end = std::min(plan.chunks, chunk_begin + plan.per_split);
  const int64_t taps = d.cg * d.khkw, m0 = int64_t{mb} * plan.tiles * 64;
  const int64_t c_first = m0 / d.khkw;  // the patch's first channel (of the group)
  const int ohw = static_cast<int>(d.ohw), ow = static_cast<int>(d.ow);
  if (tid == 0) {
    for (int s = 0; s < stages; ++s) {
      // by TMA: the helpers, and the TMA thread unless they wait for its boxes (3xTF32's split);
      // by cp.async: every thread's copies, and the threads that write the pixel offsets
      matmul::mbar_init(&full[s], plan.tma ? kHelpers + (producer_splits ? 0 : 1) : 128 + kWtBK);
      matmul::mbar_init(&empty[s], 8);   // every consumer warp
      matmul::mbar_init(&landed[s], 1);  // the TMA thread
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // each stage's plane of zeros, read by the taps past the block's (and of ones, by the bias's row)
  for (int s = 0; s < stages; ++s)
    for (int i = tid; i < (1 + plan.bias) * plane; i += kWtThreads)
      reinterpret_cast<E*>(ring + s * plan.stage_bytes)[plan.channels * plane + i] = E(i < plane ? 0.0f : 1.0f);
  // The cp.async producer's table of the patch's plane rows, the same every stage: row pr (channel
  // c_first + pr / rows, the stage's input row ih0 + pr % rows) reads x from offset .x past the
  // stage's first input row of channel c_first, and is inside the input where ih0 + .y is a row of
  // it (.y far below zero for a channel past the group's).
  const int h = static_cast<int>(d.h), w = static_cast<int>(d.w), hw = static_cast<int>(d.hw);
  const int planes = plan.channels * rows, cg_left = static_cast<int>(d.cg - c_first);
  int* offsets = reinterpret_cast<int*>(landed + kWtMaxStages);  // stage s's pixel offsets at s kWtBK
  auto* table = reinterpret_cast<int2*>(offsets + stages * kWtBK);
  for (int pr = tid; pr < planes && !plan.tma; pr += kWtThreads) {
    const int c = pr / rows, r = pr % rows;
    table[pr] = make_int2(c * hw + r * w - d.pw, c < cg_left ? r : -(1 << 30));
  }
  __syncthreads();

  if (tid < 128) {
    // kProducerRegs: at 56 (with 224 for each consumer) the copy loop spilled to local memory in
    // four of the six kernels (ptxas -v)
    matmul::setmaxnreg_dec<kProducerRegs>();
    // ---- producer: a stage is image img's pixels q0 .. q0 + 63: the patch (plane row pr: the
    // block's channel c_first + pr / rows, input row ih0 + pr % rows) and grad_y's 64 pixels of the
    // block's outputs, as two boxes of 32 pixels by BN outputs, [BN][32] floats under the 128-byte
    // swizzle (TMA's layout, K-major for wgmma).
    if (plan.tma) {
      // One thread asks the copy engine for the stage's three boxes, which count their bytes on
      // "full" as they land, zeros where they overhang the input, grad_y or the image. The patch's
      // rows start at column -pw (a plane of rows of plan.cols, padding included), or, flat, at
      // row ih0's first element, a channel's rows then read as one line; TMA takes a box's first
      // column on 16 bytes only, so the box starts up to 3 columns before (patch_lead).
      if (tid == 0) {
        matmul::RingWalk walk;
        for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk, walk.next(stages)) {
          const int stage = walk.stage;
          if (walk.lap > 0) matmul::mbar_wait(&empty[stage], static_cast<uint32_t>((walk.lap - 1) & 1));
          uint8_t* st = ring + stage * plan.stage_bytes;
          const int img = static_cast<int>(chunk / plan.per_image);
          const int q0 = static_cast<int>(chunk % plan.per_image) * kWtBK, ih0 = q0 / ow * d.sh - d.ph;
          const int channel = static_cast<int>(img * d.c + group * d.cg + c_first);
          uint64_t* bar = producer_splits ? &landed[stage] : &full[stage];
          matmul::mbar_arrive_expect_tx(bar, static_cast<uint32_t>(plan.tma_bytes));
          const int at = patch_start(plan, d, ih0) - patch_lead<E>(plan, d, ih0);
          if (plan.flat) matmul::tma_load(st, &map_x, at, channel, 0, bar);
          else matmul::tma_load(st, &map_x, at, ih0, channel, bar);
          for (int box = 0; box < kWtBK / kBoxPixels; ++box)
            matmul::tma_load(st + plan.patch_bytes + box * BN * 128, &map_gy, q0 + kBoxPixels * box,
                             static_cast<int>(group * d.og + n0), img, bar);
        }
      } else if (tid >= 128 - kHelpers) {
        // warps 1 to 3 write each stage's pixel offsets once the consumers are done with it (3xTF32:
        // once its boxes have landed, and then split its grad_y, so that the consumers never meet a
        // stage)
        const int helper = tid - (128 - kHelpers);
        matmul::RingWalk walk;
        for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk, walk.next(stages)) {
          const int stage = walk.stage;
          if (producer_splits) matmul::mbar_wait(&landed[stage], static_cast<uint32_t>(walk.lap & 1));
          else if (walk.lap > 0) matmul::mbar_wait(&empty[stage], static_cast<uint32_t>((walk.lap - 1) & 1));
          write_pixel_offsets<E>(offsets + stage * kWtBK, plan, d, chunk, helper, kHelpers);
          if (producer_splits)
            split_grads(ring + stage * plan.stage_bytes + plan.patch_bytes, BN * kWtBK / 4, helper, kHelpers);
          matmul::mbar_arrive(&full[stage]);
        }
      }
    } else if constexpr (!kBf16) {
      // By cp.async: plane rows a warp at a time, a column a lane; grad_y's piece i = tid + 128 j,
      // output i / 16's pixels 4 (i % 16) .. + 3, at its place in the swizzled boxes.
      const int warp = tid / 32, lane = tid % 32;
      const int outputs = static_cast<int>(std::min<int64_t>(BN, d.og - n0));
      const bool aligned = ohw % 4 == 0;                    // a piece is one 16-byte copy
      // the patch columns a lane takes, lane + 32 j (the same count in every lane: a lane past the
      // row's end in a branch of its own would have the warp run both); bit j of `real`: that
      // column is in the row, of `inside`: and inside the input
      const int lane_cols = (cols + 31) / 32;
      const float* x = a.x;  // a valid address for the copies that read nothing
      uint32_t real = 0, inside = 0;
      for (int j = 0; j < lane_cols; ++j) {
        real |= uint32_t{lane + 32 * j < cols} << j;
        inside |= uint32_t{static_cast<unsigned>(lane + 32 * j - d.pw) < static_cast<unsigned>(w)} << j;
      }
      matmul::RingWalk walk;
      for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk, walk.next(stages)) {
        const int stage = walk.stage;
        if (walk.lap > 0) matmul::mbar_wait(&empty[stage], static_cast<uint32_t>((walk.lap - 1) & 1));
        uint8_t* st = ring + stage * plan.stage_bytes;
        if (tid < kWtBK) {  // the stage's pixel offsets, a thread each, counted on "full" beside its copies
          write_pixel_offsets<E>(offsets + stage * kWtBK, plan, d, chunk, tid, kWtBK);
          matmul::mbar_arrive(&full[stage]);
        }
        const int64_t img = chunk / plan.per_image;
        const int q0 = static_cast<int>(chunk % plan.per_image) * kWtBK;
        const int ih0 = q0 / ow * d.sh - d.ph;
        const float* xs = a.x + (img * d.c + group * d.cg + c_first) * d.hw;
        // A plane row a warp at a time, its columns lane + 32 j, its source from the table, and no
        // branch a row: a column past the row's end copies zeros into the plane of zeros instead
        // (src-size 0, as a column outside the input does into its own place).
        const float* base = xs + ih0 * w + lane;
        float* dst = reinterpret_cast<float*>(st) + lane;
        float* spare = reinterpret_cast<float*>(st) + plan.channels * plane;  // the plane of zeros
        if (lane_cols == 1) {  // rows of up to 32 columns (MNIST's): one copy a row, straight code
          const bool col_in = inside & 1, col_real = real & 1;
#pragma unroll 4
          for (int pr = warp; pr < planes; pr += 4) {
            const int2 t = table[pr];
            const bool ok = col_in && static_cast<unsigned>(ih0 + t.y) < static_cast<unsigned>(h);
            matmul::cp_async4(col_real ? dst + pr * cols : spare, ok ? base + t.x : x, ok);
          }
        } else {
          for (int pr = warp; pr < planes; pr += 4) {
            const int2 t = table[pr];
            const bool row_in = static_cast<unsigned>(ih0 + t.y) < static_cast<unsigned>(h);
            for (int j = 0; j < lane_cols; ++j) {
              const bool ok = row_in && (inside >> j & 1);
              matmul::cp_async4((real >> j & 1) ? dst + pr * cols + 32 * j : spare, ok ? base + t.x + 32 * j : x, ok);
            }
          }
        }
        uint8_t* grads = st + plan.patch_bytes;
        const float* gs = a.gy + (img * d.o + group * d.og + n0) * d.ohw + q0;
#pragma unroll
        for (int j = 0; j < BN * kWtBK / 4 / 128; ++j) {
          const int i = tid + 128 * j, o = i / (kWtBK / 4), k4 = i % (kWtBK / 4);
          uint8_t* to = grads + (k4 / 8 * BN * 128 + o * 128 + ((k4 % 8) ^ (o % 8)) * 16);
          const float* from = gs + int64_t{o} * d.ohw + 4 * k4;
          const int left = o < outputs ? ohw - q0 - 4 * k4 : 0;  // the piece's pixels in the image
          if (aligned) {
            matmul::cp_async16(to, left > 0 ? from : a.gy, left > 0 ? 16 : 0);
          } else {
#pragma unroll
            for (int e = 0; e < 4; ++e) matmul::cp_async4(to + 4 * e, e < left ? from + e : a.gy, e < left);
          }
        }
        matmul::cp_async_arrive(&full[stage]);  // once this thread's copies have landed
      }
    }
  } else {
    // ---- consumers
    matmul::setmaxnreg_inc<kConsumerRegs>();
    const int wg = tid / 128 - 1, warp = tid / 32 % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int mine = (plan.tiles - wg + 1) / 2;  // this warpgroup's tiles
    // The warpgroup's tile count as a constant of the code that issues its products: wgmma under a
    // branch on a value of the thread's (a tile's `if (s < mine)`) is serialized by ptxas
    // (C7520), each product waiting for the one before.
    auto consume = [&]<int NT>() {
      // The patch offset of each of the thread's fragment rows (taps g and g + 8 of its warp's 16 in
      // each tile): channel plane, input row and column of the tap; the plane of zeros past the
      // block's taps, or of ones for the bias's row (m == taps, in the block's tiles). m_end is
      // worked out again for the stores: kept across the loop, it spilled (conv2's 3xTF32 kernel).
      auto rows_end = [&] { return std::min(taps + plan.bias, m0 + int64_t{plan.tiles} * 64); };
      int base[NT > 0 ? NT : 1][2];
#pragma unroll
      for (int s = 0; s < NT; ++s)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int64_t m = m0 + (wg + 2 * s) * 64 + warp * 16 + g + 8 * hh;
          const int64_t tap = m % d.khkw;
          base[s][hh] = m >= rows_end() ? plan.channels * plane
                        : m == taps ? (plan.channels + 1) * plane
                                    : static_cast<int>((m / d.khkw - c_first) * plane + tap / d.kw * d.dh * cols +
                                                       tap % d.kw * d.dw);
        }
      const uint32_t ring_at = matmul::smem_u32(ring);
      float acc[NT > 0 ? NT : 1][R];
#pragma unroll
      for (int s = 0; s < NT; ++s)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[s][r] = 0.0f;
      [[maybe_unused]] float part[NT > 0 ? NT : 1][R];
      matmul::RingWalk walk;
      for (int64_t chunk = chunk_begin; chunk < chunk_end; ++chunk, walk.next(stages)) {
        const int stage = walk.stage;
        matmul::mbar_wait(&full[stage], static_cast<uint32_t>(walk.lap & 1));
        uint8_t* st = ring + stage * plan.stage_bytes;
        const uint32_t grads = ring_at + static_cast<uint32_t>(stage * plan.stage_bytes + plan.patch_bytes);
        if constexpr (kExact) {
          if (!plan.tma) {  // grad_y split here (by TMA, the producer's warps split it before "full")
            split_grads(st + plan.patch_bytes, BN * kWtBK / 4, tid - 128, 256);
            consumers_sync();
          }
#pragma unroll
          for (int s = 0; s < NT; ++s) {
#pragma unroll
            for (int r = 0; r < R; ++r) part[s][r] = 0.0f;
            matmul::fence_accumulators(part[s]);
          }
        } else {
          // the producer's cp.async writes, seen through the barrier, made visible to the tensor
          // cores' reads (TMA's land in their proxy already)
          matmul::fence_async_shared();
        }
        // The thread's pixels' offsets, from the stage's table. TF32: columns t and t + 4 of each
        // k-step of 8, stage pixels 8 step + t (+ 4). bf16: columns 2t, 2t + 1, 2t + 8 and 2t + 9
        // of each k-step of 16 (a register holds two neighbouring pixels of a tap), each pair one
        // 8-byte load.
        const int* pixel = offsets + stage * kWtBK;
        uint32_t frag[2][NT > 0 ? NT : 1][kExact ? 8 : 4];
        auto load = [&](uint32_t (&f)[NT > 0 ? NT : 1][kExact ? 8 : 4], int step) {
          if constexpr (kBf16) {
            const auto* patch = reinterpret_cast<const uint16_t*>(st);
            const auto* pairs = reinterpret_cast<const int2*>(pixel) + 8 * step;
            const int2 first = pairs[t], second = pairs[t + 4];
            const int e0 = first.x, o0 = first.y, e1 = second.x, o1 = second.y;
            auto pair = [&](int row, int lo, int hi) {
              return uint32_t{patch[row + lo]} | uint32_t{patch[row + hi]} << 16;
            };
#pragma unroll
            for (int s = 0; s < NT; ++s) {
              f[s][0] = pair(base[s][0], e0, o0), f[s][1] = pair(base[s][1], e0, o0);
              f[s][2] = pair(base[s][0], e1, o1), f[s][3] = pair(base[s][1], e1, o1);
            }
          } else {
            const auto* patch = reinterpret_cast<const float*>(st);
            const int o0 = pixel[8 * step + t], o1 = pixel[8 * step + t + 4];
#pragma unroll
            for (int s = 0; s < NT; ++s) {
              const uint32_t v[4] = {__float_as_uint(patch[base[s][0] + o0]), __float_as_uint(patch[base[s][1] + o0]),
                                     __float_as_uint(patch[base[s][0] + o1]), __float_as_uint(patch[base[s][1] + o1])};
#pragma unroll
              for (int r = 0; r < 4; ++r) {
                if constexpr (kExact) matmul::split_tf32(v[r], f[s][r], f[s][4 + r]);
                else f[s][r] = v[r];
              }
            }
          }
        };
        load(frag[0], 0);
#pragma unroll
        for (int step = 0; step < kWtBK / kStepK; ++step) {
          auto& f = frag[step % 2];
          // k-step `step`: 32 bytes along the rows of box step / 4 (bf16: one box)
          const uint64_t b =
              matmul::swizzled_descriptor(grads + static_cast<uint32_t>(step / 4 * BN * 128 + step % 4 * 32));
          matmul::wgmma_fence();
#pragma unroll
          for (int s = 0; s < NT; ++s) {
            if constexpr (kExact) {
              const uint64_t b_lo = b + BN * kWtBK * 4 / 16;
              const uint32_t a_hi[4] = {f[s][0], f[s][1], f[s][2], f[s][3]};
              const uint32_t a_lo[4] = {f[s][4], f[s][5], f[s][6], f[s][7]};
              matmul::wgmma_tf32(part[s], a_lo, b);
              matmul::wgmma_tf32(part[s], a_hi, b_lo);
              matmul::wgmma_tf32(part[s], a_hi, b);
            } else {
              const uint32_t a4[4] = {f[s][0], f[s][1], f[s][2], f[s][3]};
              if constexpr (kBf16) matmul::wgmma_bf16(acc[s], a4, b);
              else matmul::wgmma_tf32(acc[s], a4, b);
            }
          }
          matmul::wgmma_commit();
          if (step + 1 < kWtBK / kStepK) {
            matmul::wgmma_wait<1>();  // the step before is done with the other set of fragments
            load(frag[(step + 1) % 2], step + 1);
          }
        }
        matmul::wgmma_wait<0>();
        if (lane == 0) matmul::mbar_arrive(&empty[stage]);
        if constexpr (kExact) {
#pragma unroll
          for (int s = 0; s < NT; ++s) {
            matmul::fence_accumulators(part[s]);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[s][r] += part[s][r];
          }
        }
      }
      // The thread's results: taps (rows) g and g + 8 of its warp's 16 in each tile, outputs
      // (columns) 8j + 2t + e, stored to out[split][group og + n0 + column][tap]; the bias's row to
      // bias_out[split][group og + n0 + column].
      float* out = a.out + split * a.split_stride + (group * d.og + n0) * taps;
      const int64_t outputs = std::min<int64_t>(BN, d.og - n0), m_end = rows_end();
      auto each_result = [&](auto&& fn) {
#pragma unroll
        for (int s = 0; s < NT; ++s)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int64_t m = m0 + (wg + 2 * s) * 64 + warp * 16 + g + 8 * hh;
            if (m >= m_end) continue;
#pragma unroll
            for (int j = 0; j < BN / 8; ++j)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                if (const int col = 8 * j + 2 * t + e; col < outputs) fn(acc[s][4 * j + 2 * hh + e], m, col);
          }
      };
#pragma unroll
      for (int s = 0; s < NT; ++s) matmul::fence_accumulators(acc[s]);
      [[maybe_unused]] bool nan = false;
      auto at = [&](int64_t m, int col) -> float& {
        return m == taps ? a.bias_out[split * a.split_stride + group * d.og + n0 + col] : out[col * taps + m];
      };
      each_result([&](float v, int64_t m, int col) { nan |= v != v, at(m, col) = v; });
      // 3xTF32's NaNs recomputed in f32 once every result is stored: the recomputation's loops,
      // inlined among the stores, kept ptxas from holding the accumulators in registers (hundreds
      // of bytes spilled)
      if constexpr (kExact) {
        if (nan)
          each_result([&](float v, int64_t m, int col) {
            if (v != v) at(m, col) = weight_dot_f32(a, group, n0 + col, m, chunk_begin, chunk_end);
          });
      }
    };
    switch (mine) {
      case 0: if constexpr (0 <= T) consume.template operator()<0>(); break;
      case 1: if constexpr (1 <= T) consume.template operator()<1>(); break;
      case 2: if constexpr (2 <= T) consume.template operator()<2>(); break;
      case 3: if constexpr (3 <= T) consume.template operator()<3>(); break;
      case 4: if constexpr (4 <= T) consume.template operator()<4>(); break;
      default: break;
    }
  }
#else
  (void)a, (void)map_x, (void)map_gy;
  __trap();
#endif
}

// out, bias_out and split_stride as WeightRingArgs'.
template <class E>
void weight_ring_run(const E* x, const E* gy, float* out, float* bias_out, int64_t split_stride, const Geometry& g,
                     const WeightRingPlan& plan, cudaStream_t stream) {
  const WeightRingArgs<E> args{x, gy, out, bias_out, split_stride, dims_of(g), g.groups, plan};
  CUtensorMap map_x{}, map_gy{};
  if (plan.tma) {
    const Dims& d = args.d;
    auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
    constexpr int64_t size = sizeof(E);
    const CUtensorMapDataType type =
        std::is_same_v<E, bf16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    const uint64_t gy_dims[3] = {u(d.ohw), u(d.o), u(d.n)}, gy_strides[2] = {u(d.ohw * size), u(d.o * d.ohw * size)};
    const uint32_t gy_box[3] = {u32(128 / size), u32(plan.bn), 1};
    map_gy = matmul::tiled_map(type, 3, gy, gy_dims, gy_strides, gy_box, CU_TENSOR_MAP_SWIZZLE_128B,
                               "conv2d_backward_weight");
    const int64_t planes = d.n * d.c;
    const uint64_t x_dims[3] = {u(plan.flat ? d.hw : d.w), u(plan.flat ? planes : d.h), u(plan.flat ? 1 : planes)};
    const uint64_t x_strides[2] = {u(plan.flat ? d.hw * size : d.w * size),
                                   u(plan.flat ? planes * d.hw * size : d.hw * size)};
    const uint32_t x_box[3] = {u32(plan.flat ? plan.plane : plan.cols), u32(plan.flat ? plan.channels : plan.rows),
                               u32(plan.flat ? 1 : plan.channels)};
    map_x = matmul::tiled_map(type, 3, x, x_dims, x_strides, x_box, CU_TENSOR_MAP_SWIZZLE_NONE,
                              "conv2d_backward_weight");
  }
  const int64_t blocks = plan.splits * g.groups * plan.nblocks * plan.mblocks;
  auto launch = [&]<int BN, bool kExact>() {
    auto* kernel = weight_ring_kernel<E, BN, tiles_max(BN, kExact), kExact>;
    const int bytes = static_cast<int>(plan.smem);
    allow_dynamic_smem(kernel, bytes);
    launch_dependent(kernel, static_cast<unsigned>(blocks), kWtThreads, bytes, stream, args, map_x, map_gy);
    KILN_CUDA_LAUNCH_CHECK("conv2d_backward_weight");
  };
  auto maths = [&]<int BN>() {  // 3xTF32 in f32 only
    if constexpr (std::is_same_v<E, float>) {
      if (plan.exact) return launch.template operator()<BN, true>();
    }
    launch.template operator()<BN, false>();
  };
  if (plan.bn == 128) maths.template operator()<128>();
  else if (plan.bn == 64) maths.template operator()<64>();
  else maths.template operator()<32>();
}

}  // namespace

bool backward_weight_ring_applies(const Geometry& g, TensorMath math) {
  return weight_ring_plan_for(g, exact(math)).smem > 0;
}

bool backward_weight_ring_takes_bias(const Geometry& g, TensorMath math) {
  return weight_ring_plan_for(g, exact(math), false, true).smem > 0;
}

// Enough for the plan by TMA and the one by cp.async, whichever the operands' alignment picks: their
// patches differ, and so may their blocks of taps and their splits.
int64_t backward_weight_ring_workspace(const Geometry& g, TensorMath math, bool bias) {
  int64_t need = 0;
  for (const bool aligned : {false, true}) {
    const WeightRingPlan p = weight_ring_plan_for(g, exact(math), aligned, bias);
    if (p.smem > 0 && p.splits > 1) need = std::max(need, p.splits * g.o * ((g.c / g.groups) * g.kh * g.kw + bias));
  }
  return need;
}

bool backward_weight_ring_uses_tma(const float* x, const float* grad_y, const Geometry& g, TensorMath math) {
  return weight_ring_plan_for(g, exact(math), tma_aligned(x, grad_y)).tma;
}

void backward_weight_ring(const float* x, const float* grad_y, float* grad_w, float* workspace, const Geometry& g,
                          TensorMath math, cudaStream_t stream, float* grad_b) {
  const bool bias = grad_b != nullptr;
  const WeightRingPlan plan = weight_ring_plan_for(g, exact(math), tma_aligned(x, grad_y), bias);
  KILN_CHECK(!bias || plan.smem > 0, ValueError,
             "cuda conv2d_backward_weight: version 6 (wgmma ring) does not take the bias's gradient here: it does in "
             "3xTF32, where the taps leave a spare row and the plan fits (backward_weight_ring_takes_bias)");
  check_entry(plan.smem > 0, workspace, backward_weight_ring_workspace(g, math, bias), "conv2d_backward_weight",
              "6 (wgmma ring)");
  const int64_t weights = g.o * (g.c / g.groups) * g.kh * g.kw;
  if (plan.splits == 1) {
    weight_ring_run(x, grad_y, grad_w, grad_b, 0, g, plan, stream);
    return;
  }
  // each split's weights, then its biases; summed in one launch, the biases into grad_b
  weight_ring_run(x, grad_y, workspace, workspace + weights, weights + (bias ? g.o : 0), g, plan, stream);
  sum_splits(workspace, grad_w, weights + (bias ? g.o : 0), plan.splits, stream, grad_b, bias ? weights : -1);
  KILN_CUDA_LAUNCH_CHECK("conv2d_backward_weight");
}

}  // namespace kiln::cuda::conv2d

namespace kiln::cuda::conv2d {

bool backward_weight_ring_bf16_applies(const bf16* x, const bf16* grad_y, const Geometry& g) {
  return weight_ring_plan_for(g, false, tma_aligned(x, grad_y), false, 2).smem > 0;
}

// The splits' f32 partials (one split's too: the kernel stores f32), by the plan for aligned
// operands, the only one bf16 runs.
int64_t backward_weight_ring_bf16_workspace(const Geometry& g) {
  const WeightRingPlan p = weight_ring_plan_for(g, false, true, false, 2);
  return p.smem > 0 ? static_cast<int64_t>(sizeof(float)) * p.splits * g.o * (g.c / g.groups) * g.kh * g.kw : 0;
}

void backward_weight_ring_bf16(const bf16* x, const bf16* grad_y, bf16* grad_w, void* workspace, const Geometry& g,
                               cudaStream_t stream) {
  const WeightRingPlan plan = weight_ring_plan_for(g, false, tma_aligned(x, grad_y), false, 2);
  check_entry(plan.smem > 0, workspace, backward_weight_ring_bf16_workspace(g), "conv2d_backward_weight",
              "6 (wgmma ring, bf16: by TMA, x and grad_y on 16 bytes)", "bytes");
  const int64_t weights = g.o * (g.c / g.groups) * g.kh * g.kw;
  auto* partials = static_cast<float*>(workspace);
  weight_ring_run(x, grad_y, partials, nullptr, weights, g, plan, stream);
  sum_splits(partials, grad_w, weights, plan.splits, stream);  // each rounded to bf16 once
  KILN_CUDA_LAUNCH_CHECK("conv2d_backward_weight");
}

}  // namespace kiln::cuda::conv2d
