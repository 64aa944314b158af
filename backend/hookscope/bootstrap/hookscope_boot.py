"""Shared by the bootstrap's sitecustomize and pydevd plugin: make ``hookscope`` importable, start the agent.

Kept tiny and free of heavy imports: it runs in every Python process that
inherits the editor's ``PYTHONPATH``.

Which hookscope runs is decided by which bootstrap the editor put on the path:
a bootstrap starts the package it sits in — the one bundled with the extension
(``<extension>/bundled/tool/hookscope``), or the interpreter's own when the
user chose it — never whichever copy happens to come first. The bundled copy's
pure-Python libraries (``<extension>/bundled/libs``, named by ``HOOKSCOPE_LIBS``)
serve only what the interpreter lacks, and never go on ``sys.path``, so the
user's program sees its own packages unchanged.
"""

from __future__ import annotations

import os
import sys

ENV_LIBS = "HOOKSCOPE_LIBS"
"""Folder of the bundled pure-Python libraries (set by the editor with the bundled hookscope)."""

FROM_LIBS_IF_MISSING = ("msgpack",)
"""What the agent imports from outside the standard library and torch (debugpy comes with the debugger)."""


def _here() -> str:
    return os.path.dirname(os.path.abspath(__file__))


def own_package_parent() -> str:
    """The folder holding the hookscope package this bootstrap belongs to."""
    return os.path.dirname(os.path.dirname(_here()))


def use_own_hookscope() -> None:
    """Put this bootstrap's package first for ``import hookscope``, right after the bootstrap folder.

    When that folder is already on ``sys.path`` (an interpreter's site-packages) nothing moves:
    the package there is found in its usual place.
    """
    parent = own_package_parent()
    entries = [os.path.abspath(p or os.curdir) for p in sys.path]
    if parent in entries:
        return
    here = _here()
    sys.path.insert(entries.index(here) + 1 if here in entries else 0, parent)


def load_missing_libraries(libs: str | None) -> None:
    """Import from ``libs`` what the interpreter lacks, then take ``libs`` off ``sys.path`` again.

    The module stays in ``sys.modules`` for the agent; the user's own imports still resolve
    against their environment only.
    """
    if not libs or not os.path.isdir(libs):
        return
    import importlib
    import importlib.util

    for name in FROM_LIBS_IF_MISSING:
        if name in sys.modules or importlib.util.find_spec(name) is not None:
            continue
        sys.path.insert(0, libs)
        try:
            importlib.import_module(name)
        finally:
            sys.path.remove(libs)


def start(origin: str) -> None:
    """Start the agent when ``HOOKSCOPE_ADDR``/``HOOKSCOPE_TOKEN`` ask for it; never raise."""
    if not os.environ.get("HOOKSCOPE_ADDR"):
        return
    try:
        use_own_hookscope()
        load_missing_libraries(os.environ.get(ENV_LIBS))
        from hookscope.link import agent

        agent.start_from_env(origin)
    except Exception as exc:  # the user's program comes first
        print(f"hookscope: the agent did not start ({type(exc).__name__}: {exc})", file=sys.stderr)


def connect(addr: str, token: str, libs: str | None = None) -> None:
    """Attach: start the agent in a running process (the editor calls this through DAP ``evaluate``)."""
    use_own_hookscope()
    load_missing_libraries(libs)
    import hookscope

    hookscope.connect(addr, token)


def ignore_debugpy_warning_about_this_plugin() -> None:
    """Silence debugpy's "incompatible copy of pydevd already imported" when it names only our files.

    In a subprocess debugpy follows (a DDP rank), pydevd loads its plugins, this folder's
    included, before debugpy's vendoring check runs; the check takes our plugin for a foreign
    pydevd and warns in every rank's output. A warning that names any other file still shows.
    """
    import re
    import warnings

    here = re.escape(_here() + os.sep)
    warnings.filterwarnings(
        "ignore",
        category=UserWarning,
        message=r"incompatible copy of pydevd already imported:(\s*" + here + r"[^\n]*)+\s*\Z",
    )


def debugger_will_load() -> bool:
    """Whether this process was started by debugpy, whose plugin loader will start the agent."""
    argv = getattr(sys, "orig_argv", sys.argv)
    return any("debugpy" in arg for arg in argv[:4])
