// Programmatic dependent launch (Hopper and later): a kernel launched with launch_dependent may be
// launched while the kernel before it on the stream is still finishing, and waits at its first
// instruction until that one's writes are visible. What it saves is the boundary between two
// kernels, a good share of a small kernel's cost in a captured training step: the f32 CNN's epoch
// at batch 64 0.2063 [fig kernels.dependent.b64.old.epoch] -> 0.2037 s [fig kernels.dependent.b64.new.epoch],
// the MLP's 0.0438 [fig kernels.dependent.mlp.old.epoch] -> 0.0420 s [fig kernels.dependent.mlp.new.epoch]
// (one H200, docs/runs/2026-11-29-h200-dependent-launches). In a captured CUDA graph the launches
// become programmatic edges, under the same rule.
//
// The rule: a kernel launched by launch_dependent calls dependent_kernel_start() first, before it
// reads or writes global memory (griddepcontrol.wait, PTX ISA 7.8). A kernel that calls it and is
// launched the ordinary way loses nothing: the instructions are then no-ops. Small kernels also
// let the next one launch at their start (griddepcontrol.launch_dependents); in every kernel that
// helped the MLP and cost the CNN a tenth, in the small ones alone it took the CNN's batch-64 epoch
// from 0.2043 [fig kernels.small-early.b64.old.epoch] to 0.2012 s [fig kernels.small-early.b64.new.epoch]
// (NOTES.md; docs/runs/2026-11-29-h200-dependent-small-early).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kiln/kernels/cuda/check.h"

namespace kiln::cuda {

// Waits until the kernel before this one on the stream has finished and its writes are visible.
// With kLaunchNextEarly, first lets the kernel after this one be launched (its blocks then wait on
// the SMs beside this one's): for the small kernels; the ring kernels and matmul 13 hold their
// SMs whole, and a kernel launched early behind them was placed badly (NOTES.md).
template <bool kLaunchNextEarly = false>
__device__ __forceinline__ void dependent_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kLaunchNextEarly) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Whether the current device runs programmatic dependent launches (compute capability 9.0 or
// later); elsewhere launch_dependent is an ordinary launch. (runtime.cu)
bool dependent_launches();

// kernel<<<grid, block, smem, stream>>>(args...), allowed to begin before the kernel before it on
// the stream has finished (the rule above). A launch error is left, as a <<<>>> launch's is, for the
// KILN_CUDA_LAUNCH_CHECK(op) after it (check.h), which names the op: the runtime keeps it as the
// thread's last error.
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = dependent_launches() ? 1 : 0;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace kiln::cuda
