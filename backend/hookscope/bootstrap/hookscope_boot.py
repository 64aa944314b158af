"""Shared by the bootstrap's sitecustomize and pydevd plugin: make ``hookscope`` importable, start the agent.

Kept tiny and free of heavy imports: it runs in every Python process that
inherits the editor's ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import sys


def _ensure_hookscope_importable() -> None:
    # This folder sits inside the hookscope package; the package's parent folder
    # is appended (not prepended) so an installed hookscope keeps precedence.
    try:
        import hookscope  # noqa: F401
    except ImportError:
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if package_parent not in sys.path:
            sys.path.append(package_parent)


def start(origin: str) -> None:
    """Start the agent when ``HOOKSCOPE_ADDR``/``HOOKSCOPE_TOKEN`` ask for it; never raise."""
    if not os.environ.get("HOOKSCOPE_ADDR"):
        return
    try:
        _ensure_hookscope_importable()
        from hookscope import agent

        agent.start_from_env(origin)
    except Exception as exc:  # the user's program comes first
        print(f"hookscope: the agent did not start ({type(exc).__name__}: {exc})", file=sys.stderr)


def ignore_debugpy_warning_about_this_plugin() -> None:
    """Silence debugpy's "incompatible copy of pydevd already imported" when it names only our files.

    In a subprocess debugpy follows (a DDP rank), pydevd loads its plugins, this folder's
    included, before debugpy's vendoring check runs; the check takes our plugin for a foreign
    pydevd and warns in every rank's output. A warning that names any other file still shows.
    """
    import re
    import warnings

    here = re.escape(os.path.dirname(os.path.abspath(__file__)) + os.sep)
    warnings.filterwarnings("ignore", category=UserWarning,
                            message=r"incompatible copy of pydevd already imported:(\s*" + here + r"[^\n]*)+\s*\Z")


def debugger_will_load() -> bool:
    """Whether this process was started by debugpy, whose plugin loader will start the agent."""
    argv = getattr(sys, "orig_argv", sys.argv)
    return any("debugpy" in arg for arg in argv[:4])
