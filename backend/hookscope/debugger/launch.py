"""``python -m hookscope.launch [--addr HOST:PORT] [--token T] script.py args…``: run a script with the agent.

The script runs as ``__main__`` exactly as ``python script.py args…`` would
(``sys.argv``, ``sys.path[0]``), after the agent was started from the
arguments or from ``HOOKSCOPE_ADDR``/``HOOKSCOPE_TOKEN``. ``-m module`` runs
a module instead of a file.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from hookscope.link import agent


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m hookscope.launch",
        description="Run a Python script (or -m module) with the Hookscope agent connected to the editor.",
    )
    parser.add_argument("--addr", help=f"editor address host:port (default ${agent.ENV_ADDR})")
    parser.add_argument("--token", help=f"session token (default ${agent.ENV_TOKEN})")
    parser.add_argument("-m", dest="module", help="run a library module as a script")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="script.py and its arguments")
    args = parser.parse_args(argv)
    if not args.module and not args.target:
        parser.error("a script (or -m module) to run is needed")
    return args


def main(argv: list[str] | None = None) -> None:
    args = _parse(sys.argv[1:] if argv is None else argv)
    addr = args.addr or os.environ.get(agent.ENV_ADDR)
    token = args.token if args.token is not None else os.environ.get(agent.ENV_TOKEN)
    if not addr or token is None:
        print(
            "hookscope.launch: no editor address/token (--addr/--token or "
            f"{agent.ENV_ADDR}/{agent.ENV_TOKEN}); running without Hookscope",
            file=sys.stderr,
        )
    else:
        agent.start(addr, token)
    if args.module:
        sys.argv = [args.module, *args.target]
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        return
    script, *rest = args.target
    sys.argv = [script, *rest]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
