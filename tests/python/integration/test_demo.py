"""``make demo`` runs examples/demo.py: the headless tour must show what the README promises."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from hs_session import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_demo_stops_in_the_layers_it_names_and_writes_both_reports():
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")], capture_output=True, text=True, timeout=550, cwd=ROOT
    )
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    # 1. the CNN: conv1's forward once, conv2's backward every 10th step, with summaries.
    assert re.search(r"hit 1 at \S*conv1  \[forward, step \d+\]", out), out[-3000:]
    assert len(re.findall(r"conv2  \[backward, step \d+\]", out)) == 2, out[-3000:]  # 21 steps, every 10th
    assert "grad_output" in out
    # 2. break on NaN: the run stops where the NaN is born, not at the loss.
    assert re.search(r"head\.standardize  \[forward, step \d+\]", out) and "NaN" in out, out[-3000:]
    # 3. both reports exist, with the hits and their images.
    report = ROOT / ".hookscope-report"
    for name in ("cnn", "nan"):
        assert str(report / name / "index.html") in out
        saved = json.loads((report / name / "report.json").read_text(encoding="utf-8"))
        assert saved["hits"], name
    nan_hits = json.loads((report / "nan" / "report.json").read_text(encoding="utf-8"))["hits"]
    assert nan_hits[0]["layer"] == "head.standardize"
