// kernel-bench --only wgmma: how fast one wgmma shape runs when nothing else is in its way.
//
// Every kernel that multiplies on Hopper's tensor cores issues some wgmma.mma_async shape: conv2d
// version 12 multiplies 64 pixels by the layer's 64 outputs (m64n64k8), matmul 13 and 17 take
// m64n256k8 or m64n128k8. Whether a kernel is slow because of its shape or because of what feeds it
// is the question this bench answers for the shape: one block an SM, two warpgroups (the consumers
// of a warp-specialised kernel), each issuing its product over and over from operands already in
// shared memory, four k-steps a commit group and two groups in flight (wgmma_wait<1>), as the
// kernels do. No copies, no barriers, no epilogue: what is left is the tensor cores' rate for that
// N and for A read from shared memory or from registers.
//
// Measured (one H200, docs/runs/2026-11-28-h200-wgmma-rate), TFLOP/s: TF32 m64n64k8
// 476.6 [fig cuda.wgmma-rate.tf32.n64.smem.tflops] with A from shared memory,
// 484.0 [fig cuda.wgmma-rate.tf32.n64.regs.tflops] from registers, m64n256k8
// 485.7 [fig cuda.wgmma-rate.tf32.n256.smem.tflops]: from 64 columns up, the shape does not matter. At 32
// it does, A from shared memory most (322.3 [fig cuda.wgmma-rate.tf32.n32.smem.tflops]; from
// registers 420.3 [fig cuda.wgmma-rate.tf32.n32.regs.tflops]), likeliest because each product reads
// its 2 KB of A again for half the work. bf16 m64n64k16 870.0 [fig cuda.wgmma-rate.bf16.n64.smem.tflops],
// m64n256k16 946.5 [fig cuda.wgmma-rate.bf16.n256.smem.tflops]. So a kernel far below these with
// a shape of 64 or more is held back by what feeds its products (conv2d/wgmma.cu's version 12).
//
// Rows, for TF32 (k 8) and bf16 (k 16): N = 32, 64, 128 and 256, A from shared memory and (TF32)
// from registers; and TF32 with A read as conv2d versions 11 and 12 read their patch, a window of
// rows (pixels) starting anywhere on a 16-byte boundary, its two halves of k in two planes: as fast
// as packed A (docs/runs/2026-11-28-h200-review-descriptor, TFLOP/s: m64n64k8
// 476.3 [fig cuda.wgmma-rate.tf32.n64.window.tflops] against packed A's
// 476.0 [fig cuda.wgmma-rate.tf32.n64.smem-review.tflops] in the same call, m64n128k8
// 481.4 [fig cuda.wgmma-rate.tf32.n128.window.tflops], m64n32k8 322.6 [fig cuda.wgmma-rate.tf32.n32.window.tflops]).
// TFLOP/s counts 2 flops a multiply-add. The operands are all ones, so every accumulator ends at
// exactly k x 4 x rounds, which each row checks before it is timed.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/bench/kernel_bench.h"
#include "kiln/kernels/cuda/check.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/matmul/wgmma.cuh"

namespace kiln::bench {
namespace {

constexpr int kWarpgroups = 2;    // consumer warpgroups a block, as in matmul 13 and conv2d 12
constexpr int kSteps = 4;         // k-steps a commit group, each with its own operands
constexpr int kABytes = 64 * 32;  // A, 64 rows x 32 bytes of k (8 TF32 or 16 bf16 values)

// Each warpgroup multiplies its A (64 x k) by B (N x k), both K-major in the packed layout of
// matmul::packed_descriptor, rounds x kSteps times into N / 2 accumulators a thread, then writes
// the first and last accumulator's sum (2 x the expected count) for the host to check.
// How A is read: from shared memory in matmul::packed_descriptor's layout, from registers, or
// (TF32) as conv2d 12's window: rows from pixel 1, 4, 7 or 10 of a plane (not on a 128-byte
// boundary), the next 4 values of k a plane further on (conv2d/wgmma.cu's win_descriptor).
enum class ARead { packed, registers, window };

template <int N, ARead kA, bool kBf16>
__global__ void __launch_bounds__(128 * kWarpgroups, 1) wgmma_rate_kernel(int rounds, float* out) {
#ifdef KILN_WGMMA
  namespace mm = kiln::cuda::matmul;
  extern __shared__ __align__(128) uint8_t smem_rate[];
  constexpr int kBBytes = N * 32, kOperands = kSteps * (kABytes + kBBytes);
  const uint32_t one = kBf16 ? 0x3F803F80u : 0x3F800000u;  // two bf16 ones, or one f32 (= TF32) one
  for (int i = static_cast<int>(threadIdx.x); i < kOperands / 4; i += static_cast<int>(blockDim.x))
    reinterpret_cast<uint32_t*>(smem_rate)[i] = one;
  mm::fence_async_shared();
  __syncthreads();
  const uint32_t base = mm::smem_u32(smem_rate);
  uint64_t a[kSteps], b[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    a[s] = mm::packed_descriptor(base + s * kABytes);
    if constexpr (kA == ARead::window) {
      constexpr uint32_t kPlaneBytes = 128 * 16;  // a plane: 128 pixels of 4 TF32 values
      a[s] = mm::interleaved_descriptor(base + (3 * s + 1) * 16, kPlaneBytes, 128);
    }
    b[s] = mm::packed_descriptor(base + kSteps * kABytes + s * kBBytes);
  }
  const uint32_t a_regs[4] = {one, one, one, one};
  float acc[N / 2] = {};
  mm::wgmma_fence();
  for (int r = 0; r < rounds; ++r) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      if constexpr (kBf16) mm::wgmma_bf16<0, 0>(acc, a[s], b[s]);
      else if constexpr (kA == ARead::registers) mm::wgmma_tf32(acc, a_regs, b[s]);
      else mm::wgmma_tf32(acc, a[s], b[s]);
    }
    mm::wgmma_commit();
    mm::wgmma_wait<1>();
  }
  mm::wgmma_wait<0>();
  mm::fence_accumulators(acc);
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc[0] + acc[N / 2 - 1];
#else
  (void)rounds, (void)out;
  __trap();
#endif
}

template <int N, ARead kA, bool kBf16>
void bench_shape(Bench& bench, int sms) {
  const int k = kBf16 ? 16 : 8, rounds = bench.quick() ? 256 : 4096;
  const int threads = 128 * kWarpgroups, smem = kSteps * (kABytes + N * 32);
  auto* out = static_cast<float*>(bench.device_bytes(sizeof(float) * static_cast<size_t>(sms * threads)));
  auto* kernel = wgmma_rate_kernel<N, kA, kBf16>;
  auto run = [&] {
    kernel<<<static_cast<unsigned>(sms), static_cast<unsigned>(threads), static_cast<size_t>(smem), bench.stream()>>>(
        rounds, out);
    KILN_CUDA_LAUNCH_CHECK("wgmma rate");
  };
  const std::string version = std::string(kBf16 ? "bf16 " : "TF32 ") + "m64n" + std::to_string(N) + "k" +
                              std::to_string(k) + (kA == ARead::registers ? ", A from registers"
                               : kA == ARead::window  ? ", A a window of shared memory"
                                                      : ", A from shared memory");
  const std::string shape = std::to_string(sms) + " SMs x " + std::to_string(kWarpgroups) + " warpgroups";
  run();
  const std::vector<float> got = to_host(out, static_cast<int64_t>(sms) * threads, bench.stream());
  const float want = 2.0f * static_cast<float>(k) * kSteps * static_cast<float>(rounds);
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want) {
      bench.record({"wgmma", version, shape, 0, 0, "TFLOP/s", false,
                    "wrong: thread " + std::to_string(i) + " has " + std::to_string(got[i]) + " (want " +
                        std::to_string(want) + ")"});
      return;
    }
  const double ms = bench.time_ms(run);
  const double flops = 2.0 * 64 * N * k * kSteps * static_cast<double>(rounds) * kWarpgroups * sms;
  bench.record({"wgmma", version, shape, ms, flops / (ms * 1e9), "TFLOP/s", false, "checked: every accumulator"});
}

}  // namespace

void bench_wgmma(Bench& bench) {
  if (!kiln::cuda::wgmma_runs()) {
    std::printf("wgmma      skipped: this GPU does not run sm_90a code (or the build has no Hopper target)\n");
    return;
  }
  int sms = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  using enum ARead;
  bench_shape<32, packed, false>(bench, sms);
  bench_shape<64, packed, false>(bench, sms);
  bench_shape<128, packed, false>(bench, sms);
  bench_shape<256, packed, false>(bench, sms);
  bench_shape<32, registers, false>(bench, sms);
  bench_shape<64, registers, false>(bench, sms);
  bench_shape<128, registers, false>(bench, sms);
  bench_shape<256, registers, false>(bench, sms);
  bench_shape<32, window, false>(bench, sms);
  bench_shape<64, window, false>(bench, sms);
  bench_shape<128, window, false>(bench, sms);
  bench_shape<64, packed, true>(bench, sms);
  bench_shape<128, packed, true>(bench, sms);
  bench_shape<256, packed, true>(bench, sms);
}

}  // namespace kiln::bench
