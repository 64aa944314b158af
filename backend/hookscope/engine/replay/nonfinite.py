"""Break on NaN/Inf: a cheap per-step sentinel, then an exact replay of the failing step.

This module holds the watch over every model (``NonFiniteWatch``) and the sub-models a program
calls directly; one model's sentinel is ``nonfinite_sentinel.py``, the search of a bad step
``nonfinite_search.py`` with the probes of ``nonfinite_probes.py``, the replay frame ``frame.py``.

Why not check every layer
    A NaN check with a host sync in every layer's forward costs ~1.3x a small
    CNN step, per-tensor gradient checks ~1.6-1.9x, more than
    ``torch.autograd.detect_anomaly`` (DESIGN.md). Non-finite values are rare,
    so the steady state only asks "did this step go bad?" and the expensive
    "where?" runs once, on the bad step.

Steady state (per model root, no per-layer hook)
    * before the root's forward (riding its step counter, ``step_counter.ride``; a root hook
      where there is none): keeps a reference to the call's args/kwargs (no copy), the CPU (a
      ``clone_state`` copy of the generator) and CUDA RNG state, a copy of the module buffers
      (BatchNorm running stats: small) into preallocated storage (``_foreach_copy_``), and the
      grad mode. The model itself is held weakly: a model the program drops is freed.
    * after it: ``all_finite`` over the output tensors (a sum: NaN and Inf survive it), one
      host sync; when the output needs a gradient, a tensor hook on it. (Folding this check
      into the end-of-backward one saves one small op and a sync, but a forward with no
      backward after it would go unchecked, and "raise" would raise from ``backward()``.)
    * that tensor hook keeps the gradient reaching the root output and queues
      a callback for the end of the backward pass
      (``Variable._execution_engine.queue_callback``), where one on-device
      number over every parameter ``.grad`` and the root output gradient
      decides, with one host sync, whether the backward went bad: the sum of
      one flattened copy of the small CPU gradients (a norm kernel per tensor
      costs ~1 µs on CPU, however small the tensor) plus ``_foreach_norm`` of
      the others (one fused kernel on CUDA).
    * a global optimizer step pre-hook catches models whose output gradient
      was not seen (the loss did not flow through the root's output): same
      check, before the optimizer consumes the gradients.
    Cost: two calls around the root's own, a buffer copy and two syncs per step, whatever the
    depth, plus ~0.5 µs per small CPU parameter tensor: about 0.1 ms per step
    under debugpy on a 2-core CPU (bench/RESULTS.md).
    The parameter and buffer lists come from ``module_tensors.ModuleTensors``
    (no module-tree walk per step). A sum or norm can overflow although every
    value is finite (fp32 beyond ~1e19 squared, or ~3e38 summed; fp16 is
    reduced in fp32), so a non-finite one is confirmed element-wise before it
    counts; that costs only on the rare suspicious step.

On a bad step: exact replay
    The forward is re-run on the same inputs with the RNG state and the
    buffers put back as they were at the root's forward-pre, so dropout masks
    and BatchNorm statistics are the same and the values bit-identical (on
    deterministic kernels). Precise probes on every module find the FIRST
    layer that produced a non-finite value: forward hooks in completion order
    (a child finishes before its parent), forward-pre hooks to see values
    born between layers. For a backward failure the replay runs the forward
    and then ``autograd.backward`` from the root output with the gradient the
    original step received; tensor hooks on each layer's inputs, outputs and
    parameters fire in backward order, and the first non-finite gradient
    names the layer (a gradient reaching a layer's input that is bad while its
    output gradient was fine: born in that layer). The parameters' ``.grad``
    are saved before and put back after, so the replay does not accumulate
    twice; RNG state and buffers are put back to their post-step values, so
    training goes on exactly as without Hookscope. The debugger pauses inside
    the replay's hook of the culprit layer, with the replay's tensors (the
    same values) as ``inputs``/``output`` or ``grad_input``/``grad_output``.

    No replay is needed when the inputs are already non-finite (reported at
    the root: "came in through the inputs") or when the gradient reaching the
    root output is (reported at the root: "came in from the loss").

Limits
    State outside the model that the forward reads or changes (Python
    counters, global flags) is not restored; the user's own hooks run again
    during the replay; nondeterministic kernels (some CUDA atomics) may not
    reproduce the value, in which case the hit is reported at the root with
    that explanation. Only the last forward call of the root before the
    backward is replayed. When one tensor feeds several layers, a NaN born in
    the backward of one of them is blamed on the innermost of them.

When it fires again (``REARM_RULE``, sent with each hit and shown in the panel)
    A step (one forward of the root and its backward) stops at most once:
    what follows a report in the same step comes from the same NaN. A later
    bad step stops again when the model's parameters are finite (the NaN/Inf
    was born anew in that step); when they hold NaN/Inf (the
    optimizer spread the gradient into the weights) every step would stop, so
    the sentinel stays quiet until a step runs clean, and says so once in a
    notice (``nonfiniteQuiet``), and again when a clean step re-arms it
    (``nonfiniteRearmed``). Telling the two apart costs one sync on a bad
    step only.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from hookscope.debugger.stop_location import module_calls
from hookscope.engine import step_counter
from hookscope.engine.replay.nonfinite_sentinel import Checks, FireFn, NoticeFn, RootSentinel
from hookscope.hooks.conditions import REPLAY, HookEvent

REARM_RULE = (
    "Break on NaN/Inf stops again at the next step with a new NaN/Inf; while the model's "
    "parameters hold NaN/Inf it stays quiet until a step runs clean."
)
"""When break on NaN/Inf fires again after a stop (the ``rearm`` field of its hits)."""


def _running(module: nn.Module) -> bool:
    """Whether ``module``'s forward is running on this thread (its sentinel may have missed its start)."""
    return any(m is module for m, _ in module_calls(sys._getframe(1)))


_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)


class _EntryPoints:
    """Sub-models the program calls directly: a GAN loop's ``pair.disc(pair.gen(x))``, CLIP's
    ``model.visual``, Hugging Face's ``get_*_features``. The root's own forward never runs, so the
    root's sentinel would see nothing. A forward-pre hook on each direct child of the root (one
    cheap call per child call) notices a call made while the root's forward is not running and
    gives that child a sentinel of its own, which starts with that very call; the cheap hook then
    goes. While the root's forward runs, the root's sentinel covers the child and the child's
    stays quiet, so a child called both ways is checked once per call, at the same cost.
    """

    def __init__(self, parent: RootSentinel, promote: Callable[[str, nn.Module], RootSentinel]) -> None:
        self._parent = parent
        self._promote = promote
        self._handles: dict[str, Any] = {}
        self.sentinels: dict[str, RootSentinel] = {}
        for name, child in parent.root.named_children():
            if not isinstance(child, _CONTAINERS):
                self._handles[name] = child.register_forward_pre_hook(partial(self._called, name))

    @property
    def hook_count(self) -> int:
        return len(self._handles) + sum(len(s.handles) for s in self.sentinels.values())

    def _called(self, name: str, module: nn.Module, args: tuple[Any, ...]) -> None:
        if self._parent.call_open or REPLAY.depth or not self._parent.active or _running(self._parent.root):
            return  # inside the root's forward: the root's sentinel covers it
        handle = self._handles.pop(name, None)
        if handle is None:
            return
        handle.remove()
        try:
            self.sentinels[name] = self._promote(name, module)  # its install() takes this call's snapshot
        except Exception as exc:
            self._parent.error(f"watching {name} called directly", exc)

    def remove(self) -> int:
        removed = len(self._handles) + sum(s.remove() for s in self.sentinels.values())
        for handle in self._handles.values():
            handle.remove()
        self._handles, self.sentinels = {}, {}
        return removed

    def check_gradients_unchecked(self) -> None:
        for sentinel in list(self.sentinels.values()):
            if sentinel.gradients_unchecked:
                sentinel.check_gradients(replay=False)


class NonFiniteWatch:
    """Break on NaN/Inf across every model of the engine."""

    def __init__(self, fire: FireFn, notice: NoticeFn, step_of: Callable[[str], int]) -> None:
        self._fire = fire
        self._notice = notice
        self._step_of = step_of
        self.sentinels: dict[str, RootSentinel] = {}
        self._entries: dict[str, _EntryPoints] = {}
        self._optimizer_handle: Any = None
        self.checks = Checks()
        """Shared by every sentinel: the engine switches NaN/Inf and the thresholds here."""

    @property
    def enabled(self) -> bool:
        return self._optimizer_handle is not None or bool(self.sentinels)

    @property
    def hook_count(self) -> int:
        return (
            sum(len(s.handles) for s in self.sentinels.values())
            + sum(e.hook_count for e in self._entries.values())
            + (self._optimizer_handle is not None)
        )

    def add(self, model_id: str, root: nn.Module) -> None:
        if model_id in self.sentinels:
            return
        sentinel = RootSentinel(model_id, root, self._fire_for(model_id), self._notice, self._step_of)
        sentinel.checks = self.checks
        sentinel.install()
        self.sentinels[model_id] = sentinel

        def promote(name: str, child: nn.Module) -> RootSentinel:
            watch = RootSentinel(
                model_id, child, self._fire_for(model_id), self._notice, self._step_of, prefix=name, parent=sentinel
            )
            watch.install()
            return watch

        self._entries[model_id] = _EntryPoints(sentinel, promote)
        if self._optimizer_handle is None:
            self._optimizer_handle = register_optimizer_step_pre_hook(self._optimizer_pre)

    def remove_model(self, model_id: str) -> int:
        sentinel = self.sentinels.pop(model_id, None)
        removed = sentinel.remove() if sentinel is not None else 0
        entries = self._entries.pop(model_id, None)
        removed += entries.remove() if entries is not None else 0
        if not self.sentinels and self._optimizer_handle is not None:
            self._optimizer_handle.remove()
            self._optimizer_handle = None
            removed += 1
        return removed

    def clear(self) -> int:
        return sum(self.remove_model(m) for m in list(self.sentinels)) + self._drop_optimizer_hook()

    def _drop_optimizer_hook(self) -> int:
        if self._optimizer_handle is None:
            return 0
        self._optimizer_handle.remove()
        self._optimizer_handle = None
        return 1

    def _fire_for(self, model_id: str) -> FireFn:
        def fire(event: HookEvent, reason: str, origin: str | None) -> None:
            event.model = model_id
            self._fire(event, reason, origin)

        return fire

    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Check the gradients the end-of-backward callback did not (the loss bypassed the output)."""
        if REPLAY.depth:
            return
        idle = False
        for sentinel in list(self.sentinels.values()):
            if sentinel.gradients_unchecked:  # the end-of-backward check usually ran: no call
                sentinel.check_gradients(replay=False)
            elif sentinel.forwards == sentinel.forwards_at_optimizer:
                idle = True
            sentinel.forwards_at_optimizer = sentinel.forwards
        if idle:
            # A model with no forward seen since the last step: another model's optimizer, a copy
            # that never runs (an EMA of the weights), or its counter lost to model.compile(),
            # whose riders then hook the root. Once per step, however many models are idle.
            step_counter.heal()
        for entries in list(self._entries.values()):
            if entries.sentinels:  # a child called directly got a sentinel of its own (rare: no call)
                entries.check_gradients_unchecked()
