"""Gradients: per-parameter norms, per-layer flow, and vanishing/exploding checks by tensor hooks.

The seed articles' gradient patterns — ``x.register_hook(lambda g: print(g.norm()))``
on chosen tensors, and a loop over ``named_parameters()`` after
``backward()`` — as ``grad_check(...)``, ``grad_norms(model)`` and
``grad_flow(model)``.
"""

from __future__ import annotations

import math
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..visuals.figures import EXPLODING, VANISHING, classify, layer_gradient_stats
from .capture import first_tensor
from .hookset import HookSet
from .select import select_modules

Tensor = torch.Tensor

RECENT_PASSES = 8
"""Activation gradient hooks are kept for this many forward passes per layer."""


def _named_params(source: nn.Module | Iterable[tuple[str, Tensor]]) -> list[tuple[str, Tensor]]:
    if isinstance(source, nn.Module):
        return list(source.named_parameters())
    return list(source)


def grad_norms(source: nn.Module | Iterable[tuple[str, Tensor]]) -> dict[str, float]:
    """L2 norm of every parameter's ``.grad`` (parameters without one are left out).

    Norms are computed in float32 on each gradient's device and moved in
    one transfer per device.

    >>> loss.backward(); hookscope.grad_norms(model)
    {'conv1.weight': 0.52, 'conv1.bias': 0.11, ...}
    """
    named = [(n, p.grad) for n, p in _named_params(source) if p.grad is not None]
    by_device: dict[torch.device, list[int]] = {}
    norms: list[Tensor] = []
    for i, (_, g) in enumerate(named):
        norms.append(torch.linalg.vector_norm(g.detach(), dtype=torch.float32))
        by_device.setdefault(g.device, []).append(i)
    out: dict[int, float] = {}
    for idxs in by_device.values():
        for i, v in zip(idxs, torch.stack([norms[i] for i in idxs]).cpu().tolist()):
            out[i] = float(v)
    return {named[i][0]: out[i] for i in range(len(named))}


def grad_flow(
    source: nn.Module | Iterable[tuple[str, Tensor]], vanishing: float = VANISHING, exploding: float = EXPLODING
) -> list[dict[str, Any]]:
    """Per-layer mean and max |grad| with a status ('ok', 'vanishing', 'exploding', 'nonfinite', 'no_grad').

    ``hookscope.visuals.gradient_flow(model.named_parameters())`` draws it."""
    layers, _ = layer_gradient_stats(_named_params(source))
    for layer in layers:
        layer["status"] = classify(layer, vanishing, exploding)
    return layers


@dataclass
class GradEvent:
    """A gradient that crossed a threshold."""

    name: str
    """The tensor's name (``conv1.weight``, ``layer1:output``...)."""
    kind: Literal["vanishing", "exploding", "nonfinite"]
    norm: float
    call: int
    """Which gradient of that tensor (0 = first backward seen)."""

    def __str__(self) -> str:
        return f"{self.kind} gradient at {self.name}: norm {self.norm:.3g} (backward #{self.call})"


class GradientWarning(UserWarning):
    """Issued by ``grad_check(..., action='warn')``."""


class GradientError(RuntimeError):
    """Raised by ``grad_check(..., action='raise')``; ``.event`` says which tensor."""

    def __init__(self, event: GradEvent) -> None:
        super().__init__(str(event))
        self.event = event


class GradCheck:
    """Tensor hooks that record each gradient's norm and flag vanishing/exploding/non-finite ones.

    ``norms[name]`` lists the norm at every backward; ``events`` the
    flagged ones. ``action``: 'record' (default), 'warn', 'raise' (a
    ``GradientError`` out of ``backward()``) or a callable taking a
    ``GradEvent``. Each hook syncs once to read the norm.
    """

    def __init__(
        self,
        tensors: Any,
        *,
        vanishing: float = VANISHING,
        exploding: float = EXPLODING,
        action: Literal["record", "warn", "raise"] | Callable[[GradEvent], Any] = "record",
        activations: bool = False,
    ) -> None:
        self.vanishing, self.exploding, self.action = vanishing, exploding, action
        self.norms: dict[str, list[float]] = {}
        self.events: list[GradEvent] = []
        self.hooks = HookSet("grad_check")
        for name, t in self._named(tensors):
            self.watch(name, t)
        if activations:
            if not isinstance(tensors, nn.Module):
                raise TypeError("activations=True needs the model itself")
            for name, module in select_modules(tensors, default="leaves"):
                self.hooks.forward(module, self._output_hook(name))

    @staticmethod
    def _named(tensors: Any) -> list[tuple[str, Tensor]]:
        if isinstance(tensors, nn.Module):
            return [(n, p) for n, p in tensors.named_parameters() if p.requires_grad]
        if isinstance(tensors, Tensor):
            return [("tensor", tensors)]
        if isinstance(tensors, Mapping):
            return list(tensors.items())
        out = []
        for i, item in enumerate(tensors):
            out.append(item if isinstance(item, tuple) else (f"tensor{i}", item))
        return out

    def watch(self, name: str, tensor: Tensor) -> None:
        """Also check the gradient of ``tensor`` (it must require grad)."""
        if not tensor.requires_grad:
            raise ValueError(f"{name} does not require grad: no gradient will reach it")
        self.norms.setdefault(name, [])
        self.hooks.tensor(tensor, self._grad_hook(name))

    def _output_hook(self, layer: str) -> Any:
        name = f"{layer or '(root)'}:output"
        recent: deque[RemovableHandle] = deque()

        def check_output_grad(module: nn.Module, args: Any, output: Any) -> None:
            t = first_tensor(output)
            if t is None or not t.requires_grad:
                return
            self.norms.setdefault(name, [])
            # A hook on an activation lives as long as its graph; keep the handles of the
            # last few forward passes only, so a long run does not pile them up.
            recent.append(self.hooks.tensor(t, self._grad_hook(name)))
            if len(recent) > RECENT_PASSES:
                self.hooks.discard(recent.popleft())

        return check_output_grad

    def _grad_hook(self, name: str) -> Callable[[Tensor], None]:
        def check_grad(grad: Tensor) -> None:
            norm = float(torch.linalg.vector_norm(grad.detach(), dtype=torch.float32))
            calls = self.norms.setdefault(name, [])
            calls.append(norm)
            if not math.isfinite(norm):
                kind = "nonfinite"
            elif norm > self.exploding:
                kind = "exploding"
            elif norm < self.vanishing:
                kind = "vanishing"
            else:
                return
            self._flag(GradEvent(name, kind, norm, len(calls) - 1))  # type: ignore[arg-type]

        return check_grad

    def _flag(self, event: GradEvent) -> None:
        self.events.append(event)
        if self.action == "warn":
            warnings.warn(str(event), GradientWarning, stacklevel=2)
        elif self.action == "raise":
            raise GradientError(event)
        elif callable(self.action):
            self.action(event)

    def report(self) -> str:
        """One line per flagged gradient, or 'no gradient flagged'."""
        return "\n".join(str(e) for e in self.events) or "no gradient flagged"

    def remove(self) -> int:
        return self.hooks.remove_all()

    def __enter__(self) -> GradCheck:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def grad_check(
    tensors: Any,
    *,
    vanishing: float = VANISHING,
    exploding: float = EXPLODING,
    action: Literal["record", "warn", "raise"] | Callable[[GradEvent], Any] = "record",
    activations: bool = False,
) -> GradCheck:
    """Check gradient norms of tensors with tensor hooks (``Tensor.register_hook``).

    ``tensors``: a model (its parameters; ``activations=True`` adds every
    leaf layer's output), a ``{name: tensor}`` mapping, a tensor, or a list.

    >>> with hookscope.grad_check({"h1": h1, "h2": h2}, vanishing=1e-6) as gc:
    ...     loss.backward()
    >>> gc.events, gc.norms["h1"]
    """
    return GradCheck(tensors, vanishing=vanishing, exploding=exploding, action=action, activations=activations)
