// The sweeps every device backend's tests run against the CPU: test_cuda and test_vulkan call them
// with their device and the dtypes it takes, so a case written once checks both backends.
// Random matmuls (layouts, batches, the bias and ReLU epilogue), index_select and its gradient,
// softmax over any axis, batch
// norm's statistics, running averages and gradients, and whole training steps of a small CNN
// from one seed.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/layers/nn.h"
#include "kiln/optim/optim.h"
#include "tests/backend_cases.h"

namespace kiln::test {

// matmul on random shapes (sizes 1, primes, non-multiples of every tile), transposed and strided
// operands passed as views, batched and broadcast batches; plain 2-D products also with a bias
// and ReLU in the epilogue (a Linear layer and its activation).
inline void matmul_sweep(const Device& dev, std::initializer_list<DType> dtypes, int trials = 60) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < trials; ++trial) {
    const int64_t m = pick(rng), n = pick(rng), k = pick(rng);
    Shape batch_a, batch_b;
    switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
      case 0: break;                                       // plain 2-D
      case 1: batch_a = {3}, batch_b = {3}; break;         // batched
      case 2: batch_a = {2, 3}; break;                     // B broadcast over the batch
      default: batch_a = {1}, batch_b = {4}; break;        // A broadcast (size-1 batch axis)
    }
    for (DType t : dtypes) {
      std::string how = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " +
                        batch_a.str() + batch_b.str() + " " + std::string(dtype_name(t));
      Operand a = operand(rng, batch_a, m, k, t, how), b = operand(rng, batch_b, k, n, t, how);
      const double scale = std::sqrt(static_cast<double>(k)) / 3;  // std of a sum of k products of U(-1, 1)
      const double tol = t == DType::f32 ? 1e-4 : 1e-12;
      check_close_on(dev, matmul(a.on(dev), b.on(dev)), matmul(a.cpu(), b.cpu()), tol, tol * scale, "matmul " + how);
      if (batch_a.empty() && batch_b.empty()) {
        Tensor bias = uniform({n}, -1, 1, t);
        check_close_on(dev, matmul(a.on(dev), b.on(dev), bias.to(dev), Activation::relu),
                       matmul(a.cpu(), b.cpu(), bias, Activation::relu), tol, tol * scale, "matmul + bias + relu " + how);
      }
    }
  }
}

// index_select of random indices (distinct, or repeated and more than the axis holds) along any
// axis in every `dtypes`, its gradient (index_add) in every `grad_dtypes`, and one_hot.
inline void index_sweep(const Device& dev, std::initializer_list<DType> dtypes,
                        std::initializer_list<DType> grad_dtypes) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 60; ++trial) {
    Shape s = random_shape(rng);
    int64_t axis = std::uniform_int_distribution<int64_t>(0, s.rank() - 1)(rng);
    int64_t n = s[static_cast<size_t>(axis)];
    bool distinct = trial % 2 == 0;
    int64_t m = distinct ? std::uniform_int_distribution<int64_t>(1, n)(rng)
                         : std::uniform_int_distribution<int64_t>(1, 2 * n + 3)(rng);
    Tensor idx = random_indices(rng, m, n, distinct);
    std::string what = s.str() + " axis " + std::to_string(axis) + " m " + std::to_string(m);
    for (DType t : dtypes) {
      Tensor cpu = (uniform(s, 0, 100)).to(t);
      check_close_on(dev, index_select(cpu.to(dev), axis, idx.to(dev)), index_select(cpu, axis, idx), 0, 0,
                     "index_select " + what + " " + std::string(dtype_name(t)));
    }
    Shape gs = s;
    gs[static_cast<size_t>(axis)] = m;
    for (DType t : grad_dtypes) {
      Tensor grad = uniform(gs, -1, 1, t);
      // Distinct indices add each row once: exact. Repeated ones may add in another order.
      double tol = distinct ? 0 : (t == DType::f32 ? 1e-5 : 1e-13);
      check_close_on(dev, index_select_backward(grad.to(dev), axis, idx.to(dev), s),
                     index_select_backward(grad, axis, idx, s), tol, tol, "index_select_backward " + what);
    }
    Tensor labels = random_indices(rng, m, n, false);
    for (DType t : {DType::f32, DType::i32, DType::u8})
      check_close_on(dev, one_hot(labels.to(dev), n, t), one_hot(labels, n, t), 0, 0,
                     "one_hot " + std::string(dtype_name(t)) + " " + what);
  }
}

// The MNIST MLP's products and their gradients' (784 -> 128 -> 10 at batch 64), each layout.
inline void mnist_mlp_products(const Device& dev) {
  struct Mnk { int64_t m, n, k; };
  for (Mnk s : {Mnk{64, 128, 784}, Mnk{64, 10, 128}, Mnk{784, 128, 64}, Mnk{128, 10, 64}, Mnk{64, 784, 128}}) {
    Tensor a = uniform({s.m, s.k}, -1, 1), b = uniform({s.k, s.n}, -1, 1);
    Tensor at = uniform({s.k, s.m}, -1, 1), bt = uniform({s.n, s.k}, -1, 1);
    const double atol = 1e-4 * std::sqrt(static_cast<double>(s.k));
    std::string what = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
    check_close_on(dev, matmul(a.to(dev), b.to(dev)), matmul(a, b), 1e-4, atol, what);
    check_close_on(dev, matmul(at.to(dev).t(), b.to(dev)), matmul(at.t(), b), 1e-4, atol, what + " A^T");
    check_close_on(dev, matmul(a.to(dev), bt.to(dev).t()), matmul(a, bt.t()), 1e-4, atol, what + " B^T");
  }
}

// softmax and log_softmax over any axis (negative ones too), of any length, at scales up to
// logits of 1e3, contiguous and not (core copies a view first). Tolerances against the CPU's
// double accumulation: f32 accumulates in float.
inline void softmax_sweep(const Device& dev, std::initializer_list<DType> dtypes, int trials = 60) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < trials; ++trial) {
    Shape s = random_shape(rng, 3);
    const int64_t axis = std::uniform_int_distribution<int64_t>(0, s.rank() - 1)(rng);
    s[static_cast<size_t>(axis)] = random_length(rng);
    for (size_t d = 0; s.numel() > 300000 && d < s.size(); ++d)
      if (static_cast<int64_t>(d) != axis) s[d] = 1;
    const int64_t signed_axis = trial % 2 ? axis : axis - s.rank();
    const double scale = random_scale(rng);
    for (DType t : dtypes) {
      Tensor cpu = uniform(s, -scale, scale, t);
      Tensor on_dev = cpu.to(dev);
      if (s.size() >= 2 && trial % 3 == 0) {  // a non-contiguous input on both sides
        cpu = cpu.transpose(0, -1).contiguous().transpose(0, -1);
        on_dev = on_dev.transpose(0, -1).contiguous().transpose(0, -1);
      }
      const double rtol = t == DType::f32 ? 1e-5 : 1e-12, atol = t == DType::f32 ? 1e-6 : 1e-13;
      const std::string what = s.str() + " " + std::string(dtype_name(t)) + " axis " + std::to_string(signed_axis) +
                               " scale " + std::to_string(scale);
      check_close_on(dev, softmax(on_dev, signed_axis), softmax(cpu, signed_axis), rtol, atol * 1e-1, "softmax " + what);
      check_close_on(dev, log_softmax(on_dev, signed_axis), log_softmax(cpu, signed_axis), rtol, atol * 10,
                     "log_softmax " + what);
    }
  }
}

// batch_norm in training and eval, with and without weight and bias: the output, the running
// averages and every gradient. Shapes include channels of one value and channels long enough
// to be summed in several runs (Vulkan's batch_norm.comp: 8 runs of 2048, and uneven runs).
inline void batch_norm_sweep(const Device& dev, std::initializer_list<DType> dtypes) {
  const std::vector<Shape> shapes = {{64, 10}, {3, 7, 33},     {16, 32, 26, 26}, {2, 5, 1, 1},
                                     {1, 3, 40, 40}, {200, 1}, {4, 2, 64, 64},   {5, 2, 33, 31}};
  for (const Shape& s : shapes)
    for (DType t : dtypes)
      for (bool training : {true, false})
        for (bool affine : {true, false}) {
          const int64_t c = s[1];
          // a mean far from 0 against the spread: the two-pass variance must keep its digits
          Tensor x = uniform(s, 3.0, 5.0, t), g = uniform(s, -1, 1, t);
          Tensor w = uniform({c}, 0.5, 1.5, t), b = uniform({c}, -1, 1, t);
          Tensor rm = uniform({c}, -1, 1, t), rv = uniform({c}, 0.5, 2, t);
          const std::string what = s.str() + " " + std::string(dtype_name(t)) + (training ? " train" : " eval") +
                                   (affine ? " affine" : "");
          Tensor out[2], gx[2], gw[2], gb[2], m[2], v[2];
          for (int d = 0; d < 2; ++d) {
            const Device on = d ? dev : Device::cpu();
            Tensor xd = x.detach().to(on).requires_grad_();
            Tensor wd = affine ? w.detach().to(on).requires_grad_() : Tensor();
            Tensor bd = affine ? b.detach().to(on).requires_grad_() : Tensor();
            m[d] = rm.to(on).clone(), v[d] = rv.to(on).clone();
            out[d] = batch_norm(xd, m[d], v[d], wd, bd, training, 0.1, 1e-5);
            out[d].backward(g.to(on));
            gx[d] = xd.grad();
            if (affine) gw[d] = wd.grad(), gb[d] = bd.grad();
          }
          const double tol = t == DType::f32 ? 1e-4 : 1e-10;
          check_close_on(dev, out[1], out[0], tol, tol, "batch_norm " + what);
          check_close_on(dev, gx[1], gx[0], tol, tol, "grad x " + what);
          check_close_on(dev, m[1], m[0], tol, tol, "running mean " + what);
          check_close_on(dev, v[1], v[0], tol, tol, "running var " + what);
          if (affine) {
            const double sum_tol = tol * std::sqrt(static_cast<double>(s.numel() / c));
            check_close_on(dev, gw[1], gw[0], tol, sum_tol, "grad weight " + what);
            check_close_on(dev, gb[1], gb[0], tol, sum_tol, "grad bias " + what);
          }
        }
}

// A small CNN with every layer kind mnist-train's models use, and batch norm.
struct SmallNet : nn::Module {
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Linear> fc;
  SmallNet() : nn::Module("SmallNet") {
    // No bias before batch norm: its gradient is zero up to rounding, and Adam would turn that
    // noise into full-size steps that differ between backends.
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 8, 3).bias(false)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(8));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(8, 16, 3));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.25));
    fc = register_module("fc", std::make_shared<nn::Linear>(16 * 5 * 5, 10));
  }
  Tensor forward(const Tensor& input) override {
    Tensor x = relu(bn->forward(conv1->forward(input)));            // [N, 8, 12, 12]
    x = max_pool2d(relu(conv2->forward(x)), {.kernel = {2, 2}});    // [N, 16, 5, 5]
    return fc->forward(drop->forward(x).flatten(1));               // [N, 10]
  }
};

// Five Adam steps of SmallNet on the CPU and on `dev` from the same seed, the same data and the
// same dropout masks: the losses, parameters and batch norm's buffers agree up to float rounding.
inline void training_steps_agree(const Device& dev) {
  manual_seed(7);
  auto cpu = std::make_shared<SmallNet>();
  auto on_dev = std::make_shared<SmallNet>();
  on_dev->load_state_dict(cpu->state_dict());
  on_dev->to(dev);
  optim::Adam opt_cpu(cpu->parameters(), optim::AdamOptions(1e-2));
  optim::Adam opt_dev(on_dev->parameters(), optim::AdamOptions(1e-2));
  Generator data(8);
  for (int step = 0; step < 5; ++step) {
    Tensor x = uniform({32, 1, 14, 14}, -1, 1, DType::f32, &data);
    Tensor y = (uniform({32}, 0, 10, DType::f32, &data)).to(DType::i32);
    double losses[2];
    for (int side = 0; side < 2; ++side) {
      manual_seed(100 + step);  // the same dropout masks on both sides
      auto& model = side == 0 ? *cpu : *on_dev;
      auto& opt = side == 0 ? static_cast<optim::Optimizer&>(opt_cpu) : opt_dev;
      const Device d = side == 0 ? Device::cpu() : dev;
      opt.zero_grad();
      Tensor loss = cross_entropy(model.forward(x.to(d)), y.to(d));
      loss.backward();
      opt.step();
      losses[side] = loss.item();
    }
    CHECK_MESSAGE(std::abs(losses[1] - losses[0]) <= 1e-4 * std::abs(losses[0]),
                  "step " << step << ": loss " << losses[1] << " on " << dev.str() << ", " << losses[0] << " on cpu");
  }
  auto pc = cpu->named_parameters(), pd = on_dev->named_parameters();
  REQUIRE(pc.size() == pd.size());
  for (size_t i = 0; i < pc.size(); ++i)
    check_close_on(dev, pd[i].second.detach(), pc[i].second.detach(), 2e-3, 2e-4, "parameter " + pc[i].first);
  auto bc = cpu->named_buffers(), bd = on_dev->named_buffers();
  REQUIRE(bc.size() == bd.size());
  for (size_t i = 0; i < bc.size(); ++i)
    check_close_on(dev, bd[i].second, bc[i].second, 1e-4, 1e-5, "buffer " + bc[i].first);
}

}  // namespace kiln::test
