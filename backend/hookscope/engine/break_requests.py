"""The requests that say where the program breaks: layer breakpoints, break on NaN/Inf, gradient health.

Layer breakpoints are resolved against every tracked model (``engine/model_index.py``) and hooked
by ``engine/breakpoints.py``; ``resolveLayers`` gives the same resolution without hooking
anything. Break on NaN/Inf and the gradient-health thresholds share the per-step sentinels of
``engine/replay/nonfinite.py``, installed while either is on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from torch import nn

from hookscope.debugger import stop
from hookscope.engine.breakpoint_spec import BreakpointSpec
from hookscope.engine.breakpoints import Breakpoint
from hookscope.engine.compile_stance import CompileStance
from hookscope.engine.step_hooks import StepHooks
from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, ProtocolError


class BreakRequests(StepHooks, CompileStance):
    """Engine's break half: which layers break and when, and the NaN/Inf and gradient switches."""

    # ------------------------------------------------------------------ layer breakpoints

    def _req_setBreakpoints(self, request: dict[str, Any]) -> dict[str, Any]:
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

    def _req_resolveLayers(self, request: dict[str, Any]) -> dict[str, Any]:
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

    def set_breakpoints(self, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Python API: like the request, but specs may carry a ``callback``."""
        resolved: list[dict[str, Any]] = self._req_setBreakpoints({"breakpoints": specs})["resolved"]
        return resolved

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
                module = self._breakpoints.installed_on(model_id, name)
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

    # ------------------------------------------------------------------ NaN/Inf and gradient health

    def _req_setBreakOnNonFinite(self, request: dict[str, Any]) -> dict[str, Any]:
        self.set_break_on_nonfinite(bool(request.get("enabled")))
        return {"enabled": self._nonfinite_enabled}

    def _req_setBreakOnGradients(self, request: dict[str, Any]) -> dict[str, Any]:
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
            health.set(None if exploding is None else float(exploding), None if vanishing is None else float(vanishing))
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

    def _sync_sentinels(self) -> None:
        if self._sentinels_on and not self._nonfinite.enabled:
            for model_id, index in self._indexes.items():
                if index.model is not None:
                    self._nonfinite.add(model_id, index.model)
        elif not self._sentinels_on and self._nonfinite.enabled:
            self._nonfinite.clear()
        self._sync_root_hooks()
