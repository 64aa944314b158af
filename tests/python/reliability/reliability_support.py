"""Plain helpers of the reliability suite: deterministic training, hook counts, a small model, waits.

A module of its own (not ``conftest``): several test folders have a
``conftest.py``, and ``from conftest import ...`` inside a test resolves to
whichever of them pytest imported last.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[3]
PYTHON = sys.executable


def wait_until(condition: Callable[[], Any], timeout: float = 20.0, what: str = "a condition") -> Any:
    """Poll ``condition`` until it is truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def hook_count(model: nn.Module) -> int:
    """Every module and tensor-level hook dict entry on ``model`` (ours and anyone's)."""
    total = 0
    for m in model.modules():
        total += len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
        total += len(getattr(m, "_backward_pre_hooks", {}))
        for p in m.parameters(recurse=False):
            total += len(getattr(p, "_backward_hooks", None) or {})
            total += len(getattr(p, "_post_accumulate_grad_hooks", None) or {})
    return total


def global_hook_count() -> int:
    """Process-wide module and optimizer hooks (break on NaN uses an optimizer step pre-hook)."""
    from torch.nn.modules import module as module_mod
    from torch.optim import optimizer as optimizer_mod

    names = (
        "_global_forward_hooks",
        "_global_forward_pre_hooks",
        "_global_backward_hooks",
        "_global_backward_pre_hooks",
    )
    total = sum(len(getattr(module_mod, n, {})) for n in names)
    return total + len(optimizer_mod._global_optimizer_pre_hooks) + len(optimizer_mod._global_optimizer_post_hooks)


class SmallNet(nn.Module):
    """Conv + shared linear (called twice per step) + a head: covers the common shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.shared = nn.Linear(16, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x)).mean(1).flatten(1)  # (N, 16)
        x = torch.tanh(self.shared(x))
        x = torch.tanh(self.shared(x))  # the same layer twice per step
        return self.head(x)


def batches(steps: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, 1, 4, 4, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(steps)]


def train(model: nn.Module, data: list, on_step: Callable[[int], None] | None = None) -> list[float]:
    """Plain SGD training; returns the losses. ``on_step(i)`` runs after each step (fault injection)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for i, (x, y) in enumerate(data):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(i)
    return losses


STEPS = 24


def baseline(
    model_factory: Callable[[], nn.Module], steps: int = STEPS, data: list | None = None
) -> tuple[list[float], dict]:
    """Losses and final parameters of the same training without Hookscope."""
    torch.manual_seed(0)
    model = model_factory()
    losses = train(model, data if data is not None else batches(steps))
    return losses, params_of(model)


def arm_everything(conn: Any, model_id: str = "m1") -> None:
    """Breakpoints on every phase that never pause (no debugger: logged), a watch, break on NaN."""
    from hookscope.link.protocol_vocabulary import PHASES

    resolved = conn.request(
        "setBreakpoints",
        breakpoints=[
            {
                "id": "all",
                "layer": "*",
                "phases": list(PHASES),
                "condition": {"kind": "absmax_above", "threshold": 1e30},
            },
        ],
    )["resolved"]
    assert resolved and resolved[0]["layers"], resolved
    conn.request("setBreakOnNonFinite", enabled=True)
    conn.request("watch", model=model_id, layers=["conv", "shared", "head"], rateHz=1000)


def params_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_same_training(a: tuple[list[float], dict], b: tuple[list[float], dict]) -> None:
    """Bit-identical losses and final parameters (same seed, deterministic CPU kernels)."""
    assert a[0] == b[0], "losses differ from the run without Hookscope"
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        assert torch.equal(a[1][k], b[1][k]), f"parameter {k} differs from the run without Hookscope"


def subprocess_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child Python run from the repository (single-threaded torch: 2 cores)."""
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra or {})
    return env
