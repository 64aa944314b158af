"""The last output of every layer that has a breakpoint, so the panel has a picture at any stop.

A backward stop's locals hold the gradients only; the layer's output of that
step is gone by then unless something kept it. ``BreakpointOutputs`` puts one
forward hook on each layer a breakpoint resolved to (and only those) and keeps a
detached view of its last output, with the step it ran in: at a backward stop
the panel shows the output when a forward of that layer was seen in the same
step, and says so when not. For ``nn.MultiheadAttention`` the call's inputs are
kept too, so attention weights can be recomputed when the model asked for none
(``need_weights=False``).

Bounded by construction: at most ``MAX_LAYERS`` layers and ``MAX_BYTES`` of
storage (the layers that ran longest ago go first; an output larger than the
whole budget is not kept, and the render says why). A detached view shares the
output's storage: keeping it costs no copy, only the memory's lifetime, until the
layer's next forward replaces it. The hooks never raise into training and are
removed by ``clear``.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from hookscope.hooks.conditions import REPLAY
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS

log = logging.getLogger("hookscope")

MAX_LAYERS = 16
"""Layers whose last output is kept: a class breakpoint that matches hundreds of layers keeps
the ones that ran last (a backward pass stops at those first)."""
MAX_BYTES = 256 * 2**20
"""Storage kept alive in all (on the layer's device: a GPU's memory on a GPU)."""


@dataclass
class Kept:
    """One call of a layer: its output (detached) and, for attention, what it was called with."""

    step: int
    output: Any
    call: tuple[tuple[Any, ...], dict[str, Any]] | None = None
    """``(args, kwargs)`` of an ``nn.MultiheadAttention`` call (detached), else None."""
    versions: list[tuple[torch.Tensor, int]] = field(default_factory=list)
    """Each kept tensor with its version counter when kept: a later in-place change shows."""

    def modified_in_place(self) -> bool:
        """Whether an in-place operation (an ``nn.ReLU(inplace=True)`` after the layer) changed the output since."""
        return any(t._version != v for t, v in self.versions)


def keep_call(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any, step: int) -> Kept:
    """A detached record of one call of ``module`` (the call's inputs only for attention modules)."""
    kept_output = detached(output)
    call = (detached(args), detached(kwargs)) if isinstance(module, nn.MultiheadAttention) else None
    return Kept(step, kept_output, call, [(t, t._version) for t in tensors_of(kept_output)])


def detached(value: Any) -> Any:
    """``value`` with every tensor in tuples, lists and dicts detached (a view: no copy)."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, list):
        return [detached(v) for v in value]
    if isinstance(value, tuple):
        return tuple(detached(v) for v in value)
    if isinstance(value, dict):
        return {k: detached(v) for k, v in value.items()}
    return value


def tensors_of(value: Any, depth: int = 0) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if depth > 4:
        return []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_of(v, depth + 1)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_of(v, depth + 1)]
    return []


def storage_bytes(record: Kept) -> int:
    """Bytes of storage ``record`` keeps alive (each storage once: q, k and v are often one tensor)."""
    seen: dict[int, int] = {}
    values = [record.output] + ([record.call] if record.call is not None else [])
    for t in tensors_of(values):
        try:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        except Exception:  # a tensor without storage (meta, some subclasses): count its elements
            seen[id(t)] = t.numel() * t.element_size()
    return sum(seen.values())


class BreakpointOutputs:
    """Forward hooks on the layers that have a breakpoint, keeping each one's last call."""

    def __init__(
        self, step_of: Callable[[str], int], *, max_layers: int = MAX_LAYERS, max_bytes: int = MAX_BYTES
    ) -> None:
        self._step_of = step_of
        self.max_layers, self.max_bytes = max_layers, max_bytes
        self._handles: dict[tuple[str, str], Any] = {}
        self._kept: collections.OrderedDict[tuple[str, str], tuple[Kept, int]] = collections.OrderedDict()
        """(model, layer) -> (last call, its bytes), the layer that ran longest ago first."""
        self._total = 0
        """Bytes kept in all (a running sum: the hook does not walk the others)."""
        self._too_large: dict[tuple[str, str], int] = {}
        """Layers whose last output alone was over the budget: how large it was."""

    @property
    def hook_count(self) -> int:
        return len(self._handles)

    def layers(self) -> set[tuple[str, str]]:
        return set(self._handles)

    def sync(self, wanted: dict[tuple[str, str], nn.Module]) -> None:
        """Hook exactly the ``wanted`` layers; a layer no longer wanted loses its hook and its output."""
        for key in [k for k in self._handles if k not in wanted]:
            self._handles.pop(key).remove()
            self._forget(key)
        for key, module in wanted.items():
            if key not in self._handles:
                # First among the layer's forward hooks: a forward stop (another hook) already sees
                # this call kept. with_kwargs: attention masks are usually passed by keyword.
                self._handles[key] = module.register_forward_hook(self._hook(key), prepend=True, with_kwargs=True)

    @contextlib.contextmanager
    def replaying(self, wanted: dict[tuple[str, str], nn.Module]) -> Iterator[None]:
        """Keep the calls of ``wanted`` layers made during a replay of a step (the deferred breakpoints':
        their stops happen in the replay, and they keep nothing while it is not running)."""
        added = []
        for key, module in wanted.items():
            if key not in self._handles:
                self._handles[key] = module.register_forward_hook(
                    self._hook(key, replay=True), prepend=True, with_kwargs=True
                )
                added.append(key)
        try:
            yield
        finally:
            for key in added:  # what they kept stays (bounded) for the panel until replaced
                handle = self._handles.pop(key, None)
                if handle is not None:
                    handle.remove()

    def get(self, model: str, layer: str) -> Kept | None:
        entry = self._kept.get((model, layer))
        return entry[0] if entry is not None else None

    def too_large(self, model: str, layer: str) -> int | None:
        """The size of the layer's last output when it was too large to keep, else None."""
        return self._too_large.get((model, layer))

    def clear(self) -> int:
        """Remove every hook and drop every kept output; returns the hooks removed."""
        removed = len(self._handles)
        for handle in self._handles.values():
            handle.remove()
        self._handles.clear()
        self._kept.clear()
        self._total = 0
        self._too_large.clear()
        return removed

    def _forget(self, key: tuple[str, str]) -> None:
        entry = self._kept.pop(key, None)
        if entry is not None:
            self._total -= entry[1]
        self._too_large.pop(key, None)

    def _hook(self, key: tuple[str, str], replay: bool = False) -> Callable[..., None]:
        def keep_output(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any = CALLED_WITHOUT_KWARGS
        ) -> None:
            # Hookscope's own passes; a hook being removed (removed_hooks: torch may call it without kwargs)
            if (REPLAY.depth and not replay) or key not in self._handles or output is CALLED_WITHOUT_KWARGS:
                return
            try:
                self._store(key, keep_call(module, args, kwargs, output, self._step_of(key[0])))
            except Exception:  # never into the user's forward
                log.debug("hookscope: keeping the output of %s failed", key[1], exc_info=True)

        return keep_output

    def _store(self, key: tuple[str, str], record: Kept) -> None:
        size = storage_bytes(record)
        self._forget(key)
        if size > self.max_bytes:
            self._too_large[key] = size
            return
        self._kept[key] = (record, size)
        self._total += size
        while len(self._kept) > self.max_layers or self._total > self.max_bytes:
            _, (_, dropped) = self._kept.popitem(last=False)
            self._total -= dropped
