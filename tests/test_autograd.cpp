// The autograd engine: accumulation, graph lifetime, grad mode, detach and its errors.
#include <doctest/doctest.h>

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
