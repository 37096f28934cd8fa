#!/usr/bin/python3
# Golden values for tests/test_special_values.cpp: what PyTorch gives for NaN, +inf and -inf (and
# ties, zeros and huge finite values) in kiln's ops, forward and backward, written to
# tests/data/special_golden.txt.
#
# Regenerate (from the repository root):  /usr/bin/python3 tests/golden/make_special_golden.py
# Generated with torch 1.13.0a0 (Debian's python3-torch), CPU, float64 throughout.
#
# The format is tests/data/golden.txt's (tests/golden/make_golden.py, tests/golden_file.h), with
# the values nan, inf and -inf spelled so. Roles: in0, in1, ... the inputs (written by hand here,
# not drawn); out the forward output; for ops with a gradient, gout the upstream gradient
# (1, 2, 3, ... in row-major order: every output sends a different amount, so the file shows
# which input receives which) and grad0, grad1, ... the inputs' gradients; anything else a
# case-specific constant (target) or second result (indices, running statistics after the step).
# Comparisons write PyTorch's bools as 0 and 1, as kiln does.
import os

import torch
import torch.nn.functional as F

from make_golden import batch_norm_train, write_case

torch.set_default_dtype(torch.float64)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "special_golden.txt")

nan, inf = float("nan"), float("inf")


def t(values):
    return torch.tensor(values, dtype=torch.float64)


# Rows for max, min, argmax and argmin along the last axis: two NaNs (the first wins argmax),
# a three-way tie, all -inf, ties at +inf beside -inf, a NaN after +inf, a lone finite value.
EXTREME_ROWS = t([[1, nan, 3, nan],
                  [2, 2, 1, 2],
                  [-inf, -inf, -inf, -inf],
                  [inf, 1, inf, -inf],
                  [-inf, 5, inf, nan],
                  [-inf, 0, -inf, inf]])
# The same values with the reduced axis first ([4, 6]): the kernels' path for inner > 1.
EXTREME_COLUMNS = EXTREME_ROWS.t().contiguous()
# [2, 3, 4] for a reduction over axes 0 and 2 (two stages in kiln): slice 0 holds a NaN, slice 1
# two +inf (a tie), slice 2 only -inf.
EXTREME_CUBE = t([[[1, 2, 3, 4], [5, inf, 6, 7], [-inf, -inf, -inf, -inf]],
                  [[0, nan, 9, 9], [inf, 8, 8, -inf], [-inf, -inf, -inf, -inf]]])
# Whole-tensor reductions: ties at the maximum +inf and the minimum -inf; and one NaN among them.
TIES = t([[3, inf, -inf], [inf, 0, -inf]])
ONE_NAN = t([[3, inf, -inf], [inf, nan, -inf]])
# Sums and means: inf - inf is NaN, inf + finite is inf, a NaN wins; near the f32 limit (3.4e38),
# f32 must not overflow on the way (kiln sums in double).
SUM_ROWS = t([[inf, -inf, 1], [inf, 1, 2], [-inf, -inf, 0], [nan, 1, 1], [3e38, 3e38, -3e38]])

# Softmax rows: -inf among finite values (probability 0), all -inf (NaN: 0 / 0), one +inf (NaN:
# inf - inf), two +inf, a NaN, a single finite value among -inf (probability exactly 1), logits
# of +-1000 (no overflow: the max is subtracted first).
SOFTMAX_ROWS = t([[1, -inf, 2, 0.5],
                  [-inf, -inf, -inf, -inf],
                  [inf, 1, 2, 3],
                  [inf, inf, 0, 0],
                  [1, nan, 2, 3],
                  [-inf, 0, -inf, -inf],
                  [1000, 999, -1000, 0]])

# Cross-entropy rows and targets: a -inf logit beside the target (finite loss, no NaN), the
# target at -inf (loss +inf), two -inf logits, all -inf (NaN), a +inf (NaN), a NaN (NaN),
# logits of 1000 (no overflow).
CE_LOGITS = t([[1, -inf, 2, 0.5],
               [1, -inf, 2, 0.5],
               [-inf, -inf, 3, 0],
               [-inf, -inf, -inf, -inf],
               [inf, 1, 2, 3],
               [1, nan, 2, 3],
               [1000, 1001, 999, -1000]])
CE_TARGETS = torch.tensor([0, 1, 2, 0, 1, 2, 1])
# The rows whose loss is finite, for the mean: -inf logits, but none on a target.
CE_FINITE = [0, 2, 6]

# Every activation and unary function sees the same values.
UNARY = t([nan, -inf, inf, -1000, 1000, 0, -1.5, 2])
# Binary operands, pairwise: NaN either side and both, infinities of each sign, zeros, a tie.
BINARY_A = t([nan, 1, nan, inf, inf, -inf, 0, 1, -1, 0, inf, 2, -inf, 2])
BINARY_B = t([1, nan, nan, inf, -inf, -inf, 0, 0, 0, inf, 2, 2, 3, -inf])


def max_pool_input():
    # Plane 0, 2x2 windows with stride 2: one NaN; two NaNs (PyTorch takes the last, in row-major
    # order); all -inf (the first element); NaN before +inf; +inf before NaN; a tie (the first).
    # Plane 1, 3x3 windows, stride 2, padding 1: windows overlap, so the NaN at (1, 3) wins four
    # windows and receives their four gradients; the corner window sees only -inf (its first real
    # element wins: padding never does); a tie at 2 (the first).
    p0 = [[1, nan, 2, nan, -inf, -inf],
          [3, 0, nan, 1, -inf, -inf],
          [nan, inf, inf, 4, 5, 5],
          [0, 1, 2, nan, 5, 1]]
    p1 = [[-inf, -inf, 0, 1, 2, 3],
          [-inf, -inf, 1, nan, 1, 1],
          [0, 1, 2, 1, inf, -inf],
          [2, 2, 2, 2, 2, 2]]
    return t([[p0], [p1]])  # [2, 1, 4, 6]: two samples of one channel, as two planes


def case_max_pool2d_windows():
    indices = {}

    def fn(x):
        y, i = F.max_pool2d(x, 2, stride=2, return_indices=True)
        indices["indices"] = i
        return y

    return [max_pool_input()[0:1]], fn, indices, True


def case_max_pool2d_overlap():
    indices = {}

    def fn(x):
        y, i = F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)
        indices["indices"] = i
        return y

    return [max_pool_input()[1:2]], fn, indices, True


def case_batch_norm_train():
    # Channel 0 holds a NaN, channel 1 a +inf (its variance is NaN), channel 2 is finite.
    x = t([[[1, nan], [2, 3], [1, 2]],
           [[4, 5], [inf, 6], [3, 5]]])  # [2, 3, 2]
    return batch_norm_train(x, t([1.5, 0.5, 2]), t([0.1, -0.2, 0.3]), t([0.5, -1, 2]), t([1, 2, 0.5])) + (True,)


# Each case: name -> function returning (inputs, forward fn, extra named tensors, differentiable).
def no_grad(inputs, fn):
    return lambda: (inputs, fn, {}, False)


def with_grad(inputs, fn, extras=None):
    return lambda: (inputs, fn, extras or {}, True)


CASES = [
    # reductions along one axis, over two, and over everything
    ("max_rows", with_grad([EXTREME_ROWS], lambda x: torch.amax(x, dim=1))),
    ("min_rows", with_grad([EXTREME_ROWS], lambda x: torch.amin(x, dim=1))),
    ("max_columns", with_grad([EXTREME_COLUMNS], lambda x: torch.amax(x, dim=0))),
    ("min_columns", with_grad([EXTREME_COLUMNS], lambda x: torch.amin(x, dim=0))),
    ("max_axes_0_2", with_grad([EXTREME_CUBE], lambda x: torch.amax(x, dim=(0, 2)))),
    ("min_axes_0_2", with_grad([EXTREME_CUBE], lambda x: torch.amin(x, dim=(0, 2)))),
    ("max_all_ties", with_grad([TIES], torch.amax)),
    ("min_all_ties", with_grad([TIES], torch.amin)),
    ("max_all_nan", with_grad([ONE_NAN], torch.amax)),
    ("min_all_nan", with_grad([ONE_NAN], torch.amin)),
    ("argmax_rows", no_grad([EXTREME_ROWS], lambda x: torch.argmax(x, dim=1))),
    ("argmin_rows", no_grad([EXTREME_ROWS], lambda x: torch.argmin(x, dim=1))),
    ("argmax_columns", no_grad([EXTREME_COLUMNS], lambda x: torch.argmax(x, dim=0))),
    ("argmin_columns", no_grad([EXTREME_COLUMNS], lambda x: torch.argmin(x, dim=0))),
    ("argmax_all_ties", no_grad([TIES], torch.argmax)),  # of the flattened tensor
    ("argmin_all_ties", no_grad([TIES], torch.argmin)),
    ("argmax_all_nan", no_grad([ONE_NAN], torch.argmax)),
    ("argmin_all_nan", no_grad([ONE_NAN], torch.argmin)),
    ("sum_rows", with_grad([SUM_ROWS], lambda x: torch.sum(x, dim=1))),
    ("mean_rows", with_grad([SUM_ROWS], lambda x: torch.mean(x, dim=1))),
    ("sum_all", with_grad([SUM_ROWS], torch.sum)),
    ("mean_columns", with_grad([SUM_ROWS], lambda x: torch.mean(x, dim=0))),
    # pooling
    ("max_pool2d_windows", case_max_pool2d_windows),
    ("max_pool2d_overlap", case_max_pool2d_overlap),
    ("avg_pool2d", with_grad([max_pool_input()], lambda x: F.avg_pool2d(x, 2))),
    # softmax and the losses
    ("softmax_rows", with_grad([SOFTMAX_ROWS], lambda x: torch.softmax(x, dim=1))),
    ("softmax_columns", with_grad([SOFTMAX_ROWS.t().contiguous()], lambda x: torch.softmax(x, dim=0))),
    ("log_softmax_rows", with_grad([SOFTMAX_ROWS], lambda x: torch.log_softmax(x, dim=1))),
    ("log_softmax_columns", with_grad([SOFTMAX_ROWS.t().contiguous()], lambda x: torch.log_softmax(x, dim=0))),
    ("cross_entropy", with_grad([CE_LOGITS], lambda x: F.cross_entropy(x, CE_TARGETS, reduction="none"),
                                {"target": CE_TARGETS})),
    ("cross_entropy_smoothed",
     with_grad([CE_LOGITS], lambda x: F.cross_entropy(x, CE_TARGETS, reduction="none", label_smoothing=0.1),
               {"target": CE_TARGETS})),
    ("cross_entropy_mean",
     with_grad([CE_LOGITS[CE_FINITE]], lambda x: F.cross_entropy(x, CE_TARGETS[CE_FINITE], reduction="mean"),
               {"target": CE_TARGETS[CE_FINITE]})),
    ("nll_loss", with_grad([torch.log_softmax(CE_LOGITS, dim=1)],
                           lambda x: F.nll_loss(x, CE_TARGETS, reduction="none"), {"target": CE_TARGETS})),
    ("mse_loss", with_grad([BINARY_A, BINARY_B], lambda a, b: F.mse_loss(a, b, reduction="none"))),
    # activations and unary functions
    ("relu", with_grad([UNARY], F.relu)),
    ("leaky_relu", with_grad([UNARY], lambda x: F.leaky_relu(x, 0.1))),
    ("gelu", with_grad([UNARY], F.gelu)),
    ("tanh", with_grad([UNARY], torch.tanh)),
    ("sigmoid", with_grad([UNARY], torch.sigmoid)),
    ("exp", with_grad([UNARY], torch.exp)),
    ("log", with_grad([UNARY], torch.log)),
    ("sqrt", with_grad([UNARY], torch.sqrt)),
    ("abs", with_grad([UNARY], torch.abs)),
    ("neg", with_grad([UNARY], torch.neg)),
    ("pow_2", with_grad([UNARY], lambda x: torch.pow(x, 2.0))),
    ("pow_2_5", with_grad([UNARY], lambda x: torch.pow(x, 2.5))),
    ("pow_minus_1", with_grad([UNARY], lambda x: torch.pow(x, -1.0))),
    ("pow_0", with_grad([UNARY], lambda x: torch.pow(x, 0.0))),
    ("add_scalar", with_grad([UNARY], lambda x: x + inf)),
    ("mul_scalar_0", with_grad([UNARY], lambda x: x * 0.0)),
    ("sign", no_grad([UNARY], torch.sign)),
    ("isfinite", no_grad([UNARY], lambda x: torch.isfinite(x).double())),
    # binary ops
    ("add", with_grad([BINARY_A, BINARY_B], torch.add)),
    ("sub", with_grad([BINARY_A, BINARY_B], torch.sub)),
    ("mul", with_grad([BINARY_A, BINARY_B], torch.mul)),
    ("div", with_grad([BINARY_A, BINARY_B], torch.div)),
    ("pow", with_grad([BINARY_A, BINARY_B], torch.pow)),
    ("maximum", with_grad([BINARY_A, BINARY_B], torch.maximum)),
    ("minimum", with_grad([BINARY_A, BINARY_B], torch.minimum)),
    ("eq", no_grad([BINARY_A, BINARY_B], lambda a, b: torch.eq(a, b).double())),
    ("ne", no_grad([BINARY_A, BINARY_B], lambda a, b: torch.ne(a, b).double())),
    ("gt", no_grad([BINARY_A, BINARY_B], lambda a, b: torch.gt(a, b).double())),
    ("ge", no_grad([BINARY_A, BINARY_B], lambda a, b: torch.ge(a, b).double())),
    ("lt", no_grad([BINARY_A, BINARY_B], lambda a, b: torch.lt(a, b).double())),
    ("le", no_grad([BINARY_A, BINARY_B], lambda a, b: torch.le(a, b).double())),
    # products: inf * 0 is NaN inside a dot product too
    ("matmul", with_grad([t([[inf, 1], [0, 1], [nan, 0], [-inf, inf]]), t([[0, 1, 2], [1, 0, 3]])], torch.matmul)),
    ("conv2d", with_grad([t([[[[1, 2, 3, 4], [5, inf, 7, 8], [9, 10, nan, 12], [13, 14, 15, -inf]]]]),
                          t([[[[1, -1], [0.5, 2]]]]), t([0.25])],
                         lambda x, w, b: F.conv2d(x, w, b, padding=1))),
    ("batch_norm_train", case_batch_norm_train),
]


def main():
    with open(OUT, "w") as out:
        out.write("# PyTorch %s special values (NaN, +-inf, ties); regenerate with /usr/bin/python3 "
                  "tests/golden/make_special_golden.py\n" % torch.__version__)
        for name, make in CASES:
            inputs, fn, extras, differentiable = make()
            inputs = [x.clone().requires_grad_(differentiable) for x in inputs]
            y = fn(*inputs)
            gout = None
            if differentiable:
                gout = torch.arange(1, y.numel() + 1, dtype=torch.float64).reshape(y.shape)
                y.backward(gout)
            write_case(out, name, inputs, y, gout, extras)
    print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
