// The cases of test_backend_ops's memory and elementwise rows: transfers, fills, arange, copies
// through views, dtype conversions, unary and binary ops (random shapes, non-contiguous views,
// broadcasting, both operand orders, i32 wrapping, NaN, infinities, signed zeros; gradients through
// autograd), isfinite on every class of float, Philox draws and dropout, and bad indices reported
// at the next read.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/kiln.h"
#include "tests/backend_cases.h"
#include "tests/backend_ops.h"

namespace kiln::test {

inline std::string named(const char* what, DType t) { return std::string(what) + " " + std::string(dtype_name(t)); }
inline std::string named(const char* what, const Shape& s, DType t) { return named(what, t) + " " + s.str(); }

// Values of `s` in dtype t: uniform in [-scale, scale) (integers: truncated and wrapped, as the
// CPU converts).
inline Tensor values(const Shape& s, double scale, DType t) { return uniform(s, -scale, scale, DType::f64).to(t); }

// Tensors go to the device and back unchanged, in every dtype.
inline void transfer_cases(const Run& r) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    const Shape s = random_shape(rng);
    Tensor x = uniform(s, -100, 100, DType::f64);
    for (const Take& k : r.takes) {
      Tensor cpu = (k.dtype == DType::u8 ? (x + 100.0) : x).to(k.dtype);
      Tensor dev = cpu.to(r.device);
      CHECK(dev.device() == r.device);
      CHECK(dev.to(Device::cpu()).to_vector<double>() == cpu.to_vector<double>());
    }
  }
}

// full, and fill_ through views: a slice of the first axis, every other element of the last,
// and elements 1 .. n - 1 of the flat tensor (odd offset and length: u8's first and last words
// keep a byte).
inline void fill_cases(const Run& r) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 60; ++trial) {
    const Shape s = random_shape(rng);
    for (const Take& k : r.takes) {
      const TensorOptions on_cpu(k.dtype), on_dev = TensorOptions(k.dtype).device(r.device);
      const bool byte = k.dtype == DType::u8;
      for (double v : {byte ? 200.0 : 3.25, byte ? 9.0 : -2.5})
        r.check(full(s, v, on_dev), full(s, v, on_cpu), k.tol, named("full", s, k.dtype));
      Tensor dv = zeros(s, on_dev), cv = zeros(s, on_cpu);
      dv.slice(0, 0, (s[0] + 1) / 2).fill_(byte ? 200 : 7);
      cv.slice(0, 0, (s[0] + 1) / 2).fill_(byte ? 200 : 7);
      dv.slice(-1, 0, s.back(), 2).fill_(byte ? 13 : -1.5);
      cv.slice(-1, 0, s.back(), 2).fill_(byte ? 13 : -1.5);
      r.check(dv, cv, k.tol, named("fill_ through slices", s, k.dtype));
      const int64_t n = s.numel();
      if (n > 3) {
        Tensor flat = full({n}, 5, on_dev), want = full({n}, 5, on_cpu);
        flat.slice(0, 1, n - 1).fill_(9);
        want.slice(0, 1, n - 1).fill_(9);
        r.check(flat, want, k.tol, named("fill_ of elements 1 .. n - 1", s, k.dtype));
      }
    }
  }
}

// arange through the op, and the backend's arange on long ranges computed as the CPU's double
// (i32 only with whole start and step: a fractional step may land a value just below a whole
// number that the CPU's double rounds onto).
inline void arange_cases(const Run& r) {
  for (DType t : r.floats())
    r.check(arange(-5, 5, 0.37, TensorOptions(t).device(r.device)), arange(-5, 5, 0.37, t), r.tol(t),
            named("arange(-5, 5, 0.37)", t));
  for (auto [start, step, n] : {std::tuple{0.0, 1.0, 5000}, {-3.25, 0.1, 100000}, {1e6, -0.37, 70001}, {5.0, 3.0, 1000},
                                {-7e5, 13.0, 200000}, {2e9, -1e4, 5000}}) {
    for (const Take& k : r.takes) {
      if (k.dtype == DType::u8) continue;
      if (k.dtype == DType::i32 && (start != std::trunc(start) || step != std::trunc(step))) continue;
      Tensor cpu = empty({n}, TensorOptions(k.dtype)), dev = empty({n}, TensorOptions(k.dtype).device(r.device));
      cpu.backend().arange(cpu.ref(), start, step);
      dev.backend().arange(dev.ref(), start, step);
      r.check(dev, cpu, k.tol, "arange " + std::to_string(start) + " step " + std::to_string(step) + " " +
                                   std::string(dtype_name(k.dtype)));
    }
  }
}

// Views made contiguous: a transpose, a slice with a step, a size-1 slice, an expanded column;
// and a copy_ that broadcasts a size-1 slice over the whole tensor.
inline void copy_cases(const Run& r) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const Shape s = random_shape(rng);
    for (const Take& k : r.takes) {
      Tensor cpu = values(s, 3e3, k.dtype), dev = cpu.to(r.device);
      if (s.size() >= 2) {
        r.check(dev.transpose(0, -1).contiguous(), cpu.transpose(0, -1).contiguous(), k.tol,
                named("transpose", s, k.dtype));
        r.check(dev.slice(1, 0, 1).contiguous(), cpu.slice(1, 0, 1).contiguous(), k.tol,
                named("slice(1, 0, 1)", s, k.dtype));
      }
      r.check(dev.slice(-1, 0, s.back(), 2).contiguous(), cpu.slice(-1, 0, s.back(), 2).contiguous(), k.tol,
              named("every other element of the last axis", s, k.dtype));
      r.check(dev.slice(-1, 0, 1).expand(s).contiguous(), cpu.slice(-1, 0, 1).expand(s).contiguous(), k.tol,
              named("the first column expanded", s, k.dtype));
      Tensor target = zeros(s, TensorOptions(k.dtype).device(r.device));
      target.copy_(dev.slice(0, 0, 1));
      r.check(target, zeros(s, TensorOptions(k.dtype)).copy_(cpu.slice(0, 0, 1)), k.tol,
              named("broadcast copy_", s, k.dtype));
    }
  }
}

// In-place arithmetic (add_, sub_ with alpha, mul_, div_, add_ and mul_ of a scalar) against the
// same op out of place on the CPU: on contiguous tensors, a transposed view as the target, a
// broadcast operand, the tensor itself as the operand, and an operand that overlaps the target
// without being it (its transpose: read whole before any write).
inline void inplace_arithmetic_cases(const Run& r) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 30; ++trial) {
    const Shape s = random_shape(rng);
    for (const Take& k : r.takes) {
      if (k.dtype == DType::u8) continue;
      const bool floating = is_floating(k.dtype);
      Tensor a = values(s, floating ? 4 : 1000, k.dtype), b = values(s, floating ? 4 : 1000, k.dtype);
      if (floating) b = b + 5.0;  // away from 0: b divides
      Tensor row = b.slice(0, 0, 1);  // broadcast along the first axis
      const std::vector<std::tuple<const char*, std::function<void(Tensor&, const Tensor&, const Tensor&)>,
                                   std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>>>
          ops = {
              {"add_", [](Tensor& t, const Tensor& o, const Tensor&) { t.add_(o); },
               [](const Tensor& t, const Tensor& o, const Tensor&) { return t + o; }},
              {"sub_ alpha 2", [](Tensor& t, const Tensor& o, const Tensor&) { t.sub_(o, 2); },
               [](const Tensor& t, const Tensor& o, const Tensor&) { return t - o * 2.0; }},
              {"mul_", [](Tensor& t, const Tensor& o, const Tensor&) { t.mul_(o); },
               [](const Tensor& t, const Tensor& o, const Tensor&) { return t * o; }},
              {"add_ broadcast row, alpha -3", [](Tensor& t, const Tensor&, const Tensor& w) { t.add_(w, -3); },
               [](const Tensor& t, const Tensor&, const Tensor& w) { return t + w * -3.0; }},
              {"add_ scalar", [](Tensor& t, const Tensor&, const Tensor&) { t.add_(7.0); },
               [](const Tensor& t, const Tensor&, const Tensor&) { return t + 7.0; }},
              {"mul_ scalar", [](Tensor& t, const Tensor&, const Tensor&) { t.mul_(-2.0); },
               [](const Tensor& t, const Tensor&, const Tensor&) { return t * -2.0; }},
              {"add_ itself", [](Tensor& t, const Tensor&, const Tensor&) { t.add_(t); },
               [](const Tensor& t, const Tensor&, const Tensor&) { return t + t; }},
          };
      for (const auto& [name, in_place, out_of_place] : ops) {
        Tensor want = out_of_place(a, b, row);
        Tensor dev = a.to(r.device);
        in_place(dev, b.to(r.device), row.to(r.device));
        r.check(dev, want, k.tol, named(name, s, k.dtype));
        if (s.size() >= 2) {  // a transposed view of a contiguous tensor as the target
          Tensor base = a.transpose(0, -1).contiguous().to(r.device), view = base.transpose(0, -1);
          in_place(view, b.to(r.device), row.to(r.device));
          r.check(view, want, k.tol, named(name, s, k.dtype) + " into a transposed view");
        }
      }
      if (floating) {
        Tensor dev = a.to(r.device);
        dev.div_(b.to(r.device));
        r.check(dev, a / b, k.tol, named("div_", s, k.dtype));
      }
    }
  }
  // the target's own transpose as the operand: every element reads the value before any write
  for (const Take& k : r.takes) {
    if (k.dtype == DType::u8) continue;
    Tensor a = values({37, 37}, is_floating(k.dtype) ? 4 : 1000, k.dtype), dev = a.to(r.device);
    dev.add_(dev.t());
    r.check(dev, a + a.t(), k.tol, named("add_ of its own transpose", Shape{37, 37}, k.dtype));
  }
}

// Conversions between every two dtypes taken: truncation toward zero, the wrap of values past
// an integer's width (u8: -4 -> 252), from contiguous tensors and transposed views; then the
// edges of f32 -> integers and of i32 -> floats (rounding).
inline void convert_cases(const Run& r) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 60; ++trial) {
    const Shape s = random_shape(rng);
    const double scale = trial % 2 ? 300 : 3e3;
    for (const Take& from : r.takes) {
      Tensor cpu = values(s, scale, from.dtype), dev = cpu.to(r.device);
      for (const Take& to : r.takes) {
        if (to.dtype == from.dtype) continue;
        const std::string what = std::string(dtype_name(from.dtype)) + " -> " + std::string(dtype_name(to.dtype)) +
                                 " " + s.str() + " scale " + std::to_string(scale);
        r.check(dev.to(to.dtype), cpu.to(to.dtype), to.tol, what);
        if (s.size() >= 2)
          r.check(dev.transpose(0, -1).to(to.dtype), cpu.transpose(0, -1).to(to.dtype), to.tol, what + " transposed");
      }
    }
  }
  const std::vector<double> edges{-4.0, -3.7, -0.5, 0.5, 2.9, 2147483520.0, -2147483648.0, 3e9, -3e9, 1e12, -1e12};
  const Tensor big = from_vector<int32_t>({16777217, -2147483647, 2147483647}, {3});
  for (DType t : r.floats()) {
    Tensor e = from_vector<double>(edges, {static_cast<int64_t>(edges.size())}).to(t);
    for (DType to : {DType::i32, DType::u8})
      if (r.has(to))
        r.check(e.to(r.device).to(to), e.to(to), r.tol(to), named("edges", t) + " -> " + std::string(dtype_name(to)));
    if (r.has(DType::i32)) r.check(big.to(r.device).to(t), big.to(t), r.tol(t), named("rounding: i32 ->", t));
  }
}

using UnaryFn = Tensor (*)(const Tensor&);

// A unary op on 50 random shapes, each a transposed view (every other one an expanded view too),
// in every dtype taken (floats in [-4, 4), i32 over its whole range: wrapping), with its gradient
// through autograd where it has one (every fifth shape); then special values: i32's extremes,
// and for floats (with `specials`) infinities, NaN, signed zeros, a tiny value and the limits of
// the saturating functions.
inline void unary_cases(const Run& r, UnaryFn fn, bool differentiable, bool specials) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const Shape s = random_shape(rng);
    for (const Take& k : r.takes) {
      const bool floating = k.dtype != DType::i32;
      Tensor base = floating ? uniform(s, -4, 4, k.dtype) : values(s, 3e9, DType::i32);
      Tensor cpu = base, dev = base.to(r.device);
      if (s.size() >= 2) cpu = cpu.transpose(0, -1), dev = dev.transpose(0, -1);  // a non-contiguous input
      r.check(fn(dev), fn(cpu), k.tol, named("random", s, k.dtype));
      if (trial % 2) {  // the first row repeated over the first axis: a stride-0 (expanded) input
        Tensor row = base.slice(0, 0, 1);
        r.check(fn(row.to(r.device).expand(s)), fn(row.expand(s)), k.tol, named("expanded", s, k.dtype));
      }
      if (!floating || !differentiable || trial % 5) continue;
      // the gradient: elementwise, from the op's backward formula (4x the forward's tolerance)
      Tensor g = uniform(cpu.shape(), -1, 1, k.dtype), grads[2];
      for (int side = 0; side < 2; ++side) {
        const Device on = side ? r.device : Device::cpu();
        Tensor leaf = base.detach().to(on).requires_grad_();
        fn(s.size() >= 2 ? leaf.transpose(0, -1) : leaf).backward(g.to(on));
        grads[side] = leaf.grad();
      }
      r.check(grads[1], grads[0], k.tol.times(4), named("gradient", s, k.dtype));
    }
  }
  if (r.has(DType::i32)) {
    Tensor x = from_vector<int32_t>({-2147483647 - 1, 2147483647, -2147483647, -7, 7, -3, 0}, {7});
    r.check(fn(x.to(r.device)), fn(x), r.tol(DType::i32), "i32 extremes (wrapping)");
  }
  if (!specials) return;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  Tensor sp = from_vector<double>({-inf, -100, -9, -0.0, 0, 1e-30, 9, 100, inf, nan}, {10});
  for (DType t : r.floats()) {
    const Tol tol = r.tol(t);
    r.check(fn(sp.to(t).to(r.device)), fn(sp.to(t)), {std::min(tol.rtol, 1e-6), std::min(tol.atol, 1e-12)},
            named("special values", t));
  }
}

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

// A binary op on 50 random shapes against a broadcastable partner, both ways round. Floats: a in
// [-3, 3), b in [0.5, 3), every fourth shape whole numbers (ties; zeros), on every fifth (not
// whole) the gradients of both operands through autograd (the broadcast one summed: a tolerance
// per term). i32 (with `int_fn` where the op needs other operands there): alternately values of
// 5 .. 30 (ties) and values over the whole range against 1 .. 50 (wrapping). Then NaNs, and
// i32's extremes.
inline void binary_cases(const Run& r, BinaryFn fn, bool differentiable, BinaryFn int_fn = nullptr) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 50; ++trial) {
    const Shape s = random_shape(rng), sb = broadcastable(rng, s);
    const std::string shapes = s.str() + " with " + sb.str();
    for (const Take& k : r.takes) {
      const std::string what = shapes + " " + std::string(dtype_name(k.dtype));
      if (k.dtype == DType::i32) {
        const bool wide = trial % 2 == 1;
        Tensor a = wide ? values(s, 3e9, DType::i32) : uniform(s, 5, 30).to(DType::i32);
        Tensor b = uniform(sb, wide ? 1 : 5, wide ? 50 : 30).to(DType::i32);
        BinaryFn f = int_fn ? int_fn : fn;
        r.check(f(a.to(r.device), b.to(r.device)), f(a, b), k.tol, what + (wide ? " (wrapping)" : ""));
        continue;
      }
      const bool whole = trial % 4 == 0;
      Tensor a = uniform(s, -3, 3, k.dtype), b = uniform(sb, 0.5, 3, k.dtype);
      if (whole) a = a.to(DType::i32).to(k.dtype), b = b.to(DType::i32).to(k.dtype);
      Tensor da = a.to(r.device), db = b.to(r.device);
      r.check(fn(da, db), fn(a, b), k.tol, what);
      r.check(fn(db, da), fn(b, a), k.tol, sb.str() + " with " + s.str() + " " + std::string(dtype_name(k.dtype)));
      if (!differentiable || whole || trial % 5 != 1) continue;
      Tensor g = uniform(s, -1, 1, k.dtype), ga[2], gb[2];
      for (int side = 0; side < 2; ++side) {
        const Device on = side ? r.device : Device::cpu();
        Tensor la = a.detach().to(on).requires_grad_(), lb = b.detach().to(on).requires_grad_();
        fn(la, lb).backward(g.to(on));
        ga[side] = la.grad(), gb[side] = lb.grad();
      }
      // b's gradient sums numel(a) / numel(b) terms: an f32 rounding (f64: 1e-14) per term
      const double terms = static_cast<double>(s.numel() / sb.numel());
      const double per_term = k.dtype == DType::f32 ? 1e-6 : 1e-14;
      r.check(ga[1], ga[0], k.tol.times(4), what + " gradient of a");
      r.check(gb[1], gb[0], {4 * k.tol.rtol + per_term, 4 * k.tol.atol + per_term * terms}, what + " gradient of b");
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = from_vector<float>({nan, 1, nan, -2}, {4}), y = from_vector<float>({1, nan, nan, -3}, {4});
  for (DType t : r.floats()) {
    Tensor xt = x.to(t), yt = y.to(t);
    r.check(fn(xt.to(r.device), yt.to(r.device)), fn(xt, yt), {}, named("NaN", t));
  }
  if (r.has(DType::i32)) {
    BinaryFn f = int_fn ? int_fn : fn;
    Tensor extremes = from_vector<int32_t>({-2147483647 - 1, 2147483647, -7, 7}, {4});
    Tensor minus_one = from_vector<int32_t>({-1, -1, 2, -2}, {4});
    r.check(f(extremes.to(r.device), minus_one.to(r.device)), f(extremes, minus_one), r.tol(DType::i32),
            "i32 extremes (INT_MIN / -1 wraps)");
  }
}

// pow of two tensors: floats as pow(|a|, b); i32 as pow(a, |b|) (negative integer powers are
// errors), and a negative base, a zero exponent, a zero base.
inline void pow_cases(const Run& r) {
  binary_cases(r, [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); }, true,
               [](const Tensor& a, const Tensor& b) { return pow(a, abs(b)); });
  if (r.has(DType::i32)) {
    Tensor base = from_vector<int32_t>({2, -3, 5, 0}, {4}), exponent = from_vector<int32_t>({10, 3, 0, 4}, {4});
    r.check(pow(base.to(r.device), exponent.to(r.device)), pow(base, exponent), r.tol(DType::i32), "pow i32");
  }
}

// pow with a scalar exponent: pow(|x|, 1.7) as a unary op, then the sign rules: negative bases
// to whole and fractional powers, zeros of both signs to negative powers, x^0 (within 2e-6: a
// power of a small base lands within an ulp or two).
inline void pow_scalar_cases(const Run& r) {
  unary_cases(r, [](const Tensor& x) { return pow(abs(x), 1.7); }, true, false);
  for (DType t : r.floats()) {
    Tensor base = from_vector<double>({-8, -2, -0.5, 0, 2, -0.0}, {6}).to(t);
    for (double p : {2.0, 3.0, -1.0, 0.5, -2.0, 0.0})
      r.check(pow(base.to(r.device), p), pow(base, p), {std::min(r.tol(t).rtol, 2e-6), 0},
              named("pow special", t) + " " + std::to_string(p));
  }
}

// Floats of every class by their bits, each with whether it is finite: NaNs (quiet, signalling,
// the smallest payload, all bits set), both infinities, both zeros, the smallest and largest
// denormals of both signs, the smallest normal, the largest finite values of both signs and the
// ones beside them, ordinary values.
template <class F>
std::vector<std::pair<F, bool>> float_classes() {
  using L = std::numeric_limits<F>;
  using Bits = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;
  const Bits exponent = std::bit_cast<Bits>(L::infinity());  // all ones, a zero mantissa
  const F largest_denormal = std::bit_cast<F>(static_cast<Bits>(std::bit_cast<Bits>(L::min()) - 1));
  return {{L::quiet_NaN(), false},
          {L::signaling_NaN(), false},
          {std::bit_cast<F>(static_cast<Bits>(exponent | 1)), false},
          {std::bit_cast<F>(static_cast<Bits>(~Bits{0})), false},
          {L::infinity(), false},
          {-L::infinity(), false},
          {F(0), true},
          {-F(0), true},
          {L::denorm_min(), true},
          {-L::denorm_min(), true},
          {largest_denormal, true},
          {-largest_denormal, true},
          {L::min(), true},
          {L::max(), true},
          {L::lowest(), true},
          {std::nextafter(L::max(), F(0)), true},
          {F(1), true},
          {F(-2.5), true},
          {F(1e-3), true},
          {F(12345.678), true}};
}

// isfinite: unary_cases' random shapes, views and special values (u8 aside); then float_classes
// against the values isfinite must give (not only the CPU's), contiguous, as a transposed and an
// expanded view, and repeated past a parallel chunk of the CPU from an odd offset; i32 (including
// the bits of an infinity and a NaN, which an integer does not have) and u8: all ones.
template <class F>
void isfinite_floats(const Run& r, DType t) {
  const auto classes = float_classes<F>();
  const int64_t n = static_cast<int64_t>(classes.size());
  std::vector<F> x;
  std::vector<double> want;
  for (int64_t i = 0; i < 100003; ++i) {
    x.push_back(classes[static_cast<size_t>(i % n)].first);
    want.push_back(classes[static_cast<size_t>(i % n)].second ? 1 : 0);
  }
  const auto check = [&](const Tensor& cpu, const Tensor& expected, const std::string& what) {
    Tensor got = isfinite(cpu.to(r.device));
    CHECK_MESSAGE(got.dtype() == t, what);
    r.check(got, isfinite(cpu), {}, named(what.c_str(), t) + " against the cpu");
    r.check(got, expected, {}, named(what.c_str(), t) + " against the expected values");
  };
  const Tensor all = from_vector<F>(x, {100003}), all_want = from_vector<double>(want, {100003}).to(t);
  const Tensor one = all.slice(0, 0, n), one_want = all_want.slice(0, 0, n);
  check(one, one_want, "float classes");
  const Tensor two = all.slice(0, 0, 2 * n).reshape({2, n}), two_want = all_want.slice(0, 0, 2 * n).reshape({2, n});
  check(two.t(), two_want.t(), "float classes transposed");
  check(one.reshape({1, n}).expand({3, n}), one_want.reshape({1, n}).expand({3, n}), "float classes expanded");
  check(all.slice(0, 1, 100003), all_want.slice(0, 1, 100003), "float classes repeated, from element 1");
}

inline void isfinite_cases(const Run& r) {
  Run no_u8 = r;
  std::erase_if(no_u8.takes, [](const Take& k) { return k.dtype == DType::u8; });
  unary_cases(no_u8, [](const Tensor& x) { return isfinite(x); }, false, true);
  if (r.has(DType::f32)) isfinite_floats<float>(r, DType::f32);
  if (r.has(DType::f64)) isfinite_floats<double>(r, DType::f64);
  const std::vector<int32_t> ints{-2147483647 - 1, 2147483647, -1, 0, 1, 0x7f800000, 0x7fc00000, -8388608};
  const int64_t n = static_cast<int64_t>(ints.size());
  for (DType t : {DType::i32, DType::u8}) {
    if (!r.has(t)) continue;
    Tensor x = from_vector<int32_t>(ints, {n}).to(t), got = isfinite(x.to(r.device));
    CHECK(got.dtype() == t);
    r.check(got, isfinite(x), {}, named("isfinite", t) + " against the cpu");
    r.check(got, ones({n}, TensorOptions(t)), {}, named("isfinite", t) + ": all ones");
  }
}

// Calls draw(n, t, a, b) for sizes of one to several 4-number Philox blocks and many, in each
// floating dtype taken, with two generators of one seed (a for the device, b for the CPU) started
// mid-stream; then both must stand at the same place of the stream.
template <class Draw>
void philox_cases(const Run& r, Draw draw) {
  for (int64_t n : {1, 2, 3, 4, 5, 7, 1000, 100003})
    for (DType t : r.floats()) {
      Generator a(77), b(77);
      (void)uniform({3}, 0, 1, {}, &a);
      (void)uniform({3}, 0, 1, {}, &b);
      draw(n, t, a, b);
      CHECK(a.offset() == b.offset());
    }
}

// uniform draws the CPU's Philox numbers.
inline void uniform_cases(const Run& r) {
  philox_cases(r, [&](int64_t n, DType t, Generator& a, Generator& b) {
    const std::string what = named("uniform", {n}, t);
    r.check(uniform({n}, -2, 5, TensorOptions(t).device(r.device), &a), uniform({n}, -2, 5, t, &b), r.tol(t), what);
    r.check(uniform({n}, -0.0625, 0.0625, TensorOptions(t).device(r.device), &a),
            uniform({n}, -0.0625, 0.0625, t, &b), r.tol(t), what + " (a layer's init)");
  });
}

// normal: Box-Muller through the backend's log, sin and cos, a few ulp from the CPU's.
inline void normal_cases(const Run& r) {
  philox_cases(r, [&](int64_t n, DType t, Generator& a, Generator& b) {
    r.check(normal({n}, 1, 3, TensorOptions(t).device(r.device), &a), normal({n}, 1, 3, t, &b), r.tol(t),
            named("normal", {n}, t));
  });
}

// dropout: the CPU's mask and bits, forward and backward (the gradient takes the same mask), and
// of a view one element in (not 16-byte aligned: CUDA's scalar path).
inline void dropout_cases(const Run& r) {
  philox_cases(r, [&](int64_t n, DType t, Generator& a, Generator& b) {
    Tensor x = uniform({n}, -1, 1, t), g = uniform({n}, -1, 1, t);
    Tensor xd = x.to(r.device).requires_grad_(), xc = x.detach().requires_grad_();
    Tensor yd = dropout(xd, 0.3, true, &a), yc = dropout(xc, 0.3, true, &b);
    const std::string what = named("dropout", {n}, t);
    r.check(yd, yc, r.tol(t), what);
    yd.backward(g.to(r.device));
    yc.backward(g);
    r.check(xd.grad(), xc.grad(), r.tol(t), what + " gradient");
    // after a relu, whose gradient dropout's backward applies for it (autograd::Needed)
    Tensor hd = x.to(r.device).requires_grad_(), hc = x.detach().requires_grad_();
    Tensor zd = dropout(relu(hd), 0.3, true, &a), zc = dropout(relu(hc), 0.3, true, &b);
    zd.backward(g.to(r.device));
    zc.backward(g);
    r.check(hd.grad(), hc.grad(), r.tol(t), what + " after a relu, gradient");
    if (n > 1)
      r.check(dropout(xd.detach().slice(0, 1, n), 0.6, true, &a), dropout(x.slice(0, 1, n), 0.6, true, &b), r.tol(t),
              what + " of a view one element in");
  });
}

// An index out of range cannot throw in a kernel: the backend reports it at the next read (the
// host's wait), naming the op; the fault is then cleared and the device goes on working.
inline void bad_index_cases(const Run& r) {
  Tensor x = uniform({5, 3}, 0, 1).to(r.device);
  Tensor y = index_select(x, 0, from_vector<int32_t>({0, 4, 5, 1}, {4}).to(r.device));
  CHECK_THROWS_WITH_AS(y.to(Device::cpu()), doctest::Contains("gather: index 5 at position 2 is outside [0, 5)"),
                       ValueError);
  Tensor good = from_vector<int32_t>({4, 0}, {2});
  r.check(index_select(x, 0, good.to(r.device)), index_select(x.to(Device::cpu()), 0, good), {}, "after the fault");
  CHECK_THROWS_WITH_AS(one_hot(from_vector<int32_t>({1, -1}, {2}).to(r.device), 3).to(Device::cpu()),
                       doctest::Contains("one_hot: index -1 at position 1"), ValueError);
  CHECK_THROWS_WITH_AS(
      index_select_backward(ones({2, 3}, r.device), 0, from_vector<int32_t>({0, 7}, {2}).to(r.device), {5, 3})
          .to(Device::cpu()),
      doctest::Contains("index_add: index 7"), ValueError);
  // cross-entropy's targets, at class counts that take different kernels; rows 1 and 3 are bad,
  // and the fault keeps whichever reached it first
  for (int64_t classes : {10, 3000, 20000}) {
    Tensor logits = uniform({4, classes}, -1, 1, r.device);
    Tensor bad = from_vector<int32_t>({0, static_cast<int32_t>(classes), 1, -1}, {4}).to(r.device);
    CHECK_THROWS_WITH_AS(cross_entropy(logits, bad, Reduction::none).to_vector<float>(),
                         doctest::Contains("cross_entropy: index"), ValueError);
    CHECK_THROWS_AS(cross_entropy_backward(logits, bad, ones({4}, r.device), 0.0).to_vector<float>(), ValueError);
    // the batch's mean (CUDA: version 8 at 10 classes) and its gradient from the one value
    CHECK_THROWS_WITH_AS(cross_entropy(logits, bad, Reduction::mean).item(), doctest::Contains("cross_entropy: index"),
                         ValueError);
    CHECK_THROWS_AS(cross_entropy_backward(logits, bad, ones({}, r.device), 0.0, Reduction::mean).to_vector<float>(),
                    ValueError);
    std::vector<float> losses =
        cross_entropy(logits, from_vector<int32_t>({0, 1, 2, 3}, {4}).to(r.device), Reduction::none).to_vector<float>();
    CHECK(std::isfinite(losses[0]));
  }
  // nll_loss gathers from the flattened scores: a target past its row is a fault, not the next row
  Tensor log_probs = log_softmax(uniform({3, 4}, -1, 1, r.device), 1);
  CHECK_THROWS_WITH_AS(nll_loss(log_probs, from_vector<int32_t>({0, 4, 1}, {3}).to(r.device)).to(Device::cpu()),
                       doctest::Contains("gather: index 4 at position 1 is outside [0, 4)"), ValueError);
  Tensor targets = from_vector<int32_t>({0, 3, 1}, {3});
  r.check(nll_loss(log_probs, targets.to(r.device), Reduction::none),
          nll_loss(log_probs.to(Device::cpu()), targets, Reduction::none), {}, "nll_loss after the fault");
}

// Tensor::read_async: what to_vector reads, in each dtype taken, from a tensor and from a strided
// view; several reads in flight, collected out of order and twice, their sources gone first; a
// fault found on the device thrown by get() (or, where reads block, by read_async itself), once.
inline void read_async_cases(const Run& r) {
  for (const Take& k : r.takes) {
    Tensor x = uniform({37, 5}, 0, 100).to(k.dtype).to(r.device);
    std::vector<PendingValues> reads;
    reads.push_back(x.read_async());
    reads.push_back(x.t().slice(0, 1, 4).read_async());  // strided: read through a contiguous copy
    reads.push_back(x.clone().read_async());             // a temporary: the read holds it
    reads.push_back(x.slice(0, 3, 3).read_async());      // nothing to read
    const std::string what = std::string("read_async ") + std::string(dtype_name(k.dtype));
    CHECK_MESSAGE(reads[2].get<double>() == x.to_vector<double>(), what);
    CHECK_MESSAGE(reads[0].get<double>() == x.to_vector<double>(), what);
    CHECK_MESSAGE(reads[0].get<double>() == x.to_vector<double>(), what);
    CHECK_MESSAGE(reads[1].get<float>() == x.t().slice(0, 1, 4).to_vector<float>(), what);
    CHECK_MESSAGE(reads[3].get<float>().empty(), what);
    for (const PendingValues& v : reads) CHECK_MESSAGE(v.ready(), what);
  }
  Tensor x = uniform({5, 3}, 0, 1).to(r.device);
  const Tensor bad = from_vector<int32_t>({0, 5}, {2}).to(r.device);
  CHECK_THROWS_WITH_AS(index_select(x, 0, bad).read_async().get<float>(),
                       doctest::Contains("gather: index 5 at position 1 is outside [0, 5)"), ValueError);
  CHECK(x.read_async().get<float>() == x.to_vector<float>());  // reported, and cleared
  if (r.device.type == DeviceType::cuda) {
    // a read queued behind a fault that a blocking read then reports does not report it again
    const PendingValues behind = index_select(x, 0, bad).read_async();
    CHECK_THROWS_AS(x.to_vector<float>(), ValueError);
    CHECK(behind.get<float>().size() == 6);
  }
  CHECK_THROWS_AS(PendingValues().get<float>(), ValueError);
}

// Backend::ring_push: rows appended in turn at a row the device keeps, wrapping round the ring, in
// each dtype taken; the ring and `next` views into larger tensors (offsets honoured), the ring's
// other rows and next's neighbours untouched.
inline void ring_push_cases(const Run& r) {
  for (const Take& k : r.takes) {
    const std::string what = std::string("ring_push ") + std::string(dtype_name(k.dtype));
    const TensorOptions options = TensorOptions(k.dtype).device(r.device);
    const Tensor whole = full({6, 3}, 7.0, options);  // rows 1 to 4 the ring
    const Tensor ring = whole.slice(0, 1, 5);
    const Tensor nexts = from_vector<int32_t>({40, 1, 41}, {3}).to(r.device);
    const Tensor next = nexts.slice(0, 1, 2);  // starts at row 1
    for (int i = 0; i < 6; ++i) {
      const Tensor pushed = arange(3.0 * i, 3.0 * i + 3).to(k.dtype).to(r.device);
      ring.backend().ring_push(pushed.ref(), ring.ref(), next.ref());
    }
    // pushes 0 to 5 went to rows 1, 2, 3, 0, 1, 2: rows 0 to 3 hold pushes 3, 4, 5, 2
    const std::vector<int> in_row = {3, 4, 5, 2};
    std::vector<double> expected(3, 7.0);
    for (int p : in_row)
      for (int j = 0; j < 3; ++j) expected.push_back(3.0 * p + j);
    expected.insert(expected.end(), 3, 7.0);
    CHECK_MESSAGE(whole.to_vector<double>() == expected, what);
    CHECK_MESSAGE((nexts.to_vector<int32_t>() == std::vector<int32_t>{40, 3, 41}), what);
  }
}

// Anomaly mode on the device: the first op whose output, or whose formula's gradient, is not
// finite is named, with its shapes (the check reads the device).
inline void anomaly_cases(const Run& r) {
  DetectAnomalyGuard anomaly;
  Tensor x = from_vector<float>({1, 4, 9}, {3}).to(r.device).requires_grad_();
  CHECK_THROWS_WITH_AS(log(x - 2.0), doctest::Contains("the forward of 'log' gave 1 NaN or infinite value of 3"),
                       NonFiniteError);
  Tensor z = from_vector<float>({0, 1, 4}, {3}).to(r.device).requires_grad_();
  Tensor s = sqrt(z).sum();
  CHECK_THROWS_WITH_AS(s.backward(), doctest::Contains("the backward of 'sqrt' gave 1 NaN or infinite value of 3"),
                       NonFiniteError);
  Tensor w = from_vector<float>({1, 2, 3}, {3}).to(r.device).requires_grad_();
  (w * w).sum().backward();
  r.check(w.grad(), from_vector<float>({2, 4, 6}, {3}), {}, "a finite backward under anomaly mode");
}

}  // namespace kiln::test
