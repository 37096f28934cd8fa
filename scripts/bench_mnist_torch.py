#!/usr/bin/python3
"""Training epochs of PyTorch's examples/mnist models, for comparison with
mnist-train: the same models (cnn: examples/mnist's Net; mlp: 784-128-10), batch size, optimizer
(Adadelta, lr 1.0) and data held in memory as tensors on the training device, normalised once (as
kiln does), with a seeded shuffle drawn on that device per epoch. Prints the seconds of each
training epoch (on CUDA the clock stops after a synchronisation) and the test accuracy; with
--json FILE, also appends one JSON line an epoch there (the settings, PyTorch's version and TF32
switches, train_s, test_accuracy in %). --mode picks how PyTorch runs the step: eager (the
default), graph (the whole step, optimizer included, captured once in a CUDA graph and replayed:
PyTorch's fastest way to launch it) or compile (the model through torch.compile, PyTorch 2).

    /usr/bin/python3 scripts/bench_mnist_torch.py --model cnn [--device cpu|cuda] [--epochs 1]
        [--threads 2] [--batch-size 64] [--data data/mnist] [--json FILE] [--mode eager|graph|compile]

Compare with:  mnist-train --model cnn --epochs 1 --device cpu   (its "epoch 1 ... s" figure)
The IDX files may be raw or gzip'd (name.gz).
"""
import argparse
import datetime
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class Net(nn.Module):  # examples/mnist
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        return self.fc2(self.dropout2(x))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


def load(data, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(os.path.join(data, f"{prefix}-labels-idx1-ubyte"))
    x = (torch.from_numpy(images.copy()).float().div_(255) - 0.1307).div_(0.3081).unsqueeze(1)
    return x, torch.from_numpy(labels.copy()).long()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--data", default=os.environ.get("KILN_DATA", "data/mnist"))
    parser.add_argument("--json", metavar="FILE", help="append one JSON line an epoch to FILE")
    parser.add_argument("--mode", choices=["eager", "graph", "compile"], default="eager",
                        help="eager; graph: the whole step captured once in a CUDA graph and replayed (CUDA); "
                             "compile: the model through torch.compile")
    parser.add_argument("--precision", choices=["default", "bf16"], default="default",
                        help="default: PyTorch's own (f32 products, TF32 convolutions on CUDA); bf16: forward "
                             "and loss under torch.autocast(bfloat16), as mnist-train --precision bf16")
    args = parser.parse_args()
    if args.mode == "graph" and args.device != "cuda":
        parser.error("--mode graph needs --device cuda")
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    device = torch.device(args.device)
    train_x, train_y = (t.to(device) for t in load(args.data, "train"))
    test_x, test_y = (t.to(device) for t in load(args.data, "test"))
    model = (Net() if args.model == "cnn" else MLP()).to(device)
    # graph: the optimizer's step is captured too, so its state lives on the GPU (capturable)
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0, **({"capturable": True} if args.mode == "graph" else {}))
    forward = torch.compile(model) if args.mode == "compile" else model

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def train_step(x, y):
        opt.zero_grad(set_to_none=args.mode != "graph")  # a graph keeps its gradient buffers
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = F.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        return loss

    graph = None
    if args.mode == "graph":
        # PyTorch's whole-network capture: static input buffers, three warm-up steps on a side stream
        # (they train on the first batch: three steps more than eager), then one capture; a batch of
        # another size (the epoch's last) runs eagerly.
        static_x = train_x[:args.batch_size].clone()
        static_y = train_y[:args.batch_size].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                train_step(static_x, static_y)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            train_step(static_x, static_y)

    for epoch in range(1, args.epochs + 1):
        model.train()
        order = torch.randperm(len(train_x), device=device)
        sync()
        start = time.perf_counter()
        for i in range(0, len(order), args.batch_size):
            idx = order[i:i + args.batch_size]
            if graph is not None and len(idx) == args.batch_size:
                static_x.copy_(train_x[idx])
                static_y.copy_(train_y[idx])
                graph.replay()
            else:
                train_step(train_x[idx], train_y[idx])
        sync()
        train_seconds = time.perf_counter() - start

        model.eval()
        correct = 0
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            for i in range(0, len(test_x), 1000):
                correct += (model(test_x[i:i + 1000]).argmax(1) == test_y[i:i + 1000]).sum().item()
        where = torch.cuda.get_device_name() if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
        accuracy = 100 * correct / len(test_x)
        print(f"pytorch {torch.__version__} {where}, {args.mode}, {args.precision}, model {args.model}, "
              f"batch {args.batch_size}: "
              f"epoch {epoch} train {train_seconds:.2f} s, test accuracy {accuracy:.2f}%",
              flush=True)
        if args.json:
            line = {"program": "bench_mnist_torch.py", "torch": torch.__version__,
                    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                    "device": where, "model": args.model, "batch_size": args.batch_size, "mode": args.mode,
                    "precision": args.precision,
                    "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                    "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                    "epoch": epoch, "train_s": round(train_seconds, 4), "test_accuracy": accuracy}
            with open(args.json, "a") as f:
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
