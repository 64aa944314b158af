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

The root's own per-step work rides the counter too (``ride``): the engine's step hook and break on
NaN/Inf's root check run before and after the counted call instead of as root hooks. So the model
shows no Hookscope hook, and the step is recorded before the root's own forward pre-hooks (a
replay calls the root through them again: recorded after them, their change of the inputs was
made twice). Speed is about even: two root hooks that do nothing cost ~5 µs a forward under
debugpy on Python 3.11 (torch's general call path), and riding measured within the spread of
that (the bench's stack of ten, bench/HISTORY.md). Should the slot be taken later
(``model.compile()`` after Hookscope found the model), ``heal`` hands each rider back to its
owner, which hooks the root instead.
"""

from __future__ import annotations

import sys
import weakref
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
_RIDERS = "hookscope_riders"
"""The attribute holding the counter's ``Riders``."""

Before = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]
"""``before(module, args, kwargs)``: a forward pre-hook's signature (``with_kwargs``); its result is ignored."""
After = Callable[[Any, tuple[Any, ...], dict[str, Any], Any], Any]
"""``after(module, args, kwargs, output)``: a forward hook's signature (``with_kwargs``); its result is ignored."""


class Riders:
    """What runs around each counted call: every ``before``, the call, every ``after`` (read after
    the call, so that a rider added while the call runs sees its end)."""

    __slots__ = ("on", "before", "after", "_rides")

    def __init__(self) -> None:
        self._rides: list[Ride] = []
        self._sync()

    def add(self, ride: Ride, first: bool) -> None:
        if first:
            self._rides.insert(0, ride)
        else:
            self._rides.append(ride)
        self._sync()

    def discard(self, ride: Ride) -> None:
        if ride in self._rides:
            self._rides.remove(ride)
            self._sync()

    def rides(self) -> list[Ride]:
        return list(self._rides)

    def _sync(self) -> None:
        # tuples read by the counter in every step: no method call there
        self.before = tuple(r.before for r in self._rides if r.before is not None)
        self.after = tuple(r.after for r in self._rides if r.after is not None)
        self.on = bool(self._rides)


class Ride:
    """One owner's functions on a model's counter; ``remove()`` as a hook handle's."""

    def __init__(self, riders: Riders, before: Before | None, after: After | None, lost: Callable[[], None]) -> None:
        self._riders = riders
        self.before = before
        self.after = after
        self.lost = lost
        """Called by ``heal`` when the counter left the model: the owner hooks the root instead."""

    def remove(self) -> None:
        self._riders.discard(self)


_ridden: dict[int, tuple[weakref.ref[nn.Module], Riders]] = {}
"""Models with riders on their counter, for ``heal``, by id. A plain dict of weak references, not a
WeakKeyDictionary: ``heal`` runs at optimizer steps, and that class's iteration is Python code,
each of its calls traced under a debugger."""


def _remember(model: nn.Module, riders: Riders) -> None:
    key = id(model)

    def forget(ref: weakref.ref[nn.Module]) -> None:
        if _ridden.get(key, (None,))[0] is ref:  # not a later model given the same id
            del _ridden[key]

    _ridden[key] = (weakref.ref(model, forget), riders)


def install(model: nn.Module, model_id: str, steps: dict[str, int], replay: Replaying) -> None:
    """Count ``model``'s calls in ``steps[model_id]``, not those made while ``replay.depth`` is set
    (``counts`` says where it could not: the step hook counts there)."""
    if not hasattr(type(model), _ATTRIBUTE):
        return  # a torch before 2.1: Module.__call__ has no such slot
    if model.__dict__.get(_ATTRIBUTE) is not None:
        return  # compiled in place, or counted already
    riders = Riders()
    count_step = _counter(model, steps, model_id, replay, riders)
    setattr(count_step, _MARK, model_id)
    setattr(count_step, _RIDERS, riders)
    model.__dict__[_ATTRIBUTE] = count_step
    if _in_uncounted_call(model, count_step.__code__):
        steps[model_id] = steps.get(model_id, 0) + 1


def _counter(
    model: nn.Module, steps: dict[str, int], model_id: str, replay: Replaying, riders: Riders
) -> Callable[..., Any]:
    call_impl = model._call_impl

    def count_step(*args: Any, **kwargs: Any) -> Any:
        if replay.depth:
            return call_impl(*args, **kwargs)
        steps[model_id] = steps.get(model_id, 0) + 1
        if not riders.on:
            return call_impl(*args, **kwargs)
        for before in riders.before:
            before(model, args, kwargs)
        output = call_impl(*args, **kwargs)
        for after in riders.after:
            after(model, args, kwargs, output)
        return output

    return count_step


def ride(
    model: nn.Module, before: Before | None, after: After | None, lost: Callable[[], None], first: bool = False
) -> Ride | None:
    """Run ``before``/``after`` around each counted call of ``model`` (``first``: before the other
    riders); None when no counter counts its calls (the caller hooks the root instead)."""
    riders = getattr(model.__dict__.get(_ATTRIBUTE), _RIDERS, None)
    if riders is None:
        return None
    handle = Ride(riders, before, after, lost)
    riders.add(handle, first)
    _remember(model, riders)
    return handle


def heal() -> None:
    """Hand back the rides of every model whose counter left its slot (``model.compile()`` took it)."""
    for key, (ref, riders) in list(_ridden.items()):
        model = ref()
        if model is None or getattr(model.__dict__.get(_ATTRIBUTE), _RIDERS, None) is riders:
            continue
        del _ridden[key]
        for handle in riders.rides():
            riders.discard(handle)
            handle.lost()


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
        _ridden.pop(id(model), None)


def counts(model: nn.Module, model_id: str) -> bool:
    """Whether the counter counts ``model``'s calls now (the step hook then does not)."""
    return getattr(model.__dict__.get(_ATTRIBUTE), _MARK, None) == model_id


def compiled_call(module: nn.Module) -> Callable[..., Any] | None:
    """The module's compiled call implementation (``module.compile()``), the step counter not counting as one."""
    call = getattr(module, _ATTRIBUTE, None)
    return None if call is None or getattr(call, _MARK, None) is not None else call
