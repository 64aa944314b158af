"""Layer breakpoints: specs → matching modules → hooks, conditions, hit counting.

A ``BreakpointSpec`` (link/protocol_structs.py) names layers by qualified name, glob
(``layer*.conv1``), class (``Conv2d``) or source location (file + line of the
``self.conv1 = nn.Conv2d(...)`` definition, or of a ``x = self.conv1(x)``
call site in a ``forward``). Several selectors in one spec intersect.

Hooks are registered only for the layers and phases asked for, and every
handle is owned here: ``clear()`` removes them all. The ``backward`` phase is
built from tensor hooks (``GradTap``), not ``register_full_backward_hook``:
a full backward hook wraps the layer's output in a view-returning autograd
Function, so any in-place op downstream (``nn.ReLU(inplace=True)`` after a
conv, the classic ResNet block) raises inside the user's forward. Tensor
hooks see the same ``grad_output`` and the gradient reaching the layer's
inputs, and never change what the user's code may do.
"""

from __future__ import annotations

import ast
import fnmatch
import inspect
import logging
import os
import textwrap
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn

from hookscope.engine.replay.deferred import DEFERRED_PHASES, DeferredHooks, DeferredValues, KeepOutputsFn, deferrable
from hookscope.hooks.conditions import REPLAY, Condition, ConditionError, HitCounter, HookEvent
from hookscope.hooks.leaf_hooks import LeafHooks, hook_gradient
from hookscope.hooks.summaries import tensors_in
from hookscope.link.protocol_vocabulary import PHASES
from hookscope.lsp.analysis.call_targets import EVERY_ENTRY, Target, called_target, local_layer_names

log = logging.getLogger("hookscope")

ACTIONS = ("log", "raise", "callback")


# ---------------------------------------------------------------------------
# Specs


@dataclass
class BreakpointSpec:
    """A parsed ``BreakpointSpec`` (see protocol.STRUCTS)."""

    id: str
    layer: str | None = None
    cls: str | None = None
    file: str | None = None
    line: int | None = None
    phases: tuple[str, ...] = ("forward",)
    condition: Condition = field(default_factory=Condition)
    hit_count: int | None = None
    every: int | None = None
    enabled: bool = True
    action: str = "log"
    callback: Callable[..., Any] | None = None
    model: str | None = None
    """Restrict to one model id (Python API); None: every model."""

    @classmethod
    def parse(cls, raw: Any) -> BreakpointSpec:
        if not isinstance(raw, dict):
            raise ValueError("a breakpoint must be a map")
        bp_id = raw.get("id")
        if not isinstance(bp_id, str) or not bp_id:
            raise ValueError("a breakpoint needs a string 'id'")
        phases = raw.get("phases") or ["forward"]
        if not isinstance(phases, (list, tuple)) or any(p not in PHASES for p in phases):
            raise ValueError(f"phases must be a subset of {', '.join(PHASES)}")
        layer, cls_name, file, line = raw.get("layer"), raw.get("cls"), raw.get("file"), raw.get("line")
        if not (layer or cls_name or (file and line)):
            raise ValueError("a breakpoint needs 'layer', 'cls', or 'file' and 'line'")
        if (file is None) != (line is None):
            raise ValueError("'file' and 'line' go together")
        for name, value in (("hitCount", raw.get("hitCount")), ("every", raw.get("every"))):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be a positive integer")
        callback = raw.get("callback")
        action = raw.get("action") or ("callback" if callback is not None else "log")
        if action not in ACTIONS:
            raise ValueError(f"action must be one of {', '.join(ACTIONS)}")
        if action == "callback" and not callable(callback):
            raise ValueError("action 'callback' needs a callable 'callback' (Python API)")
        return cls(
            id=bp_id,
            layer=layer,
            cls=cls_name,
            file=file,
            line=line,
            phases=tuple(dict.fromkeys(phases)),
            condition=Condition.parse(raw.get("condition")),
            hit_count=raw.get("hitCount"),
            every=raw.get("every"),
            enabled=bool(raw.get("enabled", True)),
            action=action,
            callback=callback,
            model=raw.get("model"),
        )


# ---------------------------------------------------------------------------
# Which modules a spec names


def same_file(a: str, b: str) -> bool:
    return os.path.normcase(os.path.realpath(a)) == os.path.normcase(os.path.realpath(b))


_GLOB_CHARS = set("*?[")


class ModelIndex:
    """Names and source locations of one model's modules, for resolving specs."""

    def __init__(self, model_id: str, model: nn.Module, locations: dict[str, tuple[str, int]] | None = None) -> None:
        self.model_id = model_id
        self._model = weakref.ref(model)
        self.names: list[str] = [name for name, _ in model.named_modules()]
        self._locations = locations

    @property
    def model(self) -> nn.Module | None:
        return self._model()

    def modules(self) -> dict[str, nn.Module]:
        model = self.model
        return dict(model.named_modules()) if model is not None else {}

    def locations(self) -> dict[str, tuple[str, int]]:
        """name → (file, line) where each module was created (discovery computes these)."""
        if self._locations is None:
            self._locations = {}
            try:
                from hookscope.engine import discovery

                by_name = self.modules()
                for name, module in by_name.items():
                    file, line = discovery.location_of(module, name, by_name)
                    if file is not None and line is not None:
                        self._locations[name] = (file, line)
            except Exception as exc:  # discovery absent or failing: name/class specs still work
                log.debug("hookscope: no module locations: %s", exc)
        return self._locations

    def resolve(self, spec: BreakpointSpec) -> list[str]:
        """Qualified names of the modules ``spec`` selects, in named_modules() order."""
        by_name = self.modules()
        selected = list(by_name)
        if spec.layer:
            if _GLOB_CHARS & set(spec.layer):
                selected = [n for n in selected if fnmatch.fnmatchcase(n, spec.layer)]
            else:
                selected = [n for n in selected if n == spec.layer]
        if spec.cls:
            selected = [
                n
                for n in selected
                if type(by_name[n]).__name__ == spec.cls
                or type(by_name[n]).__qualname__ == spec.cls
                or f"{type(by_name[n]).__module__}.{type(by_name[n]).__qualname__}" == spec.cls
            ]
        if spec.file and spec.line:
            at_line = set(self.defined_at(spec.file, spec.line)) | set(self.called_at(spec.file, spec.line))
            selected = [n for n in selected if n in at_line]
        return selected

    def defined_at(self, file: str, line: int) -> list[str]:
        """Modules whose creating line (``self.conv1 = nn.Conv2d(...)``) is file:line."""
        return [n for n, (f, at) in self.locations().items() if at == line and same_file(f, file)]

    def called_at(self, file: str, line: int) -> list[str]:
        """Modules called at file:line inside some module's ``forward`` (``x = self.conv1(x)``)."""
        found: list[str] = []
        for name, module in self.modules().items():
            if not module._modules:
                continue
            source, sites = _call_sites(type(module))
            targets = sites.get(line)
            if not targets or not same_file(source, file):
                continue
            for attr, key in targets:
                child = module._modules.get(attr)
                if child is None:
                    continue
                prefix = f"{name}.{attr}" if name else attr
                if key is None:
                    found.append(prefix)
                elif key == EVERY_ENTRY:
                    found.extend(f"{prefix}.{sub}" for sub in child._modules)
                elif key in child._modules:
                    found.append(f"{prefix}.{key}")
        return found

    def call_site(self, layer: str) -> tuple[str, int] | None:
        """The first line of the nearest ancestor's ``forward`` that calls ``layer`` or its container."""
        by_name = self.modules()
        parts = layer.split(".") if layer else []
        for depth in range(len(parts) - 1, -1, -1):
            ancestor = by_name.get(".".join(parts[:depth]))
            if ancestor is None:
                continue
            source, sites = _call_sites(type(ancestor))
            entry = parts[depth + 1] if depth + 1 < len(parts) else None
            lines = [
                line
                for line, targets in sites.items()
                if any(attr == parts[depth] and key in (None, EVERY_ENTRY, entry) for attr, key in targets)
            ]
            if source and lines:
                return source, min(lines)
        return None


_call_site_cache: dict[type, tuple[str, dict[int, list[Target]]]] = {}


def _call_sites(cls: type) -> tuple[str, dict[int, list[Target]]]:
    """Source file of cls.forward and line → [(child attribute, entry key)] called there.

    The same call forms as the language server's call-site lenses
    (``hookscope.lsp.analysis.call_targets``): ``self.conv1(x)`` (key None),
    ``self.heads["cls"](x)`` / ``self.blocks[2](x)`` (that entry),
    ``self.blocks[i](x)`` and ``for blk in self.blocks: blk(x)`` (every entry:
    ``EVERY_ENTRY``), and each of these through a local name (``b = self.branches;
    b["mix"](h)``).
    """
    cached = _call_site_cache.get(cls)
    if cached is not None:
        return cached
    sites: dict[int, list[Target]] = {}
    try:
        forward = cls.forward  # type: ignore[attr-defined]
        file = inspect.getsourcefile(forward) or ""
        lines, start = inspect.getsourcelines(forward)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (TypeError, OSError, SyntaxError, IndentationError):
        _call_site_cache[cls] = ("", sites)
        return _call_site_cache[cls]
    offset = start - 1
    function = tree.body[0] if tree.body else None
    params = (
        function.args.posonlyargs + function.args.args
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
        else []
    )
    if not params:  # not a def with a self parameter (a lambda, an assignment): no call sites
        _call_site_cache[cls] = (file, sites)
        return _call_site_cache[cls]
    assert isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef))
    self_name = params[0].arg
    names = local_layer_names(function, self_name)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        target = called_target(node.func, self_name, names)
        if target is None:
            continue
        for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            sites.setdefault(line + offset, []).append(target)
    _call_site_cache[cls] = (file, sites)
    return _call_site_cache[cls]


# ---------------------------------------------------------------------------
# Backward phase through tensor hooks


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

    def __init__(self, module: nn.Module, on_grads: Callable[[nn.Module, tuple, tuple], None]) -> None:
        self._module = module
        self._on_grads = on_grads
        self._stack: list[_PendingCall | None] = []
        self._leaves = LeafHooks()
        self.active = True

    def close(self) -> int:
        """Stop firing; remove the hooks left on leaf tensors (returns how many were held)."""
        self.active = False
        return self._leaves.remove_all()

    def install(self) -> list[Any]:
        return [self._module.register_forward_pre_hook(self._pre), self._module.register_forward_hook(self._post)]

    def _pre(self, module: nn.Module, args: tuple) -> None:
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

    def _post(self, module: nn.Module, args: tuple, output: Any) -> None:
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


# ---------------------------------------------------------------------------
# Installed breakpoints

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
        for model_id, name in bp.layers:
            module = indexes[model_id].modules().get(name)
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

                def pre(mod: nn.Module, args: tuple, _n: str = name) -> None:
                    if bp.active and not rejects("forward_pre", args, None):
                        self._event(bp, HookEvent(model_id, _n, mod, "forward_pre", inputs=args))

                handles.append(module.register_forward_pre_hook(pre))
            elif phase == "forward":

                def post(mod: nn.Module, args: tuple, output: Any, _n: str = name) -> None:
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

        def grads(mod: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
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
