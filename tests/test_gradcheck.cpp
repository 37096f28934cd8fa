// Every differentiable op against finite differences (autograd::gradcheck, f64), on the shapes
// that break kernels: broadcasts, views built inside the checked function, size-1 dimensions and
// sizes that are no multiple of any block (7, 13, 37), plus GEMM sizes past the small-product
// path. Also: a few forward values gradcheck cannot judge, a check that the checker can fail, and
// directional checks in f32 on larger ops.
//
// Each table row is {name, f, inputs}; a failure names its row. Inputs are contiguous f64 leaves
// (gradcheck's rule); transposes, slices and expands are built inside f.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;
using autograd::GradcheckOptions;
using autograd::GradcheckResult;

namespace {

using Args = std::vector<Tensor>;
using Reduce = Tensor (*)(const Tensor&, const std::vector<int64_t>&, bool);

struct Case {
  std::string name;
  autograd::CheckedFn f;
  Args inputs;
  GradcheckOptions options = {};
};

// Deterministic host values (splitmix64), so every input is known before any kernel runs.
class HostRng {
 public:
  explicit HostRng(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  double uniform(double low, double high) {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return low + (high - low) * static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  int64_t below(int64_t n) { return static_cast<int64_t>(uniform(0.0, static_cast<double>(n))); }

 private:
  uint64_t state_;
};

Tensor leaf(const std::vector<double>& v, const Shape& shape) {
  return from_vector<double>(v, shape, TensorOptions(DType::f64).requires_grad());
}

// Uniform in [low, high).
Tensor rand(const Shape& shape, uint64_t seed, double low = -1.0, double high = 1.0) {
  HostRng rng(seed);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = rng.uniform(low, high);
  return leaf(v, shape);
}

// |x| in [0.2, 1.5) with a random sign: no kink of relu/abs/leaky_relu within eps.
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  HostRng rng(seed);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = rng.uniform(0.2, 1.5) * (rng.uniform(0, 1) < 0.5 ? -1.0 : 1.0);
  return leaf(v, shape);
}

// Distinct values spaced by `spacing` (a shuffled ramp, centred on 0): no two elements tie, so
// max, min and max_pool have one winner per window. Large tensors want a small spacing: values
// in the thousands would drown the finite differences in rounding.
Tensor distinct(const Shape& shape, uint64_t seed, double spacing = 0.05) {
  HostRng rng(seed);
  auto n = static_cast<size_t>(shape.numel());
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = spacing * (static_cast<double>(i) - static_cast<double>(n) / 2.0);
  for (size_t i = n; i > 1; --i)
    std::swap(v[i - 1], v[static_cast<size_t>(rng.below(static_cast<int64_t>(i)))]);
  return leaf(v, shape);
}

// Values on the grid 0.2 * k + shift: two tensors with shifts 0 and 0.1 never come within 0.1.
Tensor on_grid(const Shape& shape, uint64_t seed, double shift) {
  HostRng rng(seed);
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (double& x : v) x = 0.2 * static_cast<double>(rng.below(15) - 7) + shift;
  return leaf(v, shape);
}

Tensor labels(const std::vector<int32_t>& v) {
  return from_vector<int32_t>(v, {static_cast<int64_t>(v.size())});
}

// Runs every case, even after one throws: an exception fails its case by name.
void run_cases(const std::vector<Case>& cases, decltype(&autograd::gradcheck) check) {
  for (const Case& c : cases) {
    GradcheckResult result;
    try {
      result = check(c.f, c.inputs, c.options);
    } catch (const std::exception& e) {
      result.ok = false;
      result.message = std::string("threw: ") + e.what();
    }
    CHECK_MESSAGE(result.ok, c.name << ": " << result.message);
  }
}
void run(const std::vector<Case>& cases) { run_cases(cases, &autograd::gradcheck); }
void run_directional(const std::vector<Case>& cases) { run_cases(cases, &autograd::gradcheck_directional); }

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// |got - want| <= tol * (1 + |want|) everywhere; one message naming the first bad element.
void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const std::string& what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what << ": " << got.size() << " values, expected " << want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i]))) continue;
    if (bad++ == 0) first = i;
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << got.size() << " values off, the first ["
                               << first << "] is " << got[first] << ", expected " << want[first]);
}

}  // namespace

TEST_CASE("gradcheck: views and copies") {
  run({
      {"reshape [3,4,5] -> [5,-1]", [](const Args& x) { return reshape(x[0], {5, -1}); }, {rand({3, 4, 5}, 1)}},
      {"reshape of a transpose (copies)", [](const Args& x) { return reshape(x[0].transpose(0, 1), {-1}); },
       {rand({7, 13}, 2)}},
      {"view [6,7] -> [7,6]", [](const Args& x) { return view(x[0], {7, 6}) * 2.0; }, {rand({6, 7}, 3)}},
      {"flatten axes 1..2", [](const Args& x) { return flatten(x[0], 1, 2); }, {rand({2, 3, 4, 5}, 4)}},
      {"flatten all", [](const Args& x) { return flatten(x[0]); }, {rand({3, 1, 5}, 5)}},
      {"transpose 0,2", [](const Args& x) { return transpose(x[0], 0, 2) * 3.0; }, {rand({3, 5, 7}, 6)}},
      {"transpose -1,-2 then contiguous", [](const Args& x) { return contiguous(transpose(x[0], -1, -2)); },
       {rand({2, 7, 13}, 7)}},
      {"permute 2,0,3,1", [](const Args& x) { return permute(x[0], {2, 0, 3, 1}); }, {rand({2, 3, 4, 5}, 8)}},
      {"permute then sum (strided reduction)", [](const Args& x) { return permute(x[0], {1, 2, 0}).sum({2}); },
       {rand({4, 3, 5}, 9)}},
      {"slice step 3", [](const Args& x) { return slice(x[0], 1, 1, 12, 3); }, {rand({7, 13}, 10)}},
      {"slice negative start, clamped end, step 2", [](const Args& x) { return slice(x[0], 0, -5, 100, 2); },
       {rand({7, 13}, 11)}},
      {"slice of a slice", [](const Args& x) { return x[0].slice(2, 1, 36, 2).slice(0, 1, 3); },
       {rand({3, 2, 37}, 12)}},
      {"squeeze 1", [](const Args& x) { return squeeze(x[0], 1); }, {rand({3, 1, 5}, 13)}},
      {"squeeze of a size-2 axis is a no-op", [](const Args& x) { return squeeze(x[0], 0) * 2.0; },
       {rand({2, 3}, 14)}},
      {"unsqueeze 0 and -1", [](const Args& x) { return unsqueeze(unsqueeze(x[0], 0), -1); },
       {rand({3, 5}, 15)}},
      {"expand [3,1,5] -> [2,3,4,5]", [](const Args& x) { return expand(x[0], {2, 3, 4, 5}); },
       {rand({3, 1, 5}, 16)}},
      {"expand [1] -> [7]", [](const Args& x) { return expand(x[0], {7}); }, {rand({1}, 17)}},
      {"expand with -1", [](const Args& x) { return expand(x[0], {4, -1}); }, {rand({1, 13}, 18)}},
      {"contiguous of a slice", [](const Args& x) { return contiguous(x[0].slice(1, 0, 13, 2)); },
       {rand({7, 13}, 19)}},
      {"clone", [](const Args& x) { return clone(x[0]) * x[0]; }, {rand({37}, 20)}},
      {"clone of a transpose", [](const Args& x) { return clone(x[0].t()); }, {rand({7, 13}, 21)}},
      {"concat axis 0", [](const Args& x) { return concat({x[0], x[1], x[2]}, 0); },
       {rand({2, 3}, 22), rand({4, 3}, 23), rand({1, 3}, 24)}},
      {"concat axis 1 of transposed views", [](const Args& x) { return concat({x[0].t(), x[1].t()}, 1); },
       {rand({3, 5}, 25), rand({7, 5}, 26)}},
      {"concat the same tensor twice", [](const Args& x) { return concat({x[0], x[0]}, -1); },
       {rand({2, 7}, 27)}},
      {"stack axis 1", [](const Args& x) { return stack({x[0], x[1], x[0]}, 1); },
       {rand({3, 4}, 28), rand({3, 4}, 29)}},
      {"stack axis -1 (new last axis)", [](const Args& x) { return stack({x[0], x[1]}, -1); },
       {rand({5}, 30), rand({5}, 31)}},
      {"sum_to [2,3,4,5] -> [3,1,5]", [](const Args& x) { return sum_to(x[0], {3, 1, 5}); },
       {rand({2, 3, 4, 5}, 32)}},
      {"sum_to [7,13] -> [1]", [](const Args& x) { return sum_to(x[0], {1}); }, {rand({7, 13}, 33)}},
      {"sum_to [4,1,6] -> [4,1]", [](const Args& x) { return sum_to(x[0], {4, 1}); }, {rand({3, 4, 1}, 34)}},
  });
}

TEST_CASE("gradcheck: to_dtype f64 -> f32 -> f64") {
  // The trip through f32 rounds every value to ~6e-8 relative: a large eps keeps that noise
  // small next to the difference (the function is linear, so a large eps costs no accuracy).
  GradcheckOptions loose;
  loose.eps = 1e-1;
  loose.atol = 1e-5;
  loose.rtol = 1e-4;
  run({
      {"to_dtype round trip", [](const Args& x) { return to_dtype(to_dtype(x[0], DType::f32), DType::f64); },
       {rand({7, 13}, 40)}, loose},
      {"to_dtype of a transpose, times itself",
       [](const Args& x) { return to_dtype(to_dtype(x[0].t(), DType::f32) * 2.0f, DType::f64); },
       {rand({5, 3}, 41)}, loose},
      {"to_dtype f64 -> f64 is the identity", [](const Args& x) { return to_dtype(x[0], DType::f64) * x[0]; },
       {rand({13}, 42)}},
  });
}

TEST_CASE("gradcheck: binary arithmetic with broadcasting") {
  run({
      {"add [3,1,5] + [4,5]", [](const Args& x) { return add(x[0], x[1]); },
       {rand({3, 1, 5}, 50), rand({4, 5}, 51)}},
      {"add [1,1] + [7,13]", [](const Args& x) { return x[0] + x[1]; }, {rand({1, 1}, 52), rand({7, 13}, 53)}},
      {"add transposed view + row", [](const Args& x) { return x[0].t() + x[1]; },
       {rand({13, 7}, 54), rand({13}, 55)}},
      {"sub [4,5] - [3,1,5]", [](const Args& x) { return sub(x[0], x[1]); },
       {rand({4, 5}, 56), rand({3, 1, 5}, 57)}},
      {"sub scalar-shaped [] - [37]", [](const Args& x) { return x[0] - x[1]; },
       {rand({}, 58), rand({37}, 59)}},
      {"mul [3,1,5] * [4,5]", [](const Args& x) { return mul(x[0], x[1]); },
       {rand({3, 1, 5}, 60), rand({4, 5}, 61)}},
      {"mul x * x", [](const Args& x) { return x[0] * x[0]; }, {rand({37}, 62)}},
      {"mul of a slice by an expand",
       [](const Args& x) { return x[0].slice(1, 0, 13, 2) * x[1].expand({7, 7}); },
       {rand({7, 13}, 63), rand({1, 7}, 64)}},
      {"div [3,1,5] / [4,5]", [](const Args& x) { return div(x[0], x[1]); },
       {rand({3, 1, 5}, 65), rand({4, 5}, 66, 0.5, 2.0)}},
      {"div [7] / [3,1] (negative divisor)", [](const Args& x) { return x[0] / x[1]; },
       {rand({7}, 67), rand({3, 1}, 68, -2.0, -0.5)}},
      {"div x / x.t()", [](const Args& x) { return x[0] / x[0].t(); }, {rand({5, 5}, 69, 0.5, 2.0)}},
      {"pow tensor^tensor [3,1,5] ^ [4,5]", [](const Args& x) { return pow(x[0], x[1]); },
       {rand({3, 1, 5}, 70, 0.5, 2.0), rand({4, 5}, 71, -2.0, 2.0)}},
      {"pow with a broadcast exponent [1]", [](const Args& x) { return pow(x[0], x[1]); },
       {rand({13}, 72, 0.5, 2.0), rand({1}, 73, 0.5, 3.0)}},
      {"maximum [3,1,5] vs [4,5]", [](const Args& x) { return maximum(x[0], x[1]); },
       {on_grid({3, 1, 5}, 74, 0.0), on_grid({4, 5}, 75, 0.1)}},
      {"minimum [3,1,5] vs [4,5]", [](const Args& x) { return minimum(x[0], x[1]); },
       {on_grid({3, 1, 5}, 76, 0.0), on_grid({4, 5}, 77, 0.1)}},
      {"maximum of a transpose and a column", [](const Args& x) { return maximum(x[0].t(), x[1]); },
       {on_grid({13, 7}, 78, 0.0), on_grid({7, 1}, 79, 0.1)}},
      {"minimum same shapes [7,13]", [](const Args& x) { return minimum(x[0], x[1]); },
       {on_grid({7, 13}, 81, 0.0), on_grid({7, 13}, 82, 0.1)}},
      {"minimum [37] vs []", [](const Args& x) { return minimum(x[0], x[1]); },
       {on_grid({37}, 80, 0.0), leaf({0.1}, {})}},
  });
}

TEST_CASE("gradcheck: arithmetic with a scalar") {
  run({
      {"add(x, 2.5)", [](const Args& x) { return add(x[0], 2.5) * x[0]; }, {rand({7, 13}, 90)}},
      {"mul(x, -1.5)", [](const Args& x) { return mul(x[0], -1.5); }, {rand({37}, 91)}},
      {"x - 3", [](const Args& x) { return (x[0] - 3.0) * x[0]; }, {rand({13}, 92)}},
      {"x / 4", [](const Args& x) { return x[0] / 4.0; }, {rand({13}, 93)}},
      {"2 - x", [](const Args& x) { return 2.0 - x[0].t(); }, {rand({3, 5}, 94)}},
      {"3 * x", [](const Args& x) { return 3.0 * x[0]; }, {rand({3, 5}, 95)}},
      {"1 + x", [](const Args& x) { return (1.0 + x[0]) * x[0]; }, {rand({3, 5}, 96)}},
      {"3 / x", [](const Args& x) { return 3.0 / x[0]; }, {rand({7}, 97, 0.5, 2.0)}},
      {"pow(x, 2.5)", [](const Args& x) { return pow(x[0], 2.5); }, {rand({7, 13}, 98, 0.3, 2.0)}},
      {"pow(x, -1.3)", [](const Args& x) { return pow(x[0], -1.3); }, {rand({37}, 99, 0.5, 2.0)}},
      {"pow(x, 2) of a transpose", [](const Args& x) { return pow(x[0].t(), 2.0); }, {rand({5, 7}, 100)}},
      {"pow(x, 0.5)", [](const Args& x) { return pow(x[0], 0.5); }, {rand({1, 13}, 101, 0.5, 2.0)}},
  });
}

TEST_CASE("gradcheck: unary math and activations") {
  run({
      {"neg", [](const Args& x) { return neg(x[0]); }, {rand({7, 13}, 110)}},
      {"-x of a transpose", [](const Args& x) { return -x[0].t(); }, {rand({3, 5}, 111)}},
      {"exp", [](const Args& x) { return exp(x[0]); }, {rand({37}, 112)}},
      {"exp of a slice", [](const Args& x) { return exp(x[0].slice(0, 1, 7, 2)); }, {rand({7, 13}, 113)}},
      {"log", [](const Args& x) { return log(x[0]); }, {rand({37}, 114, 0.3, 3.0)}},
      {"log of a transpose", [](const Args& x) { return log(x[0].t()); }, {rand({5, 3}, 115, 0.3, 3.0)}},
      {"sqrt", [](const Args& x) { return sqrt(x[0]); }, {rand({7, 13}, 116, 0.3, 3.0)}},
      {"sqrt of an expand", [](const Args& x) { return sqrt(x[0].expand({4, 7})); },
       {rand({1, 7}, 117, 0.3, 3.0)}},
      {"abs", [](const Args& x) { return abs(x[0]); }, {away_from_zero({37}, 118)}},
      {"abs of a transpose", [](const Args& x) { return abs(x[0].t()); }, {away_from_zero({5, 7}, 119)}},
      {"relu", [](const Args& x) { return relu(x[0]); }, {away_from_zero({7, 13}, 120)}},
      {"relu of a slice", [](const Args& x) { return relu(x[0].slice(1, 0, 13, 3)); },
       {away_from_zero({7, 13}, 121)}},
      {"leaky_relu 0.01", [](const Args& x) { return leaky_relu(x[0]); }, {away_from_zero({37}, 122)}},
      {"leaky_relu 0.2 of a transpose", [](const Args& x) { return leaky_relu(x[0].t(), 0.2); },
       {away_from_zero({5, 7}, 123)}},
      {"gelu", [](const Args& x) { return gelu(x[0]); }, {rand({37}, 124, -3.0, 3.0)}},
      {"gelu of a transpose", [](const Args& x) { return gelu(x[0].t()); }, {rand({5, 7}, 125, -3.0, 3.0)}},
      {"tanh", [](const Args& x) { return tanh(x[0]); }, {rand({7, 13}, 126, -2.0, 2.0)}},
      {"tanh of an expand", [](const Args& x) { return tanh(x[0].expand({3, 5})); }, {rand({5}, 127)}},
      {"sigmoid", [](const Args& x) { return sigmoid(x[0]); }, {rand({37}, 128, -4.0, 4.0)}},
      {"sigmoid of a slice", [](const Args& x) { return sigmoid(x[0].slice(0, 0, 7, 2)); },
       {rand({7, 3}, 129, -4.0, 4.0)}},
      {"a chain: sigmoid(tanh(x) * exp(y)) / (1 + y^2)",
       [](const Args& x) { return sigmoid(tanh(x[0]) * exp(x[1])) / (1.0 + x[1] * x[1]); },
       {rand({3, 4}, 130), rand({4}, 131)}},
  });
}

TEST_CASE("gradcheck: unary and binary ops on sizes past the parallel grain (directional)") {
  // 200 x 331 = 66200 elements: two or more parallel chunks and a vector tail.
  run_directional({
      {"exp large", [](const Args& x) { return exp(x[0]); }, {rand({200, 331}, 140)}},
      {"gelu large, transposed", [](const Args& x) { return gelu(x[0].t()); }, {rand({200, 331}, 141, -3, 3)}},
      {"mul large with broadcast", [](const Args& x) { return x[0] * x[1]; },
       {rand({200, 331}, 142), rand({331}, 143)}},
      {"sigmoid large", [](const Args& x) { return sigmoid(x[0]); }, {rand({66201}, 144, -4, 4)}},
      {"sum large over axis 0", [](const Args& x) { return sum(x[0], {0}); }, {rand({200, 331}, 145)}},
      {"softmax large rows", [](const Args& x) { return softmax(x[0], 1); }, {rand({200, 331}, 146)}},
      {"log_softmax large, over axis 0", [](const Args& x) { return log_softmax(x[0], 0); },
       {rand({331, 200}, 147)}},
      {"max over axes 0,2 large", [](const Args& x) { return max(x[0], {0, 2}); },
       {distinct({40, 37, 50}, 148, 1e-5)}},
      {"mean over axes 1,2 of a permute, large",
       [](const Args& x) { return mean(x[0].permute({2, 0, 1}), {1, 2}); }, {rand({64, 33, 37}, 149)}},
  });
}

TEST_CASE("gradcheck: sum and mean over axes") {
  std::vector<Case> cases;
  for (bool keep : {false, true}) {
    std::string k = keep ? " keepdim" : "";
    auto add_cases = [&](const std::string& op, Reduce reduce) {
      cases.push_back({op + " axis 1" + k, [=](const Args& x) { return reduce(x[0], {1}, keep); },
                       {rand({3, 4, 5}, 150)}});
      cases.push_back({op + " axis -1" + k, [=](const Args& x) { return reduce(x[0], {-1}, keep); },
                       {rand({7, 13}, 151)}});
      cases.push_back({op + " axis 0" + k, [=](const Args& x) { return reduce(x[0], {0}, keep); },
                       {rand({37, 3}, 152)}});
      cases.push_back({op + " axes 1,2 (adjacent)" + k,
                       [=](const Args& x) { return reduce(x[0], {1, 2}, keep); },
                       {rand({2, 3, 4, 5}, 153)}});
      cases.push_back({op + " axes 0,2 (apart)" + k, [=](const Args& x) { return reduce(x[0], {0, 2}, keep); },
                       {rand({3, 4, 5}, 154)}});
      cases.push_back({op + " axes 3,0 (apart, unsorted)" + k,
                       [=](const Args& x) { return reduce(x[0], {3, 0}, keep); },
                       {rand({2, 3, 1, 5}, 155)}});
      cases.push_back({op + " all axes" + k, [=](const Args& x) { return reduce(x[0], {}, keep); },
                       {rand({3, 4, 5}, 156)}});
      cases.push_back({op + " size-1 axis" + k, [=](const Args& x) { return reduce(x[0], {1}, keep); },
                       {rand({3, 1, 5}, 157)}});
      cases.push_back({op + " axis 1 of a transpose" + k,
                       [=](const Args& x) { return reduce(x[0].transpose(0, 2), {1}, keep); },
                       {rand({3, 4, 5}, 158)}});
      cases.push_back({op + " axis 0 of a slice" + k,
                       [=](const Args& x) { return reduce(x[0].slice(1, 0, 13, 2), {0}, keep); },
                       {rand({7, 13}, 159)}});
      cases.push_back({op + " axis 0 of 70 rows" + k, [=](const Args& x) { return reduce(x[0], {0}, keep); },
                       {rand({70, 2}, 160)}});
    };
    add_cases("sum", &kiln::sum);
    add_cases("mean", &kiln::mean);
  }
  cases.push_back({"sum of a scalar", [](const Args& x) { return sum(x[0]) * x[0]; }, {rand({}, 161)}});
  cases.push_back({"mean of an expand", [](const Args& x) { return mean(x[0].expand({4, 3, 5}), {0, 1}); },
                   {rand({3, 1}, 162)}});
  run(cases);
}

TEST_CASE("gradcheck: max and min over axes (no ties)") {
  std::vector<Case> cases;
  for (bool keep : {false, true}) {
    std::string k = keep ? " keepdim" : "";
    auto add_cases = [&](const std::string& op, Reduce reduce) {
      cases.push_back({op + " axis 1" + k, [=](const Args& x) { return reduce(x[0], {1}, keep); },
                       {distinct({3, 4, 5}, 170)}});
      cases.push_back({op + " axis -1" + k, [=](const Args& x) { return reduce(x[0], {-1}, keep); },
                       {distinct({7, 13}, 171)}});
      cases.push_back({op + " axis 0" + k, [=](const Args& x) { return reduce(x[0], {0}, keep); },
                       {distinct({37, 2}, 172)}});
      cases.push_back({op + " axes 1,2 (adjacent)" + k,
                       [=](const Args& x) { return reduce(x[0], {1, 2}, keep); },
                       {distinct({2, 3, 4, 5}, 173)}});
      cases.push_back({op + " axes 0,2 (apart)" + k, [=](const Args& x) { return reduce(x[0], {0, 2}, keep); },
                       {distinct({3, 4, 5}, 174)}});
      cases.push_back({op + " all axes" + k, [=](const Args& x) { return reduce(x[0], {}, keep); },
                       {distinct({3, 4, 5}, 175)}});
      cases.push_back({op + " size-1 axis" + k, [=](const Args& x) { return reduce(x[0], {1}, keep); },
                       {distinct({3, 1, 5}, 176)}});
      cases.push_back({op + " axis 0 of a transpose" + k,
                       [=](const Args& x) { return reduce(x[0].t(), {0}, keep); }, {distinct({7, 13}, 177)}});
    };
    add_cases("max", &kiln::max);
    add_cases("min", &kiln::min);
  }
  run(cases);
}

TEST_CASE("max and min share the gradient evenly between ties") {
  Tensor x = leaf({1, 3, 3, -2, -2, 0}, {2, 3});
  max(x, {1}).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 0.5, 0.5, 0, 0, 1});
  x.zero_grad();
  min(x, {1}).sum().backward();
  CHECK(values(x.grad()) == std::vector<double>{1, 0, 0, 0.5, 0.5, 0});
  x.zero_grad();
  max(x).backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 0.5, 0.5, 0, 0, 0});
  x.zero_grad();
  maximum(x, from_vector<double>({3, 3, 3}, {3})).sum().backward();  // ties with the other operand
  CHECK(values(x.grad()) == std::vector<double>{0, 0.5, 0.5, 0, 0, 0});
}

TEST_CASE("gradcheck: matmul") {
  run({
      {"1-D . 1-D", [](const Args& x) { return matmul(x[0], x[1]); }, {rand({5}, 200), rand({5}, 201)}},
      {"1-D x 2-D", [](const Args& x) { return matmul(x[0], x[1]); }, {rand({5}, 202), rand({5, 7}, 203)}},
      {"2-D x 1-D", [](const Args& x) { return matmul(x[0], x[1]); }, {rand({4, 5}, 204), rand({5}, 205)}},
      {"1-D x 3-D", [](const Args& x) { return matmul(x[0], x[1]); }, {rand({5}, 206), rand({2, 5, 3}, 207)}},
      {"3-D x 1-D", [](const Args& x) { return matmul(x[0], x[1]); }, {rand({2, 3, 5}, 208), rand({5}, 209)}},
      {"[7,13] x [13,5]", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({7, 13}, 210), rand({13, 5}, 211)}},
      {"[1,13] x [13,1]", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({1, 13}, 212), rand({13, 1}, 213)}},
      {"batched broadcast [2,1,4,5] x [3,5,6]", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({2, 1, 4, 5}, 214), rand({3, 5, 6}, 215)}},
      {"batched x matrix [3,4,5] x [5,6]", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({3, 4, 5}, 216), rand({5, 6}, 217)}},
      {"matrix x batched [4,5] x [3,5,6]", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({4, 5}, 218), rand({3, 5, 6}, 219)}},
      {"batch dims [2,1] x [1,3]", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({2, 1, 3, 4}, 220), rand({1, 3, 4, 2}, 221)}},
      {"transposed A", [](const Args& x) { return matmul(x[0].t(), x[1]); },
       {rand({13, 7}, 222), rand({13, 5}, 223)}},
      {"transposed B", [](const Args& x) { return matmul(x[0], x[1].t()); },
       {rand({7, 13}, 224), rand({5, 13}, 225)}},
      {"both transposed", [](const Args& x) { return matmul(x[0].t(), x[1].t()); },
       {rand({13, 7}, 226), rand({5, 13}, 227)}},
      {"batched transposed operands",
       [](const Args& x) { return matmul(x[0].transpose(-1, -2), x[1].transpose(1, 2)); },
       {rand({3, 5, 4}, 228), rand({3, 6, 5}, 229)}},
      {"A a column slice (ld > k)", [](const Args& x) { return matmul(x[0].slice(1, 2, 9), x[1]); },
       {rand({7, 13}, 230), rand({7, 5}, 231)}},
      {"A a strided slice (step 2)", [](const Args& x) { return matmul(x[0].slice(1, 0, 13, 2), x[1]); },
       {rand({5, 13}, 232), rand({7, 3}, 233)}},
      {"B a row slice of a transpose", [](const Args& x) { return matmul(x[0], x[1].t().slice(0, 1, 6)); },
       {rand({4, 5}, 234), rand({7, 6}, 235)}},
      {"batch slice (every other matrix)", [](const Args& x) { return matmul(x[0].slice(0, 0, 4, 2), x[1]); },
       {rand({4, 3, 5}, 236), rand({2, 5, 2}, 237)}},
      {"expanded (stride-0) operand", [](const Args& x) { return matmul(x[0].expand({3, 4, 5}), x[1]); },
       {rand({1, 4, 5}, 238), rand({3, 5, 2}, 239)}},
      {"the same tensor on both sides", [](const Args& x) { return matmul(x[0], x[0].t()); },
       {rand({4, 7}, 240)}},
      {"permuted batch axes", [](const Args& x) { return matmul(x[0].permute({1, 0, 2}), x[1]); },
       {rand({4, 3, 5}, 241), rand({3, 5, 2}, 242)}},
  });
}

TEST_CASE("gradcheck: matmul past the small-product path (directional, f64)") {
  run_directional({
      {"[97,113] x [113,71]", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({97, 113}, 250), rand({113, 71}, 251)}},
      {"[130,300] x [300,75] (k over one KC block)", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({130, 300}, 252), rand({300, 75}, 253)}},
      {"transposed both [88,101]^T x [79,88]^T", [](const Args& x) { return matmul(x[0].t(), x[1].t()); },
       {rand({88, 101}, 254), rand({79, 88}, 255)}},
      {"batched broadcast [2,1,70,90] x [3,90,80]", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({2, 1, 70, 90}, 256), rand({3, 90, 80}, 257)}},
      {"sliced A [100, 2*85:step 2] x [85,73]",
       [](const Args& x) { return matmul(x[0].slice(1, 0, 170, 2), x[1]); },
       {rand({100, 170}, 258), rand({85, 73}, 259)}},
      {"[7,40] x [40,2100] (n over one NC panel)", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({7, 40}, 262), rand({40, 2100}, 263)}},
      {"short and wide [6,200] x [200,2100] (threads split columns)",
       [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({6, 200}, 264), rand({200, 2100}, 265)}},
      {"batched [5,40,90] x [90,80] (one product per thread)", [](const Args& x) { return matmul(x[0], x[1]); },
       {rand({5, 40, 90}, 266), rand({90, 80}, 267)}},
      {"column slice A (ld > k) [111, 5:125] x [120,77]",
       [](const Args& x) { return matmul(x[0].slice(1, 5, 125), x[1]); },
       {rand({111, 130}, 260), rand({120, 77}, 261)}},
  });
}

TEST_CASE("matmul and conv2d forwards on blocked sizes match a naive loop") {
  // gradcheck compares a forward with its own backward; a GEMM that is wrong the same way in
  // both (a skipped k block, say) needs a reference of its own. Sizes cross MC, KC and NC.
  auto naive_matmul = [](const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                         int64_t n) {
    std::vector<double> c(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j)
          c[static_cast<size_t>(i * n + j)] +=
              a[static_cast<size_t>(i * k + p)] * b[static_cast<size_t>(p * n + j)];
    return c;
  };
  struct Size {
    int64_t m, k, n;
  };
  for (Size sz : {Size{97, 113, 71}, Size{130, 300, 75}, Size{7, 40, 2100}, Size{6, 200, 2100},
                  Size{300, 64, 50}, Size{145, 257, 17}}) {
    Tensor a = rand({sz.m, sz.k}, static_cast<uint64_t>(sz.m * 7 + sz.k)).detach();
    Tensor b = rand({sz.k, sz.n}, static_cast<uint64_t>(sz.n * 11 + sz.k)).detach();
    std::vector<double> want = naive_matmul(values(a), values(b), sz.m, sz.k, sz.n);
    std::string what =
        "matmul " + std::to_string(sz.m) + "x" + std::to_string(sz.k) + "x" + std::to_string(sz.n);
    check_close(values(matmul(a, b)), want, 1e-12, what + " f64");
    check_close(values(matmul(a.t().contiguous().t(), b.t().contiguous().t())), want, 1e-12,
                what + " f64, transposed operands");
    check_close(values(matmul(a.to(DType::f32), b.to(DType::f32))), want, 1e-4, what + " f32");
    check_close(values(matmul(a.to(DType::f32).t().contiguous().t(), b.to(DType::f32))), want, 1e-4,
                what + " f32, transposed A");
  }
  // Batched: 5 products of 40x90x80 (each blocked, spread over threads), b broadcast.
  Tensor a = rand({5, 40, 90}, 1001).detach(), b = rand({90, 80}, 1002).detach();
  std::vector<double> av = values(a), bv = values(b), got = values(matmul(a, b));
  std::vector<double> got32 = values(matmul(a.to(DType::f32), b.to(DType::f32)));
  for (int64_t i = 0; i < 5; ++i) {
    std::vector<double> ai(av.begin() + i * 3600, av.begin() + (i + 1) * 3600);
    std::vector<double> want = naive_matmul(ai, bv, 40, 90, 80);
    check_close(std::vector<double>(got.begin() + i * 3200, got.begin() + (i + 1) * 3200), want, 1e-12,
                "batched matmul f64, batch " + std::to_string(i));
    check_close(std::vector<double>(got32.begin() + i * 3200, got32.begin() + (i + 1) * 3200), want, 1e-4,
                "batched matmul f32, batch " + std::to_string(i));
  }

  // conv2d x [3, 12, 11, 13], w [20, 6, 3, 3] (groups 2), stride 2, pad 1, dilation (1, 2).
  const int64_t N = 3, C = 12, H = 11, W = 13, O = 20, G = 2, KH = 3, KW = 3, SH = 2, SW = 2, PH = 1, PW = 1,
                DH = 1, DW = 2;
  const int64_t OH = (H + 2 * PH - DH * (KH - 1) - 1) / SH + 1, OW = (W + 2 * PW - DW * (KW - 1) - 1) / SW + 1;
  Tensor x = rand({N, C, H, W}, 1003).detach(), w = rand({O, C / G, KH, KW}, 1004).detach();
  Tensor bias = rand({O}, 1005).detach();
  std::vector<double> xv = values(x), wv = values(w), bv2 = values(bias);
  std::vector<double> want(static_cast<size_t>(N * O * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          double acc = bv2[static_cast<size_t>(o)];
          int64_t g = o / (O / G);
          for (int64_t c = 0; c < C / G; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t h = i * SH - PH + kh * DH, ww = j * SW - PW + kw * DW;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                acc += wv[static_cast<size_t>(((o * (C / G) + c) * KH + kh) * KW + kw)] *
                       xv[static_cast<size_t>(((n * C + g * (C / G) + c) * H + h) * W + ww)];
              }
          want[static_cast<size_t>(((n * O + o) * OH + i) * OW + j)] = acc;
        }
  Conv2dConfig cfg{{SH, SW}, {PH, PW}, {DH, DW}, G};
  check_close(values(conv2d(x, w, bias, cfg)), want, 1e-12, "conv2d f64");
  check_close(values(conv2d(x.to(DType::f32), w.to(DType::f32), bias.to(DType::f32), cfg)), want, 1e-4,
              "conv2d f32");
}

TEST_CASE("gradcheck: softmax and log_softmax") {
  std::vector<Case> cases;
  for (int64_t axis : {0, 1, 2, -1}) {
    std::string a = std::to_string(axis);
    cases.push_back({"softmax axis " + a, [=](const Args& x) { return softmax(x[0], axis); },
                     {rand({3, 4, 5}, 300, -2, 2)}});
    cases.push_back({"log_softmax axis " + a, [=](const Args& x) { return log_softmax(x[0], axis); },
                     {rand({3, 4, 5}, 301, -2, 2)}});
  }
  cases.push_back({"softmax 37 classes", [](const Args& x) { return softmax(x[0], 1); },
                   {rand({2, 37}, 302, -3, 3)}});
  cases.push_back({"log_softmax 37 classes", [](const Args& x) { return log_softmax(x[0], -1); },
                   {rand({2, 37}, 303, -3, 3)}});
  cases.push_back({"softmax of a transpose", [](const Args& x) { return softmax(x[0].t(), 1); },
                   {rand({7, 3}, 304)}});
  cases.push_back({"log_softmax of a slice",
                   [](const Args& x) { return log_softmax(x[0].slice(1, 0, 13, 2), 0); },
                   {rand({7, 13}, 305)}});
  cases.push_back({"softmax over a size-1 axis", [](const Args& x) { return softmax(x[0], 1) * x[0]; },
                   {rand({3, 1, 2}, 306)}});
  cases.push_back({"softmax of a 1-D tensor", [](const Args& x) { return softmax(x[0], 0); },
                   {rand({13}, 307)}});
  cases.push_back({"softmax of large logits (shifted by 500)",
                   [](const Args& x) { return softmax(x[0] + 500.0, 1); },
                   {rand({2, 7}, 308)}});
  run(cases);
}

TEST_CASE("gradcheck: losses") {
  Tensor t5 = labels({0, 6, 3, 3, 1});
  std::vector<Case> cases;
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    std::string rn = r == Reduction::mean ? "mean" : r == Reduction::sum ? "sum" : "none";
    for (double ls : {0.0, 0.1}) {
      std::string name = "cross_entropy " + rn + " smoothing " + std::to_string(ls);
      cases.push_back({name, [=](const Args& x) { return cross_entropy(x[0], t5, r, ls); },
                       {rand({5, 7}, 320, -2, 2)}});
      cases.push_back({name + " of a transpose",
                       [=](const Args& x) { return cross_entropy(x[0].t(), t5, r, ls); },
                       {rand({7, 5}, 321, -2, 2)}});
    }
    cases.push_back({"nll_loss " + rn, [=](const Args& x) { return nll_loss(x[0], t5, r); },
                     {rand({5, 7}, 322)}});
    cases.push_back({"nll_loss of log_softmax " + rn,
                     [=](const Args& x) { return nll_loss(log_softmax(x[0], 1), t5, r); },
                     {rand({5, 7}, 323)}});
    cases.push_back({"mse_loss " + rn, [=](const Args& x) { return mse_loss(x[0], x[1], r); },
                     {rand({3, 13}, 324), rand({3, 13}, 325)}});
    cases.push_back({"mse_loss of a transpose " + rn,
                     [=](const Args& x) { return mse_loss(x[0].t(), x[1], r); },
                     {rand({4, 3}, 326), rand({3, 4}, 327)}});
  }
  cases.push_back({"cross_entropy one sample, 37 classes, smoothing 0.3",
                   [](const Args& x) { return cross_entropy(x[0], labels({36}), Reduction::mean, 0.3); },
                   {rand({1, 37}, 328, -3, 3)}});
  cases.push_back({"cross_entropy smoothing 1",
                   [=](const Args& x) { return cross_entropy(x[0], t5, Reduction::sum, 1.0); },
                   {rand({5, 7}, 329)}});
  run(cases);
}

TEST_CASE("gradcheck: conv2d") {
  auto conv = [](Conv2dConfig c, bool bias) {
    return [c, bias](const Args& x) { return conv2d(x[0], x[1], bias ? x[2] : Tensor(), c); };
  };
  Conv2dConfig plain;
  Conv2dConfig s2p1{{2, 2}, {1, 1}, {1, 1}, 1};
  Conv2dConfig dil2{{1, 1}, {2, 2}, {2, 2}, 1};
  Conv2dConfig groups2{{1, 1}, {1, 1}, {1, 1}, 2};
  Conv2dConfig mixed{{2, 1}, {1, 0}, {1, 2}, 1};
  Conv2dConfig groups2_s2{{2, 2}, {0, 1}, {1, 1}, 2};
  run({
      {"conv2d 3->4, 3x3, bias", conv(plain, true),
       {rand({2, 3, 7, 6}, 400), rand({4, 3, 3, 3}, 401), rand({4}, 402)}},
      {"conv2d no bias", conv(plain, false), {rand({2, 3, 7, 6}, 403), rand({4, 3, 3, 3}, 404)}},
      {"conv2d stride 2 pad 1, kernel 3x2, input 7x9", conv(s2p1, true),
       {rand({2, 3, 7, 9}, 405), rand({4, 3, 3, 2}, 406), rand({4}, 407)}},
      {"conv2d dilation 2 pad 2", conv(dil2, true),
       {rand({1, 2, 7, 8}, 408), rand({3, 2, 3, 3}, 409), rand({3}, 410)}},
      {"conv2d groups 2, pad 1", conv(groups2, true),
       {rand({2, 4, 6, 7}, 411), rand({6, 2, 3, 3}, 412), rand({6}, 413)}},
      {"conv2d groups 2 no bias, stride 2, pad (0,1)", conv(groups2_s2, false),
       {rand({1, 4, 7, 5}, 414), rand({4, 2, 2, 3}, 415)}},
      {"conv2d stride (2,1) pad (1,0) dilation (1,2)", conv(mixed, true),
       {rand({2, 2, 7, 9}, 416), rand({3, 2, 3, 2}, 417), rand({3}, 418)}},
      {"conv2d 1x1 kernel", conv(plain, true),
       {rand({2, 5, 3, 4}, 419), rand({3, 5, 1, 1}, 420), rand({3}, 421)}},
      {"conv2d 1x1 spatial input, kernel 1x1", conv(plain, false),
       {rand({3, 4, 1, 1}, 422), rand({2, 4, 1, 1}, 423)}},
      {"conv2d kernel as large as the input", conv(plain, true),
       {rand({2, 2, 3, 4}, 424), rand({3, 2, 3, 4}, 425), rand({3}, 426)}},
      {"conv2d of a permuted (NHWC-stored) input",
       [](const Args& x) { return conv2d(x[0].permute({0, 3, 1, 2}), x[1], x[2]); },
       {rand({2, 6, 5, 3}, 427), rand({2, 3, 3, 3}, 428), rand({2}, 429)}},
      {"conv2d of a transposed weight", [](const Args& x) { return conv2d(x[0], x[1].transpose(0, 1)); },
       {rand({1, 3, 5, 5}, 430), rand({3, 2, 3, 3}, 431)}},
      {"conv2d with the weight broadcast from one filter",
       [](const Args& x) { return conv2d(x[0], x[1].expand({4, 2, 3, 3}), x[2]); },
       {rand({2, 2, 5, 6}, 432), rand({1, 2, 3, 3}, 433), rand({4}, 434)}},
  });
}

TEST_CASE("gradcheck: matmul and conv2d with a fused epilogue (bias, ReLU)") {
  const Conv2dConfig plain, groups2{{1, 1}, {1, 1}, {1, 1}, 2};
  run({
      {"matmul + bias + relu", [](const Args& x) { return matmul(x[0], x[1], x[2], Activation::relu); },
       {rand({7, 13}, 250), rand({13, 5}, 251), rand({5}, 252)}},
      {"matmul (A^T) + relu, no bias", [](const Args& x) { return matmul(x[0].t(), x[1], {}, Activation::relu); },
       {rand({13, 7}, 253), rand({13, 5}, 254)}},
      {"matmul (B^T) + bias", [](const Args& x) { return matmul(x[0], x[1].t(), x[2], Activation::none); },
       {rand({4, 9}, 255), rand({6, 9}, 256), rand({6}, 257)}},
      {"conv2d + bias + relu", [plain](const Args& x) { return conv2d(x[0], x[1], x[2], plain, Activation::relu); },
       {rand({2, 3, 6, 7}, 258), rand({4, 3, 3, 3}, 259), rand({4}, 260)}},
      {"conv2d groups 2 pad 1 + relu, no bias",
       [groups2](const Args& x) { return conv2d(x[0], x[1], {}, groups2, Activation::relu); },
       {rand({2, 4, 5, 6}, 261), rand({6, 2, 3, 3}, 262)}},
      // relu's gradient folded into the op after it (autograd::Needed): a pool, a convolution, both
      {"conv2d + relu, then max_pool2d 2x2",
       [](const Args& x) { return max_pool2d(conv2d(x[0], x[1], x[2], {}, Activation::relu), {.kernel = {2, 2}}); },
       {distinct({2, 2, 7, 7}, 263), rand({3, 2, 2, 2}, 264), rand({3}, 265)}},
      {"relu, then conv2d and an overlapping max_pool2d",
       [](const Args& x) {
         Tensor r = relu(x[0]);
         Tensor pooled = sum(max_pool2d(r, {{3, 3}, {1, 1}, {1, 1}, true}), {1}, true);
         return conv2d(r, x[1], {}, {.padding = {1, 1}}) + pooled;
       },
       {rand({2, 3, 5, 6}, 266), rand({1, 3, 3, 3}, 267)}},
  });
}

TEST_CASE("the fused epilogue gives the bits of the ops it replaces, forward and backward") {
  for (DType t : {DType::f32, DType::f64}) {
    const std::string name(dtype_name(t));
    // linear: x [9, 20] W^T + b, then relu
    auto leaf_of = [t](const Tensor& v) { return v.detach().to(t).requires_grad_(); };
    Tensor x = leaf_of(rand({9, 20}, 270)), w = leaf_of(rand({7, 20}, 271)), b = leaf_of(rand({7}, 272));
    Tensor xs = x.detach().requires_grad_(), ws = w.detach().requires_grad_(), bs = b.detach().requires_grad_();
    Tensor fused = matmul(x, w.t(), b, Activation::relu), plain = relu(matmul(xs, ws.t()) + bs);
    CHECK_MESSAGE(fused.to_vector<double>() == plain.to_vector<double>(), "matmul epilogue " << name);
    Tensor g = rand({9, 7}, 273).detach().to(t);
    fused.backward(g);
    plain.backward(g);
    check_close(values(x.grad()), values(xs.grad()), 1e-12, "matmul epilogue grad x " + name);
    check_close(values(w.grad()), values(ws.grad()), 1e-12, "matmul epilogue grad w " + name);
    check_close(values(b.grad()), values(bs.grad()), 1e-12, "matmul epilogue grad b " + name);
    // conv2d with a bias, then relu
    Tensor cx = rand({2, 3, 8, 9}, 274).detach().to(t), cw = rand({5, 3, 3, 3}, 275).detach().to(t);
    Tensor cb = rand({5}, 276).detach().to(t);
    const Conv2dConfig pad1{{1, 1}, {1, 1}, {1, 1}, 1};
    CHECK_MESSAGE(conv2d(cx, cw, cb, pad1, Activation::relu).to_vector<double>() ==
                      relu(conv2d(cx, cw, cb, pad1)).to_vector<double>(),
                  "conv2d epilogue " << name);
  }
  // what the epilogue refuses
  Tensor a = rand({3, 4}, 277), b = rand({4, 5}, 278);
  CHECK_THROWS_AS(matmul(a, b, rand({4}, 279), Activation::relu), ShapeError);  // bias of m, not n
  CHECK_THROWS_AS(matmul(a.unsqueeze(0), b, {}, Activation::relu), ShapeError);   // 2-D operands only
  CHECK_THROWS_AS(matmul(a, b, rand({5}, 280).to(DType::f32), Activation::none), ShapeError);  // dtype
}

TEST_CASE("gradcheck: pooling") {
  auto maxp = [](Pool2dConfig c) { return [c](const Args& x) { return max_pool2d(x[0], c); }; };
  auto avgp = [](Pool2dConfig c) { return [c](const Args& x) { return avg_pool2d(x[0], c); }; };
  Pool2dConfig k2;
  Pool2dConfig k3s2p1{{3, 3}, {2, 2}, {1, 1}, true};
  Pool2dConfig k3s2p1_excl{{3, 3}, {2, 2}, {1, 1}, false};
  Pool2dConfig k23s12p11{{2, 3}, {1, 2}, {1, 1}, true};
  Pool2dConfig k23s12p11_excl{{2, 3}, {1, 2}, {1, 1}, false};
  Pool2dConfig k3s1{{3, 3}, {1, 1}, {0, 0}, true};
  run({
      {"max_pool2d 2x2", maxp(k2), {distinct({2, 3, 7, 9}, 500)}},
      {"max_pool2d 3x3 stride 2 pad 1", maxp(k3s2p1), {distinct({2, 3, 7, 9}, 501)}},
      {"max_pool2d 2x3 stride (1,2) pad 1", maxp(k23s12p11), {distinct({1, 2, 7, 6}, 502)}},
      {"max_pool2d 3x3 stride 1 (overlapping)", maxp(k3s1), {distinct({1, 2, 6, 7}, 503)}},
      {"max_pool2d of negative values with padding",
       [](const Args& x) { return max_pool2d(x[0] - 10.0, {{3, 3}, {2, 2}, {1, 1}, true}); },
       {distinct({1, 2, 5, 5}, 504)}},
      {"max_pool2d of a transpose",
       [](const Args& x) { return max_pool2d(x[0].transpose(2, 3), {{3, 3}, {2, 2}, {1, 1}, true}); },
       {distinct({2, 2, 9, 7}, 505)}},
      {"avg_pool2d 2x2", avgp(k2), {rand({2, 3, 7, 9}, 510)}},
      {"avg_pool2d 3x3 stride 2 pad 1 include pad", avgp(k3s2p1), {rand({2, 3, 7, 9}, 511)}},
      {"avg_pool2d 3x3 stride 2 pad 1 exclude pad", avgp(k3s2p1_excl), {rand({2, 3, 7, 9}, 512)}},
      {"avg_pool2d 2x3 stride (1,2) pad 1 include pad", avgp(k23s12p11), {rand({1, 2, 7, 6}, 513)}},
      {"avg_pool2d 2x3 stride (1,2) pad 1 exclude pad", avgp(k23s12p11_excl), {rand({1, 2, 7, 6}, 514)}},
      {"avg_pool2d 3x3 stride 1", avgp(k3s1), {rand({1, 2, 6, 7}, 515)}},
      {"avg_pool2d of a permute",
       [](const Args& x) { return avg_pool2d(x[0].permute({0, 3, 1, 2}), {{3, 3}, {2, 2}, {1, 1}, false}); },
       {rand({2, 7, 5, 3}, 516)}},
  });
}

TEST_CASE("gradcheck: conv2d, pooling and batch_norm on larger inputs (directional, f64)") {
  // Batches past the thread count and planes past the parallel grain.
  run_directional({
      {"conv2d batch 9, 8->12, 3x3 pad 1 stride 2, 29x31",
       [](const Args& x) { return conv2d(x[0], x[1], x[2], {{2, 2}, {1, 1}, {1, 1}, 1}); },
       {rand({9, 8, 29, 31}, 450), rand({12, 8, 3, 3}, 451), rand({12}, 452)}},
      {"conv2d groups 4 dilation 2, batch 3, 16->8, 21x19",
       [](const Args& x) { return conv2d(x[0], x[1], x[2], {{1, 1}, {2, 2}, {2, 2}, 4}); },
       {rand({3, 16, 21, 19}, 453), rand({8, 4, 3, 3}, 454), rand({8}, 455)}},
      {"max_pool2d 3x3 stride 2 pad 1 on [8,16,33,33]",
       [](const Args& x) { return max_pool2d(x[0], {{3, 3}, {2, 2}, {1, 1}, true}); },
       {distinct({8, 16, 33, 33}, 456, 1e-5)}},
      {"avg_pool2d 3x3 stride 2 pad 1 exclude pad on [8,16,33,33]",
       [](const Args& x) { return avg_pool2d(x[0], {{3, 3}, {2, 2}, {1, 1}, false}); },
       {rand({8, 16, 33, 33}, 457)}},
      {"batch_norm training [16,24,13,11]",
       [](const Args& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true); },
       {rand({16, 24, 13, 11}, 458), rand({24}, 459), rand({24}, 460)}},
      {"cross_entropy 300x37 smoothing 0.1",
       [](const Args& x) {
         std::vector<int32_t> t(300);
         for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 13) % 37);
         return cross_entropy(x[0], labels(t), Reduction::sum, 0.1);
       },
       {rand({300, 37}, 461, -3, 3)}},
  });
}

TEST_CASE("gradcheck: batch_norm") {
  auto bn_train = [](bool affine) {
    return [affine](const Args& x) {
      return batch_norm(x[0], Tensor(), Tensor(), affine ? x[1] : Tensor(), affine ? x[2] : Tensor(), true);
    };
  };
  // Eval: the running statistics are constants (captured, no gradient).
  Tensor rm = from_vector<double>({0.3, -0.2, 0.5}, {3});
  Tensor rv = from_vector<double>({0.8, 1.5, 0.4}, {3});
  run({
      {"batch_norm training [N,C] affine", bn_train(true),
       {rand({5, 3}, 600), rand({3}, 601, 0.5, 1.5), rand({3}, 602)}},
      {"batch_norm training [N,C,L] affine", bn_train(true),
       {rand({4, 3, 5}, 603), rand({3}, 604, 0.5, 1.5), rand({3}, 605)}},
      {"batch_norm training [N,C,H,W] affine", bn_train(true),
       {rand({2, 3, 4, 5}, 606), rand({3}, 607, 0.5, 1.5), rand({3}, 608)}},
      {"batch_norm training no weight/bias", bn_train(false), {rand({2, 3, 4, 5}, 609)}},
      {"batch_norm training, running stats given (updated each call)",
       [](const Args& x) {
         Tensor m = zeros({3}, DType::f64), v = ones({3}, DType::f64);
         return batch_norm(x[0], m, v, x[1], x[2], true, 0.3, 1e-3);
       },
       {rand({4, 3, 2}, 610), rand({3}, 611), rand({3}, 612)}},
      {"batch_norm training of a permuted input",
       [](const Args& x) {
         return batch_norm(x[0].permute({0, 3, 1, 2}), Tensor(), Tensor(), x[1], x[2], true);
       },
       {rand({2, 4, 5, 3}, 613), rand({3}, 614), rand({3}, 615)}},
      {"batch_norm eval affine", [=](const Args& x) { return batch_norm(x[0], rm, rv, x[1], x[2], false); },
       {rand({2, 3, 4, 5}, 616), rand({3}, 617), rand({3}, 618)}},
      {"batch_norm eval no weight/bias",
       [=](const Args& x) { return batch_norm(x[0], rm, rv, Tensor(), Tensor(), false); },
       {rand({4, 3}, 619)}},
  });
}

TEST_CASE("batch_norm updates the running statistics as PyTorch does") {
  // x [N=4, C=2]: channel 0 is 1, 2, 3, 4 (mean 2.5, unbiased var 5/3, biased 5/4);
  // channel 1 is 2, 4, 6, 8 (mean 5, unbiased var 20/3, biased 5).
  Tensor x = from_vector<double>({1, 2, 2, 4, 3, 6, 4, 8}, {4, 2});
  Tensor rm = from_vector<double>({0.5, -1.0}, {2});
  Tensor rv = from_vector<double>({2.0, 3.0}, {2});
  Tensor y = batch_norm(x, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
  // running = 0.9 * running + 0.1 * batch statistic (unbiased for the variance)
  check_close(values(rm), {0.9 * 0.5 + 0.1 * 2.5, 0.9 * -1.0 + 0.1 * 5.0}, 1e-14, "running_mean");
  check_close(values(rv), {0.9 * 2.0 + 0.1 * 5.0 / 3.0, 0.9 * 3.0 + 0.1 * 20.0 / 3.0}, 1e-14, "running_var");
  // the output is normalised with the biased variance
  double s0 = std::sqrt(1.25 + 1e-5), s1 = std::sqrt(5.0 + 1e-5);
  check_close(values(y), {-1.5 / s0, -3 / s1, -0.5 / s0, -1 / s1, 0.5 / s0, 1 / s1, 1.5 / s0, 3 / s1}, 1e-12,
              "training output");

  // A second step with momentum 0.5 starts from the updated values.
  Tensor x2 = from_vector<double>({0, 10, 2, 10, 4, 10, 6, 10}, {4, 2});  // channel 1 constant
  batch_norm(x2, rm, rv, Tensor(), Tensor(), true, 0.5, 1e-5);
  check_close(values(rm), {0.5 * 0.7 + 0.5 * 3.0, 0.5 * -0.4 + 0.5 * 10.0}, 1e-14, "running_mean, step 2");
  check_close(values(rv), {0.5 * (1.8 + 0.5 / 3.0) + 0.5 * 20.0 / 3.0, 0.5 * (2.7 + 2.0 / 3.0) + 0.0}, 1e-14,
              "running_var, step 2");

  // [N, C, H, W]: statistics over N, H and W (N*H*W = 4 values per channel).
  Tensor x4 = from_vector<double>({1, 3, 10, 30, 5, 7, 50, 70}, {2, 2, 2, 1});
  Tensor rm4 = zeros({2}, DType::f64), rv4 = ones({2}, DType::f64);
  Tensor w = from_vector<double>({2, 3}, {2}), b = from_vector<double>({-1, 1}, {2});
  Tensor y4 = batch_norm(x4, rm4, rv4, w, b, true, 0.1, 0.0);
  // channel 0: 1, 3, 5, 7 (mean 4, biased var 5, unbiased 20/3); channel 1: 10, 30, 50, 70 (mean 40,
  // biased var 500, unbiased 2000/3)
  check_close(values(rm4), {0.4, 4.0}, 1e-14, "running_mean 4-D");
  check_close(values(rv4), {0.9 + 0.1 * 20.0 / 3.0, 0.9 + 0.1 * 2000.0 / 3.0}, 1e-13, "running_var 4-D");
  double r5 = std::sqrt(5.0), r500 = std::sqrt(500.0);
  check_close(values(y4),
              {2 * -3 / r5 - 1, 2 * -1 / r5 - 1, 3 * -30 / r500 + 1, 3 * -10 / r500 + 1, 2 * 1 / r5 - 1,
               2 * 3 / r5 - 1, 3 * 10 / r500 + 1, 3 * 30 / r500 + 1},
              1e-12, "affine output 4-D");

  // Eval uses the running statistics and leaves them alone.
  Tensor ye = batch_norm(x, rm4, rv4, Tensor(), Tensor(), false, 0.1, 0.0);
  double v0 = 0.9 + 0.1 * 20.0 / 3.0, v1 = 0.9 + 0.1 * 2000.0 / 3.0;
  check_close(values(ye),
              {(1 - 0.4) / std::sqrt(v0), (2 - 4.0) / std::sqrt(v1), (2 - 0.4) / std::sqrt(v0),
               (4 - 4.0) / std::sqrt(v1), (3 - 0.4) / std::sqrt(v0), (6 - 4.0) / std::sqrt(v1),
               (4 - 0.4) / std::sqrt(v0), (8 - 4.0) / std::sqrt(v1)},
              1e-12, "eval output");
  check_close(values(rm4), {0.4, 4.0}, 0.0, "running_mean after eval");
}

TEST_CASE("dropout in one kernel gives the bits of uniform, compare and multiply, and the gradient its mask") {
  for (DType t : {DType::f32, DType::f64})
    for (double p : {0.1, 0.25, 0.5, 0.9}) {
      const std::string what = std::string(dtype_name(t)) + " p " + std::to_string(p);
      Tensor x = rand({37, 29}, 710).detach().to(t).requires_grad_();
      Generator a(11), b(11);
      (void)uniform({5}, 0, 1, {}, &a);  // mid-stream, both
      (void)uniform({5}, 0, 1, {}, &b);
      Tensor y = dropout(x, p, true, &a);
      // the same draw, step by step: what dropout computed before it was one kernel
      Tensor mask = mul(gt(uniform(x.shape(), 0.0, 1.0, t, &b), p), 1.0 / (1.0 - p));
      CHECK_MESSAGE(y.to_vector<double>() == (x.detach() * mask).to_vector<double>(), what);
      CHECK_MESSAGE(a.offset() == b.offset(), what);  // the generator advanced as much
      Tensor g = rand({37, 29}, 711).detach().to(t);
      y.backward(g);
      CHECK_MESSAGE(x.grad().to_vector<double>() == (g * mask).to_vector<double>(), what << " gradient");
      // a view goes in as its values
      Generator c(11);
      (void)uniform({5}, 0, 1, {}, &c);
      Tensor xt = x.detach().t();
      CHECK_MESSAGE(dropout(xt, p, true, &c).to_vector<double>() ==
                        (xt.contiguous() * mask.reshape({29, 37})).to_vector<double>(),
                    what << " transposed");
    }
}

TEST_CASE("gradcheck: dropout with a fixed generator") {
  // f draws with a fresh Generator(seed) each call, so every evaluation sees the same mask.
  auto drop = [](double p, uint64_t seed) {
    return [p, seed](const Args& x) {
      Generator gen(seed);
      return dropout(x[0], p, true, &gen);
    };
  };
  run({
      {"dropout p 0.3", drop(0.3, 7), {rand({7, 13}, 700)}},
      {"dropout p 0.5 of a transpose",
       [](const Args& x) {
         Generator gen(8);
         return dropout(x[0].t(), 0.5, true, &gen) * x[0].t();
       },
       {rand({5, 7}, 701)}},
      {"dropout p 0 (identity)", drop(0.0, 9), {rand({37}, 702)}},
      {"dropout p 1 (all zero)", drop(1.0, 9), {rand({13}, 703)}},
      {"dropout in eval", [](const Args& x) { return dropout(x[0], 0.5, false) * 2.0; }, {rand({13}, 704)}},
      {"max_pool2d_dropout 2x2 p 0.3",
       [](const Args& x) {
         Generator gen(10);
         return max_pool2d_dropout(x[0], {.kernel = {2, 2}}, 0.3, true, &gen);
       },
       {distinct({2, 3, 6, 8}, 705)}},
      {"max_pool2d_dropout 3x3 stride 1 pad 1 (overlapping) p 0.5",
       [](const Args& x) {
         Generator gen(11);
         return max_pool2d_dropout(x[0], {{3, 3}, {1, 1}, {1, 1}, true}, 0.5, true, &gen);
       },
       {distinct({1, 2, 5, 6}, 706)}},
  });
}

TEST_CASE("dropout zeroes about p of the elements and scales the rest by 1 / (1 - p)") {
  Tensor x = full({100000}, 2.0, DType::f64);
  Generator gen(11);
  std::vector<double> y = values(dropout(x, 0.25, true, &gen));
  size_t zeros_seen = 0;
  bool scaled = true;
  for (double v : y) {
    if (v == 0.0) ++zeros_seen;
    else scaled = scaled && std::abs(v - 2.0 / 0.75) < 1e-12;
  }
  CHECK(scaled);
  CHECK(static_cast<double>(zeros_seen) / 1e5 == doctest::Approx(0.25).epsilon(0.02));
  Generator same(11);
  CHECK(values(dropout(x, 0.25, true, &same)) == y);  // same seed, same mask
  CHECK(values(dropout(x, 0.25, false)) == values(x));
}

TEST_CASE("forward values gradcheck cannot judge") {
  SUBCASE("argmax and argmin return the first index of ties, as i32") {
    Tensor x = from_vector<double>({1, 5, 5, 0, 0, -2, -2, 7, 3, 3, 3, 3}, {3, 4});
    Tensor am = argmax(x, 1);
    CHECK(am.dtype() == DType::i32);
    CHECK(am.shape() == Shape{3});
    CHECK(am.to_vector<int32_t>() == std::vector<int32_t>{1, 3, 0});
    CHECK(argmin(x, 1).to_vector<int32_t>() == std::vector<int32_t>{3, 1, 0});
    CHECK(argmax(x, 0).to_vector<int32_t>() == std::vector<int32_t>{2, 0, 0, 1});
    CHECK(argmin(x, 0).to_vector<int32_t>() == std::vector<int32_t>{1, 1, 1, 0});
    CHECK(argmax(x, 1, true).shape() == Shape{3, 1});
    // on a transposed view, and in f32 and i32
    CHECK(argmax(x.t(), 0).to_vector<int32_t>() == std::vector<int32_t>{1, 3, 0});
    CHECK(argmin(x.to(DType::f32), -1).to_vector<int32_t>() == std::vector<int32_t>{3, 1, 0});
    CHECK(argmax(x.to(DType::i32), 1).to_vector<int32_t>() == std::vector<int32_t>{1, 3, 0});
    // a long row: the first of two equal maxima far apart
    std::vector<double> row(1000, 0.0);
    row[123] = row[877] = 9.0;
    CHECK(argmax(from_vector<double>(row, {1, 1000}), 1).to_vector<int32_t>() == std::vector<int32_t>{123});
  }
  SUBCASE("comparisons give 0 or 1 in the operands' dtype") {
    for (DType t : {DType::f64, DType::f32, DType::i32}) {
      CAPTURE(t);
      Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2}).to(t);
      Tensor b = from_vector<double>({2, 2}, {2}).to(t);  // broadcast over rows
      CHECK(eq(a, b).dtype() == t);
      CHECK(values(eq(a, b)) == std::vector<double>{0, 1, 0, 0});
      CHECK(values(ne(a, b)) == std::vector<double>{1, 0, 1, 1});
      CHECK(values(gt(a, b)) == std::vector<double>{0, 0, 1, 1});
      CHECK(values(ge(a, b)) == std::vector<double>{0, 1, 1, 1});
      CHECK(values(lt(a, b)) == std::vector<double>{1, 0, 0, 0});
      CHECK(values(le(a, b)) == std::vector<double>{1, 1, 0, 0});
      CHECK(values(eq(a, 3.0)) == std::vector<double>{0, 0, 1, 0});
      CHECK(values(gt(a, 2.0)) == std::vector<double>{0, 0, 1, 1});
      CHECK(values(lt(a, 2.0)) == std::vector<double>{1, 0, 0, 0});
      CHECK(values(gt(a.t(), b)) == std::vector<double>{0, 1, 0, 1});  // a view
    }
    Tensor x = from_vector<double>({1, 2}, {2}, TensorOptions(DType::f64).requires_grad());
    CHECK_FALSE(gt(x, 1.5).requires_grad());  // not differentiable
  }
  SUBCASE("isfinite: 1 on finite values, 0 on NaN and infinities, in x's dtype; no gradient") {
    // NaN, +inf, -inf, 0, -0, the smallest and a larger denormal, the largest finite values, ordinary values
    using F = std::numeric_limits<float>;
    using D = std::numeric_limits<double>;
    const std::vector<double> want{0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const Tensor f32 = from_vector<float>({F::quiet_NaN(), F::infinity(), -F::infinity(), 0.0f, -0.0f, F::denorm_min(),
                                           -1e-40f, F::max(), F::lowest(), 1.5f, -3.0f, 1e-30f},
                                          {3, 4});
    const Tensor f64 = from_vector<double>({-D::quiet_NaN(), -D::infinity(), D::infinity(), -0.0, 0.0, -D::denorm_min(),
                                            1e-310, D::max(), D::lowest(), 3.4028234663852886e38, -7.0, 1e-300},
                                           {3, 4});
    for (const Tensor& x : {f32, f64}) {
      CAPTURE(x.dtype());
      Tensor y = isfinite(x);
      CHECK(y.dtype() == x.dtype());
      CHECK(y.shape() == Shape{3, 4});
      CHECK(values(y) == want);
      CHECK(values(isfinite(x.t())) == values(from_vector<double>(want, {3, 4}).t()));  // a view
    }
    // integers hold no NaN or infinity, even with an infinity's or a NaN's bits
    Tensor ints = from_vector<int32_t>({-2147483647 - 1, 2147483647, 0, 0x7f800000, 0x7fc00000, -8388608}, {6});
    CHECK(isfinite(ints).dtype() == DType::i32);
    CHECK(values(isfinite(ints)) == std::vector<double>(6, 1));
    CHECK(isfinite(ints.to(DType::u8)).dtype() == DType::u8);
    CHECK(values(isfinite(ints.to(DType::u8))) == std::vector<double>(6, 1));
    // not differentiable: no node, even where x requires grad, and a mask made of it is a constant
    Tensor leaf = from_vector<double>({1, D::infinity(), 2}, {3}, TensorOptions(DType::f64).requires_grad());
    for (const Tensor& x : {leaf, leaf * 2.0}) {
      REQUIRE(x.requires_grad());
      CHECK_FALSE(isfinite(x).requires_grad());
      CHECK(isfinite(x).grad_fn() == nullptr);
    }
    (leaf * isfinite(leaf)).sum().backward();
    CHECK(values(leaf.grad()) == std::vector<double>{1, 0, 1});
  }
  SUBCASE("one_hot") {
    Tensor h = one_hot(labels({2, 0, 3}), 4);
    CHECK(h.dtype() == DType::f32);
    CHECK(h.shape() == Shape{3, 4});
    CHECK(values(h) == std::vector<double>{0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1});
    CHECK(one_hot(labels({1}), 2, DType::f64).dtype() == DType::f64);
    CHECK(values(one_hot(labels({1, 1}), 3, DType::i32)) == std::vector<double>{0, 1, 0, 0, 1, 0});
    CHECK_THROWS_AS(one_hot(labels({4}), 4), ValueError);
  }
  SUBCASE("sign, relu at 0 and abs at 0") {
    Tensor x = from_vector<double>({-2, 0, 3}, {3});
    CHECK(values(sign(x)) == std::vector<double>{-1, 0, 1});
    CHECK(values(relu(x)) == std::vector<double>{0, 0, 3});
    CHECK(values(leaky_relu(x, 0.1)) == std::vector<double>{-0.2, 0, 3});
    CHECK(values(abs(x)) == std::vector<double>{2, 0, 3});
  }
  SUBCASE("gelu is the exact erf form") {
    // 0.5 x (1 + erf(x / sqrt 2)) at x = 1 and -2
    CHECK(values(gelu(from_vector<double>({1.0, -2.0}, {2})))[0] ==
          doctest::Approx(0.5 * (1.0 + std::erf(1.0 / std::sqrt(2.0)))).epsilon(1e-14));
    CHECK(values(gelu(from_vector<double>({1.0, -2.0}, {2})))[1] ==
          doctest::Approx(-(1.0 + std::erf(-std::sqrt(2.0)))).epsilon(1e-14));
  }
  SUBCASE("cross_entropy with smoothing: the PyTorch definition") {
    // logits [1, 3] = 0, ln 2, ln 3 -> p = 1/6, 2/6, 3/6; target 2; s = 0.3:
    // loss = 0.7 * -ln(1/2) + 0.3 * mean(-ln p)
    Tensor logits = from_vector<double>({0.0, std::log(2.0), std::log(3.0)}, {1, 3});
    double want = 0.7 * std::log(2.0) + 0.3 * (std::log(6.0) + std::log(3.0) + std::log(2.0)) / 3.0;
    CHECK(cross_entropy(logits, labels({2}), Reduction::mean, 0.3).item() ==
          doctest::Approx(want).epsilon(1e-14));
  }
  SUBCASE("matmul of two vectors is a scalar") {
    Tensor a = from_vector<double>({1, 2, 3}, {3}), b = from_vector<double>({4, 5, 6}, {3});
    Tensor d = matmul(a, b);
    CHECK(d.dim() == 0);
    CHECK(d.item() == 32.0);
  }
}

TEST_CASE("gradcheck fails when backprop misses a term") {
  // f(x) = x * detach(x): backprop sees d/dx = x, finite differences see 2x.
  auto wrong = [](const Args& x) { return x[0] * x[0].detach(); };
  Tensor input = rand({7}, 800, 0.5, 1.5);
  GradcheckResult result = autograd::gradcheck(wrong, {input});
  CHECK_FALSE(result.ok);
  CHECK(result.message.find("input 0") != std::string::npos);
  CHECK(result.max_abs_error > 0.4);
  GradcheckResult directional = autograd::gradcheck_directional(wrong, {input});
  CHECK_FALSE(directional.ok);
  CHECK_FALSE(directional.message.empty());
  // A detached branch in a longer computation: y = sum(exp(x) * detach(x)) over a softmax.
  auto partial = [](const Args& x) { return softmax(x[0] * x[1].detach(), 1) * x[1]; };
  CHECK_FALSE(autograd::gradcheck(partial, {rand({2, 5}, 801), rand({2, 5}, 802)}).ok);
  // and the honest version passes, so the failure above comes from the missing term
  auto right = [](const Args& x) { return softmax(x[0] * x[1], 1) * x[1]; };
  GradcheckResult honest = autograd::gradcheck(right, {rand({2, 5}, 801), rand({2, 5}, 802)});
  CHECK_MESSAGE(honest.ok, honest.message);
}

TEST_CASE("gradcheck_directional in f32 on larger ops") {
  // f32 sums carry ~1e-7 relative noise per term: a large eps keeps the difference quotient
  // above it, and a ~1e-2 tolerance judges the result.
  GradcheckOptions f32;
  f32.eps = 1e-2;
  f32.atol = 1e-2;
  f32.rtol = 1e-2;
  Generator gen(900);
  auto f32_leaf = [&](const Shape& s, double scale) {
    return uniform(s, -scale, scale, TensorOptions(DType::f32).requires_grad(), &gen);
  };
  run_directional({
      {"f32 matmul 128x96 @ 96x80", [](const Args& x) { return matmul(x[0], x[1]); },
       {f32_leaf({128, 96}, 1.0), f32_leaf({96, 80}, 1.0)}, f32},
      {"f32 matmul transposed, 128x300 @ 300x80", [](const Args& x) { return matmul(x[0].t(), x[1]); },
       {f32_leaf({300, 128}, 1.0), f32_leaf({300, 80}, 1.0)}, f32},
      {"f32 conv2d batch 4, 32->16, 12x12, 3x3 pad 1",
       [](const Args& x) { return conv2d(x[0], x[1], x[2], {{1, 1}, {1, 1}, {1, 1}, 1}); },
       {f32_leaf({4, 32, 12, 12}, 1.0), f32_leaf({16, 32, 3, 3}, 0.1), f32_leaf({16}, 0.1)}, f32},
      {"f32 conv2d stride 2 groups 2, 32->16, 13x11",
       [](const Args& x) { return conv2d(x[0], x[1], x[2], {{2, 2}, {1, 1}, {1, 1}, 2}); },
       {f32_leaf({4, 32, 13, 11}, 1.0), f32_leaf({16, 16, 3, 3}, 0.1), f32_leaf({16}, 0.1)}, f32},
      {"f32 cross_entropy 64x10 smoothing 0.1",
       [](const Args& x) {
         std::vector<int32_t> t(64);
         for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>((i * 7) % 10);
         return cross_entropy(x[0], labels(t), Reduction::mean, 0.1);
       },
       {f32_leaf({64, 10}, 3.0)}, f32},
      {"f32 softmax + batch_norm + tanh chain",
       [](const Args& x) { return tanh(batch_norm(softmax(x[0], 1), Tensor(), Tensor(), x[1], x[2], true)); },
       {f32_leaf({32, 8, 5, 5}, 1.0), f32_leaf({8}, 1.0), f32_leaf({8}, 1.0)}, f32},
  });
}

TEST_CASE("gradcheck: index_select, with repeated indices") {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {3, 4}, TensorOptions(DType::f64).requires_grad());
  Tensor idx = from_vector<int32_t>({2, 0, 2}, {3});
  for (int64_t axis : {0, 1, -1}) {
    auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return index_select(in[0].t(), axis, idx); }, {x});
    CHECK_MESSAGE(r.ok, "axis ", axis, ": ", r.message);
  }
  CHECK(index_select(x.detach(), 0, idx).to_vector<double>() ==
        std::vector<double>{9, 10, 11, 12, 1, 2, 3, 4, 9, 10, 11, 12});
  x.zero_grad();
  index_select(x, 0, idx).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2});
  CHECK_THROWS_AS(index_select(x, 0, from_vector<int32_t>({3}, {1})), ValueError);
  CHECK_THROWS_AS(index_select(x, 0, from_vector<float>({0}, {1})), ShapeError);
}
