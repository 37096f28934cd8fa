#!/usr/bin/env python3
"""Summarises Nsight Compute's source page of one kernel (scripts/device-run ncu-kernel writes it as
ncu_NAME_source.csv.gz): where its warps spend their time, instruction by instruction.

    scripts/ncu_source.py ncu_NAME_source.csv.gz [--top 30] [--regions ADDR,ADDR,...]

Prints the warp-stall samples by reason over the whole kernel, the instructions by kind (the opcode,
its executions and samples), and the instructions with the most samples with their leading
reasons. --regions splits the kernel at those addresses (offsets from its first instruction, hex)
and gives each stretch's executions and samples: e.g. a warp-specialised kernel's producer and
consumer code.
"""
import argparse
import csv
import gzip
import io
from collections import Counter, defaultdict


def read(path):
    raw = gzip.open(path, "rt") if path.endswith(".gz") else open(path)
    lines = raw.read().splitlines()
    # the first line names the kernel; the table starts at the line with "Address"
    start = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    return lines[0], rows


def number(text):
    try:
        return float(text.replace(",", ""))
    except (ValueError, AttributeError):
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--regions", default="", help="offsets (hex) where the kernel's stretches begin")
    args = ap.parse_args()
    kernel, rows = read(args.csv)
    base = int(rows[0]["Address"], 16)
    reasons = [k for k in rows[0] if k.startswith("stall_") and "(Not Issued)" not in k]
    samples = sum(number(r["Warp Stall Sampling (All Samples)"]) for r in rows)
    executed = sum(number(r["Instructions Executed"]) for r in rows)
    print(kernel.strip().strip('",'))
    print(f"{len(rows)} SASS instructions, {executed:,.0f} warp instructions executed, {samples:,.0f} stall samples")

    print("\nsamples by reason:")
    by_reason = Counter({k: sum(number(r[k]) for r in rows) for k in reasons})
    for k, v in by_reason.most_common():
        if v:
            print(f"  {100 * v / samples:5.1f}%  {k[6:]}")

    print("\ninstructions by opcode (executions, share of samples):")
    kinds = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        words = r["Source"].split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "?")
        op = op.split(".")[0]
        kinds[op][0] += number(r["Instructions Executed"])
        kinds[op][1] += number(r["Warp Stall Sampling (All Samples)"])
    for op, (n, s) in sorted(kinds.items(), key=lambda kv: -kv[1][0])[:20]:
        print(f"  {op:12s} {n:14,.0f}  {100 * s / samples:5.1f}%")

    if args.regions:
        cuts = sorted(int(x, 16) for x in args.regions.split(","))
        print("\nstretches (offset from, executions, share of samples):")
        for i, lo in enumerate([0] + cuts):
            hi = cuts[i] if i < len(cuts) else float("inf")
            part = [r for r in rows if lo <= int(r["Address"], 16) - base < hi]
            n = sum(number(r["Instructions Executed"]) for r in part)
            s = sum(number(r["Warp Stall Sampling (All Samples)"]) for r in part)
            print(f"  +{lo:#08x}  {n:14,.0f}  {100 * s / samples:5.1f}%")

    print(f"\nthe {args.top} instructions with the most samples (share, executions, leading reasons):")
    for r in sorted(rows, key=lambda r: -number(r["Warp Stall Sampling (All Samples)"]))[: args.top]:
        s = number(r["Warp Stall Sampling (All Samples)"])
        lead = sorted(((number(r[k]), k[6:]) for k in reasons), reverse=True)[:2]
        why = ", ".join(f"{k} {100 * v / s:.0f}%" for v, k in lead if v) if s else ""
        print(f"  {100 * s / samples:5.1f}%  +{int(r['Address'], 16) - base:#08x}  {r['Source'].strip()[:60]:60s}"
              f"  x{number(r['Instructions Executed']):,.0f}  {why}")


if __name__ == "__main__":
    main()
