#!/usr/bin/python3
"""A training step's kernels, from Nsight Compute's CSV of a run of mnist-train: how many launches a
step makes and where its GPU time goes, kernel by kernel.

    ncu --clock-control none --csv --metrics gpu__time_duration.sum --launch-skip S --launch-count N \\
        mnist-train ... > profile.csv                     (scripts/device-run profile does this)
    python3 scripts/step_profile.py profile.csv [--json OUT]

ncu times each kernel alone (it serialises launches), so the sum is the step's kernel time without
the gaps between launches. The launches ncu saw are a window in the middle of training; the step's
length is the period of the kernel-name sequence (the smallest shift under which at least 85% of
names repeat: the progress update every --log-interval steps adds a few kernels that break the
period now and then). Kernels are grouped by their name without template arguments.
"""
import argparse
import csv
import json
import re
import sys


def kernels(path):
    """[(name, µs)] in launch order, from ncu's CSV (one row per kernel and metric)."""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # the program's own output is not CSV
    rows = []
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
                 "second": 1e6, "s": 1e6}[unit]
        rows.append((short(r["Kernel Name"]), value * scale))
    return rows


def short(name):
    """A kernel's name without its template arguments, parameters, return type and anonymous
    namespaces: "void conv2d::<unnamed>::patch_conv_kernel<Tile<128, 64>, 1>(Args)" is
    "conv2d::patch_conv_kernel" (ncu writes a top-level anonymous namespace "unnamed>::"). The
    elementwise kernels, which run every op as a functor, keep the functor's name:
    "map_vec_kernel<4, Convert<float, bf16>, bf16, float>" is "map_vec_kernel (Convert)"."""
    # "::<unnamed>::" inside a name; "unnamed>::" where ncu drops the "<" (at the top level, and
    # after a template's "<" or ", ")
    name = re.sub(r"(?<=::)<unnamed>::", "", name).replace("unnamed>::", "")
    depth, out, args = 0, [], []
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
        elif depth == 1:
            args.append(ch)
    name = "".join(out).split("(")[0].strip()  # parameters
    name = name.split(" ")[-1]  # the return type
    if name in ("map_kernel", "map_vec_kernel"):  # (map_vec_kernel's first argument is its width)
        functor = next(a.strip() for a in "".join(args).split(",") if not a.strip().isdigit())
        name += f" ({functor})"
    return name


def period(names, most=400):
    for p in range(1, min(most, len(names) // 2) + 1):
        same = sum(names[i] == names[i + p] for i in range(len(names) - p))
        if same >= 0.85 * (len(names) - p):
            return p
    raise SystemExit("step_profile: no period in the kernel names: too few launches profiled?")


def summary(rows):
    names = [n for n, _ in rows]
    p = period(names)
    steps = len(rows) / p
    by = {}
    for name, us in rows:
        e = by.setdefault(name, {"kernel": name, "launches": 0, "us": 0.0})
        e["launches"] += 1
        e["us"] += us
    total = sum(us for _, us in rows)
    table = sorted(by.values(), key=lambda e: -e["us"])
    for e in table:
        e["launches_per_step"] = round(e["launches"] / steps, 2)
        e["us_per_step"] = round(e["us"] / steps, 2)
        e["share"] = round(e["us"] / total, 4)
        e["us"] = round(e["us"], 2)
    return {"launches": len(rows), "kernels_per_step": p, "steps": round(steps, 2),
            "us_per_step": round(total / steps, 2), "kernels": table}


def table(run, configs, top=12):
    """Markdown: per configuration (name, file, what), the step's kernel count and time, then its
    heaviest kernels (run: a recorded run, scripts/figures.py's Run)."""
    out = [f"Nsight Compute (`ncu --metrics gpu__time_duration.sum`, each launch timed alone) on "
           f"{run.meta['machine'].split(',')[0].split(' x ')[-1]}, {run.meta['date']}, in the call `{run.meta['command']}` "
           f"recorded in docs/runs/{run.meta['name']}; `scripts/step_profile.py` groups the launches of a window "
           f"of steps mid-epoch.", "",
           "| mnist-train CNN | kernels a step | kernel time a step, µs |", "| --- | ---: | ---: |"]
    summaries = []
    for name, file, what in configs:
        s = summary(kernels(run.file(file)))
        summaries.append((what, s))
        out.append(f"| {what} | {s['kernels_per_step']} | {s['us_per_step']:.1f} |")
    for what, s in summaries:
        out += ["", f"{what}: the {top} kernels with the most time a step", "",
                "| kernel | launches a step | µs a step | share |", "| --- | ---: | ---: | ---: |"]
        for e in s["kernels"][:top]:
            out.append(f"| `{e['kernel']}` | {e['launches_per_step']:.2f} | {e['us_per_step']:.1f} | "
                       f"{100 * e['share']:.1f}% |")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--json", help="write the summary there too")
    args = parser.parse_args()
    s = summary(kernels(args.csv))
    print(f"{s['kernels_per_step']} kernels a step, {s['us_per_step']:.1f} µs of kernel time a step "
          f"({s['launches']} launches, {s['steps']:.1f} steps)")
    print(f"{'kernel':60s} {'a step':>7s} {'µs a step':>10s} {'share':>6s}")
    for e in s["kernels"]:
        print(f"{e['kernel'][:60]:60s} {e['launches_per_step']:7.2f} {e['us_per_step']:10.2f} {100 * e['share']:5.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(s, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
