// matmul: 1-D, 2-D and batched products (torch.matmul's rules), and the 2-D product with a fused
// bias and activation (a Linear layer in one kernel), each with its gradient.
#include "kiln/autograd/autocast.h"
#include "kiln/autograd/ops/common.h"

namespace kiln {

namespace {

// How the kernel reads one operand of a (batched) matmul: the last two axes are a matrix read
// row-major (or, when `trans`, column-major, which is a transposed view); the batch axes must
// collapse into one stride. Operands that fit neither are copied to contiguous first.
struct Operand {
  Tensor t;
  bool trans = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

Operand as_operand(const Tensor& x, const Shape& batch) {
  Shape full = batch;
  full.push_back(x.size(-2));
  full.push_back(x.size(-1));
  TensorRef r = broadcast_ref(x, full);
  size_t rank = full.size();
  int64_t rows = full[rank - 2], cols = full[rank - 1];
  int64_t rs = r.strides[rank - 2], cs = r.strides[rank - 1];
  Operand op{x, false, 0, 0};
  bool matrix_ok = false;
  if (cs == 1 || cols == 1) {
    op.ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
    matrix_ok = op.ld >= cols;
  }
  if (!matrix_ok && (rs == 1 || rows == 1)) {
    op.trans = true;
    op.ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
    matrix_ok = op.ld >= rows;
  }
  // One stride must step through every batch index: true when all batch strides are 0
  // (a broadcast matrix) or they nest like a contiguous layout.
  bool batch_ok = true;
  int64_t step = -1;
  int64_t expected = 0;
  for (size_t i = rank - 2; i-- > 0;) {
    if (full[i] == 1) continue;
    if (step < 0) {
      step = r.strides[i];
      expected = step * full[i];
    } else {
      batch_ok = batch_ok && r.strides[i] == (step == 0 ? 0 : expected);
      expected *= full[i];
    }
  }
  if (!matrix_ok || !batch_ok) {
    Tensor c = expand(x.detach(), full).contiguous();
    return {c, false, cols, batch.numel() > 1 ? rows * cols : 0};
  }
  op.batch_stride = step < 0 ? 0 : step;
  return op;
}

// The product of a and b (rank >= 2, leading dimensions broadcast) through the backend, the
// epilogue applied to each element as it is stored; no autograd record. Both matmul ops call it.
Tensor matmul_kernel(const Tensor& a, const Tensor& b, const Epilogue& epilogue) {
  KILN_CHECK(a.dtype() == b.dtype(), DTypeError, "matmul: operands of dtypes ", a.dtype(), " and ",
             b.dtype());
  detail::check_floating("matmul", a);
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  KILN_CHECK(b.size(-2) == k, ShapeError, "matmul: shapes ", a.shape(), " and ", b.shape(),
             " do not multiply (", k, " columns against ", b.size(-2), " rows)");
  Shape batch_a(std::vector<int64_t>(a.shape().begin(), a.shape().end() - 2));
  Shape batch_b(std::vector<int64_t>(b.shape().begin(), b.shape().end() - 2));
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");

  Operand oa = as_operand(a, batch), ob = as_operand(b, batch);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor y = empty_as(out_shape, a);
  MatmulParams p;
  p.batch = batch.numel();
  p.m = m, p.n = n, p.k = k;
  p.trans_a = oa.trans, p.trans_b = ob.trans;
  p.lda = oa.ld, p.ldb = ob.ld;
  p.batch_stride_a = oa.batch_stride, p.batch_stride_b = ob.batch_stride;
  a.backend().matmul(oa.t.ref(), ob.t.ref(), y.ref(), p, epilogue);
  return y;
}

// Whether x's last two axes are a transposed view of row-major memory (a Linear layer's
// weight.t()). Its gradient is then computed transposed, (other product)^T, so that it comes out
// in x's own memory order: the transpose's backward hands the weight a contiguous gradient to keep
// as it is, where the plain product would give it a strided one to copy.
bool transposed_view(const Tensor& x) {
  if (x.dim() < 2 || x.size(-1) == 1 || x.size(-2) == 1) return false;
  const Strides& s = x.strides();
  return s[s.size() - 2] == 1 && s[s.size() - 1] >= x.size(-2);
}

// da = g b^T and db = a^T g, each in the memory order its operand had (`transposed`).
Tensor grad_a(const Tensor& g, const Tensor& b, bool transposed) {
  return transposed ? transpose(matmul(b, transpose(g, -1, -2)), -1, -2) : matmul(g, transpose(b, -1, -2));
}
Tensor grad_b(const Tensor& g, const Tensor& a, bool transposed) {
  return transposed ? transpose(matmul(transpose(g, -1, -2), a), -1, -2) : matmul(transpose(a, -1, -2), g);
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast::lower(a_in, "matmul"), b = autocast::lower(b_in, "matmul");
  detail::check_same_device("matmul", a, b);
  KILN_CHECK(a.dim() >= 1 && b.dim() >= 1, ShapeError, "matmul: operands of shapes ", a.shape(),
             " and ", b.shape(), "; scalars cannot be multiplied with matmul, use mul");
  // Vectors become matrices and the added axis is dropped from the result, as in torch.matmul.
  if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b), b.dim() == 1 ? -1 : -2);
  if (b.dim() == 1) return squeeze(matmul(a, unsqueeze(b, 1)), -1);
  Tensor y = matmul_kernel(a, b, Epilogue{});
  if (autograd::is_recording({a, b})) {
    // y = a b: da = g b^T, db = a^T g, each summed over the batch axes its operand was broadcast on
    Saves saved;
    auto gradient = [a = saved(for_grad_of(b, a)), b = saved(for_grad_of(a, b)), a_shape = a.shape(),
                     b_shape = b.shape(), a_t = transposed_view(a),
                     b_t = transposed_view(b)](const Tensor& g, const Needed& need) -> Grads {
      return {need[0] ? sum_to(grad_a(g, b, a_t), a_shape) : Tensor(),
              need[1] ? sum_to(grad_b(g, a, b_t), b_shape) : Tensor()};
    };
    autograd::record(y, "matmul", {a, b}, gradient, saved);
  }
  return y;
}

Tensor matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& bias_in, Activation activation) {
  const Tensor a = autocast::lower(a_in, "matmul"), b = autocast::lower(b_in, "matmul"),
               bias = autocast::lower(bias_in, "matmul");
  detail::check_same_device("matmul", a, b);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, "matmul with an epilogue: operands must be 2-D, got ",
             a.shape(), " and ", b.shape());
  Tensor bc;
  if (bias.defined()) {
    detail::check_same_device("matmul", a, bias);
    const int64_t n = b.size(1);
    KILN_CHECK(bias.shape() == Shape{n} && bias.dtype() == a.dtype(), ShapeError, "matmul: bias ", bias.shape(),
               " ", bias.dtype(), " for ", n, " output columns (expected [", n, "] ", a.dtype(), ")");
    bc = bias.contiguous();
  }
  Tensor y = matmul_kernel(a, b, Epilogue{bc.defined() ? bc.ref() : TensorRef{}, activation});
  if (autograd::is_recording({a, b, bias})) {
    // the gradient before the activation, then matmul's and the bias's; only the activation reads y
    Saves saved;
    auto gradient = [a = saved(for_grad_of(b, a)), b = saved(for_grad_of(a, b)), has_bias = bias.defined(),
                     activation, y = saved(activation == Activation::none ? Tensor() : y), a_t = transposed_view(a),
                     b_t = transposed_view(b)](const Tensor& g, const Needed& need) -> Grads {
      const Tensor gz = detail::before_activation(activation, y, g, need);
      return {need[0] ? grad_a(gz, b, a_t) : Tensor(), need[1] ? grad_b(gz, a, b_t) : Tensor(),
              has_bias && need[2] ? sum(gz, {0}) : Tensor()};
    };
    autograd::record(y, "matmul_epilogue", {a, b, bias}, gradient, saved);
    detail::mark_relu_output(y, activation == Activation::relu);
  }
  return y;
}

}  // namespace kiln
