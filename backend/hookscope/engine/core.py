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
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch import nn

from hookscope.debugger import stop
from hookscope.engine import image_packages
from hookscope.engine.breakpoint_spec import BreakpointSpec
from hookscope.engine.breakpoints import Breakpoint, LayerBreakpoints
from hookscope.engine.compile_stance import _compile_forced_eager, _set_compile_stance
from hookscope.engine.model_index import ModelIndex
from hookscope.engine.renders import RENDERED_LAYERS_KEPT, RenderGlue
from hookscope.engine.replay.grad_health import REARM_RULE as HEALTH_REARM_RULE
from hookscope.engine.replay.nonfinite import REARM_RULE, NonFiniteWatch
from hookscope.engine.step_hooks import StepHooks, summaries_first_tensor
from hookscope.engine.watches import DEFAULT_RATE_HZ, WatchSampler, _LayerWatch, _phase_label, _SampleRound
from hookscope.hooks import copy_safety, summaries
from hookscope.hooks.conditions import HookEvent
from hookscope.hooks.kept_outputs import BreakpointOutputs, Kept
from hookscope.hooks.summary_budget import DEFAULT_SHARE as DEFAULT_SUMMARY_SHARE
from hookscope.hooks.summary_budget import SummaryBudget
from hookscope.link.protocol_vocabulary import (
    ERR_BAD_MESSAGE,
    ERR_NOT_AVAILABLE,
    ERR_UNKNOWN_LAYER,
    ERR_UNKNOWN_TYPE,
    ProtocolError,
)

log = logging.getLogger("hookscope")

NONFINITE_ID = "nonfinite"
GRADIENTS_ID = "gradients"
"""The ``breakpoint`` of a hit from break on exploding/vanishing gradients."""
GRADS_SAFE_POINT_S = 2.0
"""How long a request from the agent's thread waits for the model's next forward to read ``.grad``."""


class Engine(WatchSampler, RenderGlue, StepHooks):
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
            raise ProtocolError(ERR_UNKNOWN_TYPE, f"the engine does not handle {str(rtype)[:64]!r}")
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
