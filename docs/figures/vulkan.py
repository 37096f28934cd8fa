"""The figures that the Vulkan kernels' comments (kernels/vulkan/) quote, from one recorded run.

vulkan-bench on the H100 of docs/runs/2026-11-26-h100 (NVIDIA's Vulkan driver, Vulkan 1.4.312; device time
from timestamp queries), and the cuDNN / cuBLAS / CUDA rows of kernel-bench in the same run that the comments
set beside them. vulkan-bench's bandwidth rows are GB/s; the comments quote TB/s.
"""


def define(figure, table, runs):
    h100 = runs["2026-11-26-h100"]

    def vk(section, name):
        return h100.vulkan(section, name)

    def kernel(family, version, shape):
        return h100.kernel(family, version, shape)

    copy = vk("bandwidth", "copy")["value"]  # GB/s, 64 MB read and 64 MB written

    def bandwidth(name, row, what, ms=False, pct=False):
        """A bandwidth row of vulkan-bench: TB/s, and where asked its ms and its percent of the copy's rate."""
        r = vk("bandwidth", row)
        figure(f"{name}.tbps", h100, r["value"] / 1000, f"{what}, TB/s (vulkan-bench {row!r})")
        if ms:
            figure(f"{name}.ms", h100, r["ms"], f"{what}, ms (vulkan-bench {row!r})")
        if pct:
            figure(f"{name}.pct-copy", h100, r["value"] / copy * 100,
                   f"{what}, % of vulkan-bench's copy rate")

    def kernel_ms(name, row, what):
        figure(name, h100, vk("kernel", row)["ms"], f"{what}, ms (vulkan-bench kernel {row!r})")

    # the yardstick: a copy of [4096, 4096] f32 (bytes read and written per second)
    bandwidth("vulkan.copy", "copy", "copy of [4096, 4096] f32, read + written")

    # elementwise.comp
    bandwidth("vulkan.relu", "relu", "relu on [4096, 4096] f32, read + written")
    bandwidth("vulkan.add", "add (two inputs)", "add of two [4096, 4096] f32 tensors, 3 x 64 MB")
    bandwidth("vulkan.add.broadcast", "add, a row broadcast", "add of a broadcast row to [4096, 4096] f32")
    kernel_ms("vulkan.relu.mnist.ms", "relu [64,64,24,24]", "relu on [64, 64, 24, 24]")

    # reduce.comp
    bandwidth("vulkan.sum.rows.shuffle", "sum of rows, subgroup shuffles",
              "sums of [4096, 4096]'s rows, subgroup shuffles (67 MB read)", ms=True)
    bandwidth("vulkan.sum.rows.tree", "sum of rows, shared-memory tree",
              "sums of [4096, 4096]'s rows, shared-memory tree (67 MB read)", ms=True)
    bandwidth("vulkan.sum.columns", "sum of columns", "sums of [4096, 4096]'s columns (67 MB read)", ms=True)

    # softmax.comp, cross_entropy.comp
    bandwidth("vulkan.softmax.rows", "softmax of rows", "softmax over the rows of [4096, 4096] f32", pct=True)
    bandwidth("vulkan.softmax.columns", "softmax of columns", "softmax over the columns of [4096, 4096] f32",
              ms=True, pct=True)
    cuda_copy = kernel("copy", "cudaMemcpyAsync", "1 GiB")["value"]
    cuda_columns = kernel("softmax", "production (CudaBackend)", "[64, 1024, 256] axis 1")["value"]
    figure("vulkan.ref.cuda-softmax.columns.pct-copy", h100, cuda_columns / cuda_copy * 100,
           "CUDA's softmax (kernel-bench production) over axis 1 of [64, 1024, 256], % of cudaMemcpyAsync's rate")
    bandwidth("vulkan.cross_entropy.rows", "cross_entropy of rows (per row)",
              "cross-entropy, a loss per row of [4096, 4096] f32 logits (logits read)")

    # index.comp, random.comp
    bandwidth("vulkan.index_select", "index_select of 4096 random rows",
              "index_select of 4096 random rows of [4096, 4096] f32, read + written")
    bandwidth("vulkan.uniform", "uniform (write only)", "uniform draw of [4096, 4096] f32, written")
    bandwidth("vulkan.dropout", "dropout", "dropout on [4096, 4096] f32, read + written")

    # pool.comp
    bandwidth("vulkan.max_pool2d", "max_pool2d 2x2 (reads 64 MB, writes 16)",
              "max_pool2d 2x2 on [16, 64, 128, 128] f32 (64 MB read, 16 written)")
    bandwidth("vulkan.avg_pool2d", "avg_pool2d 2x2", "avg_pool2d 2x2 on [16, 64, 128, 128] f32 (64 MB read, 16 written)")
    kernel_ms("vulkan.max_pool2d.mnist.ms", "max_pool2d 2x2 [64,64,24,24]", "max_pool2d 2x2 on [64, 64, 24, 24]")
    kernel_ms("vulkan.max_pool2d.mnist.backward.ms", "max_pool2d backward", "max_pool2d 2x2 backward on [64, 64, 24, 24]")

    # batch_norm.comp
    bandwidth("vulkan.batch_norm.train", "batch_norm, training ([16, 64, 128, 128])",
              "batch_norm training on [16, 64, 128, 128] f32 (counted: x read once, y written)", ms=True)

    # optim.comp
    bandwidth("vulkan.adadelta", "Adadelta step (7 x 64 MB)", "Adadelta step on 16M f32 parameters (7 x 64 MB)", ms=True)
    bandwidth("vulkan.adam", "Adam step (7 x 64 MB)", "Adam step on 16M f32 parameters (7 x 64 MB)", ms=True)

    # conv2d.comp
    kernel_ms("vulkan.conv2d.conv2.fwd.ms", "conv2 forward [64,32,26,26] * [64,32,3,3]", "conv2 forward, batch 64")
    kernel_ms("vulkan.conv2d.conv2.bwd-input.ms", "conv2 input gradient", "conv2 input gradient, batch 64")
    kernel_ms("vulkan.conv2d.conv2.bwd-weight.ms", "conv2 weight gradient", "conv2 weight gradient, batch 64")
    kernel_ms("vulkan.conv2d.conv1.bwd-weight.ms", "conv1 weight gradient", "conv1 weight gradient, batch 64")
    # cuDNN's conv2 on the same GPU: cuda.conv2d.*.cudnn.conv2.ms (docs/figures/cuda.py)

    # matmul.comp, and cuBLAS SGEMM on the same GPU (kernel-bench)
    kernel_ms("vulkan.matmul.fc1.fwd.ms", "fc1 forward 64x128x9216 (B^T)", "fc1 forward 64x128x9216, f32")
    kernel_ms("vulkan.matmul.fc1.bwd-weight.ms", "fc1 weight gradient 128x9216x64", "fc1 weight gradient 128x9216x64")
    kernel_ms("vulkan.matmul.fc1.bwd-input.ms", "fc1 input gradient 64x9216x128", "fc1 input gradient 64x9216x128")
    for shape, name in (("64x128x9216 B^T", "fwd"), ("9216x128x64 A^T", "bwd-weight"), ("64x9216x128", "bwd-input")):
        figure(f"vulkan.ref.cublas.fc1.{name}.ms", h100, kernel("matmul", "cuBLAS SGEMM", shape)["ms"],
               f"cuBLAS SGEMM, fc1's {name} ({shape}), ms")

    # matmul_coop.comp: f16 products on cooperative matrices against gemm.glsl's f32, cuBLAS and CUDA's TF32
    figure("vulkan.matmul.f32.4096.tflops", h100, vk("matmul", "4096^3, f32")["value"],
           "matmul 4096^3 on gemm.glsl, f32, TFLOP/s")
    figure("vulkan.matmul.coop.4096.tflops", h100, vk("matmul", "4096^3, f16 cooperative matrices")["value"],
           "matmul 4096^3 on cooperative matrices (f16 products, f32 sums), TFLOP/s")
    figure("vulkan.matmul.coop.fc1.ms", h100, vk("matmul", "fc1 forward, f16 cooperative matrices")["ms"],
           "fc1 forward 64x128x9216 on cooperative matrices, ms")
    n = "4096x4096x4096"
    figure("vulkan.ref.cublas-sgemm.4096.tflops", h100, kernel("matmul", "cuBLAS SGEMM", n)["value"],
           "cuBLAS SGEMM at 4096^3, TFLOP/s (kernel-bench)")
