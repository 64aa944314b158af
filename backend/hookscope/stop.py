"""The frame the debugger stops in when a layer breakpoint fires.

The debugger pauses in the ``_stop_*`` function that calls ``_break_in``, so
its parameters are the locals the user sees in the Variables view and the
debug console (``layer``,
``module``, ``inputs``, ``output`` or ``grad_input``, ``grad_output``,
``reason``, ``stats``). This frame lives in the hookscope package: with
``justMyCode`` on, pydevd skips it unless the launch configuration has
``"rules": [{"module": "hookscope", "include": true}]`` (the editor and
``hookscope run`` add it). ``stop_filtered()`` asks pydevd whether the stop
would be skipped, so the engine can say so instead of failing silently.

Without a debugger the breakpoint's action applies: log, raise
``BreakpointHit`` (the only exception Hookscope raises into training), or
call the user's callback with a ``Hit``.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from hookscope.conditions import HookEvent

JUST_MY_CODE_HINT = ('add "rules": [{"module": "hookscope", "include": true}] to the launch '
                     "configuration, or set justMyCode to false")


class BreakpointHit(RuntimeError):
    """Raised into training by a breakpoint whose action is 'raise' (no debugger attached)."""

    def __init__(self, reason: str, layer: str, phase: str, stats: list[dict[str, Any]]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.layer = layer
        self.phase = phase
        self.stats = stats


@dataclass
class Hit:
    """What a user callback receives: the same names the stop frame has."""
    breakpoint: str
    layer: str
    module: Any
    phase: str
    reason: str
    step: int
    stats: list[dict[str, Any]]
    inputs: Any = None
    output: Any = None
    grad_input: Any = None
    grad_output: Any = None
    param_name: str | None = None
    grad: Any = None
    origin: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _debugpy() -> Any:
    # Never import debugpy ourselves: if the process is debugged it is loaded.
    return sys.modules.get("debugpy")


def debugger_connected() -> bool:
    """Whether a debugger client is attached through debugpy."""
    debugpy = _debugpy()
    if debugpy is None:
        return False
    try:
        return bool(debugpy.is_client_connected())
    except Exception:
        return False


def stop_filtered() -> bool:
    """Whether pydevd would skip a stop in this module (justMyCode without a hookscope rule)."""
    constants = sys.modules.get("_pydevd_bundle.pydevd_constants")
    if constants is None:
        return False
    try:
        py_db = constants.get_global_debugger()
        if py_db is None or not py_db.is_files_filter_enabled:
            return False
        frame = sys._getframe()  # a frame of this module, like the _stop_* frames
        return bool(py_db.apply_files_filter(frame, frame.f_code.co_filename, False))
    except Exception:
        return False


def _make_thread_debuggable(debugpy: Any) -> None:
    """Threads created from C (CUDA autograd workers) are unknown to pydevd until told."""
    thread = threading.current_thread()
    if isinstance(thread, threading._DummyThread) or (sys.gettrace() is None
                                                     and thread is not threading.main_thread()):
        try:
            debugpy.debug_this_thread()
        except Exception:
            pass


def pause(event: HookEvent, reason: str, stats: list[dict[str, Any]]) -> None:
    """Pause the debugger in a frame named for the user; returns when the user continues."""
    debugpy = _debugpy()
    if debugpy is None:
        return
    _make_thread_debuggable(debugpy)
    if event.phase == "backward":
        _stop_backward(event.layer, event.module, event.grad_input, event.grad_output, reason, stats)
    elif event.phase == "param_grad":
        _stop_param_grad(event.layer, event.module, event.param_name, event.extra.get("param"),
                         event.grad, reason, stats)
    else:
        _stop_forward(event.layer, event.module, event.inputs, event.output, reason, stats)


def _break_in() -> None:
    """``debugpy.breakpoint()``, pausing in the caller's frame (one of the ``_stop_*`` frames below).

    ``debugpy.breakpoint()`` pauses in the first caller that is not a debugger file. In a
    subprocess debugpy follows (a DDP rank under torchrun, a child script), pydevd does not
    know debugpy's own files as its own, so that caller is debugpy's ``wrapper``, which
    justMyCode hides: nothing pauses. Naming the frame works in every process. (The same
    call debugpy makes, to pydevd, which is loaded whenever a debugger is attached.)
    """
    pydevd = sys.modules.get("pydevd")
    debugpy = _debugpy()
    if pydevd is None or not hasattr(pydevd, "settrace"):
        debugpy.breakpoint()
        return
    if not debugpy.is_client_connected():
        return
    pydevd.settrace(suspend=True, trace_only_current_thread=True, patch_multiprocessing=False,
                    stop_at_frame=sys._getframe(1), notify_stdin=False)


# The three frames below are what the user sees. Keep their parameters named
# for the user and their bodies to the one call.

def _stop_forward(layer: str, module: Any, inputs: Any, output: Any, reason: str,
                  stats: list[dict[str, Any]]) -> None:
    _break_in()
    return  # paused here: inspect layer, module, inputs, output, reason, stats


def _stop_backward(layer: str, module: Any, grad_input: Any, grad_output: Any, reason: str,
                   stats: list[dict[str, Any]]) -> None:
    _break_in()
    return  # paused here: inspect layer, module, grad_input, grad_output, reason, stats


def _stop_param_grad(layer: str, module: Any, param_name: str | None, param: Any, grad: Any,
                     reason: str, stats: list[dict[str, Any]]) -> None:
    _break_in()
    return  # paused here: inspect layer, module, param_name, param, grad, reason, stats
