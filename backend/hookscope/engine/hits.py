"""A hit: the ``hit`` event sent to the editor, then the pause in the debugger or the action without one.

Layer breakpoints (``engine/breakpoints.py``) and the NaN/Inf and gradient-health sentinels
(``engine/replay/nonfinite.py``) call in here from the training thread; the lock is never held while
the debugger pauses it, so the agent keeps answering while the user inspects the hit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

from hookscope.debugger import stop
from hookscope.engine.breakpoints import Breakpoint
from hookscope.engine.replay.grad_health import REARM_RULE as HEALTH_REARM_RULE
from hookscope.engine.replay.nonfinite import REARM_RULE
from hookscope.engine.state import EngineState
from hookscope.hooks import summaries
from hookscope.hooks.conditions import HookEvent

log = logging.getLogger("hookscope")

NONFINITE_ID = "nonfinite"
"""The ``breakpoint`` of a hit from break on NaN/Inf."""
GRADIENTS_ID = "gradients"
"""The ``breakpoint`` of a hit from break on exploding/vanishing gradients."""


class HitReporter(EngineState):
    """Engine's hit half: what the editor is told at a hit, and the pause or action that follows."""

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


def _phase_label(phase: str) -> str:
    return phase.replace("_", "-")


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
