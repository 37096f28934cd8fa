// vulkan-bench: the Vulkan kernels that carry a MNIST CNN training step, each timed on the device
// with timestamp queries (VulkanBackend::timestamp) over 20 calls, beside the host's time for the
// same 20 calls (recording and submission included); then whole training steps of the CNN
// (mnist-train's Net and Adadelta on random images), the device's time beside the host's.
//
//   vulkan-bench [--json FILE]   (KILN_VULKAN_VALIDATION unset: the layer would slow every call)
//
// --json writes {program, kiln, revision, date, device, results: [{section, name, ms (the device's
// time per call or step), host_ms (null where not taken), value, unit}]}: sections "kernel" (unit
// "ms"), "bandwidth" ("GB/s"), "matmul" ("TFLOP/s") and "step" ("ms"; "first" is the step that built
// the pipelines: its ms null, the host's time alone). The figures quoted in kernels/vulkan/shaders/*.comp
// and in kernels/README.md's Vulkan table come from it, through the recorded runs of docs/runs/.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "apps/mnist/cli.h"
#include "apps/mnist/models.h"
#include "kiln/kiln.h"
#include "kiln/kernels/vulkan/vulkan_backend.h"
#include "kiln/optim/optim.h"

using namespace kiln;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

// One figure of --json's results; ms or host_ms < 0: not taken (null).
void add(nlohmann::ordered_json& results, const char* section, const std::string& name, double ms, double host_ms,
         double value, const char* unit) {
  auto taken = [](double v) { return v < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(v); };
  results.push_back({{"section", section}, {"name", name}, {"ms", taken(ms)}, {"host_ms", taken(host_ms)},
                     {"value", value}, {"unit", unit}});
}

// The whole bench: the kernels, then the steps; with json_path, its figures written there too.
int run(const std::string& json_path) {
  const Device v = Device::vulkan(0);
  Backend& b = backend_for(v);
  vulkan::VulkanBackend& vk = vulkan::backend(0);
  std::printf("device: %s\n", vk.description().c_str());
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  // {device ms, host ms} per call of fn over 20 calls, after one (pipelines built, memory cached)
  auto per_call = [&](const std::function<Tensor()>& fn) {
    Tensor t = fn();
    b.synchronize();
    const auto start = Clock::now();
    const uint32_t from = vk.timestamp();
    for (int i = 0; i < 20; ++i) t = fn();
    const uint32_t to = vk.timestamp();
    b.synchronize();
    const double host = ms_since(start) / 20;
    return std::pair<double, double>{vk.elapsed_ms(from, to) / 20, host};
  };
  std::printf("%-44s %10s %10s\n", "kernel (20 calls)", "device ms", "host ms");
  auto time = [&](const char* name, const std::function<Tensor()>& fn) {
    const auto [device, host] = per_call(fn);
    std::printf("%-44s %10.4f %10.4f\n", name, device, host);
    add(results, "kernel", name, device, host, device, "ms");
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
  time("copy [64,64,24,24] (2 x 9.4 MB)", [&] { return gy2.clone(); });

  // memory-bound kernels on 64 MB against a copy of it (read 64 MB, write 64 MB): GB/s moved
  std::printf("%-44s %10s %10s\n", "memory-bound, [4096, 4096] f32 (20 calls)", "device ms", "GB/s");
  Tensor big = uniform({4096, 4096}, -1, 1).to(v);
  auto bandwidth = [&](const char* name, double bytes, const std::function<Tensor()>& fn) {
    const double ms = per_call(fn).first;
    std::printf("%-44s %10.4f %10.1f\n", name, ms, bytes / (ms * 1e-3) / 1e9);
    add(results, "bandwidth", name, ms, -1, bytes / (ms * 1e-3) / 1e9, "GB/s");
  };
  const double mb64 = 4096.0 * 4096.0 * 4.0;
  bandwidth("copy", 2 * mb64, [&] { return big.clone(); });
  bandwidth("relu", 2 * mb64, [&] { return relu(big); });
  bandwidth("sum of rows, subgroup shuffles", mb64, [&] { return sum(big, {1}); });
  vk.use_subgroups(false);
  bandwidth("sum of rows, shared-memory tree", mb64, [&] { return sum(big, {1}); });
  vk.use_subgroups(true);
  bandwidth("sum of columns", mb64, [&] { return sum(big, {0}); });
  bandwidth("softmax of rows", 2 * mb64, [&] { return softmax(big, 1); });
  bandwidth("softmax of columns", 2 * mb64, [&] { return softmax(big, 0); });
  Tensor targets = uniform({4096}, 0, 4096).to(DType::i32).to(v);
  bandwidth("cross_entropy of rows (per row)", mb64, [&] { return cross_entropy(big, targets, Reduction::none); });
  bandwidth("add (two inputs)", 3 * mb64, [&] { return big + big; });
  bandwidth("add, a row broadcast", 2 * mb64, [&] { return big + big.slice(0, 0, 1); });
  bandwidth("uniform (write only)", mb64, [&] { return uniform({4096, 4096}, -1, 1, TensorOptions().device(v)); });
  bandwidth("dropout", 2 * mb64, [&] { return dropout(big, 0.5, true); });
  Tensor rows = uniform({4096}, 0, 4096).to(DType::i32).to(v);
  bandwidth("index_select of 4096 random rows", 2 * mb64, [&] { return index_select(big, 0, rows); });
  Tensor image = big.reshape({16, 64, 128, 128});
  bandwidth("max_pool2d 2x2 (reads 64 MB, writes 16)", 1.25 * mb64, [&] { return max_pool2d(image); });
  bandwidth("avg_pool2d 2x2", 1.25 * mb64, [&] { return avg_pool2d(image); });
  bandwidth("batch_norm, training ([16, 64, 128, 128])", 2 * mb64, [&] {
    return batch_norm(image, Tensor(), Tensor(), Tensor(), Tensor(), true);
  });

  {  // optimizer steps on 16M parameters: Adadelta reads p, g and its two buffers and writes three
    Tensor p = uniform({4096, 4096}, -1, 1).to(v);
    p.requires_grad_();
    (p * 1.0).sum().backward();  // a gradient to step with, kept
    optim::Adadelta adadelta({p}, optim::AdadeltaOptions(1.0));
    optim::Adam adam({p}, optim::AdamOptions(1e-3));
    bandwidth("Adadelta step (7 x 64 MB)", 7 * mb64, [&] { adadelta.step(); return p; });
    bandwidth("Adam step (7 x 64 MB)", 7 * mb64, [&] { adam.step(); return p; });
  }

  // products: f32 on gemm.glsl, and f16 on cooperative matrices where the device offers them
  std::printf("%-44s %10s %10s\n", "matmul (20 calls)", "device ms", "TFLOP/s");
  auto flops = [&](const char* name, double count, const std::function<Tensor()>& fn) {
    const double ms = per_call(fn).first;
    std::printf("%-44s %10.4f %10.2f\n", name, ms, count / (ms * 1e-3) / 1e12);
    add(results, "matmul", name, ms, -1, count / (ms * 1e-3) / 1e12, "TFLOP/s");
  };
  Tensor ma = uniform({4096, 4096}, -1, 1).to(v), mb = uniform({4096, 4096}, -1, 1).to(v);
  const double big_flops = 2.0 * 4096 * 4096 * 4096, fc1_flops = 2.0 * 64 * 128 * 9216;
  for (bool f16 : {false, true}) {
    if (f16 && !vk.cooperative_matrix()) {
      std::printf("(no f16 cooperative matrices on this device)\n");
      break;
    }
    set_allow_f16_products(f16);
    flops(f16 ? "4096^3, f16 cooperative matrices" : "4096^3, f32", big_flops, [&] { return matmul(ma, mb); });
    flops(f16 ? "fc1 forward, f16 cooperative matrices" : "fc1 forward, f32", fc1_flops, [&] { return matmul(f, wf.t()); });
  }
  set_allow_f16_products(false);

  // whole steps: forward, loss, backward, Adadelta, the running loss and accuracy (as mnist-train)
  manual_seed(1);
  auto model = apps::make_model("cnn");
  model->to(v);
  optim::Adadelta opt(model->parameters(), optim::AdadeltaOptions(1.0));
  Tensor images = uniform({64, 1, 28, 28}, -1, 1).to(v);
  Tensor labels = uniform({64}, 0, 10).to(DType::i32).to(v);  // truncated: 0 .. 9
  Tensor loss_sum, correct;
  auto step = [&] {
    opt.zero_grad();
    Tensor logits = (*model)(images);
    Tensor loss = cross_entropy(logits, labels);
    loss.backward();
    opt.step();
    NoGradGuard no_grad;
    Tensor l = loss.detach() * 64.0;
    Tensor ok = eq(argmax(logits.detach(), 1), labels).sum();
    loss_sum = loss_sum.defined() ? loss_sum + l : l;
    correct = correct.defined() ? correct + ok : ok;
    return loss;
  };
  auto start = Clock::now();
  step();
  b.synchronize();
  const double first = ms_since(start);
  std::printf("CNN training step, batch 64: the first %.1f ms (pipelines built)\n", first);
  add(results, "step", "first", -1, first, first, "ms");
  for (int i = 0; i < 20; ++i) step();
  b.synchronize();
  constexpr int kSteps = 100;
  for (int window = 0; window < 3; ++window) {
    start = Clock::now();
    const uint32_t from = vk.timestamp();
    for (int i = 0; i < kSteps; ++i) {
      Tensor loss = step();
      if ((i + 1) % 10 == 0) (void)loss.item();  // mnist-train reads the loss every 10 steps
    }
    const double recorded = ms_since(start);
    const uint32_t to = vk.timestamp();
    b.synchronize();
    const double wall = ms_since(start);
    std::printf("CNN training step, batch 64 (%d steps): device %.4f ms, host %.4f ms per step "
                "(the host's loop alone %.4f ms)\n",
                kSteps, vk.elapsed_ms(from, to) / kSteps, wall / kSteps, recorded / kSteps);
    add(results, "step", "window " + std::to_string(window + 1), vk.elapsed_ms(from, to) / kSteps, wall / kSteps,
        vk.elapsed_ms(from, to) / kSteps, "ms");
  }
  if (!json_path.empty()) {
    nlohmann::ordered_json out = apps::build_info("vulkan-bench");
    out["device"] = vk.description();
    out["results"] = std::move(results);
    apps::write_json_file(json_path, out);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"vulkan-bench: the Vulkan kernels of a MNIST CNN step, and whole steps, timed on the device "
               "(about 10 minutes on lavapipe, seconds on a GPU)"};
  app.set_version_flag("--version", apps::version_line("vulkan-bench"));
  std::string json_path;
  app.add_option("--json", json_path, "also write the figures to FILE as JSON")->type_name("FILE");
  if (std::optional<int> code = apps::parse_command_line(app, argc, argv)) return *code;
  try {
    return run(json_path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vulkan-bench: error: %s\n", e.what());
    return 1;
  }
}
