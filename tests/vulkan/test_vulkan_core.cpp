// The Vulkan backend against the CPU: memory, host transfers, fills, copies through views and
// dtype conversions, and the elementwise ops on random shapes, views and broadcasts.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/vulkan/vulkan_test.h"

using namespace kiln;
using namespace kiln::test;

TEST_CASE("vulkan memory: blocks are shared and reused, transfers keep every byte, errors name the rule") {
  if (!have_vulkan()) return;
  MESSAGE("device: " << vk().description());
  std::mt19937 rng(1);
  // tensors of many sizes, written and read back exactly, also at byte offsets
  std::vector<Tensor> kept;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = std::uniform_int_distribution<int64_t>(0, 70000)(rng);
    Tensor cpu = uniform({n}, -1, 1);
    Tensor dev = cpu.to(kVulkan);
    CHECK(dev.to_vector<float>() == cpu.to_vector<float>());
    if (n > 10) {
      std::vector<float> part(5);
      vk().read(dev.storage()->data(), 7 * sizeof(float), part.data(), 5 * sizeof(float));
      CHECK(std::memcmp(part.data(), cpu.to_vector<float>().data() + 7, 5 * sizeof(float)) == 0);
    }
    if (trial % 3 == 0) kept.push_back(dev);  // the rest are freed, their ranges reused
  }
  const size_t reserved = vk().bytes_reserved();
  for (int trial = 0; trial < 60; ++trial) (void)zeros({1000, 100}, TensorOptions().device(kVulkan));
  CHECK(vk().bytes_reserved() == reserved);  // freed ranges serve later tensors: no new block
  // more than a block: a block of its own, and a read larger than the staging buffer's chunk
  Tensor big_cpu = uniform({20'000'000}, -1, 1);
  Tensor big = big_cpu.to(kVulkan);
  CHECK(big.to_vector<float>() == big_cpu.to_vector<float>());
  for (const Tensor& t : kept) CHECK(t.numel() >= 0);
  // an absurd request names the bytes and the rule it breaks
  try {
    (void)empty({int64_t{1} << 45}, TensorOptions().device(kVulkan));
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    CHECK(std::string(e.what()).find("vulkan:0") != std::string::npos);
    CHECK(std::string(e.what()).find(std::to_string((int64_t{1} << 45) * 4)) != std::string::npos);
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan divisor: the shaders' multiply-and-shift division equals n / d for every d and n < 2^31") {
  // fastdiv.glsl's arithmetic, on the host: (umulhi(n, magic) + n) >> shift
  auto div_by = [](int32_t n, vulkan::Divisor q) {
    const uint32_t hi = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(n)} * q.magic) >> 32);
    return static_cast<int32_t>((hi + static_cast<uint32_t>(n)) >> q.shift);
  };
  std::mt19937 rng(5);
  std::vector<int32_t> ds;
  for (int32_t d = 1; d <= 1100; ++d) ds.push_back(d);
  for (int i = 0; i < 2000; ++i) ds.push_back(std::uniform_int_distribution<int32_t>(1, INT32_MAX)(rng));
  for (int s = 1; s < 31; ++s) ds.insert(ds.end(), {(1 << s) - 1, 1 << s, (1 << s) + 1});
  ds.push_back(INT32_MAX);
  for (int32_t d : ds) {
    const vulkan::Divisor q = vulkan::divisor(d);
    std::vector<int32_t> ns{0, 1, d - 1, d, d < INT32_MAX ? d + 1 : d, INT32_MAX, INT32_MAX - 1, INT32_MAX / d * d};
    for (int i = 0; i < 200; ++i) ns.push_back(std::uniform_int_distribution<int32_t>(0, INT32_MAX)(rng));
    for (int i = 0; i < 50; ++i) ns.push_back(std::uniform_int_distribution<int32_t>(0, 100000)(rng));
    for (int32_t n : ns) {
      const int32_t got = div_by(n, q);
      if (got != n / d) FAIL_CHECK(n << " / " << d << ": " << got << ", not " << n / d);
    }
  }
}

TEST_CASE("vulkan frames in flight: writes and kernels queued over many submissions keep their order") {
  if (!have_vulkan()) return;
  // 400 writes and 800 kernels: frames go to the device every 32 dispatches and are reused after
  // their fences, the upload segments wrap many times, and nothing here waits until the read
  Tensor acc_dev = zeros({1000}, TensorOptions().device(kVulkan)), acc_cpu = zeros({1000});
  for (int i = 0; i < 400; ++i) {
    Tensor step = full({1000}, static_cast<double>(i % 7) - 3.0);
    Tensor step_dev = step.to(kVulkan);  // its host memory is gone before the device copies it
    step = Tensor();
    acc_dev = acc_dev * 0.5 + step_dev;
    acc_cpu = acc_cpu * 0.5 + full({1000}, static_cast<double>(i % 7) - 3.0);
  }
  check_close(acc_dev, acc_cpu, 0, 0, "400 writes and 800 kernels");
  // independent kernels in a row run without barriers between them; one on memory an earlier one
  // bound (here: freed and handed out again at once) must still wait for it
  std::vector<Tensor> parts_dev, parts_cpu;
  Tensor src_cpu = uniform({5000}, -1, 1), src = src_cpu.to(kVulkan);
  for (int i = 0; i < 100; ++i) {
    Tensor scratch = src * static_cast<double>(i);  // freed at the end of the iteration
    parts_dev.push_back(scratch + 1.0);
    parts_cpu.push_back(src_cpu * static_cast<double>(i) + 1.0);
  }
  for (int i = 0; i < 100; i += 9)
    check_close(parts_dev[static_cast<size_t>(i)], parts_cpu[static_cast<size_t>(i)], 0, 0, "independent kernel " + std::to_string(i));
  // a write larger than a frame's upload segment goes through staging and waits
  Tensor big_cpu = uniform({3'000'000}, -1, 1);
  Tensor big = big_cpu.to(kVulkan) * 2.0;
  check_close(big, big_cpu * 2.0, 0, 0, "a 12 MB write");
  // timestamps: the device's time around work, in order, and positive where there was work
  const uint32_t t0 = vk().timestamp();
  Tensor y = big.slice(0, 0, 100'000);
  for (int i = 0; i < 50; ++i) y = y * 1.0001;
  const uint32_t t1 = vk().timestamp();
  const uint32_t t2 = vk().timestamp();
  const double work = vk().elapsed_ms(t0, t1), none = vk().elapsed_ms(t1, t2);
  MESSAGE("50 multiplies of 100k elements: " << work << " ms on the device");
  CHECK(work > 0);
  CHECK(work < 60'000);
  CHECK(none >= 0);
  CHECK(none <= work);
  check_no_validation_messages();
}

TEST_CASE("vulkan fill, arange and copies through views and dtype conversions match the CPU") {
  if (!have_vulkan()) return;
  std::mt19937 rng(2);
  for (int trial = 0; trial < 50; ++trial) {
    const Shape s = random_shape(rng);
    for (DType t : {DType::f32, DType::i32}) {
      Tensor cpu = full(s, -2.5, TensorOptions(t));
      check_close(full(s, -2.5, TensorOptions(t).device(kVulkan)), cpu, 0, 0, "full " + s.str());
      // fill through a strided view: every other element of the first axis
      Tensor dv = zeros(s, TensorOptions(t).device(kVulkan)), cv = zeros(s, TensorOptions(t));
      if (s[0] > 1) {
        dv.slice(0, 0, s[0] / 2).fill_(7);
        cv.slice(0, 0, s[0] / 2).fill_(7);
      }
      check_close(dv, cv, 0, 0, "fill_ through a slice " + s.str());
    }
    // copies: transposed views made contiguous, both dtypes and the conversions between them
    Tensor x = uniform(s, -3e3, 3e3);
    Tensor d = x.to(kVulkan);
    if (s.size() >= 2) {
      check_close(d.transpose(0, -1).contiguous(), x.transpose(0, -1).contiguous(), 0, 0, "transpose " + s.str());
      check_close(d.slice(1, 0, 1).contiguous(), x.slice(1, 0, 1).contiguous(), 0, 0, "slice " + s.str());
    }
    check_close(d.to(DType::i32), x.to(DType::i32), 0, 0, "f32 -> i32 " + s.str());
    check_close(d.to(DType::i32).to(DType::f32), x.to(DType::i32).to(DType::f32), 0, 0, "i32 -> f32 " + s.str());
  }
  // u8, four to a word: conversions both ways, fills through views that split words, odd offsets
  for (int trial = 0; trial < 20; ++trial) {
    const Shape s = random_shape(rng);
    Tensor x = uniform(s, -300, 300);
    Tensor bytes = x.to(DType::u8);  // the CPU's wrap: -4 -> 252
    Tensor dx = x.to(kVulkan);
    check_close(dx.to(DType::u8), bytes, 0, 0, "f32 -> u8 " + s.str());
    check_close(bytes.to(kVulkan), bytes, 0, 0, "u8 to the device and back " + s.str());
    check_close(bytes.to(kVulkan).to(DType::f32), bytes.to(DType::f32), 0, 0, "u8 -> f32 " + s.str());
    check_close(bytes.to(kVulkan).to(DType::i32), bytes.to(DType::i32), 0, 0, "u8 -> i32 " + s.str());
    check_close(x.to(DType::i32).to(kVulkan).to(DType::u8), x.to(DType::i32).to(DType::u8), 0, 0, "i32 -> u8 " + s.str());
    if (s.size() >= 2) {
      check_close(bytes.to(kVulkan).transpose(0, -1).contiguous(), bytes.transpose(0, -1).contiguous(), 0, 0,
                  "u8 transpose " + s.str());
      Tensor dv = bytes.to(kVulkan), cv = bytes.clone();
      dv.slice(0, 0, (s[0] + 1) / 2).fill_(200);
      cv.slice(0, 0, (s[0] + 1) / 2).fill_(200);
      check_close(dv, cv, 0, 0, "u8 fill_ through a slice " + s.str());
    }
    const int64_t n = s.numel();
    if (n > 3) {
      Tensor flat = bytes.reshape({n}).to(kVulkan);
      flat.slice(0, 1, n - 1).fill_(9);  // odd offset and length: the first and last words keep a byte
      Tensor want = bytes.reshape({n}).clone();
      want.slice(0, 1, n - 1).fill_(9);
      check_close(flat, want, 0, 0, "u8 fill_ of bytes 1 .. n - 1 " + s.str());
    }
  }
  // the conversion's edges: truncation toward zero, and the wrap of values past 32 bits
  const std::vector<float> edges{-4.0f, -3.7f, -0.5f, 0.5f, 2.9f, 2147483520.0f, -2147483648.0f, 3e9f, -3e9f, 1e12f, -1e12f};
  Tensor e = from_vector<float>(edges, {static_cast<int64_t>(edges.size())});
  check_close(e.to(kVulkan).to(DType::i32), e.to(DType::i32), 0, 0, "f32 -> i32 edges");
  Tensor big = from_vector<int32_t>({16777217, -2147483647, 2147483647}, {3});
  check_close(big.to(kVulkan).to(DType::f32), big.to(DType::f32), 0, 0, "i32 -> f32 rounding");
  // arange: long f32 ranges computed as the CPU's double, and i32
  // (i32 only with whole start and step: a fractional step may land a value just below a whole
  // number that the CPU's double rounds onto, see elementwise.comp)
  for (auto [start, step, n] : {std::tuple{0.0, 1.0, 5000}, {-3.25, 0.1, 100000}, {1e6, -0.37, 70001}, {5.0, 3.0, 1000},
                                {-7e5, 13.0, 200000}, {2e9, -1e4, 5000}}) {
    for (DType t : {DType::f32, DType::i32}) {
      if (t == DType::i32 && (start != std::trunc(start) || step != std::trunc(step))) continue;
      Tensor cpu = empty({n}, TensorOptions(t)), dev = empty({n}, TensorOptions(t).device(kVulkan));
      cpu.backend().arange(cpu.ref(), start, step);
      dev.backend().arange(dev.ref(), start, step);
      check_close(dev, cpu, t == DType::f32 ? 1.2e-7 : 0, 0, "arange " + std::to_string(start) + " step " + std::to_string(step));
    }
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan unary ops and activation gradients match the CPU on views") {
  if (!have_vulkan()) return;
  std::mt19937 rng(3);
  using Fn = Tensor (*)(const Tensor&);
  // (name, op, tolerance): GLSL's exp, log, tanh and pow carry the driver's precision
  const std::tuple<const char*, Fn, double> ops[] = {
      {"neg", [](const Tensor& x) { return neg(x); }, 0},
      {"exp", [](const Tensor& x) { return exp(x); }, 2e-6},
      {"log", [](const Tensor& x) { return log(abs(x) + 0.1); }, 2e-6},
      {"sqrt", [](const Tensor& x) { return sqrt(abs(x)); }, 2e-6},
      {"abs", [](const Tensor& x) { return abs(x); }, 0},
      {"sign", [](const Tensor& x) { return sign(x); }, 0},
      {"relu", [](const Tensor& x) { return relu(x); }, 0},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }, 0},
      {"gelu", [](const Tensor& x) { return gelu(x); }, 2e-6},
      {"tanh", [](const Tensor& x) { return tanh(x); }, 2e-6},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, 2e-6},
      {"pow", [](const Tensor& x) { return pow(abs(x), 1.7); }, 4e-6},
      {"scalars", [](const Tensor& x) { return x * 3.0 + 1.5; }, 0},
      {"relu_backward", [](const Tensor& x) { return relu_backward(x, x * 0.5); }, 0},
      {"leaky_relu_backward", [](const Tensor& x) { return leaky_relu_backward(x, x * 0.5, 0.1); }, 0},
      {"gelu_backward", [](const Tensor& x) { return gelu_backward(x, x * 0.5); }, 2e-6},
  };
  for (int trial = 0; trial < 50; ++trial) {
    const Shape s = random_shape(rng);
    Tensor cpu = uniform(s, -4, 4);
    Tensor dev = cpu.to(kVulkan);
    if (s.size() >= 2) {  // a non-contiguous input
      cpu = cpu.transpose(0, -1);
      dev = dev.transpose(0, -1);
    }
    for (const auto& [name, fn, tol] : ops) check_close(fn(dev), fn(cpu), tol, tol, std::string(name) + " " + s.str());
  }
  // special values: NaN through relu, sign(NaN) = 0, the limits of sigmoid and gelu, pow's sign rules
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor sp = from_vector<float>({-inf, -100, -9, -0.0f, 0, 1e-30f, 9, 100, inf, nan}, {10});
  Tensor dsp = sp.to(kVulkan);
  for (const auto& [name, fn, tol] : ops)
    if (std::string(name) != "log" && std::string(name) != "pow") check_close(fn(dsp), fn(sp), 1e-6, 1e-12, std::string(name) + " special values");
  Tensor base = from_vector<float>({-8, -2, -0.5f, 0, 2, -0.0f}, {6});
  for (double p : {2.0, 3.0, -1.0, 0.5, -2.0, 0.0})
    check_close(pow(base.to(kVulkan), p), pow(base, p), 2e-6, 0, "pow special " + std::to_string(p));
  check_no_validation_messages();
}

TEST_CASE("vulkan binary ops broadcast as on the CPU") {
  if (!have_vulkan()) return;
  std::mt19937 rng(4);
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::tuple<const char*, Fn, double> ops[] = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, 0},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, 0},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, 0},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }, 1e-6},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); }, 4e-6},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, 0},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, 0},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, 0},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, 0},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, 0},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, 0},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, 0},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, 0},
  };
  for (int trial = 0; trial < 50; ++trial) {
    const Shape s = random_shape(rng), t = broadcastable(rng, s);
    Tensor a = uniform(s, -3, 3), b = uniform(t, 0.5, 2);
    if (trial % 4 == 0) {  // whole numbers: ties for eq, ge, le, maximum (and b = 0 for div)
      a = a.to(DType::i32).to(DType::f32);
      b = b.to(DType::i32).to(DType::f32);
    }
    Tensor da = a.to(kVulkan), db = b.to(kVulkan);
    for (const auto& [name, fn, tol] : ops) {
      check_close(fn(da, db), fn(a, b), tol, tol, std::string(name) + " " + s.str() + " with " + t.str());
      check_close(fn(db, da), fn(b, a), tol, tol, std::string(name) + " " + t.str() + " with " + s.str());
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector<float>({nan, 1, nan, -2}, {4}), y = from_vector<float>({1, nan, nan, -3}, {4});
  for (const auto& [name, fn, tol] : ops) check_close(fn(x.to(kVulkan), y.to(kVulkan)), fn(x, y), 0, 0, std::string(name) + " NaN");
  check_no_validation_messages();
}

TEST_CASE("vulkan: a dtype the backend lacks is an error naming the backend and the op") {
  if (!have_vulkan()) return;
  Tensor x = empty({2, 3}, TensorOptions(DType::f64).device(kVulkan));  // memory takes any dtype
  try {
    (void)exp(x);
    FAIL("expected DTypeError");
  } catch (const DTypeError& e) {
    CHECK(std::string(e.what()).find("vulkan exp: f64") != std::string::npos);
  }
  Tensor d = empty({3}, TensorOptions(DType::f64).device(kVulkan));
  CHECK_THROWS_AS(d.fill_(1), DTypeError);
  Tensor i = ones({3}, TensorOptions(DType::i32).device(kVulkan));
  CHECK_THROWS_AS((void)exp(i), DTypeError);
  check_no_validation_messages();
}

TEST_CASE("vulkan uniform, normal and dropout draw the CPU's Philox numbers") {
  if (!have_vulkan()) return;
  for (int64_t n : {1, 2, 3, 4, 5, 7, 1000, 100003}) {
    Generator a(77), b(77);
    (void)uniform({3}, 0, 1, {}, &a);  // start both mid-stream
    (void)uniform({3}, 0, 1, {}, &b);
    check_close(uniform({n}, -2, 5, TensorOptions().device(kVulkan), &a), uniform({n}, -2, 5, DType::f32, &b), 0, 0,
                "uniform n=" + std::to_string(n));
    check_close(uniform({n}, -0.0625, 0.0625, TensorOptions().device(kVulkan), &a),
                uniform({n}, -0.0625, 0.0625, DType::f32, &b), 0, 0, "uniform (a layer's init) n=" + std::to_string(n));
    // Box-Muller through kiln's own log, sin and cos: a few f32 ulp from the CPU's double
    check_close(normal({n}, 1, 3, TensorOptions().device(kVulkan), &a), normal({n}, 1, 3, DType::f32, &b), 1e-6, 1e-6,
                "normal n=" + std::to_string(n));
    CHECK(a.offset() == b.offset());
    // dropout: the CPU's mask and bits, forward and backward (the gradient takes the same mask)
    Tensor x = uniform({n}, -1, 1), g = uniform({n}, -1, 1);
    Tensor xv = x.to(kVulkan).requires_grad_(), xc = x.detach().requires_grad_();
    Tensor yv = dropout(xv, 0.3, true, &a), yc = dropout(xc, 0.3, true, &b);
    check_close(yv, yc, 0, 0, "dropout n=" + std::to_string(n));
    yv.backward(g.to(kVulkan));
    yc.backward(g);
    check_close(xv.grad(), xc.grad(), 0, 0, "dropout gradient n=" + std::to_string(n));
    if (n > 1)  // an offset view
      check_close(dropout(xv.detach().slice(0, 1, n), 0.6, true, &a), dropout(x.slice(0, 1, n), 0.6, true, &b), 0, 0,
                  "dropout of a view n=" + std::to_string(n));
  }
  check_no_validation_messages();
}

TEST_CASE("vulkan i32 elementwise ops wrap and truncate as on the CPU; division by zero is reported") {
  if (!have_vulkan()) return;
  std::mt19937 rng(9);
  for (int trial = 0; trial < 50; ++trial) {
    const Shape s = random_shape(rng), t = broadcastable(rng, s);
    Tensor a = (uniform(s, -3e9, 3e9)).to(DType::i32), b = (uniform(t, 1, 50)).to(DType::i32);
    Tensor da = a.to(kVulkan), db = b.to(kVulkan);
    const std::string what = s.str() + " with " + t.str();
    check_close(da + db, a + b, 0, 0, "i32 add " + what);
    check_close(da - db, a - b, 0, 0, "i32 sub " + what);
    check_close(da * db, a * b, 0, 0, "i32 mul (wrapping) " + what);
    check_close(da / db, a / b, 0, 0, "i32 div " + what);
    check_close(maximum(da, db), maximum(a, b), 0, 0, "i32 maximum " + what);
    check_close(eq(da, db), eq(a, b), 0, 0, "i32 eq " + what);
    check_close(lt(db, da), lt(b, a), 0, 0, "i32 lt " + what);
    check_close(pow(db, db), pow(b, b), 0, 0, "i32 pow (wrapping) " + what);
    check_close(neg(da), neg(a), 0, 0, "i32 neg " + what);
    check_close(abs(da) * 3.0 + 7.0, abs(a) * 3.0 + 7.0, 0, 0, "i32 abs, mul, add " + what);
    check_close(sign(da), sign(a), 0, 0, "i32 sign " + what);
  }
  Tensor extremes = from_vector<int32_t>({-2147483647 - 1, 2147483647, -7, 7}, {4});
  Tensor minus_one = from_vector<int32_t>({-1, -1, 2, -2}, {4});
  check_close(extremes.to(kVulkan) / minus_one.to(kVulkan), extremes / minus_one, 0, 0, "INT_MIN / -1 wraps");
  check_close(neg(extremes.to(kVulkan)), neg(extremes), 0, 0, "-INT_MIN wraps");
  Tensor zero = from_vector<int32_t>({1, 0, 2, 3}, {4}).to(kVulkan);
  CHECK_THROWS_WITH_AS((extremes.to(kVulkan) / zero).to(Device::cpu()), doctest::Contains("integer division by zero"),
                       ValueError);
  CHECK_THROWS_WITH_AS(pow(extremes.to(kVulkan), minus_one.to(kVulkan)).to(Device::cpu()),
                       doctest::Contains("negative integer powers"), ValueError);
  check_close(extremes.to(kVulkan) + 1.0, extremes + 1.0, 0, 0, "after the faults");
  check_no_validation_messages();
}
