#!/usr/bin/python3
"""Markdown tables of a data-parallel run, from the JSON lines that `scripts/device-run dist` writes
to $OUT (dist.jsonl: dist-bench allreduce and ddp, scripts/bench_ddp_torch.py, at every rank count
the call ran; dist_train.jsonl and train_1gpu.jsonl: mnist-train on every GPU and on one, each step a
captured graph; dist_train_Ngpus.jsonl: on N GPUs; dist_train_eager.jsonl: on every GPU with
--graph off):

    python3 scripts/dist_table.py out/dist.jsonl [out/dist_train.jsonl out/train_1gpu.jsonl [out/dist_train_eager.jsonl]]
    python3 scripts/dist_table.py --scaling RUN_DIR [--plot FILE.svg]

The first form prints the tables of the run's largest rank count. --scaling prints the curve
across the counts of one call, GPUs by measure, kiln and PyTorch side by side, and --plot draws it
(matplotlib: scripts/setup --dev).

All-reduce: kiln's ProcessGroup against NCCL called directly in the same program and against
torch.distributed; DDP: the step of 8 x Linear(4096, 4096) alone and data-parallel, with the
efficiency (alone / data-parallel) of kiln and of PyTorch's DDP, default and tuned, and kiln's with
each step one captured CUDA graph; the same for mnist-train's CNN (kiln); mnist-train's epochs on
every GPU against one.
"""
import json
import os
import sys


def size(b):
    for unit, name in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if b >= unit:
            return f"{b // unit}{name}"
    return str(b)


def records(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def main(path, ranks=None):
    """The tables of one rank count: `ranks`, or the largest in the file."""
    rows = records(path)
    ranks = ranks or max(r["ranks"] for r in rows)
    rows = [r for r in rows if r["ranks"] == ranks]
    allreduce, ddp, cnn = {}, {}, {}
    for r in rows:
        if r.get("bench") == "allreduce":
            allreduce.setdefault(r["bytes"], {})[r["impl"]] = r
        elif r.get("bench") == "ddp" and r.get("model", "linear") == "linear":
            ddp.setdefault(r["batch"], {})[(r["impl"], r["mode"])] = r
        elif r.get("bench") == "ddp":
            cnn.setdefault(r["batch"], {})[r["mode"]] = r
    first = rows[0]
    print(f"All-reduce, f32 sum in place, {first['ranks']} × {first['device']}, {first['date']}:\n")
    print("| bytes | kiln µs | NCCL µs | PyTorch µs | kiln / NCCL time | kiln busbw GB/s | NCCL busbw | PyTorch busbw "
          "| kiln issue µs | NCCL issue µs |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for b in sorted(allreduce):
        d = allreduce[b]
        k, n, t = d.get("kiln", {}), d.get("nccl", {}), d.get("torch", {})
        ratio = k["us"] / n["us"] if k and n else float("nan")
        print(f"| {size(b)} | {k.get('us', 0):.1f} | {n.get('us', 0):.1f} | {t.get('us', 0):.1f} | {ratio:.2f} "
              f"| {k.get('busbw_gbs', 0):.1f} | {n.get('busbw_gbs', 0):.1f} | {t.get('busbw_gbs', 0):.1f} "
              f"| {k.get('issue_us', 0):.1f} | {n.get('issue_us', 0):.1f} |")
    print("\nDDP step, 8 × (Linear 4096→4096, ReLU), MSE, SGD, TF32, batch per GPU; efficiency = step "
          "alone ÷ step data-parallel:\n")
    graphs = any(("kiln", "ddp_graph") in d for d in ddp.values())  # runs since dist-bench captured steps
    print("| batch | kiln alone ms | kiln DDP ms | kiln efficiency "
          + ("| kiln DDP, one graph a step, ms | its efficiency " if graphs else "")
          + "| PyTorch alone ms | DDP ms | efficiency | tuned DDP ms | tuned efficiency |")
    print("| --- " * (11 if graphs else 9) + "|")
    for batch in sorted(ddp):
        d = ddp[batch]
        cells = [str(batch)]
        for key in (("kiln", "alone"), ("kiln", "ddp")) + ((("kiln", "ddp_graph"),) if graphs else ()) + (
                ("torch", "alone"), ("torch", "ddp"), ("torch", "ddp_tuned")):
            r = d.get(key, {})
            cells.append(f"{r.get('step_ms', 0):.2f}")
            if key[1] != "alone":
                cells.append(f"{r.get('efficiency', 0):.2f}")
        print("| " + " | ".join(cells) + " |")
    if cnn:
        print("\nDDP step, mnist-train's CNN, random images, MSE, SGD, TF32 (kiln; `dist-bench ddp --model cnn`):\n")
        graphs = any("ddp_graph" in d for d in cnn.values())
        print("| batch | alone ms | DDP ms | efficiency | inside no_sync ms | gradients' all-reduce alone µs "
              + ("| one graph a step: alone ms | DDP ms | efficiency " if graphs else "") + "|")
        print("| --- " * (9 if graphs else 6) + "|")
        for batch in sorted(cnn):
            d = cnn[batch]
            a, p, u, ag, pg = (d.get(m, {}).get("step_ms", 0)
                               for m in ("alone", "ddp", "ddp_no_sync", "alone_graph", "ddp_graph"))
            g = d.get("ddp", {}).get("grads_allreduce_us", 0)
            row = f"| {batch} | {a:.3f} | {p:.3f} | {d.get('ddp', {}).get('efficiency', 0):.3f} | {u:.3f} | {g:.1f} "
            if graphs:
                row += f"| {ag:.3f} | {pg:.3f} | {d.get('ddp_graph', {}).get('efficiency', 0):.3f} "
            print(row + "|")


def epochs(path):
    return [r for r in map(json.loads, open(path)) if r.get("type") == "epoch"]


def mnist(all_gpus, one_gpu, all_gpus_eager=None):
    """mnist-train's epochs on every GPU (each rank batch 64) against one GPU's, side by side, and
    on every GPU with each kernel launched from the host (--graph off) when given."""
    many, one = epochs(all_gpus), epochs(one_gpu)
    eager = epochs(all_gpus_eager) if all_gpus_eager else []
    print("\nmnist-train, default CNN, batch 64 per GPU: epoch seconds and test accuracy, every GPU against one"
          + (" (each step one captured CUDA graph; all GPUs with --graph off beside)" if eager else "") + ":\n")
    extra = " | all GPUs --graph off s | its test acc" if eager else ""
    print("| epoch | 1 GPU s | 1 GPU img/s | all GPUs s | all GPUs img/s | speed-up | 1 GPU test acc | all GPUs test acc"
          + extra + " |")
    print("| --- " * (8 + (2 if eager else 0)) + "|")
    for i, (a, b) in enumerate(zip(one, many)):
        row = (f"| {a['epoch']} | {a['seconds']:.3f} | {a['images_per_s']:.0f} | {b['seconds']:.3f} | "
               f"{b['images_per_s']:.0f} | {b['images_per_s'] / a['images_per_s']:.2f} | "
               f"{100 * a['test_accuracy']:.2f}% | {100 * b['test_accuracy']:.2f}%")
        if eager and i < len(eager):
            row += f" | {eager[i]['seconds']:.3f} | {100 * eager[i]['test_accuracy']:.2f}%"
        print(row + " |")


def scaling_data(run):
    """The curve of one call (a run folder): per rank count, the 8 x Linear step's images a second
    and efficiency for kiln (eager and captured) and PyTorch DDP at each batch, the all-reduce's
    1 GB bus bandwidth, and mnist-train's last epoch. One GPU is the step alone, from the call's
    smallest count (every rank trained alone at once), and mnist-train's one-GPU run."""
    rows = records(os.path.join(run, "dist.jsonl"))
    counts = sorted({r["ranks"] for r in rows})
    linear = {}  # (impl, mode, batch, ranks) -> step ms
    busbw = {}  # (impl, ranks) -> GB/s at the largest size
    cnn = {}  # (mode, batch, ranks) -> step ms
    for r in rows:
        if r.get("bench") == "ddp" and r.get("model", "linear") == "linear":
            linear[(r["impl"], r["mode"], r["batch"], r["ranks"])] = r["step_ms"]
        elif r.get("bench") == "ddp":
            cnn[(r["mode"], r["batch"], r["ranks"])] = r["step_ms"]
        elif r.get("bench") == "allreduce" and r["bytes"] == 1 << 30:
            busbw[(r["impl"], r["ranks"])] = r["busbw_gbs"]
    batches = sorted({k[2] for k in linear})
    curves = {}  # (label, batch) -> [(gpus, images/s, efficiency)]
    for impl, mode, label in (("kiln", "ddp", "kiln"), ("kiln", "ddp_graph", "kiln, one graph a step"),
                              ("torch", "ddp", "PyTorch DDP")):
        for b in batches:
            alone = mode.replace("ddp", "alone")
            points = [(1, 1e3 * b / linear[(impl, alone, b, counts[0])], 1.0)]
            for n in counts:
                if (impl, mode, b, n) in linear:
                    points.append((n, 1e3 * n * b / linear[(impl, mode, b, n)],
                                   linear[(impl, alone, b, n)] / linear[(impl, mode, b, n)]))
            curves[(label, b)] = points
    train = {1: epochs(os.path.join(run, "train_1gpu.jsonl"))[-1]}
    for n in counts:
        name = "dist_train.jsonl" if n == counts[-1] else f"dist_train_{n}gpus.jsonl"
        if os.path.exists(os.path.join(run, name)):
            train[n] = epochs(os.path.join(run, name))[-1]
    return rows[0], counts, batches, curves, busbw, cnn, train


def scaling(run, plot=None):
    first, counts, batches, curves, busbw, cnn, train = scaling_data(run)
    labels = ("kiln", "kiln, one graph a step", "PyTorch DDP")
    for b in batches:
        print(f"8 × (Linear 4096→4096, ReLU), TF32, batch {b} per GPU, {first['device']}, {first['date']}: images a "
              "second over all GPUs, and efficiency (the step alone ÷ the data-parallel step):\n")
        print("| GPUs | kiln img/s | efficiency | kiln, one graph a step, img/s | efficiency | PyTorch DDP img/s "
              "| efficiency | kiln ÷ PyTorch img/s |")
        print("| --- " * 8 + "|")
        for n in [1] + counts:
            points = [next((p for p in curves[(label, b)] if p[0] == n), None) for label in labels]
            cells = [str(n)] + [f"{p[1]:.0f} | {p[2]:.2f}" if p else " | " for p in points]
            cells.append(f"{points[0][1] / points[2][1]:.2f}" if points[0] and points[2] else "")
            print("| " + " | ".join(cells) + " |")
        print()
    print("All-reduce of 1 GB (bus bandwidth, GB/s), mnist-train's CNN at batch 64 per GPU (the third epoch; "
          "each step one captured graph) and the CNN's data-parallel step at batch 64 per GPU (`dist-bench ddp "
          "--model cnn`, captured):\n")
    print("| GPUs | kiln busbw | NCCL busbw | PyTorch busbw | mnist-train epoch s | img/s | speed-up | test acc "
          "| CNN step ms | efficiency |")
    print("| --- " * 10 + "|")
    for n in [1] + counts:
        cells = [str(n)] + [f"{busbw[(i, n)]:.1f}" if (i, n) in busbw else "" for i in ("kiln", "nccl", "torch")]
        t = train.get(n)
        cells += [f"{t['seconds']:.3f}", f"{t['images_per_s']:.0f}", f"{t['images_per_s'] / train[1]['images_per_s']:.2f}",
                  f"{100 * t['test_accuracy']:.2f}%"] if t else [""] * 4
        alone, step = cnn.get(("alone_graph", 64, counts[0] if n == 1 else n)), cnn.get(("ddp_graph", 64, n))
        step = alone if n == 1 else step
        cells += [f"{step:.3f}", f"{alone / step:.2f}"] if alone and step else ["", ""]
        print("| " + " | ".join(cells) + " |")
    if plot:
        draw(plot, first, counts, batches, curves)


def draw(path, first, counts, batches, curves):
    """Images a second and efficiency against GPUs, kiln's and PyTorch's, each batch; ideal dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "kiln", "font.size": 9})
    gpus = [1] + counts
    fig, (throughput, efficiency) = plt.subplots(1, 2, figsize=(9, 3.6))
    styles = {"kiln": ("tab:red", "-"), "kiln, one graph a step": ("tab:orange", ":"), "PyTorch DDP": ("tab:blue", "-")}
    for (label, b), points in curves.items():
        color, line = styles[label]
        marker = "o" if b == batches[-1] else "s"
        n, images, eff = zip(*points)
        throughput.plot(n, [i / 1e3 for i in images], line, color=color, marker=marker, label=f"{label}, b{b}")
        efficiency.plot(n, eff, line, color=color, marker=marker, label=f"{label}, b{b}")
        if label == "kiln":
            throughput.plot(gpus, [points[0][1] * g / 1e3 for g in gpus], "--", color="grey", linewidth=0.8)
    throughput.set(xlabel="GPUs", ylabel="thousand images a second", title="8 × Linear 4096, TF32: throughput")
    efficiency.set(xlabel="GPUs", ylabel="step alone ÷ data-parallel step", title="efficiency", ylim=(0, 1.05))
    for ax in (throughput, efficiency):
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, [str(g) for g in gpus])
        ax.grid(alpha=0.3)
    efficiency.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"kiln and PyTorch DDP on {counts[-1]} × {first['device']}, {first['date']} "
                 "(dashed: kiln alone × GPUs)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})


if __name__ == "__main__":
    if sys.argv[1:2] == ["--scaling"]:
        scaling(sys.argv[2], sys.argv[4] if sys.argv[3:4] == ["--plot"] else None)
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "out/dist.jsonl")
        if len(sys.argv) > 3:
            mnist(*sys.argv[2:5])
