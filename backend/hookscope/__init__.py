"""Hookscope: PyTorch hooks as debugger features.

The public API works with no editor at all; the agent (started by the
editor's bootstrap, by ``python -m hookscope.launch`` or by ``connect()``)
adds layer breakpoints and live summaries inside a debug session.
Heavy modules (torch) load lazily so ``import hookscope`` stays cheap.
"""

from __future__ import annotations

__version__ = "0.1.0"


def connect(addr: str | None = None, token: str | None = None, timeout: float | None = None):
    """Connect this process to the Hookscope editor (attach cases); see ``hookscope.agent.connect``."""
    from .agent import connect as _connect

    return _connect(addr, token, timeout)
