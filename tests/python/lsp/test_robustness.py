"""Syntax errors, incremental edits, and the promise never to import torch."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

from .conftest import initialize_params, track_lens_refreshes
from .helpers import FIXTURES, change_document, open_and_diagnose, open_document, wait_until
from .test_lenses import lenses_for

pytestmark = pytest.mark.asyncio

MODULES_REPORT = Path(os.environ.get("TMPDIR", "/tmp")) / f"hookscope-lsp-modules-{os.getpid()}.json"


async def test_file_with_syntax_errors_still_gets_lenses(client: LanguageClient):
    path = FIXTURES / "syntax_error.py"
    text = path.read_text()
    uri, diagnostics = await open_and_diagnose(client, path)
    assert diagnostics == []
    lenses = await lenses_for(client, uri)
    layers = {lens.command.arguments[0]["layer"] for lens in lenses}
    # the lines around the broken ones still parse
    assert "conv1" in layers
    conv_line = next(i for i, line in enumerate(text.splitlines()) if "self.conv1 = " in line)
    assert any(lens.range.start.line == conv_line for lens in lenses)


async def test_server_survives_garbage_and_keeps_last_good_analysis(client: LanguageClient):
    path = FIXTURES / "live_model.py"
    text = path.read_text()
    uri = open_document(client, path)
    good = await lenses_for(client, uri)
    assert good

    garbage = ")]} def class ((( \x00 '''\n" * 3
    change_document(client, uri, 2, [types.TextDocumentContentChangeWholeDocument(text=garbage)])
    lenses = await lenses_for(client, uri)
    assert [lens.range.start.line for lens in lenses] == [lens.range.start.line for lens in good], (
        "last good analysis kept"
    )
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=0)
        )
    )
    assert hover is None

    change_document(client, uri, 3, [types.TextDocumentContentChangeWholeDocument(text=text)])
    assert len(await lenses_for(client, uri)) == len(good)


async def test_incremental_edits_move_lenses_and_diagnostics(client: LanguageClient):
    path = FIXTURES / "diagnostics" / "HS002_bad.py"
    uri, diagnostics = await open_and_diagnose(client, path)
    assert [(d.code, d.range.start.line) for d in diagnostics] == [("HS002", 9)]

    # insert two lines at the top, then fix the call by an incremental replace
    change_document(
        client,
        uri,
        2,
        [
            types.TextDocumentContentChangePartial(
                range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
                text="# one\n# two\n",
            )
        ],
    )
    await wait_until(lambda: uri in client.diagnostics, "diagnostics after the first edit")
    assert [(d.code, d.range.start.line) for d in client.diagnostics[uri]] == [("HS002", 11)]
    lenses = await lenses_for(client, uri)
    assert {lens.range.start.line for lens in lenses} == {4}  # model = nn.Linear(4, 2), moved down by two

    line = path.read_text().splitlines()[9]
    start = line.index("register_backward_hook")
    change_document(
        client,
        uri,
        3,
        [
            types.TextDocumentContentChangePartial(
                range=types.Range(
                    start=types.Position(line=11, character=start),
                    end=types.Position(line=11, character=start + len("register_backward_hook")),
                ),
                text="register_full_backward_hook",
            )
        ],
    )
    await wait_until(lambda: uri in client.diagnostics, "diagnostics after the second edit")
    assert list(client.diagnostics[uri]) == []


async def test_many_quick_edits_publish_for_the_latest_version(client: LanguageClient):
    path = FIXTURES / "diagnostics" / "HS001_bad.py"
    uri, first = await open_and_diagnose(client, path)
    assert first
    text = path.read_text()
    for version in range(2, 30):
        change_document(client, uri, version, [types.TextDocumentContentChangeWholeDocument(text=text + "#" * version)])
    fixed = (FIXTURES / "diagnostics" / "HS001_good.py").read_text()
    change_document(client, uri, 30, [types.TextDocumentContentChangeWholeDocument(text=fixed)])
    await wait_until(lambda: uri in client.diagnostics, "diagnostics for the last version")
    assert list(client.diagnostics[uri]) == []


@pytest_lsp.fixture(
    config=ClientServerConfig(
        server_command=[sys.executable, str(Path(__file__).with_name("serve_and_report_modules.py"))],
        server_env={**os.environ, "HOOKSCOPE_TEST_MODULES_OUT": str(MODULES_REPORT)},
    )
)
async def reporting_client(lsp_client: LanguageClient):
    MODULES_REPORT.unlink(missing_ok=True)
    track_lens_refreshes(lsp_client)
    await lsp_client.initialize_session(initialize_params())
    yield


async def test_serving_requests_never_imports_torch(reporting_client: LanguageClient):
    client = reporting_client
    for path in [FIXTURES / "layers_all_styles.py", *sorted((FIXTURES / "diagnostics").glob("*.py"))]:
        uri, _ = await open_and_diagnose(client, path)
        await lenses_for(client, uri)
        await client.text_document_hover_async(
            types.HoverParams(
                text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=5, character=10)
            )
        )
    client.protocol.notify("hookscope/liveSummaries", {"layers": {"conv1": {"shape": [1, 2]}}})
    await client.shutdown_session()
    await wait_until(MODULES_REPORT.exists, "the module report at server exit")
    report = json.loads(MODULES_REPORT.read_text())
    MODULES_REPORT.unlink()
    assert report == {"torch": False, "hookscope.lsp.server": True}
