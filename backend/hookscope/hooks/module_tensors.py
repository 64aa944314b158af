"""A model's parameters and buffers, without walking its module tree every step.

``Module.parameters()`` and ``buffers()`` walk the tree through nested
generators on every call: about a microsecond per module, and several under a
debugger, which sees every generator resume. Break on NaN asks for both on
every step, so where each tensor lives is kept, as a (module dict, key) slot,
and the tree is walked again only after a change: torch's global registration
hooks (a module, parameter or buffer assigned anywhere) bump a generation
counter, and because a few changes bypass them (``Sequential.insert`` writes
``_modules`` directly, ``del model.block``), the slots are also rebuilt every
``REFRESH_EVERY`` uses. Parameters and buffers are read from each module's
dicts at every call, so replaced tensors (``model.half()``, a re-assigned
buffer) are always current. Only the root is referenced, weakly, and no
module at all: a model the program drops is freed.

``grad_groups`` hands break on NaN the gradients in two groups, chosen when the
slots are rebuilt: small CPU tensors, which one ``flatten`` copy checks at
~0.4 µs each, and the rest, which ``_foreach_norm`` checks (fused on CUDA;
~1 µs per tensor on CPU, however small). A parameter resized since the last
rebuild lands in the wrong group until the next one, which only costs speed:
both groups are checked in full. A key written into ``_parameters`` or
``_buffers`` directly, bypassing the registration hooks, is seen at the next
rebuild.

``buffers`` and ``grad_groups`` run every step, so they are plain loops in one
frame: on Python 3.11 a comprehension or a helper is a function call, which a
debugger traces (about 2.5 µs each under debugpy here).
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Sequence
from functools import partial
from typing import Any, TypeVar

import torch
from torch import nn
from torch.nn.modules import module as torch_module

REFRESH_EVERY = 64
"""Uses between full rebuilds, for structure changes no registration hook reports."""

FLATTEN_MAX_NUMEL = 4096
"""CPU gradients up to this size are checked through one flattened copy (measured
here: cheaper per tensor than a norm kernel up to ~4k elements, dearer above)."""

_GRAD = operator.attrgetter("grad")
_IS_TENSOR = partial(operator.is_not, None)
"""filter() keeps the gradients that exist (``is not None``: a tensor's own ``==`` is Python code)."""

T = TypeVar("T")

Slot = tuple[dict[str, Any], str]
"""(a module's ``_parameters`` or ``_buffers``, a key): where a tensor lives, read afresh at every use."""


class StructureWatch:
    """The global registration hooks, held while any cache needs them."""

    def __init__(self) -> None:
        self.generation = 0
        self._handles: list[Any] = []
        self._users = 0

    def acquire(self) -> None:
        self._users += 1
        if self._handles:
            return
        bump = self._bump
        self._handles = [
            torch_module.register_module_module_registration_hook(bump),
            torch_module.register_module_parameter_registration_hook(bump),
            torch_module.register_module_buffer_registration_hook(bump),
        ]

    def release(self) -> int:
        """Drop one user; returns how many hooks were removed (all, with the last user)."""
        self._users = max(self._users - 1, 0)
        if self._users or not self._handles:
            return 0
        for handle in self._handles:
            handle.remove()
        count, self._handles = len(self._handles), []
        return count

    def _bump(self, module: nn.Module, name: str, value: Any) -> None:
        self.generation += 1  # returns None: the registered value is left as it is


STRUCTURE = StructureWatch()


class ModuleTensors:
    """The parameters and buffers of one root module, current at every call."""

    def __init__(self, root: nn.Module, structure: StructureWatch = STRUCTURE) -> None:
        self._root = weakref.ref(root)  # only slots (dicts) are kept: a model the program drops is freed
        self.structure = structure
        self._param_slots: list[Slot] = []
        self._flat_slots: list[Slot] = []
        self._norm_slots: list[Slot] = []
        self._buffer_slots: list[Slot] = []
        self.half_grads = False
        """Some parameter is fp16/bf16: its norm is taken in fp32 (fp16's 65504 is easily exceeded)."""
        self._generation = -1
        self._uses = 0
        self._shared = False
        """Some parameter or buffer is registered in two modules (tied weights)."""
        self._shared_buffers = False
        self._flat_dicts: list[dict[str, Any]] = []
        self._flat_keys: list[str] = []
        self._norm_dicts: list[dict[str, Any]] = []
        self._norm_keys: list[str] = []
        self.flat_names: list[str] = []
        self.norm_names: list[str] = []
        self.complete = True
        """The last ``grad_groups`` found a gradient for every parameter."""
        self.bufferless_at = -1
        """The structure generation at which the last rebuild found no buffer (-1: it found some).
        While it is current, a per-step caller may skip ``buffers()``, one traced call fewer."""

    def _refresh(self) -> None:
        self._uses += 1
        if self._generation != self.structure.generation or self._uses > REFRESH_EVERY:
            self._rebuild()

    def _rebuild(self) -> None:
        self._generation, self._uses = self.structure.generation, 0
        root = self._root()
        named = list(root.named_modules()) if root is not None else []
        modules = [m for _, m in named]
        params = [t for m in modules for t in m._parameters.values() if t is not None]
        buffers = [t for m in modules for t in m._buffers.values() if t is not None]
        self._shared = len({id(t) for t in params + buffers}) != len(params) + len(buffers)
        self._shared_buffers = len({id(t) for t in buffers}) != len(buffers)
        self._group_parameters(named)
        self._buffer_slots = [(m._buffers, key) for m in modules for key in m._buffers]
        self.bufferless_at = -1 if self._buffer_slots else self._generation

    def _group_parameters(self, named: list[tuple[str, nn.Module]]) -> None:
        self._param_slots, seen = [], set()
        flat: list[tuple[Slot, str]] = []
        norm: list[tuple[Slot, str]] = []
        half = False
        for prefix, module in named:
            for key, param in module._parameters.items():
                if param is None:
                    continue
                self._param_slots.append((module._parameters, key))
                if id(param) in seen:  # a tied weight is checked once
                    continue
                seen.add(id(param))
                half = half or param.dtype in (torch.float16, torch.bfloat16)
                name = f"{prefix}.{key}" if prefix else key
                (flat if flattens(param) else norm).append(((module._parameters, key), name))
        self.half_grads = half
        self._flat_slots = [slot for slot, _ in flat]
        self._norm_slots = [slot for slot, _ in norm]
        # Read per step through map() over these (C-level iteration: no bytecode per parameter,
        # which a debugger makes ~5x dearer; GPT-2 has 148 parameter tensors).
        self._flat_dicts, self._flat_keys = [d for (d, _), _ in flat], [k for (_, k), _ in flat]
        self._norm_dicts, self._norm_keys = [d for (d, _), _ in norm], [k for (_, k), _ in norm]
        self.flat_names = [name for _, name in flat]
        self.norm_names = [name for _, name in norm]
        """Qualified names of the parameters whose gradients ``grad_groups`` returns, in order (when none is missing)."""

    def parameters(self) -> list[nn.Parameter]:
        """Every parameter once (a weight tied between two layers is listed once)."""
        self._refresh()
        params = []
        for slots, key in self._param_slots:
            param = slots.get(key)
            if param is not None:
                params.append(param)
        return _unique(params) if self._shared else params

    def grad_groups(self, extra: Sequence[torch.Tensor] = ()) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Every parameter's ``.grad`` once, and the ``extra`` gradients: (small CPU ones to flatten, the rest to norm).

        When every parameter has a gradient (the usual step) the two lists, before ``extra``, are in
        the order of ``flat_names`` and ``norm_names``; ``complete`` says whether that holds.
        """
        self._uses += 1  # _refresh(), written out: one call less per step
        if self._generation != self.structure.generation or self._uses > REFRESH_EVERY:
            self._rebuild()
        try:
            flat = list(map(_GRAD, map(dict.get, self._flat_dicts, self._flat_keys)))
            norm = list(map(_GRAD, map(dict.get, self._norm_dicts, self._norm_keys)))
        except AttributeError:  # a parameter deleted since the rebuild
            flat, norm = self._grads_one_by_one()
        n = len(flat) + len(norm)
        flat = list(filter(_IS_TENSOR, flat))
        norm = list(filter(_IS_TENSOR, norm))
        self.complete = len(flat) + len(norm) == n
        for grad in extra:  # flattens(grad), written out: one traced call less per step
            (flat if grad.device.type == "cpu" and grad.numel() <= FLATTEN_MAX_NUMEL else norm).append(grad)
        return flat, norm

    def _grads_one_by_one(self) -> tuple[list[Any], list[Any]]:
        groups: tuple[list[Any], list[Any]] = ([], [])
        for group, slots in zip(groups, (self._flat_slots, self._norm_slots)):
            for params, key in slots:
                param = params.get(key)
                group.append(None if param is None else param.grad)
        return groups

    def buffers(self) -> list[torch.Tensor]:
        """Every buffer once, read afresh from its module."""
        self._uses += 1  # _refresh(), written out, as in grad_groups
        if self._generation != self.structure.generation or self._uses > REFRESH_EVERY:
            self._rebuild()
        buffers = []
        for slots, key in self._buffer_slots:
            buffer = slots.get(key)
            if buffer is not None:
                buffers.append(buffer)
        return _unique(buffers) if self._shared_buffers else buffers


def flattens(tensor: torch.Tensor) -> bool:
    """Whether break on NaN checks this gradient (or this parameter's) through the flattened copy."""
    if tensor.device.type != "cpu":
        return False
    try:
        return tensor.numel() <= FLATTEN_MAX_NUMEL
    except (RuntimeError, ValueError):  # an uninitialized (lazy) parameter has no size yet
        return False


def _unique(tensors: list[T]) -> list[T]:
    """Drop repeats by identity, keeping order."""
    seen: set[int] = set()
    return [t for t in tensors if id(t) not in seen and not seen.add(id(t))]  # type: ignore[func-returns-value]
