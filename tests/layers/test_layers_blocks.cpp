// The layers a small CNN, MLP or transformer block reaches for beyond the basic ones: LayerNorm,
// GroupNorm, Embedding, AdaptiveAvgPool2d, Unflatten and Identity. Each against a reference
// computed here element by element (PyTorch's definitions), gradchecked in f64, with its errors.
// (On CUDA and Vulkan against the CPU: test_backend_ops's "layers of ops" row.)
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
using autograd::gradcheck;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
double max_diff(const Tensor& a, const Tensor& b) { return abs(a - b).max().item(); }
Tensor f64_leaf(const Shape& shape, double lo, double hi) { return uniform(shape, lo, hi, DType::f64).requires_grad_(); }

// (v - mean) / sqrt(var + eps) over consecutive runs of n values, the variance biased.
std::vector<double> normalize_runs(const std::vector<double>& v, size_t n, double eps) {
  std::vector<double> out(v.size());
  for (size_t start = 0; start < v.size(); start += n) {
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; ++i) mean += v[start + i] / static_cast<double>(n);
    for (size_t i = 0; i < n; ++i) var += (v[start + i] - mean) * (v[start + i] - mean) / static_cast<double>(n);
    for (size_t i = 0; i < n; ++i) out[start + i] = (v[start + i] - mean) / std::sqrt(var + eps);
  }
  return out;
}

}  // namespace

TEST_CASE("LayerNorm normalises each sample over its last dimensions, then its weight and bias") {
  manual_seed(1);
  nn::LayerNorm ln(nn::LayerNormOptions({3, 4}).eps(1e-3));
  CHECK(values(ln.weight) == std::vector<double>(12, 1.0));
  CHECK(values(ln.bias) == std::vector<double>(12, 0.0));
  nn::init::uniform_(ln.weight, 0.5, 1.5);
  nn::init::uniform_(ln.bias, -1, 1);
  const Tensor x = uniform({2, 5, 3, 4}, 1, 3, DType::f64);
  ln.to(DType::f64);
  const std::vector<double> norm = normalize_runs(values(x), 12, 1e-3), w = values(ln.weight), b = values(ln.bias);
  std::vector<double> want(norm.size());
  for (size_t i = 0; i < norm.size(); ++i) want[i] = norm[i] * w[i % 12] + b[i % 12];
  CHECK(max_diff(ln(x), from_vector(want, {2, 5, 3, 4})) < 1e-12);
  CHECK(ln.summary().find("LayerNorm((3, 4), eps=0.001, elementwise_affine=true)") != std::string::npos);

  auto f = [](const std::vector<Tensor>& in) { return nn::layer_norm(in[0], {4}, in[1], in[2], 1e-5); };
  const auto r = gradcheck(f, {f64_leaf({3, 4}, -1, 1), f64_leaf({4}, 0.5, 1.5), f64_leaf({4}, -1, 1)});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_AS(nn::layer_norm(x, {4, 3}), doctest::Contains("does not end in the normalized shape [4, 3]"),
                       ShapeError);
  CHECK_THROWS_AS(nn::LayerNorm(nn::LayerNormOptions({0})), ValueError);
}

TEST_CASE("GroupNorm normalises each sample's groups of channels; one group is LayerNorm over [C, *]") {
  manual_seed(2);
  const Tensor x = uniform({3, 6, 5, 4}, -2, 2, DType::f64);
  // two groups of three channels: runs of 3 * 20 values
  const Tensor want = from_vector(normalize_runs(values(x), 60, 1e-5), x.shape());
  CHECK(max_diff(nn::group_norm(x, 2), want) < 1e-12);
  CHECK(max_diff(nn::group_norm(x, 1), nn::layer_norm(x, {6, 5, 4})) < 1e-12);

  nn::GroupNorm gn(3, 6);
  gn.to(DType::f64);
  nn::init::uniform_(gn.weight, 0.5, 1.5);
  nn::init::uniform_(gn.bias, -1, 1);
  const Tensor affine = nn::group_norm(x, 3) * gn.weight.reshape({6, 1, 1}) + gn.bias.reshape({6, 1, 1});
  CHECK(max_diff(gn(x), affine) < 1e-12);
  CHECK(gn(uniform({2, 6}, -1, 1, DType::f64)).shape() == Shape{2, 6});  // [N, C]

  auto f = [](const std::vector<Tensor>& in) { return nn::group_norm(in[0], 2, in[1], in[2]); };
  const auto r = gradcheck(f, {f64_leaf({2, 4, 3}, -1, 1), f64_leaf({4}, 0.5, 1.5), f64_leaf({4}, -1, 1)});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_WITH_AS(nn::GroupNorm(4, 6), doctest::Contains("6 channels do not split into 4 groups"), ValueError);
  CHECK_THROWS_WITH_AS(gn(uniform({2, 5, 3}, -1, 1, DType::f64)), doctest::Contains("input must be [N, 6, *]"),
                       ShapeError);
}

TEST_CASE("Embedding looks rows up by index, adds repeated rows' gradients, and starts from N(0, 1)") {
  manual_seed(3);
  nn::Embedding emb(1000, 16);
  const std::vector<double> w = values(emb.weight);
  double mean = 0, var = 0;
  for (double v : w) mean += v / static_cast<double>(w.size());
  for (double v : w) var += (v - mean) * (v - mean) / static_cast<double>(w.size());
  CHECK(std::abs(mean) < 0.02);
  CHECK(std::abs(var - 1.0) < 0.05);

  const Tensor idx = from_vector<int32_t>({3, 0, 3, 999, 7, 3}, {2, 3});
  const Tensor y = emb(idx);
  CHECK(y.shape() == Shape{2, 3, 16});
  CHECK(max_diff(y.reshape({6, 16}).slice(0, 3, 4), emb.weight.slice(0, 999, 1000)) == 0);
  y.sum().backward();
  const std::vector<double> g = values(emb.weight.grad().slice(0, 3, 4));
  CHECK(g == std::vector<double>(16, 3.0));  // index 3 three times
  CHECK(values(emb.weight.grad().slice(0, 1, 2)) == std::vector<double>(16, 0.0));

  auto f = [](const std::vector<Tensor>& in) { return nn::embedding(from_vector<int32_t>({1, 4, 1}, {3}), in[0]); };
  const auto r = gradcheck(f, {f64_leaf({5, 3}, -1, 1)});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_AS(emb(from_vector<float>({1.0f}, {1})), DTypeError);
}

TEST_CASE("AdaptiveAvgPool2d averages PyTorch's windows: tiling, uneven and overlapping") {
  manual_seed(4);
  const Tensor x = uniform({2, 3, 7, 5}, -1, 1, DType::f64);
  const std::vector<double> v = values(x);
  // PyTorch's window of output (i, j): rows floor(i H / OH) .. ceil((i + 1) H / OH), columns alike
  auto reference = [&](int64_t oh, int64_t ow) {
    std::vector<double> out;
    for (int64_t plane = 0; plane < 6; ++plane)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t r0 = i * 7 / oh, r1 = ((i + 1) * 7 + oh - 1) / oh, c0 = j * 5 / ow, c1 = ((j + 1) * 5 + ow - 1) / ow;
          double sum = 0;
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c) sum += v[static_cast<size_t>(plane * 35 + r * 5 + c)];
          out.push_back(sum / static_cast<double>((r1 - r0) * (c1 - c0)));
        }
    return from_vector(out, {2, 3, oh, ow});
  };
  for (const auto& size : std::vector<std::pair<int64_t, int64_t>>{{3, 2}, {7, 5}, {1, 1}, {4, 3}, {7, 1}}) {
    const int64_t oh = size.first, ow = size.second;  // not a structured binding: CAPTURE takes it (clang 14)
    CAPTURE(oh);
    CAPTURE(ow);
    CHECK(max_diff(nn::AdaptiveAvgPool2d(std::array<int64_t, 2>{oh, ow})(x), reference(oh, ow)) < 1e-12);
  }
  auto f = [](const std::vector<Tensor>& in) { return nn::adaptive_avg_pool2d(in[0], std::array<int64_t, 2>{3, 2}); };
  const auto r = gradcheck(f, {f64_leaf({1, 2, 5, 4}, -1, 1)});
  CHECK_MESSAGE(r.ok, r.message);
  CHECK_THROWS_AS(nn::adaptive_avg_pool2d(x, 0), ValueError);
  CHECK_THROWS_AS(nn::adaptive_avg_pool2d(uniform({3, 4}), 1), ShapeError);
}

TEST_CASE("Unflatten undoes Flatten; Identity passes its input through") {
  const Tensor x = uniform({4, 6, 5});
  const Tensor u = nn::Unflatten(1, {2, -1})(x);
  CHECK(u.shape() == Shape{4, 2, 3, 5});
  CHECK(max_diff(nn::Flatten(1, 2)(u), x) == 0);
  CHECK(nn::Unflatten(-1, {5, 1})(x).shape() == Shape{4, 6, 5, 1});
  CHECK_THROWS_AS(nn::Unflatten(1, {4, 2})(x), Error);  // 4 x 2 is not 6
  CHECK_THROWS_AS(nn::Unflatten(3, {1})(x), ValueError);
  Tensor leaf = uniform({3}).requires_grad_();
  Tensor y = nn::Identity()(leaf);
  (y * 2.0).sum().backward();
  CHECK(values(leaf.grad()) == std::vector<double>(3, 2.0));
}
