"""``hookscope run``: the terminal front end. It does what the editor does, in a terminal.

It listens for the agent like the extension (127.0.0.1, ephemeral port, fresh
token), launches the script under the real debugpy adapter (``justMyCode``
on, plus the rule that lets Hookscope's stop frame through), sends the layer
breakpoints, and on each hit prints the layer, phase, reason and tensor
summaries, then continues. The program's own output goes to the terminal.

This module is the command line (its options and help) and ``main``; the ``--break`` grammar is
``break_spec``, the output ``printer``, and the run itself ``runner``.
"""

from __future__ import annotations

import argparse
import os
import sys

from hookscope.terminal.break_spec import PHASE_ALIASES, SpecError
from hookscope.terminal.printer import Printer
from hookscope.terminal.runner import EXIT_STOPPED_AT_HIT, Runner

EXIT_USAGE = 2

SPEC_HELP = f"""\
breakpoint SPEC syntax:  WHERE[:PHASES] [if CONDITION] [every N | hit N]

  WHERE      a layer's qualified name     layer1.0.conv1
             a glob over qualified names  'layer*.conv1', 'blocks.*.attn'
             a class name (capitalised)   Conv2d
             a source line                model.py:42   (a 'self.x = nn.X(...)' line,
                                          or a call site 'x = self.x(x)' in a forward)
  PHASES     comma-separated: forward_pre (pre), forward (fwd), backward (bwd),
             param_grad (grad); default forward, or backward for gradient conditions
  CONDITION  nonfinite               NaN/+Inf/-Inf in the outputs or gradients
             grad_norm>X | grad_norm<X   exploding / vanishing gradient
             absmax>X                largest |value| above X (fp16/bf16 overflow risk)
             any other Python expression over the hook's locals
             (layer, module, inputs, output, grad_input, grad_output)
  every N    pause on every Nth hit;   hit N   pause on the Nth hit only

examples:
  hookscope run --break layer1.0.conv1 train.py
  hookscope run --break 'layer*.conv1:backward if grad_norm>100' train.py --epochs 1
  hookscope run --break Conv2d:forward --stop-on-hit --json train.py
  hookscope run --break-on-nonfinite --report out/ train.py
  hookscope run --break-on-exploding 100 --break-on-vanishing 1e-7 train.py

exit status: the program's own, {EXIT_STOPPED_AT_HIT} when --stop-on-hit ended the run at a hit,
{EXIT_USAGE} for bad arguments.
"""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: a positive number is needed")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookscope",
        description="PyTorch layer breakpoints in the terminal.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run a script under the debugger with layer breakpoints",
        description="Run a Python script under debugpy with Hookscope; print each layer breakpoint hit.",
        epilog=SPEC_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--break",
        dest="breaks",
        action="append",
        default=[],
        metavar="SPEC",
        help="a layer breakpoint (repeatable); syntax below",
    )
    run.add_argument(
        "--break-on-nonfinite",
        action="store_true",
        help="pause at the first layer that produces NaN/Inf (forward or backward)",
    )
    run.add_argument(
        "--break-on-exploding",
        type=_positive,
        metavar="X",
        help="pause when some parameter's gradient norm goes above X (checked once per step)",
    )
    run.add_argument(
        "--break-on-vanishing",
        type=_positive,
        metavar="Y",
        help="pause when some layer's gradient norm goes below Y (checked once per step)",
    )
    run.add_argument(
        "--phase",
        action="append",
        choices=sorted(PHASE_ALIASES),
        default=None,
        help="default phase(s) of --break specs that name none (repeatable)",
    )
    run.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per line on stdout (program output too, as 'output' events)",
    )
    run.add_argument("--report", metavar="DIR", help="write report.json and index.html of what was seen")
    run.add_argument(
        "--stop-on-hit", action="store_true", help=f"end the run at the first hit (exit status {EXIT_STOPPED_AT_HIT})"
    )
    run.add_argument("--python", default=sys.executable, help="interpreter for the script (default: this one)")
    run.add_argument(
        "--no-just-my-code", dest="just_my_code", action="store_false", help="let the debugger step into libraries"
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="how long to wait for the debugger and the agent to start (default 60)",
    )
    run.add_argument("script", help="the Python script to run")
    run.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "run":
        if not os.path.isfile(args.script):
            parser.error(f"no such script: {args.script}")
        try:
            runner = Runner(args, Printer(args.json))
        except SpecError as exc:
            parser.error(f"--break: {exc}")
        return runner.run()
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
