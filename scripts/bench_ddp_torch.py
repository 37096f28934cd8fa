#!/usr/bin/python3
"""PyTorch's side of dist-bench (apps/bench/dist_bench.cpp): the same all-reduce sizes and the same
data-parallel training step, one process per GPU under torchrun (NCCL), or CPU processes (gloo).

allreduce: torch.distributed.all_reduce, f32 sum in place, over messages of 4K, 16K, ... 1G bytes
(powers of 4, then 128M, 256M). Per size: time per call, algbw = bytes / time, busbw = algbw x
2(n-1)/n (nccl-tests' formula; 0 with one rank, where nothing crosses a link).

ddp: 8 x (Linear 4096->4096, ReLU), MSE against a fixed random target, SGD lr 0.01, TF32 on
(torch.backends.cuda.matmul.allow_tf32), at each per-rank batch (512 and 2048): the step of every
rank training its own copy alone (no DDP, all ranks at once, each on its own GPU), under
DistributedDataParallel with its defaults, and under DDP "tuned" (bucket_cap_mb=100,
gradient_as_bucket_view=True, static_graph=True); efficiency = alone / DDP.

Timing as dist-bench's: after warmup calls the ranks meet at a barrier with their GPUs idle, each
stops its clock once its GPU has finished the timed calls (after torch.cuda.synchronize, or the
loss read back), and a figure is the slowest rank's time divided by the calls. Rank 0 prints;
--json appends one JSON line per measure (dist-bench's fields, "impl": "torch").

    python3 -m torch.distributed.run --standalone --nproc-per-node GPUS scripts/bench_ddp_torch.py
        [--only allreduce|ddp] [--max-bytes 1G] [--iters N] [--batch 512 --batch 2048] [--json FILE]
    python3 scripts/bench_ddp_torch.py                     # one rank, without torchrun
    python3 -m torch.distributed.run --standalone --nproc-per-node 2 scripts/bench_ddp_torch.py \\
        --device cpu --max-bytes 16M --width 512 --batch 64  # gloo, a CPU smoke run

Compare with:  mpirun -np GPUS dist-bench allreduce   and   mpirun -np GPUS dist-bench ddp
(scripts/device-run dist runs all three on every GPU of the machine). On the H100 machines set
NCCL_NVLS_ENABLE=0.
"""
import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 128 << 20, 256 << 20,
         1 << 30]
TIMED_SECONDS = 0.2  # per size, when --iters is 0


def parse_bytes(text):
    """'16M' -> 16 MiB, as dist-bench's --max-bytes (K, M, G: powers of 1024)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    return int(text[:-1]) * units[text[-1]] if text and text[-1] in units else int(text)


def size_label(nbytes):
    for shift, unit in ((30, "G"), (20, "M")):
        if nbytes >= 1 << shift:
            return f"{nbytes >> shift}{unit}"
    return f"{nbytes >> 10}K"


class Job:
    """This process's rank, its device, and the clock the ranks share."""

    def __init__(self, device_type):
        # One rank without torchrun: the environment it would have set.
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                           ("MASTER_PORT", "29511")):
            os.environ.setdefault(key, value)
        self.local_rank = int(os.environ["LOCAL_RANK"])
        if device_type == "cuda":
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
            dist.init_process_group("nccl")
            self.name = torch.cuda.get_device_name()
        else:
            self.device = torch.device("cpu")
            dist.init_process_group("gloo")
            self.name = "cpu"
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()
        self.backend = dist.get_backend()

    def synchronize(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def slowest(self, value):
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def seconds_per_call(self, calls, call, synchronize=None):
        """The slowest rank's seconds per call of `call`, made `calls` times from a common start."""
        synchronize = synchronize or self.synchronize
        synchronize()
        dist.barrier(**({"device_ids": [self.local_rank]} if self.device.type == "cuda" else {}))
        self.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        synchronize()
        return self.slowest(time.perf_counter() - start) / calls

    def json_line(self, path, bench, **fields):
        if not path or self.rank != 0:
            return
        line = {"bench": bench, "impl": "torch", "group": self.backend, "device": self.name, "ranks": self.size,
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
                "torch": torch.__version__,
                "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}, **fields}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def bench_allreduce(job, args):
    n = job.size
    bus_factor = 2 * (n - 1) / n if n > 1 else 0.0
    if job.rank == 0:
        print(f"torch allreduce: f32 sum in place, {n} rank{'' if n == 1 else 's'} on {job.name}; "
              f"torch.distributed.all_reduce ({job.backend}), pytorch {torch.__version__}")
        print("time: the slowest rank's, per call; algbw = bytes / time; busbw = algbw x 2(n-1)/n"
              + (" (0 with one rank: nothing crosses a link)" if n == 1 else ""))
        print(f"{'size':>6} {'iters':>6} | {'torch us':>10} {'algbw':>9} {'busbw':>9}")
        print(f"{'':>6} {'':>6} | {'':>10} {'GB/s':>9} {'GB/s':>9}", flush=True)
    for nbytes in SIZES:
        if nbytes > args.max_bytes:
            break
        t = torch.ones(nbytes // 4, dtype=torch.float32, device=job.device)
        dist.all_reduce(t)
        lo, hi = t.min().item(), t.max().item()
        if lo != n or hi != n:
            raise RuntimeError(f"all_reduce of ones over {n} ranks gave values in [{lo}, {hi}]")
        t.zero_()  # a sum leaves zeros as they are (ones would grow n-fold each call)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        iters = args.iters
        if iters == 0:
            probe = job.seconds_per_call(3, lambda: dist.all_reduce(t))
            iters = int(min(max(TIMED_SECONDS / probe, 5), 1000))
        seconds = job.seconds_per_call(iters, lambda: dist.all_reduce(t))
        algbw = nbytes / seconds / 1e9
        if job.rank == 0:
            print(f"{size_label(nbytes):>6} {iters:>6} | {seconds * 1e6:>10.1f} {algbw:>9.2f} {algbw * bus_factor:>9.2f}",
                  flush=True)
        job.json_line(args.json, "allreduce", bytes=nbytes, iters=iters, us=seconds * 1e6, algbw_gbs=algbw,
                      busbw_gbs=algbw * bus_factor)


def make_model(width, layers):
    torch.manual_seed(0)  # the same parameters in every mode
    return nn.Sequential(*[m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())])


def time_steps(job, model, x, target, args):
    """(seconds per step, the slowest rank's; the loss after the last step). The host waits once,
    at the end, reading the loss."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = None

    def step():
        nonlocal loss
        opt.zero_grad()
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()

    for _ in range(args.warmup_steps):
        step()
    last = []

    def read_loss():
        last.append(loss.item())
        job.synchronize()  # the last step's update too, queued after the loss

    seconds = job.seconds_per_call(args.steps, step, read_loss)
    return seconds, last[-1]


def bench_ddp(job, args):
    torch.backends.cuda.matmul.allow_tf32 = True
    n = job.size
    modes = {
        "alone": None,
        "ddp": {},
        "ddp_tuned": {"bucket_cap_mb": 100, "gradient_as_bucket_view": True, "static_graph": True},
    }
    params = sum(p.numel() for p in make_model(args.width, args.layers).parameters())
    if job.rank == 0:
        print(f"torch ddp: {args.layers} x (Linear {args.width}->{args.width}, ReLU), {params / 1e6:.1f}M parameters "
              f"({params * 4 / 1e6:.0f} MB of f32 gradients), MSE, SGD lr 0.01, TF32; {n} rank{'' if n == 1 else 's'} "
              f"on {job.name} ({job.backend}); {args.warmup_steps} warmup + {args.steps} timed steps, "
              f"pytorch {torch.__version__}")
        print("alone: every rank trains its own copy without DDP, all at once; tuned: bucket_cap_mb=100, "
              "gradient_as_bucket_view, static_graph; times: the slowest rank's")
        print(f"{'batch/rank':>10} | {'alone ms':>10} | {'DDP ms':>10} {'efficiency':>10} | {'tuned ms':>10} "
              f"{'efficiency':>10} | {'samples/s, all (tuned)':>22}", flush=True)
    for batch in args.batch:
        gen = torch.Generator(device=job.device).manual_seed(1000 + job.rank)  # each rank its own batch
        x = torch.randn(batch, args.width, device=job.device, generator=gen)
        target = torch.randn(batch, args.width, device=job.device, generator=gen)
        times = {}
        for mode, options in modes.items():
            model = make_model(args.width, args.layers).to(job.device)
            if options is not None:
                model = DistributedDataParallel(model, device_ids=[job.local_rank] if job.device.type == "cuda" else None,
                                                **options)
            times[mode] = time_steps(job, model, x, target, args)
            efficiency = times["alone"][0] / times[mode][0]
            job.json_line(args.json, "ddp", mode=mode, batch=batch, width=args.width, layers=args.layers,
                          step_ms=times[mode][0] * 1e3, loss=times[mode][1], steps=args.steps,
                          **({} if options is None else {"bucket_cap_mb": options.get("bucket_cap_mb", 25),
                                                         "efficiency": efficiency}))
            del model
        if job.rank == 0:
            alone, ddp, tuned = (times[m][0] for m in modes)
            print(f"{batch:>10} | {alone * 1e3:>10.3f} | {ddp * 1e3:>10.3f} {100 * alone / ddp:>9.1f}% | "
                  f"{tuned * 1e3:>10.3f} {100 * alone / tuned:>9.1f}% | {batch * n / tuned:>22.0f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["allreduce", "ddp"], help="one of the two benches (default: both)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cuda (NCCL) or cpu (gloo)")
    parser.add_argument("--max-bytes", type=parse_bytes, default=1 << 30, help="the largest message, e.g. 16M")
    parser.add_argument("--iters", type=int, default=0, help="timed calls per size (0: as many as take about 0.2 s)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed all-reduce calls per size first")
    parser.add_argument("--batch", type=int, action="append", help="per-rank batch size, repeatable (512 and 2048)")
    parser.add_argument("--width", type=int, default=4096, help="features of every Linear (smaller for a CPU run)")
    parser.add_argument("--layers", type=int, default=8, help="Linear+ReLU pairs")
    parser.add_argument("--warmup-steps", type=int, default=5, help="untimed training steps first")
    parser.add_argument("--steps", type=int, default=20, help="timed training steps")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads per rank (0: PyTorch's choice)")
    parser.add_argument("--json", help="append JSON lines of the results to this file (rank 0)")
    args = parser.parse_args()
    args.batch = args.batch or [512, 2048]
    if args.threads:
        torch.set_num_threads(args.threads)
    job = Job(args.device)
    try:
        if args.only in (None, "allreduce"):
            bench_allreduce(job, args)
        if args.only in (None, "ddp"):
            bench_ddp(job, args)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
