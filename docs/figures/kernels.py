"""The figures that kernels/README.md quotes outside its generated tables, from one recorded run.

kernel-bench (kernels.json) and vulkan-bench (vulkan.json) of docs/runs/2026-11-26-h100: one H100
80GB HBM3, `scripts/device-run tests bench train torch vulkan`, build d7a3e53.
"""


def define(figure, table, runs):
    h100 = runs["2026-11-26-h100"]

    def kernel(family, version, shape):
        return h100.kernel(family, version, shape)

    def vulkan(section, name):
        return h100.vulkan(section, name)

    def pct_copy(family, version, shape):
        return h100.kernel_share(family, version, shape)

    # ---- the reading order: softmax's versions on long rows ----
    long_rows = "[4096, 32768]"
    figure("kernels.softmax.long-rows.v1.pct-copy", h100, pct_copy("softmax", "1 naive (thread per row)", long_rows),
           "softmax version 1 (thread per row) on [4096, 32768], % of the copy bandwidth")

    # ---- the Vulkan kernels against the CUDA path, cuDNN and cuBLAS (ms unless named) ----
    conv2 = "conv2 x[64,32,26,26] w[64,32,3,3]"
    fc1 = "64x128x9216 B^T"
    big = "4096x4096x4096"

    # conv2 of the MNIST CNN at batch 64
    figure("kernels.cuda.conv2.fwd.ms", h100,
           kernel("conv2d", "fwd production + bias + ReLU in the epilogue", conv2)["ms"],
           "kernel-bench: CUDA production conv2 forward at batch 64, bias and ReLU in the epilogue, ms")

    # fc1 forward, 64 x 128 x 9216 with B transposed
    figure("kernels.cuda.fc1.fwd.ms", h100, kernel("matmul", "production (FP32)", fc1)["ms"],
           "kernel-bench: CUDA production matmul (FP32) 64x128x9216 B^T, ms")

    # matmul 4096^3
    figure("kernels.vulkan.matmul.4096.f32.ms", h100, vulkan("matmul", "4096^3, f32")["ms"],
           "vulkan-bench: matmul 4096^3 in f32 (gemm.glsl), device ms per call")
    figure("kernels.vulkan.matmul.4096.coop.ms", h100, vulkan("matmul", "4096^3, f16 cooperative matrices")["ms"],
           "vulkan-bench: matmul 4096^3 on f16 cooperative matrices, device ms per call")
    figure("kernels.cuda.matmul.4096.fp32.ms", h100, kernel("matmul", "production (FP32)", big)["ms"],
           "kernel-bench: CUDA production matmul (FP32) at 4096^3, ms")
    figure("kernels.cuda.matmul.4096.tf32.ms", h100, kernel("matmul", "production (TF32)", big)["ms"],
           "kernel-bench: CUDA production matmul (TF32) at 4096^3, ms")
    figure("kernels.cuda.matmul.4096.tf32.tflops", h100, kernel("matmul", "production (TF32)", big)["value"],
           "kernel-bench: CUDA production matmul (TF32) at 4096^3, TFLOP/s")
    figure("kernels.cublas.matmul.4096.tf32.ms", h100, kernel("matmul", "cuBLAS TF32", big)["ms"],
           "kernel-bench: cuBLAS TF32 at 4096^3, ms")
    figure("kernels.cublas.matmul.4096.sgemm.ms", h100, kernel("matmul", "cuBLAS SGEMM", big)["ms"],
           "kernel-bench: cuBLAS SGEMM at 4096^3, ms")

    # memory-bound kernels on [4096, 4096] f32 (64 MB)
    figure("kernels.vulkan.copy.ms", h100, vulkan("bandwidth", "copy")["ms"],
           "vulkan-bench: copy of 64 MB ([4096, 4096] f32), device ms per call")

    # whole training steps of the MNIST CNN, batch 64: three windows of 100 steps
    windows = [r["ms"] for r in h100.json("vulkan.json")["results"]
               if r["section"] == "step" and r["name"].startswith("window")]

    # a training step's kernel time (ncu) against the step's time in mnist-train's epochs
    import step_profile
    # (the profile and the training run: one call, docs/runs/2026-11-27-h100-bf16-vec)
    profile = trained = runs["2026-11-27-h100-bf16-vec"]
    for tag, csv, what in (("b64", "profile_b64.csv", "f32"), ("b64-bf16", "profile_b64_bf16.csv", "bf16")):
        summary = step_profile.summary(step_profile.kernels(profile.file(csv)))
        figure(f"kernels.step.{tag}.kernels", profile, summary["kernels_per_step"],
               f"kernels a training step, CNN batch 64, {what}")
        figure(f"kernels.step.{tag}.us", profile, summary["us_per_step"],
               f"kernel time a step (ncu), CNN batch 64, {what}, µs")
    # the bf16 step at batch 512: the ReLU backward and conv2d's pairing passes before the elementwise
    # kernels' vectorised path and pair_rows (docs/runs/2026-11-27-h100-bf16-profile) and after
    def per_step(run, kernel_names, csv="profile_b512_bf16.csv"):
        table = step_profile.summary(step_profile.kernels(run.file(csv)))["kernels"]
        return sum(e["us_per_step"] for e in table if e["kernel"] in kernel_names)
    before = runs["2026-11-27-h100-bf16-profile"]
    figure("kernels.step.b512-bf16.relu-backward.before.us", before, per_step(before, {"unary_backward_kernel"}),
           "CNN batch 512, bf16: the ReLU backward's kernel time a step, one element a thread, µs")
    figure("kernels.step.b512-bf16.relu-backward.us", profile, per_step(profile, {"map_vec_kernel (UnaryGrad)"}),
           "CNN batch 512, bf16: the ReLU backward's kernel time a step, 16 bytes a thread, µs")
    figure("kernels.step.b512-bf16.pairing.before.us", before,
           per_step(before, {"conv2d::pair_images_kernel", "conv2d::pair_channels_kernel"}),
           "CNN batch 512, bf16: conv2d's pairing passes a step, one element a thread, µs")
    figure("kernels.step.b512-bf16.pairing.us", profile, per_step(profile, {"conv2d::pair_rows_kernel"}),
           "CNN batch 512, bf16: conv2d's pairing passes a step, pair_rows, µs")
    # after AutocastGuard::cast_ahead: the parameters' casts in one launch (another call, same GPU kind)
    ahead = runs["2026-11-27-h100-cast-ahead"]
    table = step_profile.summary(step_profile.kernels(ahead.file("profile_b64_bf16.csv")))
    figure("kernels.step.b64-bf16.ahead.kernels", ahead, table["kernels_per_step"],
           "kernels a training step, CNN batch 64, bf16, parameters cast ahead")
    figure("kernels.step.b64-bf16.ahead.us", ahead, table["us_per_step"],
           "kernel time a step (ncu), CNN batch 64, bf16, parameters cast ahead, µs")
    casts = [e for e in table["kernels"] if e["kernel"] == "map_vec_kernel (Convert)"][0]
    figure("kernels.step.b64-bf16.ahead.casts", ahead, casts["launches_per_step"],
           "CNN batch 64, bf16, parameters cast ahead: the conversion kernels a step (each op's own casts)")
    figure("kernels.step.b64-bf16.ahead.casts-us", ahead, casts["us_per_step"],
           "CNN batch 64, bf16, parameters cast ahead: the conversion kernels' time a step, µs")
    casts_before = [e for e in step_profile.summary(step_profile.kernels(profile.file("profile_b64_bf16.csv")))["kernels"]
                    if e["kernel"] == "map_vec_kernel (Convert)"][0]
    figure("kernels.step.b64-bf16.casts", profile, casts_before["launches_per_step"],
           "CNN batch 64, bf16, each op casting its own inputs: the conversion kernels a step")
    figure("kernels.step.b64-bf16.casts-us", profile, casts_before["us_per_step"],
           "CNN batch 64, bf16, each op casting its own inputs: the conversion kernels' time a step, µs")
    for name, file, what in (("cnn", "train_bf16.jsonl", "CNN batch 64"), ("mlp", "train_mlp_bf16.jsonl", "MLP batch 64"),
                             ("mlp-f32", "train_mlp_3.jsonl", "MLP batch 64 in f32"),
                             ("b512", "train_b512_bf16.jsonl", "CNN batch 512")):
        figure(f"kernels.ahead.{name}.epoch2", ahead, ahead.epoch(file, 2)["seconds"],
               f"mnist-train {what}, --precision bf16 unless said, parameters cast ahead: epoch 2, s")
    for tag, file, what in (("b64", "train.jsonl", "the default CUDA run (f32)"),
                            ("b64-bf16", "train_bf16.jsonl", "the CUDA run in bf16")):
        epochs = [e["seconds"] for e in trained.epochs(file)]
        figure(f"kernels.step.{tag}.wall-us", trained, 1e6 * min(epochs) / 938,
               f"the fastest epoch of {what} (its training, as mnist-train times it) over its 938 steps, µs a step")


    # the optimizer steps in 16-byte vectors where every operand is aligned (kernel-bench --only
    # optim: both paths in one call) and what that did to the step and the epochs
    vec = runs["2026-11-27-h100-optim-vec"]
    cnn_shape, linear_shape = "8 tensors, 1199882 elements", "16 tensors, 134250496 elements"
    for tag, rule, shape in (("adadelta", "Adadelta (mnist-train's)", cnn_shape), ("adam", "Adam", cnn_shape),
                             ("sgd", "SGD (dist-bench ddp's)", linear_shape)):
        for path, version in (("vectors", "vectors (operands 16-byte aligned)"),
                              ("scalar", "one element at a time (operands 4 bytes off)")):
            figure(f"kernels.optim.{tag}.{path}.us", vec, 1e3 * vec.kernel("optim", f"{rule}, {version}", shape)["ms"],
                   f"{rule} step on {shape}, {version}, µs")
            if tag == "sgd":
                figure(f"kernels.optim.{tag}.{path}.pct-copy", vec, vec.kernel_share("optim", f"{rule}, {version}", shape),
                       f"{rule} step on {shape}, {version}: GB/s as a share of copy bandwidth, %")
    for tag, run in (("before", ahead), ("after", vec)):
        table = step_profile.summary(step_profile.kernels(run.file("profile_b64.csv")))["kernels"]
        step = [e for e in table if e["kernel"] == "multi_tensor_kernel"][0]
        figure(f"kernels.step.b64.optim-us.{tag}", run, step["us_per_step"],
               f"CNN batch 64, f32: the optimizer step's kernel time a step under ncu, {tag} the vector path, µs")
    regs = runs["2026-11-27-h100-optim-regs"]  # five operands two vectors deep
    for path, version in (("vectors", "vectors (operands 16-byte aligned)"),
                          ("scalar", "one element at a time (operands 4 bytes off)")):
        figure(f"kernels.optim.adam.regs.{path}.us", regs, 1e3 * regs.kernel("optim", f"Adam, {version}", cnn_shape)["ms"],
               f"Adam step on {cnn_shape}, {version}, after five operands went two vectors deep, µs")
    for name, file, what in (("cnn", "train_bf16.jsonl", "CNN batch 64, bf16"), ("mlp", "train_mlp_bf16.jsonl", "MLP batch 64, bf16"),
                             ("mlp-f32", "train_mlp_3.jsonl", "MLP batch 64, f32"), ("cnn-f32", "train.jsonl", "CNN batch 64, f32"),
                             ("b512", "train_b512_bf16.jsonl", "CNN batch 512, bf16")):
        figure(f"kernels.optimvec.{name}.epoch2", vec, vec.epoch(file, 2)["seconds"],
               f"mnist-train {what}, after the optimizer's vector path: epoch 2, s")
    figure("kernels.ahead.cnn-f32.epoch2", ahead, ahead.epoch("train.jsonl", 2)["seconds"],
           "mnist-train CNN batch 64, f32, the call before the optimizer's vector path: epoch 2, s")

    # mnist-train's running sums in place (Tensor::add_) and a replay's inputs in one copy_many:
    # the launches a step before (the optimizer's vector path) and after
    after = runs["2026-11-27-h100-launches"]
    final = runs["2026-11-27-h100-mean-grad"]  # and a small mean's gradient in one kernel
    for tag, run, csv, what in (("mlp.before", runs["2026-11-27-h100-mlp-profile"], "profile_mlp.csv", "MLP f32, before"),
                                ("mlp.after", after, "profile_mlp.csv", "MLP f32, after"),
                                ("b64-bf16.before", vec, "profile_b64_bf16.csv", "CNN batch 64 bf16, before"),
                                ("b64-bf16.after", after, "profile_b64_bf16.csv", "CNN batch 64 bf16, after")):
        summary = step_profile.summary(step_profile.kernels(run.file(csv)))
        figure(f"kernels.launches.{tag}.kernels", run, summary["kernels_per_step"], f"kernels a training step, {what}")
        figure(f"kernels.launches.{tag}.us", run, summary["us_per_step"], f"kernel time a step (ncu), {what}, µs")
    for tag, csv, what in (("mlp", "profile_mlp.csv", "MLP f32"), ("mlp-bf16", "profile_mlp_bf16.csv", "MLP bf16"),
                           ("b64-bf16", "profile_b64_bf16.csv", "CNN batch 64 bf16")):
        summary = step_profile.summary(step_profile.kernels(final.file(csv)))
        figure(f"kernels.mean-grad.{tag}.kernels", final, summary["kernels_per_step"],
               f"kernels a training step, {what}, a small mean's gradient in one kernel")
    summary = step_profile.summary(step_profile.kernels(final.file("profile_b64_bf16.csv")))
    figure("kernels.mean-grad.b64-bf16.us", final, summary["us_per_step"],
           "kernel time a step (ncu), CNN batch 64 bf16, a small mean's gradient in one kernel, µs")
    # kernels.KEY.TAG.kernels and .us: a step's launches and kernel time (ncu) in each of run's profiles
    cnn_bf16 = (("b64-bf16", "profile_b64_bf16.csv", "CNN batch 64 bf16"),
                ("b512-bf16", "profile_b512_bf16.csv", "CNN batch 512 bf16"))
    def step_figures(key, run, profiles, what_changed):
        for tag, csv, what in profiles:
            summary = step_profile.summary(step_profile.kernels(run.file(csv)))
            figure(f"kernels.{key}.{tag}.kernels", run, summary["kernels_per_step"],
                   f"kernels a training step, {what}, {what_changed}")
            figure(f"kernels.{key}.{tag}.us", run, summary["us_per_step"],
                   f"kernel time a step (ncu), {what}, {what_changed}, µs")
    # kernels.KEY.NAME.epoch2: mnist-train's second epoch in run, for each of `names`
    epoch_files = {"cnn": ("train_bf16.jsonl", "CNN batch 64, bf16"), "b512": ("train_b512_bf16.jsonl", "CNN batch 512, bf16"),
                   "cnn-f32": ("train.jsonl", "CNN batch 64, f32"), "cnn-tf32": ("train_tf32.jsonl", "CNN batch 64, --tf32"),
                   "mlp": ("train_mlp_bf16.jsonl", "MLP batch 64, bf16"), "mlp-f32": ("train_mlp_3.jsonl", "MLP batch 64, f32")}
    def epoch_figures(key, run, names, what_changed):
        for name in names:
            file, what = epoch_files[name]
            figure(f"kernels.{key}.{name}.epoch2", run, run.epoch(file, 2)["seconds"],
                   f"mnist-train {what}: epoch 2 ({what_changed}), s")
    # backward's gradient conversions in one launch, fc1 on matmul 16 and the bias gradients N first
    held = runs["2026-11-27-h100-fc1-split"]
    step_figures("held", held, cnn_bf16 + (("mlp-bf16", "profile_mlp_bf16.csv", "MLP bf16"),),
                 "conversions held and fc1 on matmul 16")
    for name, file, what in (("mlp-f32", "train_mlp_3.jsonl", "MLP, f32"), ("mlp", "train_mlp_bf16.jsonl", "MLP, bf16")):
        for tag, run in (("launches", after), ("mean-grad", final), ("held", held)):
            epochs = [e["seconds"] for e in run.epochs(file)][1:]
            figure(f"kernels.{tag}.{name}.epochs", run,
                   (min(epochs), max(epochs)) if min(epochs) != max(epochs) else epochs[0],
                   f"mnist-train {what}, batch 64: epochs 2 and 3 ({run.name}; one number where they agree), s")
    for tag, run in (("launches", after), ("mean-grad", final), ("held", held)):
        figure(f"kernels.{tag}.cnn.epoch2", run, run.epoch("train_bf16.jsonl", 2)["seconds"],
               f"mnist-train CNN, bf16, batch 64: epoch 2 ({run.name}), s")
    figure("kernels.held.b512.epoch2", held, held.epoch("train_b512_bf16.jsonl", 2)["seconds"],
           "mnist-train CNN, bf16, batch 512: epoch 2 (conversions held and fc1 on matmul 16), s")
    # conv1's forward on version 8 and the partial sums without chains of loads
    rows = runs["2026-11-27-h100-conv1-rows-train"]
    for tag, csv, what in (("b64-bf16", "profile_b64_bf16.csv", "CNN batch 64 bf16"),
                           ("b512-bf16", "profile_b512_bf16.csv", "CNN batch 512 bf16")):
        summary = step_profile.summary(step_profile.kernels(rows.file(csv)))
        figure(f"kernels.rows.{tag}.us", rows, summary["us_per_step"],
               f"kernel time a step (ncu), {what}, conv1 on version 8 and the sums in tiles, µs")
    for name, file, what in (("cnn", "train_bf16.jsonl", "CNN batch 64, bf16"),
                             ("b512", "train_b512_bf16.jsonl", "CNN batch 512, bf16"),
                             ("cnn-f32", "train.jsonl", "CNN batch 64, f32"),
                             ("cnn-tf32", "train_tf32.jsonl", "CNN batch 64, --tf32")):
        figure(f"kernels.rows.{name}.epoch2", rows, rows.epoch(file, 2)["seconds"],
               f"mnist-train {what}: epoch 2 (conv1 on version 8 and the sums in tiles), s")
    for name, file, what in (("mlp-f32", "train_mlp_3.jsonl", "MLP, f32"), ("mlp", "train_mlp_bf16.jsonl", "MLP, bf16")):
        epochs = [e["seconds"] for e in rows.epochs(file)][1:]
        figure(f"kernels.rows.{name}.epochs", rows, (min(epochs), max(epochs)) if min(epochs) != max(epochs) else epochs[0],
               f"mnist-train {what}, batch 64: epochs 2 and 3 ({rows.name}; one number where they agree), s")
    # conv2's forward and backward input on version 9 (no pairing passes)
    cells = runs["2026-11-27-h100-cells"]
    step_figures("cells", cells, cnn_bf16, "conv2 on version 9")
    epoch_figures("cells", cells, ("cnn", "b512"), "conv2 on version 9")
    # and conv2's weight gradient on version 4 where it pays (batch 512)
    cw = runs["2026-11-27-h100-cells-weight"]
    summary = step_profile.summary(step_profile.kernels(cw.file("profile_b512_bf16.csv")))
    figure("kernels.cells-weight.b512-bf16.kernels", cw, summary["kernels_per_step"],
           "kernels a training step, CNN batch 512 bf16, conv2's weight gradient on version 4")
    figure("kernels.cells-weight.b512-bf16.us", cw, summary["us_per_step"],
           "kernel time a step (ncu), CNN batch 512 bf16, conv2's weight gradient on version 4, µs")
    figure("kernels.cells-weight.b512.epoch2", cw, cw.epoch("train_b512_bf16.jsonl", 2)["seconds"],
           "mnist-train CNN batch 512, bf16: epoch 2 (conv2's weight gradient on version 4), s")
    # relu's gradient folded into the pool's backward and version 9's backward input, the 2 x 2 pool
    # kernels (docs/runs/2026-11-27-h100-relu-fold); then conv1's weight and bias gradients on
    # version 5 (docs/runs/2026-11-27-h100-weight-rows)
    for run_name, key, what_changed in (("2026-11-27-h100-relu-fold", "fold", "relu's gradient folded"),
                                        ("2026-11-27-h100-weight-rows", "weight-rows", "conv1's gradients on version 5"),
                                        ("2026-11-27-h100-dropout-fold", "dropout-fold", "fc1's relu folded into dropout")):
        step_figures(key, runs[run_name], cnn_bf16, what_changed)
        epoch_figures(key, runs[run_name], ("cnn", "b512", "cnn-f32", "cnn-tf32"), what_changed)
    fold = runs["2026-11-27-h100-relu-fold"]
    for name, run, kernels in (("pool.before", cw, {"max_pool_kernel"}), ("pool", fold, {"max_pool_2x2_kernel"}),
                               ("pool-backward.before", cw, {"max_pool_backward_tiled_kernel"}),
                               ("pool-backward", fold, {"max_pool_2x2_backward_kernel"}),
                               ("relu-backward.before", cw, {"map_vec_kernel (UnaryGrad)"}),
                               ("relu-backward", fold, {"map_vec_kernel (UnaryGrad)"}),
                               ("cell-conv.before", cw, {"conv2d::cell_conv_kernel"}),
                               ("cell-conv", fold, {"conv2d::cell_conv_kernel"})):
        figure(f"kernels.fold.b512-bf16.{name}.us", run, per_step(run, kernels),
               f"CNN batch 512, bf16: {', '.join(sorted(kernels))} a step ({run.name}), µs")
    # the loss in one kernel each way (cross_entropy's version 8, its gradient from the one incoming
    # value, bf16 logits read as they are), add_correct and the host's loss sum
    loss = runs["2026-11-27-h100-loss-kernels"]
    step_figures("loss", loss, cnn_bf16 + (("b64-f32", "profile_b64.csv", "CNN batch 64 f32"),),
                 "the loss in one kernel each way")
    epoch_figures("loss", loss, ("cnn", "b512", "cnn-f32", "cnn-tf32", "mlp", "mlp-f32"), "the loss in one kernel each way")
    # conv1's weight gradient on version 5's register window
    window = runs["2026-11-27-h100-weight-window"]
    step_figures("window", window, cnn_bf16 + (("b64-f32", "profile_b64.csv", "CNN batch 64 f32"),),
                 "conv1's weight gradient on a register window")
    epoch_figures("window", window, ("cnn", "b512", "cnn-f32", "cnn-tf32", "mlp", "mlp-f32"),
                  "conv1's weight gradient on a register window")
    for tag, csv, what in cnn_bf16 + (("b64-f32", "profile_b64.csv", "CNN batch 64 f32"),):
        for name, run in (("before", loss), ("after", window)):
            figure(f"kernels.window.{tag}.weight-grad.{name}.us", run,
                   per_step(run, {"conv2d::backward_weight_rows_kernel", "conv2d::backward_weight_window_kernel"}, csv),
                   f"{what}: conv1's weight gradient kernel a step ({run.name}), µs")
    # dropout1 in the 2 x 2 max pool's pass (max_pool2d_dropout), a byte a window for the backward
    fused = runs["2026-11-28-h100-pool-dropout"]
    f32_b512 = (("b512-f32", "profile_b512.csv", "CNN batch 512 f32"),)
    step_figures("pool-dropout", fused, cnn_bf16 + (("b64-f32", "profile_b64.csv", "CNN batch 64 f32"),) + f32_b512,
                 "dropout1 in the max pool's pass")
    epoch_figures("pool-dropout", fused, ("cnn", "b512", "cnn-f32", "cnn-tf32", "mlp", "mlp-f32"),
                  "dropout1 in the max pool's pass")
    figure("kernels.pool-dropout.b512-f32.epoch2", fused, fused.epoch("train_b512.jsonl", 2)["seconds"],
           "mnist-train CNN batch 512, f32: epoch 2 (dropout1 in the max pool's pass), s")
    # the pool's and both dropouts' kernels a step (dropout2's, on fc1's output, in both)
    for tag, csv, what in cnn_bf16:
        for name, run, kernels in (("before", window, {"max_pool_2x2_kernel", "max_pool_2x2_backward_kernel", "dropout_kernel"}),
                                   ("after", fused, {"max_pool_2x2_dropout_kernel",
                                                     "max_pool_2x2_dropout_backward_kernel", "dropout_kernel"})):
            figure(f"kernels.pool-dropout.{tag}.pool-and-dropouts.{name}.us", run, per_step(run, kernels, csv),
                   f"{what}: the max pool's and the dropouts' kernels a step ({run.name}), µs")
    for name, kernel in (("forward", "max_pool_2x2_dropout_kernel"), ("backward", "max_pool_2x2_dropout_backward_kernel")):
        figure(f"kernels.pool-dropout.b512-bf16.{name}.us", fused, per_step(fused, {kernel}),
               f"CNN batch 512 bf16: {kernel} a step, µs")
    for tag, csv, what in cnn_bf16:
        for name, kernel in (("forward", "softmax::cross_entropy_reduced_kernel"),
                             ("backward", "softmax::cross_entropy_backward_rows_per_warp_kernel")):
            figure(f"kernels.loss.{tag}.{name}.us", loss, per_step(loss, {kernel}, csv),
                   f"{what}: the loss's {name} kernel a step ({kernel}), µs")
