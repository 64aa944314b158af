"""What a panel image is of: the tensor a render request names, and the facts its caption states.

A render names a layer and one of its tensors (``output``, ``inputs``,
``grad_output``, ``grad_input``, or a parameter's ``grad``, optionally indexed:
``grad_output[0]``). At a stop in that layer the tensor comes from the stop's
own locals; a layer's output otherwise comes from a kept call (see
``kept_outputs``). Every image carries ``meta['of']`` = {layer, tensor, step,
phase}: the panel captions the image with what was rendered, never with what
it asked for, so a picture cannot be shown under another layer's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hookscope.hooks import summaries
from hookscope.hooks.kept_outputs import Kept

SOURCES = ("output", "inputs", "grad_output", "grad_input", "grad")
"""The tensors a render may name (the stop frame's locals of the same names)."""
MAX_SELECTOR = 200


@dataclass
class Subject:
    """The tensor an image shows and where it came from."""

    tensor: torch.Tensor
    layer: str
    path: str
    """Its name in the panel's table: 'output', 'grad_output[0]', 'weight.grad'..."""
    step: int
    phase: str
    """The pass it belongs to: 'forward', 'backward', 'param_grad'..."""
    note: str | None = None

    def meta(self) -> dict[str, Any]:
        about: dict[str, Any] = {"layer": self.layer, "tensor": self.path, "step": self.step, "phase": self.phase}
        if self.note:
            about["note"] = self.note
        return about


def parse(selector: Any) -> tuple[str, str]:
    """``(base, selector)`` of a render's ``tensor`` field; default ``output``. ValueError if unknown."""
    if selector is None or selector == "":
        return "output", "output"
    if not isinstance(selector, str) or len(selector) > MAX_SELECTOR:
        raise ValueError("'tensor' must be a short string such as 'output' or 'grad_output[0]'")
    base = selector.split("[", 1)[0].split(".", 1)[0]
    if base not in SOURCES:
        raise ValueError(f"'tensor' must start with one of {', '.join(SOURCES)}; got {selector[:40]!r}")
    return base, selector


def paused_at(paused: dict[str, Any] | None, layer: str, module: nn.Module) -> bool:
    """Whether the thread is paused at a stop of this very layer."""
    return paused is not None and paused.get("module") is module and paused.get("layer") == layer


def pick(value: Any, base: str, selector: str) -> tuple[str, torch.Tensor] | None:
    """``(path, tensor)`` in ``value``: the one named by ``selector``, or the first for a bare base name."""
    for path, tensor in summaries.iter_tensors(value, base):
        if selector == base or path == selector:
            return path, tensor
    return None


def at_stop(paused: dict[str, Any], layer: str, base: str, selector: str) -> Subject | None:
    """The named tensor from the stop's locals, if the stop has it."""
    value = paused.get(base)
    if value is None:
        return None
    if base == "grad":  # a parameter's gradient: named as the table names it
        name = f"{paused.get('param_name') or 'param'}.grad"
        if not isinstance(value, torch.Tensor):
            return None
        return Subject(value.detach(), layer, name, int(paused.get("step", 0)), str(paused.get("phase", "")))
    found = pick(value, base, selector)
    if found is None:
        return None
    path, tensor = found
    return Subject(tensor.detach(), layer, path, int(paused.get("step", 0)), str(paused.get("phase", "")))


def from_kept(kept: Kept, layer: str, selector: str) -> Subject | None:
    """The output (or one of its tensors) of a kept call."""
    found = pick(kept.output, "output", selector)
    if found is None:
        return None
    path, tensor = found
    note = (
        ("changed in place after the layer ran (e.g. by an in-place activation): the values shown are the current ones")
        if kept.modified_in_place()
        else None
    )
    return Subject(tensor, layer, path, kept.step, "forward", note)


def returned_weights(output: Any) -> torch.Tensor | None:
    """The attention weights an attention module returned with its output (``(out, weights)``), if any."""
    if isinstance(output, (tuple, list)) and len(output) > 1 and isinstance(output[1], torch.Tensor):
        return output[1].detach()
    return None


def looks_like_attention(value: Any) -> bool:
    """Whether ``value`` is a tensor of attention weights: rows (last dim) of probabilities."""
    if not isinstance(value, torch.Tensor) or value.dim() < 2 or not value.is_floating_point() or not value.numel():
        return False
    with torch.no_grad():
        v = value.detach().float()
        return bool((v >= 0).all()) and bool(torch.allclose(v.sum(-1), torch.ones(()), atol=1e-3))
