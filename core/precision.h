// How much precision matmul and conv2d may trade for speed.
//
// TF32: with allow_tf32 on, CUDA's f32 matmul may feed its inputs to the tensor cores as TF32
// (10-bit mantissa; kiln truncates, cuBLAS rounds) and accumulate in f32, several times faster on
// Hopper. Products then carry a relative error of about 7e-4 of max|C| instead of ~1e-6
// (measured by kernel-bench against cuBLAS FP32, whose own TF32 mode rounds and gives 2.8e-4:
// kernels/README.md). Off by default, so that every backend agrees with the CPU up to f32
// rounding; mnist-train turns it on with --tf32. With it off, large f32 products still run on the
// tensor cores, as three TF32 products per f32 product (matmul version 12), which keeps f32's
// accuracy. conv2d follows the same switch on CUDA (tensor-core versions: TF32 with it on, 3xTF32
// without; kernels/cuda/conv2d.cu). The CPU backend ignores it.
//
// f16 products: with allow_f16_products on, the Vulkan backend's f32 matmul may round its inputs
// to f16 and multiply them on the GPU's cooperative-matrix units (VK_NV_cooperative_matrix, where
// the device offers 16 x 16 x 16 f16 products with f32 accumulation; kernels/vulkan/shaders/
// matmul_coop.comp), accumulating in f32. f16 has TF32's 10-bit mantissa but not its range:
// inputs above 65504 in magnitude become infinite, and below 6.1e-5 they lose bits. Off by
// default; the other backends ignore it.
#pragma once

namespace kiln {

void set_allow_tf32(bool allow);
bool allow_tf32();

void set_allow_f16_products(bool allow);
bool allow_f16_products();

}  // namespace kiln
