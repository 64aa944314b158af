"""Hookscope: PyTorch hooks as debugger features.

The public API works with no editor at all; the agent (started by the
editor's bootstrap, by ``python -m hookscope.launch`` or by ``connect()``)
adds layer breakpoints and live summaries inside a debug session.
Heavy modules (torch) load lazily so ``import hookscope`` stays cheap.
"""

from __future__ import annotations

import os

__version__ = "0.1.0"

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""Hookscope's own source folder, every room included: frames and calls from here are never the user's."""


def connect(addr: str | None = None, token: str | None = None, timeout: float | None = None):
    """Connect this process to the Hookscope editor (attach cases); see ``hookscope.link.agent.connect``."""
    from hookscope.link.agent import connect as _connect

    return _connect(addr, token, timeout)


# ---- the Python API, loaded on first use so `import hookscope` never imports torch
# (listed here rather than read from hookscope.api.__all__, which would import it; test_api pins them equal)
_API_NAMES = frozenset(
    (
        "ActivationStats",
        "AttentionCapture",
        "Capture",
        "GradCheck",
        "GradEvent",
        "GradientError",
        "GradientWarning",
        "HookSet",
        "Intervention",
        "LayerStats",
        "NonFiniteError",
        "NonFiniteEvent",
        "NonFiniteGuard",
        "activation_stats",
        "capture",
        "capture_attention",
        "grad_cam",
        "grad_check",
        "grad_flow",
        "grad_norms",
        "input_noise",
        "intervene",
        "list_interventions",
        "live_hook_count",
        "mean_ablate",
        "remove_all",
        "scale_output",
        "scope",
        "select_modules",
        "stop_on_nonfinite",
        "zero_channels",
    )
)
_LAZY_SUBMODULES = frozenset(("api", "visuals"))


def __getattr__(name: str):
    if name in _API_NAMES:
        from . import api

        return getattr(api, name)
    if name == "list_hooks":
        from hookscope.hooks.inventory import list_hooks

        return list_hooks
    if name in _LAZY_SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'hookscope' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API_NAMES | _LAZY_SUBMODULES | {"list_hooks"})
