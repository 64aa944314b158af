"""Root step hooks (the last call's inputs, the watches due, the step count where step_counter.py cannot keep it)
and the one-shot shape capture at the first forward."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import nn

from hookscope.engine import step_counter
from hookscope.engine.watches import ARM_AHEAD_S, WatchSampler
from hookscope.hooks import summaries
from hookscope.hooks.conditions import REPLAY
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS

log = logging.getLogger("hookscope")


def summaries_first_tensor(value: Any) -> torch.Tensor | None:
    for _, tensor in summaries.iter_tensors(value, ""):
        return tensor.detach()
    return None


def _input_signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The shapes of a call's tensor arguments: a new signature means a new shape pass."""
    # a loop, not a comprehension or a generator: under a debugger each is one more traced call
    shapes = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            shapes.append(tuple(arg.shape))
    return tuple(shapes)


class StepHooks(WatchSampler):
    """Engine's root hooks (a mixin on the watch sampler: a step's root hook arms the watches due)."""

    # ------------------------------------------------------------------ root hooks

    def _model_active(self, model_id: str) -> bool:
        return (
            self._sentinels_on
            or model_id in self._breakpoints.models_with_hooks()
            or any(m == model_id for m, _ in self._watches)
            or any(m == model_id for m, _ in self._captures)
        )

    def _sync_root_hooks(self) -> None:
        """The step hook on each root exists exactly while something is hooked on that model: a
        rider on the root's step counter (no hook on the root, see step_counter), else a pre-hook."""
        step_counter.heal()  # a counter lost to model.compile() since: its riders hook the root
        for model_id, index in self._indexes.items():
            wanted = self._model_active(model_id) and index.model is not None
            handle = self._root_handles.get(model_id)
            if wanted and handle is None:
                assert index.model is not None
                hook = self._root_pre(model_id)
                # first, or prepended: the step is counted before any breakpoint's pre-hook on the root reads it
                self._root_handles[model_id] = step_counter.ride(
                    index.model, hook, None, partial(self._root_ride_lost, model_id), first=True
                ) or index.model.register_forward_pre_hook(hook, with_kwargs=True, prepend=True)
            elif not wanted and handle is not None:
                handle.remove()
                del self._root_handles[model_id]
                self._last_args.pop(model_id, None)
        for model_id in [m for m in self._root_handles if m not in self._indexes]:
            self._root_handles.pop(model_id).remove()

    def _root_ride_lost(self, model_id: str) -> None:
        with self._lock:
            self._root_handles.pop(model_id, None)
            self._sync_root_hooks()

    def _root_pre(self, model_id: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] = CALLED_WITHOUT_KWARGS) -> None:
            if REPLAY.depth or kwargs is CALLED_WITHOUT_KWARGS:  # removed_hooks
                return
            if not step_counter.counts(module, model_id):  # compiled in place, or an older torch
                self._steps[model_id] = self._steps.get(model_id, 0) + 1
            self._last_args[model_id] = (args, kwargs)
            if time.monotonic() + ARM_AHEAD_S >= self._arm_at:
                self._arm_due()
            if self._shapes_wanted and model_id not in self._shape_handles:
                # one tensor argument, the usual case, inline: a call here is traced every step
                signature = (
                    (tuple(args[0].shape),)
                    if len(args) == 1 and type(args[0]) is torch.Tensor
                    else _input_signature(args)
                )
                if signature != self._input_signature.get(model_id):
                    self._input_signature[model_id] = signature
                    self._arm_shapes(model_id, module)

        return hook

    # ------------------------------------------------------------------ shapes

    def _arm_shapes(self, model_id: str, model: nn.Module) -> None:
        """One forward pass of shape capture: per-layer hooks exist only during that pass."""
        if model_id in self._shape_handles:
            return
        shapes: dict[str, list[int]] = {}
        layer_handles: list[Any] = []

        def record(name: str) -> Callable[..., None]:
            def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
                first = summaries_first_tensor(output)
                if first is not None:
                    shapes[name] = list(first.shape)

            return hook

        def pre(module: nn.Module, args: tuple[Any, ...]) -> None:
            if REPLAY.depth or layer_handles:
                return
            added = [
                sub.register_forward_hook(record(name))
                for name, sub in module.named_modules(remove_duplicate=False)
                if name
            ]
            with self._lock:
                if self._shape_handles.get(model_id) is owned:
                    layer_handles.extend(added)
                    owned.extend(added)  # shutdown during this pass removes them with the root's
                    return
            for handle in added:  # shut down (editor gone) while they were being added
                handle.remove()

        def post(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if REPLAY.depth or not layer_handles:
                return
            first = summaries_first_tensor(output)
            if first is not None:
                shapes[""] = list(first.shape)  # the root's own record hook runs after this one
            layer_handles.clear()
            with self._lock:
                for handle in self._shape_handles.pop(model_id, []):
                    handle.remove()
            try:
                signature = _input_signature(args)
                self._input_signature[model_id] = signature
                if shapes != self._sent_shapes.get(model_id):
                    self._sent_shapes[model_id] = dict(shapes)
                    self._emit({"type": "shapes", "model": model_id, "shapes": dict(shapes)})
            except Exception as exc:
                log.debug("hookscope: shapes failed: %s", exc)

        owned: list[Any] = [model.register_forward_pre_hook(pre), model.register_forward_hook(post)]
        self._shape_handles[model_id] = owned
