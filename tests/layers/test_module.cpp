// The Module API: registration and PyTorch's names and order, state dicts and every
// load_state_dict error, train/eval, to(), zero_grad, apply, and the printed summary.
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kiln/autograd/node.h"
#include "kiln/layers/nn.h"

using namespace kiln;

namespace {

// conv (no bias) -> batch norm -> relu: a child with buffers, nested one level down.
struct Block : nn::Module {
  Block() {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 4, 3).padding(1).bias(false)));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
  }
  Tensor forward(const Tensor& x) override { return relu(bn->forward(conv->forward(x))); }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
};

// A parameter and a buffer of its own, before and between its children.
struct Net : nn::Module {
  Net() {
    scale = register_parameter("scale", ones({1}));
    steps = register_buffer("steps", zeros({}, DType::i32));
    block = register_module("block", std::make_shared<Block>());
    head = register_module("head", std::make_shared<nn::Linear>(4, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = block->forward(x).mean({2, 3});  // [N, 4]
    return head->forward(h * scale);
  }
  Tensor scale, steps;
  std::shared_ptr<Block> block;
  std::shared_ptr<nn::Linear> head;
};

std::vector<std::string> names(const NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [name, t] : list) out.push_back(name);
  return out;
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace

TEST_CASE("parameters, buffers and children keep registration order and PyTorch's dotted names") {
  Net net;
  CHECK(names(net.named_parameters()) ==
        std::vector<std::string>{"scale", "block.conv.weight", "block.bn.weight", "block.bn.bias", "head.weight",
                                 "head.bias"});
  CHECK(names(net.named_parameters(false)) == std::vector<std::string>{"scale"});
  CHECK(names(net.named_buffers()) == std::vector<std::string>{"steps", "block.bn.running_mean",
                                                               "block.bn.running_var", "block.bn.num_batches_tracked"});
  // torch.nn.Module.state_dict: each module's parameters, then its buffers, then its children.
  CHECK(names(net.state_dict()) ==
        std::vector<std::string>{"scale", "steps", "block.conv.weight", "block.bn.weight", "block.bn.bias",
                                 "block.bn.running_mean", "block.bn.running_var", "block.bn.num_batches_tracked",
                                 "head.weight", "head.bias"});
  REQUIRE(net.named_children().size() == 2);
  CHECK(net.named_children()[0].first == "block");
  CHECK(net.children()[1] == net.head);

  // parameters() hands out the modules' own handles: what an optimizer updates in place.
  std::vector<Tensor> params = net.parameters();
  REQUIRE(params.size() == 6);
  CHECK(params[0].impl() == net.scale.impl());
  CHECK(params[1].impl() == net.block->conv->weight.impl());
  CHECK(params[5].impl() == net.head->bias.impl());
  for (const Tensor& p : params) {
    CHECK(p.requires_grad());
    CHECK(p.is_leaf());
  }
  for (const Tensor& b : net.buffers()) CHECK_FALSE(b.requires_grad());
  CHECK(net.block->bn->num_batches_tracked.dtype() == DType::i32);
  CHECK(net.block->bn->num_batches_tracked.dim() == 0);
}

TEST_CASE("Sequential runs a Linear or Conv2d and the ReLU after it as one kernel, to the bit, subclasses apart") {
  // Fused: Conv2d + ReLU, Linear + ReLU; not: the ReLU after Flatten, a subclass of Linear.
  struct Doubled : nn::Linear {
    using nn::Linear::Linear;
    Tensor forward(const Tensor& x) override { return nn::Linear::forward(x) * 2.0; }
  };
  auto conv = std::make_shared<nn::Conv2d>(nn::Conv2dOptions(2, 3, 3));
  auto fc = std::make_shared<nn::Linear>(3 * 4 * 4, 8);
  auto doubled = std::make_shared<Doubled>(nn::LinearOptions(8, 5));
  nn::Sequential seq(conv, nn::ReLU(), nn::Flatten(), nn::ReLU(), fc, nn::ReLU(), doubled, nn::ReLU());
  Tensor x = uniform({4, 2, 6, 6}, -1, 1).requires_grad_();
  Tensor y = seq.forward(x);
  sum(y * y).backward();
  const Tensor gx = x.grad().clone();
  std::vector<Tensor> grads;
  for (const Tensor& p : seq.parameters()) grads.push_back(p.grad().clone());
  seq.zero_grad();
  x.zero_grad();
  // The same chain by hand, each ReLU an op of its own.
  Tensor want = relu(doubled->forward(relu(fc->forward(relu(flatten(relu(conv->forward(x)), 1))))));
  CHECK(values(y) == values(want));
  sum(want * want).backward();
  CHECK(values(x.grad()) == values(gx));
  const std::vector<Tensor> params = seq.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    CHECK_MESSAGE(values(params[i].grad()) == values(grads[i]), "parameter " << i);
  // the pair is one op in the graph: the matmul with its epilogue, no relu after it
  nn::Sequential pair(nn::Linear(3, 4), nn::ReLU());
  CHECK(autograd::node_of(pair.forward(uniform({2, 3}, -1, 1)))->op == "matmul_epilogue");
}

TEST_CASE("Sequential names its modules by position") {
  nn::Sequential seq(nn::Linear(3, 4), nn::ReLU(), std::make_shared<nn::Linear>(4, 2, false));
  seq.push_back("out", std::make_shared<nn::Tanh>());
  CHECK(seq.size() == 4);
  CHECK(names(seq.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias", "2.weight"});
  CHECK(seq.named_children()[3].first == "out");
  CHECK(seq[1]->name() == "ReLU");
  Tensor y = seq(ones({5, 3}));
  CHECK(y.shape() == Shape{5, 2});
  // The same chain by hand.
  auto first = std::dynamic_pointer_cast<nn::Linear>(seq[0]);
  auto second = std::dynamic_pointer_cast<nn::Linear>(seq[2]);
  Tensor expected = tanh(second->forward(relu(first->forward(ones({5, 3})))));
  CHECK(values(y) == values(expected));
}

TEST_CASE("registration rules") {
  nn::Module m;
  Tensor w = m.register_parameter("w", zeros({2}));
  CHECK(w.requires_grad());
  CHECK_THROWS_AS(m.register_parameter("w", zeros({2})), ValueError);   // taken
  CHECK_THROWS_AS(m.register_buffer("w", zeros({2})), ValueError);      // taken, by another kind
  CHECK_THROWS_AS(m.register_parameter("a.b", zeros({2})), ValueError);  // dots separate levels
  CHECK_THROWS_AS(m.register_parameter("", zeros({2})), ValueError);
  CHECK_THROWS_AS(m.register_parameter("u", Tensor()), ValueError);
  CHECK_THROWS_AS(m.register_parameter("i", zeros({2}, DType::i32)), DTypeError);  // gradients need floats
  CHECK_THROWS_AS(m.register_module("null", std::shared_ptr<nn::Linear>()), ValueError);
  CHECK_FALSE(m.register_parameter("frozen", zeros({2}), false).requires_grad());

  // An op's result becomes a leaf that shares its data.
  Tensor base = ones({2}, TensorOptions().requires_grad());
  Tensor derived = base * 2.0;
  Tensor p = m.register_parameter("p", derived);
  CHECK(p.is_leaf());
  CHECK(p.storage() == derived.storage());

  // A tensor registered twice (tied weights) is one parameter, under its first name.
  nn::Module tied;
  Tensor shared = tied.register_parameter("encoder", zeros({3}));
  tied.register_parameter("decoder", shared);
  CHECK(names(tied.named_parameters()) == std::vector<std::string>{"encoder"});
  CHECK(names(tied.state_dict()) == std::vector<std::string>{"encoder", "decoder"});
}

TEST_CASE("state_dict round trip copies values into the existing tensors") {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  CHECK(values(a.head->weight) != values(b.head->weight));
  a.block->bn->running_mean.fill_(0.5);
  a.steps.fill_(7);

  Tensor handle = b.head->weight;
  b.load_state_dict(a.state_dict());
  CHECK(b.head->weight.impl() == handle.impl());  // loaded in place
  nn::StateDict sa = a.state_dict(), sb = b.state_dict();
  for (size_t i = 0; i < sa.size(); ++i) CHECK_MESSAGE(values(sa[i].second) == values(sb[i].second), sa[i].first);
  CHECK(b.steps.item() == 7);
  CHECK(b.steps.dtype() == DType::i32);

  // The loaded values are copies; the state dict's tensors are views of the model.
  {
    NoGradGuard no_grad;  // parameters are written in place only under it
    a.head->weight.fill_(3.0);
  }
  CHECK(values(b.head->weight) != values(a.head->weight));
  b.state_dict()[0].second.fill_(4.0);  // "scale"
  CHECK(b.scale.item() == 4.0);
  CHECK_FALSE(sa[0].second.requires_grad());  // detached

  // Floating dtypes convert (an f64 checkpoint into an f32 model, as PyTorch's copy_).
  nn::StateDict wide = a.state_dict();
  for (auto& [key, t] : wide)
    if (is_floating(t.dtype())) t = t.to(DType::f64);
  b.load_state_dict(wide);
  CHECK(b.head->weight.dtype() == DType::f32);
  CHECK(values(b.head->weight) == values(a.head->weight));
}

TEST_CASE("load_state_dict names every problem and loads nothing when there is one") {
  Net net;
  auto message = [&](const nn::StateDict& state, bool strict = true) -> std::string {
    try {
      net.load_state_dict(state, strict);
    } catch (const ValueError& e) {
      return e.what();
    }
    return "no error";
  };
  auto without = [&](const std::string& key) {
    nn::StateDict s = net.state_dict();
    std::erase_if(s, [&](const auto& e) { return e.first == key; });
    return s;
  };
  auto replaced = [&](const std::string& key, const Tensor& t) {
    nn::StateDict s = net.state_dict();
    for (auto& e : s)
      if (e.first == key) e.second = t;
    return s;
  };

  CHECK(message(without("head.bias")).find("missing key 'head.bias'") != std::string::npos);
  nn::StateDict extra = net.state_dict();
  extra.emplace_back("head.gain", ones({3}));
  CHECK(message(extra).find("unexpected key 'head.gain'") != std::string::npos);
  CHECK(message(replaced("head.weight", ones({3, 5}))).find(
            "shape mismatch for 'head.weight': the state has [3, 5], the model [3, 4]") != std::string::npos);
  CHECK(message(replaced("block.bn.num_batches_tracked", scalar(1.0))).find(
            "dtype mismatch for 'block.bn.num_batches_tracked': the state has f32, the model i32") !=
        std::string::npos);
  nn::StateDict twice = net.state_dict();
  twice.push_back(twice[0]);
  CHECK(message(twice).find("key 'scale' appears twice") != std::string::npos);

  // All problems at once, and the model untouched: scale would have been loaded first.
  nn::StateDict bad = replaced("scale", full({1}, 9.0));
  bad.erase(bad.begin() + 2);  // block.conv.weight
  bad.emplace_back("tail", ones({1}));
  std::string all = message(bad);
  CHECK(all.find("2 problems loading into Net") != std::string::npos);
  CHECK(all.find("missing key 'block.conv.weight'") != std::string::npos);
  CHECK(all.find("unexpected key 'tail'") != std::string::npos);
  CHECK(net.scale.item() == 1.0);

  // strict=false ignores missing and unexpected keys, loads the rest, but never a wrong shape.
  CHECK(message(bad, false) == "no error");
  CHECK(net.scale.item() == 9.0);
  CHECK(message(replaced("head.weight", ones({4, 3})), false).find("shape mismatch") != std::string::npos);
}

TEST_CASE("train and eval reach every descendant") {
  Net net;
  CHECK(net.is_training());
  net.eval();
  CHECK_FALSE(net.is_training());
  CHECK_FALSE(net.block->is_training());
  CHECK_FALSE(net.block->bn->is_training());
  net.train();
  CHECK(net.block->conv->is_training());
}

TEST_CASE("Dropout is the identity in evaluation and drops in training") {
  nn::Sequential seq(nn::Dropout(0.5));
  Tensor x = ones({1000});
  seq.eval();
  CHECK(values(seq(x)) == values(x));
  seq.train();
  manual_seed(0);
  std::vector<double> y = values(seq(x));
  size_t zeros_seen = 0;
  for (double v : y) {
    CHECK((v == 0.0 || v == 2.0));
    zeros_seen += v == 0.0;
  }
  CHECK(zeros_seen > 400);
  CHECK(zeros_seen < 600);
  CHECK_THROWS_AS(nn::Dropout(1.5), ValueError);
}

TEST_CASE("BatchNorm: batch statistics in training, running statistics in evaluation") {
  nn::BatchNorm1d bn(nn::BatchNormOptions(2).momentum(0.5));
  Tensor x = from_vector<float>({1, 10, 3, 20, 5, 30}, {3, 2});  // channel 0: 1 3 5, channel 1: 10 20 30
  Tensor y = bn(x);
  // Normalised per channel with the biased batch variance: (x - mean) / sqrt(var + eps).
  CHECK(y.to_vector<float>()[0] == doctest::Approx(-1.2247).epsilon(1e-3));
  CHECK(bn.num_batches_tracked.item() == 1);
  // running = 0.5 * initial + 0.5 * batch statistic (unbiased variance: 4 and 100).
  CHECK(values(bn.running_mean) == std::vector<double>{1.5, 10});
  CHECK(values(bn.running_var) == std::vector<double>{2.5, 50.5});

  bn.eval();
  Tensor z = bn(from_vector<float>({1.5, 10}, {1, 2}));  // the running mean maps to 0
  CHECK(z.to_vector<float>()[0] == doctest::Approx(0.0));
  CHECK(z.to_vector<float>()[1] == doctest::Approx(0.0));
  CHECK(bn.num_batches_tracked.item() == 1);  // evaluation does not count
  CHECK(values(bn.running_mean) == std::vector<double>{1.5, 10});

  // Without running statistics, batch statistics are used in evaluation too.
  nn::BatchNorm1d plain(nn::BatchNormOptions(2).track_running_stats(false).affine(false));
  CHECK(plain.named_buffers().empty());
  CHECK(plain.parameters().empty());
  plain.eval();
  CHECK(plain(x).to_vector<float>()[0] == doctest::Approx(-1.2247).epsilon(1e-3));

  CHECK_THROWS_AS(bn(zeros({2, 3})), ShapeError);        // 3 channels for 2
  CHECK_THROWS_AS(nn::BatchNorm2d(2)(zeros({2, 2})), ShapeError);  // wants [N, C, H, W]
}

TEST_CASE("to(dtype) converts in place: handles, gradients and integer buffers") {
  Net net;
  Tensor w = net.head->weight;
  std::vector<Tensor> params = net.parameters();
  Tensor x = uniform({2, 2, 5, 5});
  net(x).sum().backward();
  std::vector<double> grad_before = values(w.grad());

  net.to(DType::f64);
  CHECK(w.dtype() == DType::f64);
  for (const Tensor& p : params) CHECK(p.dtype() == DType::f64);
  CHECK(net.block->bn->running_var.dtype() == DType::f64);
  CHECK(net.block->bn->num_batches_tracked.dtype() == DType::i32);
  CHECK(net.steps.dtype() == DType::i32);
  CHECK(w.grad().dtype() == DType::f64);
  CHECK(values(w.grad()) == grad_before);

  net.zero_grad();
  CHECK_FALSE(w.grad().defined());
  net(x.to(DType::f64)).sum().backward();
  for (const Tensor& p : params) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::f64);
  }
  CHECK_THROWS_AS(net.to(DType::i32), DTypeError);

  net.to(Device::cpu());  // already there: nothing changes
  CHECK(w.device() == Device::cpu());
  CHECK(w.dtype() == DType::f64);
}

TEST_CASE("apply visits every module, children first") {
  Net net;
  std::vector<std::string> seen;
  net.apply([&](nn::Module& m) { seen.push_back(m.name()); });
  CHECK(seen == std::vector<std::string>{"Conv2d", "BatchNorm2d", "Block", "Linear", "Net"});
}

TEST_CASE("forward: one tensor by default, losses take two") {
  nn::Module plain;
  CHECK_THROWS_AS(plain.forward(ones({1})), Error);
  nn::MSELoss loss;
  nn::Module& as_module = loss;  // as a Sequential would call it
  try {
    as_module(ones({1}));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("MSELoss has no forward(const Tensor&): it takes other inputs") !=
          std::string::npos);
  }
  CHECK(loss(ones({2}), zeros({2})).item() == 1.0);
}

TEST_CASE("summary prints the tree, each layer's parameters and the total") {
  Net net;
  std::string expected =
      "Net(\n"
      "  (scale): Parameter                                                                       1  scale [1]\n"
      "  (block): Block(\n"
      "    (conv): Conv2d(2, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=false)   72  weight [4, 2, 3, 3]\n"
      "    (bn): BatchNorm2d(4, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)   8  weight [4], bias [4]\n"
      "  )\n"
      "  (head): Linear(in_features=4, out_features=3, bias=true)                                15  weight [3, 4], bias [3]\n"
      ")\n"
      "Total parameters: 96\n";
  CHECK(net.summary() == expected);
  std::ostringstream out;
  out << net;
  CHECK(out.str() == expected);

  nn::Sequential seq(nn::Flatten(), nn::Linear(4, 2), nn::LeakyReLU(0.2), nn::Dropout(0.25), nn::MaxPool2d(2),
                     nn::AvgPool2d(nn::AvgPool2dOptions(3).stride(1).count_include_pad(false)),
                     nn::CrossEntropyLoss());
  seq.register_parameter("frozen", zeros({5}), false);
  CHECK(seq.summary() ==
        "Sequential(\n"
        "  (frozen): Parameter                                     5  frozen [5] (frozen)\n"
        "  (0): Flatten(start_dim=1, end_dim=-1)\n"
        "  (1): Linear(in_features=4, out_features=2, bias=true)  10  weight [2, 4], bias [2]\n"
        "  (2): LeakyReLU(negative_slope=0.2)\n"
        "  (3): Dropout(p=0.25)\n"
        "  (4): MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))\n"
        "  (5): AvgPool2d(kernel_size=(3, 3), stride=(1, 1), padding=(0, 0), count_include_pad=false)\n"
        "  (6): CrossEntropyLoss(reduction=mean, label_smoothing=0)\n"
        ")\n"
        "Total parameters: 15 (trainable: 10)\n");
}
