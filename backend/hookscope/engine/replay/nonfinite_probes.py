"""Replay-only hooks that name the first layer with a non-finite value, forward or backward.

Installed on every module of a model only while break on NaN/Inf replays a bad step
(``nonfinite_search.py``); each records the first culprit it sees as a ``Found`` (the stop's
event, its reason and origin), and the stop happens after the replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hookscope.engine.replay.nan_origin import OpOrigin
from hookscope.hooks.conditions import (
    ORIGIN_BORN,
    ORIGIN_INPUTS,
    ORIGIN_LOSS,
    HookEvent,
    describe_counts,
    nonfinite_counts,
)
from hookscope.hooks.summaries import all_finite, tensors_in


def _depth(name: str) -> int:
    return name.count(".") + 1 if name else 0


class Found:
    """What a probe found: the stop's event, its reason and its origin (``hooks/conditions`` ORIGIN_*)."""

    __slots__ = ("event", "reason", "origin")

    def __init__(self, event: HookEvent, reason: str, origin: str | None) -> None:
        self.event, self.reason, self.origin = event, reason, origin

    def at_op(self, op: OpOrigin | None, clean_before: bool) -> Found:
        """The layer-level finding with the op and line the replay's tracer saw (when it saw one)."""
        if op is not None:
            self.reason += f". {op.describe()}"
            if op.tensor_name is not None and clean_before:
                self.reason += (
                    "; the step before was clean, so it was written since "
                    "(by the optimizer step, or code outside autograd)"
                )
            self.event.extra["nan_origin"] = op
        return self


class ForwardProbe:
    """Replay-only forward hooks on every module: the first non-finite value, in execution order."""

    def __init__(self, named: list[tuple[str, nn.Module]]) -> None:
        self._named = named
        self._handles: list[Any] = []
        self.found: Found | None = None
        self._parents = {name: name.rpartition(".")[0] for name, _ in named}

    def install(self) -> None:
        for name, module in self._named:
            self._handles.append(module.register_forward_pre_hook(self._pre(name)))
            self._handles.append(module.register_forward_hook(self._post(name)))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _pre(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            if self.found is not None:
                return
            tensors = tensors_in(args)
            if all_finite(tensors):
                return
            parent = self._parents.get(name, "") or "the model"
            counts = describe_counts(nonfinite_counts(tensors))
            self.found = Found(
                HookEvent("", name, module, "forward_pre", inputs=args),
                f"NaN/Inf first produced by code in {parent}'s forward between layers, "
                f"first seen in the inputs of layer {name} ({counts})",
                ORIGIN_INPUTS,
            )

        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if self.found is not None:
                return
            tensors = tensors_in(output)
            if all_finite(tensors):
                return
            counts = describe_counts(nonfinite_counts(tensors))
            where = f"layer {name} (forward)" if name else f"{type(module).__name__}.forward (the model itself)"
            self.found = Found(
                HookEvent("", name, module, "forward", inputs=args, output=output),
                f"NaN/Inf first produced in {where}: {counts}",
                ORIGIN_BORN,
            )

        return hook


class _TensorRoles:
    __slots__ = ("tensor", "inputs_of", "outputs_of")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.inputs_of: list[tuple[str, nn.Module, int]] = []
        self.outputs_of: list[tuple[str, nn.Module, int]] = []


class BackwardProbe:
    """Replay-only hooks: tensor hooks on every layer's inputs, outputs and parameters.

    One hook per tensor version (``(id, _version)``), knowing every role the
    tensor plays: the output of one layer is usually the input of the next,
    and a bad gradient there was born in the layer that consumed it.
    """

    def __init__(self, named: list[tuple[str, nn.Module]]) -> None:
        self._named = named
        self._handles: list[Any] = []
        self._roles: dict[tuple[int, int], _TensorRoles] = {}
        self._out_grads: dict[str, list[Any]] = {}
        self.found: Found | None = None

    def install(self) -> None:
        for name, module in self._named:
            self._handles.append(module.register_forward_pre_hook(self._pre(name)))
            self._handles.append(module.register_forward_hook(self._post(name)))
            for pname, param in module.named_parameters(recurse=False):
                if param.requires_grad:
                    self._handles.append(param.register_hook(self._param_hook(name, module, pname, param)))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _roles_of(self, tensor: torch.Tensor) -> _TensorRoles:
        key = (id(tensor), tensor._version)
        roles = self._roles.get(key)
        if roles is None:
            roles = self._roles[key] = _TensorRoles(tensor)
            # kept with the module hooks: on a leaf (the model's input, a parameter passed to a
            # layer) the hook would outlive the replay
            self._handles.append(tensor.register_hook(self._tensor_hook(roles)))
        return roles

    def _pre(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            for i, arg in enumerate(args):
                if isinstance(arg, torch.Tensor) and arg.requires_grad:
                    self._roles_of(arg).inputs_of.append((name, module, i))

        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            outs = tensors_in(output)
            self._out_grads[name] = [None] * len(outs)
            for j, tensor in enumerate(outs):
                if tensor.requires_grad:
                    self._roles_of(tensor).outputs_of.append((name, module, j))

        return hook

    def _tensor_hook(self, roles: _TensorRoles) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            for name, _, j in roles.outputs_of:
                slots = self._out_grads.get(name)
                if slots is not None and j < len(slots):
                    slots[j] = grad
            if self.found is not None or all_finite([grad]):
                return
            counts = describe_counts(nonfinite_counts([grad]))
            if roles.inputs_of:
                name, module, i = max(roles.inputs_of, key=lambda r: _depth(r[0]))
                grad_input: list[Any] = [None] * (i + 1)
                grad_input[i] = grad
                self.found = Found(
                    HookEvent(
                        "",
                        name,
                        module,
                        "backward",
                        grad_input=tuple(grad_input),
                        grad_output=tuple(self._out_grads.get(name, ())),
                    ),
                    f"NaN/Inf first produced in layer {name or 'the model'} (backward): {counts} in the "
                    "gradient of its input",
                    ORIGIN_BORN,
                )
                return
            name, module, j = max(roles.outputs_of, key=lambda r: _depth(r[0]))
            if any(not n for n, _, _ in roles.outputs_of):
                name, module = "", next(m for n, m, _ in roles.outputs_of if not n)
                reason, origin = (
                    f"NaN/Inf in the gradient reaching the model output ({counts}): it came in from the loss",
                    ORIGIN_LOSS,
                )
            else:
                parent = name.rpartition(".")[0] or "the model"
                reason, origin = (
                    (
                        f"NaN/Inf in the gradient reaching the output of layer {name} ({counts}): "
                        f"first produced by code after it in {parent}'s forward"
                    ),
                    ORIGIN_INPUTS,
                )
            self.found = Found(
                HookEvent("", name, module, "backward", grad_output=tuple(self._out_grads.get(name, ()))),
                reason,
                origin,
            )

        return hook

    def _param_hook(
        self, name: str, module: nn.Module, pname: str, param: torch.Tensor
    ) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if self.found is not None or all_finite([grad]):
                return
            counts = describe_counts(nonfinite_counts([grad]))
            self.found = Found(
                HookEvent("", name, module, "param_grad", param_name=pname, grad=grad, extra={"param": param}),
                f"NaN/Inf first produced in layer {name or 'the model'} (backward): {counts} "
                f"in the gradient of {pname}",
                ORIGIN_BORN,
            )

        return hook
