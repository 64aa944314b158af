"""Code lenses and hovers over stdio, including live summaries from the extension."""

from __future__ import annotations

import re

import pytest
from lsprotocol import types
from pytest_lsp import LanguageClient

from .helpers import FIXTURES, open_document, wait_until

pytestmark = pytest.mark.asyncio

ALL_STYLES = FIXTURES / "layers_all_styles.py"


def marked_sites(text: str) -> set[tuple[int, str, str]]:
    """(0-based line, 'definition'|'call', layer path) from ``# @def`` / ``# @call`` markers."""
    sites = set()
    for index, line in enumerate(text.splitlines()):
        match = re.search(r"# @(def|call) ?(.*)$", line)
        if match:
            site = "definition" if match.group(1) == "def" else "call"
            for path in match.group(2).split(","):
                sites.add((index, site, path.strip()))
    return sites


def sites_named(argument: dict) -> set[tuple[int, str, str]]:
    """(line, site, layer) of each layer a lens's argument stands for (``layers`` on a line with several)."""
    return {(argument["line"], entry["site"], entry["layer"]) for entry in argument.get("layers", [argument])}


async def lenses_for(client: LanguageClient, uri: str) -> list[types.CodeLens]:
    """The document's lenses, each resolved the way the editor resolves visible ones."""
    result = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    lenses = result or []
    assert all(lens.command is None for lens in lenses), "lenses arrive unresolved (cheap for big files)"
    resolved = [await client.code_lens_resolve_async(lens) for lens in lenses]
    for before, after in zip(lenses, resolved):
        assert after.range == before.range and after.command is not None
    return resolved


async def test_lenses_sit_on_every_definition_style_and_call_site(client: LanguageClient):
    text = ALL_STYLES.read_text()
    uri = open_document(client, ALL_STYLES)
    lenses = await lenses_for(client, uri)

    found = set()
    for lens in lenses:
        argument = lens.command.arguments[0]
        assert argument["uri"] == uri
        assert lens.range.start.line == argument["line"], "a lens sits on the line it names"
        found |= sites_named(argument)
    assert found == marked_sites(text)


async def test_lenses_on_calls_through_local_names_and_on_conditional_definitions(client: LanguageClient):
    path = FIXTURES / "layers_local_names.py"
    uri = open_document(client, path)
    lenses = await lenses_for(client, uri)
    found = set().union(*(sites_named(lens.command.arguments[0]) for lens in lenses))
    assert found == marked_sites(path.read_text())
    # The lens sits over the called expression (b["mix"]), and the conditional is one layer of the first branch's class.
    text_lines = path.read_text().splitlines()
    mix = next(
        lens
        for lens in lenses
        if (lens.range.start.line, "call", "branches.mix") in sites_named(lens.command.arguments[0])
    )
    line = text_lines[mix.range.start.line]
    assert line[mix.range.start.character : mix.range.end.character] == 'b["mix"]'
    assert mix.command.title == "Break on forward"
    assert (
        mix.command.tooltip
        == "Stop in the forward of branches['mix'] or branches['gate'] (a layer breakpoint on this line; which of them,"
        " the editor asks once the program runs)"
    )
    damp = [
        lens
        for lens in lenses
        if lens.command.arguments[0]["layer"] == "damp" and lens.command.arguments[0]["site"] == "definition"
    ]
    assert [lens.command.title for lens in damp] == ["Break on forward", "Break on backward", "Watch"]
    assert damp[0].command.arguments[0]["cls"] == "Damp"


async def test_each_layer_gets_three_lenses_with_the_extension_commands(client: LanguageClient):
    uri = open_document(client, ALL_STYLES)
    lenses = await lenses_for(client, uri)
    stem = [
        lens
        for lens in lenses
        if lens.command.arguments[0]["layer"] == "stem" and lens.command.arguments[0]["site"] == "definition"
    ]
    assert [lens.command.title for lens in stem] == ["Break on forward", "Break on backward", "Watch"]
    forward, backward, watch = (lens.command for lens in stem)
    line = stem[0].range.start.line
    assert forward.command == backward.command == "hookscope.toggleLayerBreakpoint"
    assert forward.arguments[0]["phase"] == "forward" and backward.arguments[0]["phase"] == "backward"
    assert watch.command == "hookscope.watchLayer" and "phase" not in watch.arguments[0]
    assert forward.arguments[0]["line"] == line and forward.arguments[0]["cls"] == "Conv2d"
    assert forward.arguments[0]["owner"] == "Net"
    # a call site names the line of its definition too
    call = next(
        lens
        for lens in lenses
        if lens.command.arguments[0]["site"] == "call" and lens.command.arguments[0]["layer"] == "stem"
    )
    assert call.command.arguments[0]["definitionLine"] == line
    assert call.range.start.line > line


async def test_resolving_a_lens_of_an_older_version_does_not_guess(client: LanguageClient):
    path = FIXTURES / "live_model.py"
    uri = open_document(client, path)
    old = await client.text_document_code_lens_async(
        types.CodeLensParams(text_document=types.TextDocumentIdentifier(uri=uri))
    )
    assert old
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text="\n" + path.read_text())],
        )
    )
    stale = await client.code_lens_resolve_async(old[0])
    assert stale.command is not None and stale.command.command == ""
    fresh = await lenses_for(client, uri)
    assert fresh[0].range.start.line == old[0].range.start.line + 1


async def test_a_line_with_several_layers_gets_one_set_of_lenses_naming_them_all(client: LanguageClient):
    """A breakpoint is the line's: one set of lenses per line (a set per layer ran past the editor's
    width, each labelled with one layer while its click toggled the whole line's breakpoint)."""
    uri = open_document(client, ALL_STYLES)
    lenses = await lenses_for(client, uri)
    by_line: dict[int, list[types.CodeLens]] = {}
    for lens in lenses:
        by_line.setdefault(lens.range.start.line, []).append(lens)
    blocks = next(
        line
        for line in by_line.values()
        if sites_named(line[0].command.arguments[0])
        >= {(line[0].range.start.line, "definition", "blocks"), (line[0].range.start.line, "definition", "blocks.0")}
    )
    assert [lens.command.title for lens in blocks] == ["Break on forward", "Break on backward", "Watch…"]
    forward = blocks[0].command
    assert forward.tooltip.startswith("Stop in the forward of blocks, blocks[0]")
    assert forward.tooltip.endswith(
        "(a layer breakpoint on this line; which of them, the editor asks once the program runs)"
    )
    assert blocks[2].command.tooltip.startswith("Show blocks, blocks[0]")
    assert all(len(line) == 3 for line in by_line.values()), "one set per line: forward, backward, watch"

    # live summaries of two of the line's layers: one lens, each layer's in its tooltip
    refreshes = client.lens_refreshes  # type: ignore[attr-defined]
    client.protocol.notify(
        "hookscope/liveSummaries",
        {"uri": uri, "layers": {"blocks.0": {"shape": [1, 32, 8, 8]}, "blocks.1": {"shape": [1, 32, 4, 4], "nan": 2}}},
    )
    await wait_until(lambda: client.lens_refreshes > refreshes, "workspace/codeLens/refresh")  # type: ignore[attr-defined]
    line = blocks[0].range.start.line
    live = [lens for lens in await lenses_for(client, uri) if lens.range.start.line == line][3:]
    assert [lens.command.title for lens in live] == ["out [1, 32, 8, 8] (+1 more) · 2 NaN"]
    assert live[0].command.tooltip == "blocks[0]: out [1, 32, 8, 8]; blocks[1]: out [1, 32, 4, 4] · 2 NaN"


def live_payload(path, line_conv1: int, nan: int = 0) -> dict:
    return {
        "layers": {
            "conv1": {
                "shape": [8, 8, 32, 32],
                "mean": 0.25,
                "std": 1.5,
                "nan": nan,
                "gradNorm": 0.0123,
                "file": str(path),
                "line": line_conv1,
            },
            "fc": {"shape": [8, 2], "mean": -0.1, "std": 0.5, "nan": 0, "gradNorm": None},
        }
    }


async def test_live_summaries_change_lens_titles_and_hovers(client: LanguageClient):
    path = FIXTURES / "live_model.py"
    text = path.read_text()
    uri = open_document(client, path)
    conv_line = next(i for i, line in enumerate(text.splitlines()) if "self.conv1 = " in line)
    before = await lenses_for(client, uri)
    assert not any(lens.command.title.startswith("out ") for lens in before)

    refreshes = client.lens_refreshes  # type: ignore[attr-defined]
    client.protocol.notify("hookscope/liveSummaries", live_payload(path, conv_line + 1, nan=3))
    await wait_until(lambda: client.lens_refreshes > refreshes, "workspace/codeLens/refresh")  # type: ignore[attr-defined]

    lenses = await lenses_for(client, uri)
    conv_titles = [lens.command.title for lens in lenses if lens.range.start.line == conv_line]
    assert "out [8, 8, 32, 32] · 3 NaN" in conv_titles
    # matched by name (no file given): the definition and the call site of fc
    fc_titles = {
        lens.range.start.line: lens.command.title
        for lens in lenses
        if lens.command.arguments[0]["layer"] == "fc" and lens.command.title.startswith("out ")
    }
    assert set(fc_titles.values()) == {"out [8, 2]"} and len(fc_titles) == 2

    call_line = next(i for i, line in enumerate(text.splitlines()) if "self.conv1(x)" in line)
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=call_line, character=text.splitlines()[call_line].index("conv1") + 2),
        )
    )
    assert hover is not None
    value = hover.contents.value  # type: ignore[union-attr]
    assert (
        "· Conv2d (torch.nn)" in value
        and "\\[8\\, 8\\, 32\\, 32\\]" in value
        and "| 3 |" in value
        and "0.0123" in value
    )

    # an empty payload clears: titles go back
    client.protocol.notify("hookscope/liveSummaries", {"layers": {}})
    await wait_until(lambda: client.lens_refreshes > refreshes + 1, "a second refresh")  # type: ignore[attr-defined]
    after = await lenses_for(client, uri)
    assert not any(lens.command.title.startswith("out ") for lens in after)


async def test_live_summary_names_with_dots_reach_the_right_entry(client: LanguageClient):
    uri = open_document(client, ALL_STYLES)
    refreshes = client.lens_refreshes  # type: ignore[attr-defined]
    client.protocol.notify(
        "hookscope/liveSummaries",
        {"uri": uri, "layers": {"features.0": {"shape": [1, 32, 8, 8]}, "heads.cls": {"shape": [1, 10]}}},
    )
    await wait_until(lambda: client.lens_refreshes > refreshes, "workspace/codeLens/refresh")  # type: ignore[attr-defined]
    lenses = await lenses_for(client, uri)
    live = {
        lens.command.arguments[0]["layer"]: lens.command.title
        for lens in lenses
        if lens.command.title.startswith("out ")
    }
    assert live == {"features.0": "out [1, 32, 8, 8]", "heads.cls": "out [1, 10]"}


async def test_hover_on_definition_shows_class_and_arguments(client: LanguageClient):
    text = ALL_STYLES.read_text()
    uri = open_document(client, ALL_STYLES)
    line = next(i for i, text_line in enumerate(text.splitlines()) if "self.stem = " in text_line)
    column = text.splitlines()[line].index("stem")
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=line, character=column + 1),
        )
    )
    assert hover is not None
    value = hover.contents.value  # type: ignore[union-attr]
    assert "**stem** · Conv2d (torch.nn) in Net" in value
    assert "torch.nn.Conv2d(3, 16, kernel_size=3, padding=1)" in value
    assert hover.range.start == types.Position(line=line, character=column)

    block_line = next(i for i, text_line in enumerate(text.splitlines()) if "self.block = " in text_line)
    hover = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=types.Position(line=block_line, character=text.splitlines()[block_line].index("block") + 1),
        )
    )
    assert hover is not None and "· ConvBlock (defined in this file)" in hover.contents.value  # type: ignore[union-attr]

    nothing = await client.text_document_hover_async(
        types.HoverParams(
            text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=1)
        )
    )
    assert nothing is None
