""" "Show in Hookscope": a value from any paused frame, handed to the agent by the debugger.

The extension sends DAP ``evaluate`` in the frame the user is looking at
(any frame of the call stack, not only a Hookscope hit) with
``__import__('hookscope.debugger.inspector', fromlist=['publish']).publish('<expr>', '<handle>')``.
``publish`` evaluates ``expr`` in its caller's namespace (the one debugpy
evaluates in: that frame's globals and locals), keeps the tensor under
``handle`` and answers one short line with the pid, which tells the
extension which connected process holds it. The expression travels as a
string literal, so a selection is never spliced into code.

The agent's ``inspectValue`` request with that ``handle`` then summarises
and renders the tensor (``answer``): no expression is evaluated on the agent
thread. Values are held strongly (a temporary such as ``x[0].float()`` has
no other owner) but at most ``MAX_HELD`` of them, and the extension
releases them when the program resumes (``releaseInspected``).
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
from collections import OrderedDict
from typing import Any

MAX_HELD = 8
"""Published values kept at once; the oldest is dropped first."""

MAX_VALUE_SIDE = 256
"""The values sent with a slice (for the hover readout) are at most this many per side."""

_HANDLE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_lock = threading.Lock()
_held: OrderedDict[str, tuple[Any, str]] = OrderedDict()


# ------------------------------------------------------------------ in the paused frame


def publish(expression: str, handle: str) -> str:
    """Evaluate ``expression`` in the caller's frame and keep the tensor it names under ``handle``.

    Runs on the paused thread inside debugpy's ``evaluate``. Never raises:
    the answer starts with ``hookscope-ok`` or ``hookscope-error``.
    """
    try:
        if not isinstance(handle, str) or not _HANDLE.match(handle):
            return "hookscope-error: bad handle"
        caller = sys._getframe(1)
        code = compile(expression.strip(), "<hookscope inspect>", "eval")
        value = eval(code, caller.f_globals, caller.f_locals)  # noqa: S307 - the user's own debugger
    except Exception as exc:
        return f"hookscope-error: {type(exc).__name__}: {exc}"[:500]
    try:
        tensor, path = find_tensor(value, expression.strip())
    except Exception as exc:
        return f"hookscope-error: {type(exc).__name__}: {exc}"[:500]
    if tensor is None:
        return f"hookscope-error: {expression.strip()[:80]} is not a tensor ({type(value).__name__})"
    with _lock:
        _held[handle] = (tensor, path)
        _held.move_to_end(handle)
        while len(_held) > MAX_HELD:
            _held.popitem(last=False)
    from hookscope.debugger import tensor_repr

    return f"hookscope-ok pid={os.getpid()} handle={handle} {tensor_repr.tensor_line(tensor)}"


def find_tensor(value: Any, path: str) -> tuple[Any, str]:
    """``value`` itself when it is a tensor, else the first tensor inside it (lists, dicts, dataclasses)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None, path
    if isinstance(value, torch.Tensor):
        return value, path
    from hookscope.hooks import summaries

    for inner_path, tensor in summaries.iter_tensors(value, path, limit=1):
        return tensor, inner_path
    return None, path


def held(handle: str) -> tuple[Any, str] | None:
    with _lock:
        return _held.get(handle)


def release(handles: list[str] | None) -> int:
    """Drop the given handles (all when None); how many were held."""
    with _lock:
        if handles is None:
            n = len(_held)
            _held.clear()
            return n
        return sum(_held.pop(h, None) is not None for h in handles)


# ------------------------------------------------------------------ on the agent thread


def answer(request: dict) -> dict:
    """The ``inspectValue`` reply body for a published ``handle``.

    ``options``: ``view`` = ``'slice'`` (default: ``axes`` [row, col], ``index``
    {axis: position} for the other axes, ``cmap``), ``'featureMap'``
    (``batch``, ``page``, ``per_page``, ``channel``, ``shared_scale``, ``cmap``)
    or ``'summary'`` (no image).
    """
    from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, ERR_NOT_AVAILABLE, ProtocolError

    handle = request.get("handle")
    entry = held(handle) if isinstance(handle, str) else None
    if entry is None:
        raise ProtocolError(
            ERR_NOT_AVAILABLE, "that value is no longer held (the program resumed): show it again while paused"
        )
    tensor, path = entry
    expression = request.get("expression")
    label = expression if isinstance(expression, str) else path
    options = request.get("options") or {}
    if not isinstance(options, dict):
        raise ProtocolError(ERR_BAD_MESSAGE, "inspectValue options must be a map")
    from hookscope.debugger import tensor_repr

    body: dict[str, Any] = {"summary": tensor_repr.tensor_summary(tensor, label), "path": path}
    view = options.get("view", "slice")
    if view == "summary" or tensor_repr.summaries._unsupported(tensor) is not None or tensor.numel() == 0:
        return body
    if view in ("featureMap", "slice"):
        from hookscope.engine import image_packages

        absent = image_packages.missing(view)
        if absent:  # the summary still shows, with the reason there is no picture
            body["summary"] = {**body["summary"], "note": image_packages.message(view, absent)}
            return body
    try:
        if view == "featureMap":
            body.update(_feature_map(tensor, options))
        elif view == "slice":
            body.update(_slice(tensor, options))
        else:
            raise ProtocolError(ERR_BAD_MESSAGE, f"unknown inspect view {str(view)[:32]!r}")
    except (ValueError, IndexError, TypeError) as exc:
        raise ProtocolError(ERR_BAD_MESSAGE, f"{label}: {exc}") from exc
    return body


def plane_selector(shape: list[int], axes: Any, index: Any) -> tuple[int, int, dict[int, int]]:
    """Validated (row axis, col axis, {other axis: position}) for a tensor of ``shape``."""
    nd = len(shape)
    if nd < 2:
        return 0, 1, {}
    if axes is None:
        axes = [nd - 2, nd - 1]
    if not isinstance(axes, (list, tuple)) or len(axes) != 2:
        raise ValueError(f"axes must name two axes, got {axes!r}")
    row, col = (int(a) % nd if -nd <= int(a) < nd else _bad_axis(a, nd) for a in axes)
    if row == col:
        raise ValueError("the two displayed axes must differ")
    given = {int(k): int(v) for k, v in (index or {}).items()} if isinstance(index, dict) else {}
    positions: dict[int, int] = {}
    for axis in range(nd):
        if axis in (row, col):
            continue
        pos = given.get(axis, 0)
        if not -shape[axis] <= pos < shape[axis]:
            raise ValueError(f"index {pos} out of range for axis {axis} of size {shape[axis]}")
        positions[axis] = pos % shape[axis]
    return row, col, positions


def _bad_axis(a: Any, nd: int) -> int:
    raise ValueError(f"axis {a} out of range for a {nd}-D tensor")


def _slice(tensor: Any, options: dict) -> dict[str, Any]:
    import torch

    from hookscope import visuals

    x = tensor.detach()
    if type(x) not in (torch.Tensor, torch.nn.Parameter):
        x = x.as_subclass(torch.Tensor)
    shape = list(x.shape)
    cmap = str(options.get("cmap", "viridis"))
    if x.dim() < 2:
        plane = x.reshape(1, -1)
        image = visuals.tensor_image(x, cmap=cmap)
        row, col, positions = 0, 1, dict[int, int]()
    else:
        row, col, positions = plane_selector(shape, options.get("axes"), options.get("index"))
        image = visuals.tensor_image(x, axes=(row, col), index={a: p for a, p in positions.items()}, cmap=cmap)
        selector: list[Any] = [slice(None)] * x.dim()
        for axis, pos in positions.items():
            selector[axis] = pos
        plane = x[tuple(selector)]
        if row > col:
            plane = plane.t()
    values, step = plane_values(plane)
    meta = dict(image.meta)
    meta.update(axes=[row, col], index={str(a): p for a, p in positions.items()})
    return {
        "png": image.png,
        "width": image.width,
        "height": image.height,
        "meta": meta,
        "values": values.tobytes(),
        "valuesShape": list(values.shape),
        "valuesStep": step,
    }


def plane_values(plane: Any) -> tuple[Any, list[int]]:
    """The displayed plane's values (float32, C order), every ``step``-th row/column when it is large.

    Exact values at those positions (a strided view, one small transfer);
    NaN/Inf survive the float32 conversion.
    """
    import numpy as np
    import torch

    h, w = plane.shape
    sr, sc = max(1, math.ceil(h / MAX_VALUE_SIDE)), max(1, math.ceil(w / MAX_VALUE_SIDE))
    small = plane[::sr, ::sc]
    if small.is_complex():
        small = small.abs()
    host = small.to(torch.float32).cpu().numpy()
    return np.ascontiguousarray(host, dtype="<f4"), [sr, sc]


def _feature_map(tensor: Any, options: dict) -> dict[str, Any]:
    from hookscope import visuals

    keys = ("batch", "page", "per_page", "shared_scale", "sort_by_strength", "cmap", "channel")
    kwargs = {k: options[k] for k in keys if k in options and options[k] is not None}
    image = visuals.feature_map(tensor.detach(), **kwargs)
    return {"png": image.png, "width": image.width, "height": image.height, "meta": image.meta}
