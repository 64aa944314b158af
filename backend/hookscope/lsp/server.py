"""The Hookscope language server (pygls): lenses, diagnostics, quick fixes, hovers.

Run as ``python -m hookscope.lsp`` (stdio). It reads source with ``ast`` and
never imports torch. Feature handlers are thin: the work is in
``analysis/``, ``diagnostics/``, ``lenses.py``, ``hovers.py`` and ``live.py``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import attrs
from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import JsonRPCProtocol, LanguageServerProtocol
from pygls.uris import from_fs_path, to_fs_path

from .. import __version__
from .config import DiagnosticSettings
from .diagnostics import RULES, Finding, Severity
from .documents import DocumentCache, DocumentState, RangeConverter
from .gc_pause import collection_paused
from .hovers import build_hover
from .lenses import LensSet, build_lens_set
from .live import LiveStore, parse_payload

log = logging.getLogger(__name__)

LIVE_SUMMARIES = "hookscope/liveSummaries"
SOURCE = "hookscope"
DIAGNOSTICS_DELAY_S = 0.15
"""Wait this long after the last edit before re-checking (typing stays smooth)."""
LARGE_DOCUMENT_CHARS = 200_000
"""A document this long (about 5,000 lines) is analysed on a worker thread, not on the server's loop:
a 50,000-line file takes over a second to analyse, and other documents' requests must not wait."""

T = TypeVar("T")

LSP_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFORMATION: types.DiagnosticSeverity.Information,
    Severity.HINT: types.DiagnosticSeverity.Hint,
}


@attrs.define
class RawNotification:
    """A notification whose params stay a plain dict.

    pygls turns unknown notifications' params into namedtuples, which renames
    keys that are not identifiers (``features.0``): layer names must survive.
    """

    method: str
    jsonrpc: str
    params: Any = None


@attrs.define
class PlainResult:
    """A response already in LSP JSON form, sent without the cattrs conversion."""

    value: Any


class HookscopeProtocol(LanguageServerProtocol):
    # pygls declares the base method through functools.lru_cache, a wrapper type no plain method matches
    def get_message_type(self, method: str) -> type[Any] | None:  # type: ignore[override]
        if method == LIVE_SUMMARIES:
            return RawNotification
        return super().get_message_type(method)

    def _send_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        if error is None and isinstance(result, PlainResult):
            self._result_types.pop(msg_id, None)
            self._send_data({"jsonrpc": JsonRPCProtocol.VERSION, "id": msg_id, "result": result.value})
            return
        super()._send_response(msg_id, result, error)


class HookscopeLanguageServer(LanguageServer):
    """Server state: document cache, diagnostic settings, live summaries."""

    def __init__(self) -> None:
        super().__init__("hookscope", __version__, protocol_cls=HookscopeProtocol)
        self.documents = DocumentCache()
        self.settings = DiagnosticSettings()
        self.live = LiveStore()
        self.docs_url: str | None = default_docs_url()
        self.diagnostics_delay_s = DIAGNOSTICS_DELAY_S
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._publishing: set[asyncio.Task[None]] = set()
        self._document_keys: dict[str, int] = {}
        self._document_uris: dict[int, str] = {}
        self._keys_lock = threading.Lock()  # lens sets of large documents are built on the worker
        # One worker: large documents' work runs in order, so a version is analysed once.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hookscope-lsp-analysis")

    # -- documents ---------------------------------------------------------------

    def state(self, uri: str) -> DocumentState:
        document = self.workspace.get_text_document(uri)
        with collection_paused():
            return self.documents.get(uri, document.path, document.version, document.source)

    async def off_loop_if_large(self, uri: str, work: Callable[..., T], *args: Any) -> T:
        """Run ``work`` for document ``uri`` on the worker when the document is large, inline otherwise.

        The analysis is pure Python, so it still shares the interpreter; but the loop gets it back
        every few milliseconds and answers the other documents meanwhile.
        """
        document = self.workspace.get_text_document(uri)
        if len(document.source) < LARGE_DOCUMENT_CHARS:
            return work(*args)
        return await asyncio.get_running_loop().run_in_executor(self._worker, work, *args)

    async def state_async(self, uri: str) -> DocumentState:
        return await self.off_loop_if_large(uri, self.state, uri)

    def converter(self, state: DocumentState) -> RangeConverter:
        return RangeConverter(self.workspace.position_codec, state.analysis.positions.lines)

    def document_key(self, uri: str) -> int:
        """A small number standing for ``uri`` in code lens ``data``."""
        with self._keys_lock:
            if uri not in self._document_keys:
                key = len(self._document_keys) + 1
                self._document_keys[uri] = key
                self._document_uris[key] = uri
            return self._document_keys[uri]

    def lens_set(self, uri: str) -> tuple[DocumentState, LensSet]:
        state = self.state(uri)
        if state.lenses is None or state.lenses[0] != self.live.generation:
            with collection_paused():
                lens_set = build_lens_set(
                    state, self.converter(state), state.live_matches(self.live), self.document_key(uri)
                )
            state.lenses = (self.live.generation, lens_set)
        return state, state.lenses[1]

    async def lens_set_async(self, uri: str) -> tuple[DocumentState, LensSet]:
        return await self.off_loop_if_large(uri, self.lens_set, uri)

    # -- diagnostics -------------------------------------------------------------

    def schedule_diagnostics(self, uri: str, delay_s: float) -> None:
        pending = self._pending.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self._pending[uri] = asyncio.get_running_loop().call_later(max(delay_s, 0), self._start_publishing, uri)

    def _start_publishing(self, uri: str) -> None:
        task = asyncio.get_running_loop().create_task(self.publish_diagnostics(uri))
        self._publishing.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._publishing.discard)

    async def publish_diagnostics(self, uri: str) -> None:
        """Analyse the current version (the cache then serves lenses and hovers) and publish."""
        self._pending.pop(uri, None)
        try:
            version, diagnostics = await self.off_loop_if_large(uri, self.diagnostics_of, uri)
            if uri not in self.workspace.text_documents:  # closed while it was analysed
                self.documents.forget(uri)
                return
            self.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=diagnostics)
            )
        except Exception:  # never let one document take the server down
            log.exception("diagnostics failed for %s", uri)

    def diagnostics_of(self, uri: str) -> tuple[int | None, list[types.Diagnostic]]:
        """The analysed version and its diagnostics."""
        with collection_paused():
            state = self.state(uri)
            return state.version, [] if state.stale else self.to_diagnostics(state)

    def to_diagnostics(self, state: DocumentState) -> list[types.Diagnostic]:
        converter = self.converter(state)
        diagnostics = []
        for finding in state.findings:
            severity = self.severity_of(finding)
            if severity is None:
                continue
            rule = RULES[finding.code]
            diagnostics.append(
                types.Diagnostic(
                    range=converter.range(finding.span),
                    message=finding.message,
                    severity=LSP_SEVERITY[severity],
                    code=finding.code,
                    code_description=types.CodeDescription(href=f"{self.docs_url}#{rule.anchor}")
                    if self.docs_url
                    else None,
                    source=SOURCE,
                    tags=[types.DiagnosticTag.Deprecated] if finding.deprecated else None,
                    data={"rule": rule.name, "fixable": finding.fix is not None},
                )
            )
        return diagnostics

    def severity_of(self, finding: Finding) -> Severity | None:
        severity = self.settings.severity(finding.code)
        if severity is not None and finding.escalated:
            severity = severity.raised()
        return severity

    def apply_settings(self, raw: Any) -> None:
        self.settings = DiagnosticSettings.from_settings(raw)
        for problem in self.settings.problems:
            self.window_log_message(
                types.LogMessageParams(type=types.MessageType.Warning, message=f"hookscope.diagnostics: {problem}")
            )

    # -- live summaries ---------------------------------------------------------------

    def refresh_lenses(self) -> None:
        capabilities = self.client_capabilities.workspace
        code_lens = capabilities.code_lens if capabilities else None
        if code_lens is not None and code_lens.refresh_support:
            self.workspace_code_lens_refresh(None)


def default_docs_url() -> str | None:
    """``docs/diagnostics.md`` of a source checkout, when there is one next to the package."""
    candidate = Path(__file__).resolve().parents[3] / "docs" / "diagnostics.md"
    return from_fs_path(str(candidate)) if candidate.is_file() else None


server = HookscopeLanguageServer()


@server.feature(types.INITIALIZE)
def on_initialize(ls: HookscopeLanguageServer, params: types.InitializeParams) -> None:
    options = params.initialization_options
    if isinstance(options, dict):
        ls.apply_settings(options)
        docs = options.get("diagnosticsDocUrl")
        if isinstance(docs, str) and docs:
            ls.docs_url = docs
        delay = options.get("diagnosticsDelayMs")
        if isinstance(delay, (int, float)) and not isinstance(delay, bool) and 0 <= delay <= 10_000:
            ls.diagnostics_delay_s = delay / 1000


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def on_open(ls: HookscopeLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.schedule_diagnostics(params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def on_change(ls: HookscopeLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.schedule_diagnostics(params.text_document.uri, ls.diagnostics_delay_s)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def on_save(ls: HookscopeLanguageServer, params: types.DidSaveTextDocumentParams) -> None:
    ls.schedule_diagnostics(params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def on_close(ls: HookscopeLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    pending = ls._pending.pop(uri, None)
    if pending is not None:
        pending.cancel()
    ls.documents.forget(uri)
    ls.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


@server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
def on_configuration(ls: HookscopeLanguageServer, params: types.DidChangeConfigurationParams) -> None:
    ls.apply_settings(params.settings)
    for uri in list(ls.workspace.text_documents):
        ls.schedule_diagnostics(uri, 0)


@server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=True))
async def on_code_lens(ls: HookscopeLanguageServer, params: types.CodeLensParams) -> PlainResult:
    _, lens_set = await ls.lens_set_async(params.text_document.uri)
    return PlainResult(lens_set.unresolved)


@server.feature(types.CODE_LENS_RESOLVE)
async def on_code_lens_resolve(ls: HookscopeLanguageServer, lens: types.CodeLens) -> PlainResult:
    """Fill in the command of a lens from the current lens set of its document."""
    data = lens.data
    unresolved = {"range": ls.protocol._converter.unstructure(lens.range), "data": data}
    if not (isinstance(data, list) and len(data) == 3 and all(isinstance(d, int) or d is None for d in data)):
        return PlainResult(unresolved)
    key, version, index = data
    uri = ls._document_uris.get(key)  # type: ignore[arg-type]
    if uri is None or uri not in ls.workspace.text_documents:
        return PlainResult(unresolved)
    state, lens_set = await ls.lens_set_async(uri)
    if state.version != version or not 0 <= index < len(lens_set.resolved):  # type: ignore[operator]
        # The document changed since; the editor asks for fresh lenses anyway.
        return PlainResult({**unresolved, "command": {"title": "…", "command": ""}})
    return PlainResult(lens_set.resolved[index])


@server.feature(types.TEXT_DOCUMENT_HOVER)
async def on_hover(ls: HookscopeLanguageServer, params: types.HoverParams) -> types.Hover | None:
    state = await ls.state_async(params.text_document.uri)
    return build_hover(state, ls.converter(state), params.position, state.live_matches(ls.live))


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
)
async def on_code_action(ls: HookscopeLanguageServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    uri = params.text_document.uri
    state = await ls.state_async(uri)
    if state.stale:
        return []
    converter = ls.converter(state)
    first, _ = converter.from_client(params.range.start)
    last, _ = converter.from_client(params.range.end)
    context = {
        (d.code, d.range.start.line, d.range.start.character): d
        for d in params.context.diagnostics
        if d.source == SOURCE
    }
    actions = []
    for finding in state.findings:
        if finding.fix is None or ls.severity_of(finding) is None or not finding.span.overlaps_lines(first, last):
            continue
        lsp_range = converter.range(finding.span)
        matching = context.get((finding.code, lsp_range.start.line, lsp_range.start.character))
        edits = [types.TextEdit(range=converter.range(e.span), new_text=e.new_text) for e in finding.fix.edits]
        actions.append(
            types.CodeAction(
                title=f"{finding.fix.title} ({finding.code})",
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[matching] if matching else None,
                is_preferred=finding.fix.preferred,
                edit=types.WorkspaceEdit(changes={uri: edits}),
            )
        )
    return actions


@server.feature(LIVE_SUMMARIES)
def on_live_summaries(ls: HookscopeLanguageServer, params: Any) -> None:
    uri, summaries = parse_payload(params)
    ls.live.update(uri, summaries)
    ls.refresh_lenses()


LOG_FORMAT = "hookscope.lsp %(levelname)s %(name)s: %(message)s"
"""How each record reaches stderr; the extension reads the level from it (extension/src/lsp/serverLog.ts)."""


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    server.start_io()


__all__ = ["HookscopeLanguageServer", "main", "server", "to_fs_path"]
