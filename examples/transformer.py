"""A small transformer encoder trained on generated sequences: is token 7 present?

Runs in a few seconds on a CPU. Its attention layers are `nn.MultiheadAttention`
modules inside `nn.TransformerEncoderLayer`; Hookscope can show their maps.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 16, dim: int = 32, heads: int = 4, layers: int = 2,
                 seq_len: int = 12) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.zeros(1, seq_len, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 2)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[:, : tokens.shape[1]]
        x = self.encoder(x)
        return self.head(self.norm(x.mean(dim=1)))


def make_batch(generator: torch.Generator, batch_size: int = 32, seq_len: int = 12):
    tokens = torch.randint(0, 16, (batch_size, seq_len), generator=generator)
    labels = (tokens == 7).any(dim=1).long()
    return tokens, labels


def train(steps: int = 40, seed: int = 0) -> float:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = TinyTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    loss = torch.tensor(0.0)
    for step in range(steps):
        tokens, labels = make_batch(generator)
        optimizer.zero_grad()
        loss = loss_fn(model(tokens), labels)
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == steps - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}", flush=True)
    return loss.item()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    final = train(args.steps, args.seed)
    print(f"final loss {final:.6f}")
