"""The ``Engine``: all hook state of one process, the models it tracks, request dispatch, shutdown.

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
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch import nn

from hookscope.engine import step_counter
from hookscope.engine.break_requests import BreakRequests
from hookscope.engine.breakpoints import LayerBreakpoints
from hookscope.engine.hits import HitReporter
from hookscope.engine.model_index import ModelIndex
from hookscope.engine.panel_requests import PanelRequests
from hookscope.engine.replay.nonfinite import NonFiniteWatch
from hookscope.hooks import copy_safety
from hookscope.hooks.conditions import REPLAY
from hookscope.hooks.kept_outputs import BreakpointOutputs
from hookscope.hooks.summary_budget import DEFAULT_SHARE as DEFAULT_SUMMARY_SHARE
from hookscope.hooks.summary_budget import SummaryBudget
from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, ERR_UNKNOWN_LAYER, ERR_UNKNOWN_TYPE, ProtocolError

if TYPE_CHECKING:
    from hookscope.engine.interventions import Interventions


class Engine(PanelRequests, BreakRequests, HitReporter):
    """Hook state of one process; answers the agent's requests (see docs/ARCHITECTURE.md).

    Its parts are mixins, one per subject, each typed against ``EngineState`` (``engine/state.py``,
    which declares the state set here): ``PanelRequests`` (watches, summaries, images, values;
    ``engine/panel_requests.py``, on ``renders``, ``watches`` and ``step_hooks``),
    ``BreakRequests`` (breakpoints, the NaN/Inf and gradient switches; ``engine/break_requests.py``,
    on ``step_hooks`` and ``compile_stance``) and ``HitReporter`` (``engine/hits.py``). Here: the
    state, the models, dispatch, interventions, the hook inventory, shutdown.
    """

    def __init__(
        self,
        emit: Callable[[dict[str, Any]], None],
        *,
        shapes: bool = True,
        summary_share: float = DEFAULT_SUMMARY_SHARE,
    ) -> None:
        """``summary_share``: the share of the program's time watched layers' summaries may take."""
        copy_safety.install()  # deepcopy/pickle/torch.save of a watched model leave our hooks out
        self.requests_off_thread = False
        self._emit_raw = emit
        self._lock = threading.RLock()
        self._indexes = {}
        self._steps = {}
        self._root_handles = {}
        self._last_args = {}
        self._shapes_wanted = shapes
        self._shape_handles = {}
        self._sent_shapes = {}
        self._input_signature = {}
        self._breakpoints = LayerBreakpoints(
            self._fire_breakpoint, self._notice, self._step_of, keep_outputs=self._replay_outputs
        )
        self._nonfinite = NonFiniteWatch(self._fire_nonfinite, self._notice, self._step_of)
        # break on NaN/Inf off until asked (the sentinels may serve gradient health)
        self._nonfinite.checks.nonfinite = False
        self._nonfinite_enabled = False
        self._nonfinite_action = "log"
        self._nonfinite_callback = None
        self._watches = {}
        self._captures = {}
        self._last = {}
        self._last_output = {}
        self._bp_outputs = BreakpointOutputs(self._step_of)
        self._arm_at = math.inf
        self._sample_rounds = {}
        self._rendered = collections.OrderedDict()
        self._paused = None
        self._interventions = None
        self._compiled_noticed = set()
        self._budget = SummaryBudget(summary_share)
        self._budget_noticed = False
        self._stance_before_eager = None
        self._filtered_notice_sent = False
        self._callback_errors = set()

    # ------------------------------------------------------------------ models

    def add_model(self, model_id: str, model: nn.Module, locations: dict[str, tuple[str, int]] | None = None) -> None:
        """Track ``model`` (breakpoints set earlier are resolved against it too)."""
        with self._lock:
            self._indexes[model_id] = ModelIndex(model_id, model, locations)
            self._steps.setdefault(model_id, 0)
            step_counter.install(model, model_id, self._steps, REPLAY)
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
            if index.model is not None:
                step_counter.remove(index.model)
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

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """Reply body for ``request``; raises ProtocolError for an error reply."""
        rtype = request.get("type")
        handler = getattr(self, f"_req_{rtype}", None)
        if handler is None:
            raise ProtocolError(ERR_UNKNOWN_TYPE, f"the engine does not handle {str(rtype)[:64]!r}")
        try:
            reply: dict[str, Any] = handler(request)
            return reply
        except ProtocolError:  # (a ValueError too)
            raise
        except (ValueError, IndexError) as exc:
            # The request's values do not fit what they name (a channel past the layer's, an axis the
            # tensor lacks): the public API (visuals, interventions) refuses such arguments with these.
            # Anything else a handler raises (KeyError, TypeError, AttributeError…) is Hookscope's own
            # bug: the agent logs it with its traceback and answers 'internal', never blaming the editor.
            raise ProtocolError(ERR_BAD_MESSAGE, f"{rtype}: {exc}") from exc

    def _req_listHooks(self, request: dict[str, Any]) -> dict[str, Any]:
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

    def _req_removeHooks(self, request: dict[str, Any]) -> dict[str, Any]:
        # "Remove All Hookscope Hooks": the step counters are no hooks, and later stops keep the program's steps
        return {"removed": self.shutdown(keep_step_counters=True)}

    def _req_bye(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"removed": self.shutdown()}

    def _req_addIntervention(self, request: dict[str, Any]) -> dict[str, Any]:
        model_id = self._model_id(request.get("model"))
        layer, module = self._layer(model_id, request.get("layer"))
        kind = request.get("kind")
        if not isinstance(kind, str):
            raise ProtocolError(ERR_BAD_MESSAGE, "addIntervention needs a 'kind'")
        interventions = self._get_interventions()
        iv_id = interventions.add(
            model_id, module, layer, kind, channels=request.get("channels"), value=request.get("value")
        )
        return {"id": iv_id}

    def _req_removeIntervention(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._interventions is None:
            return {"removed": 0}
        target = request.get("intervention")
        return {"removed": self._interventions.remove(target if isinstance(target, str) else None)}

    def _req_listInterventions(self, request: dict[str, Any]) -> dict[str, Any]:
        if self._interventions is None:
            return {"interventions": []}
        return {"interventions": self._interventions.list()}

    # ------------------------------------------------------------------ shutdown

    def shutdown(self, keep_step_counters: bool = False) -> int:
        """Remove every hook Hookscope added, and the step counters unless ``keep_step_counters``;
        returns how many hooks."""
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
            for root_handle in self._root_handles.values():
                root_handle.remove()
                removed += 1
            self._root_handles.clear()
            if not keep_step_counters:
                for index in self._indexes.values():
                    if index.model is not None:
                        step_counter.remove(index.model)
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

    def _get_interventions(self) -> Interventions:
        if self._interventions is None:
            from hookscope.engine.interventions import Interventions

            self._interventions = Interventions()
        return self._interventions
