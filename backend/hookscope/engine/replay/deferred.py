"""Value conditions on many layers, checked once per step, then an exact replay of a step that hit.

This module decides which breakpoints take this path and holds them by model (``DeferredValues``);
a layer's hooks are ``deferred_layers.py``, a phase's values ``deferred_values.py``, a model
root's recording and replays ``deferred_recorder.py``, the replay frame ``frame.py``.

Why not check every call
    A value condition (NaN/Inf, abs-max above, gradient norm above or below)
    on every layer through the exact path costs a Python hook chain per layer
    (``GradTap``'s pre/post hooks and tensor hooks, the cheap reject, a host sync
    per call, the kept output): 35-50 µs per layer per step under a debugger,
    1.3-2.7x a training step. Hits are rare, so, like break on NaN/Inf
    (nonfinite.py), the steady state only asks "did any call of this step
    hold?" and the exact answer, "which call first, with what values?", comes
    from replaying that one step.

Steady state (per watched layer, then once per step per model)
    * The layer's forward hook keeps a reference to each tensor the condition
      looks at (the output; the inputs too for NaN/Inf) and hooks the output's
      gradient when the backward phase is watched; a forward-pre hook hooks the
      inputs' gradients (before the layer may change them in place, as GradTap
      does). Those tensor hooks keep a reference to each gradient. Nothing
      syncs per call: every ``FLUSH_COUNT`` tensors (or ``FLUSH_BYTES``) one
      ``_foreach_norm`` (the inf-norm for abs-max and NaN/Inf, which carries
      NaN and Inf and cannot overflow; the 2-norm for gradient norms) reduces
      them on their device, so memory stays bounded. A large CPU tensor is
      reduced as it is recorded instead (``PROMPT_MIN_NUMEL``): read later,
      out of cache, it costs several times more; so is every CPU tensor of a
      phase that has few (``FEW_REDUCTIONS``). Those values are written with
      ``out=`` into the phase's preallocated float32 slots. A backward whose
      gradients are small (``COLLECT_MAX_BYTES``) collects them through a
      C-level hook (``list.append``: no Python frame per gradient) and reduces
      them at its end; a gradient changed in place by then counts as uncertain.
    * At the end of the root's forward (its forward hook) the forward values,
      and at the end of the backward (a callback queued by the first gradient
      hook) the backward values, are read in one transfer per breakpoint:
      one host sync. The root's forward-pre keeps what a replay needs
      (``step_snapshot``): inputs by reference, RNG state, a copy of the buffers.
    * The per-call test is a superset of the exact one: the same value, compared
      in float64 (gradient norms with a relative margin of ``NORM_MARGIN`` for
      the fused kernel's rounding), NaN counted as a possible hit, a call of k
      outputs tested per output against the threshold divided by sqrt(k).
      Tensors of an unusual kind (integers, sparse, empty) are decided at once
      with the exact path's own test.

On a possible hit: exact replay
    The step is replayed from the root's snapshot (forward; for a backward value
    the forward and then the backward from the root output with the gradients it
    received) with the breakpoint's exact hooks installed for that replay only.
    They stop in the first call whose condition holds, with the same locals,
    reason and stop location as the exact path (the stop frame is built inside
    the replay's hook); the debugger pauses inside the replay, which then runs to
    its end, and the step's state is put back. The replay's own values are
    checked too: when they say "no hit" as well, the suspicion was a rounding
    margin or a NaN the exact test ignores; when they differ (the step is not
    reproducible: state outside the model, a nondeterministic kernel, a loss that
    does not flow through the model's output) a notice says so.

Kept on the exact path
    Python-expression conditions, hit counts, breakpoints on fewer than
    ``DEFER_MIN_LAYERS`` layers, the ``param_grad`` phase, and any call of a
    watched layer made outside its root's forward (the program calling
    ``model.encoder`` directly): those calls run the exact test (and GradTap)
    inline, since no snapshot exists to replay them from.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import nn

from hookscope.engine.replay.deferred_layers import LayerHooks
from hookscope.engine.replay.deferred_recorder import Recorder
from hookscope.engine.replay.deferred_values import Track
from hookscope.hooks.conditions import Condition, HookEvent

if TYPE_CHECKING:
    from hookscope.engine.breakpoints import Breakpoint
    from hookscope.hooks.grad_tap import GradTap

log = logging.getLogger("hookscope")

DEFERRED_KINDS = frozenset({"nonfinite", "absmax_above", "grad_norm_above", "grad_norm_below"})
"""Conditions whose value a device computes: these can be checked once per step."""
DEFERRED_PHASES = ("forward_pre", "forward", "backward")
DEFER_MIN_LAYERS = 4
"""A value condition on this many layers or more takes the deferred path."""


def deferrable(condition: Condition, hit_count: int | None, every: int | None, layers: int) -> bool:
    """Whether a breakpoint's value condition is checked once per step (its deferrable phases)."""
    return condition.kind in DEFERRED_KINDS and hit_count is None and every is None and layers >= DEFER_MIN_LAYERS


def _describe(condition: Condition) -> str:
    if condition.kind == "nonfinite":
        return "NaN/Inf"
    what = {"absmax_above": "abs-max >", "grad_norm_above": "gradient norm >", "grad_norm_below": "gradient norm <"}[
        condition.kind
    ]
    return f"{what} {condition.threshold:g}"


ExactFn = Callable[["Breakpoint", HookEvent, Any, Any], None]
ExactHooksFn = Callable[["Breakpoint", str, tuple[str, ...]], list[Callable[[], Any]]]
TapFn = Callable[["Breakpoint", str, str, nn.Module], "GradTap"]
KeepOutputsFn = Callable[[list[tuple[str, "Breakpoint"]]], AbstractContextManager[None]]


@dataclass
class DeferredHooks:
    """What the deferred path needs from the exact one (LayerBreakpoints supplies it)."""

    exact: ExactFn
    """Run the exact test and fire for one call (``produced``, ``received`` as ``Condition.rejects`` takes them)."""
    exact_hooks: ExactHooksFn
    """Install a breakpoint's exact hooks for some phases on one model's layers; returns their removers."""
    make_tap: TapFn
    notice: Callable[[str, str, str], None]
    step_of: Callable[[str], int]
    keep_outputs: KeepOutputsFn = field(default=lambda entries: contextlib.nullcontext())


class DeferredValues:
    """Every deferred breakpoint of one process, by model."""

    def __init__(self, hooks: DeferredHooks) -> None:
        self._hooks = hooks
        self.recorders: dict[str, Recorder] = {}
        self._reported: set[str] = set()

    @property
    def hook_count(self) -> int:
        return sum(len(r.handles) for r in self.recorders.values())

    def add(
        self, bp: Breakpoint, phases: Sequence[str], model_id: str, root: nn.Module, layers: list[tuple[str, nn.Module]]
    ) -> None:
        """Watch ``layers`` of one model for ``bp`` (its hooks go into ``bp.handles``)."""
        recorder = self.recorders.get(model_id)
        if recorder is None:
            recorder = self.recorders[model_id] = Recorder(model_id, root, self)
        track = Track(bp, phases, recorder)
        recorder.tracks.append(track)
        recorder.backward = recorder.backward or track.backward
        for name, module in layers:
            bp.handles.extend(LayerHooks(track, model_id, name, module, self).install())
        bp.closers.append(track.leaves.remove_all)
        recorder.last_post()

    def clear(self) -> int:
        removed = sum(r.remove() for r in self.recorders.values())
        self.recorders = {}
        self._reported = set()
        return removed

    # -- what the layers and recorders call -------------------------------------

    def exact(self, bp: Breakpoint, event: HookEvent, produced: Any, received: Any) -> None:
        self._hooks.exact(bp, event, produced, received)

    def exact_hooks(self, bp: Breakpoint, model_id: str, phases: tuple[str, ...]) -> list[Callable[[], Any]]:
        return self._hooks.exact_hooks(bp, model_id, phases)

    def make_tap(self, bp: Breakpoint, model_id: str, name: str, module: nn.Module) -> GradTap:
        tap = self._hooks.make_tap(bp, model_id, name, module)
        bp.closers.append(tap.close)
        return tap

    def keep_outputs(self, entries: list[tuple[str, Breakpoint]]) -> AbstractContextManager[None]:
        return self._hooks.keep_outputs(entries)

    def notice(self, level: str, message: str, code: str) -> None:
        self._hooks.notice(level, message[:500], code)

    def step_of(self, model_id: str) -> int:
        return self._hooks.step_of(model_id)

    def not_replayed(self, bp: Breakpoint, model_id: str, why: str, previous_step: bool = False) -> None:
        """A call of the step may have hit, but no replay confirmed or reproduced it: said, with the way out."""
        self.notice(
            "warning",
            f"breakpoint {bp.spec.id}: a call in step "
            f"{self.step_of(model_id) - previous_step} of model {model_id} may satisfy "
            f"{_describe(bp.spec.condition)}, but {why}; set it on fewer than "
            f"{DEFER_MIN_LAYERS} layers for the exact per-call check",
            "deferredNotReplayed",
        )

    def failed(self, bp: Breakpoint | None, layer: str, exc: Exception) -> None:
        """A deferred hook failed: said once per distinct error, never raised into training."""
        text = f"{type(exc).__name__}: {exc}"
        where = f"breakpoint {bp.spec.id} on {layer}" if bp is not None else "a breakpoint's per-step check"
        key = f"{where}: {text}"
        log.debug("hookscope: deferred check failed: %s", key, exc_info=True)
        if key in self._reported or len(self._reported) > 16:
            return
        self._reported.add(key)
        self.notice("warning", key, "conditionError")
