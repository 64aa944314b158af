"""Where in the user's code a layer stop is shown, and the frame that shows it there.

A stop pauses in a frame of its own whose code object carries the user's file and
line (see ``stop.py``), so the editor opens the user's code, not Hookscope's. The
line is, in order of preference:

* inside the layer's call (a forward hook): the line that called it, read from the
  stack (the first frame above torch's ``_call_impl`` outside torch, Hookscope and
  the debugger: usually the parent's ``forward``);
* otherwise (a backward hook, a stop after break on NaN's replay): the line of an
  ancestor's ``forward`` that calls the layer, read from the source as layer
  breakpoints on call lines are; then the line that created the layer;
* a parameter's gradient: the line that created the layer;
* last, the running line of the user's code (``loss.backward()``).

A candidate the debugger would hide (justMyCode on a library file, an exclude rule)
is skipped for the next one.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

_INTERNAL_PACKAGES = (
    "torch",
    "hookscope",
    "debugpy",
    "pydevd",
    "_pydevd_bundle",
    "_pydev_bundle",
    "_pydevd_frame_eval",
    "_pydev_runfiles",
)


@dataclass(frozen=True)
class Location:
    file: str
    line: int
    globals: dict[str, Any]


def _package_dirs() -> tuple[str, ...]:
    dirs = []
    for name in _INTERNAL_PACKAGES:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file:
            dirs.append(os.path.dirname(os.path.realpath(file)) + os.sep)
    return tuple(dirs)


_internal_cache: dict[str, bool] = {}


def is_internal(file: str) -> bool:
    """Whether ``file`` is torch's, Hookscope's, the debugger's, or not a real file (``<string>``)."""
    known = _internal_cache.get(file)
    if known is None:
        known = not file or file.startswith("<") or os.path.realpath(file).startswith(_package_dirs())
        _internal_cache[file] = known
    return known


def _stack_locations(start: Any = None) -> Iterator[Location]:
    """Every frame from ``start`` (default: the caller) outward that is the user's, innermost first."""
    frame = start if start is not None else sys._getframe(1)
    while frame is not None:
        file = frame.f_code.co_filename
        if not is_internal(file):
            yield Location(file, frame.f_lineno or frame.f_code.co_firstlineno, frame.f_globals)
        frame = frame.f_back


_MODULE_PY = torch.nn.Module.__call__.__code__.co_filename


def module_calls(start: Any) -> Iterator[tuple[torch.nn.Module, Any]]:
    """(module, frame) of the module calls running on this thread from ``start`` outward, innermost first.

    Read from torch's ``Module._call_impl`` frames (their ``self``, ``args``, ``kwargs``); only on
    rare paths (a stop, a sentinel installed mid-call), never per step.
    """
    frame = start
    while frame is not None:
        if frame.f_code.co_filename == _MODULE_PY:
            names = frame.f_locals
            module = names.get("self")
            if isinstance(module, torch.nn.Module) and "args" in names and "kwargs" in names:
                yield module, frame
        frame = frame.f_back


def _calling_locations(module: Any) -> Iterator[Location]:
    """The lines calling ``module`` right now, when the stop happens inside its call (a forward hook)."""
    for running, frame in module_calls(sys._getframe(1)):
        if running is module:
            yield from _stack_locations(frame.f_back)
            return


def globals_of(file: str) -> dict[str, Any]:
    """The globals of the loaded module defined in ``file``, so the console resolves its names."""
    wanted = os.path.realpath(file)
    for module in list(sys.modules.values()):
        module_file = getattr(module, "__file__", None)
        if module_file and os.path.realpath(module_file) == wanted:
            return vars(module)
    return {"__name__": "__hookscope_stop__", "torch": torch}


def _source_locations(layer: str, phase: str, index: Any) -> Iterator[Location]:
    """The parent's line calling the layer (not for a parameter's gradient), then its creating line."""
    if index is None:
        return
    found = [index.call_site(layer)] if phase != "param_grad" else []
    found.append(index.locations().get(layer))
    for place in found:
        if place is not None and not is_internal(place[0]):
            yield Location(place[0], place[1], globals_of(place[0]))


def candidates(layer: str, module: Any, phase: str, index: Any) -> Iterator[Location]:
    """Locations to show a stop at, best first (see the module docstring)."""
    yield from _calling_locations(module)
    yield from _source_locations(layer, phase, index)
    yield from _stack_locations(sys._getframe(1))


def frame_name(layer: str, module: Any, phase: str, param_name: str | None) -> str:
    """The Call Stack's name for the stop frame: ``blocks.2.mix · backward``."""
    who = layer or type(module).__name__
    what = {"forward_pre": "before forward", "param_grad": f"{param_name or 'parameter'}.grad"}
    return f"{who} · {what.get(phase, phase)}"


def stop_generator(location: Location, name: str, values: dict[str, Any]) -> types.GeneratorType:
    """A suspended generator whose frame is at ``location`` with ``values`` as its locals.

    The function is compiled from ``def stop(<names>): yield`` placed on the location's
    line and given the location's filename and globals: the debugger shows that file and
    line, the Variables view shows ``values``, and the console evaluates against them and
    the user's module globals. A generator, so its frame exists before it runs and the
    debugger can be told to stop in it.
    """
    # The body stays on the def line: on a line of its own it would move the stop down one.
    source = "\n" * (location.line - 1) + f"def stop({', '.join(values)}): yield\n"
    module_code = compile(source, location.file, "exec", dont_inherit=True)
    code = next(c for c in module_code.co_consts if isinstance(c, types.CodeType))
    renamed: dict[str, Any] = {"co_name": name}
    if sys.version_info >= (3, 11):
        renamed["co_qualname"] = name
    function = types.FunctionType(code.replace(**renamed), location.globals, name)
    return function(**values)


def first_shown(
    locations: Iterator[Location], hidden: Callable[[Any], bool], name: str, values: dict[str, Any]
) -> types.GeneratorType | None:
    """The stop generator at the first location whose frame the debugger would show."""
    for location in locations:
        generator = stop_generator(location, name, values)
        if not hidden(generator.gi_frame):
            return generator
        generator.close()
    return None
