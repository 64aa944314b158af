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
        "results": {
            m: {
                c: {"median_s": 0.01, "steps": 20, "rounds": 4, "ratio": 1.0, "ratio_q1": 0.98, "ratio_q3": 1.03}
                for c in run_py.SIDE_BY_SIDE
            }
            for m in models
        },
        "peak_rss_mb": 1.0,
        "live_tensors": 0,
        "live_tensor_bytes": 0,
    }
    side = {"latency.py": "p50 1 ms", run_py.EDITOR_LATENCY: "| from → to | samples |\n|---|---|"}
    args = argparse.Namespace(steps=20, warmup=5, python=sys.executable)
    text = run_py.render_markdown({"cpu": rows}, {"cpu": "x86"}, models, args, side)

    headers = [line for line in text.splitlines() if line.startswith("| ") and "|---" not in line]
    tables = [h for h in headers if not h.startswith(("| plain", "| under", "| Hookscope", "| Layer", "| rounds"))]
    assert tables, text
    for header in tables[:-1]:  # the editor table's header is the bench's own (checked below)
        assert "÷" in header or "absolute, no ratio" in header, header
    assert f"| row · {run_py.RATIO_TO_DEBUGPY} |" in text
    assert f"| configuration · {run_py.RATIO_TO_IDLE} |" in text
    # one denominator: 10 ms over debugpy's 8 ms, no second (bracketed) ratio to plain Python
    assert "| plain Python, no debugger | 10.00 ms · **1.25×** | 10.00 ms · **1.25×** |" in text
    assert "(1.00×)" not in text
    assert "| 10.00 ms · **1.00×** (0.98–1.03) |" in text  # side by side: the paired ratio and its middle half
    assert run_py.SIDE_NOTES["latency.py"] in text
    assert text.rstrip().endswith(run_py.HISTORY.read_text(encoding="utf-8").strip())
    assert text.index("## Development history") > text.index(f"## {run_py.EDITOR_LATENCY}")


def test_another_interpreter_s_side_by_side_has_a_section_of_its_own(run_py, monkeypatch) -> None:
    """``--also-python``: its side-by-side table, named by its versions, after the first device's tables."""
    monkeypatch.setattr(run_py, "versions", lambda python: "Python 3.11.7, torch 2.13.0")
    models = ["cnn"]
    rows = {"debugpy": fake_row("debugpy", models, 0.008)}
    also_row = {
        "results": {
            "cnn": {
                c: {"median_s": 0.01, "steps": 20, "rounds": 4, "ratio": 1.07, "ratio_q1": 1.05, "ratio_q3": 1.09}
                for c in run_py.SIDE_BY_SIDE
            }
        }
    }
    args = argparse.Namespace(steps=20, warmup=5, python=sys.executable)
    also = ("Python 3.12.1, torch 2.13.0+cu130, debugpy 1.8.22", also_row)
    text = run_py.render_markdown({"cpu": rows}, {"cpu": "x86"}, models, args, {}, also)
    section = text[text.index("## Python 3.12.1: side by side") : text.index("## Development history")]
    assert "sys.monitoring" in section and "(the tables above: Python 3.11.7)" in section
    assert "| 10.00 ms · **1.07×** (1.05–1.09) |" in section
    failed = run_py.render_markdown({"cpu": rows}, {"cpu": "x86"}, models, args, {}, (also[0], "failed: boom"))
    assert "failed: boom" in failed  # a row that could not run says why in its section


def test_a_plain_worker_that_dies_puts_its_traceback_in_its_row(run_py, tmp_path) -> None:
    args = argparse.Namespace(steps=1, warmup=0)
    with pytest.raises(RuntimeError, match=r"(?s)wrote no results; its stderr ended with:.*no-such-model"):
        run_py.run_row("plain", sys.executable, ["no-such-model"], args, tmp_path)


@pytest.mark.slow
def test_a_worker_that_dies_under_debugpy_puts_its_traceback_in_its_row(run_py, tmp_path) -> None:
    """The side-by-side row's path: the worker dies under the debug adapter, before any results."""
    worker = [str(BENCH / "worker.py"), "--models", "no-such-model", "--out", str(tmp_path / "out.json")]
    with pytest.raises(RuntimeError, match=r"(?s)under debugpy ended and wrote no results.*no-such-model"):
        run_py.under_debugpy(sys.executable, worker, {}, timeout=120)


def test_a_failed_row_keeps_the_table_whole_and_shows_its_stderr_below(run_py, monkeypatch) -> None:
    monkeypatch.setattr(run_py, "versions", lambda python: "versions")
    models = ["cnn"]
    rows = {
        "debugpy": fake_row("debugpy", models, 0.008),
        "hookscope-idle": "failed: RuntimeError: the worker wrote no results; its stderr ended with:\nTraceback\nBoom",
        run_py.SIDE_BY_SIDE_MODE: "failed: RuntimeError: worker died\nTraceback\nBang",
    }
    args = argparse.Namespace(steps=20, warmup=5, python=sys.executable)
    text = run_py.render_markdown({"cpu": rows}, {"cpu": "x86"}, models, args, {})
    idle = run_py.LABELS["hookscope-idle"]
    assert (
        f"| {idle} | failed: RuntimeError: the worker wrote no results; its stderr ended with: (stderr below) |" in text
    )
    assert f"{idle}:\n\n```\nfailed: RuntimeError" in text and "Traceback\nBoom\n```" in text
    assert "Traceback\nBang\n```" in text


def test_side_by_side_ratios_pair_each_round_with_its_own_idle_steps() -> None:
    """A machine twice as slow in the second round: the per-round ratios still read 1.1."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_worker", BENCH / "worker.py")
        worker = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(worker)
    finally:
        sys.path.remove(str(BENCH))
    measured = worker.paired([0.011, 0.022, 0.011], [0.011, 0.022, 0.011], [0.010, 0.020, 0.010])
    assert measured["rounds"] == 3 and measured["steps"] == 3
    assert measured["ratio"] == pytest.approx(1.1)
    assert measured["ratio_q1"] == pytest.approx(1.1) and measured["ratio_q3"] == pytest.approx(1.1)
    assert measured["median_s"] == pytest.approx(0.011)


def test_both_gradient_switches_are_measured_where_a_never_true_vanishing_threshold_exists(run_py) -> None:
    """The tanh stacks of 100 and 1,000 layers really have vanishing gradients: 'healthboth' skips them,
    and their cells say why; elsewhere it asks for both thresholds, 'health' for exploding alone."""
    import configs

    assert "healthboth" in configs.configs_for("gpt") and "healthboth" not in configs.configs_for("stack1000")
    thresholds = {
        config: next(r for r in configs.requests_for(config, "m", []) if r["type"] == "setBreakOnGradients")
        for config in ("health", "healthboth", "idle")
    }
    assert thresholds["health"] == {"type": "setBreakOnGradients", "exploding": configs.NEVER_EXPLODING}
    assert thresholds["healthboth"]["vanishing"] == configs.NEVER_VANISHING
    assert thresholds["idle"] == {"type": "setBreakOnGradients"}  # both off
    cell = {"median_s": 0.01, "steps": 20, "rounds": 4, "ratio": 1.0, "ratio_q1": 0.98, "ratio_q3": 1.03}
    row = {"results": {m: {c: cell for c in configs.configs_for(m)} for m in ("cnn", "stack100")}}
    lines = run_py.side_by_side_markdown(row, ["cnn", "stack100"])
    label = configs.SIDE_BY_SIDE_ONLY["healthboth"]
    both, per_layer = [line for line in lines if line.startswith(f"| {label} |")]  # the ratios, then µs per layer
    assert both == f"| {label} | 10.00 ms · **1.00×** (0.98–1.03) | {run_py.NOT_MEASURED} |"
    assert per_layer == f"| {label} | — |"
