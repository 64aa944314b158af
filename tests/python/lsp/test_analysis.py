"""Unit tests of the pure analysis (no server): names, recovery, positions, live matching, settings."""

from __future__ import annotations

import textwrap

from hookscope.lsp.analysis import analyze
from hookscope.lsp.config import DiagnosticSettings
from hookscope.lsp.diagnostics import Severity, find_problems
from hookscope.lsp.live import LiveSummary, match_layers, parse_payload


def layers(source: str) -> list[tuple[int, str, str]]:
    return [(d.line, d.path, d.cls) for d in analyze(textwrap.dedent(source)).layers]


def test_names_that_are_not_torch_nn_are_not_layers():
    source = """
        import mylib.nn as nn
        from torch.nn import functional as F
        from torch.nn import Conv2d as C, Parameter

        class Net(object):
            def __init__(self):
                self.a = nn.Conv2d(1, 1, 1)

        class Real(__import__("torch").nn.Module):
            pass

        x = C(1, 1, 1)
        w = Parameter(None)
        y = F.relu(x)
    """
    assert layers(source) == [(12, "", "Conv2d")]


def test_subclass_of_a_module_subclass_defined_later_in_the_file():
    source = """
        import torch.nn as nn

        class Child(Base):
            def __init__(self):
                super().__init__()
                self.extra = nn.Linear(2, 2)

            def forward(self, x):
                return self.extra(self.fc(x))

        class Base(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)
    """
    analysis = analyze(textwrap.dedent(source))
    assert {d.path: d.owner for d in analysis.layers} == {"extra": "Child", "fc": "Base"}
    # the inherited fc is a call site of Child too
    assert sorted((c.layer.path, c.line) for c in analysis.calls) == [("extra", 9), ("fc", 9)]


def test_columns_are_code_points_on_non_ascii_lines():
    source = "import torch.nn as nn\nclass N(nn.Module):\n    def __init__(self):\n        self.ä = nn.Linear(1, 1)  # ünïcode\n"
    (definition,) = analyze(source).layers
    assert (definition.name_span.start_col, definition.name_span.end_col) == (13, 14)
    assert definition.call_span.start_col == 17


def test_recovery_keeps_the_rest_of_a_broken_file():
    source = textwrap.dedent("""
        import torch.nn as nn

        class A(nn.Module):
            def __init__(self)
                self.a = nn.Linear(1, 1)
                self.b = nn.Conv2d(1, 1, (
                self.c = nn.ReLU()
    """)
    analysis = analyze(source)
    assert analysis.tree is not None and analysis.parsed.repaired_lines
    assert "a" in {d.path for d in analysis.layers}


def test_analysis_of_nonsense_never_raises():
    for source in ["\x00", "def (", "class", "(" * 500, "x = [" + "1," * 10000, "\ufeffimport torch"]:
        analysis = analyze(source)
        assert isinstance(analysis.layers, list) and isinstance(find_problems(analysis), list)


def test_live_summaries_on_a_one_line_sequential_go_to_the_named_entry():
    source = "import torch.nn as nn\nmodel = nn.Sequential(nn.Linear(2, 2), nn.ReLU())\n"
    analysis = analyze(source)
    _, summaries = parse_payload(
        {
            "layers": {
                "": {"shape": [4, 2], "file": "/w/m.py", "line": 2},
                "0": {"shape": [4, 2], "file": "/w/m.py", "line": 2},
                "1": {"shape": "[4, 2]", "file": "file:///w/m.py", "line": 2},
                "other.0": {"shape": [1], "file": "/elsewhere.py", "line": 2},
            }
        }
    )
    matched = match_layers("/w/m.py", analysis.layers, summaries)
    by_path = {d.path: [s.name for s in matched.get(id(d), [])] for d in analysis.layers}
    assert by_path == {"": [""], "0": ["0"], "1": ["1"]}


def test_payload_parsing_skips_bad_entries():
    uri, summaries = parse_payload(
        {"uri": "file:///a.py", "layers": {"a": {"shape": [1], "nan": True, "line": "3"}, "b": 5}}
    )
    assert uri == "file:///a.py"
    assert summaries == [LiveSummary("a", "[1]", None, None, None, None, None, None)]


def test_settings_shapes_and_complaints():
    nested = DiagnosticSettings.from_settings({"hookscope": {"diagnostics": {"hs001": "Error", "HS006": False}}})
    assert nested.severity("HS001") is Severity.ERROR and nested.severity("HS006") is None
    assert nested.severity("HS002") is Severity.WARNING
    flat = DiagnosticSettings.from_settings({"diagnostics": {"HS004": "off", "HS002": "loud", "HS404": "error"}})
    assert flat.severity("HS004") is None and flat.severity("HS002") is Severity.WARNING
    assert len(flat.problems) == 2
    assert DiagnosticSettings.from_settings(None).overrides == {}


def test_a_form_feed_page_break_does_not_shift_the_lines_after_it():
    # str.splitlines() would split at "\x0c"; Python and LSP do not: the hover's text is the layer's own
    source = "import torch.nn as nn\n\x0c# page two\x0c of the file\nlayer = nn.Linear(1, 1)\n"
    (definition,) = analyze(source).layers
    assert (definition.line, definition.constructor_text) == (2, "nn.Linear(1, 1)")


def test_a_header_that_a_colon_does_not_repair_is_neutralised_in_place_and_the_class_keeps_its_layers():
    source = """
        import torch.nn as nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(1, 1, 1)
                try:
                    self.fc = nn.Linear(1, 1)
                except ValueError TypeError
                    pass

            def forward(self, x):
                if x x
                    x = self.conv(x)
                return self.fc(x)
    """
    analysis = analyze(textwrap.dedent(source))
    assert analysis.tree is not None
    assert sorted(analysis.parsed.repaired_lines) == [9, 13]
    assert [d.path for d in analysis.layers] == ["conv", "fc"]
    assert [c.layer.path for c in analysis.calls] == ["conv", "fc"]


def test_a_conditional_definition_is_one_layer_spanning_the_whole_expression():
    source = """
        import torch.nn as nn

        class Gate(nn.Module):
            def __init__(self, damp):
                super().__init__()
                self.damp = (Damp(3)
                             if damp else nn.Identity())
                self.plain = torch_thing() if damp else nn.ReLU(inplace=True)
                self.none = None if damp else object()

        class Damp(nn.Module):
            pass
    """
    analysis = analyze(textwrap.dedent(source))
    by_path = {d.path: d for d in analysis.layers}
    assert set(by_path) == {"damp", "plain"}
    damp = by_path["damp"]
    assert (damp.cls, damp.user_defined, damp.line) == ("Damp", True, 6)
    assert (damp.call_span.start_line, damp.call_span.end_line) == (6, 7), "both branches' lines belong to it"
    assert damp.constructor_text == "Damp(3) if damp else nn.Identity()"  # the hover shows both branches
    assert by_path["plain"].cls == "ReLU" and by_path["plain"].inplace


def test_calls_through_local_names_name_the_entry_they_call():
    source = """
        import torch.nn as nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.heads = nn.ModuleDict({"cls": nn.Linear(2, 2)})
                self.fc = nn.Linear(2, 2)

            def forward(self, x, key):
                f, h = self.fc, self.heads
                g = self.fc
                heads = self.heads
                y = heads["cls"](x) + heads[key](x) + heads.cls(x)
                return g(y) + self.heads["missing"](y)
    """
    analysis = analyze(textwrap.dedent(source))
    assert [(c.line, c.layer.path) for c in analysis.calls] == [
        (13, "heads.cls"),
        (13, "heads"),
        (14, "fc"),
        (14, "heads"),
    ]
