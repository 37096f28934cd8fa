#!/usr/bin/python3
# Golden values for tests/layers/test_layers_golden.cpp: PyTorch's nn modules with fixed weights,
# their outputs, the gradients of their inputs and parameters, and their state_dict keys in
# PyTorch's order, written to tests/data/layers_golden.txt.
#
# Regenerate (from the repository root):  /usr/bin/python3 tests/golden/make_layers_golden.py
# Generated with torch 1.13.0a0 (Debian's python3-torch), CPU, float64 throughout.
#
# Same format as tests/data/golden.txt (see make_golden.py): per tensor a line
# "<case>.<role> <dtype> <rank> <dims...>" and a line of values. Roles:
#   state.<key>        the module's state_dict before the run, in state_dict order (the C++ test
#                      loads it with load_state_dict and checks that its own keys come in this order)
#   <step>.input       an input; <step>.output its output; <step>.gout the gradient fed to backward
#                      (absent when the output is a loss); <step>.grad_input the input's gradient
#   grad.<name>        each parameter's gradient after the case's training steps (accumulated)
#   state_after.<key>  the state_dict after those steps (BatchNorm's running statistics)
# Weights and inputs come from torch.randn under a fixed seed per case (its position in CASES).
import os

import torch
import torch.nn as nn

torch.set_default_dtype(torch.float64)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "layers_golden.txt")


def randn(*shape):
    return torch.randn(shape, dtype=torch.float64)


def positive(*shape):  # in [0.5, 2): BatchNorm scales and variances
    return torch.rand(shape, dtype=torch.float64) * 1.5 + 0.5


def set_weights(module, scale=1.0):
    # Every floating entry of the state gets fixed random values (randn * scale); variances and
    # BatchNorm scales stay positive. Integer buffers (num_batches_tracked) keep theirs.
    with torch.no_grad():
        for key, t in module.state_dict().items():
            if not t.is_floating_point():
                continue
            positive_entry = key.endswith("running_var") or (key.endswith("weight") and t.dim() == 1)
            t.copy_(positive(*t.shape) if positive_entry else randn(*t.shape) * scale)


class Writer:
    def __init__(self, out, case):
        self.out, self.case = out, case

    def tensor(self, role, t):
        t = t.detach()
        name = "%s.%s" % (self.case, role)
        if t.dtype in (torch.int64, torch.int32):
            dtype, values = "i32", [str(int(v)) for v in t.reshape(-1).tolist()]
        else:
            dtype, values = "f64", ["%.17g" % v for v in t.to(torch.float64).reshape(-1).tolist()]
        self.out.write(" ".join([name, dtype, str(t.dim())] + [str(d) for d in t.shape]) + "\n")
        self.out.write(" ".join(values) + "\n")

    def state(self, role, module):
        for key, t in module.state_dict().items():
            self.tensor("%s.%s" % (role, key), t)

    def grads(self, role, module):
        for name, p in module.named_parameters():
            self.tensor("%s.%s" % (role, name), p.grad)

    def step(self, role, module, x):
        """Forward and backward of one input, written as <role>.input/output/gout/grad_input."""
        x = x.clone().requires_grad_()
        y = module(x)
        gout = randn(*y.shape)
        y.backward(gout)
        self.tensor(role + ".input", x)
        self.tensor(role + ".output", y)
        self.tensor(role + ".gout", gout)
        self.tensor(role + ".grad_input", x.grad)


def case_linear(w):
    m = nn.Linear(5, 3)
    set_weights(m)
    w.state("state", m)
    w.step("step", m, randn(2, 4, 5))  # batched input: [*, in]
    w.grads("grad", m)


def case_conv2d(w):
    m = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    set_weights(m)
    w.state("state", m)
    w.step("step", m, randn(2, 4, 7, 6))
    w.grads("grad", m)


def case_batchnorm2d(w):
    m = nn.BatchNorm2d(3)
    set_weights(m)
    m.num_batches_tracked.fill_(5)
    w.state("state", m)
    m.train()
    w.step("train1", m, randn(4, 3, 3, 2))
    w.step("train2", m, randn(4, 3, 3, 2))
    w.grads("grad", m)  # accumulated over both steps
    w.state("state_after", m)
    m.eval()
    m.zero_grad()
    w.step("eval", m, randn(4, 3, 3, 2))
    w.grads("eval_grad", m)


def case_cnn(w):
    # A small CNN touching every kind of layer the C++ Sequential test builds, BatchNorm's buffers
    # included, so the state_dict interleaves parameters and buffers as PyTorch orders them.
    m = nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3),
        nn.GELU(),
        nn.Flatten(),
        nn.Linear(24, 5),
    )
    set_weights(m, scale=0.15)  # logits of a few units: a softmax that is not saturated
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    w.state("state", m)
    x = randn(3, 2, 8, 8).requires_grad_()
    target = torch.tensor([4, 0, 2])
    logits = m(x)
    loss = criterion(logits, target)
    loss.backward()
    w.tensor("input", x)
    w.tensor("target", target)
    w.tensor("logits", logits)
    w.tensor("loss", loss)
    w.tensor("grad_input", x.grad)
    w.grads("grad", m)
    w.state("state_after", m)


CASES = [
    ("linear", case_linear),
    ("conv2d", case_conv2d),
    ("batchnorm2d", case_batchnorm2d),
    ("cnn", case_cnn),
]


def main():
    with open(OUT, "w") as out:
        out.write("# PyTorch %s golden values of nn modules; regenerate with "
                  "/usr/bin/python3 tests/golden/make_layers_golden.py\n" % torch.__version__)
        for seed, (name, make) in enumerate(CASES):
            torch.manual_seed(seed)
            make(Writer(out, name))
    print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
