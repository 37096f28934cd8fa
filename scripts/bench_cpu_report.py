#!/usr/bin/python3
"""Runs kiln's cpu-bench and scripts/bench_cpu_torch.py on this machine, alternating, and keeps
every process's JSON as one line of OUT/cpu_bench.jsonl and OUT/cpu_torch.jsonl; `table(folder)`
makes the comparison table of docs/benchmarks.md from such a folder (scripts/figures.py writes it
from the recorded run named in docs/figures/tables.py). The table is never edited by hand.

    cmake --preset release && cmake --build --preset release --target cpu-bench
    /usr/bin/python3 scripts/bench_cpu_report.py OUT [--build build/release] [--threads 2] [--rounds 5]

Each side runs --rounds times in fresh processes, alternating, and the table keeps each side's best
median per op: on a shared machine a single process can land on a slow moment (seen here: one
process timing PyTorch's conv1 forward at 4.4 ms, the next at 0.39 ms). scripts/cpu-run bench runs
it into its folder, with the machine's description, and with glibc told to keep freed memory mapped
(see there): the comparison is of the kernels, not of the page faults of fresh buffers.

PyTorch's matmul runs on the system BLAS: `scripts/setup --dev` installs python3-torch and
OpenBLAS (libopenblas0-pthread), which Debian then selects as libblas.so.3.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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


def read_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def best(folder):
    """(kiln, PyTorch): each side's best process result per op, from a folder that main() wrote."""
    return (best_of(read_lines(os.path.join(folder, "cpu_bench.jsonl"))),
            best_of(read_lines(os.path.join(folder, "cpu_torch.jsonl"))))


def table(folder, meta):
    """The Markdown table of a folder that main() wrote; meta: its run.json."""
    kiln, torch = best(folder)
    rounds = len(read_lines(os.path.join(folder, "cpu_bench.jsonl")))
    theirs = {(r["name"], r["shape"]): r for r in torch["results"]}
    lines = [
        f"Measured {meta['date']} on {meta['machine']}, {kiln.get('threads', '?')} threads (recorded run "
        f"docs/runs/{meta['name']}, `{meta['command']}`); PyTorch {torch.get('torch', '?')} with BLAS "
        f"`{os.path.basename(torch.get('blas', '?'))}`. Each figure: the best of {rounds} processes' medians of "
        f"repeated runs after warm-up.",
        "",
        "| op | shape | kiln ms | kiln GFLOP/s | PyTorch ms | PyTorch GFLOP/s | kiln / PyTorch speed |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in kiln["results"]:
        t = theirs.get((r["name"], r["shape"]))
        lines.append(f"| {r['name']} | `{r['shape']}` | {r['ms']:.3f} | {r['gflops']:.1f} | "
                     f"{t['ms']:.3f} | {t['gflops']:.1f} | {t['ms'] / r['ms']:.2f}x |" if t else
                     f"| {r['name']} | `{r['shape']}` | {r['ms']:.3f} | {r['gflops']:.1f} | - | - | - |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out", help="folder for cpu_bench.jsonl and cpu_torch.jsonl (appended)")
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, KILN_NUM_THREADS=str(args.threads))
    for _ in range(args.rounds):
        for name, cmd, e in (
                ("cpu_bench", [os.path.join(args.build, "apps", "bench", "cpu-bench")], env),
                ("cpu_torch", [sys.executable, os.path.join(ROOT, "scripts", "bench_cpu_torch.py"), "--threads",
                               str(args.threads)], None)):
            with open(os.path.join(args.out, name + ".jsonl"), "a") as f:
                f.write(json.dumps(run_json(cmd, e)) + "\n")
    kiln, torch = best(args.out)
    for r in kiln["results"]:
        t = next((x for x in torch["results"] if (x["name"], x["shape"]) == (r["name"], r["shape"])), None)
        print(f"{r['name']:24s} {r['shape']:28s} kiln {r['ms']:8.3f} ms" + (f"  PyTorch {t['ms']:8.3f} ms" if t else ""))


if __name__ == "__main__":
    main()
