"""bench/RESULTS.md's generator: every table names its one denominator in its header, the side
benchmarks say what they measure against, and the development history closes the page."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def run_py():
    sys.path.insert(0, str(BENCH))  # run.py imports its sibling configs.py
    try:
        spec = importlib.util.spec_from_file_location("bench_run", BENCH / "run.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def fake_row(mode: str, models: list[str], step_s: float) -> dict:
    return {
        "mode": mode,
        "results": {m: {"median_s": step_s, "steps": 20} for m in models},
        "peak_rss_mb": 500.0,
        "live_tensors": 3,
        "live_tensor_bytes": 1000,
    }


def test_each_table_names_one_denominator_and_history_closes_the_page(run_py, monkeypatch) -> None:
    monkeypatch.setattr(run_py, "versions", lambda python: "versions")
    models = ["cnn", "stack10"]
    rows = {mode: fake_row(mode, models, 0.010) for mode in ["plain", "debugpy", *run_py.HOOKSCOPE_MODES]}
    rows["debugpy"] = fake_row("debugpy", models, 0.008)
    rows[run_py.SIDE_BY_SIDE_MODE] = {
        "results": {m: {c: {"median_s": 0.01, "steps": 20} for c in run_py.SIDE_BY_SIDE} for m in models},
        "peak_rss_mb": 1.0,
        "live_tensors": 0,
        "live_tensor_bytes": 0,
    }
    side = {"latency.py": "p50 1 ms", run_py.EDITOR_LATENCY: "| from → to | samples |\n|---|---|"}
    args = argparse.Namespace(steps=20, warmup=5, python=sys.executable)
    text = run_py.render_markdown({"cpu": rows}, {"cpu": "x86"}, models, args, side)

    headers = [line for line in text.splitlines() if line.startswith("| ") and "|---" not in line]
    tables = [h for h in headers if not h.startswith(("| plain", "| under", "| Hookscope", "| Layer", "| timed"))]
    assert tables, text
    for header in tables[:-1]:  # the editor table's header is the bench's own (checked below)
        assert "÷" in header or "absolute, no ratio" in header, header
    assert f"| row · {run_py.RATIO_TO_DEBUGPY} |" in text
    assert f"| configuration · {run_py.RATIO_TO_IDLE} |" in text
    # one denominator: 10 ms over debugpy's 8 ms, no second (bracketed) ratio to plain Python
    assert "| plain Python, no debugger | 10.00 ms · **1.25×** | 10.00 ms · **1.25×** |" in text
    assert "(1.00×)" not in text
    assert run_py.SIDE_NOTES["latency.py"] in text
    assert text.rstrip().endswith(run_py.HISTORY.read_text(encoding="utf-8").strip())
    assert text.index("## Development history") > text.index(f"## {run_py.EDITOR_LATENCY}")
