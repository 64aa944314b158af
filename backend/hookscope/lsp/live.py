"""Live layer summaries sent by the extension during a debug session.

The extension sends ``hookscope/liveSummaries`` with
``{uri?, layers: {qualifiedName: {shape, mean, std, nan, gradNorm, file, line}}}``
(``line`` is 1-based, as in the backend's ``ModuleInfo``). Without ``uri`` the
payload replaces every summary; with one it replaces those sent for that
document. An empty ``layers`` clears them (session ended).

A summary belongs to a layer definition of a document when its file is that
document and its line falls inside the constructor call (the innermost such
layer wins); otherwise, as a fallback, when its qualified name ends with the
layer's path (``encoder.conv1`` -> ``conv1``) and its file is unknown or the
same document (lines move while the user edits).
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from .analysis import LayerDefinition


@dataclass(frozen=True, slots=True)
class LiveSummary:
    """What the editor last saw of one module instance."""

    name: str
    shape: str | None
    mean: float | None
    std: float | None
    nan: int | None
    grad_norm: float | None
    file: str | None
    line: int | None
    """1-based."""


def parse_payload(payload: Any) -> tuple[str | None, list[LiveSummary]]:
    """(uri, summaries) from a notification's params; bad entries are skipped."""
    if not isinstance(payload, Mapping):
        return None, []
    uri = payload.get("uri") if isinstance(payload.get("uri"), str) else None
    layers = payload.get("layers")
    summaries: list[LiveSummary] = []
    if isinstance(layers, Mapping):
        for name, entry in layers.items():
            if isinstance(entry, Mapping):
                summaries.append(_summary(str(name), entry))
    return uri, summaries


def _summary(name: str, entry: Mapping[str, Any]) -> LiveSummary:
    line = entry.get("line")
    file = entry.get("file")
    return LiveSummary(
        name=name,
        shape=format_shape(entry.get("shape")),
        mean=_number(entry.get("mean")),
        std=_number(entry.get("std")),
        nan=int(nan) if isinstance(nan := entry.get("nan"), (int, float)) and not isinstance(nan, bool) else None,
        grad_norm=_number(entry.get("gradNorm")),
        file=normalize_path(file) if isinstance(file, str) and file else None,
        line=line if isinstance(line, int) and not isinstance(line, bool) else None,
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def format_shape(shape: Any) -> str | None:
    if isinstance(shape, str):
        return shape
    if isinstance(shape, (list, tuple)):
        if shape and all(isinstance(s, (list, tuple)) for s in shape):
            return ", ".join(format_shape(s) or "?" for s in shape)
        return "[" + ", ".join(str(s) for s in shape) + "]"
    return None


def normalize_path(path_or_uri: str) -> str:
    """A comparable absolute path for a file path or a ``file:``/``vscode-remote:`` URI."""
    if "://" in path_or_uri:
        path = unquote(urlparse(path_or_uri).path)
        if os.name == "nt" and path.startswith("/") and len(path) > 2 and path[2] == ":":
            path = path[1:]
    else:
        path = path_or_uri
    return os.path.normcase(os.path.normpath(path))


def format_number(value: float | None) -> str:
    if value is None:
        return "–"
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value != 0 and (abs(value) >= 1e4 or abs(value) < 1e-3):
        return f"{value:.3e}"
    return f"{value:.4g}"


class LiveStore:
    """The latest summaries, global and per document."""

    def __init__(self) -> None:
        self._global: list[LiveSummary] = []
        self._by_uri: dict[str, list[LiveSummary]] = {}
        self.generation = 0
        """Bumped on every update, so cached per-document matches can tell they are stale."""

    def update(self, uri: str | None, summaries: list[LiveSummary]) -> None:
        if uri is None:
            self._global = summaries
            self._by_uri.clear()
        elif summaries:
            self._by_uri[uri] = summaries
        else:
            self._by_uri.pop(uri, None)
        self.generation += 1

    @property
    def empty(self) -> bool:
        return not self._global and not self._by_uri

    def summaries_for(self, uri: str) -> list[LiveSummary]:
        return self._by_uri.get(uri, []) + self._global


def match_layers(
    document_path: str, layers: list[LayerDefinition], summaries: Iterable[LiveSummary]
) -> dict[int, list[LiveSummary]]:
    """id(layer definition) -> the summaries that belong to it."""
    path = normalize_path(document_path)
    matches: dict[int, list[LiveSummary]] = {}
    by_name: list[LiveSummary] = []
    for summary in summaries:
        same_file = summary.file is not None and summary.file == path
        layer = _layer_at_line(layers, summary.line, summary.name) if same_file and summary.line else None
        if layer is not None:
            matches.setdefault(id(layer), []).append(summary)
        elif summary.file is None or same_file:
            by_name.append(summary)
    for summary in by_name:
        for layer in layers:
            if id(layer) in matches or not layer.path:
                continue
            if _name_matches(summary.name, layer.path):
                matches.setdefault(id(layer), []).append(summary)
                break
    return matches


def _layer_at_line(layers: list[LayerDefinition], line: int, name: str) -> LayerDefinition | None:
    """The innermost layer whose constructor spans ``line``; on a line holding
    several (``nn.Sequential(nn.Linear(2, 2), nn.ReLU())``) the name decides."""
    zero_based = line - 1
    candidates = [layer for layer in layers if layer.call_span.start_line <= zero_based <= layer.call_span.end_line]
    named = [layer for layer in candidates if _name_matches(name, layer.path)]
    best: LayerDefinition | None = None
    for layer in named or candidates:
        if best is None or _narrower(layer, best):
            best = layer
    return best


def _narrower(candidate: LayerDefinition, current: LayerDefinition) -> bool:
    a, b = candidate.call_span, current.call_span
    if a.line_count != b.line_count:
        return a.line_count < b.line_count
    return a.start_col > b.start_col if a.start_line == b.start_line else a.start_line > b.start_line


def _name_matches(name: str, path: str) -> bool:
    if not path:
        return name == ""
    if "*" in path:
        return fnmatch.fnmatchcase(name, path) or fnmatch.fnmatchcase(name, f"*.{path}")
    return name == path or name.endswith("." + path)
