"""Incremental analysis: after any edit, re-using the previous version gives the same result as a fresh analysis."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hookscope.lsp.analysis import analyze
from hookscope.lsp.analysis.incremental import reparse_changed
from hookscope.lsp.analysis.source import parse_tolerant
from hookscope.lsp.diagnostics import find_problems

FIXTURES = Path(__file__).parent / "fixtures"
sys.path.insert(0, str(Path(__file__).parents[3] / "bench"))
from lsp_bench import generate  # noqa: E402  (the benchmark's realistic 2,000-line generator)

DOCUMENTS = [
    (FIXTURES / "layers_all_styles.py").read_text(),
    (FIXTURES / "live_model.py").read_text(),
    *(path.read_text() for path in sorted((FIXTURES / "diagnostics").glob("*_bad.py"))),
    generate(150),
    "import torch.nn as nn\n\nclass A(nn.Module):\n    def __init__(self):\n        super().__init__(); self.a = nn.ReLU(); self.b = nn.Linear(1, 1)\n"
    "x = 1; y = nn.Conv2d(1, 1, 1)\nif x:\n    pass\n\n@staticmethod\ndef f():\n    pass\n",
]

SNIPPETS = [
    "x",
    "#",
    "\n",
    ")",
    "(",
    ":",
    "else:\n    pass\n",
    "@dec\n",
    "    ",
    '"""',
    "self.c = nn.ReLU()\n",
    "class B(A):\n    def forward(self, x):\n        return self.a(x)\n",
    "; z = nn.GELU()",
    "\\\n",
    "\t",
    "é",
]


def fingerprint(analysis) -> tuple:
    """Everything the features read, in comparable form."""
    tree = ast.dump(analysis.tree, include_attributes=True) if analysis.tree is not None else None
    calls = [(c.layer, c.attribute_span, c.call_span, c.method) for c in analysis.calls]
    findings = [(f.code, f.span, f.message, f.escalated, f.fix) for f in find_problems(analysis)]
    classes = {name: (c.bases, sorted(c.layers)) for name, c in analysis.classes.items()}
    return tree, analysis.layers, calls, findings, classes, analysis.parsed.lines


def apply(text: str, at: float, removed: int, inserted: str) -> str:
    start = int(at * len(text))
    return text[:start] + inserted + text[start + removed :]


edits = st.lists(
    st.tuples(st.floats(0, 1), st.integers(0, 40), st.sampled_from(SNIPPETS) | st.text(max_size=3)),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=st.sampled_from(DOCUMENTS), edit_chain=edits)
def test_a_chain_of_edits_analyses_like_a_fresh_parse(document: str, edit_chain):
    previous = analyze(document)
    text = document
    for at, removed, inserted in edit_chain:
        text = apply(text, at, removed, inserted)
        incremental, fresh = analyze(text, previous), analyze(text)
        if fresh.parsed.clean:
            assert fingerprint(incremental) == fingerprint(fresh)
        else:  # best effort either way; the incremental one repairs only the edited region, so it
            # can recover where the whole-file recovery gives up (an opened triple quote), never the reverse
            assert incremental.tree is not None or fresh.tree is None
            find_problems(incremental)
        previous = incremental


def test_a_backslash_typed_before_a_decorators_name_joins_the_def_below_it():
    """The chain Hypothesis found: ``@staticmethod`` becomes ``@st\\`` + ``method`` (repaired), then ``@\\`` +
    ``method``, which is ``@method`` on the ``def``; the region must run past ``method`` to the ``def``."""
    document = DOCUMENTS[-1]
    previous, text = analyze(document), document
    for _ in range(2):
        text = apply(text, 0.8671875, 4, "\\\n")
        previous = analyze(text, previous)
    assert text.endswith("\n@\\\nmethod\ndef f():\n    pass\n")
    assert previous.parsed.clean
    assert fingerprint(previous) == fingerprint(analyze(text))


LOGICAL_LINE_EDITS = {
    "a backslash typed at the end of the changed line joins the statement below to it": (
        "x = 1\nmethod\ndef f():\n    pass\n",
        "@\\\nmethod\ndef f():\n    pass\n",
    ),
    "a backslash at the end of the line just above the region": (
        "x = 1; \\\n    y = 2\nz = 3\n",
        "x = 1; \\\n    y = 2\nz = 4\n",
    ),
    "a backslash at the end of the region's last line, an empty line after it": (
        "a = 1\nb = 2; \\\n\nc = 3\n",
        "a = 0\nb = 2; \\\n\nc = 3\n",
    ),
    "a backslash at the end of the region's last line, a comment after it": (
        "a = 1\nb = 2 \\\n# c\nd = 3\n",
        "a = 0\nb = 2 \\\n# c\nd = 3\n",
    ),
    "a backslash at the end of the last statement, then an empty last line": ("x = 1\n", "x = 1\\\n\n"),
    "a backslash at the end of the last line, then CRLF (which parses, unlike LF)": ("x = 1\r\n", "x = 1\\\r\n"),
    "only the final line break changed, after a backslash": ("y = 2\nx = 1\\\n", "y = 2\nx = 1\\\r\n"),
    "a repaired line is no statement: the bracket typed above closes on it, the def below is the decorated one": (
        "y = 0\n@dec(x\nmethod)\ndef f():\n    pass\n",
        "y = 0\n@dec(x,\nmethod)\ndef f():\n    pass\n",
    ),
    "a triple-quoted string opened in the region closes after it": (
        'a = 1\nb = 2\nc = 3  # """\n',
        'a = """\nb = 2\nc = 3  # """\n',
    ),
}


@pytest.mark.parametrize("old, new", LOGICAL_LINE_EDITS.values(), ids=LOGICAL_LINE_EDITS.keys())
def test_the_region_ends_where_a_logical_line_ends(old: str, new: str):
    after = reparse_changed(parse_tolerant(old), new)
    assert after is not None and after.clean
    assert ast.dump(after.tree, include_attributes=True) == ast.dump(ast.parse(new), include_attributes=True)
    assert fingerprint(analyze(new, analyze(old))) == fingerprint(analyze(new))


def test_a_backslash_typed_mid_file_still_reparses_only_around_it():
    document = generate(300)
    before = parse_tolerant(document)
    lines = document.splitlines()
    target = next(i for i, line in enumerate(lines) if "stage_1.conv1.register_forward_hook" in line)
    lines[target] += " \\"  # joins the empty line below; the region runs on to the next statement
    edited = "\n".join(lines) + "\n"
    after = reparse_changed(before, edited)
    assert after is not None and after.clean
    assert ast.dump(after.tree, include_attributes=True) == ast.dump(ast.parse(edited), include_attributes=True)
    reused = sum(new is old for new, old in zip(after.tree.body, before.tree.body))
    assert reused >= len(before.tree.body) - 4


def test_an_unclosed_triple_quote_mid_file_stays_a_local_repair():
    document = generate(300)
    lines = document.splitlines()
    middle = next(i for i in range(len(lines) // 2, len(lines)) if "# main path" in lines[i])
    before = analyze(document)
    lines[middle] = '        s = """'  # the docstrings below pair up with it badly: the file does not parse
    after = analyze("\n".join(lines) + "\n", before)
    assert after.tree is not None and len(after.layers) == len(before.layers)
    assert sum(new is old for new, old in zip(after.tree.body, before.tree.body)) >= len(before.tree.body) - 3


def test_typing_inside_a_statement_reparses_only_around_it():
    document = generate(300)
    before = parse_tolerant(document)
    lines = document.splitlines()
    target = next(i for i, line in enumerate(lines) if "self.head = nn.Linear" in line)
    lines[target] = lines[target].replace("10)", "12)")
    after = reparse_changed(before, "\n".join(lines) + "\n")
    assert after is not None and after.clean
    reused = sum(new is old for new, old in zip(after.tree.body, before.tree.body))
    assert reused >= len(before.tree.body) - 3, "only the edited class and its neighbours are new nodes"
    assert ast.dump(after.tree, include_attributes=True) == ast.dump(
        ast.parse("\n".join(lines)), include_attributes=True
    )


def test_a_syntax_error_typed_mid_file_is_repaired_locally_and_the_other_classes_keep_their_layers():
    document = generate(600)
    lines = document.splitlines()
    middle = next(i for i in range(len(lines) // 2, len(lines)) if "# main path" in lines[i])
    before = analyze(document)
    broken_lines = list(lines)
    broken_lines[middle] = "        if x"  # colon not typed yet
    broken = "\n".join(broken_lines) + "\n"
    after = analyze(broken, before)
    assert after.parsed.repaired_lines[0] == middle and all(
        middle <= line <= middle + 2 for line in after.parsed.repaired_lines
    ), "the header got its colon; the body under it may become `pass`"
    assert len(after.layers) == len(before.layers), "no class lost its layers"
    kept = sum(new is old for new, old in zip(after.tree.body, before.tree.body))
    assert kept >= len(before.tree.body) - 3
    # typing on, the repaired version is re-used: the region covers the repaired line
    broken_lines[middle] = "        if x:"
    fixed = "\n".join(broken_lines) + "\n" + "        pass\n"
    assert reparse_changed(after.parsed, "\n".join(broken_lines) + "\n") is not None
    assert fingerprint(analyze(fixed, after)) == fingerprint(analyze(fixed))


def test_a_region_that_cannot_be_repaired_falls_back_to_the_whole_file():
    document = "import torch.nn as nn\n\nclass A(nn.Module):\n    def __init__(self):\n        self.a = nn.ReLU()\n"
    before = analyze(document)
    broken = document.replace("nn.ReLU()", 'nn.ReLU("""')  # an unterminated string swallows the rest
    after = analyze(broken, before)
    assert after.tree is not None or analyze(broken).tree is None


def test_an_else_or_a_decorator_typed_next_to_a_statement_joins_it_without_a_full_parse():
    document = "x = 1\n\nif x:\n    pass\n\n\ndef f():\n    pass\n\ny = 2\n"
    before = parse_tolerant(document)
    for edited in (
        document.replace(
            "    pass\n\n\ndef", "    pass\nelse:\n    pass\n\ndef"
        ),  # same line count: an else joins the if
        document.replace("\n\ndef f", "\n@dec\ndef f"),  # a decorator joins the def
    ):
        after = reparse_changed(before, edited)
        assert after is not None, edited
        assert ast.dump(after.tree, include_attributes=True) == ast.dump(ast.parse(edited), include_attributes=True)
