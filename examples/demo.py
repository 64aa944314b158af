"""`make demo`: the headless tour of Hookscope on the examples, through `hookscope run`.

1. A layer breakpoint on the CNN's `conv2` (backward, every 10th hit): each stop
   prints the layer, the phase, the reason and the gradient summaries.
2. Break on NaN/Inf on examples/nan.py: the run stops in `head.standardize`,
   where the NaN is born, not at the loss.
3. Both runs write a report folder (summaries and images) and say where it is.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPORT = HERE.parent / ".hookscope-report"
HOOKSCOPE = [sys.executable, "-m", "hookscope.terminal.cli", "run"]


def banner(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def run(args: list[str]) -> int:
    print("$ hookscope run " + " ".join(args), flush=True)
    return subprocess.call([*HOOKSCOPE, *args], cwd=HERE)


def main() -> int:
    shutil.rmtree(REPORT, ignore_errors=True)
    banner("A layer breakpoint: conv2's backward, every 10th step")
    status = run(["--break", "conv2:backward every 10", "--break", "conv1:forward hit 1",
                  "--report", str(REPORT / "cnn"), "cnn.py", "--steps", "21"])
    if status != 0:
        print(f"the CNN run ended with status {status}", file=sys.stderr)
        return status
    banner("Break on NaN/Inf: where is the NaN born?")
    status = run(["--break-on-nonfinite", "--stop-on-hit", "--report", str(REPORT / "nan"), "nan.py"])
    if status != 3:  # --stop-on-hit ends with 3 when the breakpoint fired
        print(f"expected the NaN run to stop at a hit (status 3), got {status}", file=sys.stderr)
        return 1
    banner("Reports")
    for name in ("cnn", "nan"):
        print(f"  {REPORT / name / 'index.html'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
