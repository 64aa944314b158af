"""Breakpoint conditions and what a hook hands them (``HookEvent``).

A condition looks at the tensors of one hook call and says whether the
breakpoint fires, with a short detail for the stop reason and, for
non-finite values, where they came from. Checks that need a number on the
host (non-finite, norms, abs-max) cost one sync each; they only run on the
layers a breakpoint was set on.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

import torch

from hookscope.hooks.summaries import all_finite, tensors_in
from hookscope.link.protocol_vocabulary import CONDITIONS

ORIGIN_BORN = "born here"
ORIGIN_INPUTS = "came in through inputs"
ORIGIN_LOSS = "came in from the loss"


class _ReplayState:
    """Set while a step is replayed (engine/replay/frame.py): Hookscope's other hooks stay quiet then."""

    depth = 0


REPLAY = _ReplayState()


class ConditionError(Exception):
    """The condition itself failed (an expression raised): reported as a notice, never a stop."""


@dataclass
class HookEvent:
    """One hook call, with the locals the user will see in the stop frame."""

    model: str
    layer: str
    module: torch.nn.Module
    phase: str
    inputs: Any = None
    output: Any = None
    grad_input: Any = None
    grad_output: Any = None
    param_name: str | None = None
    grad: Any = None
    step: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    # These run in every hook call of a conditional breakpoint: no per-call dicts or generators.
    def primary(self) -> list[torch.Tensor]:
        """The tensors this phase produces: what value conditions look at."""
        phase = self.phase
        value = (
            self.output
            if phase == "forward"
            else self.grad_input
            if phase == "backward"
            else self.inputs
            if phase == "forward_pre"
            else self.grad
        )
        return tensors_in(value)

    def upstream(self) -> list[torch.Tensor]:
        """The tensors this phase received (inputs of forward, grad_output of backward)."""
        phase = self.phase
        return tensors_in(self.inputs if phase == "forward" else self.grad_output if phase == "backward" else None)

    def gradients(self) -> list[torch.Tensor]:
        """Gradient tensors for norm conditions: what reaches the layer (grad_output) or the .grad."""
        return tensors_in(self.grad if self.phase == "param_grad" else self.grad_output)

    def frame_locals(self) -> dict[str, Any]:
        names: dict[str, Any] = {
            "layer": self.layer,
            "module": self.module,
            "phase": self.phase,
            "step": self.step,
            "torch": torch,
        }
        if self.phase == "param_grad":
            names.update(param_name=self.param_name, grad=self.grad, param=self.extra.get("param"))
        elif self.phase == "backward":
            names.update(grad_input=self.grad_input, grad_output=self.grad_output)
        else:
            names.update(inputs=self.inputs, output=self.output)
        return names


def nonfinite_counts(tensors: list[torch.Tensor]) -> tuple[int, int, int]:
    """(NaN, +Inf, -Inf) counts over the tensors, one host sync."""
    floats = [t for t in tensors if t.is_floating_point() and t.numel()]
    if not floats:
        return 0, 0, 0
    rows = [
        torch.stack([torch.isnan(t).sum(), (t == float("inf")).sum(), (t == float("-inf")).sum()]).to(floats[0].device)
        for t in floats
    ]
    nan, pos, neg = torch.stack(rows).sum(0).tolist()
    return int(nan), int(pos), int(neg)


def describe_counts(counts: tuple[int, int, int]) -> str:
    parts = [f"{n} {label}" for n, label in zip(counts, ("NaN", "+Inf", "-Inf")) if n]
    return ", ".join(parts) or "no NaN/Inf"


def _norm(tensors: list[torch.Tensor]) -> float:
    floats = [t for t in tensors if t.is_floating_point() and t.numel()]
    if not floats:
        return 0.0
    if len(floats) == 1:  # the usual gradient: one op and the sync
        t = floats[0]
        return float(torch.linalg.vector_norm(t.detach(), dtype=torch.float32 if t.element_size() < 4 else None))
    norms = torch._foreach_norm([t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in floats])
    return float(torch.linalg.vector_norm(torch.stack([n.to(norms[0].device) for n in norms])))


def _absmax(tensors: list[torch.Tensor]) -> float:
    floats = [t for t in tensors if not t.is_complex() and t.dtype != torch.bool and t.numel()]
    if not floats:
        return 0.0
    if len(floats) == 1:
        return _absmax_one(floats[0])
    return float(torch.stack([t.detach().abs().amax().float().to(floats[0].device) for t in floats]).amax())


def _absmax_one(t: torch.Tensor) -> float:
    """The usual layer output: one pass and the sync. aminmax is vectorised on CPU;
    abs().amax() writes a copy first and the inf-norm is not (10x slower)."""
    low, high = torch.aminmax(t.detach())
    if t.is_cpu:  # no sync to save: two reads are cheaper than a stack
        return max(-low.item(), high.item())
    low, high = torch.stack((low, high)).tolist()  # one device-to-host transfer
    value: float = max(-low, high)
    return value


@dataclass
class Condition:
    """``BreakpointSpec.condition``: {kind, threshold?, expression?}."""

    kind: str = "always"
    threshold: float | None = None
    expression: str | None = None
    code: CodeType | None = None

    @classmethod
    def parse(cls, raw: Any) -> Condition:
        if raw is None:
            return cls()
        if not isinstance(raw, dict):
            raise ValueError("condition must be a map {kind, threshold?, expression?}")
        kind = raw.get("kind", "always")
        if kind not in CONDITIONS:
            raise ValueError(f"unknown condition kind {kind!r}; expected one of {', '.join(CONDITIONS)}")
        threshold = raw.get("threshold")
        if kind in ("grad_norm_below", "grad_norm_above", "absmax_above"):
            if not isinstance(threshold, (int, float)) or isinstance(threshold, bool):
                raise ValueError(f"condition {kind!r} needs a numeric 'threshold'")
            threshold = float(threshold)
        expression = raw.get("expression")
        code = None
        if kind == "expression":
            if not isinstance(expression, str) or not expression.strip():
                raise ValueError("condition 'expression' needs a non-empty 'expression'")
            try:
                code = compile(expression, "<hookscope condition>", "eval")
            except SyntaxError as exc:
                raise ValueError(f"condition expression does not parse: {exc.msg}") from exc
        return cls(kind, threshold, expression, code)

    def applies_to(self, phase: str) -> bool:
        if self.kind in ("grad_norm_below", "grad_norm_above"):
            return phase in ("backward", "param_grad")
        return True

    def rejects(self, phase: str, produced: Any, received: Any) -> bool:
        """True when this call surely does not hit: a cheap test straight from the hook's values.

        Value conditions (abs-max, NaN/Inf, gradient norm) are decided here
        without building a ``HookEvent`` or walking the event's accessors:
        under a debugger each of those frames is a trace event, and a
        condition on every layer runs this in every hook call. ``produced`` and
        ``received`` are what ``HookEvent.primary``/``upstream`` return for the
        phase. False means "run ``check``", which also writes the stop reason;
        it is also the answer when this test fails, so that ``check`` reports why.
        """
        kind = self.kind
        try:
            if kind == "absmax_above":
                one = produced[0] if type(produced) is tuple and len(produced) == 1 else produced  # grad_input
                if not (isinstance(one, torch.Tensor) and one.is_floating_point() and one.numel()):
                    value = _absmax(tensors_in(produced))
                elif one.is_cpu:  # _absmax_one's CPU case written out: one traced call less per hook
                    low, high = torch.aminmax(one.detach())
                    value = max(-low.item(), high.item())
                else:
                    value = _absmax_one(one)
                return value <= self.threshold  # type: ignore[operator]  # parse() requires it for this kind; a NaN abs-max is not <=: check() decides
            if kind == "nonfinite":
                return all_finite(tensors_in(produced) + tensors_in(received))
            if kind in ("grad_norm_below", "grad_norm_above"):
                grads = received if phase == "backward" else produced if phase == "param_grad" else None
                if grads is None:
                    return True
                norm = _norm(tensors_in(grads))
                # parse() requires a threshold for these kinds
                return norm >= self.threshold if kind == "grad_norm_below" else norm <= self.threshold  # type: ignore[operator]
        except Exception:  # noqa: BLE001 - check() meets the same error and reports it
            return False
        return False

    def check(self, event: HookEvent) -> tuple[bool, str, str | None]:
        """(holds, detail for the stop reason, origin of non-finite values)."""
        kind = self.kind
        if kind == "always":
            return True, "", None
        if kind == "nonfinite":
            produced = event.primary()
            received = event.upstream()
            bad_received = not all_finite(received)
            if all_finite(produced) and not bad_received:
                return False, "", None
            if event.phase == "forward_pre":
                return True, f"NaN/Inf in inputs ({describe_counts(nonfinite_counts(produced))})", ORIGIN_INPUTS
            tensors = produced if not all_finite(produced) else received
            origin = ORIGIN_INPUTS if bad_received else ORIGIN_BORN
            return True, f"NaN/Inf ({describe_counts(nonfinite_counts(tensors))}), {origin}", origin
        if kind in ("grad_norm_below", "grad_norm_above"):
            if not self.applies_to(event.phase):
                return False, "", None
            grads = event.gradients()
            if not grads:
                return False, "", None
            norm = _norm(grads)
            assert self.threshold is not None
            if kind == "grad_norm_below" and norm < self.threshold:
                return True, f"gradient norm {norm:.3g} < {self.threshold:g} (vanishing)", None
            if kind == "grad_norm_above" and norm > self.threshold:
                return True, f"gradient norm {norm:.3g} > {self.threshold:g} (exploding)", None
            return False, "", None
        if kind == "absmax_above":
            tensors = event.primary()
            if not tensors:
                return False, "", None
            value = _absmax(tensors)
            assert self.threshold is not None
            if value > self.threshold:
                return True, f"abs-max {value:.4g} > {self.threshold:g}", None
            return False, "", None
        if kind == "expression":
            assert self.code is not None
            try:
                result = eval(self.code, {"__builtins__": builtins}, event.frame_locals())  # noqa: S307
                holds = bool(result)
            except Exception as exc:
                raise ConditionError(f"condition {self.expression!r} raised {type(exc).__name__}: {exc}") from exc
            return holds, f"{self.expression} is true" if holds else "", None
        return False, "", None


@dataclass
class HitCounter:
    """Counts the calls where the condition held; hitCount = only the Nth, every = each Nth."""

    hit_count: int | None = None
    every: int | None = None
    hits: int = 0

    def should_fire(self) -> bool:
        self.hits += 1
        n = self.hits
        if self.hit_count is not None:
            if n < self.hit_count:
                return False
            if self.every is None:
                return n == self.hit_count
            return (n - self.hit_count) % self.every == 0
        if self.every is not None:
            return n % self.every == 0
        return True
