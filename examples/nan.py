"""A regression model where a NaN appears in a known layer after some steps.

`head.standardize` divides each feature by its spread over the batch. From
step 8 (`--nan-step`) the data loader serves a batch of identical rows, so
that spread is 0 and 0/0 = NaN is born in `head.standardize` (forward); every
layer after it, the loss and all gradients follow. With Hookscope's
Break on NaN/Inf, the debugger stops in `head.standardize`, not at the loss.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


class Standardize(nn.Module):
    """(x - mean) / std over the batch: NaN when a feature is constant across the batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(dim=0)) / x.std(dim=0)


class Head(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.standardize = Standardize()
        self.out = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.standardize(x))


class Regressor(nn.Module):
    def __init__(self, features: int = 8, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = Head(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.fc2(self.act(self.fc1(x))))).squeeze(-1)


def make_batch(generator: torch.Generator, step: int, nan_step: int, batch_size: int = 16):
    x = torch.randn(batch_size, 8, generator=generator)
    if step >= nan_step:
        x = x[:1].expand(batch_size, 8).clone()  # a batch of duplicates: zero spread
    y = x.sum(dim=1)
    return x, y


def train(steps: int = 12, nan_step: int = 8, seed: int = 0) -> float:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss = torch.tensor(0.0)
    for step in range(steps):
        x, y = make_batch(generator, step, nan_step)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    return loss.item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--nan-step", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    final = train(args.steps, args.nan_step, args.seed)
    print(f"final loss {final:.6f}")
