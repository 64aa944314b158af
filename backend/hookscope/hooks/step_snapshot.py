"""What replaying one call of a model root needs, taken at its forward-pre, and putting it back.

A replay re-runs the root's forward on the same inputs with the RNG state and the
buffers as they were when the call started, so dropout masks and BatchNorm
statistics are the same and the values bit-identical (on deterministic kernels);
afterwards the state the step left is put back, so training goes on exactly as
without Hookscope. The call's args and kwargs are referenced, not copied (an
in-place change to an input after the call is not undone: a documented limit).
Taking a snapshot costs a generator copy (``clone_state``: ~3x cheaper inside a
step than ``get_state``, which builds a 5 KB tensor) and one fused copy of the
buffers into storage kept from the last call (``_foreach_copy_``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch


class CallSnapshot:
    """One root call: its inputs, grad mode, RNG states, buffers, and the gradients its outputs received."""

    __slots__ = ("args", "kwargs", "grad_enabled", "cpu_rng", "cuda_rng", "buffers", "buffer_ids", "root_grads")

    def __init__(self) -> None:
        self.args: tuple[Any, ...] = ()
        self.kwargs: dict[str, Any] = {}
        self.grad_enabled = True
        self.cpu_rng: torch.Generator | None = None
        self.cuda_rng: list[torch.Tensor] | None = None
        self.buffers: list[torch.Tensor] = []
        self.buffer_ids: list[int] = []
        self.root_grads: list[torch.Tensor | None] = []
        """The gradient each output tensor of the call received (None: none came)."""

    def take(self, args: tuple[Any, ...], kwargs: dict[str, Any], buffers: Sequence[torch.Tensor]) -> None:
        self.args, self.kwargs = args, kwargs
        self.grad_enabled = torch.is_grad_enabled()
        self.cpu_rng = torch.default_generator.clone_state()
        # torch.cuda._initialized first: is_initialized() is one more traced frame per step
        cuda = getattr(torch.cuda, "_initialized", True) and torch.cuda.is_initialized()
        self.cuda_rng = torch.cuda.get_rng_state_all() if cuda else None
        self.root_grads = []
        if buffers or self.buffers:
            self._copy_buffers(buffers)

    def _copy_buffers(self, buffers: Sequence[torch.Tensor]) -> None:
        ids = [id(b) for b in buffers]
        if ids == self.buffer_ids:  # the same tensors as last time: copy into the kept storage
            try:
                with torch.no_grad():
                    torch._foreach_copy_(self.buffers, list(buffers))
                return
            except RuntimeError:  # a buffer resized in place: a new copy
                pass
        self.buffer_ids = ids
        self.buffers = [b.detach().clone() for b in buffers]

    def release(self) -> None:
        """Drop the references to the call's inputs and gradients (the storage is kept for reuse)."""
        self.args, self.kwargs, self.root_grads = (), {}, []

    def apply(self, buffers: Sequence[torch.Tensor]) -> None:
        """Put the RNG state and the buffers back as they were when the call started."""
        if self.cpu_rng is not None:
            torch.set_rng_state(self.cpu_rng.get_state())
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        live = [b.data for b in buffers]  # .data: no version bump for autograd
        if live and len(live) == len(self.buffers):
            torch._foreach_copy_(live, self.buffers)


@contextlib.contextmanager
def state_kept(buffers: Sequence[torch.Tensor], cuda: bool) -> Iterator[None]:
    """Whatever a replay does to the RNG states and the buffers is undone when it ends."""
    cpu_now = torch.get_rng_state()
    cuda_now = torch.cuda.get_rng_state_all() if cuda else None
    live = [b.data for b in buffers]
    kept = [b.clone() for b in live]
    try:
        yield
    finally:
        if live:
            torch._foreach_copy_(live, kept)
        torch.set_rng_state(cpu_now)
        if cuda_now is not None:
            torch.cuda.set_rng_state_all(cuda_now)
