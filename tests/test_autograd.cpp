// The autograd engine: accumulation, graph lifetime, grad mode, detach, leaf hooks, queued
// callbacks, the version counters that catch saved tensors written in place, and its errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;

namespace {
Tensor leaf(std::vector<double> v, const Shape& shape) {
  return from_vector<double>(v, shape, TensorOptions(DType::f64).requires_grad());
}
std::vector<double> grad_of(const Tensor& t) { return t.grad().to_vector<double>(); }
Tensor random(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return uniform(shape, -1.0, 1.0, Device::cpu(), &gen);
}
}  // namespace

TEST_CASE("backward of a scalar fills the leaves' gradients") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = (x * x).sum();  // dy/dx = 2x
  y.backward();
  CHECK(grad_of(x) == std::vector<double>{2, 4, 6});
  CHECK(y.grad_fn()->op == "sum");
  CHECK_FALSE(y.is_leaf());
  CHECK(x.is_leaf());
}

TEST_CASE("gradients accumulate across backward calls until zero_grad") {
  Tensor x = leaf({1, 2}, {2});
  (x * 3.0).sum().backward();
  (x * 3.0).sum().backward();
  CHECK(grad_of(x) == std::vector<double>{6, 6});
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  (x * 2.0).sum().backward();
  CHECK(grad_of(x) == std::vector<double>{2, 2});
}

TEST_CASE("a tensor used twice receives the sum of both paths") {
  Tensor x = leaf({2}, {1});
  Tensor y = x * x + x;  // dy/dx = 2x + 1
  y.sum().backward();
  CHECK(grad_of(x) == std::vector<double>{5});
}

TEST_CASE("the first gradient stored in a leaf does not alias other tensors") {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = leaf({3, 4}, {2});
  (a + b).sum().backward();  // the same gradient tensor flows to both
  a.grad().fill_(100.0);
  CHECK(grad_of(b) == std::vector<double>{1, 1});
}

TEST_CASE("the graph is freed after backward unless retained") {
  Tensor x = leaf({1}, {1});
  Tensor y = (x * x).sum();
  y.backward({}, true);
  y.backward();
  CHECK(grad_of(x) == std::vector<double>{4});
  CHECK_THROWS_AS(y.backward(), AutogradError);
}

TEST_CASE("backward takes an explicit gradient for non-scalars") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = x * 2.0;
  CHECK_THROWS_AS(y.backward(), AutogradError);
  y.backward(from_vector<double>({1, 10, 100}, {3}));
  CHECK(grad_of(x) == std::vector<double>{2, 20, 200});
  CHECK_THROWS_AS((x * 2.0).backward(zeros({2}, DType::f64)), ShapeError);
}

TEST_CASE("NoGradGuard and detach cut the graph") {
  Tensor x = leaf({1, 2}, {2});
  {
    NoGradGuard guard;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
  }
  CHECK((x * 2.0).requires_grad());
  Tensor d = x.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.storage() == x.storage());
  Tensor y = (x * d).sum();  // d is a constant: dy/dx = d
  y.backward();
  CHECK(grad_of(x) == std::vector<double>{1, 2});
  CHECK_THROWS_AS(zeros({2}).sum().backward(), AutogradError);
  CHECK_THROWS_AS((x * 2.0).requires_grad_(), AutogradError);
  CHECK_THROWS_AS(zeros({2}, DType::i32).requires_grad_(), DTypeError);
}

TEST_CASE("gradients flow through views into the base") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = x.t().slice(0, 1, 3).reshape({-1});  // x[:, 1:3] transposed, flattened
  (y * from_vector<double>({1, 2, 3, 4}, {4}, DType::f64)).sum().backward();
  CHECK(grad_of(x) == std::vector<double>{0, 1, 3, 0, 2, 4});
}

TEST_CASE("only inputs that need a gradient get one") {
  Tensor w = leaf({1, 2, 3, 4}, {2, 2});
  Tensor x = from_vector<double>({1, 1}, {1, 2}, DType::f64);
  matmul(x, w).sum().backward();
  CHECK(grad_of(w) == std::vector<double>{1, 1, 1, 1});
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("a loss's seed of ones is made once and never written, whatever keeps or adds to it") {
  // backward without a gradient seeds with ones of the loss's shape, kept from call to call: a
  // leaf that receives it as it is keeps a copy, and later gradients add into that copy
  Tensor s = leaf({5}, {1});
  for (int i = 1; i <= 3; ++i) {
    s.reshape({}).backward();  // the view's gradient is the seed itself, reshaped
    CHECK(grad_of(s) == std::vector<double>{static_cast<double>(i)});
  }
  Tensor x = leaf({2}, {});
  x.backward();
  x.backward();  // a leaf as the root: its own seed, added twice
  CHECK(grad_of(x) == std::vector<double>{2});
  Tensor w = leaf({1, 2, 3}, {3});
  (w * w).sum().backward();
  CHECK(grad_of(w) == std::vector<double>{2, 4, 6});
  // and the seed a new loss gets is still ones
  Tensor z = leaf({4}, {1});
  (z * 3.0).reshape({}).backward();
  CHECK(grad_of(z) == std::vector<double>{3});
}

TEST_CASE("relu's gradient is applied once: by the op after it where that op folds it in, else by its own node") {
  // probe(x): x's values, recorded as a node whose formula starts with relu's gradient (as relu's
  // and a ReLU epilogue's do); it notes whether the gradient reaching it came masked already
  struct Seen {
    bool reached = false, masked = false;
  };
  auto probe = [](const Tensor& x, Seen& seen) {
    Tensor y = x.detach().clone();
    autograd::record(y, "probe", {x}, [&seen](const Tensor& g, const autograd::Needed& need) -> autograd::Grads {
      seen.reached = true;
      seen.masked = need.grad_masked();
      return {g};
    });
    autograd::node_of(y)->relu_output = true;
    return y;
  };
  const Tensor w = random({3, 2, 3, 3}, 2).requires_grad_(), frozen = random({3, 2, 3, 3}, 3);
  const Pool2dConfig k2{.kernel = {2, 2}};
  auto masked = [&](const std::function<Tensor(const Tensor&)>& after) {
    Tensor x = random({2, 2, 6, 6}, 1).requires_grad_();
    Seen seen;
    after(probe(x, seen)).sum().backward();
    CHECK(seen.reached);
    return seen.masked;
  };
  CHECK(masked([&](const Tensor& y) { return max_pool2d(y, k2); }));
  // a convolution folds it only where the backend's input-gradient kernel does (CUDA's bf16
  // version 9), not on the CPU: there the node masks (or hands it to its own weight kernel)
  CHECK_FALSE(masked([&](const Tensor& y) { return conv2d(y, w, {}, {}); }));
  CHECK_FALSE(masked([&](const Tensor& y) { return max_pool2d(y, k2).sum() + conv2d(y, w, {}, {}).sum(); }));
  // two consumers that both fold it
  CHECK(masked([&](const Tensor& y) { return max_pool2d(y, k2).sum() + max_pool2d(y, {.kernel = {3, 3}}).sum(); }));
  Generator gen(12);
  CHECK(masked([&](const Tensor& y) { return dropout(y, 0.5, true, &gen); }));
  // a consumer that does not fold it: the node masks the sum (masking twice is masking once)
  CHECK_FALSE(masked([&](const Tensor& y) { return max_pool2d(y, k2).sum() + y.sum(); }));
  CHECK_FALSE(masked([&](const Tensor& y) { return y * 2.0; }));
  // a view between: the pool's input is the view's output, not the probe's
  CHECK_FALSE(masked([&](const Tensor& y) { return max_pool2d(y.reshape({2, 2, 6, 6}), k2); }));
  // a weight that wants no gradient: the convolution keeps no x to mask with
  CHECK_FALSE(masked([&](const Tensor& y) { return conv2d(y, frozen, {}, {}); }));
  // the root itself: its seed comes unmasked
  Tensor x = random({4}, 4).requires_grad_();
  Seen seen;
  probe(x, seen).backward(random({4}, 5));
  CHECK((seen.reached && !seen.masked));
}

TEST_CASE("folding relu's gradient into the pool, dropout and the convolution after it gives the same bits") {
  // relu (an op, and a conv2d's epilogue) feeding max_pool2d, dropout and a second conv2d, against
  // the same graph with a view after each relu (no folding there), in f32 and f64
  for (DType t : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(t));
    Tensor x = random({3, 2, 10, 10}, 6).to(t), g = random({3, 4, 4, 4}, 7).to(t);
    auto grads = [&](bool fold) {
      Tensor w1 = random({5, 2, 3, 3}, 8).to(t).requires_grad_(), b1 = random({5}, 9).to(t).requires_grad_();
      Tensor w2 = random({4, 5, 3, 3}, 10).to(t).requires_grad_(), xl = x.detach().requires_grad_();
      auto cut = [fold](const Tensor& y) { return fold ? y : y.reshape(y.shape()); };
      Tensor h = cut(conv2d(relu(cut(relu(xl))), w1, b1, {}, Activation::relu));  // [3, 5, 8, 8]
      Generator gen(13);  // the same dropout mask in both graphs
      Tensor pooled = dropout(cut(relu(max_pool2d(h, {.kernel = {2, 2}}))), 0.25, true, &gen);
      Tensor out = conv2d(cut(relu(pooled)), w2, {}, {.padding = {1, 1}});
      (out * g).sum().backward();
      std::vector<std::vector<double>> all;
      for (const Tensor& p : {xl, w1, b1, w2}) all.push_back(p.grad().to(DType::f64).to_vector<double>());
      return all;
    };
    CHECK(grads(true) == grads(false));
  }
}

TEST_CASE("a deep chain does not overflow the stack") {
  Tensor x = leaf({1}, {1});
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y + 0.0;
  y.sum().backward();
  CHECK(grad_of(x) == std::vector<double>{1});
}

// ---- post-accumulate-grad hooks and queued callbacks (what data-parallel training needs) ----

TEST_CASE("a leaf's hook fires once per backward and sees its final gradient") {
  Tensor w = leaf({1, 2}, {2});
  Tensor x = from_vector<double>({10, 20}, {2}, DType::f64);
  int calls = 0;
  std::vector<double> seen;
  bool grad_mode_in_hook = true;
  w.register_post_accumulate_grad_hook([&](const Tensor& t) {
    ++calls;
    CHECK(t.impl() == w.impl());
    seen = t.grad().to_vector<double>();
    grad_mode_in_hook = autograd::is_grad_enabled();
  });
  ((w * x).sum() + (w * w).sum()).backward();  // two ops use w: dy/dw = x + 2w
  CHECK(calls == 1);
  CHECK(seen == std::vector<double>{12, 24});
  CHECK(grad_of(w) == seen);
  CHECK_FALSE(grad_mode_in_hook);

  (w * w).sum().backward();  // one node with both edges into w: still once; the sum accumulates
  CHECK(calls == 2);
  CHECK(seen == std::vector<double>{14, 28});
}

TEST_CASE("a leaf's hooks run in registration order; a root leaf fires too") {
  Tensor x = leaf({3}, {1});
  std::vector<int> log;
  x.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back(1); });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back(2); });
  x.backward();
  CHECK(log == std::vector<int>{1, 2});
  CHECK(grad_of(x) == std::vector<double>{1});
}

TEST_CASE("the parameters of an MLP fire last layer first") {
  Tensor x = from_vector<double>({1, -2, 3, 0.5, 1, -1}, {2, 3}, DType::f64);
  Tensor w1 = leaf({0.1, 0.2, -0.3, 0.4, 0.5, 0.6, -0.7, 0.8, 0.9, 0.1, 0.2, 0.3}, {3, 4});
  Tensor b1 = leaf({0.1, 0.1, 0.1, 0.1}, {4});
  Tensor w2 = leaf({1, -1, 0.5, 2}, {4, 1});
  Tensor b2 = leaf({0.5}, {1});
  std::vector<std::string> order;
  std::vector<std::pair<std::string, Tensor>> params{{"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}};
  for (auto& [name, p] : params)
    p.register_post_accumulate_grad_hook([&order, n = name](const Tensor& t) {
      CHECK(t.grad().defined());
      order.push_back(n);
    });
  Tensor h = relu(matmul(x, w1) + b1);
  Tensor loss = (matmul(h, w2) + b2).sum();
  loss.backward();
  CHECK(order == std::vector<std::string>{"b2", "w2", "b1", "w1"});
}

TEST_CASE("leaves the walk does not reach, or reaches only through a cut path, do not fire") {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = leaf({3, 4}, {2});
  Tensor unused = leaf({5}, {1});
  std::vector<std::string> log;
  a.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("a"); });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("b"); });
  unused.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("unused"); });
  Tensor cut = (b * 3.0 + a).detach();  // b's path (and a second one of a's) stops here
  (a * cut).sum().backward();           // d/da = cut = 3b + a
  CHECK(log == std::vector<std::string>{"a"});
  CHECK(grad_of(a) == std::vector<double>{10, 14});
  CHECK_FALSE(b.grad().defined());
  CHECK_FALSE(unused.grad().defined());
}

TEST_CASE("a removed hook no longer fires; removing twice is a no-op") {
  Tensor x = leaf({1}, {1});
  int first = 0, second = 0;
  uint64_t h1 = x.register_post_accumulate_grad_hook([&](const Tensor&) { ++first; });
  uint64_t h2 = x.register_post_accumulate_grad_hook([&](const Tensor&) { ++second; });
  CHECK(h1 != h2);
  (x * 2.0).sum().backward();
  x.remove_post_accumulate_grad_hook(h1);
  x.remove_post_accumulate_grad_hook(h1);
  (x * 2.0).sum().backward();
  CHECK(first == 1);
  CHECK(second == 2);
}

TEST_CASE("hooks only go on leaves that require grad") {
  Tensor x = leaf({1}, {1});
  auto hook = [](const Tensor&) {};
  CHECK_THROWS_AS((x * 2.0).register_post_accumulate_grad_hook(hook), AutogradError);
  CHECK_THROWS_AS(zeros({2}).register_post_accumulate_grad_hook(hook), AutogradError);
  CHECK_THROWS_AS(Tensor().register_post_accumulate_grad_hook(hook), ValueError);
}

TEST_CASE("queued callbacks run once, after every hook, before backward returns") {
  Tensor a = leaf({1}, {1});
  Tensor b = leaf({2}, {1});
  std::vector<std::string> log;
  a.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("a"); });
  b.register_post_accumulate_grad_hook([&](const Tensor&) {
    log.push_back("b");
    autograd::queue_callback([&] {
      log.push_back("cb1");
      autograd::queue_callback([&] { log.push_back("cb2"); });  // queued by a callback: runs too
    });
  });
  (a * 2.0 + b * 3.0).sum().backward();
  REQUIRE(log.size() == 4);
  CHECK(std::vector<std::string>(log.end() - 2, log.end()) == std::vector<std::string>{"cb1", "cb2"});
  CHECK(std::count(log.begin(), log.end(), "a") == 1);
  CHECK(std::count(log.begin(), log.end(), "b") == 1);
  log.clear();
  (a * 2.0).sum().backward();  // the queue does not outlive its backward
  CHECK(log == std::vector<std::string>{"a"});
  CHECK_THROWS_AS(autograd::queue_callback([] {}), AutogradError);
}

TEST_CASE("a backward inside a hook keeps its own callback queue") {
  Tensor a = leaf({1}, {1});
  Tensor v = leaf({1}, {1});
  Tensor inner = (v * 2.0).sum();  // built with grad mode on; hooks run with it off
  std::vector<std::string> log;
  v.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([&] { log.push_back("inner callback"); });
  });
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([&] { log.push_back("outer callback"); });
    inner.backward();
    log.push_back("inner backward returned");
  });
  (a * 3.0).sum().backward();
  CHECK(log == std::vector<std::string>{"inner callback", "inner backward returned", "outer callback"});
  CHECK(grad_of(v) == std::vector<double>{2});
}

TEST_CASE("with retain_graph, each backward fires the hooks again") {
  Tensor x = leaf({1, 2}, {2});
  std::vector<std::vector<double>> seen;
  x.register_post_accumulate_grad_hook([&](const Tensor& t) { seen.push_back(t.grad().to_vector<double>()); });
  Tensor y = (x * x).sum();
  y.backward({}, true);
  y.backward();
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == std::vector<double>{2, 4});
  CHECK(seen[1] == std::vector<double>{4, 8});
}

TEST_CASE("an exception from a hook propagates, drops the queued callbacks, and the next backward works") {
  Tensor a = leaf({1}, {1});
  Tensor b = leaf({2}, {1});
  bool callback_ran = false;
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([&] { callback_ran = true; });
  });
  uint64_t failing = b.register_post_accumulate_grad_hook([](const Tensor&) -> void {
    throw ValueError("hook failed");
  });
  CHECK_THROWS_AS((a + b * 2.0).sum().backward(), ValueError);
  CHECK_FALSE(callback_ran);
  CHECK_THROWS_AS(autograd::queue_callback([] {}), AutogradError);  // no queue left behind

  b.remove_post_accumulate_grad_hook(failing);
  a.zero_grad();
  b.zero_grad();
  (a + b * 2.0).sum().backward();
  CHECK(callback_ran);
  CHECK(grad_of(a) == std::vector<double>{1});
  CHECK(grad_of(b) == std::vector<double>{2});
}

TEST_CASE("hook bookkeeping stays linear in a deep graph") {
  Tensor x = leaf({1}, {1});
  Tensor w = leaf({1}, {1});
  int calls = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor& t) {
    ++calls;
    CHECK(t.grad().item() == doctest::Approx(20000));
  });
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y + w;  // 20000 edges into w
  y.sum().backward();
  CHECK(calls == 1);
}

TEST_CASE("gradients coming back through conversions into leaves arrive with the values of one at a time") {
  // A model under autocast casts each parameter to bf16; backward converts those gradients back
  // together at the end of its walk (one launch on CUDA: test_cuda_mixed_precision), except into
  // a leaf with a hook, which must see its gradient as soon as it is final. Here: f32 and f64
  // leaves, one also used uncast, one transposed after its cast (as a Linear layer's weight).
  auto run = [](bool hooks, bool anomaly, bool retain) {
    DetectAnomalyGuard detect;
    autograd::set_detect_anomaly(anomaly);
    Tensor a = random({3, 4}, 1).requires_grad_(), b = random({4}, 2).requires_grad_();
    Tensor c = random({5}, 3).to(DType::f64).requires_grad_();
    std::vector<Tensor> leaves = {a, b, c};
    int fired = 0;
    if (hooks)
      for (const Tensor& t : leaves) t.register_post_accumulate_grad_hook([&](const Tensor&) { ++fired; });
    std::vector<Tensor> low = to_dtype(std::vector<Tensor>{a, b}, DType::bf16);
    Tensor c32 = to_dtype(c, DType::f32);
    Tensor x = random({2, 3}, 4).to(DType::bf16);
    Tensor y = matmul(x, low[0]) * low[1];  // [2, 4]
    Tensor loss = y.to(DType::f32).sum() + (a * a).sum() + (c32 * c32).sum() + low[0].t().to(DType::f32).sum();
    loss.backward({}, retain);
    if (retain) loss.backward();
    CHECK(fired == (hooks ? (retain ? 6 : 3) : 0));
    std::vector<std::vector<double>> grads;
    for (const Tensor& t : leaves) {
      CHECK(t.grad().dtype() == t.dtype());
      grads.push_back(t.grad().to(DType::f64).to_vector<double>());
    }
    return grads;
  };
  for (bool retain : {false, true}) {
    CAPTURE(retain);
    const auto held = run(false, false, retain);
    CHECK(held == run(true, false, retain));
    CHECK(held == run(false, true, retain));
  }
  // a graph freed by the first backward is refused at the second, conversions and all
  Tensor w = random({3}, 5).requires_grad_();
  Tensor loss = to_dtype(w, DType::bf16).to(DType::f32).sum();
  loss.backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK_THROWS_AS(loss.backward(), AutogradError);
}

TEST_CASE("to_dtype of a list converts each tensor as to_dtype of it alone, in its memory order") {
  const Tensor base = random({4, 6}, 6);
  std::vector<Tensor> xs = {base, base.t(), base.slice(1, 0, 6, 2), base.slice(0, 0, 0), base.to(DType::bf16),
                            from_vector<double>({1.5, -2.25}, {2}, TensorOptions(DType::f64))};
  std::vector<Tensor> ys = to_dtype(xs, DType::bf16);
  REQUIRE(ys.size() == xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    CAPTURE(i);
    const Tensor one = to_dtype(xs[i], DType::bf16);
    CHECK(ys[i].dtype() == DType::bf16);
    CHECK(ys[i].shape() == xs[i].shape());
    CHECK(ys[i].strides() == one.strides());  // the transpose stays a transposed view of its copy
    CHECK(ys[i].to(DType::f32).to_vector<float>() == one.to(DType::f32).to_vector<float>());
  }
  CHECK(ys[1].strides() == Strides{1, 6});
  CHECK(ys[4].storage() == xs[4].storage());  // already bf16: passed through
  CHECK_THROWS_AS(to_dtype(std::vector<Tensor>{base, Tensor()}, DType::bf16), ValueError);
}

TEST_CASE("anomaly mode names the first op whose output or gradient is not finite, with the shapes") {
  Tensor x = leaf({1, 4, 9}, {3});
  CHECK(std::isnan((log(x - 2.0)).to_vector<double>()[0]));  // off: NaN goes on, as in PyTorch
  {
    DetectAnomalyGuard anomaly;
    CHECK(autograd::is_anomaly_enabled());
    CHECK_THROWS_WITH_AS(log(x - 2.0),
                         doctest::Contains("anomaly mode: the forward of 'log' gave 1 NaN or infinite value of 3 in "
                                           "its output ([3] f64) from inputs [3] f64"),
                         NonFiniteError);
    // the input's own NaN is named: the op is where it was first seen, not where it was born
    Tensor nan_in = leaf({1, std::nan(""), 2}, {3});
    CHECK_THROWS_WITH_AS(nan_in * 2.0, doctest::Contains("from inputs [3] f64 holding 1 NaN or infinite"),
                         NonFiniteError);
    // sqrt(0) = 0 is finite; its derivative 1 / (2 sqrt(0)) is not
    Tensor z = leaf({0, 1, 4}, {3});
    Tensor s = sqrt(z).sum();
    CHECK_THROWS_WITH_AS(s.backward(),
                         doctest::Contains("anomaly mode: the backward of 'sqrt' gave 1 NaN or infinite value of 3 in "
                                           "the gradient of its input 0 ([3] f64), from a gradient of its output [3] f64"),
                         NonFiniteError);
    // finite work passes untouched
    Tensor w = leaf({1, 2, 3}, {3});
    (w * w).sum().backward();
    CHECK(grad_of(w) == std::vector<double>{2, 4, 6});
    {
      NoGradGuard no_grad;  // nothing recorded, nothing checked
      CHECK(std::isnan(log(x - 2.0).to_vector<double>()[0]));
    }
  }
  CHECK_FALSE(autograd::is_anomaly_enabled());
  Tensor z = leaf({0, 1}, {2});
  sqrt(z).sum().backward();  // off again: the infinite gradient is stored, unchecked
  CHECK(std::isinf(grad_of(z)[0]));
}

// ---- version counters: a tensor saved for backward and then written in place ----

namespace {
// A message with the parts PyTorch's carries: the op, what the tensor was to it, its shape and dtype,
// and both versions.
doctest::Contains modified(const std::string& op, const std::string& role, const std::string& tensor, int now,
                          int expected) {
  const std::string message = "one of the tensors saved by '" + op + "' for its backward (" + role + ", " + tensor +
                              ") was modified in place: version " + std::to_string(now) + ", expected " +
                              std::to_string(expected);
  return doctest::Contains(message.c_str());
}
}  // namespace

TEST_CASE("a tensor saved for backward and then written in place makes backward refuse, naming it") {
  Tensor a = leaf({0.5, 1, 2}, {3});
  Tensor b = exp(a);  // exp's backward reads its output
  {
    NoGradGuard no_grad;
    b.copy_(b * 2.0);
  }
  CHECK_THROWS_WITH_AS(b.sum().backward(), modified("exp", "its output", "[3] f64", 1, 0),
                       AutogradError);
  CHECK_FALSE(a.grad().defined());  // refused before anything reached the leaf
}

TEST_CASE("every kind of in-place write after the save is caught") {
  // Each write reaches the saved output of exp, through some handle of its storage.
  const std::vector<std::pair<std::string, std::function<void(const Tensor&)>>> writes = {
      {"copy_", [](const Tensor& b) { Tensor(b).copy_(zeros({4}, DType::f64)); }},
      {"copy_ broadcasting", [](const Tensor& b) { Tensor(b).copy_(scalar(3.0, DType::f64)); }},
      {"fill_", [](const Tensor& b) { Tensor(b).fill_(1.0); }},
      {"zero_", [](const Tensor& b) { Tensor(b).zero_(); }},
      {"fill_ through a slice", [](const Tensor& b) { b.slice(0, 1, 2).fill_(7.0); }},
      {"copy_ through a reshaped view", [](const Tensor& b) { b.reshape({2, 2}).t().copy_(ones({2, 2}, DType::f64)); }},
      {"a write that leaves the values as they were", [](const Tensor& b) { Tensor(b).copy_(b.clone()); }},
  };
  for (const auto& entry : writes) {
    const std::string& name = entry.first;  // not a structured binding: clang 14's lambdas (CAPTURE) cannot capture one
    const auto& write = entry.second;
    CAPTURE(name);
    Tensor a = leaf({0, 1, 2, 3}, {4});
    Tensor b = exp(a);
    {
      NoGradGuard no_grad;  // the in-place methods' place: kiln records no node for them
      write(b);
    }
    CHECK_THROWS_WITH_AS(b.sum().backward(), modified("exp", "its output", "[4] f64", 1, 0),
                         AutogradError);
    // Under grad mode, a detached handle (PyTorch's .data) writes the same storage: caught too.
    Tensor c = exp(a);
    write(c.detach());
    CHECK_THROWS_WITH_AS(c.sum().backward(), doctest::Contains("saved by 'exp'"), AutogradError);
  }
}

TEST_CASE("a saved input that needs no gradient, written in place, is caught too") {
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor x = from_vector<double>({4, 5, 6}, {3}, DType::f64);  // data: w's gradient reads it
  Tensor loss = (w * x).sum();
  x.fill_(0.0);  // no gradient of its own, so grad mode lets it be written
  CHECK_THROWS_WITH_AS(loss.backward(), modified("mul", "its input 1", "[3] f64", 1, 0),
                       AutogradError);

  Tensor batch = from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64);
  Tensor m = leaf({1, 0, 0, 1, 1, 1}, {3, 2});
  Tensor out = matmul(batch.slice(0, 0, 1), m).sum();  // saves a view of the first row
  batch.slice(0, 1, 2).fill_(0.0);  // another row of the same storage: one counter for all views
  CHECK_THROWS_WITH_AS(out.backward(), modified("matmul", "its input 0", "[1, 3] f64", 1, 0),
                       AutogradError);
}

TEST_CASE("saved tensors that are not inputs or outputs are named by what they are to the op") {
  Tensor logits = leaf({1, 2, 3, 3, 2, 1}, {2, 3});
  Tensor targets = from_vector<int32_t>({0, 2}, {2});
  Tensor loss = cross_entropy(logits, targets);
  targets.fill_(1);
  CHECK_THROWS_WITH_AS(loss.backward(), modified("cross_entropy", "its targets", "[2] i32", 1, 0),
                       AutogradError);

  Tensor table = leaf({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor rows = from_vector<int32_t>({2, 0}, {2});
  Tensor picked = index_select(table, 0, rows).sum();
  rows.copy_(from_vector<int32_t>({1, 1}, {2}));
  CHECK_THROWS_WITH_AS(picked.backward(), modified("index_select", "its indices", "[2] i32", 1, 0),
                       AutogradError);

  Tensor image = leaf({1, 5, 2, 0, 3, 4, 7, 1, 0, 2, 6, 8, 9, 1, 3, 2}, {1, 1, 4, 4});
  PoolResult pooled = max_pool2d_with_indices(image);
  pooled.indices.zero_();
  CHECK_THROWS_WITH_AS(pooled.values.sum().backward(),
                       modified("max_pool2d", "its indices", "[1, 1, 2, 2] i32", 1, 0),
                       AutogradError);

  Tensor x = leaf({1, -2, 3, -4}, {2, 2});
  Tensor w = leaf({1, 0, 0, 1}, {2, 2});
  Tensor h = matmul(x, w, Tensor(), Activation::relu);  // relu's gradient reads the output
  {
    NoGradGuard no_grad;
    h.fill_(1.0);
  }
  CHECK_THROWS_WITH_AS(h.sum().backward(), modified("matmul_epilogue", "its output", "[2, 2] f64", 1, 0),
                       AutogradError);
}

TEST_CASE("writes before the save, and writes to tensors no formula reads, are fine") {
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor x = from_vector<double>({4, 5, 6}, {3}, DType::f64);
  x.fill_(2.0);  // before the op that saves it
  (w * x).sum().backward();
  CHECK(grad_of(w) == std::vector<double>{2, 2, 2});

  Tensor a = leaf({1, 2}, {2});
  Tensor y = (a * 3.0 + 1.0).sum();  // scalar products and sums read no values
  {
    NoGradGuard no_grad;
    a.fill_(10.0);
  }
  y.backward();
  CHECK(grad_of(a) == std::vector<double>{3, 3});

  // mul reads w only for x's gradient, which x does not want: w is not saved (as in PyTorch)
  Tensor v = leaf({1, 2, 3}, {3});
  Tensor data = from_vector<double>({4, 5, 6}, {3}, DType::f64);
  Tensor loss = (v * data).sum();
  {
    NoGradGuard no_grad;
    v.fill_(0.0);
  }
  loss.backward();
  CHECK(grad_of(v) == std::vector<double>{4, 5, 6});
}

TEST_CASE("views share their storage's version; copies have their own") {
  Tensor t = zeros({2, 3}, DType::f64);
  Tensor slice = t.slice(1, 0, 2);
  Tensor flat = t.reshape({6});
  Tensor copy = t.clone();
  CHECK(t.version() == 0);
  slice.fill_(1.0);
  flat.slice(0, 0, 1).copy_(ones({1}, DType::f64));
  CHECK(t.version() == 2);
  CHECK(slice.version() == 2);
  CHECK(flat.version() == 2);
  CHECK(t.detach().version() == 2);
  CHECK(copy.version() == 0);
  Tensor sum = t + 1.0;  // reading writes nothing
  CHECK(t.version() == 2);
  CHECK(sum.version() == 0);
}

TEST_CASE("in-place writes to a tensor that requires grad are refused while grad mode is on") {
  Tensor a = leaf({1, 2, 3}, {3});
  CHECK_THROWS_WITH_AS(a.fill_(0.0), doctest::Contains("fill_: a leaf tensor that requires grad ([3] f64) cannot be "
                                                       "written in place while grad mode is on"),
                       AutogradError);
  CHECK_THROWS_WITH_AS(a.copy_(zeros({3}, DType::f64)), doctest::Contains("copy_: a leaf tensor"), AutogradError);
  CHECK_THROWS_AS(a.zero_(), AutogradError);
  CHECK_THROWS_WITH_AS(a.slice(0, 0, 1).fill_(0.0), doctest::Contains("the result of 'slice' ([1] f64) requires grad"),
                       AutogradError);
  Tensor b = exp(a);
  CHECK_THROWS_WITH_AS(b.fill_(1.0), doctest::Contains("fill_: the result of 'exp' ([3] f64) requires grad"),
                       AutogradError);
  CHECK(a.to_vector<double>() == std::vector<double>{1, 2, 3});  // refused before writing
  CHECK(a.version() == 0);
  {
    NoGradGuard no_grad;
    a.fill_(0.5);
  }
  CHECK(a.to_vector<double>() == std::vector<double>{0.5, 0.5, 0.5});
  CHECK(a.version() == 1);
}

TEST_CASE("an optimizer's step bumps its parameters' versions; training as usual is unaffected") {
  auto make = [](const std::string& name, const std::vector<Tensor>& params) -> std::unique_ptr<optim::Optimizer> {
    if (name == "SGD") return std::make_unique<optim::SGD>(params, optim::SGDOptions(0.1).momentum(0.9));
    if (name == "Adam") return std::make_unique<optim::Adam>(params);
    if (name == "AdamW") return std::make_unique<optim::AdamW>(params);
    if (name == "RMSprop") return std::make_unique<optim::RMSprop>(params);
    return std::make_unique<optim::Adadelta>(params);
  };
  for (const std::string name : {"SGD", "Adam", "AdamW", "RMSprop", "Adadelta"}) {
    CAPTURE(name);
    Tensor w = leaf({1, -2, 3}, {3});
    Tensor x = from_vector<double>({0.5, 1, 2}, {3}, DType::f64);
    std::unique_ptr<optim::Optimizer> opt = make(name, {w});
    for (int step = 0; step < 3; ++step) {  // zero_grad, forward, backward, step
      opt->zero_grad();
      (w * w * x).sum().backward();
      opt->step();
      CHECK(w.version() == static_cast<uint64_t>(step + 1));
    }
    Tensor pending = (w * w).sum();  // saves w, then the step writes it
    (w * x).sum().backward();
    opt->step();
    CHECK_THROWS_WITH_AS(pending.backward(), modified("mul", "its input 0", "[3] f64", 4, 3),
                         AutogradError);

    // The state a step updates in place (momentum, running averages) is written too.
    Tensor state;
    for (const auto& [key, t] : opt->state_dict())
      if (key.rfind("state.0.", 0) == 0 && key != "state.0.step") state = t;  // the optimizer's own tensor
    REQUIRE(state.defined());
    Tensor z = leaf({1, 1, 1}, {3});
    Tensor uses_state = (z * state).sum();
    opt->step();
    CHECK_THROWS_WITH_AS(uses_state.backward(), doctest::Contains("saved by 'mul' for its backward (its input 1, [3] f64)"),
                         AutogradError);
  }
}

TEST_CASE("gradients written in place (accumulation, clipping) are caught where a graph saved them") {
  Tensor w = leaf({1, 2}, {2});
  Tensor z = leaf({3, 4}, {2});
  (w * 2.0).sum().backward();
  Tensor uses_grad = (z * w.grad()).sum();  // saves w's gradient (for z's)
  (w * 3.0).sum().backward();               // adds into it in place
  CHECK(grad_of(w) == std::vector<double>{5, 5});
  CHECK_THROWS_WITH_AS(uses_grad.backward(), modified("mul", "its input 1", "[2] f64", 1, 0),
                       AutogradError);

  Tensor uses_clipped = (z * w.grad()).sum();
  optim::clip_grad_norm({w}, 1.0);
  CHECK_THROWS_WITH_AS(uses_clipped.backward(), modified("mul", "its input 1", "[2] f64", 2, 1),
                       AutogradError);
}

TEST_CASE("a retained graph is checked at each backward; a freed one lets go of what it saved") {
  Tensor a = leaf({0, 1}, {2});
  Tensor y = exp(a).sum();
  y.backward({}, true);
  y.backward({}, true);  // nothing written between: both run
  CHECK(grad_of(a)[1] == doctest::Approx(2 * std::exp(1.0)));
  {
    NoGradGuard no_grad;
    a.fill_(5.0);  // exp saved its output, not a: no matter
  }
  y.backward({}, true);
  CHECK(grad_of(a)[1] == doctest::Approx(3 * std::exp(1.0)));

  Tensor b = leaf({0, 1}, {2});
  Tensor e = sigmoid(b);
  Tensor z = e.sum();
  z.backward({}, true);
  e.detach().fill_(0.5);
  CHECK_THROWS_WITH_AS(z.backward(), modified("sigmoid", "its output", "[2] f64", 1, 0),
                       AutogradError);

  std::weak_ptr<Storage> saved;
  Tensor loss;
  {
    Tensor out = tanh(b);
    saved = out.storage();
    loss = out.sum();
  }
  CHECK_FALSE(saved.expired());  // tanh's node keeps its output for the gradient
  loss.backward();
  CHECK(saved.expired());
}

TEST_CASE("set_data writes no storage: a graph that saved the old data still holds the forward's values") {
  Tensor w = leaf({1, 2}, {2});
  Tensor y = (w * w).sum();
  w.set_data(from_vector<double>({10, 20}, {2}, DType::f64));
  y.backward();
  CHECK(grad_of(w) == std::vector<double>{2, 4});  // 2 w at the values the forward used
  CHECK(w.version() == 0);
}

TEST_CASE("gradcheck's perturbations of its inputs count as in-place writes") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = (x * x).sum();
  const autograd::GradcheckResult check =
      autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0] * in[0]; }, {x});
  CHECK(check.ok);
  CHECK(x.to_vector<double>() == std::vector<double>{1, 2});  // put back as it was, but written
  CHECK_THROWS_WITH_AS(y.backward(), doctest::Contains("saved by 'mul' for its backward (its input 0, [2] f64)"),
                       AutogradError);
}
