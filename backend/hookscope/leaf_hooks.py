"""Gradient hooks on leaf tensors, which Hookscope must remove itself.

A hook on an activation dies with the autograd graph once the backward is
done. A hook on a leaf stays on that tensor for good: a user's input that
requires grad and is fed again every step (an image being optimised, a
saliency input), a Parameter passed to a layer as an argument, a layer that
returns its input unchanged (``nn.Identity``, dropout in eval mode). Left
there, every step adds one more Python call to every later backward: the
step slows down without bound and the hooks outlive the breakpoint that
placed them. So every hook Hookscope places on a tensor goes through
``LeafHooks.register`` (or, on hot paths, ``keep`` after a ``grad_fn is
None`` test inline), which keeps the handle when the tensor is a leaf.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

import torch

KEPT_MAX = 64
"""Leaf hooks kept per owner; the oldest is removed beyond this (a forward whose
backward never came: an evaluation pass with grad enabled, an exception)."""


class LeafHooks:
    """The handles of one owner's hooks on leaf tensors: bounded, and removed together."""

    __slots__ = ("handles", "_kept_max")

    def __init__(self, kept_max: int = KEPT_MAX) -> None:
        self.handles: deque[Any] = deque()
        """Held handles (test ``if leaves.handles`` on hot paths: a plain attribute, no call)."""
        self._kept_max = kept_max

    def register(self, tensor: torch.Tensor, hook: Callable[[torch.Tensor], Any]) -> Any:
        """``tensor.register_hook(hook)``; returns the handle when the tensor is a leaf, else None."""
        handle = tensor.register_hook(hook)
        if tensor.grad_fn is not None:
            return None  # an activation: the hook goes with the graph
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
