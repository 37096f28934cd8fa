// fit-sine: kiln used from outside, as any C++ program would use it. A two-layer MLP learns
// y = sin(x) on [-pi, pi] with Adam on the best device here (kiln::best_device(): the CPU where
// there is no GPU), is saved as safetensors, and is loaded back into a fresh model that must
// predict exactly the same values. Its activation is a custom op with a backward of its own
// (autograd::Function), checked against finite differences before training.
// Exit status 1 when any check fails.
//
// Build it against an installed kiln (tests/install does this on every test run):
//   cmake --install build/release --prefix /tmp/kiln
//   cmake -S apps/example -B /tmp/fit-sine -G Ninja -DCMAKE_PREFIX_PATH=/tmp/kiln
//   cmake --build /tmp/fit-sine && /tmp/fit-sine/fit-sine [model.safetensors]
#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include <kiln/kiln.h>

using namespace kiln;

constexpr int64_t kPoints = 256;        // training inputs, evenly spaced on [-pi, pi]
constexpr int64_t kHidden = 32;
constexpr int kSteps = 500;             // full-batch Adam steps
constexpr int kLogInterval = 100;
constexpr double kLearningRate = 1e-2;
constexpr double kMaxFinalLoss = 1e-3;  // mean squared error the fit must get below
constexpr uint64_t kSeed = 1;

// softsign(x) = x / (1 + |x|), whose derivative is 1 / (1 + |x|)^2: an op kiln does not have,
// written as libtorch's torch::autograd::Function would be.
struct Softsign : autograd::Function<Softsign> {
  static constexpr const char* name = "softsign";
  static Tensor forward(autograd::Context& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x / (abs(x) + 1.0);
  }
  static autograd::Grads backward(autograd::Context& ctx, const Tensor& grad) {
    const Tensor d = abs(ctx.saved()[0]) + 1.0;
    return {grad / (d * d)};
  }
};

struct SineNet : nn::Module {
  SineNet() {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(1, kHidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(kHidden, 1));
  }
  // x: [N, 1] -> [N, 1]
  Tensor forward(const Tensor& x) override { return fc2->forward(Softsign::apply(fc1->forward(x))); }
  std::shared_ptr<nn::Linear> fc1, fc2;
};

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "fit-sine.safetensors";
  manual_seed(kSeed);

  // The custom op's backward against central differences, in f64.
  const autograd::GradcheckResult check =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return Softsign::apply(in[0]); },
                          {uniform({16}, -3.0, 3.0, DType::f64).requires_grad_()});
  if (!check.ok) {
    std::fprintf(stderr, "fit-sine: softsign's backward fails gradcheck: %s\n", check.message.c_str());
    return 1;
  }

  // The data, made on the host: x and y = sin(x), both [kPoints, 1].
  std::vector<float> xs(kPoints), ys(kPoints);
  for (size_t i = 0; i < xs.size(); ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(kPoints - 1);  // 0 .. 1
    xs[i] = static_cast<float>(std::numbers::pi * (2.0 * t - 1.0));
    ys[i] = std::sin(xs[i]);
  }
  // On the best device here (a CUDA GPU, else a Vulkan GPU, else the CPU).
  const Device device = best_device();
  std::printf("training on %s\n", device.str().c_str());
  const Tensor x = from_vector(xs, {kPoints, 1}).to(device);
  const Tensor y = from_vector(ys, {kPoints, 1}).to(device);

  SineNet model;
  model.to(device);
  optim::Adam optimizer(model.parameters(), optim::AdamOptions(kLearningRate));
  nn::MSELoss criterion;
  for (int step = 1; step <= kSteps; ++step) {
    optimizer.zero_grad();
    Tensor loss = criterion(model(x), y);
    loss.backward();
    optimizer.step();
    if (step % kLogInterval == 0) std::printf("step %3d  loss %.6f\n", step, loss.item());
  }

  NoGradGuard no_grad;
  const double final_loss = criterion(model(x), y).item();
  std::printf("final loss %.6f\n", final_loss);
  if (!(final_loss < kMaxFinalLoss)) {
    std::fprintf(stderr, "fit-sine: final loss %.6f is not below %g\n", final_loss, kMaxFinalLoss);
    return 1;
  }

  save_safetensors(path, model.state_dict());
  SineNet restored;  // freshly initialised, then overwritten by the file's weights
  restored.load_state_dict(load_safetensors(path).tensors);
  restored.to(device);
  // Same weights, same kernels: the same bits.
  const double difference = abs(model(x) - restored(x)).max().item();
  if (difference != 0.0) {
    std::fprintf(stderr, "fit-sine: the model loaded from %s differs by %g\n", path.c_str(), difference);
    return 1;
  }
  std::printf("saved %s; the reloaded model predicts the same\n", path.c_str());
  return 0;
}
