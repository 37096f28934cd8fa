// The autograd engine: accumulation, graph lifetime, grad mode, detach, leaf hooks, queued
// callbacks and its errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
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
