#!/usr/bin/python3
"""Markdown tables of a data-parallel run, from the JSON lines that `scripts/device-run dist` writes
to $OUT (dist.jsonl: dist-bench allreduce and ddp, scripts/bench_ddp_torch.py; dist_train.jsonl and
train_1gpu.jsonl: mnist-train on every GPU and on one, each step a captured graph;
dist_train_eager.jsonl: on every GPU with --graph off):

    python3 scripts/dist_table.py out/dist.jsonl [out/dist_train.jsonl out/train_1gpu.jsonl [out/dist_train_eager.jsonl]]

All-reduce: kiln's ProcessGroup against NCCL called directly in the same program and against
torch.distributed; DDP: the step of 8 x Linear(4096, 4096) alone and data-parallel, with the
efficiency (alone / data-parallel) of kiln and of PyTorch's DDP, default and tuned, and kiln's with
each step one captured CUDA graph; the same for mnist-train's CNN (kiln); mnist-train's epochs on
every GPU against one.
"""
import json
import sys


def size(b):
    for unit, name in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if b >= unit:
            return f"{b // unit}{name}"
    return str(b)


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
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


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out/dist.jsonl")
    if len(sys.argv) > 3:
        mnist(*sys.argv[2:5])
