// Each layer against the functional ops it wraps, PyTorch's default init (bounds and
// distribution), and the PyTorch examples/mnist CNN written as a user would write it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kiln/layers/nn.h"

using namespace kiln;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Max |a - b| over all elements.
double max_diff(const Tensor& a, const Tensor& b) { return abs(a - b).max().item(); }

// Every value within [-bound, bound], mean near 0, variance near bound^2 / 3 and ten equal bins
// holding ~10% each: what U(-bound, bound) gives.
void check_uniform(const Tensor& t, double bound) {
  std::vector<double> v = values(t);
  REQUIRE(v.size() >= 1000);
  double n = static_cast<double>(v.size()), mean = 0, var = 0;
  std::vector<double> bins(10, 0.0);
  for (double x : v) {
    REQUIRE(std::abs(x) <= bound);
    mean += x / n;
    var += x * x / n;
    bins[std::min<size_t>(9, static_cast<size_t>((x + bound) / (2 * bound) * 10))] += 1 / n;
  }
  CHECK(std::abs(mean) < 0.05 * bound);
  CHECK(var == doctest::Approx(bound * bound / 3).epsilon(0.05));
  for (double b : bins) CHECK(b == doctest::Approx(0.1).epsilon(0.25));
}

}  // namespace

TEST_CASE("Linear computes x W^T + b over any leading dimensions") {
  nn::Linear fc(nn::LinearOptions(4, 3));
  CHECK(fc.weight.shape() == Shape{3, 4});
  CHECK(fc.bias.shape() == Shape{3});
  Tensor x = uniform({2, 5, 4});
  Tensor y = fc(x);
  CHECK(y.shape() == Shape{2, 5, 3});
  Tensor expected = matmul(x, fc.weight.t().contiguous()) + fc.bias;
  CHECK(max_diff(y, expected) < 1e-6);
  CHECK(fc.extra_repr() == "in_features=4, out_features=3, bias=true");
  // with its activation fused into the product: relu(fc(x)), the same bits
  CHECK(max_diff(fc.forward(x, Activation::relu), relu(y)) == 0.0);

  nn::Linear no_bias(4, 3, false);
  CHECK_FALSE(no_bias.bias.defined());
  CHECK(no_bias.parameters().size() == 1);
  CHECK(nn::Linear(nn::LinearOptions(4, 3).bias(false)).parameters().size() == 1);
  CHECK_THROWS_AS(fc(zeros({2, 5})), ShapeError);
  CHECK_THROWS_AS(nn::Linear(0, 3), ValueError);
}

TEST_CASE("Conv2d options take an int or a pair") {
  nn::Conv2d conv(nn::Conv2dOptions(4, 6, {3, 5}).stride(2).padding({1, 2}).dilation(1).groups(2).bias(false));
  CHECK(conv.weight.shape() == Shape{6, 2, 3, 5});
  CHECK_FALSE(conv.bias.defined());
  CHECK(conv.options.stride()[1] == 2);
  CHECK(conv.extra_repr() == "4, 6, kernel_size=(3, 5), stride=(2, 2), padding=(1, 2), groups=2, bias=false");
  Tensor x = uniform({1, 4, 9, 8});
  Tensor y = conv(x);
  CHECK(y.shape() == Shape{1, 6, 5, 4});
  CHECK(max_diff(y, conv2d(x, conv.weight, {}, {{2, 2}, {1, 2}, {1, 1}, 2})) == 0.0);
  CHECK(max_diff(conv.forward(x, Activation::relu), relu(y)) == 0.0);
  CHECK(nn::Conv2d(1, 32, 3).extra_repr() == "1, 32, kernel_size=(3, 3), stride=(1, 1)");
  CHECK_THROWS_AS(nn::Conv2d(nn::Conv2dOptions(3, 6, 3).groups(2)), ValueError);
  CHECK_THROWS_AS(nn::Conv2d(nn::Conv2dOptions(2, 2, 3).stride(0)), ValueError);
  CHECK_THROWS_AS(nn::Conv2dOptions(2, 2, {1, 2, 3}), ValueError);
}

TEST_CASE("pooling, activations, Flatten and losses wrap their ops") {
  Tensor x = uniform({2, 3, 6, 6}, -1, 1);
  CHECK(nn::MaxPool2d(2)(x).shape() == Shape{2, 3, 3, 3});
  CHECK(max_diff(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1))(x),
                 max_pool2d(x, {{3, 3}, {2, 2}, {1, 1}})) == 0.0);
  CHECK(max_diff(nn::AvgPool2d(nn::AvgPool2dOptions(3).stride(1).padding(1).count_include_pad(false))(x),
                 avg_pool2d(x, {{3, 3}, {1, 1}, {1, 1}, false})) == 0.0);
  CHECK(max_diff(nn::ReLU()(x), relu(x)) == 0.0);
  CHECK(max_diff(nn::LeakyReLU(0.2)(x), leaky_relu(x, 0.2)) == 0.0);
  CHECK(max_diff(nn::GELU()(x), gelu(x)) == 0.0);
  CHECK(max_diff(nn::Tanh()(x), tanh(x)) == 0.0);
  CHECK(max_diff(nn::Sigmoid()(x), sigmoid(x)) == 0.0);
  CHECK(nn::Flatten()(x).shape() == Shape{2, 108});
  CHECK(nn::Flatten(0, 1)(x).shape() == Shape{6, 6, 6});

  Tensor logits = uniform({4, 5}, -2, 2);
  Tensor labels = from_vector<int32_t>({0, 4, 2, 2}, {4});
  nn::CrossEntropyLoss ce(nn::CrossEntropyLossOptions().label_smoothing(0.1).reduction(Reduction::sum));
  CHECK(ce(logits, labels).item() == cross_entropy(logits, labels, Reduction::sum, 0.1).item());
  CHECK(nn::CrossEntropyLoss()(logits, labels).item() == cross_entropy(logits, labels).item());
  CHECK(nn::MSELoss(Reduction::sum)(logits, zeros({4, 5})).item() ==
        doctest::Approx((logits * logits).sum().item()));
  CHECK_THROWS_AS(nn::CrossEntropyLoss(nn::CrossEntropyLossOptions().label_smoothing(2)), ValueError);
}

TEST_CASE("default init is PyTorch's: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases") {
  manual_seed(0);
  nn::Linear fc(256, 300);
  check_uniform(fc.weight, 1.0 / 16);
  for (double b : values(fc.bias)) CHECK(std::abs(b) <= 1.0 / 16);

  // fan_in = in_channels / groups * kh * kw = 8 / 2 * 3 * 3 = 36
  nn::Conv2d conv(nn::Conv2dOptions(8, 64, 3).groups(2));
  check_uniform(conv.weight, 1.0 / 6);
  for (double b : values(conv.bias)) CHECK(std::abs(b) <= 1.0 / 6);
  CHECK(abs(fc.bias).max().item() > 0.9 / 16);  // the bias uses its whole range, too

  // Reproducible with manual_seed; a different seed, different weights.
  manual_seed(42);
  nn::Linear a(10, 10);
  manual_seed(42);
  nn::Linear b(10, 10);
  nn::Linear c(10, 10);
  CHECK(values(a.weight) == values(b.weight));
  CHECK(values(a.bias) == values(b.bias));
  CHECK(values(a.weight) != values(c.weight));
}

TEST_CASE("init functions fill in place") {
  Tensor w = empty({400, 50}).requires_grad_();
  Tensor same = nn::init::kaiming_uniform_(w, 0.0, nn::init::FanMode::fan_in, nn::init::Nonlinearity::relu);
  CHECK(same.impl() == w.impl());
  check_uniform(w, std::sqrt(6.0 / 50));  // relu gain sqrt(2): sqrt(2) * sqrt(3 / 50)
  CHECK(w.is_leaf());
  nn::init::kaiming_uniform_(w, std::sqrt(5.0), nn::init::FanMode::fan_out);
  check_uniform(w, 1.0 / std::sqrt(400.0));
  nn::init::uniform_(w, 2, 3);
  CHECK(w.min().item() >= 2);
  nn::init::normal_(w, 1.0, 0.5);
  CHECK(w.mean().item() == doctest::Approx(1.0).epsilon(0.02));
  CHECK(sqrt(((w - 1.0) * (w - 1.0)).mean()).item() == doctest::Approx(0.5).epsilon(0.02));
  nn::init::ones_(w);
  CHECK(w.min().item() == 1.0);
  nn::init::zeros_(w);
  CHECK(abs(w).max().item() == 0.0);
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::tanh) == doctest::Approx(5.0 / 3));
  CHECK(nn::init::calculate_gain(nn::init::Nonlinearity::leaky_relu, std::sqrt(5.0)) ==
        doctest::Approx(std::sqrt(1.0 / 3)));
  CHECK(nn::init::calculate_fan_in_and_fan_out(empty({64, 32, 3, 3})) == std::pair<int64_t, int64_t>{288, 576});
  CHECK_THROWS_AS(nn::init::kaiming_uniform_(empty({5})), ShapeError);
}

namespace {

// PyTorch's examples/mnist Net, as a user writes it with kiln.
struct MnistNet : nn::Module {
  MnistNet() {
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(1, 32, 3).stride(1)));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(32, 64, 3).stride(1)));
    dropout1 = register_module("dropout1", std::make_shared<nn::Dropout>(0.25));
    dropout2 = register_module("dropout2", std::make_shared<nn::Dropout>(0.5));
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(9216, 128));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(128, 10));
  }

  // x: [N, 1, 28, 28] -> logits [N, 10]
  Tensor forward(const Tensor& input) override {
    Tensor x = relu(conv1->forward(input));  // [N, 32, 26, 26]
    x = relu(conv2->forward(x));             // [N, 64, 24, 24]
    x = max_pool2d(x, {{2, 2}});             // [N, 64, 12, 12]
    x = dropout1->forward(x);
    x = flatten(x, 1);                       // [N, 9216]
    x = relu(fc1->forward(x));
    x = dropout2->forward(x);
    return fc2->forward(x);
  }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dropout> dropout1, dropout2;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

}  // namespace

TEST_CASE("the PyTorch examples/mnist CNN: 1,199,882 parameters, and a gradient for each") {
  manual_seed(0);
  MnistNet net;
  int64_t total = 0;
  for (const Tensor& p : net.parameters()) total += p.numel();
  CHECK(total == 1199882);
  std::vector<std::string> names;
  for (const auto& [name, p] : net.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                          "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(net.summary().find("Total parameters: 1,199,882\n") != std::string::npos);
  CHECK(net.summary().find("(fc1): Linear(in_features=9216, out_features=128, bias=true)  1,179,776  weight "
                           "[128, 9216], bias [128]") != std::string::npos);

  Tensor images = uniform({2, 1, 28, 28});
  Tensor labels = from_vector<int32_t>({3, 7}, {2});
  nn::CrossEntropyLoss criterion;
  Tensor loss = criterion(net(images), labels);
  CHECK(std::isfinite(loss.item()));
  CHECK(loss.item() == doctest::Approx(std::log(10.0)).epsilon(0.1));  // small init: near-uniform guesses
  loss.backward();
  for (const auto& entry : net.named_parameters()) {
    const std::string& name = entry.first;
    const Tensor& p = entry.second;
    REQUIRE_MESSAGE(p.grad().defined(), name);
    CHECK_MESSAGE(p.grad().shape() == p.shape(), name);
    CHECK_MESSAGE(abs(p.grad()).max().item() > 0.0, name);
  }

  net.eval();  // dropout off: the same input gives the same logits twice
  CHECK(values(net(images)) == values(net(images)));
  net.zero_grad();
  for (const Tensor& p : net.parameters()) CHECK_FALSE(p.grad().defined());
}
