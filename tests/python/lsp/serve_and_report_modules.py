"""Runs the language server and, at exit, writes whether torch was imported.

Used by test_robustness.py: the server must answer requests without ever
importing torch. The report goes to the file named by HOOKSCOPE_TEST_MODULES_OUT.
"""

import atexit
import json
import os
import runpy
import sys


def _report() -> None:
    with open(os.environ["HOOKSCOPE_TEST_MODULES_OUT"], "w") as out:
        json.dump({"torch": "torch" in sys.modules, "hookscope.lsp.server": "hookscope.lsp.server" in sys.modules}, out)


atexit.register(_report)
runpy.run_module("hookscope.lsp", run_name="__main__")
