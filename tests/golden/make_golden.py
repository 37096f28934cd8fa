#!/usr/bin/python3
# Golden values for tests/test_golden.cpp: PyTorch's forward outputs and gradients for one
# representative case per op family, from fixed inputs, written to tests/data/golden.txt.
#
# Regenerate (from the repository root):  /usr/bin/python3 tests/golden/make_golden.py
# Generated with torch 1.13.0a0 (Debian's python3-torch), CPU, float64 throughout.
#
# Format, per tensor, two lines:
#   <case>.<role> <dtype> <rank> <d0> <d1> ...
#   <values in row-major order, 17 significant digits, space separated>
# dtype is f64, or i32 for class targets (int64 in PyTorch). Roles: in0, in1, ... are the inputs
# that get gradients; out is the forward output; gout the upstream gradient fed to backward;
# grad0, grad1, ... the inputs' gradients; anything else is a case-specific constant or result
# (targets, running statistics before and after). Values come from torch.randn under a fixed
# seed per case (the seed is the case's position in CASES), so the file is reproducible.
import os

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "golden.txt")


def randn(*shape):
    return torch.randn(shape, dtype=torch.float64)


def positive(*shape):  # in [0.5, 2): safe for log, sqrt, division and pow bases
    return torch.rand(shape, dtype=torch.float64) * 1.5 + 0.5


def away_from_zero(*shape):  # |x| >= 0.2: no kink of abs, relu or leaky_relu nearby
    x = randn(*shape)
    return torch.where(x >= 0, x + 0.2, x - 0.2)


# Each case: name -> function(seeded) returning (inputs, forward fn, extra named tensors).
# forward fn maps the inputs (requiring grad) to one output tensor.
def unary(make, fn, shape=(3, 7)):
    return lambda: ([make(*shape)], fn, {})


def case_cross_entropy():
    logits = randn(6, 7)
    target = torch.tensor([0, 6, 3, 3, 1, 5])
    return [logits], lambda x: F.cross_entropy(x, target, reduction="mean", label_smoothing=0.1), {
        "target": target}


def case_nll_loss():
    log_probs = randn(6, 7)
    target = torch.tensor([2, 0, 6, 6, 4, 1])
    return [log_probs], lambda x: F.nll_loss(x, target, reduction="mean"), {"target": target}


def case_batch_norm_train():
    return batch_norm_train(randn(4, 3, 3, 2), positive(3), randn(3), randn(3), positive(3))


# batch_norm in training from the given x, weight, bias and running statistics: the running
# statistics before and after the step are extras.
def batch_norm_train(x, w, b, running_mean, running_var):
    extras = {"running_mean": running_mean.clone(), "running_var": running_var.clone()}

    def fn(x, w, b):
        rm, rv = running_mean.clone(), running_var.clone()
        y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)
        extras["running_mean_after"] = rm
        extras["running_var_after"] = rv
        return y

    return [x, w, b], fn, extras


def case_batch_norm_eval():
    x, w, b = randn(4, 3, 3, 2), positive(3), randn(3)
    running_mean, running_var = randn(3), positive(3)
    return [x, w, b], lambda x, w, b: F.batch_norm(x, running_mean, running_var, w, b, training=False,
                                                   eps=1e-5), {
        "running_mean": running_mean, "running_var": running_var}


CASES = [
    # elementwise
    ("add", lambda: ([randn(3, 1, 5), randn(4, 5)], torch.add, {})),
    ("mul", lambda: ([randn(4, 5), randn(5)], torch.mul, {})),
    ("div", lambda: ([randn(3, 4), positive(3, 1)], torch.div, {})),
    ("pow", lambda: ([positive(3, 4), randn(4)], torch.pow, {})),
    ("pow_scalar", unary(positive, lambda x: torch.pow(x, 2.5))),
    ("exp", unary(randn, torch.exp)),
    ("log", unary(positive, torch.log)),
    ("sqrt", unary(positive, torch.sqrt)),
    ("abs", unary(away_from_zero, torch.abs)),
    ("tanh", unary(randn, torch.tanh)),
    ("sigmoid", unary(randn, torch.sigmoid)),
    ("relu", unary(away_from_zero, F.relu)),
    ("leaky_relu", unary(away_from_zero, lambda x: F.leaky_relu(x, 0.1))),
    ("gelu", unary(randn, F.gelu)),
    # reductions
    ("sum", unary(randn, lambda x: torch.sum(x, dim=(0, 2), keepdim=True), (3, 4, 5))),
    ("mean", unary(randn, lambda x: torch.mean(x, dim=(1,), keepdim=False), (3, 4, 5))),
    ("amax", unary(randn, lambda x: torch.amax(x, dim=(1, 2), keepdim=True), (3, 4, 5))),
    ("amin", unary(randn, lambda x: torch.amin(x, dim=(0,), keepdim=False), (3, 4, 5))),
    # linear algebra and nn
    ("matmul", lambda: ([randn(2, 1, 4, 5), randn(3, 5, 6)], torch.matmul, {})),
    ("softmax", unary(randn, lambda x: torch.softmax(x, dim=1), (3, 4, 5))),
    ("log_softmax", unary(randn, lambda x: torch.log_softmax(x, dim=-1))),
    ("cross_entropy", case_cross_entropy),
    ("nll_loss", case_nll_loss),
    ("mse_loss", lambda: ([randn(3, 4), randn(3, 4)], lambda a, b: F.mse_loss(a, b, reduction="mean"), {})),
    ("conv2d", lambda: ([randn(2, 4, 7, 6), randn(6, 2, 3, 3), randn(6)],
                        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, dilation=1, groups=2), {})),
    ("conv2d_dilated", lambda: ([randn(2, 3, 8, 7), randn(4, 3, 3, 3), randn(4)],
                                lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1, dilation=2), {})),
    ("max_pool2d", unary(randn, lambda x: F.max_pool2d(x, 3, stride=2, padding=1), (1, 2, 7, 9))),
    ("avg_pool2d_exclude_pad", unary(randn, lambda x: F.avg_pool2d(x, 3, stride=2, padding=1,
                                                                   count_include_pad=False), (1, 2, 7, 9))),
    ("avg_pool2d_include_pad", unary(randn, lambda x: F.avg_pool2d(x, 3, stride=2, padding=1,
                                                                   count_include_pad=True), (1, 2, 7, 9))),
    ("batch_norm_train", case_batch_norm_train),
    ("batch_norm_eval", case_batch_norm_eval),
]


def write_tensor(out, name, t):
    t = t.detach()
    if t.dtype in (torch.int64, torch.int32):
        dtype, values = "i32", [str(int(v)) for v in t.reshape(-1).tolist()]
    else:
        dtype, values = "f64", ["%.17g" % v for v in t.to(torch.float64).reshape(-1).tolist()]
    out.write(" ".join([name, dtype, str(t.dim())] + [str(d) for d in t.shape]) + "\n")
    out.write(" ".join(values) + "\n")


def write_case(out, name, inputs, y, gout, extras):
    """One case: its inputs, output, upstream gradient and the inputs' gradients (these two left
    out where gout is None: an op without a gradient), then its extra tensors."""
    for i, x in enumerate(inputs):
        write_tensor(out, "%s.in%d" % (name, i), x)
    write_tensor(out, name + ".out", y)
    if gout is not None:
        write_tensor(out, name + ".gout", gout)
        for i, x in enumerate(inputs):
            write_tensor(out, "%s.grad%d" % (name, i), x.grad)
    for key, t in extras.items():
        write_tensor(out, "%s.%s" % (name, key), t)


def main():
    with open(OUT, "w") as out:
        out.write("# PyTorch %s golden values; regenerate with /usr/bin/python3 tests/golden/make_golden.py\n"
                  % torch.__version__)
        for seed, (name, make) in enumerate(CASES):
            torch.manual_seed(seed)
            inputs, fn, extras = make()
            inputs = [x.clone().requires_grad_() for x in inputs]
            y = fn(*inputs)
            gout = randn(*y.shape)
            y.backward(gout)
            write_case(out, name, inputs, y, gout, extras)
    print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
