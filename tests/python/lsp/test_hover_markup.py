"""Hovers keep names from the user's file and the running model as text: a hostile ``ModuleDict`` key or
module name must not become a link, a remote image, HTML or emphasis in the hover's Markdown."""

from __future__ import annotations

import re
import textwrap

from hookscope.lsp.analysis import analyze
from hookscope.lsp.hovers import hover_markdown
from hookscope.lsp.live import LiveSummary

HOSTILE = "evil](https://x.example/a.png) ![img](https://x.example/i.png) <img src=x onerror=alert(1)> **b** `c` | d"

SOURCE = textwrap.dedent(f"""
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.heads = nn.ModuleDict({{{HOSTILE!r}: nn.Linear(2, 2)}})
            self.add_module({HOSTILE!r}, nn.Linear(2, 2))
            self.tricky = nn.Linear(2, 2)
""")

MARKUP = set("\\`*_[]()!|<>~&$")
"""What opens a link, an image, emphasis, a code span, HTML, an entity, a table cell or a theme icon."""
PUNCTUATION = {chr(c) for c in range(33, 127) if not chr(c).isalnum()}


def literal_text(markdown: str) -> str:
    """What a CommonMark renderer shows for text made only of backslash escapes and plain characters;
    fails when a markup character stands unescaped (it would be read as Markdown)."""
    out, index = [], 0
    while index < len(markdown):
        char = markdown[index]
        if char == "\\":
            assert markdown[index + 1] in PUNCTUATION, f"stray backslash in {markdown!r}"
            out.append(markdown[index + 1])
            index += 2
            continue
        assert char not in MARKUP, f"unescaped {char!r} in {markdown!r}"
        out.append(char)
        index += 1
    return "".join(out)


def hostile_layers():
    layers = analyze(SOURCE).layers
    return [layer for layer in layers if HOSTILE in layer.display_name or HOSTILE in layer.path]


def test_a_hostile_module_dict_key_and_module_name_stay_text_in_the_hover():
    found = hostile_layers()
    assert found, "the analysis should find the layers named by the hostile key"
    for layer in found:
        value = hover_markdown(layer, [])
        first_line = value.split("\n\n")[0]
        for markup in ("](", "![", "<img", "**b", "`c"):
            assert not re.search(r"(?<!\\)" + re.escape(markup), first_line), (markup, first_line)
        # the name the user reads is the escaped display name between the bold markers
        match = re.match(r"\*\*(.*?)\*\* · ", first_line)
        assert match, first_line
        assert literal_text(match.group(1)) == layer.display_name


def test_a_hostile_live_module_name_and_shape_stay_text_in_the_table():
    layer = next(layer for layer in analyze(SOURCE).layers if layer.path == "tricky")
    summary = LiveSummary(name=HOSTILE, shape=HOSTILE, mean=0.5, std=1.0, nan=0, grad_norm=None, file=None, line=None)
    value = hover_markdown(layer, [summary])
    row = value.splitlines()[-1]
    cells = re.split(r"(?<!\\)\|", row)[1:-1]
    assert len(cells) == 6, f"a | in the name must not add table cells: {row!r}"
    assert literal_text(cells[0].strip()) == HOSTILE
    assert literal_text(cells[1].strip()) == HOSTILE
