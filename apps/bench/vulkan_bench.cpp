// vulkan-bench: the Vulkan kernels that carry a MNIST CNN training step, each timed on the host
// over 20 calls between two synchronizations (the runtime has no timestamp queries yet, so a
// figure includes recording and submission; at these sizes the GPU's time dominates).
//
//   vulkan-bench            (KILN_VULKAN_VALIDATION unset: the layer would slow every call)
//
// The figures quoted in kernels/vulkan/shaders/conv2d.comp and matmul.comp come from it.
#include <chrono>
#include <cstdio>
#include <functional>

#include "core/kiln.h"
#include "kernels/vulkan/vulkan_backend.h"

using namespace kiln;

int main() {
  const Device v = Device::vulkan(0);
  Backend& b = backend_for(v);
  std::printf("device: %s\n", vulkan::backend(0).description().c_str());
  auto time = [&](const char* name, const std::function<Tensor()>& fn) {
    Tensor t = fn();  // pipelines built, memory cached
    b.synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) t = fn();
    b.synchronize();
    const auto stop = std::chrono::steady_clock::now();
    std::printf("%-40s %8.3f ms\n", name, std::chrono::duration<double, std::milli>(stop - start).count() / 20);
  };
  Tensor x1 = uniform({64, 1, 28, 28}, -1, 1).to(v), w1 = uniform({32, 1, 3, 3}, -1, 1).to(v);
  Tensor x2 = uniform({64, 32, 26, 26}, -1, 1).to(v), w2 = uniform({64, 32, 3, 3}, -1, 1).to(v);
  Tensor gy1 = uniform({64, 32, 26, 26}, -1, 1).to(v), gy2 = uniform({64, 64, 24, 24}, -1, 1).to(v);
  Tensor b2 = uniform({64}, -1, 1).to(v);
  time("conv1 forward [64,1,28,28] * [32,1,3,3]", [&] { return conv2d(x1, w1); });
  time("conv2 forward [64,32,26,26] * [64,32,3,3]", [&] { return conv2d(x2, w2, b2, {}, Activation::relu); });
  time("conv2 input gradient", [&] { return conv2d_backward_input(gy2, w2, x2.shape(), {}); });
  time("conv2 weight gradient", [&] { return conv2d_backward_weight(x2, gy2, w2.shape(), {}); });
  time("conv1 weight gradient", [&] { return conv2d_backward_weight(x1, gy1, w1.shape(), {}); });
  time("max_pool2d 2x2 [64,64,24,24]", [&] { return max_pool2d(gy2, {.kernel = {2, 2}}); });
  PoolResult pooled = max_pool2d_with_indices(gy2, {.kernel = {2, 2}});
  time("max_pool2d backward", [&] {
    return max_pool2d_backward(pooled.values, pooled.indices, gy2.shape(), {.kernel = {2, 2}});
  });
  Tensor f = uniform({64, 9216}, -1, 1).to(v), wf = uniform({128, 9216}, -1, 1).to(v), g = uniform({64, 128}, -1, 1).to(v);
  time("fc1 forward 64x128x9216 (B^T)", [&] { return matmul(f, wf.t()); });
  time("fc1 weight gradient 128x9216x64", [&] { return matmul(g.t(), f); });
  time("fc1 input gradient 64x9216x128", [&] { return matmul(g, wf); });
  time("relu [64,64,24,24]", [&] { return relu(gy2); });
  time("dropout [64,9216]", [&] { return dropout(f, 0.5, true); });
  time("sum over N, H, W of [64,64,24,24]", [&] { return sum(gy2, {0, 2, 3}); });
}
