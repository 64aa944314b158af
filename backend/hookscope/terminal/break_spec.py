"""The ``--break SPEC`` grammar of ``hookscope run``: a spec's text as a protocol ``BreakpointSpec`` map."""

from __future__ import annotations

import os
import re
from typing import Any

from hookscope.link.protocol_vocabulary import PHASES

PHASE_ALIASES = {
    "pre": "forward_pre",
    "forward_pre": "forward_pre",
    "fwd": "forward",
    "forward": "forward",
    "bwd": "backward",
    "backward": "backward",
    "grad": "param_grad",
    "param_grad": "param_grad",
}
"""Every name a spec (or ``--phase``) may give a phase by -> the protocol's phase."""

_THRESHOLD = re.compile(r"^(grad_norm|absmax)\s*([<>])\s*([-+0-9.eE]+|inf)$")
_FILE_LINE = re.compile(r"^(?P<file>.+\.pyw?):(?P<line>\d+)(?::(?P<phases>[\w,]+))?$")


class SpecError(ValueError):
    """A --break SPEC that cannot be understood."""


def parse_spec(text: str, spec_id: str, default_phases: list[str] | None = None) -> dict[str, Any]:
    """A --break SPEC as a protocol ``BreakpointSpec`` map."""
    text = text.strip()
    if not text:
        raise SpecError("an empty breakpoint spec")
    modifiers: dict[str, int] = {}
    match = re.search(r"\s+(every|hit)\s+(\d+)\s*$", text)
    if match:
        modifiers["every" if match.group(1) == "every" else "hitCount"] = int(match.group(2))
        text = text[: match.start()]
    where, _, condition_text = text.partition(" if ")
    where = where.strip()
    spec: dict[str, Any] = {"id": spec_id}
    phases_text = None
    located = _FILE_LINE.match(where)
    if located:
        spec["file"] = os.path.abspath(located.group("file"))
        spec["line"] = int(located.group("line"))
        phases_text = located.group("phases")
    else:
        if ":" in where:
            where, phases_text = where.rsplit(":", 1)
        if not where or not re.fullmatch(r"[\w.*?\[\]-]+", where):
            raise SpecError(f"{text!r}: expected a layer name, glob, class or file.py:line before ':'")
        if where[0].isupper() and "." not in where and not any(c in where for c in "*?["):
            spec["cls"] = where
        else:
            spec["layer"] = where
    condition = _parse_condition(condition_text.strip(), text) if condition_text.strip() else None
    if phases_text:
        phases = []
        for name in phases_text.split(","):
            phase = PHASE_ALIASES.get(name.strip())
            if phase is None:
                raise SpecError(f"{text!r}: unknown phase {name!r} (one of {', '.join(PHASES)})")
            phases.append(phase)
    elif condition and condition["kind"].startswith("grad_norm"):
        phases = ["backward"]
    else:
        phases = list(default_phases or ["forward"])
    spec["phases"] = phases
    if condition:
        spec["condition"] = condition
    spec.update(modifiers)
    return spec


def _parse_condition(text: str, spec: str) -> dict[str, Any]:
    if text == "nonfinite":
        return {"kind": "nonfinite"}
    match = _THRESHOLD.match(text)
    if match:
        name, op, value = match.groups()
        try:
            threshold = float(value)
        except ValueError:
            raise SpecError(f"{spec!r}: {value!r} is not a number") from None
        if name == "absmax":
            if op != ">":
                raise SpecError(f"{spec!r}: only absmax>X is supported")
            return {"kind": "absmax_above", "threshold": threshold}
        return {"kind": "grad_norm_above" if op == ">" else "grad_norm_below", "threshold": threshold}
    try:
        compile(text, "<condition>", "eval")
    except SyntaxError as exc:
        raise SpecError(f"{spec!r}: the condition {text!r} is not a Python expression ({exc.msg})") from None
    return {"kind": "expression", "expression": text}
