// How much precision matmul and conv2d may trade for speed.
//
// TF32: with allow_tf32 on, CUDA's f32 matmul may round its inputs to TF32 (the 10-bit mantissa
// of the tensor cores) and accumulate in f32, several times faster on Hopper. Products then carry
// a relative error of about 3e-4 instead of 1e-7 (measured by kernel-bench against cuBLAS FP32:
// kernels/README.md). Off by default, so that every backend agrees with the CPU up to f32
// rounding; mnist-train turns it on with --tf32. conv2d does not use it yet; the CPU backend
// ignores it.
#pragma once

namespace kiln {

void set_allow_tf32(bool allow);
bool allow_tf32();

}  // namespace kiln
