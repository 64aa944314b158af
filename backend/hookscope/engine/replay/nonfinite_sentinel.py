"""Break on NaN/Inf's per-step check of one model root: the call recorded, two syncs, when to report again.

The design, its cost and its limits are in ``nonfinite.py``; the search of a bad step (the
replay with probes) is in ``nonfinite_search.py``. Here: ``_pre``, before the root's call (a
rider on its step counter, or a forward pre-hook), records the call (``CallSnapshot``: inputs by
reference, RNG state, a copy of the buffers); ``_post``, after it, checks the output (one sync);
a tensor hook on the output queues the end-of-backward check of every parameter gradient (one
sync); and ``REARM_RULE`` decides whether a bad step is reported. The gradient-health switches
(``grad_health.py``) share the end-of-backward reads.
"""

from __future__ import annotations

import logging
import math
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn

from hookscope.debugger.stop import BreakpointHit
from hookscope.debugger.stop_location import module_calls
from hookscope.engine import step_counter
from hookscope.engine.replay.grad_health import Finding, GradientHealth, HealthCheck
from hookscope.engine.replay.nonfinite_search import investigate_forward, investigate_gradients
from hookscope.hooks.conditions import REPLAY, HookEvent
from hookscope.hooks.leaf_hooks import hook_gradient
from hookscope.hooks.module_tensors import STRUCTURE, ModuleTensors
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS
from hookscope.hooks.step_snapshot import CallSnapshot
from hookscope.hooks.summaries import all_finite, tensors_in

log = logging.getLogger("hookscope")

FireFn = Callable[[HookEvent, str, "str | None"], None]
NoticeFn = Callable[[str, str, str], None]

MAX_NAMED = 3
"""Parameters named in the notice that says why the sentinel is quiet."""


def grads_finite(flat: list[torch.Tensor], norm: list[torch.Tensor], half: bool = False) -> bool:
    """One host sync: are all these gradients free of NaN/Inf?

    ``flat`` (small CPU tensors) is checked through one flattened copy, ``norm``
    through one ``_foreach_norm`` (taken in fp32 when ``half``), and the
    results reduced on the device; a non-finite result is confirmed
    element-wise. No per-tensor Python here: under a debugger every generator
    step is a trace event, and a model has thousands of gradients.
    """
    if not flat and not norm:
        return True
    try:
        parts = (
            list(torch._foreach_norm(norm, dtype=torch.float32) if half else torch._foreach_norm(norm)) if norm else []
        )
        if flat:
            parts.append(torch._C._nn.flatten_dense_tensors(flat).sum(dtype=torch.float32))
        total = parts[0] if len(parts) == 1 else torch.stack(parts).sum()
        if math.isfinite(total.item()):
            return True
    except (RuntimeError, TypeError):  # mixed devices or dtypes, complex gradients: the element-wise check
        pass
    return all_finite(flat + norm)


@dataclass
class Checks:
    """What the sentinels check, shared by every sentinel of a ``NonFiniteWatch``."""

    nonfinite: bool = True
    """Break on NaN/Inf (off while only the gradient-health switches are on)."""
    health: GradientHealth = field(default_factory=GradientHealth)


class RootSentinel:
    """The per-step check for one model root, or for one of its children the
    program calls directly (``prefix`` is then the child's name in the root, ``parent`` the
    root's sentinel, which covers the child while the root's own forward runs)."""

    def __init__(
        self,
        model_id: str,
        root: nn.Module,
        fire: FireFn,
        notice: NoticeFn,
        step_of: Callable[[str], int],
        prefix: str = "",
        parent: RootSentinel | None = None,
    ) -> None:
        self.model_id = model_id
        self.prefix = prefix
        self.parent = parent
        self.family: list[RootSentinel] = parent.family if parent is not None else []
        """The sentinels of one model (its root's and its directly called children's)."""
        self.family.append(self)
        self._root = weakref.ref(root)  # the sentinel must not keep a model the program dropped
        self.tensors = ModuleTensors(root)
        self.fire = fire
        self._notice = notice
        self.step_of = step_of
        self.handles: list[Any] = []
        self.active = False
        self.call = CallSnapshot()
        """The root's last call: what a replay needs (taken while break on NaN/Inf is on), and the
        gradient each output received."""
        self._leaf_handles: dict[int, Any] = {}
        """Root-output hooks on a leaf (a model that returned its input as it is), by output:
        a hook on a leaf outlives the step (leaf_hooks), so each goes when it fires, or at the
        next forward."""
        self._callback_queued = False
        self.gradients_unchecked = False
        """A forward ran whose gradients were not checked yet (the optimizer hook asks)."""
        self.clean_before = False
        """The last checked forward was clean (a parameter bad now was written after it)."""
        self.forwards = 0
        """Forward calls of the root seen (replays not counted): which step a check belongs to."""
        self.forwards_at_optimizer = 0
        """``forwards`` at the last optimizer step (none since: the watch asks whether the ride was lost)."""
        self.reported_at: int | None = None
        """``forwards`` when the last report was made; None once a clean step re-armed the sentinel."""
        self._quiet_told = False
        """The notice saying the sentinel is quiet (parameters hold NaN/Inf) was sent."""
        self.call_open = False
        """``_pre`` took this call's snapshot: ``_post`` may check it (hooks that land while a
        forward runs see its end without its start, and leave that call alone)."""
        self.checks: Checks = parent.checks if parent is not None else Checks()
        """Replaced by the watch's (shared) when it installs the sentinel."""
        self._health = HealthCheck()
        self._health_armed = True
        self._first_end: Any = None
        """The one-shot forward hook ending the call the sentinel was installed in (see install)."""

    @property
    def root(self) -> nn.Module:
        root = self._root()
        if root is None:  # only reached from the root's own hooks and the backward they start
            raise RuntimeError("the model was freed")
        return root

    # -- installation ------------------------------------------------------

    def install(self) -> None:
        self.active = True
        STRUCTURE.acquire()
        root = self.root
        # A model root rides its step counter (no root hook: see step_counter); a child the program
        # calls directly, or a root without a counter, is hooked.
        ride = step_counter.ride(root, self._pre, self._post, self._hook_root) if self.parent is None else None
        self.handles = [ride] if ride is not None else self._root_hooks(root)
        starting = _starting_call(root)
        if starting is not None:
            self._pre(root, *starting)
            if ride is not None:  # this call began before the ride: its end comes through a hook, once
                self._first_end = root.register_forward_hook(self._post_once, with_kwargs=True)
                self.handles.append(self._first_end)

    def _root_hooks(self, root: nn.Module) -> list[Any]:
        return [
            root.register_forward_pre_hook(self._pre, with_kwargs=True),
            root.register_forward_hook(self._post, with_kwargs=True),
        ]

    def _hook_root(self) -> None:
        """The counter left the root (``model.compile()`` took its slot): hook the root instead."""
        root = self._root()
        if self.active and root is not None:
            self.handles = [h for h in self.handles if not isinstance(h, step_counter.Ride)] + self._root_hooks(root)

    def _post_once(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        """The end of the call the sentinel was installed in (``_post`` acts once per call: a rider's
        ``_post`` after it finds the call closed)."""
        if self._first_end is not None:
            self._first_end.remove()
            if self._first_end in self.handles:
                self.handles.remove(self._first_end)
            self._first_end = None
        self._post(module, args, kwargs, output)

    def remove(self) -> int:
        if self.active:
            STRUCTURE.release()
        self.active = False
        if self in self.family:
            self.family.remove(self)
        for handle in self.handles:
            handle.remove()
        count = len(self.handles)
        self.handles = []
        self._drop_leaf_hooks()
        self.call.release()
        return count

    def _drop_leaf_hooks(self) -> None:
        for handle in self._leaf_handles.values():
            handle.remove()
        self._leaf_handles = {}

    # -- steady state --------------------------------------------------------

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] = CALLED_WITHOUT_KWARGS) -> None:
        if (
            not self.active
            or REPLAY.depth
            or kwargs is CALLED_WITHOUT_KWARGS  # removed_hooks
            or (self.parent is not None and self.parent.call_open)
        ):
            return
        try:
            self.forwards += 1
            call = self.call
            if self.checks.nonfinite:  # what a replay needs (the gradient-health switches replay nothing)
                tensors = self.tensors
                call.take(
                    args, kwargs, tensors.buffers() if tensors.bufferless_at != tensors.structure.generation else ()
                )
            else:
                call.args, call.kwargs, call.grad_enabled, call.root_grads = args, kwargs, torch.is_grad_enabled(), []
            self.gradients_unchecked = True
            self.call_open = True
        except BreakpointHit:
            raise  # the user chose 'raise'
        except Exception as exc:
            self.error("snapshot", exc)

    def _post(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any = CALLED_WITHOUT_KWARGS
    ) -> None:
        if not self.active or REPLAY.depth or not self.call_open or output is CALLED_WITHOUT_KWARGS:
            return
        self.call_open = False
        try:
            outs = [output] if isinstance(output, torch.Tensor) else tensors_in(output)  # the usual case: no call
            # The one sync of the forward. A single fp32 output is summed here (all_finite's
            # shortcut, one traced frame less); a non-finite sum is confirmed by all_finite.
            if (
                self.checks.nonfinite
                and not (
                    len(outs) == 1
                    and outs[0].dtype is torch.float32
                    and outs[0].layout is torch.strided
                    and math.isfinite(outs[0].detach().sum().item())
                )
                and not all_finite(outs)
            ):
                if self._may_report():
                    self.reported_at = self.forwards
                    investigate_forward(self, output)
                self.clean_before = False
                return
            self.clean_before = True
            if torch.is_grad_enabled():
                if self._leaf_handles:
                    self._drop_leaf_hooks()  # the last forward's, whose backward never came
                grads: list[torch.Tensor | None] = []
                self.call.root_grads = grads
                for tensor in outs:
                    if not tensor.requires_grad:
                        continue
                    j = len(grads)
                    grads.append(None)
                    handle = hook_gradient(tensor, partial(self._root_grad, grads, j))
                    if handle is not None:  # a leaf: the hook outlives the step, kept to be removed
                        self._leaf_handles[j] = handle
        except BreakpointHit:
            raise  # the user chose 'raise'
        except Exception as exc:
            self.error("forward check", exc)

    def _root_grad(self, grads: list[torch.Tensor | None], j: int, grad: torch.Tensor) -> None:
        """Tensor hook on output ``j``: keep the gradient reaching it; check at the end of the backward."""
        if not self.active or REPLAY.depth or grads is not self.call.root_grads:
            return  # a stale hook of an earlier forward
        if self._leaf_handles and j in self._leaf_handles:
            self._leaf_handles.pop(j).remove()
        grads[j] = grad
        if not self._callback_queued:
            self._callback_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self.check_gradients)

    def check_gradients(self, replay: bool = True) -> None:
        """The gradient check, one sync; investigate when bad.

        Queued by the root-output hook for the end of the backward; the optimizer
        pre-hook calls it with ``replay=False`` when that never ran (the loss did
        not flow through the root's output: no output gradient to replay with).
        """
        self._callback_queued = False
        if not self.active:
            return
        try:
            self.gradients_unchecked = False
            root_grads = []
            for grad in self.call.root_grads:  # usually one
                if grad is not None:
                    root_grads.append(grad)
            finding = None
            health = self.checks.health
            health_on = health.on
            if health_on:
                # The gradient reaching the output matters to NaN/Inf alone: with only the health
                # switches on, its sum is not taken (two tensor calls a step).
                finite, finding = self._health.check_model(
                    self.tensors, self._root, root_grads if self.checks.nonfinite else [], health, self._health_armed
                )
            else:
                flat, norm = self.tensors.grad_groups(root_grads)
                finite = grads_finite(flat, norm, self.tensors.half_grads)
            if finite:
                if self.reported_at is not None:
                    self._rearm()
                if health_on:
                    if finding is None:  # _health_step's usual case, written out
                        self._health_armed = True
                    else:
                        self._health_step(finding)
            elif not self.checks.nonfinite:
                pass  # NaN/Inf, with only the gradient-health switches on: not theirs to report
            elif self._may_report():
                self.reported_at = self.forwards
                investigate_gradients(self, root_grads, replay)
        except BreakpointHit:
            raise  # the user chose 'raise'
        except Exception as exc:
            self.error("gradient check", exc)

    # -- gradient health (grad_health.py) ----------------------------------------

    def _health_step(self, finding: Finding | None) -> None:
        """At most one stop per step; after a stop, again only once a step ran within the thresholds."""
        if finding is None:
            self._health_armed = True
            return
        if not self._health_armed:
            return
        self._health_armed = False
        root = self.root
        module = root.get_submodule(finding.layer) if finding.layer else root
        pname = finding.param.rpartition(".")[2]
        param = getattr(module, pname, None)
        self.fire(
            HookEvent(
                self.model_id,
                self.qualified(finding.layer),
                module,
                "param_grad",
                param_name=pname,
                grad=None if param is None else param.grad,
                step=self.step_of(self.model_id),
                extra={"param": param, "gradient_health": finding.kind},
            ),
            finding.reason if not self.prefix else finding.reason.replace(finding.param, self.qualified(finding.param)),
            None,
        )

    # -- when to report again (REARM_RULE) ----------------------------------

    def _may_report(self) -> bool:
        """Whether this bad check should be investigated and reported (see REARM_RULE)."""
        if self.reported_at is None:
            return True
        if self.reported_at == self.forwards:
            return False  # this step was reported: the rest of it carries the same NaN
        params: list[torch.Tensor] = list(self.tensors.parameters())
        if all_finite(params):
            # The weights are fine: this NaN/Inf was born in this step. (Buffers are left out: a
            # NaN batch leaves NaN BatchNorm running stats, which training-mode steps never read.)
            return True
        if not self._quiet_told:
            self._quiet_told = True
            self._notice(
                "info",
                f"Break on NaN/Inf is quiet on model {self.model_id} from step "
                f"{self.step_of(self.model_id)}: {self._nonfinite_weights()} hold NaN/Inf now, so "
                "every step is bad; it stops again after a step runs clean.",
                "nonfiniteQuiet",
            )
        return False

    def _rearm(self) -> None:
        """A clean step after a report: the next bad step stops again."""
        self.reported_at = None
        if self._quiet_told:
            self._quiet_told = False
            self._notice(
                "info",
                f"Break on NaN/Inf is armed again on model {self.model_id}: step "
                f"{self.step_of(self.model_id)} ran clean.",
                "nonfiniteRearmed",
            )

    def _nonfinite_weights(self) -> str:
        """'fc1.weight, fc1.bias and 4 more' (the rare quiet notice: one check per tensor is fine)."""
        root = self._root()
        if root is None:
            return "its parameters"
        bad = [self.qualified(name) for name, t in root.named_parameters() if not all_finite([t])]
        if not bad:
            return "its parameters"
        named = ", ".join(bad[:MAX_NAMED])
        return named + (f" and {len(bad) - MAX_NAMED} more" if len(bad) > MAX_NAMED else "")

    def qualified(self, name: str) -> str:
        """A name inside the watched module, as a name in the model (sub-model sentinels)."""
        if not self.prefix:
            return name
        return f"{self.prefix}.{name}" if name else self.prefix

    def error(self, what: str, exc: Exception) -> None:
        log.debug("hookscope: nonfinite %s failed", what, exc_info=True)
        self._notice(
            "warning",
            f"break on NaN/Inf: {what} failed on model {self.model_id}: {type(exc).__name__}: {exc}"[:500],
            "nonfiniteError",
        )


def _starting_call(root: nn.Module) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """(args, kwargs) of ``root``'s call when the innermost module call on this thread is the root's.

    Discovery's first-forward flush is a global forward pre-hook: a model created and called
    at once is added, and the sentinel installed, while that very call runs its pre-hooks,
    whose list torch took before ours existed. Its forward has not run yet, so the snapshot
    taken now is exact and the first step is checked like any other.
    """
    for module, frame in module_calls(sys._getframe(1)):
        if module is not root:
            return None  # inside another module's call: the root's forward is running
        names = frame.f_locals
        return tuple(names["args"]), dict(names["kwargs"] or {})
    return None
