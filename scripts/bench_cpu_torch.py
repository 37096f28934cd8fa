#!/usr/bin/python3
"""Times on PyTorch (CPU) what apps/bench/cpu_bench.cpp times on kiln's CPU backend, and prints
the same table: f32 matmul 1024^3 (plain, A^T.B, A.B^T) and the MNIST CNN's conv layers at batch
64 (forward, backward-input, backward-weight), each the median of several runs after warm-up.

    /usr/bin/python3 scripts/bench_cpu_torch.py [--threads 2] [--json FILE]

Use Debian's python3-torch (/usr/bin/python3). Its matmul goes through whatever libblas.so.3 the
system provides: the unoptimised reference BLAS unless OpenBLAS is installed, which
`scripts/setup --dev` does (libopenblas0-pthread; Debian then selects it).
Convolutions use oneDNN (MKL-DNN) either way. The script prints which BLAS library was loaded.
"""
import argparse
import json
import time

import torch


def median_ms(fn):
    """3 warm-up runs, then at least 7 timed runs and ~1 s in total; the median in ms."""
    for _ in range(3):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < 7 or (time.perf_counter() - start < 1.0 and len(times) < 1000):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def bench_matmul(name, size, trans_a, trans_b):
    a = torch.rand(size, size) * 2 - 1
    b = torch.rand(size, size) * 2 - 1
    op_a = a.t() if trans_a else a  # a transposed view, as kiln's trans_a reads the same memory
    op_b = b.t() if trans_b else b
    out = torch.empty(size, size)
    ms = median_ms(lambda: torch.matmul(op_a, op_b, out=out))
    return {"name": name, "shape": f"{size}^3", "ms": ms, "gflops": 2.0 * size**3 / (ms * 1e6)}


def bench_conv(layer, n, c, hw, o, k):
    out = hw - k + 1
    x = torch.rand(n, c, hw, hw) * 2 - 1
    w = torch.rand(o, c, k, k) * 2 - 1
    bias = torch.rand(o) * 2 - 1
    gy = torch.rand(n, o, out, out) * 2 - 1
    flops = 2.0 * n * o * out * out * c * k * k
    shape = f"x[{n},{c},{hw},{hw}] w[{o},{c},{k},{k}]"

    def backward(mask):
        # The op autograd runs for conv2d's backward; the mask picks input or weight gradient.
        return torch.ops.aten.convolution_backward(
            gy, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, mask)

    results = []
    for what, fn in (
        ("forward", lambda: torch.nn.functional.conv2d(x, w, bias)),
        ("backward-input", lambda: backward([True, False, False])),
        ("backward-weight", lambda: backward([False, True, False])),
    ):
        ms = median_ms(fn)
        results.append({"name": f"{layer} {what}", "shape": shape, "ms": ms,
                        "gflops": flops / (ms * 1e6)})
    return results


def blas_library():
    """The libblas/openblas file this process mapped (from /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as maps:
            libs = {line.split()[-1] for line in maps if "blas" in line.lower()}
        return ", ".join(sorted(libs)) or "unknown"
    except OSError:
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with torch.no_grad():
        results = [
            bench_matmul("matmul", 1024, False, False),
            bench_matmul("matmul A^T.B", 1024, True, False),
            bench_matmul("matmul A.B^T", 1024, False, True),
        ]
        results += bench_conv("conv1", 64, 1, 28, 32, 3)
        results += bench_conv("conv2", 64, 32, 26, 64, 3)

    print(f"pytorch {torch.__version__} cpu, {torch.get_num_threads()} threads "
          f"(median of runs after warm-up); blas: {blas_library()}")
    print(f"{'op':<24} {'shape':<26} {'ms':>10} {'GFLOP/s':>10}")
    for r in results:
        print(f"{r['name']:<24} {r['shape']:<26} {r['ms']:>10.3f} {r['gflops']:>10.1f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"backend": "pytorch-cpu", "torch": torch.__version__,
                       "threads": torch.get_num_threads(), "blas": blas_library(),
                       "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
