"""A small CNN trained on generated images: a bright square on the left or the right half.

Runs in a few seconds on a CPU. Debug it with Hookscope and put a layer
breakpoint on any `self.<layer> = nn.<Layer>(...)` line below.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


class SmallCNN(nn.Module):
    def __init__(self, num_classes: int = 2) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, kernel_size=3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 8 * 8, 64),
            nn.ReLU(),
            nn.Linear(64, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.bn1(self.conv1(x))))
        x = self.pool(torch.relu(self.conv2(x)))
        x = self.dropout(x)
        return self.classifier(x)


def make_batch(generator: torch.Generator, batch_size: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy 32x32 images with a bright 8x8 square in the left (class 0) or right (class 1) half."""
    images = torch.rand(batch_size, 3, 32, 32, generator=generator) * 0.2
    labels = torch.randint(0, 2, (batch_size,), generator=generator)
    for i, label in enumerate(labels.tolist()):
        top = int(torch.randint(0, 24, (1,), generator=generator))
        left = int(torch.randint(0, 8, (1,), generator=generator)) + 16 * label
        images[i, :, top:top + 8, left:left + 8] += 0.15
    return images, labels


def train(steps: int = 30, seed: int = 0) -> float:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loss = torch.tensor(0.0)
    for step in range(steps):
        images, labels = make_batch(generator)
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    return loss.item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    final = train(args.steps, args.seed)
    print(f"final loss {final:.6f}")
