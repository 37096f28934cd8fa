// Mixed precision, shaped like PyTorch's autocast: while an AutocastGuard lives on a thread, the
// ops it runs cast their floating inputs by a fixed rule per op, so that a model written for f32
// trains with bf16 products and f32 everything that needs f32's precision, without a change to
// the model:
//
//   bf16 (the products, where tensor cores pay): matmul, matmul with an epilogue (a Linear
//     layer), conv2d. Their f32 inputs (weights, bias, activations) are cast to bf16 and the
//     result is bf16; the tensors they save for backward are the bf16 ones.
//   f32 (sums, exponentials and statistics, where bf16's 8 bits of mantissa would lose the
//     answer): softmax, log_softmax, cross_entropy (and cross_entropy_counting), nll_loss, mse_loss, sum, mean, batch_norm,
//     exp, log, pow. Their bf16 inputs are cast to f32 (cross_entropy reads bf16 logits as they
//     are, computing in f32: the same values, without the cast's pass).
//   promote: the binary elementwise ops (add, sub, mul, div, maximum, minimum, pow, the
//     comparisons) given one bf16 and one f32 operand cast the bf16 one to f32.
//   everything else (relu and the other activations, dropout, pooling, views) runs in its
//     input's dtype: a bf16 activation stays bf16.
//
// The casts are ordinary to_dtype ops, recorded by autograd: a parameter stays f32 (the master
// weight the optimizer updates in f32), its bf16 copy is made at each forward, and the gradient
// comes back through the cast as f32. backward() runs with autocast off: every gradient formula
// computes in the dtypes its forward saw. Only f32 is lowered: f64 (gradcheck) passes untouched.
// CPU and CUDA run bf16 (the CPU as the reference: f32 arithmetic, rounded, kernels/cpu/widen.cpp);
// the Vulkan backend has no bf16 kernels, and an autocast op on a Vulkan tensor says so.
//
//   {
//     kiln::AutocastGuard autocast(kiln::DType::bf16);
//     Tensor loss = cross_entropy(model->forward(x), y);  // bf16 products, f32 loss
//   }
//   loss.backward();  // f32 gradients for the f32 parameters
#pragma once

#include <utility>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/tensor.h"

namespace kiln {

namespace autograd {

// Autocast is on (and in which dtype) on this thread.
bool is_autocast_enabled();
DType autocast_dtype();

// Turns autocast on in `dtype` (bf16, the only lower dtype kiln has) for its lifetime, or off
// when `enabled` is false (a region inside an autocast one that must run in f32); restores the
// previous state on destruction. Guards nest.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = DType::bf16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

  // Casts these tensors (a model's parameters) to the autocast dtype now, all of them in one
  // launch on CUDA instead of one cast each as the ops reach them; while the guard lives, a
  // product given one of them takes its cast (the same autograd node: the gradient still comes
  // back as f32). A tensor written in place since (its version moved) is cast again by the op,
  // never served stale. Does nothing when the guard is off.
  //
  //   AutocastGuard autocast(DType::bf16);
  //   autocast.cast_ahead(model->parameters());
  //   Tensor loss = cross_entropy(model->forward(x), y);
  void cast_ahead(const std::vector<Tensor>& tensors);

  struct Cast {
    Tensor source, cast;
    uint64_t version;  // the source's when cast
  };

 private:
  bool enabled_;
  bool previous_enabled_;
  DType previous_dtype_;
  AutocastGuard* outer_;     // the guard this one nests in, or null
  std::vector<Cast> casts_;  // cast_ahead's
  friend Tensor autocast_cached(const Tensor& x);
};

// The cast of x that a live guard made ahead (AutocastGuard::cast_ahead), or an undefined tensor.
Tensor autocast_cached(const Tensor& x);

}  // namespace autograd

using autograd::AutocastGuard;

// The rules above, as the ops apply them to their inputs (each returns its input untouched when
// autocast is off or the rule does not apply). `op` names the op in errors.
namespace autocast {
// A product's input: f32 -> the autocast dtype. Undefined tensors (an absent bias) pass.
Tensor lower(const Tensor& x, const char* op);
// An input that needs f32: bf16 -> f32.
Tensor widen(const Tensor& x);
// Two operands of a binary op: bf16 with f32 -> both f32.
std::pair<Tensor, Tensor> promote(const Tensor& a, const Tensor& b);
}  // namespace autocast

}  // namespace kiln
