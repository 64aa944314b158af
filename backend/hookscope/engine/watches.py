"""The watch sampler: rate-limited summaries of watched layers, armed only while a sample is due."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hookscope.engine.state import EngineState
from hookscope.hooks import summaries
from hookscope.hooks.conditions import REPLAY
from hookscope.hooks.kept_outputs import keep_call
from hookscope.hooks.leaf_hooks import LeafHooks
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS

log = logging.getLogger("hookscope")

_ARMING_COST = ("*", "arming")
"""The summary budget's key for the cost of putting due watches' hooks back."""
DEFAULT_RATE_HZ = 4.0
ARM_AHEAD_S = 0.05
"""Watches due this soon are armed together, so the layers of one model are sampled in the
same forward pass (they fell due microseconds apart, one after the other in the last one)."""


class LayerWatch:
    """Rate-limited summaries of one layer (forward, and the backward of the same call).

    Its forward hook is on the layer only while a sample is due ("armed"):
    once it has fired it removes itself until ``next_due``, when the model's
    next forward (the root's pre-hook) or the agent's tick puts it back. A
    module with any hook takes PyTorch's slow call path, so a hook that sat on
    every layer waiting for its next sample cost microseconds per layer on
    every step, most of the cost of watching a thousand small layers.
    """

    __slots__ = ("model", "layer", "module", "interval", "next_due", "handle", "keep_output", "active", "leaves")

    def __init__(self, model: str, layer: str, module: nn.Module, interval: float, keep_output: bool) -> None:
        self.model, self.layer, self.module, self.interval = model, layer, module, interval
        self.next_due = 0.0
        self.handle: RemovableHandle | None = None
        self.keep_output = keep_output
        self.active = True
        self.leaves = LeafHooks()
        """Gradient hooks of the last sample that sit on leaf tensors (removed at the next sample)."""


class SampleRound:
    """The watched layers of a model sampled in one step, and when they are all due again."""

    __slots__ = ("step", "due", "members")

    def __init__(self, step: int, due: float) -> None:
        self.step, self.due = step, due
        self.members: set[int] = set()
        """``id`` of each watch sampled in this round."""


class WatchSampler(EngineState):
    """Engine's watch half (a mixin: the state is declared on ``EngineState``, set in ``Engine.__init__``)."""

    # ------------------------------------------------------------------ watches

    def _watch_hook(self, watch: LayerWatch) -> Callable[..., None]:
        key = (watch.model, watch.layer)

        def hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any = CALLED_WITHOUT_KWARGS
        ) -> None:
            if REPLAY.depth or not watch.active or output is CALLED_WITHOUT_KWARGS:  # armed means due: _arm_due decided
                return
            started = time.perf_counter()  # the budget counts the whole sample, hook removal included
            watch.next_due = self._next_sample_at(watch)
            self._disarm(watch)
            try:
                step = self._step_of(watch.model)
                if watch.keep_output:
                    self._last_output[key] = keep_call(module, args, kwargs, output, step)
                if key not in self._watches:
                    return  # a render capture only
                tensors = summaries.summarize_many(
                    list(summaries.iter_tensors(args, "inputs")) + list(summaries.iter_tensors(output, "output"))
                )
                self._last[key] = {"step": step, "tensors": tensors}
                self._emit(
                    {
                        "type": "summaries",
                        "model": watch.model,
                        "layer": watch.layer,
                        "phase": "forward",
                        "step": step,
                        "tensors": tensors,
                    }
                )
                if torch.is_grad_enabled():
                    if watch.leaves.handles:  # the last sample's, if its backward never came
                        watch.leaves.remove_all()
                    for path, tensor in summaries.iter_tensors(output, "grad_output"):
                        if tensor.requires_grad:
                            watch.leaves.register(tensor, self._watch_grad_hook(watch, path, step))
                self._budget.record((key, "forward"), time.perf_counter() - started)
            except Exception as exc:
                watch.active = False
                self._notice(
                    "warning", f"watching {watch.layer} failed and stopped: {type(exc).__name__}: {exc}", "watchError"
                )

        return hook

    def _watch_grad_hook(self, watch: LayerWatch, path: str, step: int) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if not watch.active or REPLAY.depth:
                return
            try:
                started = time.perf_counter()
                tensors = summaries.summarize_many([(path, grad)])
                last = self._last.get((watch.model, watch.layer))
                if last is not None and last.get("step") == step:
                    last["tensors"] = [t for t in last["tensors"] if t["path"] != path] + tensors
                self._emit(
                    {
                        "type": "summaries",
                        "model": watch.model,
                        "layer": watch.layer,
                        "phase": "backward",
                        "step": step,
                        "tensors": tensors,
                    }
                )
                self._budget.record(((watch.model, watch.layer), "backward"), time.perf_counter() - started)
            except Exception as exc:
                self._notice("warning", f"gradient summary of {watch.layer} failed: {exc}", "watchError")

        return hook

    def _next_sample_at(self, watch: LayerWatch) -> float:
        """When ``watch`` samples again: the same time for every layer sampled in this step, so the
        model's layers stay in step (one forward pass in a few, not a few layers in every pass).

        A round is the layers sampled in one step. It is joined even when its time is already
        past (summarising a big model's layers can take longer than the interval: starting
        a new round there would split the layers over two steps for good). A layer sampled
        again in the same step (a layer called repeatedly, or called without its root, whose
        step count then stays put) starts the next round.
        """
        step = self._step_of(watch.model)
        key = (watch.model, watch.interval)
        round_ = self._sample_rounds.get(key)
        if round_ is None or round_.step != step or id(watch) in round_.members:
            round_ = SampleRound(step, time.monotonic() + self._budget_interval(watch.interval))
            self._sample_rounds[key] = round_
        round_.members.add(id(watch))
        return round_.due

    def _arm(self, watch: LayerWatch) -> None:
        if watch.handle is None and watch.active:
            # with_kwargs: an attention layer's masks come by keyword (kept with its call for the panel)
            watch.handle = watch.module.register_forward_hook(self._watch_hook(watch), with_kwargs=True)

    def _disarm(self, watch: LayerWatch) -> None:
        """Off the layer until it is due again (safe inside the hook: torch iterates over a copy)."""
        if watch.handle is not None:
            watch.handle.remove()
            watch.handle = None
        self._arm_at = min(self._arm_at, watch.next_due)

    def tick(self) -> None:
        """Put back the hooks of watches that are due. The agent calls this a few times a second,
        for models whose root forward is not called (a loop over ``model.encoder`` and
        ``model.decoder``); it scans every watch, so ``_arm_at``, which a hook firing on the
        training thread lowers without the lock, is also made right again."""
        self._arm_due()

    def _arm_due(self) -> None:
        with self._lock:
            now, earliest = time.monotonic(), math.inf
            started, armed = time.perf_counter(), False
            for watch in (*self._watches.values(), *self._captures.values()):
                if watch.handle is not None or not watch.active:
                    continue
                if watch.next_due <= now + ARM_AHEAD_S:
                    self._arm(watch)
                    armed = True
                else:
                    earliest = min(earliest, watch.next_due)
            self._arm_at = earliest
            if armed:  # putting the hooks back is part of what a round of samples costs
                self._budget.record(_ARMING_COST, time.perf_counter() - started)

    def _budget_interval(self, wanted: float) -> float:
        """The interval the summary budget allows; says so once when it is slower than the panel's."""
        interval = self._budget.interval(wanted)
        if interval > 2 * wanted and not self._budget_noticed:
            self._budget_noticed = True
            self._notice(
                "info",
                f"{len(self._watches)} watched layers: their summaries refresh every "
                f"{interval:.1f} s (not {wanted:.2f} s) to keep their cost under "
                f"{self._budget.share:.0%} of the run time",
                "watchThrottled",
            )
        return interval

    def _drop_watch(self, watch: LayerWatch) -> int:
        watch.active = False
        watch.leaves.remove_all()
        self._budget.forget((watch.model, watch.layer))
        self._last_output.pop((watch.model, watch.layer), None)
        if watch.handle is None:
            return 0
        watch.handle.remove()
        watch.handle = None
        return 1
