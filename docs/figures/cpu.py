"""The CPU's figures (README.md, docs/benchmarks.md, kernels/cpu/), from the recorded CPU runs."""
import bench_cpu_report


def define(figure, table, runs):
    cpu = runs["2026-11-26-cpu"]
    default = runs["2026-11-26-cpu-default"]

    # docs/benchmarks.md: cpu-bench against PyTorch, each side's best process per op
    table("cpu-bench", lambda: bench_cpu_report.table(cpu.path, cpu.meta))
    kiln, torch = bench_cpu_report.best(cpu.path)

    def op(side, name, shape=None):
        rows = [r for r in side["results"] if r["name"] == name and (shape is None or r["shape"] == shape)]
        assert len(rows) == 1, (name, shape, rows)
        return rows[0]

    def speed(name):
        """kiln's speed over PyTorch's for one op (the table's last column)."""
        return op(torch, name)["ms"] / op(kiln, name)["ms"]

    matmuls = ("matmul", "matmul A^T.B", "matmul A.B^T")
    figure("cpu.matmul.gflops", cpu, (min(op(kiln, m)["gflops"] for m in matmuls),
                                      max(op(kiln, m)["gflops"] for m in matmuls)),
           "kiln's f32 matmul 1024^3, plain and transposed: GFLOP/s, lowest and highest")
    figure("cpu.matmul.torch-gflops", cpu, (min(op(torch, m)["gflops"] for m in matmuls),
                                            max(op(torch, m)["gflops"] for m in matmuls)),
           "PyTorch + OpenBLAS f32 matmul 1024^3: GFLOP/s, lowest and highest")
    conv2 = [speed(f"conv2 {p}") for p in ("forward", "backward-input", "backward-weight")]
    figure("cpu.conv2.speed-vs-torch", cpu, (min(conv2), max(conv2)),
           "conv2 (32 -> 64 channels, 26x26, batch 64): kiln's speed over PyTorch's, the three passes")
    conv2_gflops = [op(kiln, f"conv2 {p}")["gflops"] for p in ("forward", "backward-input", "backward-weight")]
    figure("cpu.conv2.gflops", cpu, (min(conv2_gflops), max(conv2_gflops)),
           "conv2 (32 -> 64 channels, 26x26, batch 64): kiln's GFLOP/s, the three passes, lowest and highest")
    figure("cpu.conv1.bwd-weight.speed-vs-torch", cpu, speed("conv1 backward-weight"),
           "conv1's weight gradient: kiln's speed over PyTorch's")
    figure("cpu.conv1.bwd-input.speed-vs-torch", cpu, speed("conv1 backward-input"),
           "conv1's input gradient: kiln's speed over PyTorch's")

    # README: mnist-train and PyTorch on the CPU
    def epoch(file, n=1):
        return cpu.epoch(file, n)

    def torch_epoch(model):
        return cpu.line("torch.jsonl", model=model, epoch=1)

    figure("cpu.default.best", default, 100 * max(e["test_accuracy"] for e in default.epochs("train_default.jsonl")),
           "CPU, default run (CNN, 14 epochs): best test accuracy, %")
    figure("cpu.cnn.epoch", cpu, epoch("train_cnn.jsonl")["seconds"], "CPU, CNN batch 64: one epoch, s")
    figure("cpu.cnn.images-per-s", cpu, epoch("train_cnn.jsonl")["images_per_s"], "CPU, CNN: images a second")
    figure("cpu.cnn.accuracy", cpu, 100 * epoch("train_cnn.jsonl")["test_accuracy"], "CPU, CNN: test accuracy, %")
    figure("cpu.cnn.torch", cpu, torch_epoch("cnn")["train_s"], "PyTorch on the CPU, CNN batch 64: one epoch, s")
    figure("cpu.cnn.torch-accuracy", cpu, torch_epoch("cnn")["test_accuracy"], "PyTorch, CNN: test accuracy, %")
    figure("cpu.mlp.epoch", cpu, epoch("train_mlp.jsonl")["seconds"], "CPU, MLP batch 64: one epoch, s")
    figure("cpu.mlp.images-per-s", cpu, epoch("train_mlp.jsonl")["images_per_s"], "CPU, MLP: images a second")
    figure("cpu.mlp.accuracy", cpu, 100 * epoch("train_mlp.jsonl")["test_accuracy"], "CPU, MLP: test accuracy, %")
    figure("cpu.mlp.torch", cpu, torch_epoch("mlp")["train_s"], "PyTorch on the CPU, MLP batch 64: one epoch, s")
    figure("cpu.mlp.torch-accuracy", cpu, torch_epoch("mlp")["test_accuracy"], "PyTorch, MLP: test accuracy, %")
    figure("cpu.mlp5000.accuracy", cpu, 100 * epoch("train_mlp_5000.jsonl")["test_accuracy"],
           "CPU, MLP on 5,000 images, batch 16, no schedule: test accuracy, %")
