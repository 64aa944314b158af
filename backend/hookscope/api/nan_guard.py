"""Stop on NaN/Inf with the layer named: forward hooks on every module, tensor hooks for backward.

Forward: a hook on every module checks its output; child hooks run before
their parent's, so the first report names the innermost producing layer.
It says whether the value was *born* there (finite inputs) or came in.

Backward: in each leaf module's forward, a tensor hook is put on its
inputs and outputs (one hook per tensor, whatever its roles). The first
non-finite gradient seen names the layer whose backward produced it: the
module that *consumed* the tensor. A non-finite gradient on a tensor no
module consumed (the model's output) came from the loss.

This is the API's simple, exact guard: one host sync per layer. Inside a
debug session the engine's cheaper sentinel-and-replay design is used.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from hookscope.hooks.conditions import REPLAY
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS

from .hookset import HookSet

Tensor = torch.Tensor

KEPT_PASSES = 2
"""Gradient hooks of this many recent forward passes stay armed (a forward may precede the backward)."""


@dataclass
class NonFiniteEvent:
    """Where a NaN/Inf first appeared."""

    layer: str
    """Qualified module name ('' is the root model)."""
    phase: Literal["forward", "backward"]
    born_here: bool
    """True when the layer's inputs (forward) / its output gradient (backward) were finite."""
    where: str
    """'output' | 'inputs' (forward); 'grad_input' | 'grad_output' (backward)."""
    counts: dict[str, int]
    """NaN, +Inf and -Inf counts in the offending tensor(s)."""
    candidates: list[str] = field(default_factory=list)
    """Every module that consumed the tensor, when several did (backward)."""
    op: Any = None
    """Forward, born here: the op and the user's line (``hookscope.engine.replay.nan_origin.OpOrigin``), found by
    running the layer again under an op tracer; None when that run does not reproduce it."""

    @property
    def message(self) -> str:
        what = ", ".join(
            f"{v} {k}"
            for k, v in (("NaN", self.counts["nan"]), ("+Inf", self.counts["posinf"]), ("-Inf", self.counts["neginf"]))
            if v
        )
        layer = self.layer or "(root)"
        if self.phase == "forward":
            origin = "produced by this layer" if self.born_here else "already in its inputs"
            at = f". {self.op.describe()}" if self.op is not None else ""
            return f"non-finite output of {layer} in forward ({what}): {origin}{at}"
        if self.born_here:
            extra = f" (consumed by {', '.join(self.candidates)})" if len(self.candidates) > 1 else ""
            return f"non-finite gradient produced by the backward of {layer}{extra} ({what})"
        return (
            f"non-finite gradient arriving at the output of {layer} ({what}): it came from the loss "
            "or from operations outside modules"
        )


class NonFiniteError(RuntimeError):
    """Raised out of the forward or backward pass at the first NaN/Inf; ``.event`` has the details."""

    def __init__(self, event: NonFiniteEvent) -> None:
        super().__init__(event.message)
        self.event = event
        self.layer = event.layer
        self.phase = event.phase


def _tensors(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)


def _counts(tensors: list[Tensor]) -> dict[str, int]:
    nan = sum(int(torch.isnan(t).sum()) for t in tensors)
    pos = sum(int(torch.isposinf(t).sum()) for t in tensors)
    neg = sum(int(torch.isneginf(t).sum()) for t in tensors)
    return {"nan": nan, "posinf": pos, "neginf": neg}


def _bad(tensors: Iterator[Tensor]) -> list[Tensor]:
    return [t for t in tensors if t.is_floating_point() and not bool(torch.isfinite(t).all())]


def _op_of(model: nn.Module, module: nn.Module, name: str, args: tuple, kwargs: dict[str, Any]) -> Any:
    """Run the layer again, without grad, under the op tracer: the op and line that made the NaN/Inf.

    The RNG and the layer's buffers are put back afterwards, so training goes on as it would
    have; a layer that drew random numbers (dropout in train mode) may not reproduce it (None).
    """
    from hookscope.engine.replay.nan_origin import OpTracer, named_tensors

    prefix = f"{name}." if name else ""
    names = {i: prefix + n for i, n in named_tensors(module).items()}
    buffers = [b for b in module.buffers()]
    saved = [b.detach().clone() for b in buffers]
    tracer = OpTracer(names)
    REPLAY.depth += 1  # Hookscope's other hooks (and this guard's) stay out of the re-run
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad(), tracer:
            module(*args, **kwargs)
    except Exception:
        return None
    finally:
        REPLAY.depth -= 1
        with torch.no_grad():
            for b, v in zip(buffers, saved):
                b.copy_(v)
    return tracer.found


@dataclass
class _Roles:
    """Which modules produced and consumed one tensor during a forward pass."""

    ref: weakref.ref
    producer: str | None = None
    consumers: list[str] = field(default_factory=list)


class NonFiniteGuard:
    """Hooks that stop (raise ``NonFiniteError``) or call ``on_hit`` at the first NaN/Inf.

    With ``on_hit`` the run goes on and only the first event per forward
    pass and per backward pass is reported. ``events`` lists them all.
    """

    def __init__(
        self, model: nn.Module, *, backward: bool = True, on_hit: Callable[[NonFiniteEvent], Any] | None = None
    ) -> None:
        self.on_hit = on_hit
        self.events: list[NonFiniteEvent] = []
        self.hooks = HookSet("stop_on_nonfinite")
        self._fired_forward = False
        self._fired_backward = False
        self._pass: dict[int, _Roles] = {}
        self._pass_handles: deque[list[RemovableHandle]] = deque()
        self.hooks.forward_pre(model, self._new_pass, prepend=True)
        for name, module in model.named_modules():
            self.hooks.forward(module, self._forward_check(name, model), with_kwargs=True)
            if backward and not any(True for _ in module.children()):
                self.hooks.forward_pre(module, self._mark(name, "consumer"))
                self.hooks.forward(module, self._mark_output(name))

    # -- forward -----------------------------------------------------------

    def _new_pass(self, module: nn.Module, args: Any) -> None:
        if REPLAY.depth:
            return  # the guard's own re-run of a layer (_op_of)
        self._fired_forward = False
        self._fired_backward = False
        self._pass = {}
        self._pass_handles.append([])
        while len(self._pass_handles) > KEPT_PASSES:
            for h in self._pass_handles.popleft():
                self.hooks.discard(h)

    def _forward_check(self, name: str, model: nn.Module) -> Any:
        def check_output(
            module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any = CALLED_WITHOUT_KWARGS
        ) -> None:
            if self._fired_forward or output is CALLED_WITHOUT_KWARGS:
                return
            bad = _bad(_tensors(output))
            if not bad:
                return
            self._fired_forward = True
            bad_in = _bad(_tensors((args, kwargs)))
            op = None if bad_in else _op_of(model, module, name, args, kwargs)
            self._report(
                NonFiniteEvent(
                    name,
                    "forward",
                    born_here=not bad_in,
                    where="output" if not bad_in else "inputs",
                    counts=_counts(bad),
                    op=op,
                )
            )

        return check_output

    # -- backward ----------------------------------------------------------

    def _mark(self, name: str, role: str) -> Any:
        def mark_inputs(module: nn.Module, args: Any) -> None:
            for t in _tensors(args):
                self._register(t, name, role)

        return mark_inputs

    def _mark_output(self, name: str) -> Any:
        def mark_outputs(module: nn.Module, args: Any, output: Any) -> None:
            for t in _tensors(output):
                self._register(t, name, "producer")

        return mark_outputs

    def _register(self, t: Tensor, name: str, role: str) -> None:
        if not (t.is_floating_point() and t.requires_grad) or not self._pass_handles:
            return
        roles = self._pass.get(id(t))
        if roles is None or roles.ref() is not t:
            roles = _Roles(weakref.ref(t))
            self._pass[id(t)] = roles
            self._pass_handles[-1].append(self.hooks.tensor(t, self._grad_check(roles)))
        if role == "producer":
            roles.producer = roles.producer or name
        elif name not in roles.consumers:
            roles.consumers.append(name)

    def _grad_check(self, roles: _Roles) -> Callable[[Tensor], None]:
        def check_grad(grad: Tensor) -> None:
            if self._fired_backward or bool(torch.isfinite(grad).all()):
                return
            self._fired_backward = True
            counts = _counts([grad])
            if roles.consumers:
                event = NonFiniteEvent(
                    roles.consumers[0],
                    "backward",
                    born_here=True,
                    where="grad_input",
                    counts=counts,
                    candidates=list(roles.consumers),
                )
            else:
                event = NonFiniteEvent(
                    roles.producer or "", "backward", born_here=False, where="grad_output", counts=counts
                )
            self._report(event)

        return check_grad

    # -- reporting and lifetime -------------------------------------------

    def _report(self, event: NonFiniteEvent) -> None:
        self.events.append(event)
        if self.on_hit is None:
            raise NonFiniteError(event)
        self.on_hit(event)

    def remove(self) -> int:
        self._pass_handles.clear()
        self._pass = {}
        return self.hooks.remove_all()

    def __enter__(self) -> NonFiniteGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def stop_on_nonfinite(
    model: nn.Module, *, backward: bool = True, on_hit: Callable[[NonFiniteEvent], Any] | None = None
) -> NonFiniteGuard:
    """Stop at the first layer that produces NaN/Inf, naming it.

    Without ``on_hit`` a ``NonFiniteError`` (``.layer``, ``.phase``,
    ``.event``) is raised out of ``model(x)`` or ``loss.backward()``; under
    a debugger, that is where it stops. With ``on_hit(event)`` the run goes on.

    >>> with hookscope.stop_on_nonfinite(model):
    ...     loss = model(x).sum(); loss.backward()
    NonFiniteError: non-finite output of block.log in forward (3 NaN): produced by this layer
    """
    return NonFiniteGuard(model, backward=backward, on_hit=on_hit)
