"""Bounds of the requests that size work: every string, list and render/inspect option the editor sends.

``hookscope.link.protocol.validate`` runs ``check_bounds`` on each request to the backend, so the engine's
handlers only ever see values inside them; a value outside is a ``badMessage`` reply whose text names the
field, the value's problem and the limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


class BoundsError(ValueError):
    """A request value out of bounds (``protocol.validate`` turns it into a badMessage ProtocolError)."""


MAX_STRING = 4096
"""Longest string anywhere in a request (layer names, globs, paths, expressions)."""
MAX_LIST = 100_000
"""Longest list anywhere in a request (a watch of every layer of a very large model)."""
MAX_BREAKPOINTS = 10_000
MAX_RATE_HZ = 1000.0
"""Most summaries per second per watched layer the editor may ask for."""
MAX_HISTOGRAM_BINS = 1024
MAX_PER_PAGE = 256
"""Channels in one feature-map page."""
MAX_POSITION = 2**31 - 1
"""Largest batch item, page, channel, head or index position."""
MAX_AXES = 64
"""Tensors have at most this many dimensions (torch's own limit is 64 too)."""
MAX_TILE_PX = 64
MAX_GAP_PX = 16
MAX_LABELS = 4096
"""Token labels of an attention map, per axis."""
MAX_CHANNEL_LIST = 65_536
"""Channels (or heads) one intervention names."""
MAX_HANDLES = 10_000
COLORMAP_NAME_CHARS = 32


class _Bound:
    """A check of one option's value; ``describe`` is the allowed range, for the error."""

    def __init__(self, describe: str, ok: Callable[[Any], bool]) -> None:
        self.describe, self.ok = describe, ok


def _int(lo: int, hi: int) -> _Bound:
    return _Bound(
        f"an integer from {lo} to {hi}", lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
    )


def _number(lo: float, hi: float) -> _Bound:
    return _Bound(
        f"a number from {lo:g} to {hi:g}",
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi,
    )


_BOOL = _Bound("true or false", lambda v: isinstance(v, bool))
_CMAP = _Bound(
    f"a colormap name (at most {COLORMAP_NAME_CHARS} characters)",
    lambda v: isinstance(v, str) and 0 < len(v) <= COLORMAP_NAME_CHARS,
)
_POSITION = _int(0, MAX_POSITION)
_SIGNED_POSITION = _int(-MAX_POSITION, MAX_POSITION)
_AXES = _Bound(
    f"two axis numbers from {-MAX_AXES} to {MAX_AXES - 1}",
    lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(_int(-MAX_AXES, MAX_AXES - 1).ok(a) for a in v),
)
_INDEX = _Bound(
    f"positions by axis (at most {MAX_AXES})",
    lambda v: (
        (
            isinstance(v, dict)
            and len(v) <= MAX_AXES
            and all(str(k).lstrip("-").isdigit() and _SIGNED_POSITION.ok(x) for k, x in v.items())
        )
        or (isinstance(v, (list, tuple)) and len(v) <= MAX_AXES and all(_SIGNED_POSITION.ok(x) for x in v))
        or _SIGNED_POSITION.ok(v)
    ),
)


def _labels_ok(v: Any) -> bool:
    def axis(labels: Any) -> bool:
        return (
            isinstance(labels, (list, tuple)) and len(labels) <= MAX_LABELS and all(isinstance(x, str) for x in labels)
        )

    return axis(v) or (isinstance(v, (list, tuple)) and len(v) == 2 and all(axis(x) for x in v))


_FEATURE_MAP = {
    "batch": _POSITION,
    "page": _POSITION,
    "per_page": _int(1, MAX_PER_PAGE),
    "shared_scale": _BOOL,
    "sort_by_strength": _BOOL,
    "cmap": _CMAP,
    "channel": _POSITION,
    "min_tile": _int(1, MAX_TILE_PX),
    "gap": _int(0, MAX_GAP_PX),
}

RENDER_OPTIONS: dict[str, dict[str, _Bound]] = {
    "featureMap": _FEATURE_MAP,
    "tensor": {"axes": _AXES, "index": _INDEX, "cmap": _CMAP},
    "histogram": {
        "bins": _int(1, MAX_HISTOGRAM_BINS),
        "log": _BOOL,
        "title": _Bound("a title (at most 200 characters)", lambda v: isinstance(v, str) and len(v) <= 200),
    },
    "attention": {
        "head": _Bound(
            f"a head number (0 to {MAX_POSITION}) or 'mean'",
            lambda v: _POSITION.ok(v) or v in ("avg", "mean", "average"),
        ),
        "labels": _Bound(f"a list of at most {MAX_LABELS} strings, or two such lists", _labels_ok),
        "batch": _POSITION,
        "cmap": _CMAP,
        "min_tile": _int(1, MAX_TILE_PX),
        "gap": _int(0, MAX_GAP_PX),
    },
    "gradCam": {
        "target": _Bound(
            f"a class number (0 to {MAX_POSITION}) or a list of at most {MAX_LABELS}",
            lambda v: (
                _POSITION.ok(v)
                or (isinstance(v, (list, tuple)) and len(v) <= MAX_LABELS and all(_POSITION.ok(x) for x in v))
            ),
        ),
        "batch": _POSITION,
        "alpha": _number(0.0, 1.0),
        "cmap": _CMAP,
        "eval_mode": _BOOL,
        "token_grid": _Bound(
            "two sizes from 1 to 4096",
            lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(_int(1, 4096).ok(x) for x in v),
        ),
    },
    "gradientFlow": {
        "vanishing": _number(0.0, 1e30),
        "exploding": _number(0.0, 1e30),
        "title": _Bound("a title (at most 200 characters)", lambda v: isinstance(v, str) and len(v) <= 200),
        "metric": _Bound("'mean' or 'norm'", lambda v: v in ("mean", "norm")),
        "highlight": _Bound("a layer name (at most 200 characters)", lambda v: isinstance(v, str) and len(v) <= 200),
    },
}
"""The options each ``render`` view accepts, and their bounds; anything else is refused."""

INSPECT_OPTIONS: dict[str, _Bound] = {
    "view": _Bound("'slice', 'featureMap' or 'summary'", lambda v: v in ("slice", "featureMap", "summary")),
    "axes": _AXES,
    "index": _INDEX,
    **_FEATURE_MAP,
}
"""The options ``inspectValue`` accepts."""


def check_bounds(msg: dict[str, Any]) -> None:
    """Refuse a request whose sizes are out of bounds (raises BoundsError)."""
    mtype = msg["type"]
    _check_sizes(mtype, msg)
    if mtype == "render":
        view = msg["view"]
        if view not in RENDER_OPTIONS:
            raise BoundsError(f"unknown view {view[:32]!r} (one of {', '.join(RENDER_OPTIONS)})")
        _check_options(f"render {view}", msg.get("options"), RENDER_OPTIONS[view])
    elif mtype == "inspectValue":
        _check_options("inspectValue", msg.get("options"), INSPECT_OPTIONS)
    elif mtype == "watch":
        rate = msg.get("rateHz")
        if rate is not None and not (0 < rate <= MAX_RATE_HZ):
            raise BoundsError(f"watch: rateHz must be > 0 and at most {MAX_RATE_HZ:g}, got {rate!r}")
    elif mtype == "setBreakpoints" and len(msg["breakpoints"]) > MAX_BREAKPOINTS:
        raise BoundsError(f"setBreakpoints: {len(msg['breakpoints'])} breakpoints, at most {MAX_BREAKPOINTS}")
    elif mtype == "addIntervention":
        channels, value = msg.get("channels"), msg.get("value")
        if channels is not None and (len(channels) > MAX_CHANNEL_LIST or not all(_POSITION.ok(c) for c in channels)):
            raise BoundsError(
                f"addIntervention: channels must be at most {MAX_CHANNEL_LIST} integers from 0 to {MAX_POSITION}"
            )
        if value is not None and not math.isfinite(value):
            raise BoundsError("addIntervention: value must be a finite number")
    elif mtype == "releaseInspected":
        handles = msg.get("handles")
        if handles is not None and len(handles) > MAX_HANDLES:
            raise BoundsError(f"releaseInspected: at most {MAX_HANDLES} handles")


def _check_sizes(mtype: str, msg: dict[str, Any]) -> None:
    """Every string and list in the request within MAX_STRING / MAX_LIST (the decoder bounds the walk)."""
    stack: list[tuple[str, Any]] = [(k, v) for k, v in msg.items()]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str) and len(value) > MAX_STRING:
            raise BoundsError(f"{mtype}: {where[:64]} is a string of {len(value)} characters, at most {MAX_STRING}")
        if isinstance(value, (list, tuple)):
            if len(value) > MAX_LIST:
                raise BoundsError(f"{mtype}: {where[:64]} has {len(value)} entries, at most {MAX_LIST}")
            stack.extend((where, v) for v in value)
        elif isinstance(value, dict):
            stack.extend((f"{where}.{k}", v) for k, v in value.items())


def _check_options(what: str, options: Any, allowed: dict[str, _Bound]) -> None:
    if options is None:
        return
    for name, value in options.items():
        bound = allowed.get(name)
        if bound is None:
            raise BoundsError(f"{what}: unknown option {str(name)[:32]!r} (allowed: {', '.join(sorted(allowed))})")
        if value is not None and not bound.ok(value):
            raise BoundsError(f"{what}: option {name!r} must be {bound.describe}, got {_short(value)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
