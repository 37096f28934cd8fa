// The Vulkan matmul on cooperative matrices (matmul_coop.comp: f16 products where
// kiln::allow_f16_products and the device offer them) against the CPU, within f16's rounding:
// random shapes, layouts and batches, the fused bias and ReLU, aligned rows. (f32 matmul on
// every backend: test_backend_ops's "matmul" rows.)
#include <cmath>
#include <random>
#include <string>

#include "kiln/core/precision.h"
#include "tests/skip.h"
#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("vulkan matmul with f16 products allowed runs on cooperative matrices and matches the CPU within f16 rounding" *
          doctest::test_suite("needs-cooperative-matrix")) {
  if (!vk().cooperative_matrix())  // lavapipe (CI): CTest's test_vulkan_cooperative_matrix is skipped
    return skip(vk().description() + " offers no 16x16x16 f16 cooperative matrices (VK_NV_cooperative_matrix)");
  struct PrecisionGuard {  // the switch back off, whatever happens
    PrecisionGuard() { set_allow_f16_products(true); }
    ~PrecisionGuard() { set_allow_f16_products(false); }
  } guard;
  std::mt19937 rng(12);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t m = pick(rng), n = pick(rng), k = pick(rng);
    Shape batch_a, batch_b;
    if (trial % 3 == 1) batch_a = {3}, batch_b = {3};
    if (trial % 3 == 2) batch_a = {2};
    std::string how = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " + batch_a.str() +
                      batch_b.str();
    Operand a = operand(rng, batch_a, m, k, DType::f32, how), b = operand(rng, batch_b, k, n, DType::f32, how);
    // f16 inputs: 2^-11 relative each, so about 1e-3 of a product's terms, summing like a random
    // walk over k; every term is |a b| <= 1 here, the result of size sqrt(k) / 3
    const double atol = 4e-3 * std::sqrt(static_cast<double>(k));
    check_close(matmul(a.on(kVulkan), b.on(kVulkan)), matmul(a.cpu(), b.cpu()), 1e-2, atol, "f16 matmul " + how);
    if (batch_a.empty() && batch_b.empty()) {
      Tensor bias = uniform({n}, -1, 1);
      check_close(matmul(a.on(kVulkan), b.on(kVulkan), bias.to(kVulkan), Activation::relu),
                  matmul(a.cpu(), b.cpu(), bias, Activation::relu), 1e-2, atol, "f16 matmul + bias + relu " + how);
    }
  }
  // rows of multiples of 4, 16-byte aligned: the loads of 4 at a time, in every layout
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = uniform(ta ? Shape{96, 200} : Shape{200, 96}, -1, 1), b = uniform(tb ? Shape{132, 96} : Shape{96, 132}, -1, 1);
      Tensor ad = a.to(kVulkan), bd = b.to(kVulkan);
      if (ta) a = a.t(), ad = ad.t();
      if (tb) b = b.t(), bd = bd.t();
      check_close(matmul(ad, bd), matmul(a, b), 1e-2, 4e-3 * std::sqrt(96.0),
                  std::string("f16 matmul 200x132x96, aligned") + (ta ? " A^T" : "") + (tb ? " B^T" : ""));
    }
  // and it is the f16 path: an input f16 cannot hold loses its low bits (1 + 2^-12 rounds to 1)
  Tensor x = full({16, 16}, 1.0 + std::ldexp(1.0, -12)), ones = full({16, 16}, 1.0);
  CHECK(matmul(x.to(kVulkan), ones.to(kVulkan)).to_vector<float>()[0] == 16.0f);
  check_no_validation_messages();
}
