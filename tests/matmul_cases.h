// The cases of test_backend_ops's matmul rows: random shapes (sizes 1, primes, non-multiples of
// every tile), transposed and strided operands passed as views, batched and broadcast batches,
// the bias and ReLU epilogue; the MNIST MLP's products; large products (a backend's big-tile
// kernels) with an infinity; MLP layers whose products split k; and the fused epilogue's
// gradients through autograd. The row's tolerance is per term: atol grows with sqrt(k), the
// spread of a sum of k products of inputs in [-1, 1).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "tests/backend_cases.h"
#include "tests/backend_ops.h"

namespace kiln::test {

// A product m x n x k.
struct Mnk {
  int64_t m, n, k;
};

inline std::string mnk(int64_t m, int64_t n, int64_t k) {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

// Random products in every layout (Operand: contiguous, transposed, a column slice), plain 2-D
// (also with a bias and ReLU), batched, B broadcast over the batch, A broadcast (a size-1 batch
// axis); then A^T B^T with a strided B, and the MNIST MLP's products and their gradients'.
inline void matmul_cases(const Run& r) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t m = pick(rng), n = pick(rng), k = pick(rng);
    Shape batch_a, batch_b;
    switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
      case 0: break;
      case 1: batch_a = {3}, batch_b = {3}; break;
      case 2: batch_a = {2, 3}; break;
      default: batch_a = {1}, batch_b = {4}; break;
    }
    for (const Take& t : r.takes) {
      std::string how = mnk(m, n, k) + " " + batch_a.str() + batch_b.str() + " " + std::string(dtype_name(t.dtype));
      Operand a = operand(rng, batch_a, m, k, t.dtype, how), b = operand(rng, batch_b, k, n, t.dtype, how);
      const Tol tol = t.tol.atol_times(std::sqrt(static_cast<double>(k)) / 3);  // the spread of the sum
      r.check(matmul(a.on(r.device), b.on(r.device)), matmul(a.cpu(), b.cpu()), tol, "matmul " + how);
      if (batch_a.empty() && batch_b.empty()) {
        Tensor bias = uniform({n}, -1, 1, t.dtype);
        r.check(matmul(a.on(r.device), b.on(r.device), bias.to(r.device), Activation::relu),
                matmul(a.cpu(), b.cpu(), bias, Activation::relu), tol, "matmul + bias + relu " + how);
      }
    }
  }
  // the transposes and the slice happen on each device: the kernel gets trans flags and a row
  // stride, not a contiguous copy
  std::mt19937 views(12);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t m = pick(views), n = pick(views), k = pick(views);
    for (const Take& t : r.takes) {
      Tensor a = uniform({k, m}, -1, 1, t.dtype), b = uniform({n, k + 5}, -1, 1, t.dtype);
      Tensor da = a.to(r.device), db = b.to(r.device);
      r.check(matmul(da.t(), db.slice(1, 0, k).t()), matmul(a.t(), b.slice(1, 0, k).t()),
              t.tol.atol_times(std::sqrt(static_cast<double>(k))), "A^T B^T with a strided B " + mnk(m, n, k));
    }
  }
  // the MNIST MLP's products and their gradients' (784 -> 128 -> 10 at batch 64), each layout
  for (Mnk s : {Mnk{64, 128, 784}, Mnk{64, 10, 128}, Mnk{784, 128, 64}, Mnk{128, 10, 64}, Mnk{64, 784, 128}})
    for (const Take& t : r.takes) {
      Tensor a = uniform({s.m, s.k}, -1, 1, t.dtype), b = uniform({s.k, s.n}, -1, 1, t.dtype);
      Tensor at = uniform({s.k, s.m}, -1, 1, t.dtype), bt = uniform({s.n, s.k}, -1, 1, t.dtype);
      const Tol tol = t.tol.atol_times(std::sqrt(static_cast<double>(s.k)));
      const std::string what = "MNIST MLP " + mnk(s.m, s.n, s.k) + " " + std::string(dtype_name(t.dtype));
      r.check(matmul(a.to(r.device), b.to(r.device)), matmul(a, b), tol, what);
      r.check(matmul(at.to(r.device).t(), b.to(r.device)), matmul(at.t(), b), tol, what + " A^T");
      r.check(matmul(a.to(r.device), bt.to(r.device).t()), matmul(a, bt.t()), tol, what + " B^T");
    }
}

// Products with enough 128 x 128 tiles for a backend's large kernels (CUDA: 12 for f32 with
// k >= 256), B^T, and an infinity in A: its row is inf, as in f32, never NaN.
inline void matmul_large_cases(const Run& r) {
  for (const Take& t : r.takes) {
    const std::string dtype(dtype_name(t.dtype));
    const Tol tol = t.tol.atol_times(std::sqrt(300.0));
    Tensor a = uniform({768, 300}, -1, 1, t.dtype), b = uniform({300, 768}, -1, 1, t.dtype);
    Tensor da = a.to(r.device), db = b.to(r.device);
    r.check(matmul(da, db), matmul(a, b), tol, "768x768x300 " + dtype);
    r.check(matmul(da, db.t().contiguous().t()), matmul(a, b), tol, "768x768x300 B^T " + dtype);
    Tensor ai = a.clone();
    ai.slice(0, 5, 6).slice(1, 7, 8).fill_(std::numeric_limits<double>::infinity());
    Tensor bp = abs(b) + 0.5;
    r.check(matmul(ai.to(r.device), bp.to(r.device)), matmul(ai, bp), tol, "768x768x300 with an inf " + dtype);
  }
}

// y = x W^T as layers/linear forms it, and the gradients' products autograd forms (grad_x = g W,
// grad_{W^T} = x^T g: A transposed): shapes whose products split k (CUDA's 09_split_k: fc1 of the
// MNIST CNN, 64 x 9216 -> 128), a batch of 1, one output, odd sizes.
inline void matmul_layer_cases(const Run& r) {
  struct Layer { int64_t batch, in, out; };
  for (Layer l : {Layer{64, 9216, 128}, Layer{64, 784, 128}, Layer{1, 2048, 128}, Layer{64, 4096, 1}, Layer{5, 3000, 7}})
    for (const Take& t : r.takes) {
      Tensor x = uniform({l.batch, l.in}, -1, 1, t.dtype), w = uniform({l.out, l.in}, -1, 1, t.dtype);
      Tensor g = uniform({l.batch, l.out}, -1, 1, t.dtype);
      Tensor dx = x.to(r.device), dw = w.to(r.device), dg = g.to(r.device);
      const std::string what = std::to_string(l.batch) + " x " + std::to_string(l.in) + " -> " +
                               std::to_string(l.out) + " " + std::string(dtype_name(t.dtype));
      auto tol = [&](int64_t k) { return t.tol.atol_times(std::sqrt(static_cast<double>(k))); };
      r.check(matmul(dx, dw.t()), matmul(x, w.t()), tol(l.in), "forward " + what);
      r.check(matmul(dg, dw), matmul(g, w), tol(l.out), "grad_x " + what);
      r.check(matmul(dx.t(), dg), matmul(x.t(), g), tol(l.batch), "grad_W^T " + what);
    }
}

// matmul with a fused bias and ReLU, and the gradients of A, W and the bias through autograd, on
// each of `shapes`. A, W and the bias are quarters (exact products and sums), so that both sides
// take the same ReLU mask: an output within rounding of 0 could take another and move a
// gradient by a whole term.
inline void matmul_bias_relu_cases(const Run& r, const std::vector<Mnk>& shapes) {
  for (const Mnk& c : shapes)
    for (const Take& t : r.takes) {
      Tensor a = quarters({c.m, c.k}, t.dtype), w = quarters({c.n, c.k}, t.dtype);
      Tensor b = quarters({c.n}, t.dtype), g = uniform({c.m, c.n}, -1, 1, t.dtype);
      const std::string what = mnk(c.m, c.n, c.k) + " " + std::string(dtype_name(t.dtype));
      Tensor out[2];
      std::vector<Tensor> grads[2];
      for (int side = 0; side < 2; ++side) {
        const Device on = side ? r.device : Device::cpu();
        Tensor ad = a.detach().to(on).requires_grad_(), wd = w.detach().to(on).requires_grad_(), bd = b.detach().to(on).requires_grad_();
        out[side] = matmul(ad, wd.t(), bd, Activation::relu);
        out[side].backward(g.to(on));
        grads[side] = {ad.grad(), wd.grad(), bd.grad()};
      }
      auto tol = [&](int64_t k) { return t.tol.atol_times(std::sqrt(static_cast<double>(k))); };
      r.check(out[1], out[0], tol(c.k), "matmul + bias + relu " + what);
      r.check(grads[1][0], grads[0][0], tol(c.n), "grad a " + what);
      r.check(grads[1][1], grads[0][1], tol(c.m), "grad w " + what);
      r.check(grads[1][2], grads[0][2], tol(c.m), "grad b " + what);
    }
}

}  // namespace kiln::test
