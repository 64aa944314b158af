"""`hookscope run` end to end: a real script under the real debugpy adapter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hs_session import DEADLINE, FIXTURES, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

TINY_CNN = FIXTURES / "tiny_cnn.py"


def hookscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hookscope.terminal.cli", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE * 2,
        cwd=ROOT,
    )


def test_json_stop_on_hit_with_report(tmp_path):
    report = tmp_path / "report"
    result = hookscope(
        "run",
        "--json",
        "--stop-on-hit",
        "--report",
        str(report),
        "--break",
        "conv9",
        "--break",
        "conv2:forward",
        str(TINY_CNN),
        "--steps",
        "2",
    )
    assert result.returncode == 3, result.stdout + result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    kinds = [e["event"] for e in events]
    assert "model" in kinds and "stopped" in kinds and "exited" not in kinds
    unresolved = [e for e in events if e["event"] == "error" and e.get("code") == "breakpointUnresolved"]
    assert len(unresolved) == 1 and "conv9" in unresolved[0]["message"]
    assert "matches no layer" in unresolved[0]["message"] and "conv2" in unresolved[0]["message"]  # a suggestion
    hits = [e for e in events if e["event"] == "hit"]
    assert len(hits) == 1
    hit = hits[0]
    assert (hit["layer"], hit["phase"], hit["breakpoint"]) == ("conv2", "forward", "b2")
    paths = {s["path"]: s for s in hit["summaries"]}
    assert paths["output"]["shape"] == [8, 4, 8, 8] and paths["output"]["nan"] == 0
    assert "final loss" not in "".join(e["output"] for e in events if e["event"] == "output")

    saved = json.loads((report / "report.json").read_text(encoding="utf-8"))
    assert [h["layer"] for h in saved["hits"]] == ["conv2"]
    page = (report / "index.html").read_text(encoding="utf-8")
    assert "conv2" in page and "<table>" in page
    image = saved["hits"][0]["image"]  # a conv layer: its feature map, rendered by the backend while paused
    assert (report / image["file"]).read_bytes().startswith(b"\x89PNG")
    assert image["file"] in page and image["meta"]["shape"] == [8, 4, 8, 8]


def test_human_output_runs_to_the_end_and_keeps_program_output():
    result = hookscope("run", "--break", "head.1 every 2", str(TINY_CNN), "--steps", "4")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("hookscope: hit") == 2  # forward calls 2 and 4
    assert "at model.head.1  [forward" in result.stdout
    assert "final loss" in result.stdout  # the program's own output reaches the terminal
    assert "exited with status 0" in result.stdout


def test_break_on_nonfinite_names_the_planted_layer(tmp_path):
    """examples/nan.py: the NaN is born in head.standardize; the debugger pauses there and continues."""
    result = hookscope("run", "--json", "--break-on-nonfinite", str(ROOT / "examples" / "nan.py"))
    events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    hits = [e for e in events if e["event"] == "hit"]
    assert hits, result.stdout[-3000:] + result.stderr[-3000:]
    first = hits[0]
    assert (first["breakpoint"], first["layer"], first["pausing"]) == ("nonfinite", "head.standardize", True)
    assert first["origin"] == "born here"
    # The op and the line where the NaN was born: Standardize.forward's division.
    nan_py = ROOT / "examples" / "nan.py"
    line = next(n for n, text in enumerate(nan_py.read_text().splitlines(), 1) if "/ x.std(dim=0)" in text)
    assert (first["op"]["op"], first["op"]["file"], first["op"]["line"]) == ("Tensor.div", str(nan_py), line)
    assert first["op"]["function"].endswith("Standardize.forward")
    assert events[-1]["event"] == "exited", events[-3:]


def test_a_source_line_means_what_the_backend_resolver_says(tmp_path):
    """`--break FILE:LINE` on a call site (`x = torch.relu(self.conv2(x))`) hits conv2, and a line
    that defines or calls no layer says so, both answered by the backend's one resolver."""
    lines = TINY_CNN.read_text().splitlines()
    call = next(i for i, text in enumerate(lines, start=1) if "# @call.conv2" in text)
    result = hookscope(
        "run", "--json", "--break", f"{TINY_CNN}:{call}", "--break", f"{TINY_CNN}:1", str(TINY_CNN), "--steps", "1"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert {e["layer"] for e in events if e["event"] == "hit"} == {"conv2"}
    unresolved = [e["message"] for e in events if e["event"] == "error" and e.get("code") == "breakpointUnresolved"]
    assert unresolved == [f"--break '{TINY_CNN}:1': no layer is defined or called at that line"], unresolved
