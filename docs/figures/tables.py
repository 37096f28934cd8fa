"""The tables that scripts write into the docs, each from one recorded run (scripts/figures.py)."""
import contextlib
import io

import dist_table
import kernel_table
import step_profile


def printed(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fn(*args)
    return out.getvalue()


def define(figure, table, runs):
    h100 = runs["2026-11-27-h100-bench-cells"]
    # kernels/README.md: kernel-bench's every version against cuBLAS, cuDNN and copy bandwidth
    table("kernel-bench", lambda: kernel_table.tables(h100.json("kernels.json"), h100.meta))
    # docs/benchmarks.md: the data-parallel runs, all-reduce, DDP step and mnist-train on 2 and 4 GPUs
    for gpus in ("2xh200", "2xh100", "4xh100"):
        run = runs[f"2026-11-26-{gpus}-dist"]
        table(f"dist-{gpus}", lambda run=run: printed(dist_table.main, run.file("dist.jsonl"))
              + printed(dist_table.mnist, run.file("dist_train.jsonl"), run.file("train_1gpu.jsonl")))
    graph = runs["2026-11-27-2xh100-ddp-graph"]
    table("dist-2xh100-graph", lambda: printed(dist_table.main, graph.file("dist.jsonl"))
          + printed(dist_table.mnist, graph.file("dist_train.jsonl"), graph.file("train_1gpu.jsonl"),
                    graph.file("dist_train_eager.jsonl")))
    scale = runs["2026-11-27-4xh100-scaling"]
    table("scaling-4xh100", lambda: printed(dist_table.scaling, scale.path))
    table("dist-4xh100-scaling", lambda: printed(dist_table.main, scale.file("dist.jsonl"))
          + printed(dist_table.mnist, scale.file("dist_train.jsonl"), scale.file("train_1gpu.jsonl"),
                    scale.file("dist_train_eager.jsonl")))
    # kernels/README.md: a training step's kernels under Nsight Compute
    profile = runs["2026-11-30-h200-step-profile3"]
    table("step-profile", lambda: step_profile.table(profile, [
        ("b64", "profile_b64.csv", "batch 64, f32"), ("b64_tf32", "profile_b64_tf32.csv", "batch 64, `--tf32`"),
        ("b64_bf16", "profile_b64_bf16.csv", "batch 64, `--precision bf16`"),
        ("b512", "profile_b512.csv", "batch 512, f32"), ("b512_tf32", "profile_b512_tf32.csv", "batch 512, `--tf32`"),
        ("b512_bf16", "profile_b512_bf16.csv", "batch 512, `--precision bf16`")],
        top=8))

