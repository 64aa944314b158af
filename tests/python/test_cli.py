"""`hookscope run` argument handling and the --break SPEC syntax (no process launched)."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hookscope.terminal.break_spec import SpecError, parse_spec
from hookscope.terminal.report import Report

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("layer1.0.conv1", {"layer": "layer1.0.conv1", "phases": ["forward"]}),
        ("layer*.conv1:backward", {"layer": "layer*.conv1", "phases": ["backward"]}),
        ("Conv2d:fwd,bwd", {"cls": "Conv2d", "phases": ["forward", "backward"]}),
        ("fc:pre", {"layer": "fc", "phases": ["forward_pre"]}),
        ("fc if nonfinite", {"layer": "fc", "phases": ["forward"], "condition": {"kind": "nonfinite"}}),
        (
            "fc if grad_norm>100",
            {"layer": "fc", "phases": ["backward"], "condition": {"kind": "grad_norm_above", "threshold": 100.0}},
        ),
        (
            "fc:grad if grad_norm<1e-6",
            {"layer": "fc", "phases": ["param_grad"], "condition": {"kind": "grad_norm_below", "threshold": 1e-6}},
        ),
        (
            "fc if absmax>6e4",
            {"layer": "fc", "phases": ["forward"], "condition": {"kind": "absmax_above", "threshold": 6e4}},
        ),
        (
            "fc if output.mean() > 3",
            {
                "layer": "fc",
                "phases": ["forward"],
                "condition": {"kind": "expression", "expression": "output.mean() > 3"},
            },
        ),
        ("fc every 10", {"layer": "fc", "phases": ["forward"], "every": 10}),
        ("fc:backward hit 3", {"layer": "fc", "phases": ["backward"], "hitCount": 3}),
    ],
)
def test_spec_syntax(text, expected):
    assert parse_spec(text, "b1") == {"id": "b1", **expected}


def test_source_line_specs_are_absolute():
    spec = parse_spec("model.py:42:backward", "b7")
    assert spec == {"id": "b7", "file": os.path.abspath("model.py"), "line": 42, "phases": ["backward"]}


def test_default_phases_apply_to_specs_without_one():
    assert parse_spec("fc", "b1", ["backward"])["phases"] == ["backward"]
    assert parse_spec("fc:forward", "b1", ["backward"])["phases"] == ["forward"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("fc:sideways", "unknown phase"),
        ("fc if )(", "not a Python expression"),
        ("a b", "expected a layer name"),
        ("fc if absmax<3", "only absmax>X"),
    ],
)
def test_bad_specs(text, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(text, "b1")


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--break", "conv1", "no_such_script.py"], "no such script"),
        (["run", "--break", "conv1:sideways", "examples/cnn.py"], "unknown phase"),
        (["run"], "the following arguments are required"),
        (["walk"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "hookscope.terminal.cli", *args], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert result.returncode == 2
    assert message in result.stderr


def test_help_documents_the_spec_syntax():
    result = subprocess.run(
        [sys.executable, "-m", "hookscope.terminal.cli", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0
    for needle in ("WHERE[:PHASES]", "grad_norm>X", "model.py:42", "--stop-on-hit"):
        assert needle in result.stdout


def test_report_page_lists_hits_and_images(tmp_path):
    report = Report(str(tmp_path), ["train.py"])
    report.add_model({"id": "m1", "name": "net", "cls": "Net", "params": 10, "modules": [{"name": ""}]})
    hit = {
        "type": "hit",
        "breakpoint": "b1",
        "model": "m1",
        "layer": "conv<1>",
        "phase": "forward",
        "reason": "r",
        "step": 3,
        "pausing": True,
        "summaries": [
            {"path": "output", "shape": [2, 3], "dtype": "float32", "mean": 0.5, "nan": 1, "posinf": 0, "neginf": 0}
        ],
    }
    report.add_hit(hit, {"png": b"\x89PNGdata", "width": 4, "height": 4, "meta": {}})
    report.exit_code = 0
    page = Path(report.write()).read_text(encoding="utf-8")
    assert "conv&lt;1&gt;" in page and "hit-1.png" in page and "class='bad'" in page
    assert (tmp_path / "hit-1.png").read_bytes() == b"\x89PNGdata"
    assert '"layer": "conv<1>"' in (tmp_path / "report.json").read_text(encoding="utf-8")


def test_report_page_keeps_hostile_names_and_messages_as_text(tmp_path):
    hostile = "evil](https://x.example/a.png) <img src=x onerror=alert(1)> **b** ' onerror='alert(2)"
    report = Report(str(tmp_path), ["train.py", hostile])
    report.add_model({"id": hostile, "name": hostile, "cls": hostile, "params": 1, "modules": [{"name": hostile}]})
    report.add_notice({"level": hostile, "message": hostile})
    hit = {
        "type": "hit",
        "layer": hostile,
        "phase": hostile,
        "reason": hostile,
        "origin": hostile,
        "step": hostile,
        "summaries": [{"path": hostile, "shape": hostile, "dtype": hostile, "note": hostile}],
    }
    report.add_hit(hit, {"png": b"\x89PNG", "width": hostile, "height": 4, "meta": {}})
    page = Path(report.write()).read_text(encoding="utf-8")
    assert "<img src=x" not in page and "onerror='" not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 10
    # the only images and tags are the page's own
    assert re.findall(r"<img\b[^>]*>", page) == [
        f"<img src='hit-1.png' alt='feature map of {html.escape(hostile)}' width='{html.escape(hostile)}'>"
    ]
