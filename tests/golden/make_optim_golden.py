#!/usr/bin/python3
# Golden values for tests/optim/: PyTorch's optimizers, learning-rate schedulers and
# clip_grad_norm_ on fixed inputs, written to tests/data/optim_golden.txt.
#
# Regenerate (from the repository root):  /usr/bin/python3 tests/golden/make_optim_golden.py
# Generated with torch 1.13.0a0 (Debian's python3-torch), CPU, float64 throughout.
#
# The format is tests/data/golden.txt's (see tests/golden/make_golden.py), per tensor two lines:
#   <name> f64 <rank> <d0> <d1> ...
#   <values in row-major order, 17 significant digits, space separated>
#
# Optimizers. Three parameters p0 [2, 3], p1 [4], p2 [3] and coefficients c0, c1, c2 of their
# shapes (names init.p<k>, loss.c<k>). Step t = 1..5 (of every configuration in OPTIMIZERS)
# computes
#     loss = sum(c0 * p0^3) + sum(c1 * p1^3) + (sum(c2 * p2^3) if t >= 3)
# so gradients change from step to step, and p2 has no gradient in steps 1 and 2: the optimizer
# skips it there, and its per-parameter step count lags two behind the others'. Gradients are
# dropped (set to None) before each step. Written: <config>.step3.p<k> and <config>.step5.p<k>
# (the parameters after 3 and 5 steps) and <config>.state.<i>.<name> (every state tensor after 5
# steps, "step" included, as in optimizer.state_dict()). The C++ tests build the same
# configurations from a table that mirrors OPTIMIZERS. One more configuration, sgd_momentum_later,
# is SGD(lr=0.02) given momentum 0.9 after step 1, as OneCycleLR's cycle does: PyTorch starts each
# momentum buffer from the gradient of its parameter's next step (p2's at step 3).
#
# Schedulers. <name>.lr: the learning rate of the optimizer's only group at epochs 0..N-1 (after
# construction, then after each scheduler.step()); <name>.momentum: the momentum (or beta1) that
# OneCycleLR sets alongside.
#
# clip_grad_norm_. Two gradients clip.g0 [3, 4] and clip.g1 [5]; per case <case>.total (the norm
# returned) and <case>.g0, <case>.g1 (the gradients after clipping). In the cases of NONFINITE,
# clip.g1[1] is an inf or a NaN (error_if_nonfinite off): PyTorch scales by the non-finite norm.
import math
import os
import warnings

import torch

torch.set_default_dtype(torch.float64)
warnings.filterwarnings("ignore")  # "lr_scheduler.step() before optimizer.step()": intended here

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "optim_golden.txt")

STEPS = 5
SHAPES = [(2, 3), (4,), (3,)]

O = torch.optim
OPTIMIZERS = [
    ("sgd_plain", lambda p: O.SGD(p, lr=0.02)),
    ("sgd_momentum", lambda p: O.SGD(p, lr=0.02, momentum=0.9, dampening=0.1)),
    ("sgd_nesterov", lambda p: O.SGD(p, lr=0.02, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("sgd_weight_decay", lambda p: O.SGD(p, lr=0.02, weight_decay=0.1)),
    ("adam", lambda p: O.Adam(p, lr=0.01)),
    ("adam_weight_decay", lambda p: O.Adam(p, lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adam_amsgrad", lambda p: O.Adam(p, lr=0.01, betas=(0.9, 0.6), amsgrad=True)),
    ("adamw", lambda p: O.AdamW(p, lr=0.01, weight_decay=0.1)),
    ("adamw_amsgrad", lambda p: O.AdamW(p, lr=0.01, betas=(0.9, 0.6), weight_decay=0.05, amsgrad=True)),
    ("adadelta", lambda p: O.Adadelta(p)),
    ("adadelta_weight_decay", lambda p: O.Adadelta(p, lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1)),
    ("rmsprop", lambda p: O.RMSprop(p, lr=0.01)),
    ("rmsprop_momentum", lambda p: O.RMSprop(p, lr=0.01, momentum=0.9, weight_decay=0.1)),
    ("rmsprop_centered", lambda p: O.RMSprop(p, lr=0.01, alpha=0.9, eps=1e-6, momentum=0.5, centered=True)),
]

MOMENTUM_LATER = "sgd_momentum_later"  # not in OPTIMIZERS: the C++ tests train it apart

LS = O.lr_scheduler
SCHEDULERS = [
    # name, optimizer, scheduler, epochs recorded, momentum key (None: lr only)
    ("step_lr", lambda p: O.SGD(p, lr=0.1), lambda o: LS.StepLR(o, step_size=3, gamma=0.5), 21, None),
    ("cosine", lambda p: O.SGD(p, lr=0.1), lambda o: LS.CosineAnnealingLR(o, T_max=6, eta_min=0.001), 21, None),
    ("linear", lambda p: O.SGD(p, lr=0.1), lambda o: LS.LinearLR(o, start_factor=0.25, total_iters=8), 21, None),
    ("one_cycle", lambda p: O.SGD(p, lr=0.1, momentum=0.9),
     lambda o: LS.OneCycleLR(o, max_lr=0.5, total_steps=20), 20, "momentum"),
    ("one_cycle_three_phase", lambda p: O.Adam(p, lr=1e-3),
     lambda o: LS.OneCycleLR(o, max_lr=0.01, total_steps=25, pct_start=0.25, anneal_strategy="linear",
                             three_phase=True, div_factor=10.0, final_div_factor=100.0,
                             base_momentum=0.8, max_momentum=0.9), 25, "betas"),
]

CLIPS = [  # name, max_norm, norm_type
    ("clip_l2", 1.0, 2.0),
    ("clip_l1", 1.0, 1.0),
    ("clip_inf", 0.5, math.inf),
    ("clip_l3", 2.0, 3.0),
    ("clip_none", 100.0, 2.0),  # below max_norm: the gradients stay as they are (coefficient 1)
]
NONFINITE = [  # name, max_norm, norm_type, the value that replaces clip.g1[1]
    ("clip_l2_inf_grad", 1.0, 2.0, math.inf),  # the norm is inf: every gradient times 0 (inf * 0: NaN)
    ("clip_l2_nan_grad", 1.0, 2.0, math.nan),  # the norm is NaN, and so is every gradient
    ("clip_inf_nan_grad", 0.5, math.inf, math.nan),
]


def write_tensor(out, name, t):
    t = torch.as_tensor(t, dtype=torch.float64).detach()
    values = ["%.17g" % v for v in t.reshape(-1).tolist()]
    out.write(" ".join([name, "f64", str(t.dim())] + [str(d) for d in t.shape]) + "\n")
    out.write(" ".join(values) + "\n")


def optimizer_cases(out):
    torch.manual_seed(0)
    init = [torch.rand(s) * 2 - 1 for s in SHAPES]  # in [-1, 1): p^3 stays tame over 5 steps
    coef = [torch.randn(s) for s in SHAPES]
    for k, (p, c) in enumerate(zip(init, coef)):
        write_tensor(out, "init.p%d" % k, p)
        write_tensor(out, "loss.c%d" % k, c)
    for name, make in OPTIMIZERS + [(MOMENTUM_LATER, lambda p: O.SGD(p, lr=0.02))]:
        params = [p.clone().requires_grad_() for p in init]
        opt = make(params)
        for t in range(1, STEPS + 1):
            opt.zero_grad(set_to_none=True)
            loss = (coef[0] * params[0] ** 3).sum() + (coef[1] * params[1] ** 3).sum()
            if t >= 3:
                loss = loss + (coef[2] * params[2] ** 3).sum()
            loss.backward()
            opt.step()
            if name == MOMENTUM_LATER and t == 1:
                opt.param_groups[0]["momentum"] = 0.9
            if t in (3, STEPS):
                for k, p in enumerate(params):
                    write_tensor(out, "%s.step%d.p%d" % (name, t, k), p)
        for i, state in sorted(opt.state_dict()["state"].items()):
            for key, value in sorted(state.items()):
                if value is not None:
                    write_tensor(out, "%s.state.%d.%s" % (name, i, key), value)


def scheduler_cases(out):
    for name, make_opt, make_sched, epochs, momentum_key in SCHEDULERS:
        opt = make_opt([torch.zeros(1, requires_grad=True)])
        sched = make_sched(opt)
        lrs, momenta = [], []
        for epoch in range(epochs):
            if epoch > 0:
                sched.step()
            group = opt.param_groups[0]
            lrs.append(group["lr"])
            assert sched.get_last_lr()[0] == group["lr"]
            if momentum_key == "momentum":
                momenta.append(group["momentum"])
            elif momentum_key == "betas":
                momenta.append(group["betas"][0])
        write_tensor(out, name + ".lr", lrs)
        if momenta:
            write_tensor(out, name + ".momentum", momenta)


def clip_cases(out):
    torch.manual_seed(1)
    grads = [torch.randn(3, 4), torch.randn(5)]
    write_tensor(out, "clip.g0", grads[0])
    write_tensor(out, "clip.g1", grads[1])
    for name, max_norm, norm_type, bad in [c + (None,) for c in CLIPS] + NONFINITE:
        params = [torch.zeros_like(g, requires_grad=True) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        if bad is not None:
            params[1].grad[1] = bad
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
        write_tensor(out, name + ".total", total)
        write_tensor(out, name + ".g0", params[0].grad)
        write_tensor(out, name + ".g1", params[1].grad)


def main():
    with open(OUT, "w") as out:
        out.write("# PyTorch %s optimizer golden values; regenerate with "
                  "/usr/bin/python3 tests/golden/make_optim_golden.py\n" % torch.__version__)
        optimizer_cases(out)
        scheduler_cases(out)
        clip_cases(out)
    print("wrote", os.path.normpath(OUT), os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
