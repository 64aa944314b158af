"""All hook state of one process: breakpoints, break on NaN/Inf, watches, last summaries.

The agent owns one ``Engine`` per connection and calls ``handle(request)``
from its hidden thread while the training thread runs (or is paused by the
debugger). Configuration changes happen under ``self._lock``; the hooks on
the training thread only read references that are swapped atomically, and
the lock is never held while the debugger pauses a thread, so the agent
keeps answering while the user inspects a hit.

Nothing is hooked until something is asked for: a breakpoint, a watch, break
on NaN/Inf, a render capture. The only exception is the one-shot ``shapes``
capture: a root hook that runs at the first forward after connection and
removes itself. ``shutdown()`` removes every hook and returns the count.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from hookscope.debugger import stop
from hookscope.engine import image_packages, render_subject
from hookscope.engine.breakpoints import Breakpoint, BreakpointSpec, LayerBreakpoints, ModelIndex
from hookscope.engine.grad_health import REARM_RULE as HEALTH_REARM_RULE
from hookscope.engine.nonfinite import REARM_RULE, NonFiniteWatch
from hookscope.engine.render_subject import Subject
from hookscope.hooks import copy_safety, summaries
from hookscope.hooks.conditions import REPLAY, HookEvent
from hookscope.hooks.kept_outputs import BreakpointOutputs, Kept, keep_call
from hookscope.hooks.leaf_hooks import LeafHooks
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS
from hookscope.hooks.summary_budget import DEFAULT_SHARE as DEFAULT_SUMMARY_SHARE
from hookscope.hooks.summary_budget import SummaryBudget
from hookscope.link import protocol
from hookscope.link.protocol import ERR_BAD_MESSAGE, ERR_NOT_AVAILABLE, ERR_UNKNOWN_LAYER, ProtocolError

log = logging.getLogger("hookscope")

_ARMING_COST = ("*", "arming")
"""The summary budget's key for the cost of putting due watches' hooks back."""
DEFAULT_RATE_HZ = 4.0
ARM_AHEAD_S = 0.05
"""Watches due this soon are armed together, so the layers of one model are sampled in the
same forward pass (they fell due microseconds apart, one after the other in the last one)."""
RENDERED_LAYERS_KEPT = 4
"""Layers whose last output is kept for the panel's images: the most recently rendered (or
watched, when a watch names this few layers) ones. Watching many layers keeps nothing until
one is rendered: holding every watched layer's output would keep a whole forward pass of
activations alive into the next step (an OOM risk on a GPU)."""
NONFINITE_ID = "nonfinite"
GRADIENTS_ID = "gradients"
"""The ``breakpoint`` of a hit from break on exploding/vanishing gradients."""
GRADS_SAFE_POINT_S = 2.0
"""How long a request from the agent's thread waits for the model's next forward to read ``.grad``."""


def _phase_label(phase: str) -> str:
    return phase.replace("_", "-")


class _LayerWatch:
    """Rate-limited summaries of one layer (forward, and the backward of the same call).

    Its forward hook is on the layer only while a sample is due ("armed"):
    once it has fired it removes itself until ``next_due``, when the model's
    next forward (the root's pre-hook) or the agent's tick puts it back. A
    module with any hook takes PyTorch's slow call path, so a hook that sat on
    every layer waiting for its next sample cost microseconds per layer on
    every step, most of the cost of watching a thousand small layers.
    """

    __slots__ = ("model", "layer", "module", "interval", "next_due", "handle", "keep_output", "active", "leaves")

    def __init__(self, model: str, layer: str, module: nn.Module, interval: float, keep_output: bool) -> None:
        self.model, self.layer, self.module, self.interval = model, layer, module, interval
        self.next_due = 0.0
        self.handle: Any = None
        self.keep_output = keep_output
        self.active = True
        self.leaves = LeafHooks()
        """Gradient hooks of the last sample that sit on leaf tensors (removed at the next sample)."""


class _SampleRound:
    """The watched layers of a model sampled in one step, and when they are all due again."""

    __slots__ = ("step", "due", "members")

    def __init__(self, step: int, due: float) -> None:
        self.step, self.due = step, due
        self.members: set[int] = set()
        """``id`` of each watch sampled in this round."""


class Engine:
    """Hook state of one process; answers the agent's requests (see docs/ARCHITECTURE.md)."""

    def __init__(
        self, emit: Callable[[dict], None], *, shapes: bool = True, summary_share: float = DEFAULT_SUMMARY_SHARE
    ) -> None:
        """``summary_share``: the share of the program's time watched layers' summaries may take."""
        copy_safety.install()  # deepcopy/pickle/torch.save of a watched model leave our hooks out
        self.requests_off_thread = False
        """Requests come from another thread than training (the agent's): ``.grad`` is then read
        only at a safe point (see ``_read_grads``)."""
        self._emit_raw = emit
        self._lock = threading.RLock()
        self._indexes: dict[str, ModelIndex] = {}
        self._steps: dict[str, int] = {}
        self._root_handles: dict[str, Any] = {}
        self._last_args: dict[str, tuple[tuple, dict]] = {}
        self._shapes_wanted = shapes
        self._shape_handles: dict[str, list[Any]] = {}
        self._sent_shapes: dict[str, dict[str, list[int]]] = {}
        self._input_signature: dict[str, tuple] = {}
        self._breakpoints = LayerBreakpoints(
            self._fire_breakpoint, self._notice, self._step_of, keep_outputs=self._replay_outputs
        )
        self._nonfinite = NonFiniteWatch(self._fire_nonfinite, self._notice, self._step_of)
        self._nonfinite.checks.nonfinite = (
            False  # break on NaN/Inf off until asked (the sentinels may serve gradient health)
        )
        self._nonfinite_enabled = False
        self._nonfinite_action = "log"
        self._nonfinite_callback: Callable[[stop.Hit], Any] | None = None
        self._watches: dict[tuple[str, str], _LayerWatch] = {}
        self._captures: dict[tuple[str, str], _LayerWatch] = {}
        self._last: dict[tuple[str, str], dict[str, Any]] = {}
        self._last_output: dict[tuple[str, str], Kept] = {}
        """The last call of each layer the panel renders (kept by its watch or a render capture)."""
        self._bp_outputs = BreakpointOutputs(self._step_of)
        """The last call of each layer that has a breakpoint: images at every stop."""
        self._arm_at = math.inf
        """When the earliest disarmed watch or capture is due again."""
        self._sample_rounds: dict[tuple[str, float], _SampleRound] = {}
        """(model, interval) -> the layers sampled together last, and when they are due again."""
        self._rendered: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()
        """(model, layer) of the last RENDERED_LAYERS_KEPT layers the panel rendered, oldest first."""
        self._paused: dict[str, Any] | None = None
        self._interventions: Any = None
        self._compiled_noticed: set[str] = set()
        self._budget = SummaryBudget(summary_share)
        self._budget_noticed = False
        self._stance_before_eager: str | None = None
        """dynamo's stance before setCompiledEager turned on force_eager (None: Hookscope did not change it)."""
        self._filtered_notice_sent = False
        self._callback_errors: set[tuple[str, str]] = set()
        """(breakpoint id, error) already reported: a raising callback is told once, not every call."""

    # ------------------------------------------------------------------ models

    def add_model(self, model_id: str, model: nn.Module, locations: dict[str, tuple[str, int]] | None = None) -> None:
        """Track ``model`` (breakpoints set earlier are resolved against it too)."""
        with self._lock:
            self._indexes[model_id] = ModelIndex(model_id, model, locations)
            self._steps.setdefault(model_id, 0)
            if self._shapes_wanted:
                self._arm_shapes(model_id, model)
            if self._sentinels_on:
                self._nonfinite.add(model_id, model)
            resolved = self._reinstall_breakpoints() if self._breakpoints.breakpoints else []
            self._sync_root_hooks()
        # Breakpoints set before the model existed (the usual order) are told too.
        self._warn_if_compiled([layer for entry in resolved for layer in entry.get("layers") or []])

    def model_id_of(self, model: nn.Module) -> str | None:
        """The id this engine tracks ``model`` under (None if it does not)."""
        with self._lock:
            return next((mid for mid, index in self._indexes.items() if index.model is model), None)

    def remove_model(self, model_id: str) -> None:
        with self._lock:
            index = self._indexes.pop(model_id, None)
            if index is None:
                return
            self._nonfinite.remove_model(model_id)
            for key in [k for k in self._watches if k[0] == model_id]:
                self._drop_watch(self._watches.pop(key))
            for key in [k for k in self._captures if k[0] == model_id]:
                self._drop_watch(self._captures.pop(key))
            for handle in self._shape_handles.pop(model_id, []):
                handle.remove()
            if self._interventions is not None:
                self._interventions.remove_model(model_id)
            if self._breakpoints.breakpoints:
                self._reinstall_breakpoints()
            self._sync_root_hooks()
            for store in (self._last, self._last_output, self._rendered):
                for key in [k for k in store if k[0] == model_id]:
                    del store[key]

    # ------------------------------------------------------------------ requests

    def handle(self, request: dict) -> dict:
        """Reply body for ``request``; raises ProtocolError for an error reply."""
        rtype = request.get("type")
        handler = getattr(self, f"_req_{rtype}", None)
        if handler is None:
            raise ProtocolError(protocol.ERR_UNKNOWN_TYPE, f"the engine does not handle {str(rtype)[:64]!r}")
        try:
            return handler(request)
        except ProtocolError:  # (a ValueError too)
            raise
        except (ValueError, IndexError) as exc:
            # The request's values do not fit what they name (a channel past the layer's, an axis the
            # tensor lacks): the public API (visuals, interventions) refuses such arguments with these.
            # Anything else a handler raises (KeyError, TypeError, AttributeError…) is Hookscope's own
            # bug: the agent logs it with its traceback and answers 'internal', never blaming the editor.
            raise ProtocolError(ERR_BAD_MESSAGE, f"{rtype}: {exc}") from exc

    def _req_setBreakpoints(self, request: dict) -> dict:
        specs = request.get("breakpoints") or []
        with self._lock:
            resolved = self._breakpoints.set(list(specs), dict(self._indexes))
            self._sync_breakpoint_outputs()
            self._sync_root_hooks()
        for entry in resolved:
            if entry.get("error"):
                self._notice("warning", entry["error"], "breakpointUnresolved")
        self._warn_if_compiled([layer for entry in resolved for layer in entry.get("layers") or []])
        return {"resolved": resolved}

    def _req_resolveLayers(self, request: dict) -> dict:
        raw = request.get("spec")
        if not isinstance(raw, dict):
            raise ProtocolError(ERR_BAD_MESSAGE, "resolveLayers needs a 'spec' map")
        # the same resolution as setBreakpoints, on what selects layers only
        spec = BreakpointSpec.parse(
            {"id": "resolve", **{k: raw[k] for k in ("layer", "cls", "file", "line", "model") if k in raw}}
        )
        with self._lock:
            indexes = list(self._indexes.values())
        layers = []
        for index in indexes:
            if spec.model is not None and spec.model != index.model_id:
                continue
            modules = index.modules()
            layers += [
                {"model": index.model_id, "layer": name, "cls": type(modules[name]).__name__}
                for name in index.resolve(spec)
            ]
        return {"layers": layers}

    def _warn_if_compiled(self, layers: list[str]) -> None:
        """Hooks inside a torch.compile'd module do not fire (dynamo does not guard on hooks added
        later): say so instead of failing silently, with the opt-in that makes them fire."""
        compiled: list[str] = []
        with self._lock:
            for index in self._indexes.values():
                model = index.model
                if model is None:
                    continue
                # torch.compile(m) wraps m: the wrapper's own hooks fire, those below it do not.
                # m.compile() compiles m's own call: its hooks and those below it do not.
                wrapped = [n for n, m in model.named_modules() if type(m).__name__ == "OptimizedModule"]
                in_place = [n for n, m in model.named_modules() if getattr(m, "_compiled_call_impl", None)]
                for layer in layers:
                    below = any(r == "" and layer != "" or layer.startswith(r + ".") for r in wrapped)
                    at_or_below = any(r == "" or layer == r or layer.startswith(r + ".") for r in in_place)
                    if below or at_or_below:
                        compiled.append(layer)
        compiled = [layer for layer in compiled if layer not in self._compiled_noticed]
        if compiled and not _compile_forced_eager():
            self._compiled_noticed.update(compiled)  # once per layer, however often breakpoints are re-sent
            names = ", ".join(sorted(set(compiled))[:5])
            self._notice(
                "warning",
                f"{names} run inside a torch.compile'd module: hooks added after it was "
                "compiled do not fire there (only the compiled root's own hooks do). To debug them, "
                "run compiled code "
                "eagerly while debugging (setting hookscope.runCompiledEagerly; in code: "
                "torch.compiler.set_stance('force_eager')).",
                "compiled",
            )

    def set_breakpoints(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Python API: like the request, but specs may carry a ``callback``."""
        return self._req_setBreakpoints({"breakpoints": specs})["resolved"]

    def _reinstall_breakpoints(self) -> list[dict[str, Any]]:
        specs = [self._spec_as_raw(bp) for bp in self._breakpoints.breakpoints]
        resolved = self._breakpoints.set(specs, dict(self._indexes))
        self._sync_breakpoint_outputs()
        return resolved

    def _sync_breakpoint_outputs(self) -> None:
        """Keep the last output of exactly the layers an enabled breakpoint is installed on."""
        wanted: dict[tuple[str, str], nn.Module] = {}
        for bp in self._breakpoints.breakpoints:
            if not bp.handles or bp.deferred:  # a deferred breakpoint keeps them during its replays
                continue
            for model_id, name in bp.layers:
                index = self._indexes.get(model_id)
                module = index.modules().get(name) if index is not None else None
                if module is not None:
                    wanted[(model_id, name)] = module
        self._bp_outputs.sync(wanted)

    def _replay_outputs(self, entries: list[tuple[str, Breakpoint]]) -> AbstractContextManager[None]:
        """While a deferred breakpoint replays a step, keep its layers' outputs (images at its stop)."""
        wanted = {
            (model_id, name): module
            for model_id, bp in entries
            for name, module in self._breakpoints.modules_of(bp, model_id).items()
        }
        return self._bp_outputs.replaying(wanted)

    @staticmethod
    def _spec_as_raw(bp: Breakpoint) -> dict[str, Any]:
        s = bp.spec
        raw: dict[str, Any] = {
            "id": s.id,
            "layer": s.layer,
            "cls": s.cls,
            "file": s.file,
            "line": s.line,
            "phases": list(s.phases),
            "hitCount": s.hit_count,
            "every": s.every,
            "enabled": s.enabled,
            "action": s.action,
            "callback": s.callback,
            "model": s.model,
        }
        if s.condition.kind != "always":
            raw["condition"] = {
                "kind": s.condition.kind,
                "threshold": s.condition.threshold,
                "expression": s.condition.expression,
            }
        return raw

    def _req_setCompiledEager(self, request: dict) -> dict:
        """The opt-in of the ``compiled`` notice: run torch.compile'd code eagerly so layer hooks
        inside it fire (``torch.compiler.set_stance('force_eager')``, process-wide, no recompile);
        off, or when Hookscope goes, restores the stance it replaced."""
        enabled = request.get("enabled")
        if not isinstance(enabled, bool):
            raise ValueError("'enabled' must be true or false")
        self.set_compiled_eager(enabled)
        return {"enabled": _compile_forced_eager()}

    def set_compiled_eager(self, enabled: bool) -> None:
        with self._lock:
            if enabled and self._stance_before_eager is None and not _compile_forced_eager():
                self._stance_before_eager = _set_compile_stance("force_eager")
            elif not enabled and self._stance_before_eager is not None:
                _set_compile_stance(self._stance_before_eager)
                self._stance_before_eager = None

    def _req_setBreakOnNonFinite(self, request: dict) -> dict:
        self.set_break_on_nonfinite(bool(request.get("enabled")))
        return {"enabled": self._nonfinite_enabled}

    def _req_setBreakOnGradients(self, request: dict) -> dict:
        self.set_gradient_health(request.get("exploding"), request.get("vanishing"))
        health = self._nonfinite.checks.health
        return {"exploding": health.exploding, "vanishing": health.vanishing}

    def set_gradient_health(self, exploding: float | None, vanishing: float | None) -> None:
        """Break when a parameter's gradient norm goes above ``exploding`` or a layer's below ``vanishing``
        (None: that switch off), checked with break on NaN/Inf's end-of-backward gradient check."""
        for name, value in (("exploding", exploding), ("vanishing", vanishing)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
            ):
                raise ValueError(f"'{name}' must be a positive number or absent")
        with self._lock:
            health = self._nonfinite.checks.health
            health.exploding = None if exploding is None else float(exploding)
            health.vanishing = None if vanishing is None else float(vanishing)
            self._sync_sentinels()

    def set_break_on_nonfinite(
        self, enabled: bool, action: str = "log", callback: Callable[[stop.Hit], Any] | None = None
    ) -> None:
        """Turn break on NaN/Inf on or off; ``action`` applies without a debugger."""
        if action not in ("log", "raise", "callback") or (action == "callback" and not callable(callback)):
            raise ValueError("action must be 'log', 'raise' or 'callback' (with a callable callback)")
        with self._lock:
            self._nonfinite_action, self._nonfinite_callback = action, callback
            self._nonfinite_enabled = enabled
            self._nonfinite.checks.nonfinite = enabled
            self._sync_sentinels()

    @property
    def _sentinels_on(self) -> bool:
        """Break on NaN/Inf or a gradient-health switch is on: the per-step sentinels are installed."""
        return self._nonfinite_enabled or self._nonfinite.checks.health.on

    def _sync_sentinels(self) -> None:
        if self._sentinels_on and not self._nonfinite.enabled:
            for model_id, index in self._indexes.items():
                if index.model is not None:
                    self._nonfinite.add(model_id, index.model)
        elif not self._sentinels_on and self._nonfinite.enabled:
            self._nonfinite.clear()
        self._sync_root_hooks()

    def _req_watch(self, request: dict) -> dict:
        model_id = self._model_id(request.get("model"))
        layers = request.get("layers") or []
        rate = float(request.get("rateHz") or DEFAULT_RATE_HZ)
        if not rate > 0:
            raise ProtocolError(ERR_BAD_MESSAGE, "rateHz must be > 0")
        with self._lock:
            modules = self._indexes[model_id].modules()
            unknown = [name for name in layers if name not in modules]
            if unknown:
                raise ProtocolError(
                    ERR_UNKNOWN_LAYER, f"no layer named {', '.join(map(repr, unknown[:5]))} in model {model_id}"
                )
            for key in [k for k in self._watches if k[0] == model_id]:
                self._drop_watch(self._watches.pop(key))
            if len(layers) <= RENDERED_LAYERS_KEPT:  # the panel watching its layer: images at once
                for name in layers:
                    self._keep_rendered((model_id, name))
            for name in layers:
                watch = _LayerWatch(
                    model_id, name, modules[name], 1.0 / rate, keep_output=(model_id, name) in self._rendered
                )
                self._arm(watch)
                self._watches[(model_id, name)] = watch
            self._sync_root_hooks()
            return {"layers": [name for (m, name) in self._watches if m == model_id]}

    def _req_getSummaries(self, request: dict) -> dict:
        model_id = self._model_id(request.get("model"))
        layer = request.get("layer")
        module = self._module(model_id, layer)
        last = self._last.get((model_id, layer), {})
        tensors = list(last.get("tensors", []))
        params = list(module.named_parameters(recurse=False)) or list(module.named_parameters())[:64]
        # Idle (no step within the wait): the layer's summaries without its parameters' gradients.
        tensors += self._read_grads(
            model_id,
            lambda: summaries.summarize_many([(f"{name}.grad", p.grad) for name, p in params if p.grad is not None]),
            when_idle=[],
        )
        return {"layer": layer, "tensors": tensors, "step": last.get("step", self._step_of(model_id))}

    def _req_getParamGrads(self, request: dict) -> dict:
        model_id = self._model_id(request.get("model"))
        model = self._indexes[model_id].model
        if model is None:
            raise ProtocolError(ERR_NOT_AVAILABLE, f"model {model_id} is gone")
        return {"params": self._read_grads(model_id, lambda: param_grad_stats(model))}

    def _read_grads(self, model_id: str, read: Callable[[], Any], when_idle: Any = None) -> Any:
        """``read()`` (which reads parameters' ``.grad``) where autograd is not writing them.

        Reading ``.grad`` from another thread while a backward accumulates into it crashes
        torch (a segfault on 2.13 CPU; tests/python/reliability/test_grad_reads.py). While
        paused in a stop, or on the training thread itself (the Python API, tests), it is read
        at once; a request from the agent's thread is run by the training thread at the model's
        next forward, when the last backward is over, and waits at most GRADS_SAFE_POINT_S
        (then ``when_idle`` is the answer, or, without one, an error that says why).
        """
        if self._paused is not None or not self.requests_off_thread:
            return read()
        model = self._indexes[model_id].model
        if model is None:
            raise ProtocolError(ERR_NOT_AVAILABLE, f"model {model_id} is gone")
        done = threading.Event()
        result: dict[str, Any] = {}

        def at_next_forward(module: nn.Module, args: tuple) -> None:
            handle.remove()
            if done.is_set():
                return
            try:
                result["value"] = read()
            except Exception as exc:  # handed to the request, never raised into training
                result["error"] = exc
            done.set()

        handle = model.register_forward_pre_hook(at_next_forward)
        if not done.wait(GRADS_SAFE_POINT_S):
            handle.remove()
            done.set()
            if "value" not in result and "error" not in result:
                if when_idle is not None:
                    return when_idle
                raise ProtocolError(
                    ERR_NOT_AVAILABLE,
                    "parameter gradients are read while paused or between "
                    f"steps; the model did not start a step within {GRADS_SAFE_POINT_S:g} s",
                )
        if "error" in result:
            raise result["error"]
        return result["value"]

    def _req_listHooks(self, request: dict) -> dict:
        from hookscope.hooks import inventory

        model_id = request.get("model")
        with self._lock:
            models = {
                m: i.model
                for m, i in self._indexes.items()
                if i.model is not None and (model_id is None or m == model_id)
            }
        if model_id is not None and not models:
            raise ProtocolError(ERR_UNKNOWN_LAYER, f"no model {model_id!r}")
        result = inventory.list_hooks(models)
        return {"hooks": list(result.get("hooks", [])), "leaks": list(result.get("leaks", []))}

    def _req_removeHooks(self, request: dict) -> dict:
        return {"removed": self.shutdown()}

    def _req_bye(self, request: dict) -> dict:
        return {"removed": self.shutdown()}

    def _req_addIntervention(self, request: dict) -> dict:
        model_id = self._model_id(request.get("model"))
        layer = request.get("layer")
        module = self._module(model_id, layer)
        interventions = self._get_interventions()
        iv_id = interventions.add(
            model_id, module, layer, request.get("kind"), channels=request.get("channels"), value=request.get("value")
        )
        return {"id": iv_id}

    def _req_removeIntervention(self, request: dict) -> dict:
        if self._interventions is None:
            return {"removed": 0}
        target = request.get("intervention")
        return {"removed": self._interventions.remove(target if isinstance(target, str) else None)}

    def _req_listInterventions(self, request: dict) -> dict:
        if self._interventions is None:
            return {"interventions": []}
        return {"interventions": self._interventions.list()}

    def _req_render(self, request: dict) -> dict:
        view = request.get("view")
        if isinstance(view, str) and view in image_packages.NEEDS:
            image_packages.require(view)  # torch alone draws no picture: say which package is missing
        from hookscope import visuals  # matplotlib and friends load with the first image

        options = dict(request.get("options") or {})
        model_id = self._model_id(request.get("model"))
        index = self._indexes[model_id]
        paused = self._paused
        if view == "gradientFlow":
            model = index.model
            if model is None:
                raise ProtocolError(ERR_NOT_AVAILABLE, f"model {model_id} is gone")
            named = list(model.named_parameters())
            image = self._read_grads(model_id, lambda: visuals.gradient_flow(named, **options))
            about = {
                "layer": "",
                "tensor": "parameter gradients",
                "step": self._step_of(model_id),
                "phase": paused.get("phase", "") if paused else "",
            }
        elif view in ("featureMap", "histogram", "tensor", "attention"):
            layer = request.get("layer")
            if not isinstance(layer, str):
                raise ProtocolError(ERR_BAD_MESSAGE, f"render {view} needs a 'layer'")
            module = self._module(model_id, layer)
            if view == "attention":
                subject = self._attention_subject(visuals, model_id, layer, module)
                image = visuals.attention_map(subject.tensor, **options)
            else:
                subject = self._render_subject(model_id, layer, module, request.get("tensor"))
                draw = {
                    "featureMap": visuals.feature_map,
                    "histogram": visuals.histogram,
                    "tensor": visuals.tensor_image,
                }[view]
                image = draw(subject.tensor, **options)
            about = subject.meta()
        elif view == "gradCam":
            image = self._grad_cam(visuals, model_id, request.get("layer"), options)
            about = {
                "layer": request.get("layer"),
                "tensor": "Grad-CAM",
                "step": self._step_of(model_id),
                "phase": paused.get("phase", "") if paused else "",
            }
        else:
            raise ProtocolError(ERR_BAD_MESSAGE, f"unknown view {str(view)[:32]!r}")
        meta = dict(image.meta)
        meta["of"] = about  # what the image is of: the panel's caption
        return {"png": image.png, "width": image.width, "height": image.height, "meta": meta}

    def _req_inspectValue(self, request: dict) -> dict:
        if request.get("handle") is not None:
            # Published from any paused frame through the debugger ("Show in Hookscope"): nothing to evaluate.
            from hookscope.debugger import inspector

            return inspector.answer(request)
        paused = self._paused
        if paused is None:
            raise ProtocolError(ERR_NOT_AVAILABLE, "no thread is paused at a Hookscope hit")
        expression = request.get("expression")
        if not isinstance(expression, str):
            raise ProtocolError(ERR_BAD_MESSAGE, "inspectValue needs an 'expression'")
        try:
            value = eval(expression, {"torch": torch}, dict(paused))  # noqa: S307 - the user's own debug console
        except Exception as exc:
            raise ProtocolError(ERR_BAD_MESSAGE, f"{expression!r} raised {type(exc).__name__}: {exc}") from exc
        tensor = summaries_first_tensor(value)
        if tensor is None:
            raise ProtocolError(ERR_BAD_MESSAGE, f"{expression!r} is not a tensor ({type(value).__name__})")
        body: dict[str, Any] = {"summary": summaries.summarize(tensor, expression)}
        options = request.get("options")
        if options:
            image_packages.require("tensor")
            from hookscope import visuals

            body["png"] = visuals.tensor_image(tensor.detach(), **options).png
        return body

    def _req_releaseInspected(self, request: dict) -> dict:
        from hookscope.debugger import inspector

        handles = request.get("handles")
        return {
            "released": inspector.release(
                [h for h in handles if isinstance(h, str)] if isinstance(handles, (list, tuple)) else None
            )
        }

    # ------------------------------------------------------------------ shutdown

    def shutdown(self) -> int:
        """Remove every hook Hookscope added; returns how many."""
        with self._lock:
            removed = self._breakpoints.clear()
            removed += self._bp_outputs.clear()
            removed += self._nonfinite.clear()
            self._nonfinite_enabled = False
            self._nonfinite.checks.nonfinite = False
            self._nonfinite.checks.health = type(self._nonfinite.checks.health)()
            for store in (self._watches, self._captures):
                for watch in store.values():
                    removed += self._drop_watch(watch)
                store.clear()
            for handles in self._shape_handles.values():
                for handle in handles:
                    handle.remove()
                removed += len(handles)
            self._shape_handles.clear()
            self._shapes_wanted = False
            for handle in self._root_handles.values():
                handle.remove()
                removed += 1
            self._root_handles.clear()
            self._last_args.clear()
            self._last_output.clear()
            self._rendered.clear()
            if self._interventions is not None:
                removed += self._interventions.remove()
        self.set_compiled_eager(False)  # the program runs as it did before Hookscope
        return removed

    @property
    def hook_count(self) -> int:
        """Hooks installed right now (for tests and the inventory)."""
        with self._lock:
            return (
                self._breakpoints.hook_count
                + self._bp_outputs.hook_count
                + self._nonfinite.hook_count
                + len(self._root_handles)
                + sum(w.handle is not None for w in self._watches.values())
                + sum(w.handle is not None for w in self._captures.values())
                + sum(len(h) for h in self._shape_handles.values())
            )

    # ------------------------------------------------------------------ hits

    def _fire_breakpoint(self, bp: Breakpoint, event: HookEvent, detail: str, origin: str | None) -> None:
        where = event.layer or "the model"
        reason = f"Layer breakpoint: {where} ({_phase_label(event.phase)})"
        if detail:
            reason += f": {detail}"
        self._hit(bp.spec.id, event, reason, origin, bp.spec.action, bp.spec.callback)

    def _fire_nonfinite(self, event: HookEvent, reason: str, origin: str | None) -> None:
        if event.extra.get("gradient_health"):
            self._hit(GRADIENTS_ID, event, reason, origin, self._nonfinite_action, self._nonfinite_callback)
            return
        self._hit(NONFINITE_ID, event, reason, origin, self._nonfinite_action, self._nonfinite_callback)

    def _hit(
        self,
        bp_id: str,
        event: HookEvent,
        reason: str,
        origin: str | None,
        action: str,
        callback: Callable[[stop.Hit], Any] | None,
    ) -> None:
        """Send ``hit``, then pause (debugger) or apply the action. Never holds the lock while paused."""
        try:
            stats = summaries.summarize_many(_event_tensors(event))
        except Exception as exc:
            stats = []
            log.debug("hookscope: summaries failed", exc_info=True)
            self._notice("warning", f"summaries of {event.layer} failed: {exc}", "summaryError")
        self._last[(event.model, event.layer)] = {"step": event.step, "tensors": stats}
        stop_frame = None
        if stop.debugger_connected():
            stop_frame = stop.prepare(event, reason, stats, self._indexes.get(event.model))
            filtered = stop_frame is None
        else:
            filtered = False
        pausing = stop_frame is not None
        message: dict[str, Any] = {
            "type": "hit",
            "breakpoint": bp_id,
            "model": event.model,
            "layer": event.layer,
            "phase": event.phase,
            "reason": reason,
            "step": event.step,
            "summaries": stats,
            "pausing": pausing,
        }
        if origin:
            message["origin"] = origin
        nan_origin = event.extra.get("nan_origin")
        if nan_origin is not None:
            message["op"] = nan_origin.as_fields()
        if bp_id == NONFINITE_ID:
            message["rearm"] = REARM_RULE
        elif bp_id == GRADIENTS_ID:
            health = self._nonfinite.checks.health
            message["rearm"] = HEALTH_REARM_RULE
            # the step's per-layer gradient-norm profile, the thresholds drawn, the stopped layer marked
            message["view"] = "gradientFlow"
            message["viewOptions"] = {
                "metric": "norm",
                "highlight": event.layer,
                **({"exploding": health.exploding} if health.exploding else {}),
                **({"vanishing": health.vanishing} if health.vanishing else {}),
            }
        self._emit(message)
        if filtered and not self._filtered_notice_sent:
            self._filtered_notice_sent = True
            self._notice(
                "warning",
                f"Hookscope cannot pause at {event.layer or 'the model'}: " + stop.JUST_MY_CODE_HINT,
                "justMyCode",
            )
        if stop_frame is not None:
            self._paused = {**event.frame_locals(), "reason": reason, "stats": stats}
            try:
                stop.pause(stop_frame)
            finally:
                self._paused = None
                self._emit({"type": "resumed", "breakpoint": bp_id, "layer": event.layer})
            return
        if action == "raise":
            raise stop.BreakpointHit(reason, event.layer, event.phase, stats)
        if action == "callback" and callback is not None:
            hit = stop.Hit(
                breakpoint=bp_id,
                layer=event.layer,
                module=event.module,
                phase=event.phase,
                reason=reason,
                step=event.step,
                stats=stats,
                inputs=event.inputs,
                output=event.output,
                grad_input=event.grad_input,
                grad_output=event.grad_output,
                param_name=event.param_name,
                grad=event.grad,
                origin=origin,
                extra=event.extra,
            )
            try:
                callback(hit)
            except stop.BreakpointHit:
                raise
            except Exception as exc:
                text = f"breakpoint callback raised {type(exc).__name__}: {exc}"[:500]
                if (bp_id, text) not in self._callback_errors and len(self._callback_errors) < 64:
                    self._callback_errors.add((bp_id, text))
                    self._notice("warning", text, "callbackError")
            return
        log.warning("hookscope: %s (step %d)", reason, event.step)
        self._notice("info", f"{reason} (step {event.step})", "hit")

    # ------------------------------------------------------------------ watches

    def _watch_hook(self, watch: _LayerWatch) -> Callable[..., None]:
        key = (watch.model, watch.layer)

        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any = CALLED_WITHOUT_KWARGS) -> None:
            if REPLAY.depth or not watch.active or output is CALLED_WITHOUT_KWARGS:  # armed means due: _arm_due decided
                return
            started = time.perf_counter()  # the budget counts the whole sample, hook removal included
            watch.next_due = self._next_sample_at(watch)
            self._disarm(watch)
            try:
                step = self._step_of(watch.model)
                if watch.keep_output:
                    self._last_output[key] = keep_call(module, args, kwargs, output, step)
                if key not in self._watches:
                    return  # a render capture only
                tensors = summaries.summarize_many(
                    list(summaries.iter_tensors(args, "inputs")) + list(summaries.iter_tensors(output, "output"))
                )
                self._last[key] = {"step": step, "tensors": tensors}
                self._emit(
                    {
                        "type": "summaries",
                        "model": watch.model,
                        "layer": watch.layer,
                        "phase": "forward",
                        "step": step,
                        "tensors": tensors,
                    }
                )
                if torch.is_grad_enabled():
                    if watch.leaves.handles:  # the last sample's, if its backward never came
                        watch.leaves.remove_all()
                    for path, tensor in summaries.iter_tensors(output, "grad_output"):
                        if tensor.requires_grad:
                            watch.leaves.register(tensor, self._watch_grad_hook(watch, path, step))
                self._budget.record((key, "forward"), time.perf_counter() - started)
            except Exception as exc:
                watch.active = False
                self._notice(
                    "warning", f"watching {watch.layer} failed and stopped: {type(exc).__name__}: {exc}", "watchError"
                )

        return hook

    def _watch_grad_hook(self, watch: _LayerWatch, path: str, step: int) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if not watch.active or REPLAY.depth:
                return
            try:
                started = time.perf_counter()
                tensors = summaries.summarize_many([(path, grad)])
                last = self._last.get((watch.model, watch.layer))
                if last is not None and last.get("step") == step:
                    last["tensors"] = [t for t in last["tensors"] if t["path"] != path] + tensors
                self._emit(
                    {
                        "type": "summaries",
                        "model": watch.model,
                        "layer": watch.layer,
                        "phase": "backward",
                        "step": step,
                        "tensors": tensors,
                    }
                )
                self._budget.record(((watch.model, watch.layer), "backward"), time.perf_counter() - started)
            except Exception as exc:
                self._notice("warning", f"gradient summary of {watch.layer} failed: {exc}", "watchError")

        return hook

    def _next_sample_at(self, watch: _LayerWatch) -> float:
        """When ``watch`` samples again: the same time for every layer sampled in this step, so the
        model's layers stay in step (one forward pass in a few, not a few layers in every pass).

        A round is the layers sampled in one step. It is joined even when its time is already
        past (summarising a big model's layers can take longer than the interval: starting
        a new round there would split the layers over two steps for good). A layer sampled
        again in the same step (a layer called repeatedly, or called without its root, whose
        step count then stays put) starts the next round.
        """
        step = self._step_of(watch.model)
        key = (watch.model, watch.interval)
        round_ = self._sample_rounds.get(key)
        if round_ is None or round_.step != step or id(watch) in round_.members:
            round_ = _SampleRound(step, time.monotonic() + self._budget_interval(watch.interval))
            self._sample_rounds[key] = round_
        round_.members.add(id(watch))
        return round_.due

    def _arm(self, watch: _LayerWatch) -> None:
        if watch.handle is None and watch.active:
            # with_kwargs: an attention layer's masks come by keyword (kept with its call for the panel)
            watch.handle = watch.module.register_forward_hook(self._watch_hook(watch), with_kwargs=True)

    def _disarm(self, watch: _LayerWatch) -> None:
        """Off the layer until it is due again (safe inside the hook: torch iterates over a copy)."""
        if watch.handle is not None:
            watch.handle.remove()
            watch.handle = None
        self._arm_at = min(self._arm_at, watch.next_due)

    def tick(self) -> None:
        """Put back the hooks of watches that are due. The agent calls this a few times a second,
        for models whose root forward is not called (a loop over ``model.encoder`` and
        ``model.decoder``); it scans every watch, so ``_arm_at``, which a hook firing on the
        training thread lowers without the lock, is also made right again."""
        self._arm_due()

    def _arm_due(self) -> None:
        with self._lock:
            now, earliest = time.monotonic(), math.inf
            started, armed = time.perf_counter(), False
            for watch in (*self._watches.values(), *self._captures.values()):
                if watch.handle is not None or not watch.active:
                    continue
                if watch.next_due <= now + ARM_AHEAD_S:
                    self._arm(watch)
                    armed = True
                else:
                    earliest = min(earliest, watch.next_due)
            self._arm_at = earliest
            if armed:  # putting the hooks back is part of what a round of samples costs
                self._budget.record(_ARMING_COST, time.perf_counter() - started)

    def _budget_interval(self, wanted: float) -> float:
        """The interval the summary budget allows; says so once when it is slower than the panel's."""
        interval = self._budget.interval(wanted)
        if interval > 2 * wanted and not self._budget_noticed:
            self._budget_noticed = True
            self._notice(
                "info",
                f"{len(self._watches)} watched layers: their summaries refresh every "
                f"{interval:.1f} s (not {wanted:.2f} s) to keep their cost under "
                f"{self._budget.share:.0%} of the run time",
                "watchThrottled",
            )
        return interval

    def _drop_watch(self, watch: _LayerWatch) -> int:
        watch.active = False
        watch.leaves.remove_all()
        self._budget.forget((watch.model, watch.layer))
        self._last_output.pop((watch.model, watch.layer), None)
        if watch.handle is None:
            return 0
        watch.handle.remove()
        watch.handle = None
        return 1

    def _render_subject(self, model_id: str, layer: str, module: nn.Module, selector: Any) -> Subject:
        """The tensor a render names: from the stop's locals when paused in this layer, else (the
        output) from the layer's last kept call. At a stop it is of that stop's step or not shown."""
        base, selector = render_subject.parse(selector)
        paused = self._paused
        here = render_subject.paused_at(paused, layer, module)
        if here:
            assert paused is not None
            found = render_subject.at_stop(paused, layer, base, selector)
            if found is not None:
                return found
        if base != "output":
            where = "at this stop" if here else f"(it is known only while paused in {layer})"
            raise ProtocolError(ERR_NOT_AVAILABLE, f"{layer} has no {selector} {where}")
        stop_step = paused["step"] if here and paused is not None else None
        kept = self._kept_call(model_id, layer, module)
        if kept is None or (stop_step is not None and kept.step != stop_step):
            raise self._not_kept(model_id, layer, stop_step)
        subject = render_subject.from_kept(kept, layer, selector)
        if subject is None:
            raise ProtocolError(ERR_NOT_AVAILABLE, f"the output of {layer} has no tensor {selector}")
        return subject

    def _attention_subject(self, visuals: Any, model_id: str, layer: str, module: nn.Module) -> Subject:
        """Attention weights of ``layer``: those it returned, or for an ``nn.MultiheadAttention``
        called with ``need_weights=False`` recomputed from its kept call; another module's output
        is taken as the weights when it looks like them (a hand-written softmax: rows of
        non-negative values that sum to 1)."""
        paused = self._paused
        here = render_subject.paused_at(paused, layer, module)
        stop_step = paused["step"] if here and paused is not None else None
        kept = self._kept_call(model_id, layer, module)
        if kept is not None and stop_step is not None and kept.step != stop_step:
            kept = None  # another step's call: not this stop's
        output = paused.get("output") if here and paused is not None else None
        step, phase = int(stop_step or 0), str(paused.get("phase", "")) if paused else ""
        if output is None and kept is not None:
            output, step, phase = kept.output, kept.step, "forward"
        weights = render_subject.returned_weights(output)
        if weights is not None:
            return Subject(weights, layer, "output[1]", step, phase)
        if isinstance(module, nn.MultiheadAttention):
            if kept is not None and kept.call is not None:
                args, kwargs = kept.call
                weights = visuals.mha_weights(module, args, kwargs)
                return Subject(
                    weights,
                    layer,
                    "attention weights",
                    kept.step,
                    "forward",
                    "recomputed from the call's inputs (the model asked for need_weights=False)",
                )
        elif render_subject.looks_like_attention(output):  # a hand-written softmax
            return Subject(output.detach(), layer, "output", step, phase)
        if kept is None and output is None:
            raise self._not_kept(model_id, layer, stop_step)
        raise ProtocolError(
            ERR_NOT_AVAILABLE,
            f"{layer} returned no attention weights and is not an "
            "nn.MultiheadAttention (pick the module that outputs the softmax)",
        )

    def _kept_call(self, model_id: str, layer: str, module: nn.Module) -> Kept | None:
        """The layer's last kept call: its breakpoint's, else its watch's or a render capture's (a
        layer without either is captured from its next forward pass on)."""
        kept = self._bp_outputs.get(model_id, layer)
        if kept is not None or (model_id, layer) in self._bp_outputs.layers():
            return kept
        key = (model_id, layer)
        with self._lock:
            self._keep_rendered(key)
            if key in self._last_output:
                return self._last_output[key]
            if key in self._watches:
                watch = self._watches[key]
                watch.keep_output, watch.next_due = True, 0.0  # keep it from the very next forward pass
                self._arm(watch)
            elif key not in self._captures:
                capture = _LayerWatch(model_id, layer, module, 1.0 / DEFAULT_RATE_HZ, keep_output=True)
                self._arm(capture)
                self._captures[key] = capture
        return None

    def _not_kept(self, model_id: str, layer: str, stop_step: int | None) -> ProtocolError:
        """Why there is no output of ``layer`` to show (at a stop: none of the stop's step)."""
        has_breakpoint = (model_id, layer) in self._bp_outputs.layers()
        size = self._bp_outputs.too_large(model_id, layer)
        if size is not None:
            message = (
                f"the output of {layer} ({size / 2**20:.0f} MiB) is larger than Hookscope keeps for "
                f"images ({self._bp_outputs.max_bytes / 2**20:.0f} MiB)"
            )
        elif stop_step is not None:
            message = f"no forward of {layer} was seen in step {stop_step}"
            if not has_breakpoint:
                message += (
                    ": Hookscope keeps the outputs of layers with a breakpoint (and of the layer the "
                    "panel shows, from its next forward pass on)"
                )
        elif has_breakpoint:
            message = f"{layer} has not run yet"
        else:
            message = f"no output of {layer} kept yet: it will be kept from the next forward pass on"
        return ProtocolError(ERR_NOT_AVAILABLE, message)

    def _keep_rendered(self, key: tuple[str, str]) -> None:
        """Note a render of ``key``; the layer rendered longest ago beyond the kept few stops keeping outputs."""
        self._rendered[key] = None
        self._rendered.move_to_end(key)
        while len(self._rendered) > RENDERED_LAYERS_KEPT:
            old, _ = self._rendered.popitem(last=False)
            self._last_output.pop(old, None)
            if old in self._watches:
                self._watches[old].keep_output = False
            if old in self._captures:
                self._drop_watch(self._captures.pop(old))

    def _grad_cam(self, visuals: Any, model_id: str, layer: Any, options: dict[str, Any]) -> Any:
        if self._paused is None:
            raise ProtocolError(
                ERR_NOT_AVAILABLE, "Grad-CAM runs its own forward and backward pass: pause at a layer breakpoint first"
            )
        if not isinstance(layer, str):
            raise ProtocolError(ERR_BAD_MESSAGE, "render gradCam needs a 'layer'")
        module = self._module(model_id, layer)
        model = self._indexes[model_id].model
        args = self._last_args.get(model_id)
        if model is None or args is None or args[1]:
            raise ProtocolError(
                ERR_NOT_AVAILABLE,
                "the model's last inputs are not known (or it takes "
                "keyword arguments): run a forward pass with a breakpoint set first",
            )
        REPLAY.depth += 1  # our own pass: Hookscope's hooks stay quiet
        try:
            return visuals.grad_cam(model, module, args[0], options.pop("target", None), **options)
        finally:
            REPLAY.depth -= 1

    # ------------------------------------------------------------------ root hooks

    def _model_active(self, model_id: str) -> bool:
        return (
            self._sentinels_on
            or model_id in self._breakpoints.models_with_hooks()
            or any(m == model_id for m, _ in self._watches)
            or any(m == model_id for m, _ in self._captures)
        )

    def _sync_root_hooks(self) -> None:
        """The step counter on each root exists exactly while something is hooked on that model."""
        for model_id, index in self._indexes.items():
            wanted = self._model_active(model_id) and index.model is not None
            handle = self._root_handles.get(model_id)
            if wanted and handle is None:
                assert index.model is not None
                # prepend: the step is counted before any breakpoint's pre-hook on the root reads it
                self._root_handles[model_id] = index.model.register_forward_pre_hook(
                    self._root_pre(model_id), with_kwargs=True, prepend=True
                )
            elif not wanted and handle is not None:
                handle.remove()
                del self._root_handles[model_id]
                self._last_args.pop(model_id, None)
        for model_id in [m for m in self._root_handles if m not in self._indexes]:
            self._root_handles.pop(model_id).remove()

    def _root_pre(self, model_id: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any] = CALLED_WITHOUT_KWARGS) -> None:
            if REPLAY.depth or kwargs is CALLED_WITHOUT_KWARGS:  # removed_hooks
                return
            self._steps[model_id] = self._steps.get(model_id, 0) + 1
            self._last_args[model_id] = (args, kwargs)
            if time.monotonic() + ARM_AHEAD_S >= self._arm_at:
                self._arm_due()
            if self._shapes_wanted and model_id not in self._shape_handles:
                # one tensor argument, the usual case, inline: a call here is traced every step
                signature = (
                    (tuple(args[0].shape),)
                    if len(args) == 1 and type(args[0]) is torch.Tensor
                    else _input_signature(args)
                )
                if signature != self._input_signature.get(model_id):
                    self._input_signature[model_id] = signature
                    self._arm_shapes(model_id, module)

        return hook

    def _step_of(self, model_id: str) -> int:
        """The current step of a model (``protocol.STEP_MEANING``): 0 during the first forward seen."""
        return max(self._steps.get(model_id, 0) - 1, 0)

    # ------------------------------------------------------------------ shapes

    def _arm_shapes(self, model_id: str, model: nn.Module) -> None:
        """One forward pass of shape capture: per-layer hooks exist only during that pass."""
        if model_id in self._shape_handles:
            return
        shapes: dict[str, list[int]] = {}
        layer_handles: list[Any] = []

        def record(name: str) -> Callable[..., None]:
            def hook(module: nn.Module, args: tuple, output: Any) -> None:
                first = summaries_first_tensor(output)
                if first is not None:
                    shapes[name] = list(first.shape)

            return hook

        def pre(module: nn.Module, args: tuple) -> None:
            if REPLAY.depth or layer_handles:
                return
            added = [
                sub.register_forward_hook(record(name))
                for name, sub in module.named_modules(remove_duplicate=False)
                if name
            ]
            with self._lock:
                if self._shape_handles.get(model_id) is owned:
                    layer_handles.extend(added)
                    owned.extend(added)  # shutdown during this pass removes them with the root's
                    return
            for handle in added:  # shut down (editor gone) while they were being added
                handle.remove()

        def post(module: nn.Module, args: tuple, output: Any) -> None:
            if REPLAY.depth or not layer_handles:
                return
            first = summaries_first_tensor(output)
            if first is not None:
                shapes[""] = list(first.shape)  # the root's own record hook runs after this one
            layer_handles.clear()
            with self._lock:
                for handle in self._shape_handles.pop(model_id, []):
                    handle.remove()
            try:
                signature = _input_signature(args)
                self._input_signature[model_id] = signature
                if shapes != self._sent_shapes.get(model_id):
                    self._sent_shapes[model_id] = dict(shapes)
                    self._emit({"type": "shapes", "model": model_id, "shapes": dict(shapes)})
            except Exception as exc:
                log.debug("hookscope: shapes failed: %s", exc)

        owned: list[Any] = [model.register_forward_pre_hook(pre), model.register_forward_hook(post)]
        self._shape_handles[model_id] = owned

    # ------------------------------------------------------------------ helpers

    def _emit(self, event: dict) -> None:
        try:
            self._emit_raw(event)
        except Exception:  # emit never blocks nor raises into training
            log.debug("hookscope: emit failed", exc_info=True)

    def _notice(self, level: str, message: str, code: str) -> None:
        self._emit({"type": "notice", "level": level, "message": message, "code": code})

    def _model_id(self, requested: Any) -> str:
        with self._lock:
            if requested is None:
                if not self._indexes:
                    raise ProtocolError(ERR_NOT_AVAILABLE, "no model found yet")
                return next(iter(self._indexes))
            if requested not in self._indexes:
                raise ProtocolError(ERR_UNKNOWN_LAYER, f"no model {str(requested)[:64]!r}")
            return str(requested)

    def _module(self, model_id: str, layer: Any) -> nn.Module:
        if not isinstance(layer, str):
            raise ProtocolError(ERR_BAD_MESSAGE, "a 'layer' name is needed")
        module = self._indexes[model_id].modules().get(layer)
        if module is None:
            raise ProtocolError(ERR_UNKNOWN_LAYER, f"no layer named {layer[:128]!r} in model {model_id}")
        return module

    def _get_interventions(self) -> Any:
        if self._interventions is None:
            from hookscope.engine.interventions import Interventions

            self._interventions = Interventions()
        return self._interventions


# ---------------------------------------------------------------------- free helpers


def _compile_forced_eager() -> bool:
    """Whether torch.compile'd code currently runs eagerly (``torch.compiler.set_stance('force_eager')``)."""
    try:
        from torch._dynamo import eval_frame

        return getattr(getattr(eval_frame, "_stance", None), "stance", "default") == "force_eager"
    except Exception:
        return False


def _set_compile_stance(stance: str) -> str:
    """Set dynamo's stance process-wide; returns the one it replaced."""
    from torch._dynamo import eval_frame

    before = getattr(getattr(eval_frame, "_stance", None), "stance", "default")
    torch.compiler.set_stance(stance)
    return before


def summaries_first_tensor(value: Any) -> torch.Tensor | None:
    for _, tensor in summaries.iter_tensors(value, ""):
        return tensor.detach()
    return None


def _input_signature(args: tuple) -> tuple:
    """The shapes of a call's tensor arguments: a new signature means a new shape pass."""
    # a loop, not a comprehension or a generator: under a debugger each is one more traced call
    shapes = []
    for arg in args:
        if isinstance(arg, torch.Tensor):
            shapes.append(tuple(arg.shape))
    return tuple(shapes)


def _event_tensors(event: HookEvent) -> list[tuple[str, torch.Tensor]]:
    items: list[tuple[str, torch.Tensor]] = []
    if event.phase in ("forward_pre", "forward"):
        items += summaries.iter_tensors(event.inputs, "inputs")
        if event.phase == "forward":
            items += summaries.iter_tensors(event.output, "output")
    elif event.phase == "backward":
        items += summaries.iter_tensors(event.grad_input, "grad_input")
        items += summaries.iter_tensors(event.grad_output, "grad_output")
    elif event.grad is not None:
        items.append((f"{event.param_name}.grad", event.grad))
    return items


def param_grad_stats(model: nn.Module) -> list[dict[str, Any]]:
    """``[{name, shape, norm, mean, absmax, nan, inf}]`` of every ``.grad``, one sync per device."""
    named = [
        (name, p.grad)
        for name, p in model.named_parameters()
        if p.grad is not None and p.grad.layout == torch.strided and not p.grad.is_complex()
    ]
    by_device: dict[torch.device, list[tuple[str, torch.Tensor]]] = {}
    for name, grad in named:
        by_device.setdefault(grad.device, []).append((name, grad))
    rows: dict[str, list[float]] = {}
    with torch.no_grad():
        for group in by_device.values():
            grads = [g.float() if g.dtype in (torch.float16, torch.bfloat16) else g for _, g in group]
            norms = torch._foreach_norm(grads)
            stacked = torch.stack(
                [
                    torch.stack(
                        [
                            n.double(),
                            g.double().mean() if g.numel() else n.double() * 0,
                            g.abs().amax().double() if g.numel() else n.double() * 0,
                            torch.isnan(g).sum().double(),
                            torch.isinf(g).sum().double(),
                        ]
                    )
                    for n, g in zip(norms, grads)
                ]
            )
            for (name, _), values in zip(group, stacked.tolist()):
                rows[name] = values
    out = []
    for name, grad in named:
        norm, mean, absmax, nan, inf = rows[name]
        out.append(
            {
                "name": name,
                "shape": list(grad.shape),
                "norm": norm,
                "mean": mean if math.isfinite(mean) else None,
                "absmax": absmax,
                "nan": int(nan),
                "inf": int(inf),
            }
        )
    return out
