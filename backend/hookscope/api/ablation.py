"""Interventions and Grad-CAM from the Python API.

``zero_channels`` (ablation through a returned output), ``scale_output``,
``mean_ablate`` and ``input_noise`` (a forward pre-hook) wrap
``hookscope.engine.interventions``; each returns a handle that is a context
manager. ``grad_cam`` takes activations from a forward hook and gradients
from a full backward hook (see ``hookscope.visuals.gradcam``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from hookscope.engine.interventions import Interventions

from ..visuals.gradcam import GradCam, compute_grad_cam
from .hookset import HookSet
from .select import layer_name

_REGISTRY = Interventions()
"""Interventions made through the Python API (the editor's engine keeps its own)."""


class Intervention:
    """An active intervention; ``remove()`` (or leaving its ``with`` block) ends it."""

    def __init__(
        self,
        model: nn.Module,
        layer: Any,
        kind: str,
        channels: Sequence[int] | None = None,
        value: float | None = None,
        dim: int | None = None,
    ) -> None:
        self.layer, module = layer_name(model, layer)
        self.kind = kind
        self.id = _REGISTRY.add(
            f"{type(model).__name__}@{id(model):x}", module, self.layer, kind, channels=channels, value=value, dim=dim
        )
        self.hooks = HookSet(f"intervention {self.id}")
        self.hooks.on_remove(lambda: _REGISTRY.remove(self.id))

    @property
    def active(self) -> bool:
        return any(iv["id"] == self.id for iv in _REGISTRY.list())

    @property
    def error(self) -> str | None:
        """The last failure of the hook (the output was then left unchanged), if any."""
        for iv in _REGISTRY.list():
            if iv["id"] == self.id:
                return iv.get("error")
        return None

    def remove(self) -> int:
        return self.hooks.remove_all()

    def __enter__(self) -> Intervention:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"<Intervention {self.id}: {self.kind} on {self.layer or '(root)'}{'' if self.active else ' (removed)'}>"


def intervene(
    model: nn.Module,
    layer: Any,
    kind: str,
    channels: Sequence[int] | None = None,
    value: float | None = None,
    *,
    dim: int | None = None,
) -> Intervention:
    """Start an intervention of ``kind`` ('zero_channels', 'scale', 'mean_ablate', 'input_noise')."""
    return Intervention(model, layer, kind, channels, value, dim)


def zero_channels(model: nn.Module, layer: Any, channels: Sequence[int], *, dim: int | None = None) -> Intervention:
    """Zero chosen channels of a layer's output (heads of an ``nn.MultiheadAttention``).

    >>> with hookscope.zero_channels(model, "conv1", [0, 3]):
    ...     ablated = model(x)
    """
    return Intervention(model, layer, "zero_channels", channels=channels, dim=dim)


def scale_output(model: nn.Module, layer: Any, factor: float) -> Intervention:
    """Multiply a layer's output by ``factor``."""
    return Intervention(model, layer, "scale", value=factor)


def mean_ablate(model: nn.Module, layer: Any, *, dim: int | None = None) -> Intervention:
    """Replace a layer's output by its per-channel mean over the batch and positions."""
    return Intervention(model, layer, "mean_ablate", dim=dim)


def input_noise(model: nn.Module, layer: Any, std: float) -> Intervention:
    """Add Gaussian noise of standard deviation ``std`` to a layer's inputs (forward pre-hook)."""
    return Intervention(model, layer, "input_noise", value=std)


def list_interventions() -> list[dict[str, Any]]:
    """The interventions made through the API that are active now."""
    return _REGISTRY.list()


def grad_cam(
    model: nn.Module,
    layer: Any,
    inputs: Any,
    target: Any = None,
    *,
    eval_mode: bool = True,
    token_grid: tuple[int, int] | None = None,
) -> GradCam:
    """Grad-CAM of ``layer`` (name or module) for ``inputs``; ``.cam`` is (N, H, W) in [0, 1].

    The default target is each sample's predicted class. Render it over the
    image with ``hookscope.visuals.grad_cam(model, module, inputs)``.

    >>> hookscope.grad_cam(model, "layer4", images).cam.shape
    """
    _, module = layer_name(model, layer)
    return compute_grad_cam(model, module, inputs, target, eval_mode=eval_mode, token_grid=token_grid)
