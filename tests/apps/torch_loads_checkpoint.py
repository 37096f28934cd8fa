#!/usr/bin/python3
"""Checks that PyTorch loads a mnist-train checkpoint as the state dict of its own model:
examples/mnist's Net (cnn), the 784-128-10 MLP (mlp) or the small FastNet (fast), with
load_state_dict(strict=True), and that both give the same logits on a fixed input.

    tests/apps/torch_loads_checkpoint.py CHECKPOINT [LOGITS_FILE]

The file is read with a few lines of Python (the safetensors layout: 8-byte header length, JSON
header, raw little-endian data) so that only torch is needed, not the safetensors package; where
that package is installed, safetensors.torch.load_file reads it too and must agree. Exit 77 when
torch is missing (CTest reports a skip).
"""
import json
import struct
import sys

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("skipped: PyTorch is not installed (scripts/setup --dev installs it)")
    sys.exit(77)

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def load_file(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=DTYPES[info["dtype"]])
        tensors[name] = torch.from_numpy(array.reshape(info["shape"]).copy())
    return tensors, meta


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
        x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(self.dropout1(x), 1))))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(torch.flatten(x, 1))))


class FastNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc = nn.Linear(512, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def main():
    state, meta = load_file(sys.argv[1])
    try:
        from safetensors.torch import load_file as reference_load
        for name, tensor in reference_load(sys.argv[1]).items():
            assert torch.equal(tensor, state[name]), name
    except ImportError:
        pass
    model = {"cnn": Net, "mlp": MLP, "fast": FastNet}[meta["kiln.model"]]()
    model.load_state_dict(state, strict=True)
    model.eval()
    # The same input mnist-train's test would see: a fixed ramp, normalised.
    x = ((torch.arange(2 * 784, dtype=torch.float32) % 256 / 255 - 0.1307) / 0.3081).reshape(2, 1, 28, 28)
    with torch.no_grad():
        logits = model(x)
    print(f"loaded {sys.argv[1]} ({meta['kiln.model']}) into PyTorch {torch.__version__} with strict=True")
    print("logits", " ".join(f"{v:.6f}" for v in logits.flatten().tolist()))


if __name__ == "__main__":
    main()
