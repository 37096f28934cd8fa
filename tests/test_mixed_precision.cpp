// Mixed precision on the CPU, the reference: the bf16 type's rounding, bf16 tensors through the
// CPU backend (f32 arithmetic, one rounding: kernels/cpu/widen.cpp), autocast's dtype rules op by
// op (autograd/autocast.h), and bf16 training tracking f32's. The GPU's bf16 kernels are compared
// against these results in test_backend_ops (the bf16 columns of its table) and test_cuda.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kiln/kiln.h"
#include "tests/temp_dir.h"

using namespace kiln;

namespace {

uint16_t bits_of(float v) { return bf16(v).bits; }
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// x's values rounded to bf16 and back, on the host: what a bf16 tensor of them holds.
std::vector<float> rounded(const std::vector<float>& x) {
  std::vector<float> out;
  for (float v : x) out.push_back(static_cast<float>(bf16(v)));
  return out;
}

Tensor random(const Shape& shape, uint32_t seed, DType dtype = DType::f32) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  for (float& e : v) e = u(rng);
  return from_vector<float>(v, shape, TensorOptions(dtype));
}

}  // namespace

TEST_CASE("bf16 rounds to nearest even, keeps infinities and NaN, and widens exactly") {
  CHECK(bits_of(1.0f) == 0x3f80);
  CHECK(bits_of(-2.0f) == 0xc000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: the tie goes to the even mantissa (1)
  CHECK(bits_of(1.0f + 0x1p-8f) == 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: to the even one, 1 + 2^-6
  CHECK(bits_of(1.0f + 3 * 0x1p-8f) == 0x3f82);
  CHECK(bits_of(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);  // just past the tie: up
  CHECK(bits_of(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(bits_of(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(bits_of(std::numeric_limits<float>::max()) == 0x7f80);  // past bf16's largest: infinity
  const float nan_low = from_bits(0x7f800001u);  // a NaN whose set bit truncation would drop
  CHECK(std::isnan(static_cast<float>(bf16(nan_low))));
  CHECK(std::isnan(static_cast<float>(bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(bits_of(0x1p-130f) == 0x0008);  // subnormals keep their bits: 2^-130 is f32 bits 0x00080000
  CHECK(bits_of(0x1p-133f + 0x1p-134f) == 0x0002);  // and round like the rest (a tie: to even)
  CHECK(bits_of(-0.0f) == 0x8000);
  // widening is exact: every bf16 comes back as itself
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    const bf16 v = bf16::from_raw(static_cast<uint16_t>(b));
    if (!std::isnan(static_cast<float>(v))) CHECK(bf16(static_cast<float>(v)).bits == v.bits);
  }
}

TEST_CASE("bf16 tensors convert, print, save and load") {
  Tensor x = from_vector<float>({1.0f, 1.00390625f, -3.14159f, 1e30f}, {4});
  Tensor b = x.to(DType::bf16);
  CHECK(b.dtype() == DType::bf16);
  CHECK(b.storage()->bytes() == 8);
  CHECK(b.to_vector<float>() == rounded(x.to_vector<float>()));
  CHECK(b.slice(0, 0, 3).to(DType::i32).to_vector<int32_t>()[2] == -3);  // through f32, truncated
  CHECK(from_vector<int32_t>({7, -300}, {2}).to(DType::bf16).to_vector<float>() == std::vector<float>{7, -300});
  CHECK(b.str().find("dtype=bf16") != std::string::npos);
  CHECK(zeros({3}, DType::bf16).to_vector<float>() == std::vector<float>(3, 0.0f));
  CHECK(full({2}, 0.1, DType::bf16).to_vector<float>() == rounded({0.1f, 0.1f}));

  kiln::test::TempDir dir;
  const std::string path = dir.file("bf16.safetensors");
  save_safetensors(path, {{"b", b}});
  NamedTensors loaded = load_safetensors(path).tensors;
  REQUIRE(loaded.size() == 1);
  CHECK(loaded[0].second.dtype() == DType::bf16);
  CHECK(loaded[0].second.to_vector<float>() == b.to_vector<float>());
}

TEST_CASE("a conversion keeps a dense input's memory order, so a transposed weight converts to a transposed copy") {
  Tensor w = random({3, 5}, 21);
  Tensor t = w.t().to(DType::bf16);  // a transposed view of a [3, 5] bf16 copy
  CHECK(t.shape() == Shape{5, 3});
  CHECK(t.strides() == Strides{1, 5});
  CHECK(t.to_vector<float>() == rounded(w.t().contiguous().to_vector<float>()));
  Tensor x = random({2, 3, 4}, 22);
  Tensor p = x.permute({2, 0, 1}).to(DType::bf16);  // any order of the axes
  CHECK(p.strides() == Strides{1, 12, 4});
  CHECK(p.to_vector<float>() == rounded(x.permute({2, 0, 1}).contiguous().to_vector<float>()));
  Tensor gaps = random({4, 6}, 23).slice(1, 0, 6, 2);  // not dense: converted row-major
  CHECK(gaps.to(DType::bf16).is_contiguous());
  CHECK(gaps.to(DType::bf16).to_vector<float>() == rounded(gaps.contiguous().to_vector<float>()));
  Tensor bcast = random({1, 4}, 24).expand({3, 4});  // stride 0: row-major
  CHECK(bcast.to(DType::bf16).is_contiguous());
  // the gradient comes back through the conversion in the weight's own order, contiguous
  Tensor wg = w.detach().requires_grad_();
  Tensor scale = random({5, 3}, 25);
  (wg.t().to(DType::bf16).to(DType::f32) * scale).sum().backward();
  REQUIRE(wg.grad().defined());
  CHECK(wg.grad().is_contiguous());
  CHECK(wg.grad().to_vector<float>() == rounded(scale.t().contiguous().to_vector<float>()));  // through bf16
}

TEST_CASE("a bf16 op on the CPU is the f32 op on the widened values, rounded once") {
  Tensor a = random({5, 7}, 1, DType::bf16), c = random({5, 7}, 2, DType::bf16);
  const Tensor af = a.to(DType::f32), cf = c.to(DType::f32);
  auto same = [](const Tensor& got, const Tensor& f32_result) {
    CHECK(got.dtype() == DType::bf16);
    CHECK(got.to_vector<float>() == rounded(f32_result.to_vector<float>()));
  };
  same(a + c, af + cf);
  same(a * c, af * cf);
  same(exp(a), exp(af));
  same(relu(a), relu(af));
  same(a.sum({1}), af.sum({1}));  // the sum in double, as f32's, then one rounding (through f32)
  same(a.max({0}), af.max({0}));
  same(matmul(a, c.t()), matmul(af, cf.t()));  // a transposed view, read in place
  same(matmul(a.t(), c), matmul(af.t(), cf));
  same(softmax(a, 1), softmax(af, 1));
  // broadcasts (stride 0) and views keep their layout through the widening
  Tensor row = random({7}, 3, DType::bf16);
  same(a + row, af + row.to(DType::f32));
  same(a.slice(1, 1, 6, 2) * 2.0, af.slice(1, 1, 6, 2) * 2.0);
  // a write through a view leaves the rest of the storage as it was
  Tensor z = a.clone();
  {
    NoGradGuard no_grad;
    z.slice(0, 1, 3).fill_(0.5);
  }
  std::vector<float> want = a.to_vector<float>();
  for (size_t i = 7; i < 21; ++i) want[i] = 0.5f;
  CHECK(z.to_vector<float>() == want);
  CHECK(a.argmax(1).to_vector<int32_t>() == af.argmax(1).to_vector<int32_t>());
}

TEST_CASE("a bf16 sum or mean over several axes is rounded once, as one kernel over all of them would be") {
  // Channel 0 of x [2, 2, 2] sums 1000 + 1.5 and -1000 + 0: rounded to bf16 (which steps by 4
  // near 1000), the partial 1001.5 would become 1000 and the sum 0. Channel 1 loses nothing.
  const Tensor x = from_vector<float>({1000, 1.5, 8, 0.25, -1000, 0, -8, 0}, {2, 2, 2}).to(DType::bf16);
  const Tensor s = sum(x, {0, 2}), m = mean(x, {0, 2});
  CHECK(s.dtype() == DType::bf16);
  CHECK(s.to(DType::f32).to_vector<float>() == std::vector<float>{1.5f, 0.25f});
  CHECK(m.to(DType::f32).to_vector<float>() == std::vector<float>{0.375f, 0.0625f});
  // a conv layer's bias gradient: the f32 sum of the same values, rounded once, whichever run of
  // axes goes first (the leading one from 16 elements on)
  for (int64_t batch : {8, 32}) {
    const Tensor g = random({batch, 4, 5, 6}, 31, DType::bf16) * 100.0;
    for (const std::vector<int64_t>& axes : {std::vector<int64_t>{0, 2, 3}, std::vector<int64_t>{0, 3}, std::vector<int64_t>{1, 3}}) {
      const Tensor wide = g.to(DType::f32);
      CHECK(sum(g, axes).to(DType::f32).to_vector<float>() == sum(wide, axes).to(DType::bf16).to(DType::f32).to_vector<float>());
      CHECK(mean(g, axes).to(DType::f32).to_vector<float>() == mean(wide, axes).to(DType::bf16).to(DType::f32).to_vector<float>());
    }
  }
  // the gradient still flows
  Tensor w = random({2, 3, 4}, 32, DType::bf16).requires_grad_();
  sum(w, {0, 2}).to(DType::f32).sum().backward();
  CHECK(w.grad().dtype() == DType::bf16);
  CHECK(w.grad().to(DType::f32).to_vector<float>() == std::vector<float>(24, 1.0f));
}

TEST_CASE("autocast runs products in bf16 and sums, exponentials and statistics in f32") {
  Tensor x = random({4, 6}, 4), w = random({3, 6}, 5), bias = random({3}, 6);
  Tensor img = random({2, 1, 6, 6}, 7), kernel = random({2, 1, 3, 3}, 8);
  Tensor t = from_vector<int32_t>({0, 2, 1, 1}, {4});
  AutocastGuard autocast(DType::bf16);
  CHECK(autograd::is_autocast_enabled());
  // bf16: the products, their bias included
  CHECK(matmul(x, w.t()).dtype() == DType::bf16);
  CHECK(matmul(x, w.t(), bias, Activation::relu).dtype() == DType::bf16);
  CHECK(conv2d(img, kernel).dtype() == DType::bf16);
  // the values: the product of the bf16 operands, rounded (not the f32 product rounded)
  CHECK(matmul(x, w.t()).to_vector<float>() ==
        rounded(matmul(x.to(DType::bf16).to(DType::f32), w.to(DType::bf16).to(DType::f32).t()).to_vector<float>()));
  const Tensor h = matmul(x, w.t());
  // input dtype: activations, dropout, pooling, views
  CHECK(relu(h).dtype() == DType::bf16);
  CHECK(gelu(h).dtype() == DType::bf16);
  CHECK(dropout(h, 0.5, true).dtype() == DType::bf16);
  CHECK(max_pool2d(conv2d(img, kernel)).dtype() == DType::bf16);
  CHECK(h.flatten().dtype() == DType::bf16);
  CHECK(x.t().dtype() == DType::f32);  // f32 stays f32 outside the products
  CHECK(relu(x).dtype() == DType::f32);
  // f32: reductions, softmax, losses, exponentials, batch norm
  CHECK(h.sum().dtype() == DType::f32);
  CHECK(h.mean({0}).dtype() == DType::f32);
  CHECK(softmax(h, 1).dtype() == DType::f32);
  CHECK(log_softmax(h, 1).dtype() == DType::f32);
  CHECK(cross_entropy(h, t.slice(0, 0, 4)).dtype() == DType::f32);
  CHECK(nll_loss(log_softmax(h, 1), t).dtype() == DType::f32);
  CHECK(mse_loss(h, zeros({4, 3})).dtype() == DType::f32);
  CHECK(exp(h).dtype() == DType::f32);
  CHECK(log(abs(h) + 1.0).dtype() == DType::f32);
  CHECK(pow(h, 2.0).dtype() == DType::f32);
  CHECK(batch_norm(h, {}, {}, {}, {}, true, 0.1, 1e-5).dtype() == DType::f32);
  // max keeps its input's dtype (no precision to lose)
  CHECK(h.max({1}).dtype() == DType::bf16);
  // promote: bf16 with f32 gives f32, bf16 with bf16 stays bf16
  CHECK((h + zeros({4, 3})).dtype() == DType::f32);
  CHECK((zeros({4, 3}) * h).dtype() == DType::f32);
  CHECK(maximum(h, zeros({3})).dtype() == DType::f32);
  CHECK(gt(h, zeros({4, 3})).dtype() == DType::f32);
  CHECK((h + h).dtype() == DType::bf16);
  // f64 is left alone: gradchecks keep their precision
  CHECK(matmul(x.to(DType::f64), w.to(DType::f64).t()).dtype() == DType::f64);
}

TEST_CASE("autocast guards nest, turn off, and refuse what they cannot do") {
  Tensor x = random({2, 3}, 9), w = random({3, 3}, 10);
  CHECK_FALSE(autograd::is_autocast_enabled());
  CHECK(matmul(x, w).dtype() == DType::f32);
  {
    AutocastGuard on(DType::bf16);
    {
      AutocastGuard off(DType::bf16, false);
      CHECK_FALSE(autograd::is_autocast_enabled());
      CHECK(matmul(x, w).dtype() == DType::f32);
    }
    CHECK(autograd::is_autocast_enabled());
    CHECK(matmul(x, w).dtype() == DType::bf16);
  }
  CHECK_FALSE(autograd::is_autocast_enabled());
  CHECK_THROWS_AS(AutocastGuard{DType::f64}, DTypeError);
  // without autocast, dtypes must match as before
  CHECK_THROWS_AS(x + x.to(DType::bf16), DTypeError);
  CHECK_THROWS_AS(matmul(x, w.to(DType::bf16)), DTypeError);
}

TEST_CASE("under autocast, f32 parameters get f32 gradients through bf16 products") {
  Tensor w = random({3, 6}, 11).requires_grad_(), b = random({3}, 12).requires_grad_();
  Tensor x = random({4, 6}, 13);
  Tensor t = from_vector<int32_t>({0, 2, 1, 1}, {4});
  Tensor loss;
  {
    AutocastGuard autocast(DType::bf16);
    loss = cross_entropy(matmul(x, w.t(), b, Activation::relu), t);
  }
  CHECK(loss.dtype() == DType::f32);
  loss.backward();  // with autocast off, as it always runs
  REQUIRE(w.grad().defined());
  CHECK(w.grad().dtype() == DType::f32);
  CHECK(b.grad().dtype() == DType::f32);
  // the gradients are the bf16 computation's: the same formulas on the bf16 copies, each result
  // rounded to bf16, then widened for the f32 parameters
  Tensor wb = w.detach().to(DType::bf16).requires_grad_(), bb = b.detach().to(DType::bf16).requires_grad_();
  Tensor y = matmul(x.to(DType::bf16), wb.t(), bb, Activation::relu);
  cross_entropy(y.to(DType::f32), t).backward();
  CHECK(w.grad().to_vector<float>() == wb.grad().to_vector<float>());
  CHECK(b.grad().to_vector<float>() == bb.grad().to_vector<float>());
  // backward inside a guard runs with autocast off too: the same gradients
  w.zero_grad(), b.zero_grad();
  {
    AutocastGuard autocast(DType::bf16);
    cross_entropy(matmul(x, w.t(), b, Activation::relu), t).backward();
  }
  CHECK(w.grad().to_vector<float>() == wb.grad().to_vector<float>());
}

TEST_CASE("bf16 training tracks f32 over 100 steps") {
  // A 2-layer MLP on a fixed random problem, trained twice from the same weights: in f32, and
  // under autocast (bf16 products, f32 master weights and loss). The losses must stay close: bf16's
  // 8-bit mantissa perturbs each step by about 2^-8 relative, and SGD on this problem contracts
  // rather than amplifies such perturbations.
  auto make = [] {
    manual_seed(5);
    return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(20, 32), std::make_shared<nn::ReLU>(),
                                            std::make_shared<nn::Linear>(32, 4));
  };
  Tensor x = random({64, 20}, 14);
  std::vector<int32_t> labels;
  for (int i = 0; i < 64; ++i) labels.push_back(i % 4);
  Tensor t = from_vector<int32_t>(labels, {64});
  auto train = [&](bool bf16) {
    auto model = make();
    optim::SGD sgd(model->parameters(), optim::SGDOptions(0.1).momentum(0.9));
    std::vector<double> losses;
    for (int step = 0; step < 100; ++step) {
      sgd.zero_grad();
      Tensor loss;
      {
        AutocastGuard autocast(DType::bf16, bf16);
        loss = cross_entropy(model->forward(x), t);
      }
      loss.backward();
      sgd.step();
      losses.push_back(loss.item());
    }
    return losses;
  };
  const std::vector<double> f32 = train(false), b16 = train(true);
  CHECK(f32.back() < 0.5 * f32.front());  // it learns
  for (size_t i = 0; i < f32.size(); ++i) {
    INFO("step " << i << ": f32 " << f32[i] << ", bf16 " << b16[i]);
    CHECK(std::abs(b16[i] - f32[i]) <= 0.02 + 0.02 * f32[i]);
  }
}

TEST_CASE("cast_ahead: the products take the parameters' casts made at once, the same bits, never stale ones") {
  Tensor w = random({3, 6}, 21).requires_grad_(), b = random({3}, 22).requires_grad_();
  Tensor x = random({4, 6}, 23);
  Tensor t = from_vector<int32_t>({0, 2, 1, 1}, {4});
  auto step = [&](bool ahead) {
    w.zero_grad(), b.zero_grad();
    Tensor loss;
    {
      AutocastGuard autocast(DType::bf16);
      if (ahead) autocast.cast_ahead({w, b});
      loss = cross_entropy(matmul(x, w.t(), b, Activation::relu), t);  // Linear's transposed weight
    }
    loss.backward();
    return std::vector<std::vector<float>>{{loss.item<float>()}, w.grad().to_vector<float>(), b.grad().to_vector<float>()};
  };
  CHECK(step(true) == step(false));  // the same values and gradients as a cast per op
  {
    AutocastGuard autocast(DType::bf16);
    autocast.cast_ahead({w, b});
    // served from the cast made ahead: the same storage each time, the weight's transpose a view of it
    Tensor wb = autocast::lower(w, "test"), wt = autocast::lower(w.t(), "test");
    CHECK(wb.dtype() == DType::bf16);
    CHECK(wb.storage() == autocast::lower(w, "test").storage());
    CHECK(wt.storage() == wb.storage());
    CHECK(wt.shape() == Shape{6, 3});
    // a slice is not the source: cast on its own
    CHECK(autocast::lower(w.slice(0, 0, 2), "test").storage() != wb.storage());
    // written in place since: cast again, with the new values
    {
      NoGradGuard no_grad;
      w.copy_(w * 2.0);
    }
    Tensor again = autocast::lower(w, "test");
    CHECK(again.storage() != wb.storage());
    CHECK(again.to(DType::f32).to_vector<float>() == w.detach().to(DType::bf16).to(DType::f32).to_vector<float>());
  }
  // an inner guard that is off casts nothing; outside every guard the cast is gone
  {
    AutocastGuard autocast(DType::bf16, false);
    autocast.cast_ahead({w});
    CHECK(autocast::lower(w, "test").dtype() == DType::f32);
  }
  CHECK(autocast::lower(w, "test").dtype() == DType::f32);
}
