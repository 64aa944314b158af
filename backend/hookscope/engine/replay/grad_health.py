"""Break on exploding and vanishing gradients, inside break on NaN/Inf's end-of-backward check.

The switches
    Exploding: some parameter's gradient norm is above X. Vanishing: some layer's
    gradient norm (over the parameters it owns, each counted once) is below Y. Both
    are asked once per step, at the end of the backward, where the NaN/Inf
    sentinel (nonfinite_sentinel.py) already checks every parameter gradient.

Cost
    It replaces the NaN/Inf check's reads of the gradients (its NaN/Inf total comes
    out of the same sums): the small CPU gradients through one flattened copy, the
    others through one ``_foreach_norm``. Exploding alone needs only the small
    ones' joint norm (a bound on each one's) and the large ones' norms: five
    tensor calls a step on the bench's transformer (seven beside break on
    NaN/Inf, whose sum of the output gradient joins them), where there were sixteen.
    Vanishing reads each layer's sum of squares: one ``segment_reduce`` over the
    flattened gradients by layer (a layer's parameters lie together in them), the
    large ones' squared norms added by layer; a layer's sum bounds each of its
    parameters' for exploding. Per-parameter sums (``segment_reduce`` again: one
    kernel, where a norm per tensor costs ~2 µs each on a CPU) are taken only when
    a bound is crossed or a stop names a parameter. What is compared leaves the
    device in one transfer. The segment lengths and layer indices are kept until
    the model's parameters change (names, or the flattened size). Finite gradients whose
    squares overflow float32 (~1e19 and more) are an explosion, not a NaN/Inf:
    their norms are then taken again in float64.

The stop
    It names the parameter (exploding: the largest norm; vanishing: the smallest of
    the weakest layer) and its layer, as a parameter-gradient stop with that
    gradient; the panel shows the step's per-layer gradient-norm profile in its
    gradient-flow view. A model stops at most once per step, and after a stop
    again only once a step ran within the thresholds (``REARM_RULE``); until then a
    crossing is only noted (``CROSSED``), not described. A vanishing layer whose
    float32 sum of squares underflowed (gradients of ~1e-19 and less) is judged, and
    reported, in float64.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from hookscope.hooks.module_tensors import ModuleTensors, flattens
from hookscope.hooks.summaries import all_finite

REARM_RULE = (
    "Break on exploding/vanishing gradients stops again once a step has run within the "
    "thresholds and a later step crosses one."
)
"""When a gradient-health stop fires again (the ``rearm`` field of its hits)."""


FLOAT32_TINY = torch.finfo(torch.float32).tiny
"""float32's smallest normal number: a sum of squares below it has lost digits."""

BOUND_MARGIN = 1e-5
"""Relative margin under the exploding threshold for the joint norm of the small gradients (a
bound on each one's): its rounding must not hide a parameter just above the threshold."""


class GradientHealth:
    """The thresholds (None: that switch is off)."""

    __slots__ = ("exploding", "vanishing", "on")

    def __init__(self, exploding: float | None = None, vanishing: float | None = None) -> None:
        self.set(exploding, vanishing)

    def set(self, exploding: float | None, vanishing: float | None) -> None:
        self.exploding = exploding
        self.vanishing = vanishing
        self.on = exploding is not None or vanishing is not None
        """Either switch is on (an attribute, not a property: read in every step, a call under a debugger)."""


@dataclass
class Finding:
    """A threshold crossed: where, and how it reads in the stop reason."""

    param: str
    """Qualified parameter name (``blocks.2.mlp.0.weight``)."""
    layer: str
    kind: str
    """'exploding' | 'vanishing' ('crossed': ``CROSSED``)."""
    reason: str
    inexact: bool = False
    """The layer's sum of squares fell below float32's normal range (gradients of ~1e-19 and
    less): its digits are lost, so float64 decides whether the threshold is crossed, and says by how much."""


CROSSED = Finding("", "", "crossed", "a threshold is crossed (not described: no stop is due)")
"""What the check says while disarmed (after a stop, until a step runs within the thresholds): that
a threshold is still crossed, without naming where (a Python pass over every parameter each step)."""


@dataclass
class _Layout:
    """Per-parameter segment lengths of the flattened gradients and each parameter's layer index."""

    names: list[str]
    lengths: torch.Tensor
    layer_of: torch.Tensor
    layers: list[str]
    layer_lengths: torch.Tensor | None
    """Per-layer segment lengths of the flattened gradients, when each layer's flattened parameters
    lie together (as ``named_parameters()`` yields them): the layers' sums in one kernel. None: apart."""
    large_layer_of: torch.Tensor
    """The layer index of each gradient read through a norm (after the flattened ones in ``names``)."""
    flat_numel: int
    """The flattened gradients' size: the segments add up to it, so ``segment_reduce`` may skip its
    own check of their lengths (a host sync on a GPU, half its time on a CPU)."""


class HealthCheck:
    """Per-parameter gradient norms of one model, from the NaN/Inf check's groups."""

    def __init__(self) -> None:
        self._layout: _Layout | None = None
        self._key: tuple[int, int, int, int] = (0, 0, 0, 0)

    def check_model(
        self,
        tensors: ModuleTensors,
        model: weakref.ref[nn.Module],
        root_grads: list[torch.Tensor],
        health: GradientHealth,
        armed: bool = True,
    ) -> tuple[bool, Finding | None]:
        """The NaN/Inf check and the exploding/vanishing one from the same reads of a model's gradients
        (``armed``: a finding would stop; an inexact one is then confirmed in float64)."""
        flat, norm = tensors.grad_groups()
        if not flat and not norm:
            return all_finite(root_grads), None
        if tensors.complete:
            flat_names, norm_names = tensors.flat_names, tensors.norm_names
        else:  # a parameter without a gradient (frozen, unused this step): names the slow way
            root = model()
            if root is None:
                raise RuntimeError("the model was freed")
            flat, flat_names, norm, norm_names = _named_grads(root)
        finite, finding = self.check(flat, flat_names, norm, norm_names, root_grads, health, armed)
        if (not finite and all_finite(list(flat) + list(norm) + root_grads)) or (
            finding is not None and finding.inexact and armed
        ):
            # Every value finite, but a sum of squares overflowed float32 (gradients of ~1e19 and
            # more: not a NaN/Inf, an explosion), or underflowed it at a stop (a threshold below
            # ~1e-19 would see every tiny gradient as zero): the float64 norms decide, and give
            # the figure the stop reports.
            layout = self._layout_for(flat, flat_names, norm, norm_names)
            return True, self._in_float64(list(flat) + list(norm), layout, health)
        return finite, finding

    def check(
        self,
        flat: list[torch.Tensor],
        flat_names: list[str],
        norm: Sequence[torch.Tensor],
        norm_names: list[str],
        root_grads: Sequence[torch.Tensor],
        health: GradientHealth,
        armed: bool = True,
    ) -> tuple[bool, Finding | None]:
        """(all finite, the threshold crossed if any: ``CROSSED`` when not ``armed``), with one
        transfer from the device."""
        layout = self._layout
        if layout is None or self._key != (id(flat_names), id(norm_names), len(flat), len(norm)):
            layout = self._layout_for(flat, flat_names, norm, norm_names)  # (kept: no call in the usual step)
        buffer = torch._C._nn.flatten_dense_tensors(flat) if flat else None
        if buffer is not None and buffer.numel() != layout.flat_numel:  # a gradient changed size (same names)
            self._layout = None
            layout = self._layout_for(flat, flat_names, norm, norm_names)
        if buffer is not None and buffer.dtype is not torch.float32:
            buffer = buffer.float()
        if health.vanishing is None:
            return self._exploding_only(buffer, norm, root_grads, layout, health.exploding, armed)
        device = flat[0].device if flat else norm[0].device
        large = torch.stack(torch._foreach_norm(list(norm), dtype=torch.float32)).square() if norm else None
        per_param = None
        if layout.layer_lengths is not None:
            per_layer = self._per_layer(buffer, large, layout)
        else:  # a layer's flattened parameters apart: through each parameter's sum
            per_param = self._per_param(buffer, large, layout)
            per_layer = torch.zeros(len(layout.layers), dtype=per_param.dtype, device=device).index_add_(
                0, layout.layer_of, per_param
            )
        # aminmax carries a NaN/Inf of any layer's sum of squares (it propagates NaN): no total is
        # summed for the NaN/Inf check
        summary = list(torch.aminmax(per_layer))
        for grad in root_grads:  # the gradient reaching the model output: NaN/Inf only
            summary.append(grad.detach().sum(dtype=torch.float32).to(device))
        smallest, strongest, *root = torch.stack(summary).tolist()
        if not math.isfinite(strongest + sum(root)):
            return False, None
        exploding = health.exploding
        if exploding is not None and strongest > (exploding * (1 - BOUND_MARGIN)) ** 2:
            # a layer's sum bounds each of its parameters': their own sums only when it is crossed
            per_param = self._per_param(buffer, large, layout) if per_param is None else per_param
            largest = float(per_param.max())
        else:
            largest = 0.0
        if per_param is None and smallest < health.vanishing**2 and armed:
            per_param = self._per_param(buffer, large, layout)  # the stop names the weakest layer's parameter
        return True, self._crossed(per_param, per_layer, layout, health, largest, smallest, armed)

    def _exploding_only(
        self,
        buffer: torch.Tensor | None,
        norm: Sequence[torch.Tensor],
        root_grads: Sequence[torch.Tensor],
        layout: _Layout,
        exploding: float | None,
        armed: bool,
    ) -> tuple[bool, Finding | None]:
        """Exploding alone: the small gradients' joint norm (a bound on each one's) and the large
        ones' norms, in one stack; each parameter's own sum only when that bound is crossed.
        (A tensor call costs 5-10 µs inside a training step, its caches cold: this runs every step.)"""
        parts = []
        if buffer is not None:
            parts.append(torch.linalg.vector_norm(buffer))
        if norm:
            parts.extend(torch._foreach_norm(list(norm), dtype=torch.float32))
        device = parts[0].device
        for grad in root_grads:  # the gradient reaching the model output: NaN/Inf only
            parts.append(grad.detach().sum(dtype=torch.float32).to(device))
        values = torch.stack(parts).tolist() if len(parts) > 1 else [parts[0].item()]  # a tensor call less
        norms = values[: len(values) - len(root_grads)]
        if not math.isfinite(sum(values)):
            return False, None
        if exploding is None or max(norms) <= exploding * (1 - BOUND_MARGIN):
            return True, None
        first_large = 1 if buffer is not None else 0
        large = torch.stack(parts[first_large : len(norms)]).square() if norm else None
        per_param = self._per_param(buffer, large, layout)
        if float(per_param.max()) > exploding**2:
            return True, self._exploding(per_param, layout, exploding) if armed else CROSSED
        return True, None

    def _in_float64(self, grads: list[torch.Tensor], layout: _Layout, health: GradientHealth) -> Finding | None:
        """The thresholds against each parameter's squared norm taken in float64 (rare: an overflow,
        or an underflow at a stop)."""
        squares = []
        for grad in grads:  # layout order: the flattened ones, then the others
            try:
                squares.append(float(torch.linalg.vector_norm(grad.detach(), dtype=torch.float64)) ** 2)
            except (RuntimeError, TypeError):  # a device without float64
                squares.append(float(torch.linalg.vector_norm(grad.detach().cpu(), dtype=torch.float64)) ** 2)
        per_param = torch.tensor(squares, dtype=torch.float64)
        per_layer = torch.zeros(len(layout.layers), dtype=torch.float64).index_add_(0, layout.layer_of.cpu(), per_param)
        return self._crossed(per_param, per_layer, layout, health, float(per_param.max()), float(per_layer.min()))

    def _crossed(
        self,
        per_param: torch.Tensor | None,
        per_layer: torch.Tensor,
        layout: _Layout,
        health: GradientHealth,
        largest: float,
        smallest: float,
        armed: bool = True,
    ) -> Finding | None:
        """The threshold crossed, exploding first: ``largest`` / ``smallest`` are the squared norms
        of the largest parameter and of the weakest layer. ``per_param`` is None only where no stop
        is due (``check`` takes it for an armed crossing: a stop names the parameter)."""
        if health.exploding is not None and largest > health.exploding**2:
            if not armed:
                return CROSSED
            assert per_param is not None
            return self._exploding(per_param, layout, health.exploding)
        if health.vanishing is not None and smallest < health.vanishing**2:
            # (disarmed, float32 alone decides: with a threshold under ~1e-19, a layer that
            # underflows it keeps the switch disarmed until a step reads above the threshold)
            if not armed:
                return CROSSED
            assert per_param is not None
            return self._vanishing(per_param, per_layer, layout, health.vanishing)
        return None

    @staticmethod
    def _per_layer(buffer: torch.Tensor | None, large: torch.Tensor | None, layout: _Layout) -> torch.Tensor:
        """Each layer's squared gradient norm, in ``layout.layers`` order: the flattened gradients' sums
        by layer segments (the layers with flattened parameters come first), then the others'."""
        assert layout.layer_lengths is not None
        flat_layers = len(layout.layer_lengths)
        parts = []
        if buffer is not None:
            parts.append(torch.segment_reduce(buffer.square(), "sum", lengths=layout.layer_lengths, unsafe=True))
        if large is not None and len(layout.layers) > flat_layers:
            parts.append(torch.zeros(len(layout.layers) - flat_layers, dtype=large.dtype, device=large.device))
        per_layer = parts[0] if len(parts) == 1 else torch.cat(parts)
        return per_layer if large is None else per_layer.index_add_(0, layout.large_layer_of, large)

    @staticmethod
    def _per_param(buffer: torch.Tensor | None, large: torch.Tensor | None, layout: _Layout) -> torch.Tensor:
        """Each parameter's squared gradient norm, in ``layout.names`` order."""
        parts = []
        if buffer is not None:
            parts.append(torch.segment_reduce(buffer.square(), "sum", lengths=layout.lengths, unsafe=True))
        if large is not None:
            parts.append(large)
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _layout_for(
        self, flat: Sequence[torch.Tensor], flat_names: list[str], norm: Sequence[torch.Tensor], norm_names: list[str]
    ) -> _Layout:
        key = (id(flat_names), id(norm_names), len(flat), len(norm))
        if self._layout is None or key != self._key:
            names = list(flat_names) + list(norm_names)
            layers: dict[str, int] = {}
            layer_of = [layers.setdefault(name.rpartition(".")[0], len(layers)) for name in names]
            device = flat[0].device if flat else norm[0].device if norm else torch.device("cpu")
            flat_layer_of = layer_of[: len(flat)]
            layer_lengths = None
            if flat_layer_of == sorted(flat_layer_of):  # each layer's flattened parameters together
                sizes = [0] * (flat_layer_of[-1] + 1 if flat_layer_of else 0)
                for layer, grad in zip(flat_layer_of, flat):
                    sizes[layer] += grad.numel()
                layer_lengths = torch.tensor(sizes, dtype=torch.long, device=device)
            self._layout = _Layout(
                names,
                torch.tensor([t.numel() for t in flat], dtype=torch.long, device=device),
                torch.tensor(layer_of, dtype=torch.long, device=device),
                list(layers),
                layer_lengths,
                torch.tensor(layer_of[len(flat) :], dtype=torch.long, device=device),
                sum(t.numel() for t in flat),
            )
            self._key = key
        return self._layout

    def _exploding(self, per_param: torch.Tensor, layout: _Layout, threshold: float) -> Finding:
        norms = per_param.double().sqrt().tolist()
        worst = max(range(len(norms)), key=norms.__getitem__)
        above = sum(n > threshold for n in norms)
        name = layout.names[worst]
        others = f" ({above - 1} more above)" if above > 1 else ""
        return Finding(
            name,
            name.rpartition(".")[0],
            "exploding",
            f"Exploding gradient: {name} gradient norm {norms[worst]:.4g} > {threshold:g}{others}",
        )

    def _vanishing(
        self, per_param: torch.Tensor, per_layer: torch.Tensor, layout: _Layout, threshold: float
    ) -> Finding:
        layer_norms = per_layer.double().sqrt().tolist()
        weakest = min(range(len(layer_norms)), key=layer_norms.__getitem__)
        below = sum(n < threshold for n in layer_norms)
        norms = per_param.double().sqrt().tolist()
        owned = [i for i, layer in enumerate(layout.layer_of.tolist()) if layer == weakest]
        param = layout.names[min(owned, key=norms.__getitem__)]
        layer = layout.layers[weakest]
        others = f" ({below - 1} more layers below)" if below > 1 else ""
        return Finding(
            param,
            layer,
            "vanishing",
            f"Vanishing gradient: layer {layer or 'the model'} gradient norm {layer_norms[weakest]:.4g} "
            f"< {threshold:g} (smallest: {param}){others}",
            inexact=per_layer.dtype is not torch.float64 and layer_norms[weakest] ** 2 < FLOAT32_TINY,
        )


def _named_grads(root: nn.Module) -> tuple[list[torch.Tensor], list[str], list[torch.Tensor], list[str]]:
    """(flat, their names, norm, their names) of the parameters that have a gradient, each once."""
    flat: list[torch.Tensor] = []
    flat_names: list[str] = []
    norm: list[torch.Tensor] = []
    norm_names: list[str] = []
    for name, param in root.named_parameters():
        grad = param.grad
        if grad is not None:
            if flattens(grad):
                flat.append(grad)
                flat_names.append(name)
            else:
                norm.append(grad)
                norm_names.append(name)
    return flat, flat_names, norm, norm_names
