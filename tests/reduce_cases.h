// The cases of test_backend_ops's reduction rows: sum, mean, max, min, argmax and argmin over any
// axes (NaN, ties, empty axes, one long row, more rows or columns than a launch holds), softmax
// and log_softmax over any axis, cross-entropy and its gradients (special values: -inf, NaN,
// +inf, huge logits), and index_select with its gradient and one_hot.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/backend_cases.h"
#include "tests/backend_ops.h"

namespace kiln::test {

// The reductions on `trials` random shapes over a random subset of axes (none: all of them), f32
// of whole numbers (ties, for the first-index rule of argmax and argmin); then NaNs (max and min
// return NaN, argmax and argmin its first index), one long row, more rows than a launch's
// workgroups (65535) and more column groups, and empty axes (sum 0, mean NaN, max refused).
inline void reduce_cases(const Run& r, int trials) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < trials; ++trial) {
    const Shape s = random_shape(rng);
    std::vector<int64_t> axes;
    for (int64_t a = 0; a < s.rank(); ++a)
      if (std::uniform_int_distribution<int>(0, 1)(rng)) axes.push_back(a);
    const bool keepdim = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    const int64_t axis = std::uniform_int_distribution<int64_t>(0, s.rank() - 1)(rng);
    for (const Take& k : r.takes) {
      const DType t = k.dtype;
      Tensor cpu = (uniform(s, -50, 50) * (t == DType::i32 ? 1.0 : 0.1)).to(t);
      if (t == DType::f32) cpu = (cpu * 4.0).to(DType::i32).to(DType::f32);
      Tensor dev = cpu.to(r.device);
      const std::string what = s.str() + " " + std::string(dtype_name(t)) + (keepdim ? " keepdim" : "");
      r.check(sum(dev, axes, keepdim), sum(cpu, axes, keepdim), k.tol, "sum " + what);
      if (t != DType::i32) r.check(mean(dev, axes, keepdim), mean(cpu, axes, keepdim), k.tol, "mean " + what);
      r.check(max(dev, axes, keepdim), max(cpu, axes, keepdim), {}, "max " + what);
      r.check(min(dev, axes, keepdim), min(cpu, axes, keepdim), {}, "min " + what);
      r.check(argmax(dev, axis, keepdim), argmax(cpu, axis, keepdim), {}, "argmax " + what);
      r.check(argmin(dev, axis, keepdim), argmin(cpu, axis, keepdim), {}, "argmin " + what);
    }
  }
  const double nan = NAN;
  for (DType t : r.floats()) {
    const std::string dtype(dtype_name(t));
    Tensor with_nan = from_vector<double>({1, nan, 3, nan, 2, 5, nan, 1, nan}, {3, 3}).to(t);
    Tensor dev = with_nan.to(r.device);
    for (int64_t axis : {0, 1}) {
      r.check(max(dev, {axis}), max(with_nan, {axis}), {}, "max with NaN " + dtype);
      r.check(min(dev, {axis}), min(with_nan, {axis}), {}, "min with NaN " + dtype);
      r.check(argmax(dev, axis), argmax(with_nan, axis), {}, "argmax with NaN (the first) " + dtype);
      r.check(argmin(dev, axis), argmin(with_nan, axis), {}, "argmin with NaN (the first) " + dtype);
    }
    // one long row: a workgroup (block) per row; the sum's tolerance per 1000 of its 3M terms
    Tensor big = uniform({3000000}, -1, 1, t), big_dev = big.to(r.device);
    r.check(sum(big_dev), sum(big), r.tol(t).atol_times(1000), "sum of 3M " + dtype);
    r.check(max(big_dev), max(big), {}, "max of 3M " + dtype);
    // more rows than a launch's workgroups (65535): the row version loops
    Tensor tall = uniform({70000, 17}, -1, 1, t), tall_dev = tall.to(r.device);
    r.check(sum(tall_dev, {1}), sum(tall, {1}), r.tol(t), "sum of the rows of [70000, 17] " + dtype);
    r.check(argmax(tall_dev, 1), argmax(tall, 1), {}, "argmax of the rows of [70000, 17] " + dtype);
    // more groups of 32 columns than a launch's workgroups (400 x 219): the column version loops
    Tensor wide = uniform({400, 2, 7000}, -1, 1, t), wide_dev = wide.to(r.device);
    r.check(sum(wide_dev, {1}), sum(wide, {1}), r.tol(t), "sum over the middle of [400, 2, 7000] " + dtype);
    r.check(argmin(wide_dev, 1), argmin(wide, 1), {}, "argmin over the middle of [400, 2, 7000] " + dtype);
  }
  for (const Take& k : r.takes) {
    Tensor empty_axis = zeros({3, 0}, TensorOptions(k.dtype).device(r.device));
    r.check(sum(empty_axis, {1}), zeros({3}, TensorOptions(k.dtype)), {}, "sum of an empty axis");
    if (k.dtype != DType::i32) CHECK(std::isnan(mean(empty_axis, {1}).to_vector<double>()[0]));
    CHECK_THROWS_AS((void)max(empty_axis, {1}), ValueError);
  }
}

// add_correct: the rows whose argmax is their target, added to a count on the device, against
// the CPU's, in every dtype taken: random rows with ties (small integer values: the first maximum
// wins), NaN rows (the first NaN wins), targets outside [0, C) (never a match), batches from
// empty to past a block's rows, and the count accumulating over calls.
inline void add_correct_cases(const Run& r) {
  std::mt19937 rng(15);
  auto integers = [&](int32_t low, int32_t high, const Shape& shape) {  // uniform in [low, high]
    std::vector<int32_t> v(static_cast<size_t>(shape.numel()));
    for (auto& e : v) e = std::uniform_int_distribution<int32_t>(low, high)(rng);
    return from_vector<int32_t>(v, shape);
  };
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t classes = random_length(rng) % 1100 + 1;
    const int64_t rows = std::uniform_int_distribution<int64_t>(0, 700)(rng);
    for (const Take& k : r.takes) {
      Tensor cpu = integers(0, trial % 2 ? 3 : 1000, {rows, classes}).to(k.dtype);
      if (is_floating(k.dtype) && rows > 2) {  // a NaN in row 1, two in row 2
        cpu.slice(0, 1, 2).slice(1, classes / 2, classes / 2 + 1).fill_(NAN);
        cpu.slice(0, 2, 3).fill_(NAN);
      }
      Tensor targets = integers(-1, static_cast<int32_t>(classes), {rows});
      Tensor want = zeros({}, TensorOptions(DType::i32)), got = zeros({}, TensorOptions(DType::i32).device(r.device));
      for (int call = 0; call < 2; ++call) {
        add_correct(want, cpu, targets);
        add_correct(got, cpu.to(r.device), targets.to(r.device));
      }
      const std::string what = "add_correct [" + std::to_string(rows) + ", " + std::to_string(classes) + "] " +
                               std::string(dtype_name(k.dtype));
      r.check(got, want, {0, 0}, what);
      if (rows > 0)  // the CPU's, as argmax, eq and sum
        CHECK_MESSAGE(want.item() == 2 * sum(eq(argmax(cpu, 1), targets)).item(), what);
    }
  }
}

// cross_entropy_counting: the loss cross_entropy gives on the same device, bit for bit, and the
// count add_correct adds, in f32, f64 and bf16 logits: batches the loss's one-block kernel takes
// (CUDA: the count in it) and batches past it (rows x classes over 65,536, or classes over 1,024),
// ties, NaN rows, both reductions, the count accumulating, and the gradient cross_entropy's.
inline void cross_entropy_counting_cases(const Run& r) {
  std::mt19937 rng(16);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{64, 10}, {1, 1}, {37, 3}, {200, 33}, {100, 1000},
                                                           {9000, 10}, {70, 1500}, {0, 10}};
  for (const auto& [rows, classes] : shapes) {
    for (const DType dtype : r.floats()) {
      std::vector<int32_t> levels(static_cast<size_t>(rows * classes)), labels(static_cast<size_t>(rows));
      for (auto& e : levels) e = std::uniform_int_distribution<int32_t>(0, classes > 20 ? 1000 : 3)(rng);
      for (auto& e : labels) e = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(classes) - 1)(rng);
      Tensor logits = from_vector<int32_t>(levels, {rows, classes}).to(dtype) * 0.01;
      if (rows > 2) logits.slice(0, 1, 2).slice(1, classes / 2, classes / 2 + 1).fill_(NAN);
      logits = logits.to(r.device).requires_grad_();
      const Tensor targets = from_vector<int32_t>(labels, {rows}).to(r.device);
      const std::string what = "cross_entropy_counting [" + std::to_string(rows) + ", " + std::to_string(classes) +
                               "] " + std::string(dtype_name(dtype));
      for (const Reduction reduction : {Reduction::mean, Reduction::sum}) {
        Tensor counted = zeros({}, TensorOptions(DType::i32).device(r.device));
        Tensor added = zeros({}, TensorOptions(DType::i32).device(r.device));
        Tensor loss;
        for (int call = 0; call < 2; ++call) {
          loss = cross_entropy_counting(logits, targets, counted, reduction);
          add_correct(added, logits, targets);
        }
        const Tensor plain = cross_entropy(logits, targets, reduction);
        CHECK_MESSAGE(counted.item() == added.item(), what);
        CHECK_MESSAGE(loss.dtype() == plain.dtype(), what);
        const double a = loss.item(), b = plain.item();
        CHECK_MESSAGE(((std::isnan(a) && std::isnan(b)) || a == b), what << ": " << a << " against " << b);
        if (rows > 3) {
          auto gradient = [&](const Tensor& l) {
            logits.zero_grad();
            l.backward();
            return logits.grad();
          };
          const Tensor g = gradient(loss), want = gradient(plain);
          r.check(g, want, {0, 0}, what + " gradient");
        }
      }
    }
  }
  const Tensor x = uniform({4, 5}, 0, 1).to(r.device);
  const Tensor t = from_vector<int32_t>({0, 1, 2, 3}, {4}).to(r.device);
  CHECK_THROWS_AS((void)cross_entropy_counting(x, t, zeros({}, r.device)), ShapeError);  // an f32 count
  CHECK_THROWS_AS((void)cross_entropy_counting(x, t, zeros({1}, TensorOptions(DType::i32).device(r.device))),
                  ShapeError);
  CHECK_THROWS_AS((void)cross_entropy_counting(x, t, zeros({}, TensorOptions(DType::i32)), Reduction::none),
                  ValueError);
}

// softmax and log_softmax over any axis (negative ones too), of any length (random_length: the
// thresholds of the CUDA versions), at scales up to logits of 1e3, contiguous and not; then a
// long axis that is not the last with few columns, and more column groups than a launch holds.
// The row's tolerance is the base: softmax's atol a tenth of it, log_softmax's ten times.
inline void softmax_cases(const Run& r) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    Shape s = random_shape(rng, 3);
    const int64_t axis = std::uniform_int_distribution<int64_t>(0, s.rank() - 1)(rng);
    s[static_cast<size_t>(axis)] = random_length(rng);
    for (size_t d = 0; s.numel() > 300000 && d < s.size(); ++d)
      if (static_cast<int64_t>(d) != axis) s[d] = 1;
    const int64_t signed_axis = trial % 2 ? axis : axis - s.rank();
    const double scale = random_scale(rng);
    for (const Take& k : r.takes) {
      Tensor cpu = uniform(s, -scale, scale, k.dtype);
      Tensor dev = cpu.to(r.device);
      if (s.size() >= 2 && trial % 3 == 0) {  // a non-contiguous input on both sides
        cpu = cpu.transpose(0, -1).contiguous().transpose(0, -1);
        dev = dev.transpose(0, -1).contiguous().transpose(0, -1);
      }
      const std::string what = s.str() + " " + std::string(dtype_name(k.dtype)) + " axis " +
                               std::to_string(signed_axis) + " scale " + std::to_string(scale);
      r.check(softmax(dev, signed_axis), softmax(cpu, signed_axis), k.tol.atol_times(0.1), "softmax " + what);
      r.check(log_softmax(dev, signed_axis), log_softmax(cpu, signed_axis), k.tol.atol_times(10), "log_softmax " + what);
    }
  }
  for (const Take& k : r.takes) {
    const std::string dtype(dtype_name(k.dtype));
    Tensor columns = uniform({2, 7000, 3}, -20, 20, k.dtype);
    r.check(softmax(columns.to(r.device), 1), softmax(columns, 1), k.tol.atol_times(0.1), "softmax [2, 7000, 3] axis 1 " + dtype);
    Tensor wide = uniform({400, 2, 7000}, -3, 3, k.dtype);
    r.check(softmax(wide.to(r.device), 1), softmax(wide, 1), k.tol.atol_times(0.1), "softmax [400, 2, 7000] axis 1 " + dtype);
  }
}

// softmax's special values (softmax_special_rows: -inf, all -inf, NaN, +inf, 1e3, -3e4) along
// rows and columns, and empty axes.
inline void softmax_special_cases(const Run& r) {
  for (int64_t n : {3, 40, 2000})
    for (const Take& k : r.takes) {
      Tensor cpu = softmax_special_rows(n).to(k.dtype);
      Tensor dev = cpu.to(r.device);
      for (int64_t axis : {1, 0}) {
        const std::string what = "special " + cpu.shape().str() + " " + std::string(dtype_name(k.dtype)) + " axis " +
                                 std::to_string(axis);
        r.check(softmax(dev, axis), softmax(cpu, axis), k.tol.atol_times(0.1), "softmax " + what);
        r.check(log_softmax(dev, axis), log_softmax(cpu, axis), k.tol.atol_times(10), "log_softmax " + what);
      }
    }
  for (const Shape& s : {Shape{3, 0}, Shape{0, 5}, Shape{2, 0, 4}})
    for (const Take& k : r.takes) {
      Tensor cpu = zeros(s, TensorOptions(k.dtype));
      for (int64_t axis = 0; axis < s.rank(); ++axis) {
        r.check(softmax(cpu.to(r.device), axis), softmax(cpu, axis), {}, "softmax empty " + s.str());
        r.check(log_softmax(cpu.to(r.device), axis), log_softmax(cpu, axis), {}, "log_softmax empty " + s.str());
      }
    }
}

// cross_entropy (per-sample losses, with and without label smoothing), its mean and sum (one
// kernel on CUDA for a small batch, the losses and a reduce for a large one), their gradients
// through autograd, and cross_entropy_backward with arbitrary per-sample gradients and with the
// one gradient of a mean or sum, on rows of any length (random_length) at scales up to 1e3.
// Tolerances as softmax's: the row's base, the loss's atol ten times (a sum's a thousand: up to
// 300 rows), the backward op's twice. bf16 logits compute in f32: the same bits as the logits
// converted to f32 first, losses and gradients both (the gradient rounded to bf16 once).
inline void cross_entropy_cases(const Run& r) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t classes = random_length(rng);
    int64_t rows = std::uniform_int_distribution<int64_t>(1, 300)(rng);
    rows = std::max<int64_t>(1, std::min<int64_t>(rows, 300000 / classes));
    const double scale = random_scale(rng), smoothing = trial % 2 ? 0.1 : 0.0;
    Tensor targets = random_targets(rng, rows, classes);
    Tensor dev_targets = targets.to(r.device);
    for (const Take& k : r.takes) {
      const std::string what = "cross_entropy [" + std::to_string(rows) + ", " + std::to_string(classes) + "] " +
                               std::string(dtype_name(k.dtype)) + " scale " + std::to_string(scale) + " smoothing " +
                               std::to_string(smoothing);
      const DType wide = compute_dtype(k.dtype);
      Tensor cpu = uniform({rows, classes}, -scale, scale, k.dtype);
      Tensor dev = cpu.to(r.device);
      r.check(cross_entropy(dev, dev_targets, Reduction::none, smoothing),
              cross_entropy(cpu, targets, Reduction::none, smoothing), k.tol.atol_times(10), what);
      for (Reduction reduction : {Reduction::mean, Reduction::sum}) {
        const std::string how = what + (reduction == Reduction::mean ? " mean" : " sum");
        r.check(cross_entropy(dev, dev_targets, reduction, smoothing),
                cross_entropy(cpu, targets, reduction, smoothing), k.tol.atol_times(1000), how);
        Tensor cpu_leaf = cpu.detach().requires_grad_(), dev_leaf = dev.detach().requires_grad_();
        cross_entropy(cpu_leaf, targets, reduction, smoothing).backward();
        cross_entropy(dev_leaf, dev_targets, reduction, smoothing).backward();
        r.check(dev_leaf.grad(), cpu_leaf.grad(), k.tol, how + " autograd");
        Tensor g = full({}, -1.5, TensorOptions(wide));
        Tensor dev_grad = cross_entropy_backward(dev, dev_targets, g.to(r.device), smoothing, reduction);
        r.check(dev_grad, cross_entropy_backward(cpu, targets, g, smoothing, reduction), k.tol.atol_times(2),
                how + " backward");
        if (k.dtype == DType::bf16) {
          AutocastGuard autocast(DType::bf16);  // an f32 loss, as from the logits cast to f32
          r.check(cross_entropy(dev, dev_targets, reduction, smoothing),
                  cross_entropy(dev.to(wide), dev_targets, reduction, smoothing), {0, 0}, how + " as f32");
          r.check(dev_grad, cross_entropy_backward(dev.to(wide), dev_targets, g.to(r.device), smoothing, reduction)
                                .to(DType::bf16), {0, 0}, how + " backward as f32");
        }
      }
      Tensor g = uniform({rows}, -2, 2, wide);
      Tensor dev_grad = cross_entropy_backward(dev, dev_targets, g.to(r.device), smoothing);
      r.check(dev_grad, cross_entropy_backward(cpu, targets, g, smoothing), k.tol.atol_times(2), what + " backward");
      if (k.dtype == DType::bf16) {
        AutocastGuard autocast(DType::bf16);
        r.check(cross_entropy(dev, dev_targets, Reduction::none, smoothing),
                cross_entropy(dev.to(wide), dev_targets, Reduction::none, smoothing), {0, 0}, what + " as f32");
        r.check(dev_grad, cross_entropy_backward(dev.to(wide), dev_targets, g.to(r.device), smoothing).to(DType::bf16),
                {0, 0}, what + " backward as f32");
      }
    }
  }
}

// cross-entropy's special values (cross_entropy_special_rows), at class counts that take each
// kernel (CUDA: 3000 and 20000 the forward's unrolled block version, 20000 the backward's split
// version), with and without smoothing: without, the -inf logit beside row 0's target leaves its
// loss finite, as PyTorch's (the smoothing term, +inf there, must be left out, not times 0).
inline void cross_entropy_special_cases(const Run& r) {
  const Tensor targets = cross_entropy_special_targets();
  for (int64_t classes : {5, 10, 3000, 20000})
    for (const Take& k : r.takes) {
      Tensor cpu = cross_entropy_special_rows(classes).to(k.dtype);
      for (double smoothing : {0.0, 0.1}) {
        const std::string what = "cross_entropy special " + cpu.shape().str() + " " + std::string(dtype_name(k.dtype)) +
                                 " smoothing " + std::to_string(smoothing);
        r.check(cross_entropy(cpu.to(r.device), targets.to(r.device), Reduction::none, smoothing),
                cross_entropy(cpu, targets, Reduction::none, smoothing), k.tol.atol_times(10), what);
        Tensor g = full({6}, 0.5, TensorOptions(compute_dtype(k.dtype)));
        r.check(cross_entropy_backward(cpu.to(r.device), targets.to(r.device), g.to(r.device), smoothing),
                cross_entropy_backward(cpu, targets, g, smoothing), k.tol, what + " backward");
      }
    }
}

// index_select of random indices (distinct, or repeated and more than the axis holds) along any
// axis in every dtype taken; its gradient (index_add) in the floating ones: distinct indices add
// each row once (exact), repeated ones may add in another order (the row's tolerance); one_hot;
// then the loader's case, a batch of 64 drawn from 60000 MNIST images held on the device (30000
// where the backend binds less to one kernel: lavapipe binds at most 128 MiB, 47 MB of u8 but not
// 188 MB of f32).
inline void index_select_cases(const Run& r) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 60; ++trial) {
    const Shape s = random_shape(rng);
    const int64_t axis = std::uniform_int_distribution<int64_t>(0, s.rank() - 1)(rng);
    const int64_t n = s[static_cast<size_t>(axis)];
    const bool distinct = trial % 2 == 0;
    const int64_t m = distinct ? std::uniform_int_distribution<int64_t>(1, n)(rng)
                               : std::uniform_int_distribution<int64_t>(1, 2 * n + 3)(rng);
    Tensor idx = random_indices(rng, m, n, distinct);
    const std::string what = s.str() + " axis " + std::to_string(axis) + " m " + std::to_string(m);
    for (const Take& k : r.takes) {
      Tensor cpu = uniform(s, 0, 100).to(k.dtype);
      r.check(index_select(cpu.to(r.device), axis, idx.to(r.device)), index_select(cpu, axis, idx), {},
              "index_select " + what + " " + std::string(dtype_name(k.dtype)));
    }
    Shape gs = s;
    gs[static_cast<size_t>(axis)] = m;
    for (DType t : r.floats()) {
      Tensor grad = uniform(gs, -1, 1, t);
      r.check(index_select_backward(grad.to(r.device), axis, idx.to(r.device), s),
              index_select_backward(grad, axis, idx, s), distinct ? Tol() : r.tol(t),
              "index_select_backward " + what + " " + std::string(dtype_name(t)));
    }
    Tensor labels = random_indices(rng, m, n, false);
    for (DType t : {DType::f32, DType::i32, DType::u8})
      r.check(one_hot(labels.to(r.device), n, t), one_hot(labels, n, t), {},
              "one_hot " + std::string(dtype_name(t)) + " " + what);
  }
  Tensor images = uniform({60000, 784}, 0, 255);
  for (DType t : {DType::f32, DType::u8}) {
    if (!r.has(t)) continue;
    const int64_t all = 60000, rows = all * 784 * static_cast<int64_t>(dtype_size(t)) <= r.max_binding_bytes ? all : all / 2;
    Tensor held = images.slice(0, 0, rows).to(t);
    Tensor order = random_indices(rng, 64, rows, true);
    r.check(index_select(held.to(r.device), 0, order.to(r.device)), index_select(held, 0, order), {},
            "a batch of 64 of " + std::to_string(rows) + " images " + std::string(dtype_name(t)));
  }
  // The loader gathers inputs and targets together (Backend::gather_many: one launch on CUDA where
  // every row is whole 4-byte words, the rows of 3 u8 or bf16 values one gather each), into the
  // tensors it is handed where they fit.
  for (const Take& k : r.takes) {
    for (int64_t width : {784, 3}) {
      const std::string what = std::string(dtype_name(k.dtype)) + " rows of " + std::to_string(width);
      Tensor inputs = uniform({300, width}, 0, 100).to(k.dtype), targets = random_indices(rng, 300, 10, false);
      const auto options = data::DataLoaderOptions().batch_size(64).seed(4);
      data::DataLoader cpu(inputs, targets, options), dev(inputs.to(r.device), targets.to(r.device), options);
      data::Batch into;
      for (int64_t i = 0; i < cpu.num_batches(); ++i) {
        const data::Batch want = cpu.batch(i), got = dev.batch(i, into);
        r.check(got.inputs, want.inputs, {}, "loader inputs " + what);
        r.check(got.targets, want.targets, {}, "loader targets " + what);
        // the last batch (44 rows) does not fit the tensors of 64: new ones
        if (into.inputs.defined()) {
          const bool fits = into.inputs.size(0) == got.inputs.size(0);
          CHECK(fits == (got.inputs.storage() == into.inputs.storage()));
          CHECK(fits == (got.targets.storage() == into.targets.storage()));
        }
        into = got;
      }
    }
  }
  // an index outside the rows, through gather_many itself: reported at the next read, as gather's
  Tensor x = uniform({5, 4}, 0, 1).to(r.device), y = from_vector<int32_t>({1, 2, 3, 4, 5}, {5}).to(r.device);
  Tensor xo = empty({2, 4}, r.device), yo = empty({2}, TensorOptions(DType::i32).device(r.device));
  auto rows = [](const Tensor& t) {
    TensorRef ref = t.ref();
    const int64_t inner = t.numel() / t.size(0);
    ref.shape = Shape{1, t.size(0), inner};
    ref.strides = Strides{t.numel(), inner, 1};
    return ref;
  };
  const TensorRef from[] = {rows(x), rows(y)}, to[] = {rows(xo), rows(yo)};
  const Tensor bad = from_vector<int32_t>({4, 9}, {2}).to(r.device);
  x.backend().gather_many(from, bad.ref(), to);
  CHECK_THROWS_WITH_AS(yo.to(Device::cpu()), doctest::Contains("gather: index 9 at position 1 is outside [0, 5)"),
                       ValueError);
}

}  // namespace kiln::test
