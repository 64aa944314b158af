"""Code lenses over layer definitions and call sites.

Each line that defines or calls layers gets "Break on forward", "Break on
backward" and "Watch", running the extension's commands (argument shapes are
documented in ``extension/src/lsp/README.md``). During a session a fourth lens
shows the last output shape seen there (and NaNs, if any).

The commands act on the line (a layer breakpoint is a line's, and covers every
layer the line makes or calls), so a line with several layers
(``nn.ModuleDict({...})``, ``self.a(x) + self.b(x)``) gets one set of lenses,
whose tooltips name those layers: a set per layer would run past the editor's
width and label each with a layer its click does not single out.

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
ASKS = "; which of them, the editor asks once the program runs"
"""A line breakpoint that resolves to several layers asks (extension/src/breakpoints/instancePicker.ts)."""


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
    """The document's lenses with their commands, as LSP JSON ``CodeLens`` objects: one set per line."""
    analysis = state.analysis
    sites = [LensSite(d, d.line, _range_json(converter.range(d.name_span)), "definition") for d in analysis.layers] + [
        LensSite(c.layer, c.line, _range_json(converter.range(c.attribute_span)), "call") for c in analysis.calls
    ]
    lines: dict[int, list[LensSite]] = {}
    for site in sorted(sites, key=lambda s: (s.line, s.span_range["start"]["character"])):
        lines.setdefault(site.line, []).append(site)
    lenses: list[dict[str, Any]] = []
    for line_sites in lines.values():
        first = line_sites[0]
        location = _location(state.uri, first)
        names = _names(line_sites)
        several = len(line_sites) > 1
        if several:
            location["layers"] = [_layer_fields(site) for site in line_sites]
        for phase, title in (("forward", "Break on forward"), ("backward", "Break on backward")):
            tooltip = f"Stop in the {phase} of {names} (a layer breakpoint on this line{ASKS if several else ''})"
            lenses.append(
                _lens(first.span_range, title, TOGGLE_BREAKPOINT_COMMAND, {**location, "phase": phase}, tooltip)
            )
        watch = "Watch…" if several else "Watch"  # the extension asks which one
        lenses.append(_lens(first.span_range, watch, WATCH_COMMAND, location, f"Show {names} in the Tensors panel"))
        seen = [(site, live[id(site.layer)]) for site in line_sites if live.get(id(site.layer))]
        if seen:
            title = live_title([summary for _, summaries in seen for summary in summaries])
            each = "; ".join(f"{site.layer.display_name}: {live_title(summaries)}" for site, summaries in seen)
            lenses.append(_lens(first.span_range, title, WATCH_COMMAND, location, each if several else None))
    return lenses


def _names(line_sites: list[LensSite]) -> str:
    """'conv1', or "paths, paths['loud'] or paths['mute']": each layer once, as written."""
    names = list(dict.fromkeys(site.layer.display_name for site in line_sites))
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


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
    return {"uri": uri, "line": site.line, **_layer_fields(site)}


def _layer_fields(site: LensSite) -> dict[str, Any]:
    layer = site.layer
    fields: dict[str, Any] = {"site": site.site, "definitionLine": layer.line, "layer": layer.path, "cls": layer.cls}
    if layer.owner:
        fields["owner"] = layer.owner
    return fields


def _lens(
    span_range: dict[str, Any], title: str, command: str, argument: dict[str, Any], tooltip: str | None = None
) -> dict[str, Any]:
    lens: dict[str, Any] = {"title": title, "command": command, "arguments": [argument]}
    if tooltip:
        lens["tooltip"] = tooltip
    return {"range": span_range, "command": lens}


def _range_json(span_range: types.Range) -> dict[str, Any]:
    return {
        "start": {"line": span_range.start.line, "character": span_range.start.character},
        "end": {"line": span_range.end.line, "character": span_range.end.character},
    }
