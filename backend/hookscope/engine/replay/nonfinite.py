"""Break on NaN/Inf: a cheap per-step sentinel, then an exact replay of the failing step.

Why not check every layer
    A NaN check with a host sync in every layer's forward costs ~1.3x a small
    CNN step, per-tensor gradient checks ~1.6-1.9x, more than
    ``torch.autograd.detect_anomaly`` (DESIGN.md). Non-finite values are rare,
    so the steady state only asks "did this step go bad?" and the expensive
    "where?" runs once, on the bad step.

Steady state (per model root, no per-layer hook)
    * root forward-pre hook: keeps a reference to the call's args/kwargs (no
      copy), the CPU (a ``clone_state`` copy of the generator) and CUDA RNG
      state, a copy of the module buffers (BatchNorm running stats: small)
      into preallocated storage (``_foreach_copy_``), and the grad mode. The
      model itself is held weakly: a model the program drops is freed.
    * root forward hook: ``all_finite`` over the output tensors (a sum: NaN
      and Inf survive it), one host sync; when the output needs a gradient, a
      tensor hook on it. (Folding this check into the end-of-backward one
      saves one small op and a sync, but a forward with no backward after it
      would go unchecked, and "raise" would raise from ``backward()``.)
    * that tensor hook keeps the gradient reaching the root output and queues
      a callback for the end of the backward pass
      (``Variable._execution_engine.queue_callback``), where one on-device
      number over every parameter ``.grad`` and the root output gradient
      decides, with one host sync, whether the backward went bad: the sum of
      one flattened copy of the small CPU gradients (a norm kernel per tensor
      costs ~1 µs on CPU, however small the tensor) plus ``_foreach_norm`` of
      the others (one fused kernel on CUDA).
    * a global optimizer step pre-hook catches models whose output gradient
      was not seen (the loss did not flow through the root's output): same
      check, before the optimizer consumes the gradients.
    Cost: two root hooks, a buffer copy and two syncs per step, whatever the
    depth, plus ~0.5 µs per small CPU parameter tensor: about 0.1 ms per step
    under debugpy on a 2-core CPU (bench/RESULTS.md).
    The parameter and buffer lists come from ``module_tensors.ModuleTensors``
    (no module-tree walk per step). A sum or norm can overflow although every
    value is finite (fp32 beyond ~1e19 squared, or ~3e38 summed; fp16 is
    reduced in fp32), so a non-finite one is confirmed element-wise before it
    counts; that costs only on the rare suspicious step.

On a bad step: exact replay
    The forward is re-run on the same inputs with the RNG state and the
    buffers put back as they were at the root's forward-pre, so dropout masks
    and BatchNorm statistics are the same and the values bit-identical (on
    deterministic kernels). Precise probes on every module find the FIRST
    layer that produced a non-finite value: forward hooks in completion order
    (a child finishes before its parent), forward-pre hooks to see values
    born between layers. For a backward failure the replay runs the forward
    and then ``autograd.backward`` from the root output with the gradient the
    original step received; tensor hooks on each layer's inputs, outputs and
    parameters fire in backward order, and the first non-finite gradient
    names the layer (a gradient reaching a layer's input that is bad while its
    output gradient was fine: born in that layer). The parameters' ``.grad``
    are saved before and put back after, so the replay does not accumulate
    twice; RNG state and buffers are put back to their post-step values, so
    training goes on exactly as without Hookscope. The debugger pauses inside
    the replay's hook of the culprit layer, with the replay's tensors (the
    same values) as ``inputs``/``output`` or ``grad_input``/``grad_output``.

    No replay is needed when the inputs are already non-finite (reported at
    the root: "came in through the inputs") or when the gradient reaching the
    root output is (reported at the root: "came in from the loss").

Limits
    State outside the model that the forward reads or changes (Python
    counters, global flags) is not restored; the user's own hooks run again
    during the replay; nondeterministic kernels (some CUDA atomics) may not
    reproduce the value, in which case the hit is reported at the root with
    that explanation. Only the last forward call of the root before the
    backward is replayed. When one tensor feeds several layers, a NaN born in
    the backward of one of them is blamed on the innermost of them.

When it fires again (``REARM_RULE``, sent with each hit and shown in the panel)
    A step (one forward of the root and its backward) stops at most once:
    what follows a report in the same step comes from the same NaN. A later
    bad step stops again when the model's parameters are finite (the NaN/Inf
    was born anew in that step); when they hold NaN/Inf (the
    optimizer spread the gradient into the weights) every step would stop, so
    the sentinel stays quiet until a step runs clean, and says so once in a
    notice (``nonfiniteQuiet``), and again when a clean step re-arms it
    (``nonfiniteRearmed``). Telling the two apart costs one sync on a bad
    step only.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from hookscope.debugger.stop import BreakpointHit
from hookscope.debugger.stop_location import module_calls
from hookscope.engine.replay.grad_health import Finding, GradientHealth, HealthCheck
from hookscope.engine.replay.nan_origin import NodeWatch, OpOrigin, OpTracer, named_tensors
from hookscope.hooks.conditions import (
    ORIGIN_BORN,
    ORIGIN_INPUTS,
    ORIGIN_LOSS,
    REPLAY,
    HookEvent,
    describe_counts,
    nonfinite_counts,
)
from hookscope.hooks.leaf_hooks import hook_gradient
from hookscope.hooks.module_tensors import STRUCTURE, ModuleTensors, flattens
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS
from hookscope.hooks.summaries import all_finite, tensors_in

log = logging.getLogger("hookscope")

FireFn = Callable[[HookEvent, str, "str | None"], None]
NoticeFn = Callable[[str, str, str], None]

REARM_RULE = (
    "Break on NaN/Inf stops again at the next step with a new NaN/Inf; while the model's "
    "parameters hold NaN/Inf it stays quiet until a step runs clean."
)
"""When break on NaN/Inf fires again after a stop (the ``rearm`` field of its hits)."""

MAX_NAMED = 3
"""Parameters named in the notice that says why the sentinel is quiet."""


def _grads_finite(flat: list[torch.Tensor], norm: list[torch.Tensor], half: bool = False) -> bool:
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


def _named_grads(root: nn.Module) -> tuple[list[torch.Tensor], list[str], list[torch.Tensor], list[str]]:
    """(flat, their names, norm, their names) of the parameters that have a gradient, each once."""
    groups: tuple[list, list, list, list] = ([], [], [], [])
    for name, param in root.named_parameters():
        if param.grad is not None:
            k = 0 if flattens(param.grad) else 2
            groups[k].append(param.grad)
            groups[k + 1].append(name)
    return groups


def _depth(name: str) -> int:
    return name.count(".") + 1 if name else 0


class RootSentinel:
    """The per-step check and the replay for one model root, or for one of its children the
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
        self._fire = fire
        self._notice = notice
        self._step_of = step_of
        self.handles: list[Any] = []
        self.active = False
        self._args: tuple = ()
        self._kwargs: dict[str, Any] = {}
        self._grad_enabled = True
        self._cpu_rng: torch.Generator | None = None
        """A copy of the CPU generator (``clone_state``: ~3x cheaper inside a step than
        ``get_state``, which builds a 5 KB tensor); its state is read only to replay."""
        self._cuda_rng: list[torch.Tensor] | None = None
        self._buffer_snapshot: list[torch.Tensor] = []
        self._buffer_ids: list[int] = []
        self._root_grads: list[torch.Tensor | None] = []
        self._leaf_handles: dict[int, Any] = {}
        """Root-output hooks on a leaf (a model that returned its input as it is), by output:
        a hook on a leaf outlives the step (leaf_hooks), so each goes when it fires, or at the
        next forward."""
        self._callback_queued = False
        self.gradients_unchecked = False
        """A forward ran whose gradients were not checked yet (the optimizer hook asks)."""
        self._clean_before = False
        """The last checked forward was clean (a parameter bad now was written after it)."""
        self._forwards = 0
        """Forward calls of the root seen (replays not counted): which step a check belongs to."""
        self._reported_at: int | None = None
        """``_forwards`` when the last report was made; None once a clean step re-armed the sentinel."""
        self._quiet_told = False
        """The notice saying the sentinel is quiet (parameters hold NaN/Inf) was sent."""
        self._call_open = False
        """``_pre`` took this call's snapshot: ``_post`` may check it (hooks that land while a
        forward runs see its end without its start, and leave that call alone)."""
        self.checks = parent.checks if parent is not None else Checks()
        """Replaced by the watch's (shared) when it installs the sentinel."""
        self._health = HealthCheck()
        self._health_armed = True

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
        self.handles = [
            self.root.register_forward_pre_hook(self._pre, with_kwargs=True),
            self.root.register_forward_hook(self._post, with_kwargs=True),
        ]
        starting = _starting_call(self.root)
        if starting is not None:
            self._pre(self.root, *starting)

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
        self._args, self._kwargs, self._root_grads = (), {}, []
        return count

    def _drop_leaf_hooks(self) -> None:
        for handle in self._leaf_handles.values():
            handle.remove()
        self._leaf_handles = {}

    # -- steady state --------------------------------------------------------

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict[str, Any] = CALLED_WITHOUT_KWARGS) -> None:
        if (
            not self.active
            or REPLAY.depth
            or kwargs is CALLED_WITHOUT_KWARGS  # removed_hooks
            or (self.parent is not None and self.parent._call_open)
        ):
            return
        try:
            self._forwards += 1
            self._args, self._kwargs = args, kwargs
            self._grad_enabled = torch.is_grad_enabled()
            if self.checks.nonfinite:  # what a replay needs (the gradient-health switches replay nothing)
                self._cpu_rng = torch.default_generator.clone_state()
                # torch.cuda._initialized first: is_initialized() is one more traced frame per step
                cuda = getattr(torch.cuda, "_initialized", True) and torch.cuda.is_initialized()
                self._cuda_rng = torch.cuda.get_rng_state_all() if cuda else None
                tensors = self.tensors
                if self._buffer_ids or tensors.bufferless_at != tensors.structure.generation:
                    self._snapshot_buffers(tensors.buffers())
            self._root_grads = []
            self.gradients_unchecked = True
            self._call_open = True
        except BreakpointHit:
            raise  # the user chose 'raise'
        except Exception as exc:
            self._error("snapshot", exc)

    def _snapshot_buffers(self, buffers: list[torch.Tensor]) -> None:
        """Called when there may be buffers now or were last step (``_pre`` skips a model with none)."""
        ids = [id(b) for b in buffers]
        if ids == self._buffer_ids:  # the same tensors as last step: copy into the snapshot in place
            try:
                with torch.no_grad():
                    torch._foreach_copy_(self._buffer_snapshot, buffers)
                return
            except RuntimeError:  # a buffer resized in place: take a new snapshot
                pass
        self._buffer_ids = ids
        self._buffer_snapshot = [b.detach().clone() for b in buffers]

    def _post(
        self, module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any = CALLED_WITHOUT_KWARGS
    ) -> None:
        if not self.active or REPLAY.depth or not self._call_open or output is CALLED_WITHOUT_KWARGS:
            return
        self._call_open = False
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
                    self._reported_at = self._forwards
                    self._investigate_forward(output)
                self._clean_before = False
                return
            self._clean_before = True
            if torch.is_grad_enabled():
                if self._leaf_handles:
                    self._drop_leaf_hooks()  # the last forward's, whose backward never came
                self._root_grads = grads = []
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
            self._error("forward check", exc)

    def _root_grad(self, grads: list[torch.Tensor | None], j: int, grad: torch.Tensor) -> None:
        """Tensor hook on output ``j``: keep the gradient reaching it; check at the end of the backward."""
        if not self.active or REPLAY.depth or grads is not self._root_grads:
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
            for grad in self._root_grads:  # usually one
                if grad is not None:
                    root_grads.append(grad)
            finding = None
            if self.checks.health.on:
                finite, finding = self._health_check(root_grads)
            else:
                flat, norm = self.tensors.grad_groups(root_grads)
                finite = _grads_finite(flat, norm, self.tensors.half_grads)
            if finite:
                if self._reported_at is not None:
                    self._rearm()
                if self.checks.health.on:
                    self._health_step(finding)
            elif not self.checks.nonfinite:
                pass  # NaN/Inf, with only the gradient-health switches on: not theirs to report
            elif self._may_report():
                self._reported_at = self._forwards
                self._investigate_gradients(root_grads, replay)
        except BreakpointHit:
            raise  # the user chose 'raise'
        except Exception as exc:
            self._error("gradient check", exc)

    # -- gradient health (grad_health.py) ----------------------------------------

    def _health_check(self, root_grads: list[torch.Tensor]) -> tuple[bool, Finding | None]:
        """The NaN/Inf check and the exploding/vanishing one from the same reads of the gradients."""
        tensors = self.tensors
        flat, norm = tensors.grad_groups()
        if not flat and not norm:
            return all_finite(root_grads), None
        if tensors.complete:
            flat_names, norm_names = tensors.flat_names, tensors.norm_names
        else:  # a parameter without a gradient (frozen, unused this step): names the slow way
            flat, flat_names, norm, norm_names = _named_grads(self.root)
        finite, finding = self._health.check(flat, flat_names, norm, norm_names, root_grads, self.checks.health)
        if not finite and all_finite(list(flat) + list(norm) + root_grads):
            # a square overflowed: finite values, so large that they explode any threshold
            finite, finding = self._health.check(
                flat,
                flat_names,
                norm,
                norm_names,
                (),
                GradientHealth(exploding=self.checks.health.exploding, vanishing=None),
            )
            finite = True
        return finite, finding

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
        self._fire(
            HookEvent(
                self.model_id,
                self._qualified(finding.layer),
                module,
                "param_grad",
                param_name=pname,
                grad=None if param is None else param.grad,
                step=self._step_of(self.model_id),
                extra={"param": param, "gradient_health": finding.kind},
            ),
            finding.reason
            if not self.prefix
            else finding.reason.replace(finding.param, self._qualified(finding.param)),
            None,
        )

    # -- when to report again (REARM_RULE) ----------------------------------

    def _may_report(self) -> bool:
        """Whether this bad check should be investigated and reported (see REARM_RULE)."""
        if self._reported_at is None:
            return True
        if self._reported_at == self._forwards:
            return False  # this step was reported: the rest of it carries the same NaN
        if all_finite(self.tensors.parameters()):
            # The weights are fine: this NaN/Inf was born in this step. (Buffers are left out: a
            # NaN batch leaves NaN BatchNorm running stats, which training-mode steps never read.)
            return True
        if not self._quiet_told:
            self._quiet_told = True
            self._notice(
                "info",
                f"Break on NaN/Inf is quiet on model {self.model_id} from step "
                f"{self._step_of(self.model_id)}: {self._nonfinite_weights()} hold NaN/Inf now, so "
                "every step is bad; it stops again after a step runs clean.",
                "nonfiniteQuiet",
            )
        return False

    def _rearm(self) -> None:
        """A clean step after a report: the next bad step stops again."""
        self._reported_at = None
        if self._quiet_told:
            self._quiet_told = False
            self._notice(
                "info",
                f"Break on NaN/Inf is armed again on model {self.model_id}: step "
                f"{self._step_of(self.model_id)} ran clean.",
                "nonfiniteRearmed",
            )

    def _nonfinite_weights(self) -> str:
        """'fc1.weight, fc1.bias and 4 more' (the rare quiet notice: one check per tensor is fine)."""
        root = self._root()
        if root is None:
            return "its parameters"
        bad = [self._qualified(name) for name, t in root.named_parameters() if not all_finite([t])]
        if not bad:
            return "its parameters"
        named = ", ".join(bad[:MAX_NAMED])
        return named + (f" and {len(bad) - MAX_NAMED} more" if len(bad) > MAX_NAMED else "")

    def _investigate_gradients(self, root_grads: list[torch.Tensor], replay: bool) -> None:
        if root_grads and not all_finite(root_grads):
            step = self._step_of(self.model_id)
            counts = describe_counts(nonfinite_counts(root_grads))
            self._fire(
                HookEvent(
                    self.model_id, self._qualified(""), self.root, "backward", grad_output=tuple(root_grads), step=step
                ),
                f"NaN/Inf in the gradient reaching the model output ({counts}): it came in from the loss",
                ORIGIN_LOSS,
            )
        elif replay and root_grads:
            self._investigate_backward()
        else:
            self._report_param_grads("the gradient did not flow through the model's output; no replay")

    # -- the replay ------------------------------------------------------

    @contextlib.contextmanager
    def _replaying(self) -> Iterator[None]:
        """Put RNG and buffers back as at the forward-pre; put the post-step state back after."""
        cpu_now = torch.get_rng_state()
        cuda_now = torch.cuda.get_rng_state_all() if self._cuda_rng is not None else None
        buffers = [b.data for b in self.tensors.buffers()]  # .data: no version bump for autograd
        buffers_now = [b.clone() for b in buffers]
        if self._cpu_rng is not None:
            torch.set_rng_state(self._cpu_rng.get_state())
        if self._cuda_rng is not None:
            torch.cuda.set_rng_state_all(self._cuda_rng)
        if len(buffers) == len(self._buffer_snapshot) and buffers:
            torch._foreach_copy_(buffers, self._buffer_snapshot)
        REPLAY.depth += 1
        try:
            yield
        finally:
            REPLAY.depth -= 1
            if buffers:
                torch._foreach_copy_(buffers, buffers_now)
            torch.set_rng_state(cpu_now)
            if cuda_now is not None:
                torch.cuda.set_rng_state_all(cuda_now)

    def _qualified(self, name: str) -> str:
        """A name inside the watched module, as a name in the model (sub-model sentinels)."""
        if not self.prefix:
            return name
        return f"{self.prefix}.{name}" if name else self.prefix

    def _named(self) -> list[tuple[str, nn.Module]]:
        return [(self._qualified(n), m) for n, m in self.root.named_modules()]

    def _named_tensors(self) -> dict[int, str]:
        return {i: self._qualified(n) for i, n in named_tensors(self.root).items()}

    def _investigate_forward(self, output: Any) -> None:
        step = self._step_of(self.model_id)
        inputs = tensors_in((self._args, self._kwargs))
        if not all_finite(inputs):
            if any(s is not self and s._reported_at is not None for s in self.family):
                return  # the value came from a sub-model of this model that already stopped on it
            counts = describe_counts(nonfinite_counts(inputs))
            self._fire(
                HookEvent(self.model_id, self._qualified(""), self.root, "forward_pre", inputs=self._args, step=step),
                f"NaN/Inf came in through the inputs of the model ({counts})",
                ORIGIN_INPUTS,
            )
            return
        probe = _ForwardProbe(self._named())
        ops = OpTracer(self._named_tensors())
        with self._replaying(), torch.set_grad_enabled(self._grad_enabled):
            probe.install()
            try:
                with ops:
                    self.root(*self._args, **self._kwargs)
            finally:
                probe.remove()
        found = probe.found
        if found is None:
            outs = tensors_in(output)
            self._fire(
                HookEvent(
                    self.model_id,
                    self._qualified(""),
                    self.root,
                    "forward",
                    inputs=self._args,
                    output=output,
                    step=step,
                ),
                f"NaN/Inf in the model output ({describe_counts(nonfinite_counts(outs))}); "
                "the replay of the step did not reproduce it (nondeterministic op or state "
                "outside the model)",
                None,
            )
            return
        found.event.step = step
        self._fire_found(found.at_op(ops.found, self._clean_before))

    def _investigate_backward(self) -> None:
        step = self._step_of(self.model_id)
        params = list(self.root.parameters())
        saved = [p.grad for p in params]
        for p in params:
            p.grad = None
        probe = _BackwardProbe(self._named())
        ops = OpTracer(self._named_tensors(), record_nodes=True)
        nodes = NodeWatch(ops.nodes)
        try:
            with self._replaying(), torch.enable_grad():
                probe.install()
                try:
                    with ops:
                        out = self.root(*self._args, **self._kwargs)
                    outs = [t for t in tensors_in(out) if t.requires_grad]
                    pairs = [(o, g) for o, g in zip(outs, self._root_grads) if g is not None]
                    if pairs:
                        nodes.install()
                        torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
                finally:
                    probe.remove()
                    nodes.remove()
        finally:
            for p, g in zip(params, saved):
                p.grad = g
        if probe.found is None:
            self._report_param_grads("the replay of the step did not reproduce it")
            return
        probe.found.event.step = step
        self._fire_found(probe.found.at_op(nodes.found, self._clean_before))

    def _fire_found(self, found: _Found) -> None:
        # The probe recorded the culprit while the replay ran; the stop happens here, after
        # the replay, so the replay never runs with the debugger holding it half-way.
        self._fire(found.event, found.reason, found.origin)

    def _report_param_grads(self, why: str) -> None:
        bad = [(name, p) for name, p in self.root.named_parameters() if p.grad is not None and not all_finite([p.grad])]
        step = self._step_of(self.model_id)
        if not bad:
            root_grads = [g for g in self._root_grads if g is not None]
            self._fire(
                HookEvent(
                    self.model_id, self._qualified(""), self.root, "backward", grad_output=tuple(root_grads), step=step
                ),
                "NaN/Inf in the gradient reaching the model output: it came in from the loss",
                ORIGIN_LOSS,
            )
            return
        # Backward runs last layer first: the last parameter registered is the closest guess.
        name, param = bad[-1]
        layer = name.rpartition(".")[0]
        module = self.root.get_submodule(layer) if layer else self.root
        names = ", ".join(self._qualified(n) for n, _ in bad[:5]) + (" ..." if len(bad) > 5 else "")
        self._fire(
            HookEvent(
                self.model_id,
                self._qualified(layer),
                module,
                "param_grad",
                param_name=name.rpartition(".")[2],
                grad=param.grad,
                step=step,
                extra={"param": param},
            ),
            f"NaN/Inf in the gradients of {names} ({why})",
            None,
        )

    def _error(self, what: str, exc: Exception) -> None:
        log.debug("hookscope: nonfinite %s failed", what, exc_info=True)
        self._notice(
            "warning",
            f"break on NaN/Inf: {what} failed on model {self.model_id}: {type(exc).__name__}: {exc}"[:500],
            "nonfiniteError",
        )


def _starting_call(root: nn.Module) -> tuple[tuple, dict[str, Any]] | None:
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


def _running(module: nn.Module) -> bool:
    """Whether ``module``'s forward is running on this thread (its sentinel may have missed its start)."""
    return any(m is module for m, _ in module_calls(sys._getframe(1)))


class _Found:
    __slots__ = ("event", "reason", "origin")

    def __init__(self, event: HookEvent, reason: str, origin: str | None) -> None:
        self.event, self.reason, self.origin = event, reason, origin

    def at_op(self, op: OpOrigin | None, clean_before: bool) -> _Found:
        """The layer-level finding with the op and line the replay's tracer saw (when it saw one)."""
        if op is not None:
            self.reason += f". {op.describe()}"
            if op.tensor_name is not None and clean_before:
                self.reason += (
                    "; the step before was clean, so it was written since "
                    "(by the optimizer step, or code outside autograd)"
                )
            self.event.extra["nan_origin"] = op
        return self


class _ForwardProbe:
    """Replay-only forward hooks on every module: the first non-finite value, in execution order."""

    def __init__(self, named: list[tuple[str, nn.Module]]) -> None:
        self._named = named
        self._handles: list[Any] = []
        self.found: _Found | None = None
        self._parents = {name: name.rpartition(".")[0] for name, _ in named}

    def install(self) -> None:
        for name, module in self._named:
            self._handles.append(module.register_forward_pre_hook(self._pre(name)))
            self._handles.append(module.register_forward_hook(self._post(name)))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _pre(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple) -> None:
            if self.found is not None:
                return
            tensors = tensors_in(args)
            if all_finite(tensors):
                return
            parent = self._parents.get(name, "") or "the model"
            counts = describe_counts(nonfinite_counts(tensors))
            self.found = _Found(
                HookEvent("", name, module, "forward_pre", inputs=args),
                f"NaN/Inf first produced by code in {parent}'s forward between layers, "
                f"first seen in the inputs of layer {name} ({counts})",
                ORIGIN_INPUTS,
            )

        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            if self.found is not None:
                return
            tensors = tensors_in(output)
            if all_finite(tensors):
                return
            counts = describe_counts(nonfinite_counts(tensors))
            where = f"layer {name} (forward)" if name else f"{type(module).__name__}.forward (the model itself)"
            self.found = _Found(
                HookEvent("", name, module, "forward", inputs=args, output=output),
                f"NaN/Inf first produced in {where}: {counts}",
                ORIGIN_BORN,
            )

        return hook


class _TensorRoles:
    __slots__ = ("tensor", "inputs_of", "outputs_of")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        self.inputs_of: list[tuple[str, nn.Module, int]] = []
        self.outputs_of: list[tuple[str, nn.Module, int]] = []


class _BackwardProbe:
    """Replay-only hooks: tensor hooks on every layer's inputs, outputs and parameters.

    One hook per tensor version (``(id, _version)``), knowing every role the
    tensor plays: the output of one layer is usually the input of the next,
    and a bad gradient there was born in the layer that consumed it.
    """

    def __init__(self, named: list[tuple[str, nn.Module]]) -> None:
        self._named = named
        self._handles: list[Any] = []
        self._roles: dict[tuple[int, int], _TensorRoles] = {}
        self._out_grads: dict[str, list[Any]] = {}
        self.found: _Found | None = None

    def install(self) -> None:
        for name, module in self._named:
            self._handles.append(module.register_forward_pre_hook(self._pre(name)))
            self._handles.append(module.register_forward_hook(self._post(name)))
            for pname, param in module.named_parameters(recurse=False):
                if param.requires_grad:
                    self._handles.append(param.register_hook(self._param_hook(name, module, pname, param)))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _roles_of(self, tensor: torch.Tensor) -> _TensorRoles:
        key = (id(tensor), tensor._version)
        roles = self._roles.get(key)
        if roles is None:
            roles = self._roles[key] = _TensorRoles(tensor)
            # kept with the module hooks: on a leaf (the model's input, a parameter passed to a
            # layer) the hook would outlive the replay
            self._handles.append(tensor.register_hook(self._tensor_hook(roles)))
        return roles

    def _pre(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple) -> None:
            for i, arg in enumerate(args):
                if isinstance(arg, torch.Tensor) and arg.requires_grad:
                    self._roles_of(arg).inputs_of.append((name, module, i))

        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            outs = tensors_in(output)
            self._out_grads[name] = [None] * len(outs)
            for j, tensor in enumerate(outs):
                if tensor.requires_grad:
                    self._roles_of(tensor).outputs_of.append((name, module, j))

        return hook

    def _tensor_hook(self, roles: _TensorRoles) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            for name, _, j in roles.outputs_of:
                slots = self._out_grads.get(name)
                if slots is not None and j < len(slots):
                    slots[j] = grad
            if self.found is not None or all_finite([grad]):
                return
            counts = describe_counts(nonfinite_counts([grad]))
            if roles.inputs_of:
                name, module, i = max(roles.inputs_of, key=lambda r: _depth(r[0]))
                grad_input: list[Any] = [None] * (i + 1)
                grad_input[i] = grad
                self.found = _Found(
                    HookEvent(
                        "",
                        name,
                        module,
                        "backward",
                        grad_input=tuple(grad_input),
                        grad_output=tuple(self._out_grads.get(name, ())),
                    ),
                    f"NaN/Inf first produced in layer {name or 'the model'} (backward): {counts} in the "
                    "gradient of its input",
                    ORIGIN_BORN,
                )
                return
            name, module, j = max(roles.outputs_of, key=lambda r: _depth(r[0]))
            if any(not n for n, _, _ in roles.outputs_of):
                name, module = "", next(m for n, m, _ in roles.outputs_of if not n)
                reason, origin = (
                    f"NaN/Inf in the gradient reaching the model output ({counts}): it came in from the loss",
                    ORIGIN_LOSS,
                )
            else:
                parent = name.rpartition(".")[0] or "the model"
                reason, origin = (
                    (
                        f"NaN/Inf in the gradient reaching the output of layer {name} ({counts}): "
                        f"first produced by code after it in {parent}'s forward"
                    ),
                    ORIGIN_INPUTS,
                )
            self.found = _Found(
                HookEvent("", name, module, "backward", grad_output=tuple(self._out_grads.get(name, ()))),
                reason,
                origin,
            )

        return hook

    def _param_hook(
        self, name: str, module: nn.Module, pname: str, param: torch.Tensor
    ) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            if self.found is not None or all_finite([grad]):
                return
            counts = describe_counts(nonfinite_counts([grad]))
            self.found = _Found(
                HookEvent("", name, module, "param_grad", param_name=pname, grad=grad, extra={"param": param}),
                f"NaN/Inf first produced in layer {name or 'the model'} (backward): {counts} "
                f"in the gradient of {pname}",
                ORIGIN_BORN,
            )

        return hook


_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)


class _EntryPoints:
    """Sub-models the program calls directly: a GAN loop's ``pair.disc(pair.gen(x))``, CLIP's
    ``model.visual``, Hugging Face's ``get_*_features``. The root's own forward never runs, so the
    root's sentinel would see nothing. A forward-pre hook on each direct child of the root (one
    cheap call per child call) notices a call made while the root's forward is not running and
    gives that child a sentinel of its own, which starts with that very call; the cheap hook then
    goes. While the root's forward runs, the root's sentinel covers the child and the child's
    stays quiet, so a child called both ways is checked once per call, at the same cost.
    """

    def __init__(self, parent: RootSentinel, promote: Callable[[str, nn.Module], RootSentinel]) -> None:
        self._parent = parent
        self._promote = promote
        self._handles: dict[str, Any] = {}
        self.sentinels: dict[str, RootSentinel] = {}
        for name, child in parent.root.named_children():
            if not isinstance(child, _CONTAINERS):
                self._handles[name] = child.register_forward_pre_hook(partial(self._called, name))

    @property
    def hook_count(self) -> int:
        return len(self._handles) + sum(len(s.handles) for s in self.sentinels.values())

    def _called(self, name: str, module: nn.Module, args: tuple) -> None:
        if self._parent._call_open or REPLAY.depth or not self._parent.active or _running(self._parent.root):
            return  # inside the root's forward: the root's sentinel covers it
        handle = self._handles.pop(name, None)
        if handle is None:
            return
        handle.remove()
        try:
            self.sentinels[name] = self._promote(name, module)  # its install() takes this call's snapshot
        except Exception as exc:
            self._parent._error(f"watching {name} called directly", exc)

    def remove(self) -> int:
        removed = len(self._handles) + sum(s.remove() for s in self.sentinels.values())
        for handle in self._handles.values():
            handle.remove()
        self._handles, self.sentinels = {}, {}
        return removed

    def check_gradients_unchecked(self) -> None:
        for sentinel in list(self.sentinels.values()):
            if sentinel.gradients_unchecked:
                sentinel.check_gradients(replay=False)


class NonFiniteWatch:
    """Break on NaN/Inf across every model of the engine."""

    def __init__(self, fire: FireFn, notice: NoticeFn, step_of: Callable[[str], int]) -> None:
        self._fire = fire
        self._notice = notice
        self._step_of = step_of
        self.sentinels: dict[str, RootSentinel] = {}
        self._entries: dict[str, _EntryPoints] = {}
        self._optimizer_handle: Any = None
        self.checks = Checks()
        """Shared by every sentinel: the engine switches NaN/Inf and the thresholds here."""

    @property
    def enabled(self) -> bool:
        return self._optimizer_handle is not None or bool(self.sentinels)

    @property
    def hook_count(self) -> int:
        return (
            sum(len(s.handles) for s in self.sentinels.values())
            + sum(e.hook_count for e in self._entries.values())
            + (self._optimizer_handle is not None)
        )

    def add(self, model_id: str, root: nn.Module) -> None:
        if model_id in self.sentinels:
            return
        sentinel = RootSentinel(model_id, root, self._fire_for(model_id), self._notice, self._step_of)
        sentinel.checks = self.checks
        sentinel.install()
        self.sentinels[model_id] = sentinel

        def promote(name: str, child: nn.Module) -> RootSentinel:
            watch = RootSentinel(
                model_id, child, self._fire_for(model_id), self._notice, self._step_of, prefix=name, parent=sentinel
            )
            watch.install()
            return watch

        self._entries[model_id] = _EntryPoints(sentinel, promote)
        if self._optimizer_handle is None:
            self._optimizer_handle = register_optimizer_step_pre_hook(self._optimizer_pre)

    def remove_model(self, model_id: str) -> int:
        sentinel = self.sentinels.pop(model_id, None)
        removed = sentinel.remove() if sentinel is not None else 0
        entries = self._entries.pop(model_id, None)
        removed += entries.remove() if entries is not None else 0
        if not self.sentinels and self._optimizer_handle is not None:
            self._optimizer_handle.remove()
            self._optimizer_handle = None
            removed += 1
        return removed

    def clear(self) -> int:
        return sum(self.remove_model(m) for m in list(self.sentinels)) + self._drop_optimizer_hook()

    def _drop_optimizer_hook(self) -> int:
        if self._optimizer_handle is None:
            return 0
        self._optimizer_handle.remove()
        self._optimizer_handle = None
        return 1

    def _fire_for(self, model_id: str) -> FireFn:
        def fire(event: HookEvent, reason: str, origin: str | None) -> None:
            event.model = model_id
            self._fire(event, reason, origin)

        return fire

    def _optimizer_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """Check the gradients the end-of-backward callback did not (the loss bypassed the output)."""
        if REPLAY.depth:
            return
        for sentinel in list(self.sentinels.values()):
            if sentinel.gradients_unchecked:  # the end-of-backward check usually ran: no call
                sentinel.check_gradients(replay=False)
        for entries in list(self._entries.values()):
            entries.check_gradients_unchecked()
