// Tensors, views, broadcasting, factories, printing and the errors users meet first.
#include <doctest/doctest.h>

#include <cmath>

#include "kiln/kiln.h"
#include "kiln/core/philox.h"

using namespace kiln;

namespace {
std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }
Tensor iota(const Shape& shape) { return arange(0, static_cast<double>(shape.numel())).reshape(shape); }
}  // namespace

TEST_CASE("factories fill, count and convert") {
  CHECK(values(zeros({2, 3})) == std::vector<float>(6, 0.0f));
  CHECK(values(full({4}, 2.5)) == std::vector<float>(4, 2.5f));
  CHECK(values(arange(1, 7, 2)) == std::vector<float>{1, 3, 5});
  CHECK(arange(0, 1, 0.25).numel() == 4);
  Tensor i = from_vector<int32_t>({1, -2, 3}, {3});
  CHECK(i.dtype() == DType::i32);
  CHECK(i.to(DType::f64).to_vector<double>() == std::vector<double>{1, -2, 3});
  CHECK(from_vector<float>({1.9f, -1.9f}, {2}).to(DType::i32).to_vector<int32_t>() ==
        std::vector<int32_t>{1, -1});  // truncation toward zero, as a C++ cast
  CHECK(scalar(3.0).dim() == 0);
  CHECK(scalar(3.0).item() == 3.0);
  CHECK_THROWS_AS(from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
  CHECK_THROWS_AS(zeros({2}).item(), ValueError);
}

TEST_CASE("views share storage and do not copy") {
  Tensor x = iota({2, 3, 4});
  Tensor t = x.transpose(0, 2);
  CHECK(t.shape() == Shape{4, 3, 2});
  CHECK(t.storage() == x.storage());
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.contiguous().is_contiguous());
  // element [a, b, c] of the transpose is element [c, b, a] of x
  CHECK(values(t.contiguous())[static_cast<size_t>(1 * 6 + 2 * 2 + 1)] == 1 * 12 + 2 * 4 + 1);

  Tensor p = x.permute({1, 2, 0});
  CHECK(p.shape() == Shape{3, 4, 2});
  CHECK(values(p.contiguous())[1] == 12.0f);

  Tensor s = x.slice(2, 1, 4, 2);  // columns 1 and 3
  CHECK(s.shape() == Shape{2, 3, 2});
  CHECK(values(s.contiguous()) == std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23});
  CHECK(x.slice(0, -1, 100).shape() == Shape{1, 3, 4});  // Python's clamping rules

  CHECK(x.reshape({6, -1}).shape() == Shape{6, 4});
  CHECK(x.reshape({6, -1}).storage() == x.storage());
  CHECK(t.reshape({-1}).storage() != x.storage());  // a transposed tensor must copy
  CHECK_THROWS_AS(t.view({24}), ShapeError);
  CHECK_THROWS_AS(x.reshape({5, -1}), ShapeError);

  CHECK(x.unsqueeze(1).shape() == Shape{2, 1, 3, 4});
  CHECK(x.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  CHECK(x.unsqueeze(1).squeeze(1).shape() == x.shape());
  CHECK(x.squeeze(0).shape() == x.shape());  // size 2: a no-op, as in PyTorch
  CHECK(x.flatten(1).shape() == Shape{2, 12});
  CHECK(x.flatten().shape() == Shape{24});
}

TEST_CASE("writes through a view reach the base") {
  Tensor x = zeros({3, 3});
  x.slice(1, 1, 2).fill_(7.0);
  CHECK(values(x) == std::vector<float>{0, 7, 0, 0, 7, 0, 0, 7, 0});
  x.t().slice(0, 0, 1).copy_(from_vector<float>({1, 2, 3}, {1, 3}));
  CHECK(values(x) == std::vector<float>{1, 7, 0, 2, 7, 0, 3, 7, 0});
}

TEST_CASE("in-place arithmetic writes the tensor, bumps its version and refuses what it cannot do") {
  Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2});
  const uint64_t v = x.version();
  x.add_(from_vector<float>({10, 20}, {2}), 2).mul_(0.5).sub_(x.slice(0, 0, 1));
  CHECK(x.to_vector<float>() == std::vector<float>{0, 0, 1, 1});  // less its own first row, read before the writes
  CHECK(x.version() == v + 3);
  Tensor counts = zeros({}, DType::i32);
  counts.add_(from_vector<int32_t>({3}, {})).add_(4.0);
  CHECK(counts.item() == 7);
  CHECK_THROWS_WITH_AS(x.add_(from_vector<double>({1}, {1})),
                       doctest::Contains("add_: an operand of dtype f64 for a tensor of f32"), DTypeError);
  CHECK_THROWS_WITH_AS(x.mul_(zeros({3})), doctest::Contains("mul_: shapes [3] and [2, 2] do not broadcast"),
                       ShapeError);
  CHECK_THROWS_WITH_AS(zeros({1, 3}).expand({4, 3}).add_(1.0), doctest::Contains("repeats its elements along axis 0"),
                       ValueError);
  CHECK_THROWS_WITH_AS(counts.add_(0.5), doctest::Contains("whole-number scalars"), ValueError);
  Tensor w = zeros({2}).requires_grad_();
  CHECK_THROWS_AS(w.add_(1.0), AutogradError);
  {
    NoGradGuard no_grad;
    w.add_(1.0);  // as optimizers write parameters
  }
  CHECK(w.to_vector<float>() == std::vector<float>{1, 1});
}

TEST_CASE("broadcasting follows NumPy's rules") {
  Tensor a = iota({2, 1, 3});
  Tensor b = from_vector<float>({10, 20}, {2, 1});
  Tensor c = a + b;
  CHECK(c.shape() == Shape{2, 2, 3});
  CHECK(values(c) == std::vector<float>{10, 11, 12, 20, 21, 22, 13, 14, 15, 23, 24, 25});
  CHECK(values(iota({3}) * 2.0) == std::vector<float>{0, 2, 4});
  CHECK(values(1.0 - iota({3})) == std::vector<float>{1, 0, -1});
  CHECK(values(iota({2, 2}).expand({3, 2, 2}).sum({0})) == std::vector<float>{0, 3, 6, 9});
  CHECK(values(sum_to(ones({4, 2, 3}), {2, 1})) == std::vector<float>{12, 12});
  // non-contiguous operands broadcast too
  Tensor t = iota({3, 2}).t();  // [2, 3]
  CHECK(values(t + from_vector<float>({100, 200, 300}, {3})) ==
        std::vector<float>{100, 202, 304, 101, 203, 305});

  try {
    (void)(zeros({2, 3}) + zeros({4, 3}));
    FAIL("expected a ShapeError");
  } catch (const ShapeError& e) {
    std::string what = e.what();
    CHECK(what.find("add") != std::string::npos);
    CHECK(what.find("[2, 3]") != std::string::npos);
    CHECK(what.find("[4, 3]") != std::string::npos);
  }
}

TEST_CASE("errors name the op and the rule") {
  CHECK_THROWS_AS(zeros({2}) + zeros({2}, DType::f64), DTypeError);
  CHECK_THROWS_AS(exp(zeros({2}, DType::i32)), DTypeError);
  CHECK_THROWS_AS(matmul(zeros({2, 3}), zeros({4, 5})), ShapeError);
  CHECK_THROWS_AS(zeros({2}).to(Device::cuda(1000)), BackendUnavailable);  // no such GPU, or no CUDA
  CHECK_THROWS_AS(zeros({2}, Device::vulkan(1000)), BackendUnavailable);  // no such device, or no Vulkan
  CHECK_THROWS_AS(Device("tpu"), ValueError);
  CHECK_THROWS_AS(Device("cuda:x"), ValueError);
  CHECK(Device("cuda:3") == Device::cuda(3));
  CHECK(Device("cpu").str() == "cpu");
  CHECK_THROWS_AS(zeros({2, 3}).sum({2}), ValueError);
  CHECK_THROWS_AS(zeros({2, 3}).permute({0, 0}), ValueError);
  CHECK_THROWS_AS(conv2d(zeros({1, 3, 8, 8}), zeros({4, 2, 3, 3})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(zeros({2, 3}), zeros({2})), DTypeError);
  CHECK_THROWS_AS(cross_entropy(zeros({2, 3}), from_vector<int32_t>({0, 3}, {2})), ValueError);
  // a target past its row's classes is refused, not read from the next row of the flattened scores
  CHECK_THROWS_AS(nll_loss(zeros({2, 3}), from_vector<int32_t>({3, 0}, {2})), ValueError);
  CHECK_THROWS_AS(nll_loss(zeros({2, 3}), from_vector<int32_t>({0, -1}, {2})), ValueError);
  CHECK(nll_loss(zeros({0, 3}), zeros({0}, DType::i32), Reduction::sum).item<float>() == 0.0f);
  CHECK_THROWS_AS(Tensor().shape(), ValueError);
  // what() says where the check is; message() is the words alone
  try {
    (void)matmul(zeros({2, 3}), zeros({4, 5}));
    FAIL("expected ShapeError");
  } catch (const Error& e) {
    const std::string what = e.what(), message(e.message());
    CHECK(what.starts_with(message + " (autograd/"));
    CHECK(what.ends_with(")"));
    CHECK(message.find(".cpp:") == std::string::npos);
    CHECK(message.find("[2, 3]") != std::string::npos);
  }
  CHECK(std::string_view(ValueError("plain").message()) == "plain");
  try {
    (void)zeros({2}).to(Device::cuda(63));  // no machine here has 64 GPUs (nor, without CUDA, one)
    FAIL("expected BackendUnavailable");
  } catch (const BackendUnavailable& e) {
    CHECK(std::string(e.what()).find("cuda:63") != std::string::npos);
  }
}

namespace {
// The message of the ShapeError that `f` throws (fails the case when it throws nothing or another).
template <class F>
std::string shape_error(F&& f) {
  try {
    f();
  } catch (const ShapeError& e) {
    return e.what();
  }
  FAIL("expected a ShapeError");
  return "";
}
}  // namespace

TEST_CASE("shapes whose sizes or bytes pass int64 are refused, in factories, views, reshapes and results") {
  constexpr int64_t big = int64_t{1} << 40;
  // [2^40, 2^40] wrapped to 0 elements, 3037000500^2 to a negative count
  CHECK(shape_error([&] { (void)zeros({big, big}); }).find("[1099511627776, 1099511627776] is too large") !=
        std::string::npos);
  CHECK(!shape_error([&] { (void)zeros({3037000500, 3037000500}); }).empty());
  CHECK(!shape_error([&] { (void)Shape({big, big, 0}).numel(); }).empty());  // strides would still wrap
  CHECK(Shape({big, 0}).numel() == 0);
  // elements that fit, bytes that do not: 2^62 f32
  CHECK(shape_error([&] { (void)empty({int64_t{1} << 62}); }).find("bytes pass 2^63 - 1") != std::string::npos);
  // views of a small tensor onto huge shapes: the size is checked before any stride is computed
  Tensor x = zeros({4});
  CHECK(!shape_error([&] { (void)x.reshape({-1, int64_t{1} << 62, 4}); }).empty());
  CHECK(!shape_error([&] { (void)x.expand({big, big, 4}); }).empty());
  CHECK(!shape_error([&] { (void)x.expand({-5, 4}); }).empty());
  Tensor row = zeros({1}).expand({big}).unsqueeze(0), column = zeros({1}).expand({big}).unsqueeze(1);
  CHECK(row.shape() == Shape({1, big}));  // a view of 4 bytes is fine
  CHECK(!shape_error([&] { (void)(row + column); }).empty());  // the result, [2^40, 2^40], is not
  // a size that is countable but more than the machine has: OutOfMemory, not a crash
  CHECK_THROWS_AS(zeros({int64_t{1} << 60}), OutOfMemory);
}

TEST_CASE("read_async's values are to_vector's, whenever they are collected") {
  Tensor x = arange(0, 12).reshape({3, 4});
  const PendingValues whole = x.read_async(), column = x.slice(1, 2, 3).read_async();
  x.fill_(-1);  // the CPU's read was done when read_async returned
  CHECK(column.ready());
  CHECK(column.get<int32_t>() == std::vector<int32_t>{2, 6, 10});
  CHECK(whole.get<float>()[11] == 11.0f);
  CHECK_THROWS_AS(PendingValues().ready(), ValueError);
}

TEST_CASE("printing shows values, shape and dtype") {
  CHECK(iota({2, 2}).str() == "tensor([[0.0000, 1.0000],\n        [2.0000, 3.0000]], shape=[2, 2], dtype=f32)");
  CHECK(from_vector<int32_t>({1, 2}, {2}).str() == "tensor([1, 2], shape=[2], dtype=i32)");
  std::string big = zeros({2000}).str();
  CHECK(big.find("...") != std::string::npos);
  CHECK(big.size() < 200);
}

TEST_CASE("the same seed gives the same Philox stream") {
  manual_seed(42);
  std::vector<float> a = values(uniform({1000}));
  std::vector<float> b = values(uniform({1000}));
  manual_seed(42);
  CHECK(values(uniform({1000})) == a);
  CHECK(a != b);  // the generator moved on
  Generator g1(7), g2(7);
  CHECK(values(normal({33}, 0, 1, {}, &g1)) == values(normal({33}, 0, 1, {}, &g2)));
  CHECK(g1.offset() == 9);  // ceil(33 / 4) blocks
  // A draw is a pure function of (seed, offset): drawing 8 then 8 equals the halves of 16.
  Generator whole(5), parts(5);
  std::vector<float> all = values(uniform({16}, 0, 1, {}, &whole));
  std::vector<float> first = values(uniform({8}, 0, 1, {}, &parts));
  std::vector<float> second = values(uniform({8}, 0, 1, {}, &parts));
  first.insert(first.end(), second.begin(), second.end());
  CHECK(first == all);
}

TEST_CASE("Philox4x32-10 matches the published known-answer vectors") {
  // Random123's kat_vectors for philox4x32_10.
  CHECK(philox::philox4x32_10({0, 0, 0, 0}, 0, 0) ==
        philox::Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox::philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu,
                              0xffffffffu) ==
        philox::Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox::philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u,
                              0x299f31d0u) ==
        philox::Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("uniform and normal draws have the right statistics") {
  Generator g(3);
  Tensor u = uniform({100000}, -2, 6, {}, &g);
  CHECK(u.min().item() >= -2.0);
  CHECK(u.max().item() < 6.0);
  CHECK(u.mean().item() == doctest::Approx(2.0).epsilon(0.01));
  Tensor n = normal({100000}, 1.0, 3.0, DType::f64, &g);
  CHECK(n.mean().item() == doctest::Approx(1.0).epsilon(0.05));
  Tensor centred = n - 1.0;
  CHECK(std::sqrt((centred * centred).mean().item()) == doctest::Approx(3.0).epsilon(0.01));
}

TEST_CASE("reductions over an empty axis: sums of 0, means of NaN, maxima refused") {
  // [3, 0] has no element out of place: it is contiguous (its strides [1, 1] once made the
  // reduction's layout check fail, and the reduction permuted and copied it forever)
  Tensor e = zeros({3, 0});
  CHECK(e.is_contiguous());
  CHECK(e.sum({1}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(std::isnan(e.mean({1}).to_vector<float>()[0]));
  CHECK_THROWS_AS((void)e.max({1}), ValueError);
  CHECK(zeros({0, 4}).sum({0}).to_vector<float>() == std::vector<float>{0, 0, 0, 0});
}

TEST_CASE("reductions over axes apart equal the same reductions with the axes moved together") {
  // sum, mean, max and min over axes that are not adjacent in a contiguous tensor run in stages
  // (no copy of the input); the reference moves the reduced axes last and reduces them at once.
  Tensor x = uniform({3, 4, 5, 6}, -1, 1, DType::f64);
  struct Case {
    std::vector<int64_t> axes, order;  // order: the kept axes, then the reduced ones
  };
  for (const Case& c : {Case{{0, 2, 3}, {1, 0, 2, 3}}, Case{{0, 2}, {1, 3, 0, 2}}, Case{{1, 3}, {0, 2, 1, 3}},
                        Case{{0, 1, 3}, {2, 0, 1, 3}}}) {
    Tensor moved = x.permute(c.order).contiguous();
    std::vector<int64_t> last;
    for (int64_t i = 4 - static_cast<int64_t>(c.axes.size()); i < 4; ++i) last.push_back(i);
    for (bool keepdim : {false, true}) {
      const Shape want_shape = keepdim ? x.sum(c.axes, true).shape() : moved.sum(last).shape();
      auto same = [&](const Tensor& got, const Tensor& want, const char* op) {
        INFO(op, " over ", Shape(c.axes), keepdim ? " keepdim" : "");
        CHECK(got.shape() == want_shape);
        const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
        REQUIRE(g.size() == w.size());
        for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(w[i]).epsilon(1e-12));
      };
      same(x.sum(c.axes, keepdim), moved.sum(last), "sum");
      same(x.mean(c.axes, keepdim), moved.mean(last), "mean");
      same(x.max(c.axes, keepdim), moved.max(last), "max");
      same(x.min(c.axes, keepdim), moved.min(last), "min");
    }
  }
}
