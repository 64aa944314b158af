"""Per-document analysis cache and the conversion of spans to LSP ranges.

Each feature request asks for the analysis of the document's current
version; it is computed once per version (text identity as a fallback when
the client sends no version). When even the tolerant parse fails, the last
good analysis of that document is kept so lenses and hovers do not vanish
while the user is in the middle of typing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from lsprotocol import types
from pygls.workspace import PositionCodec

from .analysis import DocumentAnalysis, Span, analyze
from .diagnostics import Finding, find_problems
from .live import LiveStore, LiveSummary, match_layers

log = logging.getLogger(__name__)


@dataclass
class DocumentState:
    """One analysed version of a document and what is derived from it lazily."""

    uri: str
    path: str
    version: int | None
    source: str
    analysis: DocumentAnalysis
    stale: bool = False
    """True when this is an older version's analysis kept because the text did not parse."""
    _findings: list[Finding] | None = field(default=None, repr=False)
    _live: tuple[int, dict[int, list[LiveSummary]]] | None = field(default=None, repr=False)
    lenses: tuple[int, Any] | None = field(default=None, repr=False)
    """(live store generation, ``lenses.LensSet``) built for this version."""

    @property
    def findings(self) -> list[Finding]:
        if self._findings is None:
            self._findings = [] if self.stale else find_problems(self.analysis)
        return self._findings

    def live_matches(self, store: LiveStore) -> dict[int, list[LiveSummary]]:
        """id(layer) -> live summaries, recomputed when the store changed."""
        if store.empty:
            return {}
        if self._live is None or self._live[0] != store.generation:
            self._live = (
                store.generation,
                match_layers(self.path, self.analysis.layers, store.summaries_for(self.uri)),
            )
        return self._live[1]


class DocumentCache:
    """uri -> latest analysed state."""

    def __init__(self) -> None:
        self._states: dict[str, DocumentState] = {}

    def get(self, uri: str, path: str, version: int | None, source: str) -> DocumentState:
        current = self._states.get(uri)
        if current is not None and current.version == version and current.source == source:
            return current  # ``==`` on the same str object is an identity check: cheap
        try:
            analysis = analyze(source, current.analysis if current is not None else None)
        except Exception:  # an analysis bug must not take the server down: keep what we had
            log.exception("analysis failed for %s", uri)
            analysis = analyze("")
        stale = False
        if analysis.tree is None and current is not None and current.analysis.tree is not None:
            analysis, stale = current.analysis, True
        state = DocumentState(uri, path, version, source, analysis, stale)
        self._states[uri] = state
        return state

    def forget(self, uri: str) -> None:
        self._states.pop(uri, None)


class RangeConverter:
    """Turns server-unit spans into client ranges (UTF-16 by default)."""

    def __init__(self, codec: PositionCodec, lines: list[str]) -> None:
        self.codec = codec
        self.lines = lines

    def position(self, line: int, col: int) -> types.Position:
        if 0 <= line < len(self.lines) and self.lines[line].isascii():
            return types.Position(line=line, character=col)
        return self.codec.position_to_client_units(self.lines, types.Position(line=line, character=col))

    def range(self, span: Span) -> types.Range:
        return types.Range(
            start=self.position(span.start_line, span.start_col), end=self.position(span.end_line, span.end_col)
        )

    def from_client(self, position: types.Position) -> tuple[int, int]:
        if 0 <= position.line < len(self.lines) and self.lines[position.line].isascii():
            return position.line, position.character
        server = self.codec.position_from_client_units(
            self.lines, types.Position(line=position.line, character=position.character)
        )
        return server.line, server.character
