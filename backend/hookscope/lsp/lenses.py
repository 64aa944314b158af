"""Code lenses over layer definitions and call sites.

Each layer gets "Break on forward", "Break on backward" and "Watch", running
the extension's commands (argument shapes are documented in
``extension/src/lsp/README.md``). During a session a fourth lens shows the
last output shape seen for that layer (and NaNs, if any).

Lenses are sent unresolved (range + a tiny ``data``) and their commands
filled in by ``codeLens/resolve``: the editor resolves only the lenses on
screen, and a big model file has well over a thousand of them.
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
    span_range: dict[str, Any]
    """LSP JSON range of the name the lens sits over."""
    site: str
    """``definition`` or ``call``."""


@dataclass(frozen=True, slots=True)
class LensSet:
    """The lenses of one document version, as LSP JSON."""

    unresolved: list[dict[str, Any]]
    """What ``textDocument/codeLens`` returns: range and ``data`` only."""
    resolved: list[dict[str, Any]]
    """The same lenses with their commands, for ``codeLens/resolve``."""


def build_lens_set(
    state: DocumentState, converter: RangeConverter, live: dict[int, list[LiveSummary]], document_key: int
) -> LensSet:
    """Plain JSON rather than ``lsprotocol`` objects: converting a thousand
    lenses through cattrs costs more than the whole analysis."""
    resolved = build_lenses(state, converter, live)
    unresolved = [
        {"range": lens["range"], "data": [document_key, state.version, index]} for index, lens in enumerate(resolved)
    ]
    return LensSet(unresolved, resolved)


def build_lenses(
    state: DocumentState, converter: RangeConverter, live: dict[int, list[LiveSummary]]
) -> list[dict[str, Any]]:
    """The document's lenses with their commands, as LSP JSON ``CodeLens`` objects."""
    analysis = state.analysis
    sites = [LensSite(d, d.line, _range_json(converter.range(d.name_span)), "definition") for d in analysis.layers] + [
        LensSite(c.layer, c.line, _range_json(converter.range(c.attribute_span)), "call") for c in analysis.calls
    ]
    layers_per_line: dict[int, int] = {}
    for site in sites:
        layers_per_line[site.line] = layers_per_line.get(site.line, 0) + 1
    lenses: list[dict[str, Any]] = []
    for site in sorted(sites, key=lambda s: (s.line, s.span_range["start"]["character"])):
        prefix = f"{site.layer.display_name}: " if layers_per_line[site.line] > 1 else ""
        location = _location(state.uri, site)
        for phase, title in (("forward", "Break on forward"), ("backward", "Break on backward")):
            lenses.append(
                _lens(site.span_range, prefix + title, TOGGLE_BREAKPOINT_COMMAND, {**location, "phase": phase})
            )
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


def _lens(span_range: dict[str, Any], title: str, command: str, argument: dict[str, Any]) -> dict[str, Any]:
    return {"range": span_range, "command": {"title": title, "command": command, "arguments": [argument]}}


def _range_json(span_range: types.Range) -> dict[str, Any]:
    return {
        "start": {"line": span_range.start.line, "character": span_range.start.character},
        "end": {"line": span_range.end.line, "character": span_range.end.character},
    }
