"""Each model's forwards counted from the moment Hookscope knows the model, with no hook on it.

A hit's step is the program's own step only if every forward was counted, also those before the
first breakpoint or watch (a breakpoint added while paused mid-run, the usual way to use a
debugger). A forward pre-hook would cost nothing-watched runs torch's slow call path on the root
each step and show in the model's hooks; instead the counter is the root's ``_compiled_call_impl``,
which ``Module.__call__`` calls in place of ``_call_impl`` when set (torch 2.1+): one Python call a
step. ``Module.__getstate__`` leaves that attribute out, so copies and pickles of the model never
carry it. A model compiled in place (``model.compile()``) has its own there: it is left alone, and
the root's step hook counts while something is watched, as on a torch without the attribute.

A model found at its first forward (discovery's first-forward hook runs inside that call) is
installed too late for the call in progress: ``install`` counts it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # imported by discovery, which runs before the program imports torch
    from torch import nn


class Replaying(Protocol):
    """What says a step is being replayed (``hooks.conditions.REPLAY``; not imported here, see above)."""

    depth: int


_ATTRIBUTE = "_compiled_call_impl"
_MARK = "hookscope_counts_steps_of"
"""The attribute naming the model id on the counter function."""


def install(model: nn.Module, model_id: str, steps: dict[str, int], replay: Replaying) -> None:
    """Count ``model``'s calls in ``steps[model_id]``, not those made while ``replay.depth`` is set
    (``counts`` says where it could not: the step hook counts there)."""
    if not hasattr(type(model), _ATTRIBUTE):
        return  # a torch before 2.1: Module.__call__ has no such slot
    if model.__dict__.get(_ATTRIBUTE) is not None:
        return  # compiled in place, or counted already
    count_step = _counter(model._call_impl, steps, model_id, replay)
    setattr(count_step, _MARK, model_id)
    model.__dict__[_ATTRIBUTE] = count_step
    if _in_uncounted_call(model, count_step.__code__):
        steps[model_id] = steps.get(model_id, 0) + 1


def _counter(
    call_impl: Callable[..., Any], steps: dict[str, int], model_id: str, replay: Replaying
) -> Callable[..., Any]:
    def count_step(*args: Any, **kwargs: Any) -> Any:
        if not replay.depth:
            steps[model_id] = steps.get(model_id, 0) + 1
        return call_impl(*args, **kwargs)

    return count_step


def _in_uncounted_call(model: nn.Module, counter: CodeType) -> bool:
    """Whether this thread is inside a call of ``model`` that no counter (``counter``: their code) counted."""
    call_impl = type(model)._call_impl.__code__
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is call_impl and frame.f_locals.get("self") is model:
            return frame.f_back is None or frame.f_back.f_code is not counter
        frame = frame.f_back
    return False


def remove(model: nn.Module) -> None:
    """Take the counter off (nothing when another call implementation took its place)."""
    if getattr(model.__dict__.get(_ATTRIBUTE), _MARK, None) is not None:
        del model.__dict__[_ATTRIBUTE]


def counts(model: nn.Module, model_id: str) -> bool:
    """Whether the counter counts ``model``'s calls now (the step hook then does not)."""
    return getattr(model.__dict__.get(_ATTRIBUTE), _MARK, None) == model_id


def compiled_call(module: nn.Module) -> Callable[..., Any] | None:
    """The module's compiled call implementation (``module.compile()``), the step counter not counting as one."""
    call = getattr(module, _ATTRIBUTE, None)
    return None if call is None or getattr(call, _MARK, None) is not None else call
