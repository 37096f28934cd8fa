// The CUDA backend against the CPU backend, core kernels: transfers, fill/arange/copy, unary and
// binary elementwise ops, the Philox stream, device memory errors and reductions, on many random
// shapes (sizes that are not multiples of anything, size-1 axes, broadcasting, non-contiguous
// views). Label `cuda`: on a machine without a CUDA device every case reports that it skipped.
#include "tests/cuda/cuda_test.h"

#include <type_traits>

#ifdef KILN_WITH_CUDA
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/reduce.cuh"
#endif

using namespace kiln;
using namespace kiln::test;

TEST_CASE("tensors move to the GPU and back unchanged, in every dtype") {
  if (!have_cuda()) return;
  std::mt19937 rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    Shape s = random_shape(rng);
    Tensor x = uniform(s, -100, 100, DType::f64);
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::u8}) {
      Tensor cpu = (t == DType::u8 ? (x + 100.0) : x).to(t);
      Tensor gpu = cpu.to(kCuda);
      CHECK(gpu.device() == kCuda);
      CHECK(gpu.to(Device::cpu()).to_vector<double>() == cpu.to_vector<double>());
    }
  }
}

TEST_CASE("fill, arange, copies through views and dtype conversions match the CPU") {
  if (!have_cuda()) return;
  std::mt19937 rng(2);
  for (int trial = 0; trial < 60; ++trial) {
    Shape s = random_shape(rng);
    check_close(full(s, 3.25, kCuda), full(s, 3.25), 0, 0, "full " + s.str());
    check_close(arange(-5, 5, 0.37, TensorOptions(DType::f64).device(kCuda)), arange(-5, 5, 0.37, DType::f64), 0, 0, "arange");
    Tensor cpu = uniform(s, -9, 9);
    Tensor gpu = cpu.to(kCuda);
    if (s.size() >= 2) {
      check_close(gpu.transpose(0, -1).contiguous(), cpu.transpose(0, -1).contiguous(), 0, 0, "transpose " + s.str());
      check_close(gpu.slice(-1, 0, s.back(), 2).contiguous(), cpu.slice(-1, 0, s.back(), 2).contiguous(), 0, 0, "slice");
    }
    for (DType t : {DType::f64, DType::i32, DType::u8})
      check_close(gpu.to(t), cpu.to(t), 0, 0, std::string("to ") + std::string(dtype_name(t)));
    Tensor target = zeros(s, kCuda);
    target.copy_(gpu.slice(0, 0, 1));  // a broadcast copy
    check_close(target, zeros(s).copy_(cpu.slice(0, 0, 1)), 0, 0, "broadcast copy_");
  }
}

TEST_CASE("unary ops and activation gradients match the CPU on views, f32 and f64") {
  if (!have_cuda()) return;
  std::mt19937 rng(3);
  using Fn = Tensor (*)(const Tensor&);
  const std::pair<const char*, Fn> ops[] = {
      {"neg", [](const Tensor& x) { return neg(x); }},        {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(abs(x) + 0.1); }}, {"sqrt", [](const Tensor& x) { return sqrt(abs(x)); }},
      {"abs", [](const Tensor& x) { return abs(x); }},        {"sign", [](const Tensor& x) { return sign(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }}, {"pow", [](const Tensor& x) { return pow(abs(x), 1.7); }},
      {"scalars", [](const Tensor& x) { return x * 3.0 + 1.5; }},
      {"relu_backward", [](const Tensor& x) { return relu_backward(x, x * 0.5); }},
      {"leaky_relu_backward", [](const Tensor& x) { return leaky_relu_backward(x, x * 0.5, 0.1); }},
      {"gelu_backward", [](const Tensor& x) { return gelu_backward(x, x * 0.5); }},
  };
  for (int trial = 0; trial < 50; ++trial) {
    Shape s = random_shape(rng);
    for (DType t : {DType::f32, DType::f64}) {
      Tensor cpu = uniform(s, -4, 4, t);
      if (s.size() >= 2) cpu = cpu.transpose(0, -1);  // non-contiguous input
      Tensor gpu = cpu.to(kCuda);
      if (s.size() >= 2) gpu = cpu.contiguous().to(kCuda).transpose(0, -1).contiguous().transpose(0, -1);
      double tol = t == DType::f32 ? 2e-6 : 1e-14;
      for (const auto& [name, fn] : ops) check_close(fn(gpu), fn(cpu), tol, tol, std::string(name) + " " + s.str());
    }
  }
  Tensor i = from_vector<int32_t>({-3, 0, 7, -2147483647}, {4});
  check_close(neg(i.to(kCuda)), neg(i), 0, 0, "neg i32");
  check_close(abs(i.to(kCuda)) * 2.0 + 1.0, abs(i) * 2.0 + 1.0, 0, 0, "abs, mul, add i32 (wrapping)");
}

TEST_CASE("binary ops broadcast as on the CPU, in f32, f64 and i32") {
  if (!have_cuda()) return;
  std::mt19937 rng(4);
  const BinaryOp all[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::pow,
                          BinaryOp::maximum, BinaryOp::minimum, BinaryOp::eq, BinaryOp::ne, BinaryOp::gt,
                          BinaryOp::ge, BinaryOp::lt, BinaryOp::le};
  auto apply = [](BinaryOp op, const Tensor& a, const Tensor& b) {
    switch (op) {
      case BinaryOp::add: return a + b;
      case BinaryOp::sub: return a - b;
      case BinaryOp::mul: return a * b;
      case BinaryOp::div: return a / b;
      case BinaryOp::pow: return pow(a, b);
      case BinaryOp::maximum: return maximum(a, b);
      case BinaryOp::minimum: return minimum(a, b);
      case BinaryOp::eq: return eq(a, b);
      case BinaryOp::ne: return ne(a, b);
      case BinaryOp::gt: return gt(a, b);
      case BinaryOp::ge: return ge(a, b);
      case BinaryOp::lt: return lt(a, b);
      case BinaryOp::le: return le(a, b);
    }
    return a;
  };
  for (int trial = 0; trial < 50; ++trial) {
    Shape s = random_shape(rng);
    Shape sb = broadcastable(rng, s);
    for (DType t : {DType::f32, DType::f64, DType::i32}) {
      Tensor a = (uniform(s, 0.5, 3) * (t == DType::i32 ? 10.0 : 1.0)).to(t);
      Tensor b = (uniform(sb, 0.5, 3) * (t == DType::i32 ? 10.0 : 1.0)).to(t);
      Tensor ga = a.to(kCuda), gb = b.to(kCuda);
      double tol = t == DType::f32 ? 2e-6 : (t == DType::f64 ? 1e-14 : 0.0);
      for (BinaryOp op : all) {
        if (t == DType::i32 && op == BinaryOp::pow) continue;  // overflows: compared below on small values
        check_close(apply(op, ga, gb), apply(op, a, b), tol, tol,
                    std::string(binary_op_name(op)) + " " + s.str() + " with " + sb.str() + " " + std::string(dtype_name(t)));
      }
    }
  }
  Tensor base = from_vector<int32_t>({2, -3, 5, 0}, {4}), exponent = from_vector<int32_t>({10, 3, 0, 4}, {4});
  check_close(pow(base.to(kCuda), exponent.to(kCuda)), pow(base, exponent), 0, 0, "pow i32");
}

TEST_CASE("uniform, normal and dropout draw the CPU's Philox numbers") {
  if (!have_cuda()) return;
  for (int64_t n : {1, 2, 3, 4, 5, 7, 1000, 100003}) {
    for (DType t : {DType::f32, DType::f64}) {
      Generator a(77), b(77);
      (void)uniform({3}, 0, 1, {}, &a);  // start both mid-stream
      (void)uniform({3}, 0, 1, {}, &b);
      check_close(uniform({n}, -2, 5, TensorOptions(t).device(kCuda), &a), uniform({n}, -2, 5, t, &b), 0, 0,
                  "uniform n=" + std::to_string(n));
      check_close(normal({n}, 1, 3, TensorOptions(t).device(kCuda), &a), normal({n}, 1, 3, t, &b),
                  t == DType::f32 ? 1e-6 : 1e-12, 1e-6, "normal n=" + std::to_string(n));
      CHECK(a.offset() == b.offset());
      // dropout: the CPU's mask and bits, forward and backward (the gradient takes the same mask)
      Tensor x = uniform({n}, -1, 1, t), g = uniform({n}, -1, 1, t);
      Tensor xg = x.to(kCuda).requires_grad_(), xc = x.detach().requires_grad_();
      Tensor yg = dropout(xg, 0.3, true, &a), yc = dropout(xc, 0.3, true, &b);
      check_close(yg, yc, 0, 0, "dropout n=" + std::to_string(n));
      yg.backward(g.to(kCuda));
      yc.backward(g);
      check_close(xg.grad(), xc.grad(), 0, 0, "dropout gradient n=" + std::to_string(n));
      if (n > 1)  // one element in: not 16-byte aligned, the kernel's scalar path
        check_close(dropout(xg.detach().slice(0, 1, n), 0.6, true, &a), dropout(x.slice(0, 1, n), 0.6, true, &b), 0, 0,
                    "dropout of an unaligned view n=" + std::to_string(n));
    }
  }
}

TEST_CASE("device errors: out of memory names the numbers, a missing device is refused") {
  if (!have_cuda()) return;
  try {
    (void)empty({int64_t{1} << 40}, kCuda);  // 4 TiB
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    std::string what = e.what();
    CHECK(what.find("4398046511104 bytes") != std::string::npos);
    CHECK(what.find("free of") != std::string::npos);
  }
  Tensor x = ones({4, 4}, kCuda);  // the device still works after a failed allocation
  CHECK((x + x).to(Device::cpu()).to_vector<float>() == std::vector<float>(16, 2.0f));
  CHECK_THROWS_AS((void)zeros({1}, Device::cuda(1000)), BackendUnavailable);
  CHECK_THROWS_AS(x + ones({4, 4}), DeviceError);
}

TEST_CASE("reductions over any axes match the CPU, NaN and ties included") {
  if (!have_cuda()) return;
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    Shape s = random_shape(rng);
    // A random non-empty subset of axes (or all of them).
    std::vector<int64_t> axes;
    for (int64_t a = 0; a < s.rank(); ++a)
      if (std::uniform_int_distribution<int>(0, 1)(rng)) axes.push_back(a);
    bool keepdim = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    for (DType t : {DType::f32, DType::f64, DType::i32}) {
      Tensor cpu = (uniform(s, -50, 50) * (t == DType::i32 ? 1.0 : 0.1)).to(t);
      if (t == DType::f32) cpu = (cpu * 4.0).to(DType::i32).to(DType::f32);  // ties, to test the first-index rule
      Tensor gpu = cpu.to(kCuda);
      std::string what = s.str() + " " + std::string(dtype_name(t)) + (keepdim ? " keepdim" : "");
      double tol = t == DType::f64 ? 1e-12 : 1e-5;
      check_close(sum(gpu, axes, keepdim), sum(cpu, axes, keepdim), tol, tol, "sum " + what);
      if (t != DType::i32) check_close(mean(gpu, axes, keepdim), mean(cpu, axes, keepdim), tol, tol, "mean " + what);
      check_close(max(gpu, axes, keepdim), max(cpu, axes, keepdim), 0, 0, "max " + what);
      check_close(min(gpu, axes, keepdim), min(cpu, axes, keepdim), 0, 0, "min " + what);
      int64_t axis = std::uniform_int_distribution<int64_t>(0, s.rank() - 1)(rng);
      check_close(argmax(gpu, axis, keepdim), argmax(cpu, axis, keepdim), 0, 0, "argmax " + what);
      check_close(argmin(gpu, axis, keepdim), argmin(cpu, axis, keepdim), 0, 0, "argmin " + what);
    }
  }
  Tensor with_nan = from_vector<float>({1, NAN, 3, NAN, 2, 5}, {2, 3});
  check_close(max(with_nan.to(kCuda), {1}), max(with_nan, {1}), 0, 0, "max with NaN");
  check_close(argmax(with_nan.to(kCuda), 1), argmax(with_nan, 1), 0, 0, "argmax with NaN");
  Tensor big = uniform({3000000}, -1, 1, DType::f64);  // one long row: the block-per-row version
  check_close(sum(big.to(kCuda)), sum(big), 1e-10, 1e-10, "sum of 3M");
  // More outer slices than a grid's y dimension holds (65535): the column-tile version loops.
  Tensor tall = uniform({70000, 16, 17}, -1, 1);
  check_close(sum(tall.to(kCuda), {1}), sum(tall, {1}), 1e-5, 1e-5, "sum over the middle of [70000, 16, 17]");
  check_close(argmax(tall.to(kCuda), 1), argmax(tall, 1), 0, 0, "argmax over the middle of [70000, 16, 17]");
}

#ifdef KILN_WITH_CUDA
TEST_CASE("every middle-axis reduction version on raw device buffers matches the CPU, deterministically") {
  if (!have_cuda()) return;
  namespace r = kiln::cuda::reduce;
  cudaStream_t stream = kiln::cuda::backend(0).stream();
  // [outer, n, inner]: inner a multiple of the 16-byte pack or not, narrower than a warp's packs,
  // outputs few enough that version 4 splits the reduced axis, n not a multiple of anything
  const Shape shapes[] = {{2, 4099, 64}, {3, 1000, 37}, {1, 20000, 8}, {5, 17, 130}, {1, 3001, 2}, {64, 300, 256}};
  for (const Shape& s : shapes) {
    const int64_t outer = s[0], n = s[1], inner = s[2];
    for (DType t : {DType::f32, DType::f64, DType::i32}) {
      // an offset of one element makes every row misaligned for the 16-byte packs
      for (int64_t offset : {0, 1}) {
        Tensor cpu = (uniform(s, -50, 50) * (t == DType::i32 ? 1.0 : 0.1)).to(t);
        Tensor buffer = zeros({s.numel() + offset}, TensorOptions(t).device(kCuda));
        buffer.slice(0, offset, offset + s.numel()).copy_(cpu.reshape({s.numel()}).to(kCuda));
        Tensor x = buffer.slice(0, offset, offset + s.numel()).reshape(s);
        const std::string what = s.str() + " " + std::string(dtype_name(t)) + " offset " + std::to_string(offset);
        const double tol = t == DType::f64 ? 1e-12 : 1e-5;
        auto run = [&](auto fn, DType out_dtype) {
          Tensor out = full({outer, inner}, -7, TensorOptions(out_dtype).device(kCuda));  // every output written
          if (t == DType::f32) fn(x.ref().data<float>(), out);
          else if (t == DType::f64) fn(x.ref().data<double>(), out);
          else fn(x.ref().data<int32_t>(), out);
          return out;
        };
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max, ReduceOp::min, ReduceOp::argmax, ReduceOp::argmin}) {
          if (op == ReduceOp::mean && t == DType::i32) continue;
          const bool arg = op == ReduceOp::argmax || op == ReduceOp::argmin;
          const std::string name = std::string(reduce_op_name(op)) + " " + what;
          Tensor want = op == ReduceOp::sum    ? sum(cpu, {1})
                        : op == ReduceOp::mean ? mean(cpu, {1})
                        : op == ReduceOp::max  ? max(cpu, {1})
                        : op == ReduceOp::min  ? min(cpu, {1})
                        : op == ReduceOp::argmax ? argmax(cpu, 1)
                                                 : argmin(cpu, 1);
          Tensor got3 = run([&](auto* xp, Tensor& out) {
            using T = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
            r::column_tiles<T>(op, xp, arg ? nullptr : out.ref().data<T>(), arg ? out.ref().data<int32_t>() : nullptr,
                               outer, n, inner, stream);
          }, arg ? DType::i32 : t);
          check_close(got3, want, arg ? 0 : tol, arg ? 0 : tol, "column_tiles " + name);
          if (arg || op == ReduceOp::max || op == ReduceOp::min) continue;
          // version 4 at its production split count and at others, and twice each: the same bits
          const int64_t production = r::column_packs_splits(outer, n, inner);
          for (int64_t splits : {production, int64_t{1}, int64_t{2}, int64_t{7}}) {
            auto v4 = [&](auto* xp, Tensor& out) {
              using T = std::remove_const_t<std::remove_pointer_t<decltype(xp)>>;
              Tensor workspace = empty({static_cast<int64_t>(r::column_packs_workspace_bytes<T>(outer, inner, splits)) + 1},
                                       TensorOptions(DType::u8).device(kCuda));
              r::column_packs<T>(op, xp, out.ref().data<T>(), outer, n, inner, splits, workspace.ref().data<uint8_t>(), stream);
            };
            Tensor got4 = run(v4, t);
            const std::string name4 = "column_packs (" + std::to_string(splits) + " splits) " + name;
            check_close(got4, want, tol, tol, name4);
            CHECK_MESSAGE(run(v4, t).to_vector<double>() == got4.to_vector<double>(), name4 << ": not deterministic");
          }
          // the production path (version 4 for these shapes), twice
          Tensor got = op == ReduceOp::sum ? sum(x, {1}) : mean(x, {1});
          check_close(got, want, tol, tol, "CudaBackend " + name);
          Tensor again = op == ReduceOp::sum ? sum(x, {1}) : mean(x, {1});
          CHECK_MESSAGE(again.to_vector<double>() == got.to_vector<double>(), "CudaBackend " << name << ": not deterministic");
        }
      }
    }
  }
}
#endif
