"""Interventions: change a layer's activations without editing the model's code.

Kinds (``protocol.INTERVENTIONS``):

- ``zero_channels``: set chosen channels to exactly 0 — dim 1 of conv-like
  (N, C, ...) outputs, the last dim of (N, T, D) token outputs; for
  ``nn.MultiheadAttention`` the chosen *heads* are removed (their slice of
  the output projection's input is zeroed; the module is recomputed).
- ``scale``: multiply the output by ``value``.
- ``mean_ablate``: replace the output by its mean over the batch and
  spatial/token dims (per channel), keeping the shape.
- ``input_noise``: add Gaussian noise of std ``value`` to the floating
  inputs (a forward pre-hook).

Every change is made by a hook that RETURNS a new value (never in place on
the autograd graph), so gradients flow through the intervention as usual.
A hook never raises into the user's program: a failure (e.g. a channel
index out of range) leaves the output unchanged and is recorded in the
intervention's ``error`` field. Every handle is owned; ``remove()`` leaves
nothing behind.
"""

from __future__ import annotations

import builtins
import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hookscope.hooks.mha_call import recompute, recorded_call

Tensor = torch.Tensor

KINDS = ("zero_channels", "scale", "mean_ablate", "input_noise")
"""Kept equal to ``protocol.INTERVENTIONS`` (a test checks)."""

_CHANNELS_FIRST_3D = (
    nn.Conv1d,
    nn.ConvTranspose1d,
    nn.BatchNorm1d,
    nn.InstanceNorm1d,
    nn.MaxPool1d,
    nn.AvgPool1d,
    nn.AdaptiveAvgPool1d,
    nn.AdaptiveMaxPool1d,
    nn.LPPool1d,
    nn.ConstantPad1d,
    nn.ReflectionPad1d,
    nn.ReplicationPad1d,
    nn.Upsample,
    nn.Dropout1d,
)
"""Modules whose 3-D outputs are (N, C, L): their channel dim is 1, not the last."""


def channel_dim(module: nn.Module | None, output: Tensor) -> int:
    """The channel dim of ``output``: 1 for (N, C, ...), last for (N, T, D) and (N, D)."""
    if output.dim() >= 4:
        return 1
    if output.dim() == 3 and isinstance(module, _CHANNELS_FIRST_3D):
        return 1
    return output.dim() - 1


@dataclass
class _Active:
    """One active intervention and the hook that implements it."""

    id: str
    model: str
    layer: str
    kind: str
    module: nn.Module
    channels: list[int] | None
    value: float | None
    dim: int | None
    handle: RemovableHandle | None = None
    error: str | None = None
    calls: int = 0
    extras: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "model": self.model, "layer": self.layer, "kind": self.kind}
        if self.channels is not None:
            d["channels"] = list(self.channels)
        if self.value is not None:
            d["value"] = self.value
        if self.kind == "zero_channels" and isinstance(self.module, nn.MultiheadAttention):
            d["heads"] = True
        if self.error:
            d["error"] = self.error
        return d


class Interventions:
    """The active interventions of one process (or one API user), by id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: dict[str, _Active] = {}
        self._ids = itertools.count(1)

    def add(
        self,
        model_id: str,
        module: nn.Module,
        layer_name: str,
        kind: str,
        channels: Sequence[int] | None = None,
        value: float | None = None,
        *,
        dim: int | None = None,
    ) -> str:
        """Start an intervention on ``module`` (the layer named ``layer_name``); returns its id.

        ``dim`` overrides the channel dim that ``zero_channels`` and
        ``mean_ablate`` infer from the output's shape."""
        if kind not in KINDS:
            raise ValueError(f"unknown intervention kind {kind!r}; expected one of {', '.join(KINDS)}")
        if not isinstance(module, nn.Module):
            raise TypeError(f"an intervention needs the layer's nn.Module, got {type(module).__name__}")
        chans: list[int] | None = None
        if kind == "zero_channels":
            if channels is None or len(channels) == 0:
                raise ValueError("zero_channels needs a non-empty list of channel (or head) indices")
            chans = sorted({int(c) for c in channels})
            if chans[0] < 0:
                raise ValueError(f"channel indices must be >= 0, got {chans[0]}")
            if isinstance(module, nn.MultiheadAttention) and chans[-1] >= module.num_heads:
                raise ValueError(f"{layer_name} has {module.num_heads} heads; head {chans[-1]} does not exist")
        val: float | None = None
        if kind in ("scale", "input_noise"):
            if value is None:
                raise ValueError(f"{kind} needs a value ({'factor' if kind == 'scale' else 'noise std'})")
            val = float(value)
            if kind == "input_noise" and not val >= 0:
                raise ValueError(f"input_noise std must be >= 0, got {val}")
        with self._lock:
            iv = _Active(
                id=f"iv{next(self._ids)}",
                model=model_id,
                layer=layer_name,
                kind=kind,
                module=module,
                channels=chans,
                value=val,
                dim=dim,
            )
            iv.handle = _install(iv)
            self._active[iv.id] = iv
        return iv.id

    def remove(self, id: str | None = None) -> int:
        """Remove one intervention (``id``) or all (None); returns how many were removed."""
        with self._lock:
            if id is None:
                gone = list(self._active.values())
                self._active.clear()
            else:
                one = self._active.pop(id, None)
                gone = [one] if one else []
        for iv in gone:
            if iv.handle is not None:
                iv.handle.remove()
        return len(gone)

    def remove_model(self, model_id: str) -> int:
        """Remove every intervention on model ``model_id``."""
        with self._lock:
            ids = [i for i, iv in self._active.items() if iv.model == model_id]
        return sum(self.remove(i) for i in ids)

    def list(self) -> list[dict[str, Any]]:
        """``[{id, model, layer, kind, channels?, value?, error?}]`` in the order added."""
        with self._lock:
            return [iv.describe() for iv in self._active.values()]

    def active_for(self, layer: str, model_id: str | None = None) -> builtins.list[dict[str, Any]]:
        """The interventions acting on ``layer`` (optionally only on model ``model_id``)."""
        with self._lock:
            return [
                iv.describe()
                for iv in self._active.values()
                if iv.layer == layer and (model_id is None or iv.model == model_id)
            ]

    def __len__(self) -> int:
        with self._lock:
            return len(self._active)


# ---------------------------------------------------------------- the hooks


def _install(iv: _Active) -> RemovableHandle:
    # Prepended: an intervention changes what the layer produces, so every observer
    # registered before it (a layer breakpoint, a watch, the user's own hooks) must see
    # the changed value, as it would if the layer's code had been edited.
    if iv.kind == "input_noise":
        return iv.module.register_forward_pre_hook(_guarded(iv, _noise_inputs), prepend=True)
    if iv.kind == "zero_channels" and isinstance(iv.module, nn.MultiheadAttention):
        return iv.module.register_forward_hook(_guarded(iv, _zero_heads), with_kwargs=True, prepend=True)
    return iv.module.register_forward_hook(_guarded(iv, _edit_output), prepend=True)


def _guarded(iv: _Active, fn: Any) -> Any:
    """Wrap a hook so it never raises into training: on error, leave the value unchanged."""

    def hook(*args: Any) -> Any:
        try:
            result = fn(iv, *args)
            iv.calls += 1
            iv.error = None
            return result
        except Exception as e:  # noqa: BLE001 - a hook must never break the user's step
            iv.error = f"{type(e).__name__}: {e}"
            return None

    hook.__qualname__ = f"intervention_{iv.kind}"
    return hook


def _apply_to_first_tensor(output: Any, edit: Any) -> Any:
    """Apply ``edit`` to a tensor output, or to the first tensor of a tuple/list output."""
    if isinstance(output, Tensor):
        return edit(output)
    if isinstance(output, (tuple, list)):
        for i, v in enumerate(output):
            if isinstance(v, Tensor):
                items = list(output)
                items[i] = edit(v)
                return type(output)(items) if isinstance(output, list) else tuple(items)
    raise TypeError(f"cannot intervene on an output of type {type(output).__name__}")


def _edit_output(iv: _Active, module: nn.Module, args: Any, output: Any) -> Any:
    if iv.kind == "scale":
        value = iv.value
        return _apply_to_first_tensor(output, lambda t: t * value)

    if iv.kind == "zero_channels":

        def zero(t: Tensor) -> Tensor:
            dim = iv.dim if iv.dim is not None else channel_dim(module, t)
            assert iv.channels is not None
            size = t.shape[dim]
            if iv.channels[-1] >= size:
                raise IndexError(f"channel {iv.channels[-1]} out of range: {iv.layer} has {size} channels")
            index = torch.tensor(iv.channels, device=t.device, dtype=torch.long)
            return t.index_fill(dim, index, 0)  # out of place: exactly 0 even where t was NaN

        return _apply_to_first_tensor(output, zero)

    if iv.kind == "mean_ablate":

        def ablate(t: Tensor) -> Tensor:
            if t.dim() <= 1:
                return t.mean().expand_as(t).contiguous()
            dim = iv.dim if iv.dim is not None else channel_dim(module, t)
            dims = tuple(d for d in range(t.dim()) if d != dim % t.dim())
            # contiguous(): an expanded view would break a following in-place op (ReLU(inplace=True)).
            return t.mean(dim=dims, keepdim=True).expand_as(t).contiguous()

        return _apply_to_first_tensor(output, ablate)

    raise AssertionError(iv.kind)


def _noise_inputs(iv: _Active, module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    std = iv.value or 0.0
    noised: dict[int, Tensor] = {}  # the same tensor passed twice (q = k = v) gets the same noise

    def noisy(a: Any) -> Any:
        if not isinstance(a, Tensor) or not a.is_floating_point():
            return a
        if id(a) not in noised:
            noised[id(a)] = a + torch.randn_like(a) * std
        return noised[id(a)]

    return tuple(noisy(a) for a in args)


# -------------------------------------------- removing heads of nn.MultiheadAttention


def _zero_heads(
    iv: _Active, module: nn.MultiheadAttention, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
) -> Any:
    """Recompute the attention with the chosen heads' slice of the output projection zeroed.

    The attention output is ``concat(head_0..head_H) @ W_o^T + b``; zeroing
    columns of ``W_o`` that read head h removes exactly that head's
    contribution. The weights the module returns are left as computed."""
    call = recorded_call(args, kwargs)
    assert iv.channels is not None
    head_dim = module.embed_dim // module.num_heads
    keep = torch.ones(module.embed_dim, device=module.out_proj.weight.device, dtype=module.out_proj.weight.dtype)
    for h in iv.channels:
        keep[h * head_dim : (h + 1) * head_dim] = 0
    out_weight = module.out_proj.weight * keep  # new tensor; the parameter is untouched
    attn, _ = recompute(
        module,
        call,
        out_weight=out_weight,
        need_weights=False,
        average_attn_weights=True,
        is_causal=bool(call.get("is_causal", False)),
        dropout=module.dropout,
        training=module.training,
    )
    if isinstance(output, tuple):
        return (attn,) + tuple(output[1:])
    return attn
