"""The frame every replay of a recorded step runs in, shared by break on NaN/Inf and the deferred conditions.

Both record a root call at its forward-pre (``hooks/step_snapshot.CallSnapshot``), check the
step once on the device, and on a bad step re-run the call: RNG states and buffers put back as
they were when it started (``CallSnapshot.apply``, inside the frame), Hookscope's steady-state
hooks quiet (``REPLAY.depth``), and afterwards the state the step left put back, so training goes
on exactly as without Hookscope. A backward replay also sets the parameters' ``.grad`` aside
(the replay must not add to the step's gradients) and starts from the root outputs with the
gradients the original step gave them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from hookscope.hooks.conditions import REPLAY
from hookscope.hooks.step_snapshot import state_kept
from hookscope.hooks.summaries import tensors_in


@contextlib.contextmanager
def replay_frame(buffers: Sequence[torch.Tensor], cuda: bool) -> Iterator[None]:
    """RNG states and ``buffers`` put back as they are now when the replay ends; other hooks quiet meanwhile."""
    with state_kept(buffers, cuda):
        REPLAY.depth += 1
        try:
            yield
        finally:
            REPLAY.depth -= 1


@contextlib.contextmanager
def gradients_set_aside(params: Sequence[torch.Tensor]) -> Iterator[None]:
    """The parameters' ``.grad`` is None during a backward replay and put back after it."""
    saved = [p.grad for p in params]
    for p in params:
        p.grad = None
    try:
        yield
    finally:
        for p, g in zip(params, saved):
            p.grad = g


def pair_received(
    output: Any, received: Sequence[torch.Tensor | None], outs: list[torch.Tensor], grads: list[torch.Tensor]
) -> None:
    """Append to ``outs``/``grads`` each replayed output tensor that needs a gradient and the gradient
    the original call's output in that place received (``CallSnapshot.root_grads``; None: none came)."""
    tensors = [t for t in tensors_in(output) if t.requires_grad]
    for tensor, grad in zip(tensors, received):
        if grad is not None:
            outs.append(tensor)
            grads.append(grad)
