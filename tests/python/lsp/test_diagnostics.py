"""Diagnostics and quick fixes over stdio: each rule fires on bad code, not on
the corrected code, and each quick fix turns the bad file into the corrected one."""

from __future__ import annotations

from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from .helpers import FIXTURES, apply_edits, expected_markers, observed, open_and_diagnose, wait_until

pytestmark = pytest.mark.asyncio

DIAGNOSTICS = FIXTURES / "diagnostics"
BAD = sorted(DIAGNOSTICS.glob("*_bad.py"))
CORRECTED = sorted(DIAGNOSTICS.glob("*_good.py")) + sorted(DIAGNOSTICS.glob("*_fixed.py"))
FIXABLE = sorted(DIAGNOSTICS.glob("*_fixed.py"))


async def test_every_code_has_bad_and_corrected_fixtures():
    from hookscope.lsp.diagnostics import RULES

    for code in RULES:
        assert any(p.name.startswith(code) for p in BAD), code
        assert any(p.name.startswith(code) for p in CORRECTED), code


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
async def test_diagnostics_fire_exactly_where_marked(client: LanguageClient, path: Path):
    _, diagnostics = await open_and_diagnose(client, path)
    assert observed(diagnostics) == expected_markers(path.read_text())
    for diagnostic in diagnostics:
        assert diagnostic.source == "hookscope"
        assert len(diagnostic.message) > 60, "the message says why"
        assert diagnostic.code_description is not None
        assert diagnostic.code_description.href.endswith(f"#{str(diagnostic.code).lower()}")


@pytest.mark.parametrize("path", CORRECTED, ids=lambda p: p.stem)
async def test_no_diagnostics_on_corrected_code(client: LanguageClient, path: Path):
    _, diagnostics = await open_and_diagnose(client, path)
    assert diagnostics == []


async def quick_fix_edits(
    client: LanguageClient, uri: str, diagnostics: list[types.Diagnostic]
) -> list[types.TextEdit]:
    edits: list[types.TextEdit] = []
    for diagnostic in diagnostics:
        actions = await client.text_document_code_action_async(
            types.CodeActionParams(
                text_document=types.TextDocumentIdentifier(uri=uri),
                range=diagnostic.range,
                context=types.CodeActionContext(diagnostics=[diagnostic], only=[types.CodeActionKind.QuickFix]),
            )
        )
        mine = [
            a
            for a in actions or []
            if isinstance(a, types.CodeAction)
            and a.diagnostics
            and (a.diagnostics[0].code, a.diagnostics[0].range) == (diagnostic.code, diagnostic.range)
        ]
        assert len(mine) == 1, f"one quick fix for {diagnostic.code} at line {diagnostic.range.start.line + 1}"
        assert mine[0].kind == types.CodeActionKind.QuickFix
        edits.extend(mine[0].edit.changes[uri])  # type: ignore[union-attr,index]
    return edits


@pytest.mark.parametrize("fixed", FIXABLE, ids=lambda p: p.stem)
async def test_quick_fixes_produce_the_corrected_code(client: LanguageClient, fixed: Path):
    bad = fixed.with_name(fixed.name.replace("_fixed", "_bad"))
    uri, diagnostics = await open_and_diagnose(client, bad)
    assert diagnostics
    edits = await quick_fix_edits(client, uri, diagnostics)
    assert apply_edits(bad.read_text(), edits) == fixed.read_text()


async def test_unfixable_findings_offer_no_quick_fix(client: LanguageClient):
    for name in ("HS001_bad.py", "HS004_inplace_bad.py"):
        uri, diagnostics = await open_and_diagnose(client, DIAGNOSTICS / name)
        for diagnostic in diagnostics:
            actions = await client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri=uri),
                    range=diagnostic.range,
                    context=types.CodeActionContext(diagnostics=[diagnostic]),
                )
            )
            assert not actions, f"{name}: {diagnostic.message}"


async def test_storing_the_input_tuple_is_reported_without_a_fix(client: LanguageClient):
    text = (
        "import torch.nn as nn\nseen = []\n\n\ndef hook(module, inputs, output):\n"
        "    seen.append(inputs)\n\n\nh = nn.Linear(2, 2).register_forward_hook(hook)\n"
    )
    uri, diagnostics = await open_and_diagnose(client, DIAGNOSTICS / "inline_input_tuple.py", text)
    assert [(d.code, d.range.start.line) for d in diagnostics] == [("HS003", 5)]
    assert "tuple(t.detach() for t in inputs)" in diagnostics[0].message
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=diagnostics[0].range,
            context=types.CodeActionContext(diagnostics=diagnostics),
        )
    )
    assert not actions


async def test_deprecated_hook_is_tagged(client: LanguageClient):
    _, diagnostics = await open_and_diagnose(client, DIAGNOSTICS / "HS002_bad.py")
    assert list(diagnostics[0].tags or []) == [types.DiagnosticTag.Deprecated]


async def test_severities_and_switches_from_initialization_options(configured_client: LanguageClient):
    _, diagnostics = await open_and_diagnose(configured_client, DIAGNOSTICS / "HS001_bad.py")
    # HS001 configured as error: the plain ones are errors, the escalated ones stay errors.
    assert {d.severity for d in diagnostics} == {types.DiagnosticSeverity.Error}
    _, diagnostics = await open_and_diagnose(configured_client, DIAGNOSTICS / "HS004_inplace_bad.py")
    assert diagnostics == []


async def test_did_change_configuration_republishes(client: LanguageClient):
    uri, diagnostics = await open_and_diagnose(client, DIAGNOSTICS / "HS006_bad.py")
    assert {d.severity for d in diagnostics} == {types.DiagnosticSeverity.Information}

    client.diagnostics.pop(uri)
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"hookscope": {"diagnostics": {"HS006": "warning"}}})
    )
    await wait_until(lambda: uri in client.diagnostics, "diagnostics after a configuration change")
    assert {d.severity for d in client.diagnostics[uri]} == {types.DiagnosticSeverity.Warning}

    client.diagnostics.pop(uri)
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"hookscope": {"diagnostics": {"HS006": "off", "HS999": "error"}}})
    )
    await wait_until(lambda: uri in client.diagnostics, "diagnostics after turning HS006 off")
    assert list(client.diagnostics[uri]) == []
    await wait_until(lambda: any("HS999" in m.message for m in client.log_messages), "a complaint about HS999")
