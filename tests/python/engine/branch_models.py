"""A model whose blocks call their layers through local names: a ModuleDict of branches reached
as ``b = self.branches; b["mix"](h)``, a conditional definition, blocks in a ModuleList."""

from __future__ import annotations

import torch
from torch import nn


class Damp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0.5


class Gate(nn.Module):
    def __init__(self, dim: int, damp: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.damp = Damp() if damp else nn.Identity()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        f = self.lin
        return self.damp(torch.sigmoid(f(h)))


class Block(nn.Module):
    def __init__(self, dim: int, damp: bool) -> None:
        super().__init__()
        self.branches = nn.ModuleDict(
            {
                "mix": nn.Linear(dim, dim),
                "gate": Gate(dim, damp),
            }
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b = self.branches
        mixed = b["mix"](h)
        gated = b["gate"](h)
        return h + mixed * gated


class Stack(nn.Module):
    def __init__(self, dim: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim, damp=i != 1) for i in range(3)])

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            h = block(h)
        return h
