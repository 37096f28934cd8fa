// Mixed precision on the GPU: a model trained under autocast (bf16 products on the tensor cores,
// f32 master weights, loss and optimizer) tracks the same model trained in f32 over 100 steps, and
// tracks the CPU's bf16 run (the reference: f32 arithmetic rounded once, kernels/cpu/widen.cpp).
// The op-by-op dtype rules and the kernels' bf16 columns: test_mixed_precision, test_backend_ops.
#include <cmath>
#include <memory>
#include <vector>

#include "tests/cuda/cuda_test.h"

using namespace kiln;
using namespace kiln::test;

namespace {

// A small CNN on 12 x 12 images (conv, relu, pool, linear + relu, linear) trained for `steps`
// steps of Adam on fixed random data; each step's loss.
std::vector<double> train(const Device& device, bool bf16, int steps) {
  manual_seed(21);
  auto net = std::make_shared<nn::Sequential>(nn::Conv2d(1, 8, 3), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                                              nn::Linear(8 * 5 * 5, 32), nn::ReLU(), nn::Linear(32, 4));
  net->to(device);
  optim::Adam adam(net->parameters(), optim::AdamOptions(3e-3));
  Generator data(7);
  const Tensor x = uniform({128, 1, 12, 12}, -1.0, 1.0, Device::cpu(), &data).to(device);
  // a learnable rule: the class is the quadrant of the image with the largest sum
  const Tensor quadrants = x.reshape({128, 1, 2, 6, 2, 6}).sum({3, 5}).reshape({128, 4});
  const Tensor y = argmax(quadrants, 1);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    adam.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DType::bf16, bf16);
      loss = cross_entropy((*net)(x), y);
    }
    loss.backward();
    adam.step();
    losses.push_back(loss.item());
  }
  return losses;
}

}  // namespace

TEST_CASE("bf16 training on the GPU tracks f32 and the CPU's bf16 over 100 steps") {
  const std::vector<double> f32 = train(kCuda, false, 100), b16 = train(kCuda, true, 100);
  const std::vector<double> cpu_b16 = train(Device::cpu(), true, 100);
  CHECK(f32.back() < 0.5 * f32.front());  // it learns
  CHECK(b16 != f32);                       // autocast lowered the products
  for (size_t i = 0; i < f32.size(); ++i) {
    INFO("step " << i << ": f32 " << f32[i] << ", bf16 " << b16[i] << ", CPU bf16 " << cpu_b16[i]);
    // bf16 rounds every product's inputs and outputs to 8 significant bits; Adam's normalised
    // steps keep the runs within a few percent of the loss
    CHECK(std::abs(b16[i] - f32[i]) <= 0.02 + 0.05 * f32[i]);
    CHECK(std::abs(b16[i] - cpu_b16[i]) <= 0.02 + 0.05 * cpu_b16[i]);
  }
}

TEST_CASE("copy_many converts a list of tensors in one launch, bit for bit as one copy each") {
  // sizes around a chunk (1024) and none; more tensors than one launch's table (128); a strided
  // pair, which sends the whole list through one copy each
  std::vector<int64_t> sizes = {1, 1023, 1024, 1025, 4097, 100000, 0, 3};
  for (int i = 0; i < 140; ++i) sizes.push_back(1 + (i * 37) % 300);
  Backend& cuda = backend_for(kCuda);
  for (bool strided : {false, true}) {
    CAPTURE(strided);
    std::vector<Tensor> src, many, one;
    for (size_t i = 0; i < sizes.size(); ++i) {
      src.push_back(uniform({sizes[i]}, -3.0, 3.0, kCuda) * 1e3);
      many.push_back(empty({sizes[i]}, TensorOptions(DType::bf16).device(kCuda)));
      one.push_back(empty({sizes[i]}, TensorOptions(DType::bf16).device(kCuda)));
    }
    if (strided) src[1] = uniform({2 * sizes[1]}, -3.0, 3.0, kCuda).slice(0, 0, 2 * sizes[1], 2);
    else src[2] = (uniform({sizes[2] + 3}, -3.0, 3.0, kCuda) * 1e3).slice(0, 3, sizes[2] + 3);  // an offset view
    std::vector<TensorRef> from, to;
    for (size_t i = 0; i < src.size(); ++i) from.push_back(src[i].ref()), to.push_back(many[i].ref());
    cuda.copy_many(from, to);
    for (size_t i = 0; i < src.size(); ++i) cuda.copy(src[i].ref(), one[i].ref());
    for (size_t i = 0; i < src.size(); ++i) {
      CAPTURE(i);
      CHECK(many[i].to(DType::f32).to_vector<float>() == one[i].to(DType::f32).to_vector<float>());
    }
  }
}

TEST_CASE("backward converts the gradients of a model's bf16 casts back in one launch") {
  // Four parameters cast to bf16 ahead, as mnist-train's step does: their gradients come back
  // through four conversions, held by backward and converted in one copy_many; a hook on each
  // parameter (its gradient wanted as soon as it is final) makes them one launch each again.
  auto run = [](bool hooks) {
    std::vector<Tensor> params;
    Generator gen(5);  // the same values in both runs
    for (int64_t n : {1000, 3, 257, 64 * 64}) params.push_back(uniform({n}, -1.0, 1.0, kCuda, &gen).requires_grad_());
    if (hooks)
      for (const Tensor& p : params) p.register_post_accumulate_grad_hook([](const Tensor&) {});
    const std::vector<Tensor> low = to_dtype(params, DType::bf16);
    Tensor loss = zeros({}, kCuda);
    for (const Tensor& p : low) loss = loss + (p * p).to(DType::f32).sum();
    Graph graph = capture(kCuda, [&] { loss.backward(); });
    graph.replay();
    std::vector<std::vector<float>> grads;
    for (const Tensor& p : params) grads.push_back(p.grad().to_vector<float>());
    return std::make_pair(graph.kernels(), grads);
  };
  const auto [held, held_grads] = run(false);
  const auto [each, each_grads] = run(true);
  CHECK(each == held + 3);
  CHECK(held_grads == each_grads);
}

TEST_CASE("relu's gradient folds into the max pool and the convolution after it: two kernels fewer, the same bits") {
  // conv -> relu -> conv -> relu -> 2 x 2 max pool in bf16, as the MNIST CNN's: the pool's backward
  // masks for the second relu, the second convolution's backward input (version 9) for the first.
  // Against the same graph with a view after each relu, where each relu's node masks in a pass of
  // its own.
  auto run = [](bool fold) {
    Generator gen(11);
    auto bf16_leaf = [&](const Shape& s) {
      return uniform(s, -0.5, 0.5, kCuda, &gen).to(DType::bf16).requires_grad_();
    };
    Tensor w1 = bf16_leaf({32, 16, 3, 3}), b1 = bf16_leaf({32}), w2 = bf16_leaf({32, 32, 3, 3}), b2 = bf16_leaf({32});
    Tensor x = uniform({8, 16, 14, 14}, -1.0, 1.0, kCuda, &gen).to(DType::bf16);
    Tensor g = uniform({8, 32, 5, 5}, -1.0, 1.0, kCuda, &gen);
    auto cut = [fold](const Tensor& y) { return fold ? y : y.reshape(y.shape()); };
    Tensor h = cut(conv2d(x, w1, b1, {}, Activation::relu));           // [8, 32, 12, 12]
    Tensor p = max_pool2d(cut(conv2d(h, w2, b2, {}, Activation::relu)), {.kernel = {2, 2}});  // [8, 32, 5, 5]
    Tensor loss = (p.to(DType::f32) * g).sum();
    Graph graph = capture(kCuda, [&] { loss.backward(); });
    graph.replay();
    std::vector<std::vector<float>> grads;
    for (const Tensor& t : {w1, b1, w2, b2}) grads.push_back(t.grad().to(DType::f32).to_vector<float>());
    return std::make_pair(graph.kernels(), grads);
  };
  const auto [folded, folded_grads] = run(true);
  const auto [masked, masked_grads] = run(false);
  CHECK(masked == folded + 2);
  CHECK(folded_grads == masked_grads);
}

TEST_CASE("copy_many copies pairs that each keep their dtype, of several dtypes, in one launch") {
  // A captured step's inputs: f32 images and i32 labels (4-byte words), then with a u8 tensor of
  // an odd length among them (bytes); each pair's bits as one copy's.
  Backend& cuda = backend_for(kCuda);
  for (bool odd_bytes : {false, true}) {
    CAPTURE(odd_bytes);
    // each source a view one element into its buffer (a data-parallel rank's rows of a batch):
    // its first element is at the offset times its dtype's size
    auto skip_one = [](const Tensor& t) { return t.reshape({t.numel()}).slice(0, 1, t.numel()); };
    std::vector<Tensor> src = {skip_one(uniform({64 * 784 + 1}, -1.0, 1.0, kCuda)),
                               skip_one(uniform({65}, 0.0, 10.0, kCuda).to(DType::i32)),
                               skip_one(uniform({4098}, -5.0, 5.0, kCuda).to(DType::f64))};
    if (odd_bytes) src.push_back(skip_one(uniform({4100}, 0.0, 255.0, kCuda).to(DType::u8)));
    std::vector<Tensor> out;
    std::vector<TensorRef> from, to;
    for (const Tensor& t : src) {
      out.push_back(zeros(t.shape(), TensorOptions(t.dtype()).device(kCuda)));
      from.push_back(t.ref());
      to.push_back(out.back().ref());
    }
    cuda.copy_many(from, to);
    for (size_t i = 0; i < src.size(); ++i) {
      CAPTURE(i);
      CHECK(out[i].to(DType::f64).to_vector<double>() == src[i].to(DType::f64).to_vector<double>());
    }
  }
}
