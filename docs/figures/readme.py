"""The figures of README.md and docs/*.md, each from one recorded run of docs/runs/."""

import re


def define(figure, table, runs):
    h100 = runs["2026-11-26-h100"]
    h200x2 = runs["2026-11-26-2xh200-dist"]
    h100x2 = runs["2026-11-26-2xh100-dist"]

    # --- mnist-train and PyTorch on one H200 (CUDA, from one call); Vulkan on one H100 (another) ---
    train = runs["2026-11-29-h200-readme2"]

    def seconds_range(run, file):
        s = [e["seconds"] for e in run.epochs(file)]
        return min(s), max(s)

    def best(run, file):
        return 100 * max(e["test_accuracy"] for e in run.epochs(file))

    def default_run(prefix, backend, run, file):
        """The default run (CNN, 14 epochs) on one backend: accuracy, epochs, the whole run."""
        figure(f"{prefix}.default.best", run, best(run, file),
               f"{backend}, default run (CNN, 14 epochs): best test accuracy, %")
        figure(f"{prefix}.default.epoch-range", run, seconds_range(run, file),
               f"{backend}, default run: fastest and slowest epoch, s")
        figure(f"{prefix}.default.total", run,
               run.total_seconds(f"--device {backend.lower()} --data .device/mnist --metrics-out"),
               f"{backend}, default run from start to exit as mnist-train prints it, s")

    def kiln(name, file, n, what):
        e = train.epoch(file, n)
        figure(f"gpu.{name}", train, e["seconds"], f"CUDA, {what}: epoch {n}, s")
        return e["seconds"]

    def pytorch(name, model, batch, what, kiln_s):
        """PyTorch's second epoch in each mode, and its best mode's time over kiln's."""
        times = {}
        for mode in ("eager", "graph", "compile"):
            times[mode] = train.line("torch.jsonl", model=model, batch_size=batch, epoch=2, mode=mode,
                                     precision="default")["train_s"]
            figure(f"gpu.{name}.torch-{mode}", train, times[mode],
                   f"PyTorch 2.11 {mode} on the same GPU, {what}: the second epoch, s (cuDNN TF32 on, matmul TF32 off)")
        figure(f"gpu.{name}.torch-best-over-kiln", train, min(times.values()) / kiln_s,
               f"{what}: PyTorch's fastest mode's epoch over kiln's f32 epoch")

    default_run("gpu", "CUDA", train, "train.jsonl")
    cnn = kiln("cnn.epoch2", "train.jsonl", 2, "CNN batch 64, f32, the default run's second epoch")
    kiln("cnn.epoch2.tf32", "train_tf32.jsonl", 2, "CNN batch 64 with --tf32")
    # the same runs with --graph off: every kernel launched from the host
    kiln("cnn.epoch2.eager", "train_eager.jsonl", 2, "CNN batch 64, f32, --graph off")
    kiln("cnn.epoch2.tf32.eager", "train_tf32_eager.jsonl", 2, "CNN batch 64 with --tf32 --graph off")
    kiln("mlp.epoch.eager", "train_mlp_eager.jsonl", 1, "MLP batch 64, --graph off")
    kiln("b512.epoch2.eager", "train_b512_eager.jsonl", 2, "CNN batch 512, f32, --graph off")
    pytorch("cnn", "cnn", 64, "CNN batch 64", cnn)
    mlp = kiln("mlp.epoch", "train_mlp.jsonl", 1, "MLP batch 64")
    figure("gpu.mlp.accuracy", train, 100 * train.epoch("train_mlp.jsonl", 1)["test_accuracy"],
           "CUDA, MLP: test accuracy after one epoch, %")
    pytorch("mlp", "mlp", 64, "MLP batch 64", mlp)
    b512 = kiln("b512.epoch2", "train_b512.jsonl", 2, "CNN batch 512, f32")
    kiln("b512.epoch2.tf32", "train_b512_tf32.jsonl", 2, "CNN batch 512 with --tf32")
    pytorch("b512", "cnn", 512, "CNN batch 512", b512)

    # --- bf16 mixed precision (--precision bf16) beside f32, and PyTorch under autocast to bf16, in one
    # call ---
    bf16 = bf16_torch = train
    for name, what, b16_file, f32_file in (("cnn", "CNN batch 64", "train_bf16.jsonl", "train.jsonl"),
                                           ("mlp", "MLP batch 64", "train_mlp_bf16.jsonl", "train_mlp_3.jsonl"),
                                           ("b512", "CNN batch 512", "train_b512_bf16.jsonl", "train_b512.jsonl")):
        figure(f"gpu.bf16.{name}.epoch2", bf16, bf16.epoch(b16_file, 2)["seconds"],
               f"CUDA, {what}, --precision bf16: epoch 2, s")
        figure(f"gpu.bf16.{name}.f32.epoch2", bf16, bf16.epoch(f32_file, 2)["seconds"],
               f"CUDA, {what}, f32, in the same run: epoch 2, s")
    for name, what, tf32_file in (("cnn", "CNN batch 64", "train_tf32.jsonl"),
                                  ("b512", "CNN batch 512", "train_b512_tf32.jsonl")):
        figure(f"gpu.bf16.{name}.tf32.epoch2", bf16, bf16.epoch(tf32_file, 2)["seconds"],
               f"CUDA, {what}, --tf32, in the same run: epoch 2, s")
    for name, what, b16_file, f32_file in (("cnn", "CNN batch 64", "train_bf16.jsonl", "train.jsonl"),
                                           ("mlp", "MLP batch 64", "train_mlp_bf16.jsonl", "train_mlp_3.jsonl")):
        figure(f"gpu.bf16.{name}.accuracy3", bf16, 100 * bf16.epoch(b16_file, 3)["test_accuracy"],
               f"CUDA, {what}, --precision bf16: test accuracy after 3 epochs, %")
        figure(f"gpu.bf16.{name}.f32.accuracy3", bf16, 100 * bf16.epoch(f32_file, 3)["test_accuracy"],
               f"CUDA, {what}, f32: test accuracy after 3 epochs, %")
    for name, model, batch in (("cnn", "cnn", 64), ("mlp", "mlp", 64), ("b512", "cnn", 512)):
        for mode in ("graph",):
            figure(f"gpu.bf16.{name}.torch-{mode}", bf16_torch,
                   bf16_torch.line("torch.jsonl", model=model, batch_size=batch, epoch=2, mode=mode,
                                   precision="bf16")["train_s"],
                   f"PyTorch 2.11 {mode} under autocast to bf16, {model} batch {batch}: the second epoch, s")

    # --- kernel-bench: the README's summary of kernels/README.md's tables ---
    def k(family, version, shape):
        return h100.kernel(family, version, shape)

    n = "4096x4096x4096"
    figure("gpu.matmul.f32.4096.time-vs-cublas", h100,
           k("matmul", "production (FP32)", n)["ms"] / k("matmul", "cuBLAS SGEMM", n)["ms"],
           "f32 matmul 4096^3, production path (12_3xtf32): its time over cuBLAS SGEMM's")
    figure("gpu.matmul.07.4096.pct-cublas", h100, h100.kernel_share("matmul", "07_warptile", n),
           "matmul 07_warptile at 4096^3: % of cuBLAS SGEMM's speed")
    wgmma = runs["2026-11-26-h100-wgmma"]  # the run after 13's tile widths and register path
    figure("gpu.matmul.tf32.4096.pct-cublas", wgmma, wgmma.kernel_share("matmul", "production (TF32)", n),
           "TF32 matmul 4096^3, production path (13_tf32_wgmma): % of cuBLAS TF32's speed")
    figure("gpu.matmul.tf32.1024-2048.pct-cublas", wgmma,
           (min(wgmma.kernel_share("matmul", "production (TF32)", s) for s in ("1024x1024x1024", "2048x2048x2048")),
            max(wgmma.kernel_share("matmul", "production (TF32)", s) for s in ("1024x1024x1024", "2048x2048x2048"))),
           "TF32 matmul 1024^3 and 2048^3, production path: % of cuBLAS TF32's speed (least, most)")
    for conv, batch in (("conv1", 64), ("conv2", 64), ("conv1", 512), ("conv2", 512)):
        c = 1 if conv == "conv1" else 32
        o, hw = (32, 28) if conv == "conv1" else (64, 26)
        shape = f"{conv} x[{batch},{c},{hw},{hw}] w[{o},{c},3,3]"
        figure(f"gpu.conv.{conv}.b{batch}.fwd-time-vs-cudnn", h100,
               k("conv2d", "fwd production + bias + ReLU in the epilogue", shape)["ms"] / k("conv2d", "fwd cuDNN", shape)["ms"],
               f"{conv} forward at batch {batch}, bias and ReLU in the epilogue: time over cuDNN FP32's")
    # bf16 convolutions on the large layer against cuDNN BF16, production's path (one H200)
    large = "large x[64,128,56,56] w[128,128,3,3] pad 1"
    rule, weight = runs["2026-11-29-h200-bf16-ring-rule"], runs["2026-11-29-h200-weight-offsets"]
    for what, run, file in (("fwd", rule, "kernels_large.json"), ("bwd-input", rule, "kernels_large.json"),
                            ("bwd-weight", weight, "kernels_large_new.json")):
        figure(f"gpu.conv.large.bf16.{what}.time-vs-cudnn", run,
               run.kernel("conv2d", f"{what} production (BF16)", large, file)["ms"]
               / run.kernel("conv2d", f"{what} cuDNN BF16", large, file)["ms"],
               f"bf16 conv2d {what} at {large}, production's path: time over cuDNN BF16's (H200)")
    figure("gpu.softmax.mnist.pct-copy", h100,
           h100.kernel_share("softmax", "production (CudaBackend)", "[65536, 10]"),
           "softmax over MNIST's logits [65536, 10]: % of copy bandwidth")
    bn_run = runs["2026-11-28-h100-batch-norm-cluster"]
    bn = [bn_run.kernel_share("batch_norm", f"{pass_}, cluster", shape)
          for shape in ("[64, 32, 26, 26]", "[128, 64, 56, 56]") for pass_ in ("forward", "backward")]
    figure("gpu.batch-norm.pct-copy", bn_run, (min(bn), max(bn)),
           "batch norm, forward and backward on both shapes by the path each takes: % of copy")

    # --- through Vulkan on the same H100 ---
    def epoch(file, n):
        return h100.epoch(file, n)

    default_run("vk", "Vulkan", h100, "train_vulkan.jsonl")
    figure("vk.mlp.accuracy", h100, 100 * epoch("train_vulkan_mlp.jsonl", 1)["test_accuracy"],
           "Vulkan, MLP: test accuracy after one epoch, %")
    figure("vk.mlp.epoch", h100, epoch("train_vulkan_mlp.jsonl", 1)["seconds"], "Vulkan, MLP: one epoch, s")
    figure("vk.b512.epoch2", h100, epoch("train_vulkan_b512.jsonl", 2)["seconds"],
           "Vulkan, CNN batch 512: second epoch, s")
    figure("vk.b512.accuracy", h100, 100 * epoch("train_vulkan_b512.jsonl", 2)["test_accuracy"],
           "Vulkan, CNN batch 512: test accuracy after two epochs, %")
    steps = [r["ms"] for r in h100.json("vulkan.json")["results"] if r["section"] == "step" and r["name"].startswith("window")]
    figure("vk.step.ms", h100, (min(steps), max(steps)),
           "vulkan-bench: a CNN training step at batch 64, device time, the three windows of 100 steps, ms")
    for binary in ("test_backend_ops", "test_vulkan"):
        cases, asserts = h100.doctest(f"{binary} --backend=vulkan")
        figure(f"vk.tests.{binary}.cases", h100, cases, f"{binary} --backend=vulkan: test cases passed")
        figure(f"vk.tests.{binary}.assertions", h100, asserts, f"{binary} --backend=vulkan: assertions passed")

    # --- data parallelism on 2 GPUs ---
    def allreduce(run, impl, size, **ranks):
        return run.line("dist.jsonl", bench="allreduce", impl=impl, bytes=size, **ranks)

    def ddp(run, impl, mode, batch, **ranks):
        rows = [r for r in run.lines("dist.jsonl", bench="ddp", impl=impl, mode=mode, batch=batch, **ranks)
                if r.get("model", "linear") == "linear"]
        assert len(rows) == 1, rows
        return rows[0]

    linear = ("512x4096x4096 B^T", "512x4096x4096", "4096x4096x512 A^T")
    figure("gpu.matmul.tf32.linear.pct-cublas", wgmma,
           (min(wgmma.kernel_share("matmul", "production (TF32)", s) for s in linear),
            max(wgmma.kernel_share("matmul", "production (TF32)", s) for s in linear)),
           "TF32 matmul, production path, a Linear(4096, 4096)'s three products at batch 512: % of cuBLAS TF32's "
           "speed (least, most)")
    # time to 99%: mnist-train from process start to exit, five seeds of each recipe (README)
    t99 = train
    adam = "--optimizer adam --lr 0.003 --scheduler onecycle --tf32 --batch-size 128 --epochs 3"
    recipes = {"fast": f"--model fast {adam}", "cnn": f"--model cnn {adam}"}
    for key, recipe in recipes.items():
        rows = t99.lines("time99.jsonl", recipe=recipe)
        assert len(rows) == 5, rows
        figure(f"gpu.time99.{key}.seconds", t99, (min(r["seconds"] for r in rows), max(r["seconds"] for r in rows)),
               f"time to 99%, {key} recipe: each of five seeds' process start to exit, s (least, most)")
        if key == "fast":
            figure(f"gpu.time99.{key}.mean-seconds", t99, sum(r["seconds"] for r in rows) / 5,
                   f"time to 99%, {key} recipe: the mean of five seeds' process start to exit, s")
        figure(f"gpu.time99.{key}.accuracy", t99, 100 * sum(r["test_accuracy"] for r in rows) / 5,
               f"time to 99%, {key} recipe: the mean of five seeds' final test accuracy, %")

    # the Linear 4096 model's step alone on one H100 (docs/benchmarks.md): after matmul 13's tile
    # widths; after the loss's mean over many blocks and weight gradients without a copy; after
    # the optimizer's one launch
    figure("dist.h100.alone.kiln.b512.wgmma.ms", wgmma, ddp(wgmma, "kiln", "alone", 512)["step_ms"],
           "1 x H100: kiln's step of 8 x Linear 4096, TF32, batch 512, alone, after matmul 13's tiles, ms")
    fixes = runs["2026-11-26-h100-ddp-step"]
    figure("dist.h100.alone.kiln.b512.fixes.ms", fixes, ddp(fixes, "kiln", "alone", 512)["step_ms"],
           "1 x H100: kiln's step of 8 x Linear 4096, TF32, batch 512, alone, after the reduction and "
           "gradient-layout fixes, ms")
    optim = runs["2026-11-26-h100-ddp-optim"]
    figure("dist.h100.alone.kiln.b512.optim.ms", optim, ddp(optim, "kiln", "alone", 512)["step_ms"],
           "1 x H100: kiln's step of 8 x Linear 4096, TF32, batch 512, alone, after the optimizer's one launch, ms")
    step = runs["2026-11-27-h100-ddp-fused"]
    for impl in ("kiln", "torch"):
        for batch in (512, 2048):
            figure(f"dist.h100.alone.{impl}.b{batch}.ms", step, ddp(step, impl, "alone", batch)["step_ms"],
                   f"1 x H100: {impl}'s step of 8 x Linear 4096, TF32, batch {batch}, alone, ms")

    kb4, mb1, mb16, gb1 = 4096, 1 << 20, 16 << 20, 1 << 30
    for impl in ("kiln", "nccl", "torch"):
        for size, label in ((kb4, "4k"), (mb1, "1m")):
            figure(f"dist.h200.allreduce.{impl}.{label}.us", h200x2, allreduce(h200x2, impl, size)["us"],
                   f"2 x H200: {impl}'s all-reduce of {size} bytes, µs")
        for size, label in ((mb16, "16m"), (gb1, "1g")):
            figure(f"dist.h200.allreduce.{impl}.{label}.busbw", h200x2, allreduce(h200x2, impl, size)["busbw_gbs"],
                   f"2 x H200: {impl}'s all-reduce of {size} bytes, bus bandwidth GB/s")
    for run, gpu in ((h200x2, "h200"), (h100x2, "h100")):
        for batch in (512, 2048):
            figure(f"dist.{gpu}.ddp.kiln.b{batch}", run, ddp(run, "kiln", "ddp", batch)["efficiency"],
                   f"2 x {gpu.upper()}: kiln's DDP efficiency, 8 x Linear 4096, TF32, batch {batch} per GPU")
            figure(f"dist.{gpu}.ddp.torch.b{batch}", run, ddp(run, "torch", "ddp", batch)["efficiency"],
                   f"2 x {gpu.upper()}: PyTorch DDP's efficiency, batch {batch} per GPU")
            figure(f"dist.{gpu}.ddp.torch-tuned.b{batch}", run, ddp(run, "torch", "ddp_tuned", batch)["efficiency"],
                   f"2 x {gpu.upper()}: PyTorch DDP's efficiency, tuned buckets, batch {batch} per GPU")
        small = [allreduce(run, "kiln", b)["time_ratio"] for b in (4096, 16384, 65536, 262144, mb1)]
        figure(f"dist.{gpu}.allreduce.small.kiln-over-nccl", run, (min(small), max(small)),
               f"2 x {gpu.upper()}: kiln's all-reduce time over NCCL's, 4 KB to 1 MB")
        one, many = run.epochs("train_1gpu.jsonl"), run.epochs("dist_train.jsonl")
        speedups = [b["images_per_s"] / a["images_per_s"] for a, b in zip(one, many)]
        figure(f"dist.{gpu}.mnist.speedup", run, (min(speedups), max(speedups)),
               f"2 x {gpu.upper()}: mnist-train's CNN at batch 64 per GPU, images a second on 2 GPUs over 1, epochs 1-3")
    # the H200 pair's: kiln's step against PyTorch's, and the epochs behind the speed-up
    ratios = [ddp(h200x2, "kiln", "alone", b)["step_ms"] / ddp(h200x2, "torch", "alone", b)["step_ms"] for b in (512, 2048)]
    figure("dist.h200.linear-step.kiln-over-torch", h200x2, (min(ratios), max(ratios)),
           "H200: kiln's 8 x Linear step alone over PyTorch's, batch 512 and 2048")
    one, many = h200x2.epochs("train_1gpu.jsonl"), h200x2.epochs("dist_train.jsonl")
    figure("dist.h200.mnist.epoch-2gpu", h200x2, (min(e["seconds"] for e in many), max(e["seconds"] for e in many)),
           "2 x H200: mnist-train's epoch on 2 GPUs, s (epochs 1-3)")
    figure("dist.h200.mnist.epoch-1gpu", h200x2, (min(e["seconds"] for e in one), max(e["seconds"] for e in one)),
           "H200: mnist-train's epoch on 1 GPU, s (epochs 1-3)")
    small_us = [allreduce(h100x2, "kiln", b)["us"] for b in (4096, 16384, 65536, 262144, mb1)]
    figure("dist.h100.allreduce.small.us", h100x2, (min(small_us), max(small_us)),
           "2 x H100: kiln's all-reduce from 4 KB to 1 MB, µs")
    torch_us = [allreduce(h100x2, "torch", b)["us"] for b in (4096, 16384, 65536, 262144, mb1)]
    figure("dist.h100.allreduce.small.torch-us", h100x2, (min(torch_us), max(torch_us)),
           "2 x H100: PyTorch's all-reduce from 4 KB to 1 MB, µs")
    figure("dist.h100.torch.linear-step.b2048", h100x2, ddp(h100x2, "torch", "alone", 2048)["step_ms"],
           "H100: PyTorch's 8 x Linear 4096 step alone at batch 2048, ms")

    # --- a data-parallel step captured with its all-reduces, 2 x H100 ---
    graph = runs["2026-11-27-2xh100-ddp-graph"]

    def cnn_step(mode, batch):
        return graph.line("dist.jsonl", bench="ddp", impl="kiln", model="cnn", mode=mode, batch=batch)

    for mode in ("ddp", "ddp_graph", "alone_graph"):
        figure(f"dist.graph.cnn.b64.{mode}.ms", graph, cnn_step(mode, 64)["step_ms"],
               f"2 x H100: dist-bench ddp --model cnn, batch 64 per GPU, {mode} step, ms")
    figure("dist.graph.cnn.b64.efficiency", graph, cnn_step("ddp_graph", 64)["efficiency"],
           "2 x H100: the CNN's DDP efficiency at batch 64 per GPU, each step one graph")
    figure("dist.graph.linear.b2048.efficiency", graph, ddp(graph, "kiln", "ddp_graph", 2048)["efficiency"],
           "2 x H100: 8 x Linear 4096 DDP efficiency at batch 2048 per GPU, each step one graph")
    figure("dist.graph.linear.b2048.eager-efficiency", graph, ddp(graph, "kiln", "ddp", 2048)["efficiency"],
           "2 x H100: 8 x Linear 4096 DDP efficiency at batch 2048 per GPU, eager, same call")
    for file, name, what in (("dist_train.jsonl", "2gpu", "2 GPUs, each step one graph"),
                             ("dist_train_eager.jsonl", "2gpu-eager", "2 GPUs, --graph off"),
                             ("train_1gpu.jsonl", "1gpu", "1 GPU, each step one graph")):
        figure(f"dist.graph.mnist.epoch-{name}", graph, seconds_range(graph, file),
               f"mnist-train's CNN at batch 64 per GPU, {what}: fastest and slowest of epochs 1-3, s")
    one, many = graph.epochs("train_1gpu.jsonl"), graph.epochs("dist_train.jsonl")
    speedups = [b["images_per_s"] / a["images_per_s"] for a, b in zip(one, many)]
    figure("dist.graph.mnist.speedup", graph, (min(speedups), max(speedups)),
           "2 x H100: mnist-train's images a second on 2 GPUs over 1, both captured, epochs 1-3")

    # --- the scaling curve: 2 and 4 ranks on 4 x H100 in one call ---
    scale = runs["2026-11-27-4xh100-scaling"]
    for n in (2, 4):
        for batch in (512, 2048):
            for impl in ("kiln", "torch"):
                figure(f"dist.scale.{n}.{impl}.b{batch}.efficiency", scale,
                       ddp(scale, impl, "ddp", batch, ranks=n)["efficiency"],
                       f"{n} x H100: {impl}'s DDP efficiency, 8 x Linear 4096, TF32, batch {batch} per GPU")
            images = {impl: 1e3 * n * batch / ddp(scale, impl, "ddp", batch, ranks=n)["step_ms"]
                      for impl in ("kiln", "torch")}
            figure(f"dist.scale.{n}.b{batch}.kiln-over-torch", scale, images["kiln"] / images["torch"],
                   f"{n} x H100: kiln's DDP images a second over PyTorch DDP's, 8 x Linear 4096, batch {batch} per GPU")
    figure("dist.scale.4.allreduce.1g.busbw-pct-nccl", scale,
           100 * allreduce(scale, "kiln", gb1, ranks=4)["busbw_gbs"] / allreduce(scale, "nccl", gb1, ranks=4)["busbw_gbs"],
           "4 x H100: kiln's all-reduce bus bandwidth at 1 GB as a share of NCCL's called directly, %")
    figure("dist.scale.4.allreduce.1g.busbw", scale, allreduce(scale, "kiln", gb1, ranks=4)["busbw_gbs"],
           "4 x H100: kiln's all-reduce bus bandwidth at 1 GB, GB/s")
    one, four = scale.epochs("train_1gpu.jsonl"), scale.epochs("dist_train.jsonl")
    figure("dist.scale.4.mnist.epoch", scale, four[-1]["seconds"],
           "4 x H100: mnist-train's CNN at batch 64 per GPU, each step one graph, the third epoch, s")
    figure("dist.scale.4.mnist.speedup", scale, four[-1]["images_per_s"] / one[-1]["images_per_s"],
           "4 x H100: mnist-train's images a second on 4 GPUs over 1, the third epoch")
    for cap in (8, 16):
        row = next(r for r in scale.lines("ctas.jsonl", mode="ddp", batch=2048)
                   if r["nccl_env"].get("NCCL_MAX_CTAS") == str(cap))
        figure(f"dist.scale.4.ctas{cap}.b2048.efficiency", scale, row["efficiency"],
               f"4 x H100: kiln's DDP efficiency at batch 2048 with NCCL_MAX_CTAS={cap}")
        figure(f"dist.scale.4.ctas{cap}.allreduce.ms", scale, row["grads_allreduce_us"] / 1e3,
               f"4 x H100: the gradients' all-reduce alone with NCCL_MAX_CTAS={cap}, ms")
    row = ddp(scale, "kiln", "ddp", 2048, ranks=4)
    figure("dist.scale.4.allreduce.ms", scale, row["grads_allreduce_us"] / 1e3,
           "4 x H100: the gradients' all-reduce alone (537 MB), NCCL's default blocks, ms")

    # dist-bench ddp's console breakdown of the step on the GPU (forward / backward / optimizer, ms)
    block = scale.log_block("LD_LIBRARY_PATH -np 4 .device/bin/dist-bench ddp --json")
    breakdown = re.search(r"\n\s+2048 \|.*\n\s+GPU ms, forward / backward / optimizer: alone [\d.]+ / ([\d.]+) / [\d.]+, "
                          r"DDP [\d.]+ / ([\d.]+) /", block)
    figure("dist.scale.4.b2048.backward-alone.ms", scale, float(breakdown.group(1)),
           "4 x H100: 8 x Linear 4096 at batch 2048, backward's GPU time, the step alone, ms")
    figure("dist.scale.4.b2048.backward-ddp.ms", scale, float(breakdown.group(2)),
           "4 x H100: the same under DDP (to the last bucket's all-reduce done), ms")

    # the backward beside an all-reduce of the gradients' size, without DDP (dist-bench ddp's (d))
    contention = runs["2026-11-27-4xh100-contention"]
    for mode, tag, what in (("alone", "alone", "alone"),
                            ("alone_beside_allreduce", "beside", "beside an all-reduce of the gradients' size"),
                            ("ddp", "ddp", "under DDP")):
        figure(f"dist.contention.4.b2048.backward-{tag}.ms", contention,
               ddp(contention, "kiln", mode, 2048, ranks=4)["backward_ms"],
               f"4 x H100: 8 x Linear 4096, batch 2048, the backward's GPU time {what}, ms")
