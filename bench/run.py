"""``make bench``: every benchmark in one run, written to bench/RESULTS.md.

Rows (median step time of forward+backward+optimizer step after warm-up):
plain Python; under debugpy (the baseline the ratios divide by); Hookscope
connected with nothing watched; break on NaN/Inf over all layers; break on
exploding/vanishing gradients; summaries of all layers streamed at the panel's
rate; a never-true conditional layer breakpoint on every layer; and the peers
detect_anomaly, Hugging Face's DebugUnderflowOverflow and TorchLens. Each row is one process that trains
every model, so rows are measured side by side in one run. With ``--devices
auto`` (the default) the rows run on the CPU and, when the bench's Python sees
a CUDA device, again on it, in a section of their own. ``--also-python`` runs
the side-by-side row again with another interpreter (``make bench-py312``:
Python 3.12, where debugpy traces through ``sys.monitoring``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "backend"))

from configs import SIDE_BY_SIDE, SIDE_BY_SIDE_ONLY, requests_for  # noqa: E402

from hookscope import bootstrap  # noqa: E402
from hookscope.terminal.dap_client import DapClient  # noqa: E402
from hookscope.terminal.editor_link import EditorLink  # noqa: E402

MODELS = ["cnn", "transformer", "gpt", "resnet18", "stack10", "stack100", "stack1000"]
HOOKSCOPE_MODES = {
    "hookscope-idle": "Hookscope connected, nothing watched",
    "hookscope-nonfinite": "Hookscope break on NaN/Inf, all layers",
    "hookscope-health": "Hookscope break on exploding gradients (never-true threshold, vanishing off)",
    "hookscope-summaries": "Hookscope summaries of all layers at panel rate (4 Hz)",
    "hookscope-condbp": "Layer breakpoint (never-true condition) on every layer",
}
PEER_MODES = {
    "anomaly": "torch.autograd.set_detect_anomaly(True)",
    "hf": "transformers DebugUnderflowOverflow",
    "torchlens": "TorchLens capturing all activations (trace) + step",
}
SIDE_BY_SIDE_MODE = "hookscope-side-by-side"
SIDE_BY_SIDE_TIMEOUT_FACTOR = 3
"""The side-by-side row may run this many times ``--row-timeout``: it holds every configuration."""
NAN_FLOOR_DEBUGPY = "nan_floor.py under debugpy"
EDITOR_LATENCY = "Editor latency in a real VS Code"
"""bench/editor/latency.bench.ts, run through the e2e harness (code-server + Chromium + the .vsix)."""
EDITOR_LATENCY_METHOD = (
    "Measured through the extension installed from hookscope.vsix in code-server, driven by Chromium "
    "(`make bench-editor`). Every timestamp is this machine's wall clock in ms, taken where the thing "
    "happens: the training script's own forward pre-hook on the watched layer (the hook firing), a "
    "MutationObserver in the Tensors panel's webview or in the workbench page (the DOM change; the "
    "paint follows within a frame), and the extension's trace line for a layer breakpoint's hit (the "
    "debuggee sent it under 5 ms before: `latency.py`'s hit row). The rows starting with … split the "
    "stop row at the DAP requests and replies the extension's trace records as they pass (`dap.request`, "
    "`dap.reply`). The model steps every ~25 ms; images refresh at most once a second while running, by "
    "design, and that wait is part of the image row. Node's, Python's and Chromium's clocks are the same "
    "wall clock here: one machine."
)
EXTRAS = (
    "latency.py",
    "nan_floor.py",
    "render_bench.py",
    "lsp_bench.py",
    "variables_bench.py",
    NAN_FLOOR_DEBUGPY,
    EDITOR_LATENCY,
)
"""The side benchmarks, in the order RESULTS.md shows them."""
RATIO_TO_DEBUGPY = "step time, and ÷ 'under debugpy, no Hookscope' of this run"
PER_LAYER_VS_DEBUGPY = "µs per layer per step: (row − 'under debugpy, no Hookscope') ÷ N layers"
RATIO_TO_IDLE = "step time, and ÷ 'Hookscope connected, nothing watched' of the same rounds"
PER_LAYER_VS_IDLE = "µs per layer per step: (configuration − 'nothing watched') ÷ N layers"
"""Each table's one denominator, said in its header."""
SIDE_NOTES = {
    "latency.py": (
        "Against a Python stand-in for the editor (`EditorLink`) in the bench's process, no VS Code: "
        "ms from the hook to the frame at the stand-in, the link's own share of the editor latency below."
    ),
    "nan_floor.py": "Plain Python; the ratio column divides by the line 'nothing' of the same rounds.",
    "render_bench.py": "Absolute times of the backend's renderers, no ratio.",
    "lsp_bench.py": "Absolute times of the language server's replies over its stdio, no ratio.",
    "variables_bench.py": "Absolute times of DAP 'variables' replies from debugpy, no ratio.",
    NAN_FLOOR_DEBUGPY: "Under debugpy; the ratio column divides by the line 'nothing' of the same rounds.",
}
"""What each side benchmark measures against, shown above its output."""
HISTORY = HERE / "HISTORY.md"
"""How these figures came to be (earlier runs, what changed): appended to RESULTS.md as written."""
LABELS = {
    "plain": "plain Python, no debugger",
    "debugpy": "under debugpy, no Hookscope",
    **HOOKSCOPE_MODES,
    **PEER_MODES,
    SIDE_BY_SIDE_MODE: "Hookscope configurations side by side in one process",
}


def configure(mode: str, link: EditorLink, expected_models: int, timeout: float = 120.0) -> None:
    """Ask the agent what this row measures, for every model it found."""
    conn = link.wait_connection(timeout)
    models = []
    deadline = time.monotonic() + timeout
    while len(models) < expected_models:
        models.append(conn.wait_event("modelAdded", timeout=max(1.0, deadline - time.monotonic()))["model"])
    config = mode.removeprefix("hookscope-")
    if config not in SIDE_BY_SIDE:  # the side-by-side row configures itself, every few steps
        return
    for model in models:
        layers = [m["name"] for m in model["modules"] if m["name"]]
        for request in requests_for(config, model["id"], layers):
            conn.request(request.pop("type"), **request)


def run_row(
    mode: str, python: str, models: list[str], args: argparse.Namespace, tmp: Path, device: str = "cpu"
) -> dict:
    out = tmp / f"{mode}-{device}.json"
    worker = [
        str(HERE / "worker.py"),
        "--models",
        ",".join(models),
        "--mode",
        mode,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--device",
        device,
        "--out",
        str(out),
    ]
    if mode == "plain":
        proc = subprocess.run([python, *worker], cwd=HERE, capture_output=True, text=True)
        if proc.returncode or not out.exists():
            raise RuntimeError(f"the worker exited with {proc.returncode} and {no_results(proc.stderr)}")
        return json.loads(out.read_text())
    link = EditorLink() if mode.startswith("hookscope") else None
    env = {}
    on_launched = None
    if link is not None:
        ready = tmp / f"{mode}-{device}.ready"
        worker += ["--ready-file", str(ready)]
        env.update(link.env())
        env["PYTHONPATH"] = bootstrap.pythonpath(os.environ.get("PYTHONPATH"))

        def on_launched() -> None:
            configure(mode, link, expected_models=len(models))
            ready.write_text("go")

    try:
        # the side-by-side row steps every model MIN_MODEL_S per configuration, and switches often:
        # about 10 minutes here, past 15 on a busy host
        timeout = args.row_timeout * SIDE_BY_SIDE_TIMEOUT_FACTOR if mode == SIDE_BY_SIDE_MODE else args.row_timeout
        under_debugpy(python, worker, env, timeout, on_launched)
    finally:
        if link is not None:
            link.close()
    return json.loads(out.read_text())


def under_debugpy(
    python: str, command: list[str], env: dict[str, str], timeout: float, on_launched: Callable[[], None] | None = None
) -> str:
    """Run ``command`` (a script and its arguments) under the real debugpy adapter, launched as
    the extension launches it (justMyCode, Hookscope's rule); returns what it printed."""
    printed: list[str] = []
    dap = DapClient.start_adapter(python)
    errors: list[str] = []

    def on_event(event: dict) -> None:
        if event.get("event") == "output":
            category = event["body"].get("category")
            (printed if category == "stdout" else errors if category == "stderr" else []).append(
                event["body"].get("output", "")
            )

    dap.on_event = on_event
    try:
        dap.initialize("hookscope-bench")
        launch = dap.send_request(
            "launch",
            {
                "name": f"bench {Path(command[0]).name}",
                "type": "debugpy",
                "request": "launch",
                "program": command[0],
                "args": command[1:],
                "cwd": str(HERE),
                "python": [python],
                "console": "internalConsole",
                "justMyCode": True,
                "env": {"PYTHONUNBUFFERED": "1", **env},
                "rules": [{"module": "hookscope", "include": False}],
                "redirectOutput": True,
            },
        )
        dap.wait_event("initialized", timeout=60)
        dap.request("setExceptionBreakpoints", {"filters": []})
        dap.request("configurationDone")
        launch.result(60)
        if on_launched is not None:
            on_launched()
        dap.wait_event("terminated", timeout=timeout)
    finally:
        dap.close()
    if not out_file_written(command):
        # the program died: its traceback is what the results page needs, not a missing file
        raise RuntimeError(f"the worker under debugpy ended and {no_results(''.join(errors))}")
    return "".join(printed)


def no_results(stderr: str) -> str:
    """Why a process's results are missing, for the results page: the end of its stderr (its traceback)."""
    tail = stderr.strip()[-2000:]
    return "wrote no results; its stderr ended with:\n" + tail if tail else "wrote no results and nothing on stderr"


def out_file_written(command: list[str]) -> bool:
    """Whether the worker's ``--out`` file exists (True for a command without one)."""
    return "--out" not in command or Path(command[command.index("--out") + 1]).exists()


def peer_available(mode: str, python: str) -> str | None:
    module = {"hf": "transformers.debug_utils", "torchlens": "torchlens"}.get(mode)
    if module is None:
        return None
    probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True)
    if probe.returncode:
        return f"not installed ({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else 'import failed'})"
    return None


def extra(script: str, python: str) -> str:
    """Output of a side benchmark script (render, LSP, latency), or why it could not run."""
    path = HERE / script
    if not path.exists():
        return f"(`bench/{script}` is missing)"
    proc = subprocess.run([python, str(path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    if proc.returncode:
        return f"bench/{script} failed (exit {proc.returncode}) and {no_results(proc.stderr)}"
    return proc.stdout.strip()


def editor_latency() -> str:
    """The editor-latency bench's Markdown table, or why it could not run."""
    with tempfile.TemporaryDirectory(prefix="hookscope-editor-latency-") as tmp:
        out = Path(tmp) / "latency.md"
        proc = subprocess.run(
            ["bash", "tests/e2e/run.sh", "bench/editor/latency.bench.ts"],
            cwd=ROOT,
            timeout=1200,
            env={**os.environ, "HOOKSCOPE_BENCH_OUT": str(out)},
            capture_output=True,
            text=True,
        )
        if proc.returncode or not out.exists():
            return f"(`bench/editor/latency.bench.ts` failed: {(proc.stdout + proc.stderr).strip()[-1500:]})"
        return out.read_text().strip()


def nan_floor_under_debugpy(python: str) -> str:
    """nan_floor.py again, under the debugger the rows above measure against."""
    try:
        return under_debugpy(python, [str(HERE / "nan_floor.py")], {}, timeout=600).strip()
    except Exception as exc:  # noqa: BLE001 - the section says why instead
        return f"(`bench/nan_floor.py` under debugpy failed: {type(exc).__name__}: {exc})"


def chosen_devices(spec: str, python: str) -> dict[str, str]:
    """{device: its name} to measure on: ``auto`` is the CPU, and CUDA when the bench's Python has one."""
    wanted = ["cpu", "cuda"] if spec == "auto" else spec.split(",")
    code = (
        "import platform, torch; cuda = torch.cuda.is_available(); "
        "print(platform.processor() or platform.machine()); "
        "print(torch.cuda.get_device_name() if cuda else '')"
    )
    cpu_name, cuda_name = (
        subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.splitlines() + ["", ""]
    )[:2]
    devices = {}
    for device in wanted:
        if device.startswith("cuda") and not cuda_name:
            if spec != "auto":
                raise SystemExit(f"bench: no CUDA device for {python}")
            continue
        devices[device] = cuda_name if device.startswith("cuda") else cpu_name
    return devices


def versions(python: str) -> str:
    code = (
        "import sys, torch, debugpy, hookscope; "
        "print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, "
        "debugpy {debugpy.__version__}, hookscope {hookscope.__version__}')"
    )
    return subprocess.run([python, "-c", code], capture_output=True, text=True).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument(
        "--devices", default="auto", help="comma-separated devices (cpu, cuda); 'auto': cpu, and cuda when there is one"
    )
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--modes", default=",".join(LABELS))
    parser.add_argument("--row-timeout", type=float, default=900)
    parser.add_argument("--out", default=str(HERE / "RESULTS.md"))
    parser.add_argument(
        "--also-python",
        help="another interpreter (its own torch, debugpy and hookscope) to run the side-by-side row with, on the CPU",
    )
    parser.add_argument(
        "--extras",
        default=",".join(EXTRAS),
        help="comma-separated side benchmarks to run after the rows ('none': only the rows)",
    )
    args = parser.parse_args()
    args.python = absolute(args.python)
    models = args.models.split(",")
    devices = chosen_devices(args.devices, args.python)
    by_device: dict[str, dict[str, dict | str]] = {}
    also: tuple[str, dict | str] | None = None
    with tempfile.TemporaryDirectory(prefix="hookscope-bench-") as tmp:
        for device in devices:
            by_device[device] = measure_rows(device, models, args, Path(tmp))
        if args.also_python:
            also_python = absolute(args.also_python)
            also_versions = versions(also_python)
            print(f"bench (cpu): {LABELS[SIDE_BY_SIDE_MODE]}, {also_versions} ...", flush=True)
            also = (also_versions, side_by_side_with(also_python, models, args, Path(tmp)))
    wanted = [] if args.extras == "none" else args.extras.split(",")
    special = {NAN_FLOOR_DEBUGPY: lambda: nan_floor_under_debugpy(args.python), EDITOR_LATENCY: editor_latency}
    side = {name: special[name]() if name in special else extra(name, args.python) for name in EXTRAS if name in wanted}
    text = render_markdown(by_device, devices, models, args, side, also)
    Path(args.out).write_text(text, encoding="utf-8")
    print(text)
    return 0


def measure_rows(device: str, models: list[str], args: argparse.Namespace, tmp: Path) -> dict[str, dict | str]:
    """Every row on one device: {mode: the worker's results, or why the row could not run}."""
    rows: dict[str, dict | str] = {}
    for mode in args.modes.split(","):
        missing = peer_available(mode, args.python)
        if missing:
            rows[mode] = missing
            continue
        print(f"bench ({device}): {LABELS[mode]} ...", flush=True)
        try:
            rows[mode] = run_row(mode, args.python, models, args, tmp, device)
        except Exception as exc:  # noqa: BLE001 - a row that cannot run says why in the table
            rows[mode] = f"failed: {type(exc).__name__}: {exc}"
    return rows


def absolute(python: str) -> str:
    """An interpreter path that does not depend on the workers' temporary folder (a bare name stays:
    PATH finds it). abspath, not resolve(): a venv's python is a symlink whose target is not the venv."""
    return os.path.abspath(python) if os.sep in python else python


def side_by_side_with(python: str, models: list[str], args: argparse.Namespace, tmp: Path) -> dict | str:
    """The side-by-side row run by another interpreter (``--also-python``), on the CPU."""
    (tmp / "also").mkdir(exist_ok=True)
    try:
        return run_row(SIDE_BY_SIDE_MODE, python, models, args, tmp / "also")
    except Exception as exc:  # noqa: BLE001 - a row that cannot run says why in its section
        return f"failed: {type(exc).__name__}: {exc}"


ALSO_PYTHON_NOTE = (
    "The side-by-side row again, run by the interpreter named here (the tables above: {main}). "
    "From Python 3.12 on, debugpy follows the program through `sys.monitoring` (PEP 669): code without "
    "a breakpoint runs at full speed under the debugger, torch's own Python and Hookscope's hooks alike. "
    "Up to 3.11 it uses `sys.settrace`, and every Python line pays for the tracing: the same hooks cost "
    "more there. torch here is PyPI's build for this interpreter, run on the CPU: compare ratios, not step times."
)


def render_markdown(
    by_device: dict[str, dict],
    devices: dict[str, str],
    models: list[str],
    args: argparse.Namespace,
    side: dict[str, str],
    also: tuple[str, dict | str] | None = None,
) -> str:
    """The first device's tables, then any other device's in a section of its own, then the side benchmarks."""
    first, *others = by_device
    main_versions = versions(args.python)
    measured = ", ".join(f"`{device}` ({name})" if name else f"`{device}`" for device, name in devices.items())
    lines = [
        "# Hookscope benchmark results",
        "",
        f"Date {datetime.date.today().isoformat()}; machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{platform.platform()}; measured on {measured}; {main_versions}.",
        f"Median of {args.steps} steps after {args.warmup} warm-up steps (forward + backward + optimizer "
        "step), one intra-op thread. Each table divides by one denominator, named in its header; the "
        "development history of these figures is at the end.",
    ]
    if not others:
        lines.append("No CUDA device was present: CPU rows only.")
    lines += device_tables(by_device[first], models, heading="##")
    for device in others:
        lines += [
            "",
            f"## On `{device}` ({devices[device]})",
            "",
            "The same rows, models and configurations on this device; peak RSS is host memory, "
            "so the memory table is the CPU run's only.",
        ]
        lines += device_tables(by_device[device], models, heading="###", memory=False)
    if also is not None:
        also_versions, also_row = also
        lines += ["", f"## {also_versions.split(',')[0]}: side by side", ""]
        lines.append(ALSO_PYTHON_NOTE.format(main=main_versions.split(",")[0]) + f" ({also_versions}.)")
        lines += side_by_side_markdown(also_row, models, heading="###")
    for name, text in side.items():
        if name == EDITOR_LATENCY:  # a Markdown table of its own
            lines += ["", f"## {name}", "", EDITOR_LATENCY_METHOD, "", text]
            continue
        lines += ["", f"## {name}", "", SIDE_NOTES[name], "", "```", text, "```"]
    lines += ["", HISTORY.read_text(encoding="utf-8").strip()]
    return "\n".join(lines) + "\n"


def device_tables(rows: dict, models: list[str], heading: str, memory: bool = True) -> list[str]:
    """The row table, the cost per layer, the side-by-side tables and (optionally) memory, for one device."""
    base = rows.get("debugpy")
    lines = ["", f"| row · {RATIO_TO_DEBUGPY} | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    for mode, row in rows.items():
        if mode == SIDE_BY_SIDE_MODE:
            continue
        cells = []
        for model in models:
            if isinstance(row, str):
                cells.append(
                    row.splitlines()[0] + (" (stderr below)" if "\n" in row else "") if model == models[0] else ""
                )
                continue
            t = row["results"][model]["median_s"]
            cell = f"{t * 1e3:.2f} ms"
            if isinstance(base, dict):
                cell += f" · **{t / base['results'][model]['median_s']:.2f}×**"
            cells.append(cell)
        lines.append(f"| {LABELS[mode]} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"{heading} Cost per watched layer (stack of N small layers)",
        "",
        f"| row · {PER_LAYER_VS_DEBUGPY} | N=10 | N=100 | N=1000 |",
        "|---|---|---|---|",
    ]
    if isinstance(base, dict):
        for mode in HOOKSCOPE_MODES:
            row = rows.get(mode)
            if not isinstance(row, dict):
                continue
            cells = []
            for n in (10, 100, 1000):
                key = f"stack{n}"
                if key in row["results"] and key in base["results"]:
                    delta = row["results"][key]["median_s"] - base["results"][key]["median_s"]
                    cells.append(f"{delta / n * 1e6:.1f}")
                else:
                    cells.append("–")
            lines.append(f"| {LABELS[mode]} | " + " | ".join(cells) + " |")
    for mode, row in rows.items():  # a failed row's traceback, where a table cell cannot hold it
        if isinstance(row, str) and "\n" in row and mode != SIDE_BY_SIDE_MODE:
            lines += ["", f"{LABELS[mode]}:", "", "```", row, "```"]
    lines += side_by_side_markdown(rows.get(SIDE_BY_SIDE_MODE), models, heading)
    if memory:
        lines += [
            "",
            f"{heading} Memory",
            "",
            "| row · absolute, no ratio | peak RSS | tensors alive after the run (not parameters) |",
            "|---|---|---|",
        ]
        for mode, row in rows.items():
            if isinstance(row, dict):
                lines.append(
                    f"| {LABELS[mode]} | {row['peak_rss_mb']:.0f} MB | {row['live_tensors']} "
                    f"({row['live_tensor_bytes'] / 1e6:.2f} MB) |"
                )
    return lines


def side_by_side_markdown(row: dict | str | None, models: list[str], heading: str = "##") -> list[str]:
    """The side-by-side row: each configuration against 'nothing watched' in the same process."""
    if row is None:
        return []
    lines = [
        "",
        f"{heading} Side by side: one process under debugpy, configurations taking turns",
        "",
        "The rows above run one after another, so a machine's drift over minutes shows in their ratios. "
        "Here one process switches configuration every 5 timed steps (untimed steps for at least 2 steps and 20 ms after each switch, "
        "the order shuffled each round, the first round a warm-up, rounds repeated until a model has stepped 12 s, so that short steps get more samples, or its rounds took 150 s). "
        "Each round gives a configuration's ratio: its 5 steps' median ÷ the median of 'nothing watched' in the same round. "
        "A cell shows the median step time, the median of those ratios in bold, and their middle half (quartiles) in brackets.",
        "",
    ]
    if isinstance(row, str):
        return lines + ["```", row, "```"]
    lines += [f"| configuration · {RATIO_TO_IDLE} | " + " | ".join(models) + " |", "|---|" + "---|" * len(models)]
    for config in SIDE_BY_SIDE:
        cells = []
        for model in models:
            measured = row["results"][model].get(config)
            if measured is None:
                cells.append(NOT_MEASURED)
                continue
            t = measured["median_s"]
            cells.append(
                f"{t * 1e3:.2f} ms · **{measured['ratio']:.2f}×** ({measured['ratio_q1']:.2f}–{measured['ratio_q3']:.2f})"
            )
        lines.append(f"| {side_by_side_label(config)} | " + " | ".join(cells) + " |")
    lines.append(
        "| rounds · timed steps per configuration | "
        + " | ".join(f"{row['results'][m]['idle']['rounds']} · {row['results'][m]['idle']['steps']}" for m in models)
        + " |"
    )
    stacks = [m for m in models if m.startswith("stack")]
    if stacks:
        lines += [
            "",
            f"| configuration · {PER_LAYER_VS_IDLE} | " + " | ".join(stacks) + " |",
            "|---|" + "---|" * len(stacks),
        ]
        for config in SIDE_BY_SIDE[1:]:
            cells = []
            for model in stacks:
                times, n = row["results"][model], int(model.removeprefix("stack"))
                cells.append(
                    f"{(times[config]['median_s'] - times['idle']['median_s']) / n * 1e6:.1f}"
                    if config in times
                    else "—"
                )
            lines.append(f"| {side_by_side_label(config)} | " + " | ".join(cells) + " |")
    return lines


NOT_MEASURED = "— (its gradients vanish: no never-true threshold)"
"""A side-by-side cell of a configuration not measured on that model (configs.GRADIENTS_VANISH)."""


def side_by_side_label(config: str) -> str:
    return LABELS.get(f"hookscope-{config}") or SIDE_BY_SIDE_ONLY[config]


if __name__ == "__main__":
    raise SystemExit(main())
