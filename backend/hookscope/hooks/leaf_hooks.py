"""Gradient hooks on leaf tensors, which Hookscope must remove itself.

A hook on an activation dies with the autograd graph once the backward is
done. A hook on a leaf stays on that tensor for good: a user's input that
requires grad and is fed again every step (an image being optimised, a
saliency input), a Parameter passed to a layer as an argument, a layer that
returns its input unchanged (``nn.Identity``, dropout in eval mode). Left
there, every step adds one more Python call to every later backward: the
step slows down without bound and the hooks outlive the breakpoint that
placed them. So every hook Hookscope places on a tensor goes through
``hook_gradient``, which hands back a handle only for a hook that outlives
the step, and the owner keeps that handle in its ``LeafHooks`` (``register``
does both).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

import torch

KEPT_MAX = 64
"""Leaf hooks kept per owner; the oldest is removed beyond this (a forward whose
backward never came: an evaluation pass with grad enabled, an exception)."""


def hook_gradient(tensor: torch.Tensor, hook: Callable[[torch.Tensor], Any]) -> Any:
    """``tensor.register_hook(hook)``; returns the handle when the hook outlives the step (a leaf), else None.

    On a plain tensor with a ``grad_fn`` (an activation: the usual case) this
    does what ``Tensor.register_hook`` does, the tensor's hook dict registered
    once with its node, without that method's frame and ``RemovableHandle``'s:
    layer breakpoints place a hook on every watched layer's inputs and outputs
    in every step, and under a debugger each frame is a traced call (~2.5 µs).
    No handle is needed there: the hook goes with the graph. The hook is its
    own key in the dict, apart from the handles' integer keys.
    """
    grad_fn = tensor.grad_fn
    if grad_fn is None or type(tensor) is not torch.Tensor:  # a leaf, or a subclass with its own rules
        handle = tensor.register_hook(hook)
        return handle if grad_fn is None else None
    try:
        hooks = tensor._backward_hooks
        if hooks is None:
            hooks = tensor._backward_hooks = OrderedDict()
            grad_fn._register_hook_dict(tensor)
    except AttributeError:  # a torch without these internals: the public way
        tensor.register_hook(hook)
        return None
    hooks[hook] = hook  # type: ignore[index]  # keyed by the hook itself: no handle, it dies with the graph
    return None


class LeafHooks:
    """The handles of one owner's hooks on leaf tensors: bounded, and removed together."""

    __slots__ = ("handles", "_kept_max")

    def __init__(self, kept_max: int = KEPT_MAX) -> None:
        self.handles: deque[Any] = deque()
        """Held handles (test ``if leaves.handles`` on hot paths: a plain attribute, no call)."""
        self._kept_max = kept_max

    def register(self, tensor: torch.Tensor, hook: Callable[[torch.Tensor], Any]) -> Any:
        """``hook_gradient``, keeping the handle of a hook on a leaf; returns it (None: an activation)."""
        handle = hook_gradient(tensor, hook)
        if handle is not None:
            self.keep(handle)
        return handle

    def keep(self, handle: Any) -> None:
        """Hold the handle of a hook just placed on a leaf."""
        self.handles.append(handle)
        if len(self.handles) > self._kept_max:
            self.handles.popleft().remove()

    def remove_all(self) -> int:
        """Remove every leaf hook still held; returns how many were held."""
        count = len(self.handles)
        while self.handles:
            self.handles.popleft().remove()  # removing one that already went is a no-op
        return count
