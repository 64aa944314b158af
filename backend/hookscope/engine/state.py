"""What every part of the ``Engine`` shares: its state, declared with types, and the few helpers all use.

``Engine`` (``engine/core.py``) is assembled from mixins, one per subject: watches, renders, step
hooks, the compile stance, the break requests, the panel requests, hits. Each is a subclass
of ``EngineState`` (or of the mixin it builds on), so every attribute it reads has one declared
type here; ``Engine.__init__`` sets them all.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn
from torch.utils.hooks import RemovableHandle

from hookscope.debugger import stop
from hookscope.engine import step_counter
from hookscope.engine.breakpoints import LayerBreakpoints
from hookscope.engine.model_index import ModelIndex
from hookscope.engine.replay.nonfinite import NonFiniteWatch
from hookscope.hooks.kept_outputs import BreakpointOutputs, Kept
from hookscope.hooks.summary_budget import SummaryBudget
from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, ERR_NOT_AVAILABLE, ERR_UNKNOWN_LAYER, ProtocolError

if TYPE_CHECKING:  # (watches.py builds on this module; interventions load with the first one)
    from hookscope.engine.interventions import Interventions
    from hookscope.engine.watches import LayerWatch, SampleRound

log = logging.getLogger("hookscope")

LayerKey = tuple[str, str]
"""(model id, layer name)."""


class EngineState:
    """The ``Engine``'s state (set in ``Engine.__init__``) and the helpers every mixin uses."""

    requests_off_thread: bool
    """Requests come from another thread than training (the agent's): ``.grad`` is then read
    only at a safe point (see ``PanelRequests._read_grads``)."""
    _emit_raw: Callable[[dict[str, Any]], None]
    _lock: threading.RLock
    """Held by configuration changes; never while the debugger pauses a thread."""
    _indexes: dict[str, ModelIndex]
    _steps: dict[str, int]
    _root_handles: dict[str, RemovableHandle | step_counter.Ride]
    """Each active model's step hook: a rider on its step counter, or a root pre-hook."""
    _last_args: dict[str, tuple[tuple[Any, ...], dict[str, Any]]]
    """Each model's last root call (Grad-CAM replays it)."""
    _shapes_wanted: bool
    _shape_handles: dict[str, list[RemovableHandle]]
    _sent_shapes: dict[str, dict[str, list[int]]]
    _input_signature: dict[str, tuple[tuple[int, ...], ...]]
    _breakpoints: LayerBreakpoints
    _nonfinite: NonFiniteWatch
    _nonfinite_enabled: bool
    _nonfinite_action: str
    _nonfinite_callback: Callable[[stop.Hit], Any] | None
    _watches: dict[LayerKey, LayerWatch]
    _captures: dict[LayerKey, LayerWatch]
    """Render captures: a layer the panel shows without a watch, kept from its next forward pass."""
    _last: dict[LayerKey, dict[str, Any]]
    """The last summaries of each layer (a hit's or a watch's): ``{step, tensors}``."""
    _last_output: dict[LayerKey, Kept]
    """The last call of each layer the panel renders (kept by its watch or a render capture)."""
    _bp_outputs: BreakpointOutputs
    """The last call of each layer that has a breakpoint: images at every stop."""
    _arm_at: float
    """When the earliest disarmed watch or capture is due again."""
    _sample_rounds: dict[tuple[str, float], SampleRound]
    """(model, interval) -> the layers sampled together last, and when they are due again."""
    _rendered: collections.OrderedDict[LayerKey, None]
    """(model, layer) of the last RENDERED_LAYERS_KEPT layers the panel rendered, oldest first."""
    _paused: dict[str, Any] | None
    """The stop's locals while a thread is paused at a Hookscope hit (None otherwise)."""
    _interventions: Interventions | None
    _compiled_noticed: set[str]
    _budget: SummaryBudget
    _budget_noticed: bool
    _stance_before_eager: str | None
    """dynamo's stance before setCompiledEager turned on force_eager (None: Hookscope did not change it)."""
    _filtered_notice_sent: bool
    _callback_errors: set[tuple[str, str]]
    """(breakpoint id, error) already reported: a raising callback is told once, not every call."""

    def _emit(self, event: dict[str, Any]) -> None:
        try:
            self._emit_raw(event)
        except Exception:  # emit never blocks nor raises into training
            log.debug("hookscope: emit failed", exc_info=True)

    def _notice(self, level: str, message: str, code: str) -> None:
        self._emit({"type": "notice", "level": level, "message": message, "code": code})

    def _step_of(self, model_id: str) -> int:
        """The current step of a model (``protocol.STEP_MEANING``): 0 during the first forward seen."""
        return max(self._steps.get(model_id, 0) - 1, 0)

    @property
    def _sentinels_on(self) -> bool:
        """Break on NaN/Inf or a gradient-health switch is on: the per-step sentinels are installed."""
        return self._nonfinite_enabled or self._nonfinite.checks.health.on

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
        return self._layer(model_id, layer)[1]

    def _layer(self, model_id: str, layer: Any) -> tuple[str, nn.Module]:
        """The layer a request names (its ``layer`` field, checked) and its module."""
        if not isinstance(layer, str):
            raise ProtocolError(ERR_BAD_MESSAGE, "a 'layer' name is needed")
        module = self._indexes[model_id].modules().get(layer)
        if module is None:
            raise ProtocolError(ERR_UNKNOWN_LAYER, f"no layer named {layer[:128]!r} in model {model_id}")
        return layer, module
