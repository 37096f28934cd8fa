"""The figures that the CUDA kernels' comments (kernels/cuda/) quote, from one recorded run.

All come from kernel-bench's kernels.json in docs/runs/2026-11-26-h100 (one H100 80GB HBM3,
`scripts/device-run tests bench train torch vulkan`, build d7a3e53), but those of matmul 13 and its
yardsticks, from docs/runs/2026-11-26-h100-wgmma (the same GPU, after 13's tile widths and register
path, build c0ba136). A share ("pct-copy",
"pct-cublas") is the row's figure against its yardstick exactly as kernels/README.md's "vs yardstick"
column computes it (scripts/kernel_table.py: the copy bandwidth for GB/s rows, the reference of the
same family and shape for TFLOP/s rows).
"""
import re


def define(figure, table, runs):
    h100 = runs["2026-11-26-h100"]

    def kernel(family, version, shape):
        return h100.kernel(family, version, shape)

    def ms(family, version, shape):
        return kernel(family, version, shape)["ms"]

    def speedup(family, faster, slower, shape):
        """How many times faster `faster` ran than `slower` (time ratio)."""
        return kernel(family, slower, shape)["ms"] / kernel(family, faster, shape)["ms"]

    def share(family, version, shape):
        return h100.kernel_share(family, version, shape)

    def timed(name, family, version, shape, what):
        """NAME.ms: a row's time."""
        figure(f"{name}.ms", h100, ms(family, version, shape), f"{what}, ms")

    def memory(name, family, version, shape, what, gbs=False):
        """NAME.pct-copy (and NAME.gbs): a memory-bound row's share of the copy bandwidth (its GB/s)."""
        figure(f"{name}.pct-copy", h100, share(family, version, shape), f"{what}, % of the copy bandwidth")
        if gbs:
            figure(f"{name}.gbs", h100, kernel(family, version, shape)["value"], f"{what}, GB/s")

    # ---- softmax.cu: each version's time and share of the copy bandwidth, f32 ----
    softmax = {
        "v1": "1 naive (thread per row)",
        "v2": "2 warp per row",
        "v3": "3 block per row, online",
        "v4": "4 columns",
        "v5": "5 rows per warp (lane groups)",
        "v6": "6 block per row, row in registers",
        "v7": "7 warp per row, row in registers",
        "v7-2warps": "7 2 warps per row, row in registers",
        "v7-4warps": "7 4 warps per row, row in registers",
        "v8": "8 column packs, two passes",
        "v9-4lanes": "9 column tile on chip, 4 lanes",
        "v9-8lanes": "9 column tile on chip, 8 lanes",
        "v9-16lanes": "9 column tile on chip, 16 lanes",
    }
    shapes = {"65536x10": "[65536, 10]", "32768x256": "[32768, 256]", "8192x1024": "[8192, 1024]",
              "4096x32768": "[4096, 32768]", "64x1024x256": "[64, 1024, 256] axis 1",
              "32x21x16384": "[32, 21, 16384] axis 1"}
    for tag, key, both in [("v1", "65536x10", True), ("v2", "32768x256", True), ("v3", "4096x32768", True),
                           ("v5", "65536x10", True), ("v6", "4096x32768", True), ("v7", "8192x1024", True),
                           ("v7", "32768x256", True), ("v7-2warps", "32768x256", False),
                           ("v7-4warps", "32768x256", False), ("v4", "32x21x16384", True),
                           ("v4", "64x1024x256", False), ("v8", "64x1024x256", True),
                           ("v9-8lanes", "64x1024x256", True), ("v9-4lanes", "64x1024x256", False),
                           ("v9-16lanes", "64x1024x256", False), ("v9-8lanes", "32x21x16384", True)]:
        what = f"softmax {softmax[tag]} on {shapes[key]}"
        if both:
            timed(f"cuda.softmax.{tag}.{key}", "softmax", softmax[tag], shapes[key], what)
        memory(f"cuda.softmax.{tag}.{key}", "softmax", softmax[tag], shapes[key], what)

    # ---- cross_entropy.cu: each version's time and share of the copy bandwidth, f32 ----
    for tag, version, shape in [
            ("fwd-warp", "forward, warp per row", "[65536, 10]"),
            ("bwd-warp", "backward, warp per row", "[65536, 10]"),
            ("fwd-block", "forward, block per row", "[8192, 32000]"),
            ("bwd-block", "backward, block per row", "[8192, 32000]"),
            ("fwd-lanes", "forward, rows per warp (lane groups)", "[65536, 10]"),
            ("bwd-lanes", "backward, rows per warp (lane groups)", "[65536, 10]"),
            ("bwd-registers", "backward, row in registers", "[8192, 32000]"),
            ("fwd-unrolled", "forward, block per row, unrolled", "[8192, 32000]"),
            ("bwd-split", "backward, row split registers/shared", "[8192, 32000]")]:
        name = f"cuda.cross_entropy.{tag}.{shape[1:-1].replace(', ', 'x')}"
        timed(name, "cross_entropy", version, shape, f"cross_entropy {version} on {shape}")
        memory(name, "cross_entropy", version, shape, f"cross_entropy {version} on {shape}")

    # ---- reduce.cu: the middle-axis sum of [64, 4096, 256] ----
    columns = "[64, 4096, 256] axis 1"
    memory("cuda.reduce.v3.64x4096x256", "reduce", "sum, 3 column tiles", columns,
           "reduce version 3 (column tiles), sum over the middle axis of [64, 4096, 256]", gbs=True)
    memory("cuda.reduce.v4.64x4096x256", "reduce", "sum, 4 column packs", columns,
           "reduce version 4 (column packs), sum over the middle axis of [64, 4096, 256]", gbs=True)
    memory("cuda.reduce.production.64x4096x256", "reduce", "sum, production (CudaBackend)", columns,
           "reduce's production path, sum over the middle axis of [64, 4096, 256]", gbs=True)
    # version 6, a full reduction (docs/runs/2026-11-26-h100-ddp-step)
    step = runs["2026-11-26-h100-ddp-step"]
    full = "[1, 16777216] axis 1"
    figure("cuda.reduce.v6.full.gbs", step, step.kernel("reduce", "sum, chunks of rows (CudaBackend)", full)["value"],
           "reduce version 6 (rows in chunks), the sum of 16M floats, GB/s")
    figure("cuda.reduce.v6.full.pct-copy", step, step.kernel_share("reduce", "sum, chunks of rows (CudaBackend)", full),
           "reduce version 6 (rows in chunks), the sum of 16M floats, % of the copy bandwidth")

    # ---- random.cu: dropout as one kernel ----
    memory("cuda.dropout.kernel.8192x8192", "dropout", "one kernel (CudaBackend::dropout)", "[8192, 8192]",
           "dropout as one kernel (CudaBackend::dropout) on [8192, 8192] f32")

    # ---- batch_norm.cu: training forward and backward by each path, f32 (their own run) ----
    bn = runs["2026-11-27-h100-batch-norm"]
    for key, shape, paths in [("64x32x26x26", "[64, 32, 26, 26]", ("one kernel", "two passes")),
                              ("128x64x56x56", "[128, 64, 56, 56]", ("two passes",))]:
        for path in paths:
            for tag, pass_ in [("fwd", "forward"), ("bwd", "backward")]:
                version = f"{pass_}, {path}"
                name = f"cuda.batch_norm.{tag}.{path.replace(' ', '-')}.{key}"
                what = f"batch_norm {version} on {shape}"
                figure(f"{name}.ms", bn, bn.kernel("batch_norm", version, shape)["ms"], f"{what}, ms")
                figure(f"{name}.pct-copy", bn, bn.kernel_share("batch_norm", version, shape),
                       f"{what}, % of the copy bandwidth")
    # what two passes move against what the bench counts: x read twice (forward: 3 tensors' bytes
    # against 2), x and g read twice (backward: 5 against 3)
    large = "[128, 64, 56, 56]"
    moved = [bn.kernel_share("batch_norm", "forward, two passes", large) * 3 / 2,
             bn.kernel_share("batch_norm", "backward, two passes", large) * 5 / 3]
    figure("cuda.batch_norm.two-passes.128x64x56x56.pct-copy-moved", bn, (min(moved), max(moved)),
           "batch_norm by two passes on [128, 64, 56, 56], forward and backward: the bytes they move "
           "(x, and g, read twice) over their time, % of the copy bandwidth")

    # the cluster path, beside two passes on a shape twice the large one (their own run, build of
    # the cluster path's commit)
    bc = runs["2026-11-28-h100-batch-norm-cluster"]
    for key, shape in [("64x32x26x26", "[64, 32, 26, 26]"), ("128x64x56x56", "[128, 64, 56, 56]"),
                       ("256x64x56x56", "[256, 64, 56, 56]")]:
        for tag, pass_ in [("fwd", "forward"), ("bwd", "backward")]:
            version = f"{pass_}, cluster"
            name = f"cuda.batch_norm.{tag}.cluster.{key}"
            what = f"batch_norm {version} on {shape}"
            if key != "256x64x56x56":
                figure(f"{name}.ms", bc, bc.kernel("batch_norm", version, shape)["ms"], f"{what}, ms")
            figure(f"{name}.pct-copy", bc, bc.kernel_share("batch_norm", version, shape),
                   f"{what}, % of the copy bandwidth")
    for tag, pass_ in [("fwd", "forward"), ("bwd", "backward")]:
        figure(f"cuda.batch_norm.{tag}.two-passes.256x64x56x56.pct-copy", bc,
               bc.kernel_share("batch_norm", f"{pass_}, two passes", "[256, 64, 56, 56]"),
               f"batch_norm {pass_}, two passes on [256, 64, 56, 56], % of the copy bandwidth")

    # ---- conv2d.cu: each version's time on MNIST's layers at batch 64 ----
    conv_shapes = {"conv1": "conv1 x[64,1,28,28] w[32,1,3,3]", "conv2": "conv2 x[64,32,26,26] w[64,32,3,3]"}

    def conv_version(pass_, n, math, shape):
        """The version named `PASS N ...` (N: a number or cuDNN), ending in ` MATH` when math is given."""
        names = [r["version"] for r in h100.json("kernels.json")["results"] if r["family"] == "conv2d" and r["shape"] == shape
                 and r["version"].split()[:2] == [pass_, n] and (math is None or r["version"].endswith(" " + math))]
        if len(names) != 1:
            raise KeyError(f"conv2d {pass_} {n} {math} {shape}: {names}")
        return names[0]

    for pass_, layer, n, math in [
            ("fwd", "conv2", "cuDNN", None), ("fwd", "conv2", "1", None), ("fwd", "conv2", "2", None),
            ("fwd", "conv2", "3", None), ("fwd", "conv2", "4", None), ("fwd", "conv2", "5", "3xTF32"),
            ("fwd", "conv2", "5", "TF32"), ("fwd", "conv2", "7", "3xTF32"), ("fwd", "conv2", "7", "TF32"),
            ("fwd", "conv1", "3", None), ("fwd", "conv1", "5", "3xTF32"), ("fwd", "conv1", "5", "TF32"),
            ("fwd", "conv1", "7", "3xTF32"),
            ("bwd-input", "conv2", "cuDNN", None), ("bwd-input", "conv1", "cuDNN", None),
            ("bwd-input", "conv2", "1", None), ("bwd-input", "conv2", "2", None), ("bwd-input", "conv2", "3", None),
            ("bwd-input", "conv2", "4", None), ("bwd-input", "conv2", "5", "3xTF32"),
            ("bwd-input", "conv2", "5", "TF32"), ("bwd-input", "conv2", "7", "3xTF32"),
            ("bwd-input", "conv2", "7", "TF32"), ("bwd-input", "conv1", "6", None), ("bwd-input", "conv1", "8", None),
            ("bwd-weight", "conv2", "cuDNN", None), ("bwd-weight", "conv2", "1", None),
            ("bwd-weight", "conv2", "2", None), ("bwd-weight", "conv2", "3", "3xTF32"),
            ("bwd-weight", "conv2", "3", "TF32")]:
        version = conv_version(pass_, n, math, conv_shapes[layer])
        tag = "cudnn" if n == "cuDNN" else f"v{n}" + (f"-{math.lower()}" if math else "")
        timed(f"cuda.conv2d.{pass_}.{tag}.{layer}", "conv2d", version, conv_shapes[layer],
              f"conv2d {version} on {conv_shapes[layer]}")

    # ---- matmul.cu and matmul/: the ladder's versions against each other and cuBLAS ----
    n = "4096x4096x4096"
    figure("cuda.matmul.12.4096.ms", h100, kernel("matmul", "12_3xtf32", n)["ms"],
           "matmul 12_3xtf32 at 4096^3, ms")
    figure("cuda.matmul.07.4096.ms", h100, kernel("matmul", "07_warptile", n)["ms"],
           "matmul 07_warptile at 4096^3, ms")
    figure("cuda.matmul.12-over-07.4096", h100, speedup("matmul", "12_3xtf32", "07_warptile", n),
           "matmul at 4096^3: 12_3xtf32's speed over 07_warptile's")
    figure("cuda.matmul.12-over-07.1024", h100, speedup("matmul", "12_3xtf32", "07_warptile", "1024x1024x1024"),
           "matmul at 1024^3: 12_3xtf32's speed over 07_warptile's")
    figure("cuda.matmul.07-over-03.1024", h100, speedup("matmul", "07_warptile", "03_smem_tiling", "1024x1024x1024"),
           "matmul at 1024^3 (64 tiles of 128 x 128): 07_warptile's speed over 03_smem_tiling's")

    # the TF32 path: 11's two block tiles at 1024^3 (11's header)
    for tag, version in [("11", "11_tf32_ldmatrix"), ("11-128x128", "11_tf32_ldmatrix_128x128")]:
        timed(f"cuda.matmul.{tag}.1024", "matmul", version, "1024x1024x1024", f"matmul {version} at 1024^3")
    timed("cuda.matmul.10.4096", "matmul", "10_tf32_async", n, f"matmul 10_tf32_async at {n}")
    timed("cuda.matmul.13-packed.4096", "matmul", "13_tf32_wgmma", n,
          "matmul 13_tf32_wgmma at 4096^3 when B was transposed into a workspace first")

    # 13's header: its three tile widths, B's rows through registers (docs/runs/2026-11-26-h100-wgmma)
    wg = runs["2026-11-26-h100-wgmma"]
    shapes13 = {"4096": n, "4096Bt": "4096x4096x4096 B^T", "2048": "2048x2048x2048", "2048Bt": "2048x2048x2048 B^T",
                "1024": "1024x1024x1024", "linear-fwd": "512x4096x4096 B^T", "linear-dx": "512x4096x4096",
                "linear-dw": "4096x4096x512 A^T"}

    def wg_figure(name, version, key, field, what):
        shape = shapes13[key]
        if field == "pct":
            value = wg.kernel_share("matmul", version, shape)
        else:
            value = wg.kernel("matmul", version, shape)[field]
        figure(name, wg, value, f"matmul {version} at {shape}, {what}")

    for key in ("4096", "4096Bt"):
        wg_figure(f"cuda.matmul.13.{key}.ms", "13_tf32_wgmma", key, "ms", "ms")
        wg_figure(f"cuda.matmul.13.{key}.tflops", "13_tf32_wgmma", key, "value", "TFLOP/s")
    for key in ("4096", "4096Bt", "2048", "2048Bt"):
        wg_figure(f"cuda.matmul.13.{key}.pct-cublas", "13_tf32_wgmma", key, "pct", "% of cuBLAS TF32's TFLOP/s")
    for key in ("linear-fwd", "linear-dx", "linear-dw"):
        wg_figure(f"cuda.matmul.tf32.{key}.pct-cublas", "production (TF32)", key, "pct", "% of cuBLAS TF32's TFLOP/s")
    for name, version in [("13", "13_tf32_wgmma"), ("13-128", "13_tf32_wgmma_128x128"),
                          ("13-64", "13_tf32_wgmma_128x64"), ("cublas-tf32", "cuBLAS TF32")]:
        wg_figure(f"cuda.matmul.{name}.1024.ms", version, "1024", "ms", "ms")
    wg_figure("cuda.matmul.cublas-tf32.4096.ms", "cuBLAS TF32", "4096", "ms", "ms")
    wg_figure("cuda.matmul.cublas-tf32.4096.tflops", "cuBLAS TF32", "4096", "value", "TFLOP/s")
    wg_figure("cuda.matmul.11.4096.ms", "11_tf32_ldmatrix", "4096", "ms", "ms")
    wg_figure("cuda.matmul.11.4096.pct-cublas", "11_tf32_ldmatrix", "4096", "pct", "% of cuBLAS TF32's TFLOP/s")

    # the epilogue: bias + ReLU fused into the production f32 path's stores, or as passes after it
    shapes = []
    for r in h100.json("kernels.json")["results"]:
        if r["family"] == "matmul" and r["shape"] not in shapes:
            shapes.append(r["shape"])
    fused, passes, plain = ("production + bias + ReLU in the epilogue", "production, then bias and ReLU passes",
                            "production (FP32)")

    def longer(slow, fast, shape):
        """How much longer `slow` took than `fast`, %."""
        return 100 * (ms("matmul", slow, shape) / ms("matmul", fast, shape) - 1)

    figure("cuda.matmul.epilogue.max-pct", h100,
           max(longer(fused, plain, s) for s in shapes if "A^T" not in s),
           "matmul, production f32: the most that bias + ReLU in the epilogue add to the product's time, % "
           "(every shape of the bench but 9216x128x64 A^T)")
    figure("cuda.matmul.epilogue.9216x128x64At.pct", h100, longer(fused, plain, "9216x128x64 A^T"),
           "matmul 9216x128x64 A^T, production f32: what bias + ReLU in the epilogue add to its time, %")
    figure("cuda.matmul.passes.pct-range", h100,
           (min(longer(passes, fused, s) for s in shapes), max(longer(passes, fused, s) for s in shapes)),
           "matmul, production f32, every shape of the bench: how much longer bias and ReLU as passes of "
           "their own take than the fused product, % (least, most)")
    timed("cuda.matmul.epilogue.784x128x64", "matmul", fused, "784x128x64", "matmul 784x128x64, bias + ReLU fused")
    timed("cuda.matmul.passes.784x128x64", "matmul", passes, "784x128x64", "matmul 784x128x64, bias and ReLU passes")

    # ---- matmul in bf16 (versions 14 and 15) against cuBLAS BF16: 15 packing its MN-major operands
    # (docs/runs/2026-11-27-h100-bf16, build 543ae9d), then reading them in place
    # (docs/runs/2026-11-27-h100-bf16-wgmma, build eb9baf8) ----
    packed = runs["2026-11-27-h100-bf16"]
    for name, shape in (("15-packed.4096", "4096x4096x4096"), ("15-packed.linear-dx", "512x4096x4096"),
                        ("15-packed.4096Bt", "4096x4096x4096 B^T")):
        figure(f"cuda.matmul.{name}.pct-cublas", packed, packed.kernel_share("matmul", "15_bf16_wgmma", shape),
               f"matmul 15_bf16_wgmma at {shape}, its MN-major operand packed first: % of cuBLAS BF16's TFLOP/s")
    bf16 = runs["2026-11-27-h100-bf16-wgmma"]
    for name, version, shape in (("15.4096Bt", "15_bf16_wgmma", "4096x4096x4096 B^T"),
                                 ("15.4096", "15_bf16_wgmma", "4096x4096x4096"),
                                 ("15.2048", "15_bf16_wgmma", "2048x2048x2048"),
                                 ("15.1024", "15_bf16_wgmma", "1024x1024x1024"),
                                 ("15.linear-fwd", "15_bf16_wgmma", "512x4096x4096 B^T"),
                                 ("15.linear-dx", "15_bf16_wgmma", "512x4096x4096"),
                                 ("15.linear-dw", "15_bf16_wgmma", "4096x4096x512 A^T"),
                                 ("15.mlp-fc1", "15_bf16_wgmma", "64x128x784"),
                                 ("14.mlp-fc1", "14_bf16_mma", "64x128x784"),
                                 ("14.4096Bt", "14_bf16_mma", "4096x4096x4096 B^T")):
        figure(f"cuda.matmul.{name}.pct-cublas", bf16, bf16.kernel_share("matmul", version, shape),
               f"matmul {version} at {shape}: % of cuBLAS BF16's TFLOP/s")
    # the thin products that production bf16 sends to 09 (long k) or keeps on 15 (short k)
    for name, version, shape in (("15.64x128x9216", "15_bf16_wgmma", "64x128x9216 B^T"),
                                 ("09.64x128x9216", "09_split_k", "64x128x9216 B^T"),
                                 ("15.64x128x784", "15_bf16_wgmma", "64x128x784"),
                                 ("09.64x128x784", "09_split_k", "64x128x784")):
        figure(f"cuda.matmul.{name}.us", bf16, bf16.kernel("matmul", version, shape)["ms"] * 1000,
               f"matmul {version} at {shape} (09: in f32), µs")
    # ---- conv2d in bf16 (versions 7 and 3 on operands paired along their reduction) against cuDNN
    # in bf16, and kiln's TF32 versions, in one kernel-bench call (docs/runs/2026-11-27-h100-bf16-kernels,
    # build df14d62) ----
    kb = runs["2026-11-27-h100-bf16-kernels"]
    layers = {"conv2": "conv2 x[64,32,26,26] w[64,32,3,3]", "conv2-b512": "conv2 x[512,32,26,26] w[64,32,3,3]",
              "large": "large x[64,128,56,56] w[128,128,3,3] pad 1"}
    tf32_versions = {"fwd": "fwd 7 input patch in shared memory TF32",
                     "bwd-input": "bwd-input 7 input patch in shared memory TF32",
                     "bwd-weight": "bwd-weight 3 tensor cores TF32"}
    for tag, shape in layers.items():
        for what in ("fwd", "bwd-input", "bwd-weight"):
            for name, version in ((f"cuda.conv2d.bf16.{tag}.{what}.ms", f"{what} production (BF16)"),
                                  (f"cuda.conv2d.cudnn-bf16.{tag}.{what}.ms", f"{what} cuDNN BF16"),
                                  (f"cuda.conv2d.tf32.{tag}.{what}.ms", tf32_versions[what])):
                figure(name, kb, kb.kernel("conv2d", version, shape)["ms"], f"conv2d {version} at {shape}, ms")
    conv1 = "conv1 x[64,1,28,28] w[32,1,3,3]"
    for name, version in (("cuda.conv2d.bf16.conv1.bwd-weight-pairs.ms", "bwd-weight 3 tensor cores BF16, image pairs"),
                          ("cuda.conv2d.bf16.conv1.bwd-weight-v1.ms", "bwd-weight 1 implicit GEMM BF16"),
                          ("cuda.conv2d.f32.conv1.bwd-weight.ms", "bwd-weight 3 tensor cores 3xTF32")):
        figure(name, kb, kb.kernel("conv2d", version, conv1)["ms"], f"conv2d {version} at {conv1}, ms")
    figure("cuda.matmul.bf16.64x128x9216.production.us", kb,
           kb.kernel("matmul", "production (BF16)", "64x128x9216 B^T")["ms"] * 1000,
           "matmul production (BF16) at 64x128x9216 B^T (09 on bf16), µs")
    figure("cuda.matmul.15.4096Bt.ms", bf16, bf16.kernel("matmul", "15_bf16_wgmma", "4096x4096x4096 B^T")["ms"],
           "matmul 15_bf16_wgmma at 4096^3 B^T, ms")
    figure("cuda.matmul.cublas-bf16.4096Bt.ms", bf16, bf16.kernel("matmul", "cuBLAS BF16", "4096x4096x4096 B^T")["ms"],
           "cuBLAS BF16 at 4096^3 B^T, ms")
    # ---- matmul 16 (15 with k split) on the CNN's fc1, and a conv layer's bias gradient in either
    # order of its two stages, in one call (docs/runs/2026-11-27-h100-split-k, build bb7dcf8) ----
    sk = runs["2026-11-27-h100-split-k"]
    for batch in (64, 512):
        shape = f"{batch}x128x9216 B^T"
        for name, version in (("16", "16_bf16_wgmma_split_k"), ("09-bf16", "09_split_k (BF16)"),
                              ("15", "15_bf16_wgmma"), ("cublas-bf16", "cuBLAS BF16"),
                              ("production-bf16", "production (BF16)")):
            figure(f"cuda.matmul.{name}.{batch}x128x9216.split.us", sk,
                   sk.kernel("matmul", version, shape)["ms"] * 1000, f"matmul {version} at {shape}, µs")
        figure(f"cuda.matmul.16.{batch}x128x9216.pct-cublas", sk,
               sk.kernel_share("matmul", "16_bf16_wgmma_split_k", shape),
               f"matmul 16_bf16_wgmma_split_k at {shape}: % of cuBLAS BF16's TFLOP/s")
    # the bias gradient's orders as the reductions are now (after version 5's loads in flight)
    rows_run = runs["2026-11-27-h100-conv1-rows"]
    bias_shapes = {"conv1": "32, 676", "conv2": "64, 576"}
    for layer, channels in bias_shapes.items():
        for batch in (64, 512):
            for dtype in ("f32", "bf16") if batch == 512 else ("bf16",):
                shape = f"[{batch}, {channels}] axes 0, 2 {dtype}"
                for order, version in (("hw-first", "bias gradient, H W then N"), ("n-first", "bias gradient, N then H W")):
                    figure(f"cuda.reduce.bias.{layer}.b{batch}.{dtype}.{order}.us", rows_run,
                           rows_run.kernel("reduce", version, shape, "reduce.json")["ms"] * 1000,
                           f"the sum over N, H and W of {shape}, {version}, µs")
    # ---- conv2d forward version 8 at up to 32 outputs a pixel, a first layer's forward in f32 and
    # bf16 (docs/runs/2026-11-27-h100-conv1-rows, build dd21837) ----
    # cuda.conv2d.KEY.TAG.NAME.us: kernel-bench's conv2d `version` at each shape (TAG: shape), µs
    def conv_figures(key, run, shapes, versions):
        for tag, shape in shapes.items():
            for name, version in versions:
                figure(f"cuda.conv2d.{key}.{tag}.{name}.us", run, run.kernel("conv2d", version, shape)["ms"] * 1000,
                       f"conv2d {version} at {shape}, µs")

    def old_new_figures(key, run, tag, shape, versions, file_of):
        """Versions benched before and after a change in one call: file_of("old"/"new") is each tree's JSON."""
        for when in ("old", "new"):
            for name, version in versions:
                figure(f"cuda.conv2d.{key}.{tag}.{name}.{when}.us", run,
                       run.kernel("conv2d", version, shape, file_of(when))["ms"] * 1000,
                       f"conv2d {version} at {shape}, {when} tree, µs")

    def epoch_figures(key, run, after):
        """mnist-train's CNN epoch 2 in f32 and TF32 at batch 64 and 512, `after` a change (H200)."""
        for tag, file, what in (("b64", "train.jsonl", "batch 64, f32"), ("b512", "train_b512.jsonl", "batch 512, f32"),
                                ("b64-tf32", "train_tf32.jsonl", "batch 64, TF32"),
                                ("b512-tf32", "train_b512_tf32.jsonl", "batch 512, TF32")):
            figure(f"cuda.conv2d.{key}.cnn.{tag}.epoch2", run, run.epoch(file, 2)["seconds"],
                   f"mnist-train CNN {what}, {after} (H200): epoch 2, s")
    conv1 = {f"conv1-b{batch}": f"conv1 x[{batch},1,28,28] w[32,1,3,3]" for batch in (64, 512)}
    conv_figures("rows", runs["2026-11-27-h100-conv1-rows"], conv1,
                 (("v8", "fwd 8 few outputs, input rows in shared memory"),
                  ("v3", "fwd 3 implicit GEMM prefetch"), ("cudnn", "fwd cuDNN"),
                  ("v8-bf16", "fwd 8 few outputs, input rows in shared memory BF16"),
                  ("v3-bf16", "fwd 3 implicit GEMM prefetch BF16"), ("cudnn-bf16", "fwd cuDNN BF16"),
                  ("bwd-weight-bf16", "bwd-weight production (BF16)")))
    # ---- conv2d version 9 (bf16 in cells, no pairing pass) beside version 7 on channel pairs (its
    # pairing pass included) and cuDNN BF16, in one call: the final tree's (docs/runs/2026-11-27-h100-bench-cells,
    # build c0beadf; the first run of version 9, 2026-11-27-h100-cells, had its backward input at 96.9 µs) ----
    conv_figures("cells", runs["2026-11-27-h100-bench-cells"], layers,
                 [(f"{what}.{name}", f"{what} {version}") for what in ("fwd", "bwd-input")
                  for name, version in (("v9", "9 cells BF16"), ("v7", "7 channel pairs BF16"), ("cudnn", "cuDNN BF16"))])
    # ---- conv2d backward weight version 4 (bf16 in cells) beside version 3 on image pairs and cuDNN
    # BF16, in one call (docs/runs/2026-11-27-h100-cells-weight, build 4f9e4ec) ----
    conv_figures("cells-weight", runs["2026-11-27-h100-cells-weight"], layers,
                 (("v4", "bwd-weight 4 cells BF16"), ("v3", "bwd-weight 3 tensor cores BF16, image pairs"),
                  ("cudnn", "bwd-weight cuDNN BF16")))
    # ---- conv2d backward weight version 5 (a first layer: one output's sums in a warp's registers)
    # beside version 3 and cuDNN, in one call (docs/runs/2026-11-27-h100-weight-rows, build be5ffe8) ----
    conv_figures("weight-rows", runs["2026-11-27-h100-weight-rows"], conv1,
                 (("v5", "bwd-weight 5 short reduction, input rows in shared memory"),
                  ("v3-3xtf32", "bwd-weight 3 tensor cores 3xTF32"), ("cudnn", "bwd-weight cuDNN"),
                  ("v5-bf16", "bwd-weight 5 short reduction, input rows in shared memory BF16"),
                  ("v3-bf16", "bwd-weight 3 tensor cores BF16, image pairs"),
                  ("cudnn-bf16", "bwd-weight cuDNN BF16")))
    # ---- the same with version 5's register window (a lane walks a column down the band, three
    # new taps a pixel), in one call (docs/runs/2026-11-27-h100-weight-window) ----
    conv_figures("weight-window", runs["2026-11-27-h100-weight-window"], conv1,
                 (("v5", "bwd-weight 5 short reduction, input rows in shared memory"),
                  ("cudnn", "bwd-weight cuDNN"),
                  ("v5-bf16", "bwd-weight 5 short reduction, input rows in shared memory BF16"),
                  ("cudnn-bf16", "bwd-weight cuDNN BF16")))
    # ---- conv2d version 10 (version 7's patch on wgmma) beside 7 and cuDNN, forward and backward
    # input, 3xTF32 and TF32, in one call (docs/runs/2026-11-28-h100-wgmma-conv, build 71c19af) ----
    wgmma = runs["2026-11-28-h100-wgmma-conv"]
    conv_figures("wgmma", wgmma, {"conv2-b512": "conv2 x[512,32,26,26] w[64,32,3,3]",
                                  "large": "large x[64,128,56,56] w[128,128,3,3] pad 1"},
                 [(f"fwd.{name}", f"fwd {version}")
                  for name, version in (("v10-3xtf32", "10 wgmma 3xTF32"), ("v10-tf32", "10 wgmma TF32"),
                                        ("v7-3xtf32", "7 input patch in shared memory 3xTF32"),
                                        ("v7-tf32", "7 input patch in shared memory TF32"),
                                        ("cudnn", "cuDNN"), ("cudnn-tf32", "cuDNN TF32"))])
    conv_figures("wgmma", wgmma, {"conv2-b512": "conv2 x[512,32,26,26] w[64,32,3,3]"},
                 (("bwd-input.v10-3xtf32", "bwd-input 10 wgmma 3xTF32"),
                  ("bwd-input.v7-3xtf32", "bwd-input 7 input patch in shared memory 3xTF32")))
    # ---- conv2d version 11 (A from shared memory, the im2col rows a window of the patch) beside
    # versions 7 and 10 and cuDNN, forward and backward input, in one call
    # (docs/runs/2026-11-28-h100-window-conv, built from 0f7b223 with version 11, committed as d33fbf9) ----
    window = runs["2026-11-28-h100-window-conv"]
    conv_figures("window", window, {"conv2-b512": "conv2 x[512,32,26,26] w[64,32,3,3]",
                                    "large": "large x[64,128,56,56] w[128,128,3,3] pad 1"},
                 [(f"fwd.{name}", f"fwd {version}")
                  for name, version in (("v11-3xtf32", "11 wgmma window 3xTF32 stage sums"),
                                        ("v11-3xtf32-pairs", "11 wgmma window 3xTF32"),
                                        ("v11-tf32", "11 wgmma window TF32"),
                                        ("v7-3xtf32", "7 input patch in shared memory 3xTF32"),
                                        ("v7-tf32", "7 input patch in shared memory TF32"),
                                        ("cudnn", "cuDNN"), ("cudnn-tf32", "cuDNN TF32"))])
    conv_figures("window", window, {"conv2-b512": "conv2 x[512,32,26,26] w[64,32,3,3]"},
                 [(f"bwd-input.{name}", f"bwd-input {version}")
                  for name, version in (("v11-3xtf32", "11 wgmma window 3xTF32 stage sums"),
                                        ("v11-tf32", "11 wgmma window TF32"),
                                        ("v7-3xtf32", "7 input patch in shared memory 3xTF32"),
                                        ("v7-tf32", "7 input patch in shared memory TF32"))])
    # ---- conv2d version 12 (version 11 warp-specialised and persistent; TF32's producer copying by
    # cp.async) beside version 7 and cuDNN, forward and backward input, in one call on an H200
    # (docs/runs/2026-11-28-h200-ring-copies, built as 930b6f6), and mnist-train's epochs after it ----
    ring = runs["2026-11-28-h200-ring-copies"]
    six = (("v12-3xtf32", "12 wgmma ring 3xTF32"), ("v12-tf32", "12 wgmma ring TF32"),
           ("v7-3xtf32", "7 input patch in shared memory 3xTF32"), ("v7-tf32", "7 input patch in shared memory TF32"),
           ("cudnn", "cuDNN"), ("cudnn-tf32", "cuDNN TF32"))
    conv_figures("ring", ring, {"conv2-b64": "conv2 x[64,32,26,26] w[64,32,3,3]",
                                "large": "large x[64,128,56,56] w[128,128,3,3] pad 1"},
                 [(f"fwd.{name}", f"fwd {version}") for name, version in six])
    conv_figures("ring", ring, {"conv2-b512": "conv2 x[512,32,26,26] w[64,32,3,3]"},
                 [(f"{what}.{name}", f"{what} {version}") for what in ("fwd", "bwd-input") for name, version in six])
    conv_figures("ring", ring, {"large": "large x[64,128,56,56] w[128,128,3,3] pad 1"},
                 (("bwd-input.v12-tf32", "bwd-input 12 wgmma ring TF32"), ("bwd-input.cudnn-tf32", "bwd-input cuDNN TF32")))
    for tag, file, what in (("b64", "train.jsonl", "batch 64, f32"), ("b64-tf32", "train_tf32.jsonl", "batch 64, --tf32"),
                            ("b512", "train_b512.jsonl", "batch 512, f32"),
                            ("b512-tf32", "train_b512_tf32.jsonl", "batch 512, --tf32")):
        figure(f"cuda.conv2d.ring.cnn.{tag}.epoch2", ring, ring.epoch(file, 2)["seconds"],
               f"mnist-train CNN {what}, conv2d version 12 in production (H200): epoch 2, s")
    # ---- backward weight version 6 (wgmma, A from registers) beside version 3 and cuDNN in one call
    # on an H200 (docs/runs/2026-11-28-h200-weight-ring), mnist-train's epochs after it, and the f32
    # step's profile at batch 512 (2026-11-28-h200-weight-ring-profile) ----
    weight = runs["2026-11-28-h200-weight-ring"]
    weight_shapes = {"conv2-b64": "conv2 x[64,32,26,26] w[64,32,3,3]",
                     "conv2-b512": "conv2 x[512,32,26,26] w[64,32,3,3]",
                     "large": "large x[64,128,56,56] w[128,128,3,3] pad 1"}
    weight_versions = {"v6-3xtf32": "6 wgmma ring 3xTF32", "v6-tf32": "6 wgmma ring TF32",
                       "v3-3xtf32": "3 tensor cores 3xTF32", "v3-tf32": "3 tensor cores TF32",
                       "cudnn": "cuDNN", "cudnn-tf32": "cuDNN TF32"}

    def weight_figures(key, run, names):
        conv_figures(key, run, weight_shapes,
                     [(f"bwd-weight.{name}", f"bwd-weight {weight_versions[name]}") for name in names.split()])

    weight_figures("weight-ring", weight, "v6-3xtf32 v6-tf32 v3-3xtf32 v3-tf32 cudnn cudnn-tf32")
    for tag, file, what in (("b64", "train.jsonl", "batch 64, f32"), ("b64-tf32", "train_tf32.jsonl", "batch 64, --tf32"),
                            ("b512", "train_b512.jsonl", "batch 512, f32"),
                            ("b512-tf32", "train_b512_tf32.jsonl", "batch 512, --tf32")):
        figure(f"cuda.conv2d.weight-ring.cnn.{tag}.epoch2", weight, weight.epoch(file, 2)["seconds"],
               f"mnist-train CNN {what}, backward weight version 6 in production (H200): epoch 2, s")
    # ---- the same with its producer at 96 registers and 3xTF32's NaN recomputation after the stores
    # (no spills), on an H200 (docs/runs/2026-11-28-h200-weight-regs), and mnist-train's epochs ----
    regs = runs["2026-11-28-h200-weight-regs"]
    weight_figures("weight-regs", regs, "v6-3xtf32 v6-tf32 v3-tf32 cudnn cudnn-tf32")
    for tag, file, what in (("b64", "train.jsonl", "batch 64, f32"), ("b512", "train_b512.jsonl", "batch 512, f32")):
        figure(f"cuda.conv2d.weight-regs.cnn.{tag}.epoch2", regs, regs.epoch(file, 2)["seconds"],
               f"mnist-train CNN {what}, backward weight version 6 without spills (H200): epoch 2, s")
    # ---- conv2d version 13 (few outputs at stride 1, a warp across a row, the taps by shuffles)
    # beside version 8 and cuDNN in one call on an H200 (docs/runs/2026-11-28-h200-columns: conv1.json,
    # head.json; prefetch-*.json a later call with the next channel's rows loaded ahead) ----
    cols = runs["2026-11-28-h200-columns"]
    head = "head x[64,64,56,56] w[1,64,3,3] pad 1"
    for file, prefix, shape, rows in (
            [("conv1.json", f"conv1-b{batch}.bwd-input", f"conv1 x[{batch},1,28,28] w[32,1,3,3]",
              (("v13", "bwd-input 13 as forward conv, few channels, a warp across a row"),
               ("v8", "bwd-input 8 as forward conv, direct, few channels, rows in shared memory"),
               ("cudnn", "bwd-input cuDNN"), ("cudnn-tf32", "bwd-input cuDNN TF32"),
               ("v13-bf16", "bwd-input 13 few channels, a warp across a row BF16"),
               ("cudnn-bf16", "bwd-input cuDNN BF16"))) for batch in (64, 512)] +
            [("head.json", "head.fwd", head,
              (("v13", "fwd 13 few outputs, a warp across a row"),
               ("v8", "fwd 8 few outputs, input rows in shared memory"), ("v12-tf32", "fwd 12 wgmma ring TF32"),
               ("cudnn", "fwd cuDNN"), ("cudnn-tf32", "fwd cuDNN TF32"),
               ("v13-bf16", "fwd 13 few outputs, a warp across a row BF16"), ("v9-bf16", "fwd 9 cells BF16"),
               ("cudnn-bf16", "fwd cuDNN BF16"))),
             ("prefetch-conv1.json", "prefetch.conv1-b512.bwd-input", "conv1 x[512,1,28,28] w[32,1,3,3]",
              (("v13", "bwd-input 13 as forward conv, few channels, a warp across a row"),)),
             ("prefetch-head.json", "prefetch.head.fwd", head, (("v13", "fwd 13 few outputs, a warp across a row"),))]):
        for name, version in rows:
            figure(f"cuda.conv2d.columns.{prefix}.{name}.us", cols,
                   cols.kernel("conv2d", version, shape, file)["ms"] * 1000, f"conv2d {version} at {shape}, µs")
    # ---- the same with 8 channels a warp where the grid at 4 would not all be resident at once
    # (docs/runs/2026-11-28-h200-columns-warps; fixed8-*.json: 8 always, early-*.json: a warp's first
    # channel loaded before the weights' barrier, both earlier calls) ----
    warps = runs["2026-11-28-h200-columns-warps"]
    for prefix, files in (("", ("conv1.json", "head.json")), ("fixed8.", ("fixed8-conv1.json",)),
                          ("early.", ("early-conv1.json", "early-head.json"))):
        for file in files:
            for batch in ((64, 512) if "conv1" in file else ()):
                for name, version in (("v13", "bwd-input 13 as forward conv, few channels, a warp across a row"),
                                      ("v13-bf16", "bwd-input 13 few channels, a warp across a row BF16")):
                    shape = f"conv1 x[{batch},1,28,28] w[32,1,3,3]"
                    figure(f"cuda.conv2d.columns-warps.{prefix}conv1-b{batch}.bwd-input.{name}.us", warps,
                           warps.kernel("conv2d", version, shape, file)["ms"] * 1000, f"conv2d {version} at {shape}, µs")
            if "head" in file:
                version = "fwd 13 few outputs, a warp across a row"
                figure(f"cuda.conv2d.columns-warps.{prefix}head.fwd.v13.us", warps,
                       warps.kernel("conv2d", version, head, file)["ms"] * 1000, f"conv2d {version} at {head}, µs")
    # ---- conv2d version 12 at 128 pixels a block where the grid's rounds copy less, before and
    # after in one call (docs/runs/2026-11-28-h200-ring-rounds) ----
    rounds = runs["2026-11-28-h200-ring-rounds"]
    for batch in (64, 512):
        shape = f"conv2 x[{batch},32,26,26] w[64,32,3,3]"
        for when in ("old", "new"):
            for what in ("fwd", "bwd-input"):
                for math in (("3xTF32", "TF32") if batch == 64 else ("3xTF32",)):
                    version = f"{what} 12 wgmma ring {math}"
                    figure(f"cuda.conv2d.ring-rounds.conv2-b{batch}.{what}.v12-{math.lower()}.{when}.us", rounds,
                           rounds.kernel("conv2d", version, shape, f"conv2-{when}.json")["ms"] * 1000,
                           f"conv2d {version} at {shape}, {when} tree, µs")
        for what in (("fwd", "bwd-input") if batch == 64 else ()):
            figure(f"cuda.conv2d.ring-rounds.conv2-b{batch}.{what}.cudnn.us", rounds,
                   rounds.kernel("conv2d", f"{what} cuDNN", shape, "conv2-new.json")["ms"] * 1000,
                   f"conv2d {what} cuDNN (FP32) at {shape}, the new tree's bench, µs")
    train = runs["2026-11-28-h200-ring-rounds-train"]
    for tag, file, what in (("b64", "train.jsonl", "batch 64, f32"), ("b512", "train_b512.jsonl", "batch 512, f32")):
        figure(f"cuda.conv2d.ring-rounds.cnn.{tag}.epoch2", train, train.epoch(file, 2)["seconds"],
               f"mnist-train CNN {what}, version 12 at 128 pixels a block where the rounds copy less (H200): epoch 2, s")
    # ---- one wgmma shape's rate with nothing in its way (docs/runs/2026-11-28-h200-wgmma-rate,
    # apps/bench/bench_wgmma.cu) ----
    rate = runs["2026-11-28-h200-wgmma-rate"]
    for kind, k, n, a in (("tf32", 8, 32, "shared memory"), ("tf32", 8, 64, "shared memory"),
                          ("tf32", 8, 256, "shared memory"), ("tf32", 8, 32, "registers"),
                          ("tf32", 8, 64, "registers"), ("bf16", 16, 64, "shared memory"),
                          ("bf16", 16, 256, "shared memory")):
        version = f"{kind.upper() if kind == 'tf32' else kind} m64n{n}k{k}, A from {a}"
        figure(f"cuda.wgmma-rate.{kind}.n{n}.{'smem' if a.startswith('shared') else 'regs'}.tflops", rate,
               rate.kernel("wgmma", version, "132 SMs x 2 warpgroups", "wgmma.json")["value"],
               f"wgmma {version}, every SM, two warpgroups (H200), TFLOP/s")
    review = runs["2026-11-28-h200-review-descriptor"]  # the same bench with its window rows
    for n in (32, 64, 128):
        version = f"TF32 m64n{n}k8, A a window of shared memory"
        figure(f"cuda.wgmma-rate.tf32.n{n}.window.tflops", review,
               review.kernel("wgmma", version, "132 SMs x 2 warpgroups", "wgmma.json")["value"],
               f"wgmma {version}, every SM, two warpgroups (H200), TFLOP/s")
    figure("cuda.wgmma-rate.tf32.n64.smem-review.tflops", review,
           review.kernel("wgmma", "TF32 m64n64k8, A from shared memory", "132 SMs x 2 warpgroups", "wgmma.json")["value"],
           "wgmma TF32 m64n64k8, A from shared memory, the window rows' call (H200), TFLOP/s")
    # ---- conv2d version 12 with uniform descriptors and a leaner epilogue, before (ee52763) and
    # after in one call (docs/runs/2026-11-28-h200-ring-uniform) ----
    uni = runs["2026-11-28-h200-ring-uniform"]
    for batch in (64, 512):
        shape = f"conv2 x[{batch},32,26,26] w[64,32,3,3]"
        old_new_figures("ring-uniform", uni, f"conv2-b{batch}", shape,
                        [(f"{what}.v12-{math.lower()}", f"{what} 12 wgmma ring {math}")
                         for what in ("fwd", "bwd-input") for math in ("3xTF32", "TF32")],
                        lambda when: f"conv2-{when}.json")
        for when in ("old", "new"):
            version = "fwd production + bias + ReLU in the epilogue"
            figure(f"cuda.conv2d.ring-uniform.conv2-b{batch}.fwd.production.{when}.us", uni,
                   uni.kernel("conv2d", version, shape, f"conv2-{when}.json")["ms"] * 1000,
                   f"conv2d {version} (f32) at {shape}, {when} tree, µs")
        for what in ("fwd", "bwd-input"):
            for name, version in (("cudnn", f"{what} cuDNN"), ("cudnn-tf32", f"{what} cuDNN TF32")):
                figure(f"cuda.conv2d.ring-uniform.conv2-b{batch}.{what}.{name}.us", uni,
                       uni.kernel("conv2d", version, shape, "conv2-new.json")["ms"] * 1000,
                       f"conv2d {version} at {shape}, the new tree's bench, µs")
    large = "large x[64,128,56,56] w[128,128,3,3] pad 1"
    for what in ("fwd", "bwd-input"):
        for name, version in (("v12-3xtf32", f"{what} 12 wgmma ring 3xTF32"), ("v12-tf32", f"{what} 12 wgmma ring TF32"),
                              ("cudnn", f"{what} cuDNN"), ("cudnn-tf32", f"{what} cuDNN TF32")):
            figure(f"cuda.conv2d.ring-uniform.large.{what}.{name}.us", uni,
                   uni.kernel("conv2d", version, large, "large-new.json")["ms"] * 1000, f"conv2d {version} at {large}, µs")
    epoch_figures("ring-uniform", runs["2026-11-28-h200-ring-uniform-train"], "version 12 with uniform descriptors")
    # ---- backward weight version 6 copying its stages by TMA, before (a1e95e7, cp.async) and after
    # in one call (docs/runs/2026-11-29-h200-weight-tma), mnist-train's epochs and the step's
    # profile after it (2026-11-29-h200-weight-tma-train) ----
    tma = runs["2026-11-29-h200-weight-tma"]
    for tag, shape in weight_shapes.items():
        old_new_figures("weight-tma", tma, tag, shape,
                        [(name, f"bwd-weight {weight_versions[name]}") for name in ("v6-3xtf32", "v6-tf32")],
                        lambda when, tag=tag: f"{when}-{tag}.json")
        for name in ("cudnn", "cudnn-tf32"):
            version = f"bwd-weight {weight_versions[name]}"
            figure(f"cuda.conv2d.weight-tma.{tag}.{name}.us", tma,
                   tma.kernel("conv2d", version, shape, f"new-{tag}.json")["ms"] * 1000,
                   f"conv2d {version} at {shape}, the new tree's bench, µs")
    train = runs["2026-11-29-h200-weight-tma-train"]
    epoch_figures("weight-tma", train, "backward weight version 6 copying by TMA")
    # ---- the same, 3xTF32's grad_y split by the producer's idle warps, before (c47c6a6) and after in
    # one call (docs/runs/2026-11-29-h200-weight-split) ----
    split = runs["2026-11-29-h200-weight-split"]
    for tag, shape in weight_shapes.items():
        old_new_figures("weight-split", split, tag, shape, [("v6-3xtf32", "bwd-weight 6 wgmma ring 3xTF32")],
                        lambda when, tag=tag: f"{when}-{tag}.json")
    # ---- the same with the bias's gradient as one more row (3xTF32), against 6efcc1d in one call
    # (docs/runs/2026-11-29-h200-weight-bias): the kernel with and without the row (the new tree's
    # bench), mnist-train's epoch 2 (the first of two runs each) and the f32 step's kernels ----
    wb = runs["2026-11-29-h200-weight-bias"]
    for batch in (64, 512):
        shape = f"conv2 x[{batch},32,26,26] w[64,32,3,3]"
        for name, version in (("plain", "bwd-weight 6 wgmma ring 3xTF32"),
                              ("bias", "bwd-weight 6 wgmma ring 3xTF32 with the bias")):
            figure(f"cuda.conv2d.weight-bias.conv2-b{batch}.{name}.us", wb,
                   wb.kernel("conv2d", version, shape, f"kernels-conv2-b{batch}.json")["ms"] * 1000,
                   f"conv2d {version} at {shape}, µs")
    import step_profile

    def old_new_training(key, run, steps=(64, 512), kernels=True):
        """KEY.cnn.bB.WHEN.epoch2 (batch 64 and 512) and, at the batches `steps`, KEY.step.bB.WHEN.us (and
        .kernels): mnist-train's f32 CNN before and after a change in one call (train_WHEN_bB_1.jsonl, the
        first of two runs each; profile_WHEN_bB.csv, ncu)."""
        for when in ("old", "new"):
            for batch in (64, 512):
                figure(f"{key}.cnn.b{batch}.{when}.epoch2", run, run.epoch(f"train_{when}_b{batch}_1.jsonl", 2)["seconds"],
                       f"mnist-train CNN batch {batch}, f32, {when} tree (H200): epoch 2, s")
            for batch in steps:
                summary = step_profile.summary(step_profile.kernels(run.file(f"profile_{when}_b{batch}.csv")))
                figure(f"{key}.step.b{batch}.{when}.us", run, summary["us_per_step"],
                       f"kernel time a step (ncu), CNN batch {batch}, f32, {when} tree, µs")
                if kernels:
                    figure(f"{key}.step.b{batch}.{when}.kernels", run, summary["kernels_per_step"],
                           f"kernels a step (ncu), CNN batch {batch}, f32, {when} tree")
    old_new_training("cuda.conv2d.weight-bias", wb)
    for when in ("old", "new"):
        for batch in (64, 512):
            summary = step_profile.summary(step_profile.kernels(wb.file(f"profile_{when}_b{batch}.csv")))
            figure(f"cuda.conv2d.weight-bias.step.b{batch}.{when}.sums.us", wb,
                   sum(e["us_per_step"] for e in summary["kernels"]
                       if e["kernel"] in ("reduce_column_packs", "reduce_rows_warp")),
                   f"the step's reduce_column_packs and reduce_rows_warp kernels (ncu), CNN batch {batch}, f32, "
                   f"{when} tree, µs")
    # ---- matmul 18 (dot products) for the tiny products, against f05f8db in one call
    # (docs/runs/2026-11-29-h200-matmul-dots): the CNN's fc2 products by 18, 03 and 09 (the new
    # tree's bench), epoch 2 (the first of two runs each) and the f32 CNN's step ----
    dots = runs["2026-11-29-h200-matmul-dots"]
    for shape, file, before in (("64x10x128 B^T", "x10x", "03"), ("512x10x128 B^T", "x10x", "03"),
                                ("64x128x10", "x128x10", "03"), ("512x128x10", "x128x10", "03"),
                                ("10x128x64 A^T", "10x128x", "03"), ("10x128x512 A^T", "10x128x", "09")):
        tag = shape.replace(" ", "").replace("^", "")
        for name, version in (("18", "18_dots"), (before, {"03": "03_smem_tiling", "09": "09_split_k"}[before])):
            figure(f"cuda.matmul.dots.{tag}.{name}.us", dots,
                   dots.kernel("matmul", version, shape, f"kernels-{file}.json")["ms"] * 1000,
                   f"matmul {version} at {shape}, µs")
    final = runs["2026-11-29-h200-review-final"]  # the same products again, the reviewed tree, another call
    for name, version in (("18", "18_dots"), ("03", "03_smem_tiling")):
        figure(f"cuda.matmul.dots.final.64x10x128BT.{name}.us", final,
               final.kernel("matmul", version, "64x10x128 B^T", "kernels-matmul-x10x.json")["ms"] * 1000,
               f"matmul {version} at 64x10x128 B^T, the reviewed tree (another call), µs")
    for when in ("old", "new"):
        for model, file in (("b64", "b64"), ("b512", "b512"), ("mlp", "mlp")):
            figure(f"cuda.matmul.dots.{model}.{when}.epoch2", dots,
                   dots.epoch(f"train_{when}_{file}_1.jsonl", 2)["seconds"],
                   f"mnist-train {'MLP batch 64' if model == 'mlp' else 'CNN batch ' + model[1:]}, f32, {when} tree "
                   f"(H200): epoch 2, s")
        summary = step_profile.summary(step_profile.kernels(dots.file(f"profile_{when}_b64.csv")))
        figure(f"cuda.matmul.dots.step.b64.{when}.us", dots, summary["us_per_step"],
               f"kernel time a step (ncu), CNN batch 64, f32, {when} tree, µs")
        figure(f"cuda.matmul.dots.step.b64.{when}.fc2.us", dots,
               sum(e["us_per_step"] for e in summary["kernels"]
                   if e["kernel"] in ("matmul::smem_tiling_kernel", "matmul::dots_kernel")),
               f"fc2's three products a step (ncu; 03 before, 18 after), CNN batch 64, f32, {when} tree, µs")
    for batch in (64, 512):
        summary = step_profile.summary(step_profile.kernels(train.file(f"profile_b{batch}.csv")))
        figure(f"cuda.conv2d.weight-tma.step.b{batch}.us", train, summary["us_per_step"],
               f"kernel time a step (ncu), CNN batch {batch}, f32, backward weight version 6 copying by TMA, µs")
        figure(f"cuda.conv2d.weight-tma.step.b{batch}.weight.us", train,
               sum(e["us_per_step"] for e in summary["kernels"] if e["kernel"] == "conv2d::weight_ring_kernel"),
               f"conv2's weight gradient kernel a step (ncu), CNN batch {batch}, f32, copying by TMA, µs")
    figure("cuda.conv2d.columns.conv1-b512.bwd-input.bf16-before.us", regs,
           regs.kernel("conv2d", "bwd-input production (BF16)", "conv1 x[512,1,28,28] w[32,1,3,3]")["ms"] * 1000,
           "conv2d bwd-input production (BF16) at conv1, batch 512, before version 13 (widened to f32, version 8), µs")
    import step_profile
    for tag, run, names in (("before", runs["2026-11-28-h200-ring-profile"], {"conv2d::implicit_gemm_tc_kernel"}),
                            ("after", runs["2026-11-28-h200-weight-ring-profile"], {"conv2d::weight_ring_kernel"})):
        summary = step_profile.summary(step_profile.kernels(run.file("profile_b512.csv")))
        figure(f"cuda.conv2d.weight-ring.step.b512.{tag}.us", run, summary["us_per_step"],
               f"kernel time a step (ncu), CNN batch 512, f32, {tag} backward weight version 6, µs")
        figure(f"cuda.conv2d.weight-ring.step.b512.{tag}.weight.us", run,
               sum(e["us_per_step"] for e in summary["kernels"] if e["kernel"] in names),
               f"the conv2 weight gradient's GEMM kernel a step (ncu), CNN batch 512, f32, {tag} version 6, µs")
    # ---- matmul 17 (3xTF32 on wgmma) beside 12, 07, 09 and cuBLAS in one call on an H200
    # (docs/runs/2026-11-28-h200-3xtf32-wgmma), and mnist-train's f32 epochs with it in production ----
    x3 = runs["2026-11-28-h200-3xtf32-regs"]
    x3_shapes = {"4096": "4096x4096x4096", "4096Bt": "4096x4096x4096 B^T", "fc1-b64": "64x128x9216 B^T",
                 "dx-b64": "64x9216x128", "fc1-b512": "512x128x9216 B^T",
                 "dx-b512": "512x9216x128", "dw-b512": "9216x128x512 A^T", "mlp-fc1": "64x128x784"}
    x3_versions = {"17": "17_3xtf32_wgmma", "12": "12_3xtf32", "07": "07_warptile", "09": "09_split_k",
                   "cublas-fp32": "cuBLAS SGEMM"}
    for tag, names in (("4096", "17 12 cublas-fp32"), ("4096Bt", "17 cublas-fp32"), ("fc1-b64", "17 09"),
                       ("dx-b64", "17 cublas-fp32"), ("fc1-b512", "17 09 cublas-fp32"),
                       ("dx-b512", "17 07"), ("dw-b512", "17 12"), ("mlp-fc1", "17 09")):
        shape = x3_shapes[tag]
        for name in names.split():
            version = x3_versions[name]
            row_ms = x3.kernel("matmul", version, shape)["ms"]
            if tag.startswith("4096"):
                figure(f"cuda.matmul.x3.{tag}.{name}.ms", x3, row_ms, f"matmul {version} at {shape} (H200), ms")
            else:
                figure(f"cuda.matmul.x3.{tag}.{name}.us", x3, row_ms * 1000, f"matmul {version} at {shape} (H200), µs")
    figure("cuda.matmul.x3.4096.13.tflops", x3, x3.kernel("matmul", "13_tf32_wgmma", "4096x4096x4096")["value"],
           "matmul 13_tf32_wgmma (TF32) at 4096^3 (H200), TFLOP/s")
    figure("cuda.matmul.x3.4096.17.tflops", x3, x3.kernel("matmul", "17_3xtf32_wgmma", "4096x4096x4096")["value"],
           "matmul 17_3xtf32_wgmma at 4096^3 (H200), TFLOP/s")
    for tag, file, what in (("b64", "train.jsonl", "batch 64, f32"), ("b512", "train_b512.jsonl", "batch 512, f32")):
        figure(f"cuda.matmul.x3.epoch2.{tag}", x3, x3.epoch(file, 2)["seconds"],
               f"mnist-train {what}, matmul 17 in production (H200): epoch 2, s")
    # 17's first form, both tiles split in shared memory (the call before, same GPU)
    first = runs["2026-11-28-h200-3xtf32-wgmma"]
    figure("cuda.matmul.x3-smem.4096.17.ms", first, first.kernel("matmul", "17_3xtf32_wgmma", "4096x4096x4096")["ms"],
           "matmul 17_3xtf32_wgmma at 4096^3 with both tiles split in shared memory (H200), ms")
    # ---- conv2d version 12 in 3xTF32 with the window's fragments split by the consumers
    # (docs/runs/2026-11-28-h200-ring-regs, one H200) ----
    rr = runs["2026-11-28-h200-ring-regs"]
    conv_figures("ring-regs", rr, {"conv2-b512": "conv2 x[512,32,26,26] w[64,32,3,3]"},
                 [(f"{what}.{name}", f"{what} {version}") for what in ("fwd", "bwd-input")
                  for name, version in (("v12-3xtf32", "12 wgmma ring 3xTF32"), ("cudnn", "cuDNN"))])
    conv_figures("ring-regs", rr, {"conv2-b64": "conv2 x[64,32,26,26] w[64,32,3,3]",
                                   "large": "large x[64,128,56,56] w[128,128,3,3] pad 1"},
                 (("fwd.v12-3xtf32", "fwd 12 wgmma ring 3xTF32"), ("fwd.cudnn", "fwd cuDNN")))
    for batch in (64, 512):  # the same, the call before the split sums in tiles
        shape = f"conv1 x[{batch},1,28,28] w[32,1,3,3]"
        figure(f"cuda.conv2d.rows.conv1-b{batch}.bwd-weight-bf16.before.us", kb,
               kb.kernel("conv2d", "bwd-weight production (BF16)", shape)["ms"] * 1000,
               f"conv2d bwd-weight production (BF16) at {shape}, before the split sums in tiles, µs")
    # ---- 3xTF32's NaN recomputation out of line (matmul 12 and 17, backward weight 6), against c31ab59
    # in one call (docs/runs/2026-11-29-h200-nan-out-of-line): the CNN's fc1 products, epoch 2 (the
    # first of two runs each) and the f32 CNN's step at batch 64 ----
    ool = runs["2026-11-29-h200-nan-out-of-line"]
    for tag, shape, file, version in (("dw-b64.07", "9216x128x64 A^T", "9216x128x", "07_warptile"),
                                      ("dw-b64.17", "9216x128x64 A^T", "9216x128x", "17_3xtf32_wgmma")):
        figure(f"cuda.matmul.nan-out-of-line.{tag}.new.us", ool,
               ool.kernel("matmul", version, shape, f"k_new_{file}.json")["ms"] * 1000,
               f"matmul {version} at {shape}, new tree (H200), µs")
    for tag, shape, file, version in (("fc1-b64.17", "64x128x9216 B^T", "x128x9216", "17_3xtf32_wgmma"),
                                      ("dx-b64.17", "64x9216x128", "x9216x", "17_3xtf32_wgmma"),
                                      ("dw-b64.12", "9216x128x64 A^T", "9216x128x", "12_3xtf32")):
        for when in ("old", "new"):
            figure(f"cuda.matmul.nan-out-of-line.{tag}.{when}.us", ool,
                   ool.kernel("matmul", version, shape, f"k_{when}_{file}.json")["ms"] * 1000,
                   f"matmul {version} at {shape}, {when} tree (H200), µs")
    old_new_training("cuda.matmul.nan-out-of-line", ool, steps=(64,), kernels=False)
    # ---- a first layer's relu gradient read by its weight kernel (version 5), against 28559a8 in one
    # call (docs/runs/2026-11-29-h200-relu-weight): the f32 CNN's step under ncu ----
    rw = runs["2026-11-29-h200-relu-weight"]

    def step_kernels(when, batch):
        summary = step_profile.summary(step_profile.kernels(rw.file(f"profile_{when}_b{batch}.csv")))
        return summary, {e["kernel"]: e["us_per_step"] for e in summary["kernels"]}
    for batch in (64, 512):
        old, old_k = step_kernels("old", batch)
        new, new_k = step_kernels("new", batch)
        figure(f"cuda.conv2d.relu-weight.b{batch}.old.unary.us", rw, old_k["map_vec_kernel (UnaryGrad)"],
               f"relu's gradient as a pass (map_vec UnaryGrad) a step, CNN batch {batch}, f32, before, µs")
        window = "conv2d::backward_weight_window_kernel"
        if batch == 512:
            figure("cuda.conv2d.relu-weight.b512.old.window.us", rw, old_k[window],
                   "conv1's weight gradient (version 5's window kernel) a step, CNN batch 512, f32, before, µs")
            figure("cuda.conv2d.relu-weight.b512.new.window.us", rw, new_k[window],
                   "the same, reading relu's output beside grad_y, µs")
            figure("cuda.conv2d.relu-weight.b512.old.step.us", rw, old["us_per_step"],
                   "kernel time a step (ncu), CNN batch 512, f32, before, µs")
            figure("cuda.conv2d.relu-weight.b512.new.step.us", rw, new["us_per_step"],
                   "kernel time a step (ncu), CNN batch 512, f32, relu's gradient in the weight kernel, µs")
        else:
            figure("cuda.conv2d.relu-weight.b64.window-more.us", rw, new_k[window] - old_k[window],
                   "what reading relu's output added to conv1's weight gradient kernel a step, CNN batch 64, f32, µs")
    # ---- the f32 step at batch 64 under ncu with warm caches, 28559a8 (07 on fc1's weight gradient)
    # against 431d315 (12 there), and conv1's window kernel under ncu's full set
    # (docs/runs/2026-11-29-h200-window-ncu) ----
    wn = runs["2026-11-29-h200-window-ncu"]
    for name, when, kernel in (("07", "old", "matmul::warptile_kernel"), ("12", "new", "matmul::split_tf32x3_kernel")):
        summary = step_profile.summary(step_profile.kernels(wn.file(f"warm_{when}_b64.csv")))
        figure(f"cuda.matmul.window-ncu.step-dw.{name}.us", wn,
               sum(e["us_per_step"] for e in summary["kernels"] if e["kernel"] == kernel),
               f"fc1's weight gradient (9216x128x64 A^T) on {name} a step, CNN batch 64, f32, ncu with warm caches, µs")
    # ---- version 5's window kernel on 32-bit offsets with shorter bands at small batches, and
    # sum_splits on 32 rows of threads from 128 partials, against 149be83 in one call
    # (docs/runs/2026-11-29-h200-window-sums), and the same builds' batch-64 epochs four times each
    # (docs/runs/2026-11-29-h200-window-epochs) ----
    ws = runs["2026-11-29-h200-window-sums"]
    for when in ("old", "new"):
        for batch in (64, 512):
            summary = step_profile.summary(step_profile.kernels(ws.file(f"profile_{when}_b{batch}.csv")))
            per = {e["kernel"]: e["us_per_step"] for e in summary["kernels"]}
            figure(f"cuda.conv2d.window-sums.b{batch}.{when}.window.us", ws, per["conv2d::backward_weight_window_kernel"],
                   f"conv1's weight gradient window kernel a step (ncu), CNN batch {batch}, f32, {when} tree, µs")
            figure(f"cuda.conv2d.window-sums.b{batch}.{when}.sums.us", ws, per["conv2d::sum_splits_kernel"],
                   f"the step's sum_splits kernels (ncu), CNN batch {batch}, f32, {when} tree, µs")
            figure(f"cuda.conv2d.window-sums.b{batch}.{when}.step.us", ws, summary["us_per_step"],
                   f"kernel time a step (ncu), CNN batch {batch}, f32, {when} tree, µs")
        figure(f"cuda.conv2d.window-sums.bench-b64.{when}.us", ws,
               ws.kernel("conv2d", "bwd-weight 5 short reduction, input rows in shared memory", "conv1 x[64,1,28,28] w[32,1,3,3]",
                         f"conv1_{when}.json")["ms"] * 1000,
               f"kernel-bench conv1's weight gradient (version 5, f32) at batch 64, {when} tree, µs")
    we = runs["2026-11-29-h200-window-epochs"]
    for when in ("old", "new"):
        seconds = [we.epoch(f"train_{when}_b64_{i}.jsonl", e)["seconds"] for i in (1, 2, 3, 4) for e in (2, 3)]
        figure(f"cuda.conv2d.window-epochs.b64.{when}.epoch", we, sum(seconds) / len(seconds),
               f"mnist-train CNN batch 64, f32, {when} tree (H200): epochs 2 and 3 of four runs, mean, s")
    # ---- the batch gathered in one launch straight into the captured step's inputs, and the loss's
    # seed kept, against e82c612's library in one call (docs/runs/2026-11-29-h200-batch-into) ----
    bi = runs["2026-11-29-h200-batch-into"]
    old_new_training("kernels.batch-into", bi, steps=(64,))
    for when in ("old", "new"):
        for tag, file, what in (("mlp", "mlp", "MLP batch 64, f32"), ("b64-bf16", "b64_bf16", "CNN batch 64, bf16")):
            seconds = [bi.epoch(f"train_{when}_{file}_{i}.jsonl", e)["seconds"] for i in (1, 2) for e in (2, 3)]
            figure(f"kernels.batch-into.{tag}.{when}.epoch", bi, sum(seconds) / len(seconds),
                   f"mnist-train {what}, {when} tree (H200): epochs 2 and 3 of two runs, mean, s")
    # The four-model comparisons of one call: KEY.NAME.WHEN.epoch, the mean of epochs 2 and 3 of runs
    # 1-3 (train_WHEN_NAME_i.jsonl), for each (when, name) in `cases` (NAME's _ as - in the key).
    models = (("b64", "CNN batch 64, f32"), ("b512", "CNN batch 512, f32"), ("mlp", "MLP batch 64, f32"),
              ("b64_bf16", "CNN batch 64, bf16"))

    def three_runs(key, run, cases):
        for when, name, what in cases:
            seconds = [run.epoch(f"train_{when}_{name}_{i}.jsonl", e)["seconds"] for i in (1, 2, 3) for e in (2, 3)]
            figure(f"{key}.{name.replace('_', '-')}.{when}.epoch", run, sum(seconds) / len(seconds),
                   f"mnist-train {what}, {when} (H200): epochs 2 and 3 of three runs, mean, s")

    def each_model(whens):
        return [(when, name, what) for when in whens for name, what in models]

    # ---- each progress update's losses read with read_async and looked at one update later,
    # against df8fa0a's blocking read in one call (docs/runs/2026-11-29-h200-async-reads) ----
    three_runs("kernels.async-reads", runs["2026-11-29-h200-async-reads"],
               [(when, name, what) for when in ("old", "new") for name, what in models[:3]]
               + [("new", "b64_quiet", "CNN batch 64, f32, --log-interval 100000")])
    # ---- the correct predictions counted in the loss's kernel (cross_entropy_counting), against
    # 4ecaac3's count_correct launch in one call (docs/runs/2026-11-29-h200-loss-counting) ----
    lc = runs["2026-11-29-h200-loss-counting"]
    three_runs("kernels.loss-counting", lc, each_model(("old", "new")))
    summary = step_profile.summary(step_profile.kernels(lc.file("profile_new_b64.csv")))
    figure("kernels.loss-counting.step.b64.kernels", lc, summary["kernels_per_step"],
           "kernels a step (ncu), CNN batch 64, f32, the counting loss")
    figure("kernels.loss-counting.step.b64.us", lc, summary["us_per_step"],
           "kernel time a step (ncu), CNN batch 64, f32, the counting loss, µs")
    figure("kernels.loss-counting.step.b64.loss.us", lc,
           next(e["us_per_step"] for e in summary["kernels"] if e["kernel"] == "softmax::cross_entropy_reduced_kernel"),
           "the counting loss's kernel a step (ncu), CNN batch 64, f32, µs")
    # ---- programmatic dependent launches of the step's kernels, waiting at their start (new) or
    # also letting the next one launch at their start (early), against 66ebba9 in one call
    # (docs/runs/2026-11-29-h200-dependent-launches) ----
    three_runs("kernels.dependent", runs["2026-11-29-h200-dependent-launches"], each_model(("old", "new", "early")))
    # ---- the small kernels also launching the next one at their start, against 26d26bf in one call
    # (docs/runs/2026-11-29-h200-dependent-small-early) ----
    three_runs("kernels.small-early", runs["2026-11-29-h200-dependent-small-early"], each_model(("old", "new")))
    # ---- matmuls 07 and 13 launching the next kernel at their start as well: tried against db2fe1c
    # in one call, not kept (docs/runs/2026-11-29-h200-dependent-matmul-early) ----
    three_runs("kernels.matmul-early", runs["2026-11-29-h200-dependent-matmul-early"], each_model(("old", "new")))
    # Old-against-new comparisons of one call with a number of runs each: KEY.NAME.WHEN.epoch, the
    # mean of epochs 2 and 3 of runs 1 to N (train_WHEN_NAME_i.jsonl), for each (name, what, N).
    def n_runs(key, run, cases):
        for name, what, n in cases:
            for when in ("old", "new"):
                seconds = [run.epoch(f"train_{when}_{name}_{i}.jsonl", e)["seconds"] for i in range(1, n + 1)
                           for e in (2, 3)]
                figure(f"{key}.{name}.{when}.epoch", run, sum(seconds) / len(seconds),
                       f"mnist-train {what}, {when} (H200): epochs 2 and 3 of {n} runs, mean, s")

    # ---- a captured step's losses kept in a ring its graph appends to (CapturedStep::keep), against
    # 9caf950's clone of each loss after its replay, in one call (docs/runs/2026-11-29-h200-loss-ring):
    # the CNN at batch 64 and the MLP three runs each, the CNN at batch 512 and in bf16 two ----
    four = (("b64", "CNN batch 64, f32", 3), ("mlp", "MLP batch 64, f32", 3), ("b512", "CNN batch 512, f32", 2),
            ("bf16", "CNN batch 64, bf16", 2))
    n_runs("kernels.loss-ring", runs["2026-11-29-h200-loss-ring"], four)
    # ---- the batch gathered by the captured step's graph at each replay (DataLoader::batch_at),
    # against b1c13c7's gather before each replay, in one call (docs/runs/2026-11-29-h200-batch-at):
    # the CNN at batch 64 and the MLP three runs each, the CNN at batch 512 and in bf16 two, the CNN
    # with --augment 2 (epoch 2 of one run) ----
    at = runs["2026-11-29-h200-batch-at"]
    n_runs("kernels.batch-at", at, four)
    for when in ("old", "new"):
        figure(f"kernels.batch-at.augment.{when}.epoch", at, at.epoch(f"train_{when}_augment_1.jsonl", 2)["seconds"],
               f"mnist-train CNN batch 64, f32, --augment 2, {when} (H200): epoch 2, s")
    # ---- the max pool's backward with dropout in 16-byte pieces of grad_x, a thread each, against
    # bd2a77c's thread per four windows, in one call (docs/runs/2026-11-29-h200-pool-pieces) ----
    pp = runs["2026-11-29-h200-pool-pieces"]
    n_runs("kernels.pool-pieces", pp, (("b512", "CNN batch 512, f32", 3), ("b64", "CNN batch 64, f32", 3),
                                       ("bf16", "CNN batch 64, bf16", 2), ("bf16b512", "CNN batch 512, bf16", 2)))
    for batch in (512, 64):
        for when, kernel in (("old", "max_pool_2x2_dropout_backward_kernel"),
                             ("new", "max_pool_2x2_dropout_backward_pieces_kernel")):
            summary = step_profile.summary(step_profile.kernels(pp.file(f"profile_{when}_b{batch}.csv")))
            figure(f"kernels.pool-pieces.b{batch}.{when}.us", pp,
                   next(e["us_per_step"] for e in summary["kernels"] if e["kernel"] == kernel),
                   f"the f32 CNN's max pool backward with dropout a step (ncu, warm L2), batch {batch}, {when}, µs")
    # ---- conv2d version 12 in bf16 (16 channels a stage, the patch through the producer's
    # registers), production's rule, and the bf16 epochs against f0cba4b's build in one call
    # (docs/runs/2026-11-29-h200-bf16-ring); the rule's own bench after it (-bf16-ring-rule) ----
    br = runs["2026-11-29-h200-bf16-ring-rule"]
    bf16_shapes = {"large": ("large x[64,128,56,56] w[128,128,3,3] pad 1", "kernels_large.json"),
                   "conv2-b512": ("conv2 x[512,32,26,26] w[64,32,3,3]", "kernels_conv2.json"),
                   "conv2-b64": ("conv2 x[64,32,26,26] w[64,32,3,3]", "kernels_conv2.json")}
    for tag, (shape, file) in bf16_shapes.items():
        for what in ("fwd", "bwd-input"):
            for name, version in (("v12", f"{what} 12 wgmma ring BF16"), ("v9", f"{what} 9 cells BF16"),
                                  ("cudnn", f"{what} cuDNN BF16")):
                figure(f"cuda.conv2d.bf16-ring.{tag}.{what}.{name}.us", br,
                       br.kernel("conv2d", version, shape, file)["ms"] * 1000, f"conv2d {version} at {shape} (H200), µs")
    shape, file = bf16_shapes["large"]
    figure("cuda.conv2d.bf16-ring.large.fwd.v12-tf32.us", br,
           br.kernel("conv2d", "fwd 12 wgmma ring TF32", shape, file)["ms"] * 1000,
           f"conv2d fwd 12 wgmma ring TF32 at {shape} (H200), µs")
    n_runs("cuda.conv2d.bf16-ring", runs["2026-11-29-h200-bf16-ring"],
           (("bf16", "CNN batch 64, bf16", 2), ("b512_bf16", "CNN batch 512, bf16", 2)))
    # ---- backward weight version 6 in bf16 (by TMA, A's pixel pairs from two 2-byte loads) on one
    # H200, as committed (docs/runs/2026-11-29-h200-weight-ring-lead: the patch's lead worked out
    # from the element type, not by a division); its first run (-bf16-weight-ring) had the division ----
    bw = runs["2026-11-29-h200-weight-ring-lead"]
    large = "large x[64,128,56,56] w[128,128,3,3] pad 1"
    for name, version in (("v6", "bwd-weight 6 wgmma ring BF16"), ("v3", "bwd-weight 3 tensor cores BF16, image pairs"),
                          ("v4", "bwd-weight 4 cells BF16"), ("cudnn", "bwd-weight cuDNN BF16"),
                          ("v6-tf32", "bwd-weight 6 wgmma ring TF32")):
        figure(f"cuda.conv2d.bf16-weight-ring.large.{name}.us", bw,
               bw.kernel("conv2d", version, large, "kernels_large.json")["ms"] * 1000,
               f"conv2d {version} at {large} (H200), µs")
    # the lead by a division (9636d46) and from the element type, each against f0cba4b in one call
    for key, name, old_new in (("weight-ring-lead", "2026-11-29-h200-weight-ring-lead", "kernels_conv2_{}.json"),
                               ("weight-lead-division", "2026-11-29-h200-weight-lead-division", "kernels_{}.json")):
        run = runs[name]
        n_runs(f"cuda.conv2d.{key}", run, (("b512", "CNN batch 512, f32", 3),))
        for when in ("old", "new"):
            figure(f"cuda.conv2d.{key}.conv2-b512.v6-3xtf32.{when}.us", run,
                   run.kernel("conv2d", "bwd-weight 6 wgmma ring 3xTF32", "conv2 x[512,32,26,26] w[64,32,3,3]",
                              old_new.format(when))["ms"] * 1000,
                   f"conv2d bwd-weight 6 wgmma ring 3xTF32 at conv2, batch 512, {when} ({name}), µs")
    # ---- backward weight version 6 reading each stage's pixel offsets from a table in shared
    # memory (the consumers' walks gone), against 6aaef39 in one call (docs/runs/2026-11-29-h200-weight-offsets) ----
    wo = runs["2026-11-29-h200-weight-offsets"]
    for tag, shape in (("large", "large x[64,128,56,56] w[128,128,3,3] pad 1"),
                       ("conv2-b512", "conv2 x[512,32,26,26] w[64,32,3,3]")):
        file = "kernels_large_{}.json" if tag == "large" else "kernels_conv2_{}.json"
        for name, version in (("bf16", "bwd-weight 6 wgmma ring BF16"), ("tf32", "bwd-weight 6 wgmma ring TF32"),
                              ("3xtf32", "bwd-weight 6 wgmma ring 3xTF32")):
            if tag != "large" and name == "bf16":
                continue  # conv2's rows of 26 bf16 are not TMA's: version 4 runs there
            for when in ("old", "new"):
                figure(f"cuda.conv2d.weight-offsets.{tag}.{name}.{when}.us", wo,
                       wo.kernel("conv2d", version, shape, file.format(when))["ms"] * 1000,
                       f"conv2d {version} at {shape}, {when} (H200), µs")
    figure("cuda.conv2d.weight-offsets.large.cudnn-bf16.us", wo,
           wo.kernel("conv2d", "bwd-weight cuDNN BF16", "large x[64,128,56,56] w[128,128,3,3] pad 1",
                     "kernels_large_new.json")["ms"] * 1000,
           "conv2d bwd-weight cuDNN BF16 at the large layer, in the new build's bench (H200), µs")
    # ---- the f32 CNN's epochs with backward weight 6's pixel offsets (old: eeab05f) against 72bd097
    # (base), and with version 12's 3xTF32 patch split by the producer (new: tried, not kept), in one
    # call (docs/runs/2026-11-29-h200-ring-producer-split) ----
    ps = runs["2026-11-29-h200-ring-producer-split"]
    for batch, n in (("b512", 3), ("b64", 2)):
        for when in ("base", "old", "new"):
            seconds = [ps.epoch(f"train_{when}_{batch}_{i}.jsonl", e)["seconds"] for i in range(1, n + 1) for e in (2, 3)]
            figure(f"cuda.conv2d.ring-producer-split.{batch}.{when}.epoch", ps, sum(seconds) / len(seconds),
                   f"mnist-train CNN {batch}, f32, {when} (H200): epochs 2 and 3 of {n} runs, mean, s")
    for tag, shape, file in (("conv2-b512", "conv2 x[512,32,26,26] w[64,32,3,3]", "kernels_conv2_{}.json"),
                             ("large", "large x[64,128,56,56] w[128,128,3,3] pad 1", "kernels_large_{}.json")):
        for what in ("fwd", "bwd-input"):
            for when in ("old", "new"):
                figure(f"cuda.conv2d.ring-producer-split.{tag}.{what}.{when}.us", ps,
                       ps.kernel("conv2d", f"{what} 12 wgmma ring 3xTF32", shape, file.format(when))["ms"] * 1000,
                       f"conv2d {what} 12 wgmma ring 3xTF32 at {shape}, {when} (H200), µs")
    # ---- version 12's consumer warpgroups on items of their own, in turn (alternating): everywhere
    # (-alternate-all, tried), then in 3xTF32 where an item has at most 4 stages and resident
    # weights (-alternate, kept), each against eeab05f in one call ----
    conv2 = "conv2 x[512,32,26,26] w[64,32,3,3]"
    for key, name, cases in (
            ("ring-alternate-all", "2026-11-29-h200-ring-alternate-all",
             (("conv2", "fwd", "3xTF32"), ("conv2", "bwd-input", "3xTF32"), ("conv2", "bwd-input", "TF32"),
              ("large", "fwd", "3xTF32"), ("large", "fwd", "TF32"))),
            ("ring-alternate", "2026-11-29-h200-ring-alternate",
             (("conv2", "fwd", "3xTF32"), ("conv2", "bwd-input", "3xTF32"), ("conv2", "fwd", "TF32"),
              ("conv2", "bwd-input", "TF32")))):
        run = runs[name]
        for tag, what, math in cases:
            shape = conv2 if tag == "conv2" else "large x[64,128,56,56] w[128,128,3,3] pad 1"
            for when in ("old", "new"):
                figure(f"cuda.conv2d.{key}.{tag}.{what}.{math.lower()}.{when}.us", run,
                       run.kernel("conv2d", f"{what} 12 wgmma ring {math}", shape, f"kernels_{tag}_{when}.json")["ms"] * 1000,
                       f"conv2d {what} 12 wgmma ring {math} at {shape}, {when} ({name}), µs")
    n_runs("cuda.conv2d.ring-alternate-all", runs["2026-11-29-h200-ring-alternate-all"],
           (("b512", "CNN batch 512, f32", 3), ("b512tf32", "CNN batch 512, TF32", 2)))
    # the kept form's epochs from its log (its metrics files did not come back): epochs 2 and 3 of
    # two runs each, images a second
    alt_log = runs["2026-11-29-h200-ring-alternate"].text("train.log")
    for when, binary in (("old", ".device/old/bin/"), ("new", ".device/bin/")):
        for flavour, tf32 in (("b512", False), ("b512tf32", True)):
            speeds = []
            for block in alt_log.split("== ")[1:]:
                command = block.splitlines()[0]
                if command.startswith(binary + "mnist-train") and ("--tf32" in command) == tf32:
                    speeds += [float(m) for m in re.findall(r"^epoch  [23] .* (\d+) img/s", block, re.M)]
            assert len(speeds) == 4, (when, flavour, speeds)
            figure(f"cuda.conv2d.ring-alternate.{flavour}.{when}.images-per-s", runs["2026-11-29-h200-ring-alternate"],
                   sum(speeds) / len(speeds),
                   f"mnist-train CNN batch 512, {'TF32' if tf32 else 'f32'}, {when} (H200): epochs 2 and 3 of two runs, images a second")
    def old_new_kernels(key, run, family, cases):
        """kernel-bench's time of each (tag, version, shape, file with {when}) in the old and new builds"""
        for tag, version, shape, file in cases:
            for when in ("old", "new"):
                figure(f"{key}.{tag}.{when}.us", run, run.kernel(family, version, shape, file.format(when=when))["ms"] * 1000,
                       f"{family} {version} at {shape}, {when} (H200), µs")

    def old_new_speeds(key, run, cases, n, unit=1):
        """mnist-train's images a second (over `unit`), epochs 2 and 3 of runs 1..n of each
        (flavour, what): train_{old|new}_{flavour}_{i}.jsonl"""
        for flavour, what in cases:
            for when in ("old", "new"):
                speeds = [run.epoch(f"train_{when}_{flavour}_{i}.jsonl", e)["images_per_s"]
                          for i in range(1, n + 1) for e in (2, 3)]
                figure(f"{key}.{flavour}.{when}.images-per-s", run, sum(speeds) / len(speeds) / unit,
                       f"mnist-train {what}, {when} (H200): epochs 2 and 3 of {n} runs, images a second / {unit}")

    # ---- version 12 walking its sub-rings by a stage and a lap (no divisions), against 1b0e445 in
    # one call (docs/runs/2026-11-29-h200-ring-cursors): kernel-bench's first of two runs, and
    # mnist-train's epochs 2 and 3 of three runs each ----
    cur = runs["2026-11-29-h200-ring-cursors"]
    old_new_kernels("cuda.conv2d.ring-cursors.conv2", cur, "conv2d",
                    [(f"{what}.{math.lower()}", f"{what} 12 wgmma ring {math}", conv2, "kernels_conv2_{when}.json")
                     for what, math in (("fwd", "3xTF32"), ("bwd-input", "3xTF32"), ("fwd", "TF32"),
                                        ("bwd-input", "TF32"), ("fwd", "BF16"), ("bwd-input", "BF16"))])
    old_new_speeds("cuda.conv2d.ring-cursors", cur, (("b512", "CNN batch 512, f32"), ("b512tf32", "CNN batch 512, TF32")), 3)
    # ---- matmul 17 checking its results for a NaN once a thread or warpgroup, against c2c87da
    # (docs/runs/2026-11-29-h200-nan-once), then persistent, against 89c67de
    # (docs/runs/2026-11-29-h200-persistent-17), each in one call: fc1's gradients at batch 512 in
    # kernel-bench, mnist-train's epochs (thousands of images a second) ----
    epochs = (("b512", "CNN batch 512, f32"), ("b64", "CNN batch 64, f32"), ("b512tf32", "CNN batch 512, TF32"))
    for key, name, files, n in (("nan-once", "2026-11-29-h200-nan-once", ("fc1", "fc1"), 3),
                                ("persistent", "2026-11-29-h200-persistent-17", ("dx", "dw"), 2)):
        run = runs[name]
        dx, dw = (f"kernels_{f}_{{when}}.json" for f in files)
        old_new_kernels(f"cuda.matmul.{key}", run, "matmul",
                        (("dx", "17_3xtf32_wgmma", "512x9216x128", dx), ("dw", "17_3xtf32_wgmma", "9216x128x512 A^T", dw),
                         ("dx-tf32", "production (TF32)", "512x9216x128", dx)))
        old_new_speeds(f"cuda.matmul.{key}", run, epochs, n, unit=1000)
    walk = runs["2026-11-29-h200-ring-walk"]
    old_new_kernels("cuda.conv2d.ring-walk.conv2", walk, "conv2d",
                    [(f"{what}.{math.lower()}", f"{what} {v} wgmma ring {math}", conv2, "kernels_conv2_{when}.json")
                     for what, v, math in (("bwd-weight", 6, "3xTF32"), ("bwd-weight", 6, "TF32"),
                                           ("fwd", 12, "3xTF32"))])
    # ---- version 5's window kernel walking whole rounds of rows without a test at each, against
    # d11671d in one call (docs/runs/2026-11-30-h200-window-rounds): the kernel's mean time in the
    # step (ncu, its launches among 30 of it and sum_splits), mnist-train's epoch 2 of two runs ----
    rounds = runs["2026-11-30-h200-window-rounds"]
    for flavour, what in (("f32", "CNN batch 512, f32"), ("bf16", "CNN batch 512, bf16"), ("b64", "CNN batch 64, f32")):
        for when in ("old", "new"):
            times = [us for name, us in step_profile.kernels(rounds.file(f"ncu_{flavour}_{when}.csv"))
                     if name.endswith("backward_weight_window_kernel")]
            figure(f"cuda.conv2d.window-rounds.{flavour}.{when}.window.us", rounds, sum(times) / len(times),
                   f"conv1's weight gradient window kernel in the step (ncu), {what}, {when} tree, µs")
            speeds = [rounds.epoch(f"train_{flavour}_{when}_{i}.jsonl", 2)["images_per_s"] for i in (1, 2)]
            figure(f"cuda.conv2d.window-rounds.{flavour}.{when}.images-per-s", rounds, sum(speeds) / len(speeds) / 1000,
                   f"mnist-train {what}, {when} tree (H200): epoch 2 of two runs, thousands of images a second")
    large = runs["2026-11-29-h200-persistent-17-large"]
    old_new_kernels("cuda.matmul.persistent", large, "matmul",
                    [(f"{n}{'-bt' if bt else ''}", "17_3xtf32_wgmma", f"{n}x{n}x{n}{' B^T' if bt else ''}",
                      f"kernels_{n}_{{when}}.json") for n in (4096, 2048) for bt in (False, True)])
    first = runs["2026-11-29-h200-bf16-weight-ring"]
    figure("cuda.conv2d.bf16-weight-ring.first.large.v6.us", first,
           first.kernel("conv2d", "bwd-weight 6 wgmma ring BF16", "large x[64,128,56,56] w[128,128,3,3] pad 1",
                        "kernels_large.json")["ms"] * 1000,
           "conv2d bwd-weight 6 wgmma ring BF16 at the large layer, the first build (patch lead by a division), µs")
