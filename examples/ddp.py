"""A tiny DDP training run where a NaN appears in rank 1 only.

    torchrun --standalone --nproc_per_node 2 examples/ddp.py     # gloo, CPU
    (or under Hookscope: each rank connects with its own rank; break on NaN pauses rank 1)

At step ``--nan-step`` (default 3) one weight of rank 1's ``fc1`` becomes NaN (as a
bad update would make it); rank 0's copy stays finite until the gradients are
averaged. The NaN is born in rank 1's forward (``fc1``), so break on NaN names
rank 1 and layer ``module.fc1``. Each rank prints ``rank R done`` at the end.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--nan-step", type=int, default=3)
    parser.add_argument("--go-file", help="wait until this file exists before training (tests)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if args.go_file:
        deadline = time.monotonic() + 120
        while not os.path.exists(args.go_file) and time.monotonic() < deadline:
            time.sleep(0.05)
    g = torch.Generator().manual_seed(rank)
    for step in range(args.steps):
        x = torch.randn(4, 8, generator=g)
        if rank == 1 and step == args.nan_step:
            with torch.no_grad():
                model.module.fc1.weight[0, 0] = float("nan")
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank} step {step} loss {loss.item():.4f}", flush=True)
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
