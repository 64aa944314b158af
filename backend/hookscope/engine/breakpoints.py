"""Layer breakpoints: the resolved layers' hooks, conditions and hit counting.

A spec (``engine/breakpoint_spec.py``) is resolved to layers by ``engine/model_index.py``; here
hooks are registered only for the layers and phases asked for, and every handle is owned:
``clear()`` removes them all. The ``backward`` phase is built from tensor hooks
(``hooks/grad_tap.py``), not ``register_full_backward_hook``, which breaks in-place ops
downstream. A value condition on many layers is checked once per step instead
(``engine/replay/deferred.py``), with these exact hooks installed only to replay a step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from hookscope.engine.breakpoint_spec import BreakpointSpec
from hookscope.engine.model_index import ModelIndex
from hookscope.engine.replay.deferred import DEFERRED_PHASES, DeferredHooks, DeferredValues, KeepOutputsFn, deferrable
from hookscope.hooks.conditions import REPLAY, ConditionError, HitCounter, HookEvent
from hookscope.hooks.grad_tap import GradTap

FireFn = Callable[["Breakpoint", HookEvent, str, "str | None"], None]
NoticeFn = Callable[[str, str, str], None]


@dataclass
class Breakpoint:
    """A spec with its resolved layers and the hook handles it owns."""

    spec: BreakpointSpec
    layers: list[tuple[str, str]] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    taps: list[GradTap] = field(default_factory=list)
    counter: HitCounter = field(default_factory=HitCounter)
    active: bool = True
    reported_errors: set[str] = field(default_factory=set)
    deferred: tuple[str, ...] = ()
    """Phases checked once per step (deferred.py) rather than in every call."""
    replaying: bool = False
    """A deferred check is replaying a step: the exact hooks installed for it may fire."""
    closers: list[Callable[[], Any]] = field(default_factory=list)
    """Run at removal (the deferred path's leaf-tensor hooks and exact fallback taps)."""

    def remove(self) -> int:
        self.active = False
        for tap in self.taps:
            tap.close()
        for close in self.closers:
            close()
        for handle in self.handles:
            handle.remove()
        count = len(self.handles)
        self.handles.clear()
        self.taps.clear()
        self.closers.clear()
        return count


class LayerBreakpoints:
    """The whole set of layer breakpoints of one process (replaced as a whole)."""

    def __init__(
        self, fire: FireFn, notice: NoticeFn, step_of: Callable[[str], int], keep_outputs: KeepOutputsFn | None = None
    ) -> None:
        self._fire = fire
        self._notice = notice
        self._step_of = step_of
        self.breakpoints: list[Breakpoint] = []
        self._modules: dict[tuple[str, str], nn.Module] = {}
        """(model, layer) -> module of every resolved layer (the deferred path's replays install on them)."""
        hooks = DeferredHooks(self._exact, self._exact_hooks, self._make_tap, notice, step_of)
        if keep_outputs is not None:
            hooks.keep_outputs = keep_outputs
        self.deferred = DeferredValues(hooks)

    @property
    def hook_count(self) -> int:
        return sum(len(bp.handles) for bp in self.breakpoints) + self.deferred.hook_count

    def models_with_hooks(self) -> set[str]:
        return {model for bp in self.breakpoints if bp.handles for model, _ in bp.layers}

    def clear(self) -> int:
        removed = sum(bp.remove() for bp in self.breakpoints) + self.deferred.clear()
        self.breakpoints = []
        self._modules = {}
        return removed

    def set(self, raw_specs: list[Any], indexes: dict[str, ModelIndex]) -> list[dict[str, Any]]:
        """Replace every breakpoint; returns ``[{id, layers, error?}]``."""
        self.clear()
        resolved: list[dict[str, Any]] = []
        for raw in raw_specs:
            raw_id = raw.get("id") if isinstance(raw, dict) else None
            try:
                spec = BreakpointSpec.parse(raw)
            except ValueError as exc:
                resolved.append({"id": str(raw_id or ""), "layers": [], "error": str(exc)})
                continue
            bp = Breakpoint(spec, counter=HitCounter(spec.hit_count, spec.every))
            for model_id, index in indexes.items():
                if spec.model is not None and spec.model != model_id:
                    continue
                bp.layers.extend((model_id, name) for name in index.resolve(spec))
            entry: dict[str, Any] = {"id": spec.id, "layers": [name for _, name in bp.layers]}
            if not bp.layers:
                entry["error"] = f"breakpoint {spec.id}: {_describe(spec)} matches no layer"
            elif not any(spec.condition.applies_to(p) for p in spec.phases):
                entry["error"] = f"condition {spec.condition.kind!r} applies to the backward and param_grad phases only"
            if spec.enabled:
                self._install_all(bp, indexes)
            self.breakpoints.append(bp)
            resolved.append(entry)
        return resolved

    def _install_all(self, bp: Breakpoint, indexes: dict[str, ModelIndex]) -> None:
        """Exact hooks for every phase, or the deferred path's for the phases it checks once per step."""
        spec = bp.spec
        if deferrable(spec.condition, spec.hit_count, spec.every, len(bp.layers)):
            bp.deferred = tuple(p for p in spec.phases if p in DEFERRED_PHASES)
        exact = tuple(p for p in spec.phases if p not in bp.deferred)
        by_model: dict[str, list[tuple[str, nn.Module]]] = {}
        tables: dict[str, dict[str, nn.Module]] = {}  # one walk of each model, not one per layer
        for model_id, name in bp.layers:
            table = tables.get(model_id)
            if table is None:
                table = tables[model_id] = indexes[model_id].modules()
            module = table.get(name)
            if module is None:
                continue
            self._modules[(model_id, name)] = module
            by_model.setdefault(model_id, []).append((name, module))
            if exact:
                self._install(bp, model_id, name, module, exact, bp.handles, bp.taps)
        if bp.deferred:
            for model_id, layers in by_model.items():
                root = indexes[model_id].model
                if root is not None:
                    self.deferred.add(bp, bp.deferred, model_id, root, layers)

    # -- hooks -----------------------------------------------------------

    def _install(
        self,
        bp: Breakpoint,
        model_id: str,
        name: str,
        module: nn.Module,
        phases: tuple[str, ...],
        handles: list[Any],
        taps: list[GradTap],
    ) -> None:
        # Each hook asks the condition's cheap test first (Condition.rejects): most calls end there.
        rejects = bp.spec.condition.rejects
        for phase in phases:
            if phase == "forward_pre":

                def pre(mod: nn.Module, args: tuple[Any, ...], _n: str = name) -> None:
                    if bp.active and not rejects("forward_pre", args, None):
                        self._event(bp, HookEvent(model_id, _n, mod, "forward_pre", inputs=args))

                handles.append(module.register_forward_pre_hook(pre))
            elif phase == "forward":

                def post(mod: nn.Module, args: tuple[Any, ...], output: Any, _n: str = name) -> None:
                    if bp.active and not rejects("forward", output, args):
                        self._event(bp, HookEvent(model_id, _n, mod, "forward", inputs=args, output=output))

                handles.append(module.register_forward_hook(post))
            elif phase == "backward":
                tap = self._make_tap(bp, model_id, name, module)
                taps.append(tap)
                handles.extend(tap.install())
            elif phase == "param_grad":
                for pname, param in module.named_parameters():
                    if not param.requires_grad:
                        continue

                    def on_grad(p: torch.Tensor, _n: str = name, _pn: str = pname) -> None:
                        if bp.active and not rejects("param_grad", p.grad, None):
                            self._event(
                                bp,
                                HookEvent(
                                    model_id, _n, module, "param_grad", param_name=_pn, grad=p.grad, extra={"param": p}
                                ),
                            )

                    handles.append(param.register_post_accumulate_grad_hook(on_grad))

    def _make_tap(self, bp: Breakpoint, model_id: str, name: str, module: nn.Module) -> GradTap:
        """The exact backward phase of ``bp`` on one layer (not installed: ``install()`` or call its hooks)."""
        rejects = bp.spec.condition.rejects

        def grads(mod: nn.Module, grad_input: tuple[Any, ...], grad_output: tuple[Any, ...]) -> None:
            if bp.active and not rejects("backward", grad_input, grad_output):
                self._event(
                    bp, HookEvent(model_id, name, mod, "backward", grad_input=grad_input, grad_output=grad_output)
                )

        return GradTap(module, grads)

    # -- what the deferred path asks of the exact one ---------------------------

    def _exact(self, bp: Breakpoint, event: HookEvent, produced: Any, received: Any) -> None:
        """One call checked the exact way, from a deferred hook (a call outside its root's forward)."""
        if bp.active and not bp.spec.condition.rejects(event.phase, produced, received):
            self._event(bp, event)

    def _exact_hooks(self, bp: Breakpoint, model_id: str, phases: tuple[str, ...]) -> list[Callable[[], Any]]:
        """``bp``'s exact hooks for ``phases`` on its layers of one model, for a replay; returns their removers."""
        handles: list[Any] = []
        taps: list[GradTap] = []
        for layer_model, name in bp.layers:
            module = self._modules.get((layer_model, name))
            if layer_model == model_id and module is not None:
                self._install(bp, model_id, name, module, tuple(p for p in phases if p in bp.deferred), handles, taps)
        return [tap.close for tap in taps] + [handle.remove for handle in handles]

    def installed_on(self, model_id: str, name: str) -> nn.Module | None:
        """The module an enabled breakpoint's hooks are on (None: none is)."""
        return self._modules.get((model_id, name))

    def modules_of(self, bp: Breakpoint, model_id: str) -> dict[str, nn.Module]:
        """The layers ``bp`` resolved to in one model, by name."""
        return {name: self._modules[(m, name)] for m, name in bp.layers if m == model_id and (m, name) in self._modules}

    def _event(self, bp: Breakpoint, event: HookEvent) -> None:
        """Condition, hit count, fire. Only BreakpointHit (action 'raise') may leave this."""
        if REPLAY.depth and not bp.replaying:
            return
        try:
            condition = bp.spec.condition
            if condition.kind == "expression":  # the expression may read `step`
                event.step = self._step_of(event.model)
            holds, detail, origin = condition.check(event)
            if not holds or not bp.counter.should_fire():
                return
            event.step = self._step_of(event.model)
        except ConditionError as exc:
            self._report(bp, str(exc))
            return
        except Exception as exc:
            self._report(bp, f"breakpoint {bp.spec.id} on {event.layer}: {type(exc).__name__}: {exc}")
            return
        self._fire(bp, event, detail, origin)

    def _report(self, bp: Breakpoint, message: str) -> None:
        if message in bp.reported_errors or len(bp.reported_errors) > 16:
            return  # once per distinct error, not once per step
        bp.reported_errors.add(message)
        self._notice("warning", message[:500], "conditionError")


def _describe(spec: BreakpointSpec) -> str:
    parts = []
    if spec.layer:
        parts.append(f"layer {spec.layer!r}")
    if spec.cls:
        parts.append(f"class {spec.cls!r}")
    if spec.file and spec.line:
        parts.append(f"{os.path.basename(spec.file)}:{spec.line}")
    return " and ".join(parts)
