"""The models the benchmark trains: the examples' CNN and transformer, a ResNet-18-sized CNN, a small GPT, and N-layer stacks."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

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


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / (c // self.heads) ** 0.5
        scores = scores.masked_fill(~self.mask[:t, :t], float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class GPTBlock(nn.Module):
    def __init__(self, width: int, heads: int, context: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """A small decoder in nanoGPT's shape: token + position embeddings, pre-LN blocks, tied head."""

    def __init__(self, vocab: int = 256, width: int = 64, depth: int = 4, heads: int = 4, context: int = 32) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(GPTBlock(width, heads, context) for _ in range(depth))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


Batch = tuple[torch.Tensor, torch.Tensor]


def optimizer_for(name: str, model: nn.Module) -> torch.optim.Optimizer:
    """AdamW for the GPT (as nanoGPT trains it), SGD for the others."""
    if name == "gpt":
        return torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    return torch.optim.SGD(model.parameters(), lr=1e-3)


def build(
    name: str, device: str
) -> tuple[nn.Module, Callable[[], Batch], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
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
    elif name == "gpt":
        model = GPT()
        tokens = torch.randint(0, 256, (8, 33), generator=g)
        x, y = tokens[:, :-1], tokens[:, 1:]
        loss = lambda logits, target: ce(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))  # noqa: E731
    elif name.startswith("stack"):
        model = Stack(int(name[5:]))
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
        loss = nn.functional.mse_loss
    else:
        raise ValueError(f"unknown benchmark model {name!r}")
    model.to(device)
    x, y = x.to(device), y.to(device)
    return model, (lambda: (x, y)), loss
