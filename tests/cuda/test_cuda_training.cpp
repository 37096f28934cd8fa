// Whole training on the GPU against the CPU: directional gradchecks in f32 of every op family on
// the CUDA backend, and a small CNN (conv, batch norm, ReLU, max pool, dropout, linear,
// cross-entropy) trained for a few steps with Adam on CPU and CUDA from the same seed, whose
// losses and parameters must agree up to float rounding; the fused bias + ReLU epilogues of matmul
// and conv2d through autograd on the shapes of each production kernel.
#include "kiln/layers/nn.h"
#include "kiln/optim/optim.h"
#include "tests/backend_sweeps.h"
#include "tests/cuda/cuda_test.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("directional gradchecks in f32 pass on the GPU for every op family") {
  if (!have_cuda()) return;
  // f32 sums carry ~1e-7 relative noise per term: a large eps keeps the difference quotient
  // above it, and a ~1e-2 tolerance judges the result (as the CPU's f32 directional checks).
  autograd::GradcheckOptions f32;
  f32.eps = 1e-2;
  f32.atol = 1e-2;
  f32.rtol = 1e-2;
  Generator gen(901);
  auto leaf = [&](const Shape& s, double scale) {
    return uniform(s, -scale, scale, TensorOptions(DType::f32).device(kCuda).requires_grad(), &gen);
  };
  // Values 0.05 apart in a random order: a perturbation of eps = 1e-2 cannot swap the winner of
  // a max (or a max pool's window), so its gradient is defined at this point.
  auto distinct = [&](const Shape& s) {
    std::vector<float> v(static_cast<size_t>(s.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.05f * static_cast<float>(i) - 10.0f;
    std::shuffle(v.begin(), v.end(), std::mt19937(3));
    return from_vector<float>(v, s).to(kCuda).requires_grad_();
  };
  auto targets = [](int64_t n, int64_t classes) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 7) % static_cast<size_t>(classes));
    return from_vector<int32_t>(t, {n}).to(kCuda);
  };
  using Args = std::vector<Tensor>;
  struct Case {
    std::string name;
    autograd::Function f;
    Args inputs;
  };
  const Case cases[] = {
      {"matmul 130x97 @ 97x81", [](const Args& x) { return matmul(x[0], x[1]); }, {leaf({130, 97}, 1), leaf({97, 81}, 1)}},
      {"matmul transposed, batched", [](const Args& x) { return matmul(x[0].transpose(1, 2), x[1]); },
       {leaf({3, 40, 33}, 1), leaf({3, 40, 17}, 1)}},
      {"conv2d 3x3 pad 1", [](const Args& x) { return conv2d(x[0], x[1], x[2], {{1, 1}, {1, 1}, {1, 1}, 1}); },
       {leaf({4, 8, 12, 12}, 1), leaf({16, 8, 3, 3}, 0.3), leaf({16}, 0.1)}},
      {"conv2d stride 2, dilation 2, groups 2",
       [](const Args& x) { return conv2d(x[0], x[1], x[2], {{2, 2}, {1, 1}, {2, 2}, 2}); },
       {leaf({3, 6, 13, 11}, 1), leaf({4, 3, 3, 3}, 0.3), leaf({4}, 0.1)}},
      {"max_pool2d and avg_pool2d",
       [](const Args& x) { return max_pool2d(x[0], {.kernel = {2, 2}}) + avg_pool2d(x[0], {.kernel = {2, 2}}); },
       {distinct({2, 3, 8, 10})}},
      {"softmax and log_softmax", [](const Args& x) { return softmax(x[0], 1) * log_softmax(x[0], 0); },
       {leaf({17, 33}, 2)}},
      {"cross_entropy with smoothing",
       [&](const Args& x) { return cross_entropy(x[0], targets(64, 10), Reduction::mean, 0.1); }, {leaf({64, 10}, 3)}},
      {"batch_norm", [](const Args& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true); },
       {leaf({16, 5, 4, 4}, 1), leaf({5}, 1), leaf({5}, 1)}},
      {"sum, mean, max over axes", [](const Args& x) { return sum(x[0], {0}) * mean(x[0], {0}) + max(x[0], {0}); },
       {distinct({9, 31})}},
      {"index_select with repeats",
       [](const Args& x) { return index_select(x[0], 0, from_vector<int32_t>({2, 0, 2, 4}, {4}).to(kCuda)); },
       {leaf({5, 7}, 1)}},
  };
  for (const Case& c : cases) {
    auto r = autograd::gradcheck_directional(c.f, c.inputs, f32);
    CHECK_MESSAGE(r.ok, c.name << ": " << r.message);
  }
}

TEST_CASE("matmul and conv2d with a fused bias and ReLU match the CPU through autograd, in every production path") {
  if (!have_cuda()) return;
  // matmul shapes that take each production kernel (matmul.cu): 03 (a small product), 09 (split-K:
  // the MNIST CNN's fc1), 12 (enough 128 x 128 tiles, k >= 256) and 07 (k < 256); conv2d shapes
  // that take version 3 (the first MNIST layer: C*KH*KW < 32) and the tensor cores (conv2)
  struct Mm { int64_t m, n, k; };
  for (const Mm& c : {Mm{64, 10, 128}, Mm{64, 128, 9216}, Mm{1024, 1024, 512}, Mm{1024, 1024, 128}}) {
    Tensor a = uniform({c.m, c.k}, -1, 1), w = uniform({c.n, c.k}, -1, 1), b = uniform({c.n}, -1, 1);
    Tensor g = uniform({c.m, c.n}, -1, 1);
    const std::string what = std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k);
    std::vector<Tensor> grads[2];
    Tensor out[2];
    for (int d = 0; d < 2; ++d) {
      const Device dev = d ? kCuda : Device::cpu();
      Tensor ad = a.detach().to(dev).requires_grad_(), wd = w.detach().to(dev).requires_grad_();
      Tensor bd = b.detach().to(dev).requires_grad_();
      out[d] = matmul(ad, wd.t(), bd, Activation::relu);
      out[d].backward(g.to(dev));
      grads[d] = {ad.grad(), wd.grad(), bd.grad()};
    }
    const double atol = 1e-4 * std::sqrt(static_cast<double>(c.k));
    check_close(out[1], out[0], 1e-4, atol, "matmul + bias + relu " + what);
    check_close(grads[1][0], grads[0][0], 1e-4, 1e-4 * std::sqrt(static_cast<double>(c.n)), "grad a " + what);
    check_close(grads[1][1], grads[0][1], 1e-4, 1e-4 * std::sqrt(static_cast<double>(c.m)), "grad w " + what);
    check_close(grads[1][2], grads[0][2], 1e-4, 1e-4 * std::sqrt(static_cast<double>(c.m)), "grad b " + what);
  }
  struct Cv { Shape x, w; };
  for (const Cv& c : {Cv{{64, 1, 28, 28}, {32, 1, 3, 3}}, Cv{{16, 32, 26, 26}, {64, 32, 3, 3}}}) {
    Tensor x = uniform(c.x, -1, 1), w = uniform(c.w, -1, 1), b = uniform({c.w[0]}, -1, 1);
    const std::string what = "conv2d + bias + relu " + c.x.str() + " " + c.w.str();
    Tensor out[2], gw[2];
    for (int d = 0; d < 2; ++d) {
      const Device dev = d ? kCuda : Device::cpu();
      Tensor wd = w.detach().to(dev).requires_grad_();
      out[d] = conv2d(x.to(dev), wd, b.to(dev), {}, Activation::relu);
      sum(out[d]).backward();
      gw[d] = wd.grad();
    }
    check_close(out[1], out[0], 1e-4, 1e-4 * 17, what);
    check_close(gw[1], gw[0], 1e-4, 1e-3 * std::sqrt(static_cast<double>(c.x.numel() / c.x[1])), what + " grad w");
  }
}

TEST_CASE("training steps on CPU and CUDA from the same seed agree up to float rounding") {
  if (!have_cuda()) return;
  training_steps_agree(kCuda);
}

TEST_CASE("batch_norm matches the CPU on the GPU: statistics, running averages and gradients, f32 and f64") {
  if (!have_cuda()) return;
  batch_norm_sweep(kCuda, {DType::f32, DType::f64});
}
