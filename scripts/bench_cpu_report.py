#!/usr/bin/python3
"""Runs kiln's cpu-bench and scripts/bench_cpu_torch.py on this machine and rewrites the results
table in docs/benchmarks.md (between the BEGIN/END markers), with the machine, thread count and
date. The table is never edited by hand.

    cmake --preset release && cmake --build --preset release --target cpu-bench
    /usr/bin/python3 scripts/bench_cpu_report.py [--build build/release] [--threads 2] [--rounds 5]

Each side runs --rounds times in fresh processes, alternating, and keeps its best median per op:
on a shared machine a single process can land on a slow moment (seen here: one process timing
PyTorch's conv1 forward at 4.4 ms, the next at 0.39 ms).

PyTorch's matmul runs on the system BLAS: `scripts/setup --dev` installs python3-torch and
OpenBLAS (libopenblas0-pthread), which Debian then selects as libblas.so.3.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN, END = "<!-- BEGIN cpu-bench -->", "<!-- END cpu-bench -->"


def run_json(cmd, env=None):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run(cmd + ["--json", f.name], check=True, env=env, stdout=subprocess.DEVNULL)
        return json.load(open(f.name))


def best_of(runs):
    """The first run's record with each op's fastest result across runs."""
    best = dict(runs[0])
    best["results"] = [min((r for run in runs for r in run["results"]
                            if (r["name"], r["shape"]) == (first["name"], first["shape"])),
                           key=lambda r: r["ms"])
                       for first in runs[0]["results"]]
    return best


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    env = dict(os.environ, KILN_NUM_THREADS=str(args.threads))
    kiln_runs, torch_runs = [], []
    for _ in range(args.rounds):
        kiln_runs.append(run_json([os.path.join(args.build, "apps", "bench", "cpu-bench")], env))
        torch_runs.append(run_json([sys.executable, os.path.join(ROOT, "scripts", "bench_cpu_torch.py"),
                                    "--threads", str(args.threads)]))
    kiln, torch = best_of(kiln_runs), best_of(torch_runs)
    theirs = {(r["name"], r["shape"]): r for r in torch["results"]}

    lines = [
        f"Measured {datetime.date.today().isoformat()} on {cpu_model()}, {os.cpu_count()} cores, "
        f"{args.threads} threads; PyTorch {torch.get('torch', '?')} with BLAS "
        f"`{os.path.basename(torch.get('blas', '?'))}`. Each figure: the best of {args.rounds} "
        f"processes' medians of repeated runs after warm-up.",
        "",
        "| op | shape | kiln ms | kiln GFLOP/s | PyTorch ms | PyTorch GFLOP/s | kiln / PyTorch speed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in kiln["results"]:
        t = theirs.get((r["name"], r["shape"]))
        ratio = f"{t['ms'] / r['ms']:.2f}x" if t else "-"
        lines.append(f"| {r['name']} | `{r['shape']}` | {r['ms']:.3f} | {r['gflops']:.1f} | "
                     f"{t['ms']:.3f} | {t['gflops']:.1f} | {ratio} |" if t else
                     f"| {r['name']} | `{r['shape']}` | {r['ms']:.3f} | {r['gflops']:.1f} | - | - | - |")
    table = "\n".join(lines)

    doc = open(DOC).read()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    open(DOC, "w").write(doc[:start] + "\n" + table + "\n" + doc[end:])
    print(table)


if __name__ == "__main__":
    main()
