"""Tensor reductions done on the tensor's device before anything moves to the CPU.

Renderers pick the batch item / page first, upcast bf16/fp16 to float32,
turn values into palette indices (uint8) on the device, and move only that
small result (plus a handful of statistics) to the host in one transfer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from . import colormap

Tensor = torch.Tensor


def as_tensor(t: Any) -> Tensor:
    """A tensor from a tensor, NumPy array or nested list; detached, no copy if possible."""
    if isinstance(t, Tensor):
        return t.detach()
    return torch.as_tensor(np.asarray(t))


def as_float(t: Tensor) -> Tensor:
    """float32 (float64 stays) view of a tensor: bf16/fp16/int/bool upcast on its device."""
    if t.dtype == torch.float64:
        return t
    if t.is_complex():
        return t.abs().float()
    return t.float()


def finite_range(x: Tensor, dims: tuple[int, ...] | None) -> tuple[Tensor, Tensor]:
    """Min and max over the finite values along ``dims`` (None: all), keepdim.

    A slice with no finite value gets (+inf, -inf), which callers treat as
    "no range"."""
    finite = torch.isfinite(x)
    if dims is None:
        dims = tuple(range(x.dim()))
    if bool(finite.all()):
        # Common case: no masking, no extra allocation (lovely-tensors' amin/amax habit).
        return x.amin(dim=dims, keepdim=True), x.amax(dim=dims, keepdim=True)
    lo = torch.where(finite, x, torch.full_like(x, float("inf"))).amin(dim=dims, keepdim=True)
    hi = torch.where(finite, x, torch.full_like(x, float("-inf"))).amax(dim=dims, keepdim=True)
    return lo, hi


def to_indices(x: Tensor, lo: Tensor, hi: Tensor) -> Tensor:
    """Palette indices (uint8, same shape) of ``x`` normalised by ``lo``/``hi``.

    Values map linearly onto 0..LEVELS-1; where ``hi == lo`` (a constant
    slice) there is no division: every value maps to level 0. NaN, +Inf and
    -Inf get their marker indices, so they are never silently dropped."""
    span = hi - lo
    ok = torch.isfinite(span) & (span > 0)
    safe_span = torch.where(ok, span, torch.ones_like(span))
    safe_lo = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))
    scaled = ((x - safe_lo) / safe_span * (colormap.LEVELS - 1)).clamp_(0, colormap.LEVELS - 1)
    scaled = torch.where(ok, scaled, torch.zeros_like(scaled))
    finite = torch.isfinite(x)
    if bool(finite.all()):
        return scaled.round_().to(torch.uint8)
    scaled = torch.where(finite, scaled, torch.zeros_like(scaled)).round_().to(torch.uint8)
    marker = torch.where(
        torch.isnan(x),
        torch.full_like(scaled, colormap.NAN),
        torch.where(x > 0, torch.full_like(scaled, colormap.POSINF), torch.full_like(scaled, colormap.NEGINF)),
    )
    return torch.where(finite, scaled, marker)


def nonfinite_counts(x: Tensor) -> Tensor:
    """(3,) int64 tensor on ``x``'s device: NaN, +Inf, -Inf counts."""
    if not x.is_floating_point():
        return torch.zeros(3, dtype=torch.int64, device=x.device)
    return torch.stack((torch.isnan(x).sum(), torch.isposinf(x).sum(), torch.isneginf(x).sum()))


def counts_meta(counts: np.ndarray | list[int]) -> dict[str, int]:
    """``{'nan': n, 'posinf': n, 'neginf': n}`` from a 3-vector."""
    return {"nan": int(counts[0]), "posinf": int(counts[1]), "neginf": int(counts[2])}


def number(v: float) -> float | None:
    """A float for meta, or None where the value is not finite ("no range")."""
    v = float(v)
    return v if np.isfinite(v) else None


def block_reduce(x: Tensor, factor: int) -> Tensor:
    """Shrink the last two dims of a float tensor by ``factor`` on its device.

    Each block becomes the mean of its finite values; a block holding any
    NaN becomes NaN (then +Inf, then -Inf): huge tensors never hide a NaN."""
    if factor <= 1:
        return x
    *lead, h, w = x.shape
    ph, pw = (-h) % factor, (-w) % factor
    hb, wb = (h + ph) // factor, (w + pw) // factor

    def blocks(a: Tensor) -> Tensor:
        a = torch.nn.functional.pad(a, (0, pw, 0, ph))
        return a.reshape(*lead, hb, factor, wb, factor)

    finite = torch.isfinite(x)
    total = blocks(torch.where(finite, x, torch.zeros_like(x))).sum(dim=(-3, -1))
    n = blocks(finite.to(x.dtype)).sum(dim=(-3, -1))
    out = torch.where(n > 0, total / n.clamp(min=1), torch.full_like(total, float("nan")))
    if not bool(finite.all()):
        for kind, value in (
            (torch.isneginf, float("-inf")),
            (torch.isposinf, float("inf")),
            (torch.isnan, float("nan")),
        ):
            hit = blocks(kind(x).to(torch.uint8)).amax(dim=(-3, -1)).bool()
            out = torch.where(hit, torch.full_like(out, value), out)
    return out
