"""A layer breakpoint's spec: the protocol's ``BreakpointSpec`` map parsed and checked.

A spec names layers by qualified name, glob (``layer*.conv1``), class (``Conv2d``) or source
location (file + line); ``engine/model_index.py`` resolves those to modules and
``engine/breakpoints.py`` hooks them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hookscope.hooks.conditions import Condition
from hookscope.link.protocol_vocabulary import PHASES

ACTIONS = ("log", "raise", "callback")


@dataclass
class BreakpointSpec:
    """A parsed ``BreakpointSpec`` (see link/protocol_structs.py)."""

    id: str
    layer: str | None = None
    cls: str | None = None
    file: str | None = None
    line: int | None = None
    phases: tuple[str, ...] = ("forward",)
    condition: Condition = field(default_factory=Condition)
    hit_count: int | None = None
    every: int | None = None
    enabled: bool = True
    action: str = "log"
    callback: Callable[..., Any] | None = None
    model: str | None = None
    """Restrict to one model id (Python API); None: every model."""

    @classmethod
    def parse(cls, raw: Any) -> BreakpointSpec:
        if not isinstance(raw, dict):
            raise ValueError("a breakpoint must be a map")
        bp_id = raw.get("id")
        if not isinstance(bp_id, str) or not bp_id:
            raise ValueError("a breakpoint needs a string 'id'")
        phases = raw.get("phases") or ["forward"]
        if not isinstance(phases, (list, tuple)) or any(p not in PHASES for p in phases):
            raise ValueError(f"phases must be a subset of {', '.join(PHASES)}")
        layer, cls_name, file, line = raw.get("layer"), raw.get("cls"), raw.get("file"), raw.get("line")
        if not (layer or cls_name or (file and line)):
            raise ValueError("a breakpoint needs 'layer', 'cls', or 'file' and 'line'")
        if (file is None) != (line is None):
            raise ValueError("'file' and 'line' go together")
        for name, value in (("hitCount", raw.get("hitCount")), ("every", raw.get("every"))):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer")
        callback = raw.get("callback")
        action = raw.get("action") or ("callback" if callback is not None else "log")
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}")
        if action == "callback" and not callable(callback):
            raise ValueError("action 'callback' needs a callable 'callback' (Python API)")
        return cls(
            id=bp_id,
            layer=layer,
            cls=cls_name,
            file=file,
            line=line,
            phases=tuple(dict.fromkeys(phases)),
            condition=Condition.parse(raw.get("condition")),
            hit_count=raw.get("hitCount"),
            every=raw.get("every"),
            enabled=bool(raw.get("enabled", True)),
            action=action,
            callback=callback,
            model=raw.get("model"),
        )
