"""Code lenses over layer definitions and call sites.

Each layer gets "Break on forward", "Break on backward" and "Watch", running
the extension's commands (argument shapes are documented in
``extension/src/lsp/README.md``). During a session a fourth lens shows the
last output shape seen for that layer (and NaNs, if any).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsprotocol import types

from .analysis import LayerDefinition
from .documents import DocumentState, RangeConverter
from .live import LiveSummary

TOGGLE_BREAKPOINT_COMMAND = "hookscope.toggleLayerBreakpoint"
WATCH_COMMAND = "hookscope.watchLayer"


@dataclass(frozen=True, slots=True)
class LensSite:
    layer: LayerDefinition
    line: int
    span_range: types.Range
    site: str
    """``definition`` or ``call``."""


def build_lenses(state: DocumentState, converter: RangeConverter, live: dict[int, list[LiveSummary]]) -> list[types.CodeLens]:
    analysis = state.analysis
    sites = [
        LensSite(d, d.line, converter.range(d.name_span), "definition") for d in analysis.layers
    ] + [
        LensSite(c.layer, c.line, converter.range(c.attribute_span), "call") for c in analysis.calls
    ]
    layers_per_line: dict[int, int] = {}
    for site in sites:
        layers_per_line[site.line] = layers_per_line.get(site.line, 0) + 1
    lenses: list[types.CodeLens] = []
    for site in sorted(sites, key=lambda s: (s.line, s.span_range.start.character)):
        prefix = f"{site.layer.display_name}: " if layers_per_line[site.line] > 1 else ""
        location = _location(state.uri, site)
        for phase, title in (("forward", "Break on forward"), ("backward", "Break on backward")):
            lenses.append(_lens(site.span_range, prefix + title, TOGGLE_BREAKPOINT_COMMAND, {**location, "phase": phase}))
        lenses.append(_lens(site.span_range, "Watch", WATCH_COMMAND, location))
        summaries = live.get(id(site.layer))
        if summaries:
            lenses.append(_lens(site.span_range, live_title(summaries), WATCH_COMMAND, location))
    return lenses


def live_title(summaries: list[LiveSummary]) -> str:
    first = summaries[0]
    title = f"out {first.shape}" if first.shape else "seen"
    if len(summaries) > 1:
        title += f" (+{len(summaries) - 1} more)"
    nan = sum(s.nan or 0 for s in summaries)
    if nan:
        title += f" · {nan} NaN"
    return title


def _location(uri: str, site: LensSite) -> dict[str, Any]:
    layer = site.layer
    location: dict[str, Any] = {
        "uri": uri,
        "line": site.line,
        "site": site.site,
        "definitionLine": layer.line,
        "layer": layer.path,
        "cls": layer.cls,
    }
    if layer.owner:
        location["owner"] = layer.owner
    return location


def _lens(span_range: types.Range, title: str, command: str, argument: dict[str, Any]) -> types.CodeLens:
    return types.CodeLens(range=span_range, command=types.Command(title=title, command=command, arguments=[argument]))
