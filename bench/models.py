"""The models the benchmark trains: the examples' CNN and transformer, a ResNet-18-sized CNN, and N-layer stacks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from cnn import SmallCNN  # noqa: E402
from transformer import TinyTransformer  # noqa: E402


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18's layout (11.2 M parameters) for 32x32 inputs."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        widths, blocks, cin = (64, 128, 256, 512), [], 64
        for i, width in enumerate(widths):
            stride = 1 if i == 0 else 2
            blocks.append(nn.Sequential(BasicBlock(cin, width, stride), BasicBlock(width, width)))
            cin = width
        self.layers = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


class Stack(nn.Module):
    """N small layers in a row: how the cost grows with the number of layers."""

    def __init__(self, n: int, width: int = 16) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


Batch = tuple[torch.Tensor, torch.Tensor]


def build(name: str, device: str) -> tuple[nn.Module, Callable[[], Batch], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """(model, make_batch, loss_fn) for a benchmark model name."""
    g = torch.Generator().manual_seed(0)
    ce = nn.CrossEntropyLoss()
    if name == "cnn":
        model: nn.Module = SmallCNN()
        x, y = torch.rand(16, 3, 32, 32, generator=g), torch.randint(0, 2, (16,), generator=g)
        loss = ce
    elif name == "transformer":
        model = TinyTransformer()
        x, y = torch.randint(0, 16, (32, 12), generator=g), torch.randint(0, 2, (32,), generator=g)
        loss = ce
    elif name == "resnet18":
        model = ResNet18()
        x, y = torch.rand(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
        loss = ce
    elif name.startswith("stack"):
        model = Stack(int(name[5:]))
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
        loss = nn.functional.mse_loss
    else:
        raise ValueError(f"unknown benchmark model {name!r}")
    model.to(device)
    x, y = x.to(device), y.to(device)
    return model, (lambda: (x, y)), loss
