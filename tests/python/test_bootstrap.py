"""The bootstrap folder on PYTHONPATH: what it changes in every Python process that inherits it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hookscope import bootstrap

PLUGIN = Path(bootstrap.__file__).parent / "pydevd_plugins" / "extensions" / "pydevd_plugin_hookscope.py"
WARN = ("import warnings\n"
        "warnings.warn('incompatible copy of pydevd already imported:\\n {{}}'.format('\\n  '.join({files!r})))\n")


def _stderr_of(files: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSCOPE_")}
    env["PYTHONPATH"] = bootstrap.pythonpath(None)
    result = subprocess.run([sys.executable, "-c", WARN.format(files=files)], env=env,
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stderr


def test_debugpy_warning_that_names_only_our_plugin_is_silenced():
    # What debugpy's vendoring check says in a subprocess it follows (a DDP rank).
    assert "incompatible copy" not in _stderr_of([str(PLUGIN), str(PLUGIN.parent / "types" / "x.py")])


def test_debugpy_warning_about_a_real_foreign_pydevd_still_shows():
    stderr = _stderr_of([str(PLUGIN), "/opt/other/pydevd.py"])
    assert "incompatible copy of pydevd already imported" in stderr and "/opt/other/pydevd.py" in stderr
