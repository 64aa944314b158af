"""``GradTap``: a layer's backward phase built from tensor hooks, safe with in-place ops downstream.

A full backward hook (``register_full_backward_hook``) wraps the layer's output in a view-returning
autograd Function, so any in-place op downstream (``nn.ReLU(inplace=True)`` after a conv, the
classic ResNet block) raises inside the user's forward. Tensor hooks on the call's inputs and
outputs see the same ``grad_output`` and the gradient reaching the layer's inputs, and never change
what the user's code may do. Layer breakpoints and the deferred path's replays use it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hookscope.hooks.leaf_hooks import LeafHooks, hook_gradient
from hookscope.hooks.summaries import tensors_in


class _PendingCall:
    __slots__ = ("grad_input", "grad_output", "waiting", "outputs_hooked", "outputs_reached", "fired", "leaf_handles")

    def __init__(self, n_in: int) -> None:
        self.grad_input: list[Any] = [None] * n_in
        self.grad_output: list[Any] = []
        self.waiting = 0
        self.outputs_hooked = 0
        self.outputs_reached = 0
        """Output gradients seen: a backward that reached the inputs but none of the hooked outputs
        did not run this call's backward (a forward with no backward of its own, whose hook on a
        reused leaf input fires in a later step's backward)."""
        self.fired = False
        self.leaf_handles: dict[int, Any] | None = None
        """Hooks this call placed on leaf tensors, by input index (outputs: -1 - index): each is
        removed when it fires, since a leaf keeps its hooks for later steps (see leaf_hooks)."""

    def keep_leaf_hook(self, key: int, handle: Any, leaves: LeafHooks) -> None:
        leaves.keep(handle)
        if self.leaf_handles is None:
            self.leaf_handles = {}
        self.leaf_handles[key] = handle

    def drop_leaf_hook(self, key: int) -> None:
        assert self.leaf_handles is not None
        handle = self.leaf_handles.pop(key, None)
        if handle is not None:
            handle.remove()  # from inside the hook's own call: autograd holds its own reference


class GradTap:
    """``on_grads(module, grad_input, grad_output)`` once per backward of ``module``.

    A forward-pre hook hooks the inputs (before any in-place change to them),
    a forward hook hooks the outputs. ``grad_output`` is exact; ``grad_input``
    is the gradient reaching each positional input tensor (summed over every
    use of that tensor). Fires when every hooked input got its gradient, or
    at the first output gradient when no input needs one; never when no
    hooked output got one (the backward did not pass through this call).

    Runs in every forward and backward of a watched layer, so the hooks are
    ``partial``s of methods (no closure factory call) and loop in their own
    frame (under a debugger each extra frame is a trace event).
    """

    def __init__(
        self, module: nn.Module, on_grads: Callable[[nn.Module, tuple[Any, ...], tuple[Any, ...]], None]
    ) -> None:
        self._module = module
        self._on_grads = on_grads
        self._stack: list[_PendingCall | None] = []
        self._leaves = LeafHooks()
        self.active = True

    def close(self) -> int:
        """Stop firing; remove the hooks left on leaf tensors (returns how many were held)."""
        self.active = False
        return self._leaves.remove_all()

    def install(self) -> list[RemovableHandle]:
        return [self._module.register_forward_pre_hook(self._pre), self._module.register_forward_hook(self._post)]

    def _pre(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if not self.active or not torch.is_grad_enabled():
            self._stack.append(None)
            return
        if len(self._stack) > 64:  # forwards that raised left entries behind
            self._stack.clear()
        call = _PendingCall(len(args))
        for i, arg in enumerate(args):
            if isinstance(arg, torch.Tensor) and arg.requires_grad:
                call.waiting += 1
                handle = hook_gradient(arg, partial(self._input_grad, call, i))
                if handle is not None:  # a leaf keeps its hooks: see leaf_hooks
                    call.keep_leaf_hook(i, handle, self._leaves)
        self._stack.append(call)

    def _post(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        call = self._stack.pop() if self._stack else None
        if call is None or not self.active:
            return
        outs = [output] if isinstance(output, torch.Tensor) else tensors_in(output)  # the usual case: no call
        call.grad_output = [None] * len(outs)
        for j, tensor in enumerate(outs):
            if not tensor.requires_grad:
                continue
            passed_through = False
            if call.waiting:  # an input returned as it is (Identity, eval dropout, a no-op branch)?
                for arg in args:
                    if arg is tensor:
                        passed_through = True
                        break
            call.outputs_hooked += 1
            if passed_through:
                # Its input hook, placed first, runs first: the call must also wait for this one,
                # or it would fire with the output gradient still missing.
                call.waiting += 1
                handle = hook_gradient(tensor, partial(self._passed_through_grad, call, j))
            else:
                handle = hook_gradient(tensor, partial(self._output_grad, call, j))
            if handle is not None:  # a leaf keeps its hooks: see leaf_hooks
                call.keep_leaf_hook(-1 - j, handle, self._leaves)

    def _input_grad(self, call: _PendingCall, i: int, grad: torch.Tensor) -> None:
        if call.leaf_handles is not None:
            call.drop_leaf_hook(i)
        call.grad_input[i] = grad
        call.waiting -= 1
        if call.waiting <= 0:
            self._fire(call)

    def _output_grad(self, call: _PendingCall, j: int, grad: torch.Tensor) -> None:
        if call.leaf_handles is not None:
            call.drop_leaf_hook(-1 - j)
        call.grad_output[j] = grad
        call.outputs_reached += 1
        if call.waiting <= 0:
            self._fire(call)

    def _passed_through_grad(self, call: _PendingCall, j: int, grad: torch.Tensor) -> None:
        """An output that is also an input: its gradient is the output's and counts as an input's."""
        call.waiting -= 1
        self._output_grad(call, j, grad)  # a call more, only for these rare layers

    def _fire(self, call: _PendingCall) -> None:
        if call.fired or not self.active or (call.outputs_hooked and not call.outputs_reached):
            return  # (outputs hooked, none reached: this backward did not pass through the call)
        call.fired = True
        self._on_grads(self._module, tuple(call.grad_input), tuple(call.grad_output))
