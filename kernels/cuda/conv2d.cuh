// The versions of the conv2d kernels (kernels/cuda/conv2d.cu), callable on raw device pointers so
// that kernel-bench and the tests can run each one; CudaBackend::conv2d* picks among them.
// All take contiguous NCHW tensors of float or double and queue their work on `stream`:
//   x [N, C, H, W], w [O, C/groups, KH, KW], y [N, O, OH, OW]; the forward versions store each
//   element of y through an epilogue e (DeviceEpilogue, cuda_backend.h: bias [O] or none, then
//   the activation).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kiln/core/bf16.h"
#include "kiln/kernels/cuda/cuda_backend.h"

namespace kiln::cuda::conv2d {

struct Geometry {
  int64_t n = 0, c = 0, h = 0, w = 0;  // x
  int64_t o = 0, kh = 0, kw = 0;       // w [o, c / groups, kh, kw]
  int64_t oh = 0, ow = 0;              // y
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

// Forward, version 1: direct convolution, one thread per output element.
template <class T>
void forward_direct(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, cudaStream_t stream);
// Forward, version 2: implicit GEMM, the epilogue applied as the tile is stored.
template <class T>
void forward_implicit_gemm(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g,
                           cudaStream_t stream);
// Forward, version 3 (production): version 2 with the next K slice prefetched into registers.
// Also for bf16 (f32 arithmetic, each result rounded once).
template <class T>
void forward_implicit_gemm_prefetch(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g,
                                    cudaStream_t stream);

// Forward, version 4: version 3 with 8 x 8 thread tiles (128 threads on the 128 x 64 block tile)
// where O/G > 32: half the shared reads per FMA; else the same as version 3.
template <class T>
void forward_implicit_gemm_wide(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g,
                                cudaStream_t stream);

// grad_x (overwritten) from grad_y [N, O, OH, OW] and w.
// Version 1: direct gather, one thread per grad_x element.
template <class T>
void backward_input_direct(const T* grad_y, const T* w, T* grad_x, const Geometry& g, cudaStream_t stream);
// Version 2: implicit GEMM of grad_y with the weights (the transposed convolution, gather form).
template <class T>
void backward_input_implicit_gemm(const T* grad_y, const T* w, T* grad_x, const Geometry& g,
                                  cudaStream_t stream);
// Version 3: the forward convolution (version 3) of grad_y with the flipped, channel-swapped
// weights, which it first writes into `workspace` (backward_input_as_forward_workspace(g)
// elements of T, enough for versions 3 to 7; may be null when that is 0). Only for stride 1 and pad <= dilation*(kernel-1)
// in both directions: backward_input_as_forward_applies(g); it throws otherwise.
bool backward_input_as_forward_applies(const Geometry& g);
int64_t backward_input_as_forward_workspace(const Geometry& g);
template <class T>
void backward_input_as_forward(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                               cudaStream_t stream);
// Version 4: version 3 on forward version 4 (same applicability and workspace).
template <class T>
void backward_input_as_forward_wide(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                                    cudaStream_t stream);

// grad_w [O, C/groups, KH, KW] (overwritten) from x and grad_y: implicit GEMM with split-K into
// `workspace` (backward_weight_workspace(g) elements of T, may be null when that is 0), then a
// second kernel sums the splits in a fixed order (deterministic). The split count fills one wave
// of the GPU at the launched kernel's occupancy. The workspace size covers every version and dtype.
int64_t backward_weight_workspace(const Geometry& g);
// Version 1: 64 x 64 block tiles of 4 x 4 thread tiles (256 threads); 32 x 32 for small layers.
template <class T>
void backward_weight_implicit_gemm(const T* x, const T* grad_y, T* grad_w, T* workspace,
                                   const Geometry& g, cudaStream_t stream);
// Version 2: 64 x 128 block tiles of 8 x 8 thread tiles (128 threads); 32 x 32 for small layers.
template <class T>
void backward_weight_implicit_gemm_wide(const T* x, const T* grad_y, T* grad_w, T* workspace,
                                        const Geometry& g, cudaStream_t stream);

// Version 5: where K = C/G*KH*KW <= 32 (a first layer), one output's K sums in a warp's registers,
// a block holding the input rows of a band of output rows (any stride, padding and dilation) in
// shared memory; f32, f64 and bf16 (sums in compute_t<T>), split over blocks and summed in order.
// Where grad_b is not null, the bias's gradient [O] (grad_y summed over images and pixels) comes
// from the same pass. Where relu_y is not null (grad_y's shape), grad_y is first taken back
// through the relu whose output it is, as it is read: 0 where relu_y <= 0. Workspace:
// backward_weight_rows_workspace<T>(g) bytes, 0 where it does not apply.
template <class T>
int64_t backward_weight_rows_workspace(const Geometry& g);
template <class T>
void backward_weight_rows(const T* x, const T* grad_y, T* grad_w, void* workspace, const Geometry& g,
                          cudaStream_t stream, T* grad_b = nullptr, const T* relu_y = nullptr);

// The tensor-core versions (f32; f64 runs the version named with each). TensorMath::tf32x3 splits
// every input into two TF32 values and forms each product from three mma: f32 accuracy.
// TensorMath::tf32 truncates the inputs to TF32 (allow_tf32).
enum class TensorMath { tf32x3, tf32 };
// Forward, version 5: implicit GEMM on the tensor cores where O/G > 16, else version 3.
template <class T>
void forward_tensor_cores(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, TensorMath math,
                          cudaStream_t stream);
// Backward input, version 5: version 3's forward form on forward version 5 (same applicability
// and workspace).
template <class T>
void backward_input_tensor_cores(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                                 TensorMath math, cudaStream_t stream);
// Backward weight, version 3: version 1's split-K on the tensor cores with 64 x 64 tiles; version
// 2 for small layers (both sides <= 32) and f64.
template <class T>
void backward_weight_tensor_cores(const T* x, const T* grad_y, T* grad_w, T* workspace, const Geometry& g,
                                  TensorMath math, cudaStream_t stream);

// Forward, version 6: direct, one thread per output pixel computing all O/G outputs, for O/G <= 16
// (the group's weights in shared memory); else version 3.
template <class T>
void forward_few_outputs(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, cudaStream_t stream);
// Backward input, version 6: version 3's forward form on forward version 6 (same applicability and
// workspace): for few input channels per group, such as a first layer's C = 1.
template <class T>
void backward_input_few_outputs(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                                cudaStream_t stream);

// Forward, version 8: version 6 at stride 1 with the input rows of a band of output rows in shared
// memory (O/G <= 32, the band's rows and the weights within 48 KB); else version 6.
// forward_few_outputs_rows_applies runs version 8 where it applies and says whether it did (f32,
// f64 and bf16, whose sums are f32, each output rounded once).
template <class T>
void forward_few_outputs_rows(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g,
                              cudaStream_t stream);
template <class T>
bool forward_few_outputs_rows_applies(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g,
                                      cudaStream_t stream);
// Backward input, version 8: version 3's forward form on forward version 8 (else 6, else 3; same
// applicability and workspace as version 3).
template <class T>
void backward_input_few_outputs_rows(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g,
                                     cudaStream_t stream);

// Forward, version 13 (conv2d/columns.cu): few outputs at stride 1 with nothing but the weights in
// shared memory: a warp across a row of output pixels, each lane down a column of them, a tap's
// neighbours passed between lanes by shuffles. Where forward_columns_applies<T> (stride and
// dilation 1, a 3 x 3 or 5 x 5 kernel, O/G <= 4, the group's weights within 64 KB); f32, f64 and
// bf16 (sums in f32, each output rounded once). Backward input 13 is its forward form, reading the
// layer's weights flipped as it goes (no workspace), where backward_input_columns_applies<T>.
template <class T>
bool forward_columns_applies(const Geometry& g);
template <class T>
void forward_columns(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, const Geometry& g, cudaStream_t stream);
template <class T>
bool backward_input_columns_applies(const Geometry& g);
template <class T>
void backward_input_columns(const T* grad_y, const T* w, T* grad_x, const Geometry& g, cudaStream_t stream);

// Forward, version 7: stride 1 on the tensor cores with the input patch in shared memory, the
// weights first packed into `workspace` (forward_patch_workspace(g) elements of f32; 0 where
// version 7 cannot run: stride > 1, or a block's patch and weights over 110 KB of shared memory).
// Where it does not run (also for f64), version 5 does.
int64_t forward_patch_workspace(const Geometry& g);
template <class T>
void forward_patch(const T* x, const T* w, const DeviceEpilogue<T>& e, T* y, T* workspace, const Geometry& g,
                   TensorMath math, cudaStream_t stream);
// Backward input, version 7: version 3's forward form on the tensor cores with the input patch
// in shared memory (f32, stride-1 forward view, up to 110 KB of shared memory per block; else
// version 5). Same applicability and workspace as version 3.
template <class T>
void backward_input_patch(const T* grad_y, const T* w, T* grad_x, T* workspace, const Geometry& g, TensorMath math,
                          cudaStream_t stream);

// Forward, version 10: version 7 on Hopper's warpgroup tensor cores (wgmma; conv2d/wgmma.cu): the
// same patch, the weights packed for wgmma to read from shared memory, 128 pixels by up to 64
// outputs a block; f32 at TF32 or 3xTF32. Runs where forward_wgmma_applies: an sm_90 GPU with
// kiln built for sm_90a, stride 1, two blocks' shared memory an SM; workspace
// forward_wgmma_workspace(g) floats.
bool forward_wgmma_applies(const Geometry& g, TensorMath math);
int64_t forward_wgmma_workspace(const Geometry& g);
void forward_wgmma(const float* x, const float* w, const DeviceEpilogue<float>& e, float* y, float* workspace,
                   const Geometry& g, TensorMath math, cudaStream_t stream);
// Backward input, version 10: version 3's forward form on forward version 10.
bool backward_input_wgmma_applies(const Geometry& g, TensorMath math);
int64_t backward_input_wgmma_workspace(const Geometry& g);
void backward_input_wgmma(const float* grad_y, const float* w, float* grad_x, float* workspace, const Geometry& g,
                          TensorMath math, cudaStream_t stream);
// Forward, version 11: version 10 with A read by the tensor cores from shared memory too (wgmma;
// conv2d/wgmma.cu): the pixels numbered over the patch's whole width, so that each tap's im2col
// rows are a window of the patch, (KW - 1) dw columns a row computed and dropped. Where
// forward_window_applies (as version 10's); workspace forward_window_workspace(g) floats. `sums`:
// how 3xTF32 groups its products before adding them in f32, a pair of taps (versions 7 and 10) or
// a whole stage of 8 channels.
enum class WindowSums { pairs, stages };
bool forward_window_applies(const Geometry& g, TensorMath math);
int64_t forward_window_workspace(const Geometry& g);
void forward_window(const float* x, const float* w, const DeviceEpilogue<float>& e, float* y, float* workspace,
                    const Geometry& g, TensorMath math, cudaStream_t stream, WindowSums sums = WindowSums::pairs);
// Backward input, version 11: version 3's forward form on forward version 11.
bool backward_input_window_applies(const Geometry& g, TensorMath math);
int64_t backward_input_window_workspace(const Geometry& g);
void backward_input_window(const float* grad_y, const float* w, float* grad_x, float* workspace, const Geometry& g,
                           TensorMath math, cudaStream_t stream, WindowSums sums = WindowSums::pairs);
// Backward weight, version 6: on Hopper's warpgroup tensor cores (conv2d/wgmma_weight.cu),
// grad_w^T = im2col^T . grad_y^T with the im2col fragments loaded from the input rows in shared
// memory into registers and grad_y read by the tensor cores, warp-specialised (a producer
// warpgroup filling a ring of 64-pixel stages, by TMA where the rows allow, else by cp.async;
// two consumers), split over the SMs along the pixels and the splits summed in order. Any
// stride, padding, dilation and groups; where backward_weight_ring_applies (an sm_90 GPU, two
// stages within shared memory); workspace backward_weight_ring_workspace(g, math, bias) floats (0:
// none needed). With grad_b, the bias's gradient too, as one more row of the product, where
// backward_weight_ring_takes_bias (3xTF32, and C/G*KH*KW not a multiple of 64).
bool backward_weight_ring_applies(const Geometry& g, TensorMath math);
bool backward_weight_ring_takes_bias(const Geometry& g, TensorMath math);
int64_t backward_weight_ring_workspace(const Geometry& g, TensorMath math, bool bias = false);
// Whether version 6 copies its stages by TMA for these operands (16-byte aligned, and rows whole
// 16-byte pieces: conv2d/wgmma_weight.cu's plan), else by cp.async.
bool backward_weight_ring_uses_tma(const float* x, const float* grad_y, const Geometry& g, TensorMath math);
void backward_weight_ring(const float* x, const float* grad_y, float* grad_w, float* workspace, const Geometry& g,
                          TensorMath math, cudaStream_t stream, float* grad_b = nullptr);
// Forward, version 12: version 11 warp-specialised and persistent (conv2d/wgmma.cu): one block an
// SM walks the tiles, a producer warpgroup copying the patch by cp.async into a ring of stages
// that two consumer warpgroups multiply (3xTF32: their window fragments split in registers),
// the weights brought by bulk copies (once a block where they fit). Where forward_ring_applies (an sm_90 GPU, stride 1, the patch of
// 128 or 256 pixels within the producer's reach); workspace forward_ring_workspace(g) floats.
bool forward_ring_applies(const Geometry& g, TensorMath math);
int64_t forward_ring_workspace(const Geometry& g);
void forward_ring(const float* x, const float* w, const DeviceEpilogue<float>& e, float* y, float* workspace,
                  const Geometry& g, TensorMath math, cudaStream_t stream);
// Backward input, version 12: version 3's forward form on forward version 12.
bool backward_input_ring_applies(const Geometry& g, TensorMath math);
int64_t backward_input_ring_workspace(const Geometry& g);
void backward_input_ring(const float* grad_y, const float* w, float* grad_x, float* workspace, const Geometry& g,
                         TensorMath math, cudaStream_t stream);
// The forward convolution grad_y -> grad_x that the backward input versions 3-12 run (version 3).
Geometry as_forward(const Geometry& g);

// bf16 (mixed precision) on the tensor cores: bf16 operands and result, each product exact in f32,
// the sums in f32, each result rounded once. Versions 7 and 3 first write their operands as pairs
// along the reduction (conv2d.cu's bf16 section says why) into `workspace` (the *_workspace(g)
// bytes), then run the f32 version named on the pairs with mma m16n8k16; versions 9 and 4 read
// them as they are. Forward version 3 also takes
// bf16 (a first layer's short reduction: f32 arithmetic on the CUDA cores, each element widened as
// it is loaded). Where none applies, CudaBackend widens the operands to f32 and runs the f32
// versions at TF32 (exact for bf16 values).
// Forward, version 7 in bf16 (stride 1, the patch of the paired channels within shared memory).
bool forward_patch_bf16_applies(const Geometry& g);
int64_t forward_patch_bf16_workspace(const Geometry& g);
void forward_patch_bf16(const bf16* x, const bf16* w, const DeviceEpilogue<bf16>& e, bf16* y, void* workspace,
                        const Geometry& g, cudaStream_t stream);
// Backward input, version 7 in bf16 (version 3's forward form on the forward above).
bool backward_input_patch_bf16_applies(const Geometry& g);
int64_t backward_input_patch_bf16_workspace(const Geometry& g);
void backward_input_patch_bf16(const bf16* grad_y, const bf16* w, bf16* grad_x, void* workspace, const Geometry& g,
                               cudaStream_t stream);
// Forward, version 9 in bf16 (stride 1): x read as it is, no pairing pass, its patch in shared
// memory as cells of 16 channels (conv2d/cells.cuh); the workspace holds the packed weights.
bool forward_cells_bf16_applies(const Geometry& g);
int64_t forward_cells_bf16_workspace(const Geometry& g);
void forward_cells_bf16(const bf16* x, const bf16* w, const DeviceEpilogue<bf16>& e, bf16* y, void* workspace,
                        const Geometry& g, cudaStream_t stream);
// Forward, version 12 in bf16 (stride 1, an sm_90 GPU): version 12 with 16 channels a stage, its
// producer loading the patch through registers (cp.async moves 4 bytes at least), m64nNk16
// products; the workspace holds the packed weights.
bool forward_ring_bf16_applies(const Geometry& g);
int64_t forward_ring_bf16_workspace(const Geometry& g);
void forward_ring_bf16(const bf16* x, const bf16* w, const DeviceEpilogue<bf16>& e, bf16* y, void* workspace,
                       const Geometry& g, cudaStream_t stream);
// Backward input, version 12 in bf16 (version 3's forward form on the forward above).
bool backward_input_ring_bf16_applies(const Geometry& g);
int64_t backward_input_ring_bf16_workspace(const Geometry& g);
void backward_input_ring_bf16(const bf16* grad_y, const bf16* w, bf16* grad_x, void* workspace, const Geometry& g,
                              cudaStream_t stream);
// Backward input, version 9 in bf16 (version 3's forward form on the forward above); _relu where x
// is the output of a relu (relu_x: x itself; null: none), taken back through it: grad_x is 0
// wherever relu_x <= 0, zeroed as the tile is stored.
bool backward_input_cells_bf16_applies(const Geometry& g);
int64_t backward_input_cells_bf16_workspace(const Geometry& g);
void backward_input_cells_bf16(const bf16* grad_y, const bf16* w, bf16* grad_x, void* workspace, const Geometry& g,
                               cudaStream_t stream);
void backward_input_relu_cells_bf16(const bf16* grad_y, const bf16* w, const bf16* relu_x, bf16* grad_x,
                                    void* workspace, const Geometry& g, cudaStream_t stream);
// The bf16 versions above with a forward and a backward input (in its forward form) of the same
// signatures, best first: the one table through which kernel-bench times them and the tests check
// them (the production path, conv2d.cu, chooses among them by its own rules).
struct Bf16PatchVersion {
  const char* name;  // kernel-bench's, after "fwd " or "bwd-input "
  decltype(&forward_cells_bf16_applies) forward_applies, input_applies;
  decltype(&forward_cells_bf16_workspace) forward_workspace, input_workspace;
  decltype(&forward_cells_bf16) forward;
  decltype(&backward_input_cells_bf16) input;
};
inline constexpr Bf16PatchVersion kBf16PatchVersions[] = {
    {"12 wgmma ring BF16", forward_ring_bf16_applies, backward_input_ring_bf16_applies, forward_ring_bf16_workspace,
     backward_input_ring_bf16_workspace, forward_ring_bf16, backward_input_ring_bf16},
    {"9 cells BF16", forward_cells_bf16_applies, backward_input_cells_bf16_applies, forward_cells_bf16_workspace,
     backward_input_cells_bf16_workspace, forward_cells_bf16, backward_input_cells_bf16},
    {"7 channel pairs BF16", forward_patch_bf16_applies, backward_input_patch_bf16_applies,
     forward_patch_bf16_workspace, backward_input_patch_bf16_workspace, forward_patch_bf16, backward_input_patch_bf16}};
// Backward weight, version 6 in bf16 (an sm_90 GPU; by TMA only: x and grad_y on 16 bytes, W and
// OH*OW multiples of 8 or the planes TMA can take as lines): the workspace holds the splits' f32
// partials (backward_weight_ring_bf16_workspace bytes), summed in order into grad_w.
bool backward_weight_ring_bf16_applies(const bf16* x, const bf16* grad_y, const Geometry& g);
int64_t backward_weight_ring_bf16_workspace(const Geometry& g);
void backward_weight_ring_bf16(const bf16* x, const bf16* grad_y, bf16* grad_w, void* workspace, const Geometry& g,
                               cudaStream_t stream);
// Backward weight in bf16, any geometry, the workspace enough for each version (4 below too):
// version 3 on image pairs, and version 1's CUDA-core GEMM on the bf16 operands as they are (f32
// arithmetic; 32 x 32 tiles for small layers, both sides <= 32).
int64_t backward_weight_bf16_workspace(const Geometry& g);
// Backward weight, version 4 in bf16 (stride 1, 3 x 3, C/G >= 8): x and grad_y read as they are,
// x's rows in shared memory as cells (conv2d/cells.cuh), f32 partials summed in order.
bool backward_weight_cells_bf16_applies(const Geometry& g);
bool backward_weight_cells_bf16_pays(const Geometry& g);  // where production takes it (conv2d.cu says why)
void backward_weight_cells_bf16(const bf16* x, const bf16* grad_y, bf16* grad_w, void* workspace, const Geometry& g,
                                cudaStream_t stream);
void backward_weight_tensor_cores_bf16(const bf16* x, const bf16* grad_y, bf16* grad_w, void* workspace,
                                       const Geometry& g, cudaStream_t stream);
void backward_weight_implicit_gemm_bf16(const bf16* x, const bf16* grad_y, bf16* grad_w, void* workspace,
                                        const Geometry& g, cudaStream_t stream);

// What the production backward input picks where version 3 does not apply (else version 2).
bool backward_input_uses_direct(const Geometry& g);

}  // namespace kiln::cuda::conv2d
