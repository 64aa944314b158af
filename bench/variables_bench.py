"""How long debugpy's Variables view takes to expand a frame holding a big tensor.

For each case a small program makes one tensor and pauses in
``debugpy.breakpoint()``; a DAP client (``hookscope.terminal.dap_client``, the way
VS Code asks) then times the ``variables`` request of the frame's locals,
which builds every value's text. Two presentations:

- ``hookscope``: Hookscope's bootstrap on ``PYTHONPATH``, so pydevd loads
  its type plugin (one summary line per tensor, stats on a sample above
  256k elements);
- ``debugpy``: the same with ``HOOKSCOPE_TENSOR_VIEW=0``, i.e. debugpy's
  default (``repr`` of the tensor).

Cases: a (4096, 4096) float32 CPU tensor (64 MB) and a (16384, 16384) one
(1 GB). Target: well under 100 ms per request with Hookscope.

Usage: .venv/bin/python bench/variables_bench.py [--rounds 5] [--json] [--cases 4096x4096,16384x16384]
Prints a table of median / max milliseconds per request (first request apart).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "backend"))

from hookscope import bootstrap  # noqa: E402
from hookscope.terminal.dap_client import DapClient  # noqa: E402

TARGET_MS = 100.0
DEADLINE = 600.0

PROGRAM = """
import sys
import debugpy
import torch


def main(rows, cols):
    torch.manual_seed(0)
    big = torch.randn(rows, cols)
    label = "tensor bench"
    debugpy.breakpoint()
    return big, label


main(int(sys.argv[1]), int(sys.argv[2]))
print("done")
"""


def time_variables(script: Path, shape: tuple[int, int], presentation: str, rounds: int) -> dict:
    env = dict(os.environ)
    env.pop("HOOKSCOPE_ADDR", None)  # the type plugin needs no agent
    env["HOOKSCOPE_TENSOR_VIEW"] = "1" if presentation == "hookscope" else "0"
    dap = DapClient.start_adapter(env=env)
    try:
        dap.initialize("hookscope-bench")
        launch = dap.send_request(
            "launch",
            {
                "program": str(script),
                "args": [str(shape[0]), str(shape[1])],
                "python": [sys.executable],
                "console": "internalConsole",
                "justMyCode": True,
                "env": {
                    "PYTHONPATH": bootstrap.pythonpath(os.environ.get("PYTHONPATH")),
                    "HOOKSCOPE_TENSOR_VIEW": env["HOOKSCOPE_TENSOR_VIEW"],
                },
            },
        )
        dap.wait_event("initialized", timeout=DEADLINE)
        dap.request("configurationDone", timeout=DEADLINE)
        launch.result(DEADLINE)
        thread_id = dap.wait_event("stopped", timeout=DEADLINE)["body"]["threadId"]
        frame = dap.top_frame(thread_id, DEADLINE)
        scopes = dap.request("scopes", {"frameId": frame["id"]}, DEADLINE)["scopes"]
        reference = next(s for s in scopes if s["name"].lower().startswith("local"))["variablesReference"]
        times, value = [], ""
        for _ in range(rounds + 1):
            started = time.perf_counter()
            variables = dap.request("variables", {"variablesReference": reference}, DEADLINE)["variables"]
            times.append((time.perf_counter() - started) * 1000.0)
            value = next(v["value"] for v in variables if v["name"] == "big")
        dap.request("continue", {"threadId": thread_id}, DEADLINE)
        dap.wait_event("terminated", timeout=DEADLINE)
    finally:
        dap.close()
    steady = times[1:]
    return {
        "case": f"{shape[0]}x{shape[1]}",
        "presentation": presentation,
        "first_ms": round(times[0], 1),
        "median_ms": round(statistics.median(steady), 1),
        "max_ms": round(max(steady), 1),
        "value": value[:90],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cases", default="4096x4096,16384x16384")
    args = parser.parse_args()
    shapes = [tuple(int(n) for n in case.split("x")) for case in args.cases.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "variables_bench_program.py"
        script.write_text(PROGRAM, encoding="utf-8")
        for shape in shapes:
            for presentation in ("hookscope", "debugpy"):
                rows.append(time_variables(script, shape, presentation, args.rounds))
    if args.json:
        print(json.dumps({"target_ms": TARGET_MS, "rows": rows}))
        return
    print(f"DAP 'variables' of a frame holding one float32 CPU tensor ({args.rounds} rounds after the first)")
    print(f"{'tensor':<13} {'presentation':<12} {'first ms':>9} {'median ms':>10} {'max ms':>8}  value")
    for r in rows:
        print(
            f"{r['case']:<13} {r['presentation']:<12} {r['first_ms']:>9.1f} {r['median_ms']:>10.1f} "
            f"{r['max_ms']:>8.1f}  {r['value']}"
        )
    ours = [r for r in rows if r["presentation"] == "hookscope"]
    ok = all(r["median_ms"] < TARGET_MS for r in ours)
    print(f"target: median < {TARGET_MS:.0f} ms with Hookscope -> {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
