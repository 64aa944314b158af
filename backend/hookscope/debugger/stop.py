"""The frame the debugger stops in when a layer breakpoint fires.

The stop is shown in the user's code: the debugger pauses in a generator frame
whose code carries the user's file and line (``stop_location`` picks them: the
line that called the layer, else the line that created it) and whose locals are
the hook's values (``layer``, ``module``, ``inputs``, ``output`` or ``grad_input``,
``grad_output``, ``reason``, ``stats``). The Call Stack names it for the layer and
phase (``blocks.2.mix · backward``). Hookscope's own frames below it are hidden by
the launch rule ``{"module": "hookscope", "include": false}`` that the editor and
``hookscope run`` add; Step Over from the stop lands on the user's next line.

Without a debugger the breakpoint's action applies: log, raise
``BreakpointHit`` (the only exception Hookscope raises into training), or
call the user's callback with a ``Hit``.
"""

from __future__ import annotations

import keyword
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hookscope.debugger import stop_location
from hookscope.hooks.conditions import HookEvent

log = logging.getLogger("hookscope")

JUST_MY_CODE_HINT = (
    "the layer's code and its callers are all hidden from the debugger (justMyCode or "
    "an exclude rule): set justMyCode to false or include the model's files"
)


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


def _files_filter() -> Callable[[Any], bool] | None:
    """pydevd's "would this frame be hidden" test (justMyCode, rules), or None when nothing is hidden."""
    constants = sys.modules.get("_pydevd_bundle.pydevd_constants")
    if constants is None:
        return None
    try:
        py_db = constants.get_global_debugger()
    except Exception:
        return None
    if py_db is None or not py_db.is_files_filter_enabled:
        return None

    def hidden(frame: Any) -> bool:
        try:
            return bool(py_db.apply_files_filter(frame, frame.f_code.co_filename, False))
        except Exception:
            return False

    return hidden


class StopFrame:
    """A stop ready to pause in: the suspended frame at the user's line, with the hook's locals."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator

    def close(self) -> None:
        self.generator.close()


def _stop_values(event: HookEvent, reason: str, stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The stop frame's locals, in the order the Variables view lists them."""
    values: dict[str, Any] = {"layer": event.layer, "module": event.module}
    if event.phase == "backward":
        values.update(grad_input=event.grad_input, grad_output=event.grad_output)
    elif event.phase == "param_grad":
        values.update(param_name=event.param_name, param=event.extra.get("param"), grad=event.grad)
    else:
        values.update(inputs=event.inputs, output=event.output)
    values.update(reason=reason, stats=stats)
    return values


def _at_nan_origin(event: HookEvent, values: dict[str, Any], hidden: Callable[[Any], bool]) -> Any:
    """Break on NaN/Inf's stop at the user's line whose op made the first non-finite value.

    The frame shows that line with the locals its frame had during the replay, plus the
    layer's values under names the user's frame does not use, plus ``nan_origin`` (the op,
    counts, stack). None when the replay saw no op, or the debugger would hide that line.
    """
    origin = event.extra.get("nan_origin")
    location = getattr(getattr(origin, "site", None), "location", None)
    if origin is None or location is None:
        return None
    shown = {k: v for k, v in origin.site.frame_locals.items() if k.isidentifier() and not keyword.iskeyword(k)}
    for name, value in values.items():
        shown.setdefault(name, value)
    shown["nan_origin"] = origin
    function = origin.site.stack[0].function if origin.site.stack else "forward"
    own = next((f.function for f in origin.site.stack if not f.library), function)
    return stop_location.first_shown(iter([location]), hidden, f"{own} · {origin.site.op} → NaN/Inf", shown)


def prepare(event: HookEvent, reason: str, stats: list[dict[str, Any]], index: Any) -> StopFrame | None:
    """The frame to pause in, or None when the debugger would hide every place to show the stop.

    Call it from the hook (forward stops are shown at the caller's line, read from the stack).
    ``index`` is the model's ``ModelIndex``: source lines for backward and parameter stops.
    """
    try:
        hidden = _files_filter() or (lambda frame: False)
        values = _stop_values(event, reason, stats)
        generator = _at_nan_origin(event, values, hidden)
        if generator is None:
            name = stop_location.frame_name(event.layer, event.module, event.phase, event.param_name)
            generator = stop_location.first_shown(
                stop_location.candidates(event.layer, event.module, event.phase, index), hidden, name, values
            )
    except Exception:  # a hook never raises into training: no stop rather than a crash
        log.warning("hookscope: cannot build the stop frame for %s", event.layer, exc_info=True)
        return None
    return StopFrame(generator) if generator is not None else None


def _make_thread_debuggable(debugpy: Any) -> None:
    """Threads created from C (CUDA autograd workers) are unknown to pydevd until told."""
    thread = threading.current_thread()
    if isinstance(thread, threading._DummyThread) or (sys.gettrace() is None and thread is not threading.main_thread()):
        try:
            debugpy.debug_this_thread()
        except Exception:
            pass


def pause(stop: StopFrame) -> None:
    """Pause the debugger in ``stop``'s frame; returns when the user continues.

    ``pydevd.settrace`` with ``stop_at_frame`` is the call ``debugpy.breakpoint()`` makes,
    naming the frame itself: in a subprocess debugpy follows (a DDP rank under torchrun)
    pydevd does not know debugpy's files as its own and would pick debugpy's wrapper.
    """
    debugpy = _debugpy()
    pydevd = sys.modules.get("pydevd")
    if debugpy is None or pydevd is None or not debugpy.is_client_connected():
        stop.close()
        return
    _make_thread_debuggable(debugpy)
    pydevd.settrace(
        suspend=True,
        trace_only_current_thread=True,
        patch_multiprocessing=False,
        stop_at_frame=stop.generator.gi_frame,
        notify_stdin=False,
    )
    for _ in stop.generator:  # paused in the generator's first line: the user's line
        pass
