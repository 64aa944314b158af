"""Small models and helpers shared by the engine tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Block(nn.Module):
    """A residual block: the classic in-place ReLU after BatchNorm."""

    def __init__(self, ch: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(ch)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(x)  # call site: Block.conv1
        out = self.relu(self.bn1(out))
        return out + x


class SqrtAtZero(nn.Module):
    """Finite forward; when ``planted`` its backward makes NaN (sqrt'(0) = inf, times d(0*x)/dx = 0)."""

    def __init__(self) -> None:
        super().__init__()
        self.planted = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.planted:
            return x
        return torch.sqrt(x * 0.0) + x


class Net(nn.Module):
    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.layer1 = nn.Sequential(Block(8), Block(8))
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.drop = nn.Dropout(0.25)
        self.fc1 = nn.Linear(32, 16)
        self.act = nn.Tanh()
        self.odd = SqrtAtZero()
        self.fc2 = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = self.layer1(x)
        x = self.pool(x).flatten(1)
        x = self.drop(x)
        x = self.act(self.fc1(x))
        x = self.odd(x)
        return self.fc2(x)


def line_of(obj: object, text: str) -> tuple[str, int]:
    """(file, 1-based line) of the first source line of ``obj``'s file containing ``text``."""
    import inspect

    file = inspect.getsourcefile(obj)  # type: ignore[arg-type]
    assert file is not None
    with open(file, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if text in line:
                return file, number
    raise AssertionError(f"{text!r} not in {file}")


def batch(seed: int, n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 5, (n,), generator=g)


def train(model: nn.Module, steps: int, plant: dict[int, object] | None = None, optimizer: bool = True) -> list[float]:
    """A few SGD steps on generated batches; ``plant[step](model)`` runs before that step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if optimizer else None
    losses = []
    for step in range(steps):
        if plant and step in plant:
            plant[step](model)  # type: ignore[operator]
        x, y = batch(step)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if opt is not None:
            opt.step()
            opt.zero_grad()
        else:
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p -= 0.05 * p.grad
                        p.grad = None
        losses.append(float(loss.detach()))
    return losses


def outputs_alive_after_a_step(model: nn.Module, layers: list[str]) -> list[str]:
    """Which of ``layers`` still have their output of a training step in memory once the step is
    over (any live tensor on that memory: Hookscope keeps detached views, not the output objects)."""
    import gc

    seen: dict[str, tuple[int, torch.Size]] = {}
    handles = [
        model.get_submodule(name).register_forward_hook(
            lambda m, a, out, name=name: seen.__setitem__(name, (out.data_ptr(), out.shape))
        )
        for name in layers
    ]
    x, y = batch(0)
    nn.functional.cross_entropy(model(x), y).backward()
    for handle in handles:
        handle.remove()
    gc.collect()
    tensors = [o for o in gc.get_objects() if type(o) in (torch.Tensor, nn.Parameter)]  # type(): no lazy attributes
    live = {(t.data_ptr(), t.shape) for t in tensors if t.numel()}
    return [name for name in layers if seen[name] in live]


def hooks_left(model: nn.Module) -> list[str]:
    """Every hook dict entry on the model's modules and parameters (should be empty)."""
    left = []
    for name, m in model.named_modules():
        for attr in (
            "_forward_hooks",
            "_forward_pre_hooks",
            "_backward_hooks",
            "_backward_pre_hooks",
            "_state_dict_hooks",
            "_load_state_dict_pre_hooks",
        ):
            if getattr(m, attr, None):
                left.append(f"{name or '<root>'}.{attr}")
        if "forward" in vars(m):
            left.append(f"{name or '<root>'}.forward (an instance attribute)")
        riders = getattr(vars(m).get("_compiled_call_impl"), "hookscope_riders", None)
        if riders is not None and riders.on:
            left.append(f"{name or '<root>'} step counter riders")
    for name, p in model.named_parameters():
        if getattr(p, "_post_accumulate_grad_hooks", None):
            left.append(f"{name}._post_accumulate_grad_hooks")
        if getattr(p, "_backward_hooks", None):
            left.append(f"{name}._backward_hooks")
    from torch.optim import optimizer

    if optimizer._global_optimizer_pre_hooks:
        left.append("global optimizer pre hooks")
    from torch.nn.modules import module as torch_module

    for kind in ("module", "parameter", "buffer"):
        if getattr(torch_module, f"_global_{kind}_registration_hooks"):
            left.append(f"global {kind} registration hooks")
    return left


def req(engine: Any, type_: str, **fields: Any) -> dict:
    """A request as the editor sends it: validated by the protocol, then handled by the engine; its reply
    checked as the editor checks it (every typed field, down to the leaves)."""
    from hookscope.link import protocol

    message = {"type": type_, "id": 1, **fields}
    protocol.validate(message)
    return protocol.validate_reply(type_, engine.handle(message))
