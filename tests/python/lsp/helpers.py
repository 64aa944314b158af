"""Helpers for the language-server tests: open fixtures, wait with deadlines, apply edits."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

FIXTURES = Path(__file__).parent / "fixtures"
DEADLINE_S = 30.0
"""Generous: the machine may be loaded by other test runs."""


async def wait_until(condition: Callable[[], bool], what: str, deadline_s: float = DEADLINE_S) -> None:
    """Poll ``condition`` until it holds, failing with ``what`` after the deadline."""
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def open_document(client: LanguageClient, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.resolve().as_uri()
    client.diagnostics.pop(uri, None)
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(
                uri=uri, language_id="python", version=version, text=path.read_text() if text is None else text
            )
        )
    )
    return uri


async def open_and_diagnose(
    client: LanguageClient, path: Path, text: str | None = None
) -> tuple[str, list[types.Diagnostic]]:
    uri = open_document(client, path, text)
    await wait_until(lambda: uri in client.diagnostics, f"diagnostics for {path.name}")
    return uri, list(client.diagnostics[uri])


def expected_markers(text: str) -> set[tuple[int, str, str]]:
    """``# expect: HS001 warning`` markers as (0-based line, code, severity)."""
    found = set()
    for index, line in enumerate(text.splitlines()):
        match = re.search(r"# expect: (HS\d{3}) (\w+)", line)
        if match:
            found.add((index, match.group(1), match.group(2)))
    return found


SEVERITY_NAMES = {
    types.DiagnosticSeverity.Error: "error",
    types.DiagnosticSeverity.Warning: "warning",
    types.DiagnosticSeverity.Information: "information",
    types.DiagnosticSeverity.Hint: "hint",
}


def observed(diagnostics: list[types.Diagnostic]) -> set[tuple[int, str, str]]:
    return {(d.range.start.line, str(d.code), SEVERITY_NAMES[d.severity]) for d in diagnostics}  # type: ignore[index]


def offset_of(text: str, position: types.Position) -> int:
    """UTF-16 LSP position -> index in ``text`` (fixtures are ASCII, so columns are characters)."""
    lines = text.splitlines(keepends=True)
    return sum(len(line) for line in lines[: position.line]) + position.character


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    """Apply non-overlapping edits the way an editor does (all against the original text)."""
    ordered = sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True)
    for edit in ordered:
        start, end = offset_of(text, edit.range.start), offset_of(text, edit.range.end)
        text = text[:start] + edit.new_text + text[end:]
    return text


def change_document(
    client: LanguageClient, uri: str, version: int, changes: list[types.TextDocumentContentChangeEvent]
) -> None:
    client.diagnostics.pop(uri, None)
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version), content_changes=changes
        )
    )
