"""Value conditions on many layers, checked once per step, then an exact replay of a step that hit.

Why not check every call
    A value condition (NaN/Inf, abs-max above, gradient norm above or below)
    on every layer through the exact path costs a Python hook chain per layer
    (``GradTap``'s pre/post hooks and tensor hooks, the cheap reject, a host sync
    per call, the kept output): 35-50 µs per layer per step under a debugger,
    1.3-2.7x a training step. Hits are rare, so, like break on NaN/Inf
    (nonfinite.py), the steady state only asks "did any call of this step
    hold?" and the exact answer, "which call first, with what values?", comes
    from replaying that one step.

Steady state (per watched layer, then once per step per model)
    * The layer's forward hook keeps a reference to each tensor the condition
      looks at (the output; the inputs too for NaN/Inf) and hooks the output's
      gradient when the backward phase is watched; a forward-pre hook hooks the
      inputs' gradients (before the layer may change them in place, as GradTap
      does). Those tensor hooks keep a reference to each gradient. No value is
      computed per call: every ``FLUSH_COUNT`` tensors (or ``FLUSH_BYTES``) one
      ``_foreach_norm`` (the inf-norm for abs-max and NaN/Inf, which carries
      NaN and Inf and cannot overflow; the 2-norm for gradient norms) reduces
      them on their device, so memory stays bounded and nothing syncs.
    * At the end of the root's forward (its forward hook) the forward values,
      and at the end of the backward (a callback queued by the first gradient
      hook) the backward values, are reduced to one number per breakpoint:
      one host sync. The root's forward-pre keeps what a replay needs
      (``step_snapshot``): inputs by reference, RNG state, a copy of the buffers.
    * The per-call test is a superset of the exact one: the same value, compared
      in float64 (gradient norms with a relative margin of ``NORM_MARGIN`` for
      the fused kernel's rounding), NaN counted as a possible hit, a call of k
      outputs tested per output against the threshold divided by sqrt(k).
      Tensors of an unusual kind (integers, sparse, empty) are decided at once
      with the exact path's own test.

On a possible hit: exact replay
    The step is replayed from the root's snapshot (forward; for a backward value
    the forward and then the backward from the root output with the gradients it
    received) with the breakpoint's exact hooks installed for that replay only.
    They stop in the first call whose condition holds, with the same locals,
    reason and stop location as the exact path (the stop frame is built inside
    the replay's hook); the debugger pauses inside the replay, which then runs to
    its end, and the step's state is put back. The replay's own values are
    checked too: when they say "no hit" as well, the suspicion was a rounding
    margin or a NaN the exact test ignores; when they differ (the step is not
    reproducible: state outside the model, a nondeterministic kernel, a loss that
    does not flow through the model's output) a notice says so.

Kept on the exact path
    Python-expression conditions, hit counts, breakpoints on fewer than
    ``DEFER_MIN_LAYERS`` layers, the ``param_grad`` phase, and any call of a
    watched layer made outside its root's forward (the program calling
    ``model.encoder`` directly): those calls run the exact test (and GradTap)
    inline, since no snapshot exists to replay them from.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks

from hookscope.debugger.stop import BreakpointHit
from hookscope.hooks.conditions import REPLAY, Condition, HookEvent
from hookscope.hooks.copy_safety import is_hookscope_hook
from hookscope.hooks.leaf_hooks import LeafHooks, hook_gradient
from hookscope.hooks.module_tensors import FLATTEN_MAX_NUMEL, STRUCTURE, ModuleTensors
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS
from hookscope.hooks.step_snapshot import CallSnapshot, state_kept
from hookscope.hooks.summaries import tensors_in

if TYPE_CHECKING:
    from hookscope.engine.breakpoints import Breakpoint, GradTap

log = logging.getLogger("hookscope")

DEFERRED_KINDS = frozenset({"nonfinite", "absmax_above", "grad_norm_above", "grad_norm_below"})
"""Conditions whose value a device computes: these can be checked once per step."""
DEFERRED_PHASES = ("forward_pre", "forward", "backward")
DEFER_MIN_LAYERS = 4
"""A value condition on this many layers or more takes the deferred path."""
FLUSH_COUNT = 64
FLUSH_BYTES = 64 * 2**20
"""Tensors referenced before their values are computed (bounds the memory held past their use)."""
NORM_MARGIN = 1e-5
"""Relative margin on gradient-norm thresholds: the fused norm may round differently from the exact one."""
MAX_PENDING_CALLS = 4
"""Root calls kept for one backward (two forwards, one loss); older ones are not replayed."""

_STRIDED = torch.strided
_INF = math.inf


def deferrable(condition: Condition, hit_count: int | None, every: int | None, layers: int) -> bool:
    """Whether a breakpoint's value condition is checked once per step (its deferrable phases)."""
    return condition.kind in DEFERRED_KINDS and hit_count is None and every is None and layers >= DEFER_MIN_LAYERS


class _Values:
    """The tensors one breakpoint looks at in one phase of a step, and their values once computed.

    A reference is kept with the tensor's version: a tensor changed in place before its value is
    computed (an ``nn.ReLU(inplace=True)`` after the watched layer) no longer holds the value the
    call produced, so the step counts as a possible hit (the replay decides) and the layer that
    recorded it computes its value at once from then on (``_LayerHooks.at_once``).
    """

    __slots__ = (
        "refs",
        "versions",
        "owners",
        "bytes",
        "scalars",
        "lows",
        "vectors",
        "flag",
        "uncertain",
        "doubtful",
        "condition",
        "kind",
        "phase",
        "recorder",
    )

    def __init__(self, condition: Condition, phase: str, recorder: _Recorder) -> None:
        self.condition = condition
        self.kind = condition.kind
        self.phase = phase
        self.recorder = recorder
        self.doubtful = False
        """The last verdict was a possible hit only because a tensor changed in place (no notice if the
        replay finds nothing)."""
        self.clear()

    def clear(self) -> None:
        self.refs: list[torch.Tensor] = []
        self.versions: list[int] = []
        self.owners: list[Any] = []
        """The ``_LayerHooks`` that recorded each reference (None: a gradient hook)."""
        self.bytes = 0
        self.scalars: list[torch.Tensor] = []
        """0-d values: abs-max highs (larger is worse), NaN/Inf sums."""
        self.lows: list[torch.Tensor] = []
        """0-d lows of abs-max (the negated smallest value is an abs-max too)."""
        self.vectors: list[torch.Tensor] = []
        """Values of a whole flush: norms (larger or, for 'below', smaller is worse), GPU inf-norms."""
        self.flag = False
        """A tensor decided at once (an unusual kind) may hit."""
        self.uncertain = False
        """A referenced tensor changed in place before its value was computed."""

    def odd(self, tensor: Any) -> None:
        """A tensor the fused reduction does not take: the exact path's own test decides now."""
        phase = self.phase
        produced, received = (tensor, tensor) if phase == "backward" else (tensor, None)
        if not self.condition.rejects(phase, produced, received):
            self.flag = True

    def now(self, tensor: torch.Tensor) -> None:
        """The value of a tensor that may change in place before the flush (abs-max, NaN/Inf), computed now."""
        enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            if self.kind == "nonfinite":
                self.scalars.append(tensor.sum(dtype=torch.float32))
            else:
                low, high = torch.aminmax(tensor)
                self.scalars.append(high)
                self.lows.append(low)
        except (RuntimeError, TypeError):
            self.odd(tensor)
        finally:
            torch._C._set_grad_enabled(enabled)

    def grad(self, grad: torch.Tensor) -> None:
        """Tensor hook on an input or output of a watched call: keep the gradient's reference."""
        recorder = self.recorder
        if REPLAY.depth and not recorder.replaying:
            return
        if grad.is_floating_point() and grad.layout is _STRIDED and grad.numel():
            self.refs.append(grad)
            self.versions.append(grad._version)
            self.owners.append(None)
            self.bytes += grad.nbytes
            if self.bytes > FLUSH_BYTES or len(self.refs) >= FLUSH_COUNT:
                self.flush()
        else:
            self.odd(grad)
        if not recorder.queued:  # usually the root output's hook queued it already
            recorder.queue()

    def scaled_grad(self, outputs: int, grad: torch.Tensor) -> None:
        """An output gradient of a call with several: the exact norm is over all of them (rare: at once)."""
        if REPLAY.depth and not self.recorder.replaying:
            return
        try:
            norm = float(torch.linalg.vector_norm(grad.detach(), dtype=torch.float32))
            threshold = self.condition.threshold or 0.0
            if norm != norm or norm * math.sqrt(outputs) > threshold - abs(threshold) * NORM_MARGIN:
                self.flag = True
        except Exception:  # noqa: BLE001 - the replay decides
            self.flag = True
        if not self.recorder.queued:
            self.recorder.queue()

    def flush(self) -> None:
        """Reduce the referenced tensors on their device (no sync).

        A gradient norm needs each tensor's norm (one fused ``_foreach_norm``); abs-max and NaN/Inf
        need only the step's extreme. On a GPU the inf-norm is one fused kernel for the list; on a
        CPU it is not vectorised (20x a sum on a conv activation), so there the small tensors go
        through one flattened copy (a kernel costs ~1 µs however small its tensor) and each large
        one through ``aminmax`` (abs-max: vectorised, as the exact test's) or a sum (NaN/Inf: it keeps
        any NaN/Inf; finite values that overflow it only cost a replay). A tensor referenced twice
        (a container's output is its last child's) is reduced once.
        """
        refs, versions, owners = self.refs, self.versions, self.owners
        self.refs, self.versions, self.owners, self.bytes = [], [], [], 0
        current, seen = [], set()
        for i, tensor in enumerate(refs):  # loops, not comprehensions: one frame less each under a debugger
            if tensor._version != versions[i]:
                self.uncertain = True
                if owners[i] is not None:
                    owners[i].compute_at_once()
            elif id(tensor) not in seen:
                seen.add(id(tensor))
                current.append(tensor)
        if not current:
            return
        enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            kind = self.kind
            if kind == "grad_norm_above" or kind == "grad_norm_below":
                self.vectors.append(torch.stack(torch._foreach_norm(current, 2.0, dtype=torch.float32)))
                return
            if current[0].device.type != "cpu":
                self.vectors.append(torch.stack(torch._foreach_norm(current, _INF)))
                return
            large, small = [], []
            for tensor in current:
                (small if tensor.numel() <= FLATTEN_MAX_NUMEL else large).append(tensor)
            if len(small) > 1:
                try:
                    large.append(torch._C._nn.flatten_dense_tensors(small))
                except RuntimeError:  # mixed dtypes
                    large.extend(small)
            else:
                large.extend(small)
            for tensor in large:
                if kind == "nonfinite":
                    self.scalars.append(tensor.sum(dtype=torch.float32))
                else:
                    low, high = torch.aminmax(tensor)
                    self.scalars.append(high)
                    self.lows.append(low)
        except (RuntimeError, TypeError):  # mixed devices or dtypes, float64 with a float32 norm: one at a time
            for tensor in current:
                self.odd(tensor)
        finally:
            torch._C._set_grad_enabled(enabled)

    def verdict(self) -> bool:
        """Whether some call of the step may satisfy the condition (one host sync); then starts afresh."""
        if self.refs:
            self.flush()
        scalars, lows, vectors, flag, uncertain = self.scalars, self.lows, self.vectors, self.flag, self.uncertain
        self.scalars, self.lows, self.vectors, self.flag, self.uncertain = [], [], [], False, False
        hit = flag or self._decide(scalars, lows, vectors)
        self.doubtful = uncertain and not hit
        return hit or uncertain

    def _decide(self, scalars: list[torch.Tensor], lows: list[torch.Tensor], vectors: list[torch.Tensor]) -> bool:
        kind = self.kind
        below = kind == "grad_norm_below"
        # nonfinite: a sum keeps any NaN/Inf of the values (-Inf too, which a max would hide)
        reduce = torch.sum if kind == "nonfinite" else torch.amin if below else torch.amax
        extremes = []  # each read as a Python float: the exact value, compared in float64
        try:
            if scalars:
                extremes.append(float(reduce(torch.stack(scalars))) if len(scalars) > 1 else float(scalars[0]))
            if lows:
                extremes.append(-float(torch.amin(torch.stack(lows))) if len(lows) > 1 else -float(lows[0]))
        except RuntimeError:  # values on several devices
            for value in scalars:
                extremes.append(float(value))
            for value in lows:
                extremes.append(-float(value))
        for vector in vectors:
            extremes.append(float(reduce(vector)))
        if not extremes:
            return False
        if kind == "nonfinite":
            total = 0.0
            for value in extremes:
                total += value  # NaN and Inf carry through the sum (and -Inf + Inf is NaN)
            return not math.isfinite(total)
        for value in extremes:
            if value != value:  # NaN: the exact test may or may not count it; the replay decides
                return True
        extreme = min(extremes) if below else max(extremes)
        threshold = self.condition.threshold or 0.0
        if kind == "absmax_above":
            return extreme > threshold
        margin = abs(threshold) * NORM_MARGIN
        return extreme < threshold + margin if below else extreme > threshold - margin


class _Track:
    """One deferred breakpoint on one model: its phases' values in the current step."""

    def __init__(self, bp: Breakpoint, phases: Sequence[str], recorder: _Recorder) -> None:
        condition = bp.spec.condition
        self.bp = bp
        self.recorder = recorder
        self.forward_phases = tuple(p for p in phases if p in ("forward_pre", "forward") and condition.applies_to(p))
        self.backward = "backward" in phases and condition.applies_to("backward")
        self.nonfinite = condition.kind == "nonfinite"
        self.forward = _Values(condition, "forward", recorder)
        self.backward_values = _Values(condition, "backward", recorder)
        self.leaves = LeafHooks()
        """Gradient hooks this step placed on leaf tensors (a model input that requires grad)."""


def _take(values: _Values, value: Any, owner: _LayerHooks) -> None:
    """The tensors of a value that is not one floating tensor (a tuple, an integer or empty tensor)."""
    for tensor in tensors_in(value):
        if tensor.is_floating_point() and tensor.layout is _STRIDED and tensor.numel():
            if owner.at_once:
                values.now(tensor)
            else:
                values.refs.append(tensor)
                values.versions.append(tensor._version)
                values.owners.append(owner)
                values.bytes += tensor.nbytes
        else:
            values.odd(tensor)


class _LayerHooks:
    """The steady-state hooks of one deferred breakpoint on one layer."""

    def __init__(self, track: _Track, model_id: str, name: str, module: nn.Module, owner: DeferredValues) -> None:
        self.track = track
        self.model_id = model_id
        self.name = name
        self.module = module
        self.owner = owner
        kind = track.bp.spec.condition.kind
        self.pre_values = "forward_pre" in track.forward_phases
        self.post_values = "forward" in track.forward_phases
        self.hook_inputs = track.backward and kind in ("absmax_above", "nonfinite")  # grad_input
        self.hook_outputs = track.backward and kind != "absmax_above"  # grad_output
        self.at_once = False
        """Something changed a tensor this layer recorded before its value was computed: compute now."""
        self.tap: GradTap | None = None
        """The exact backward path for calls made outside the root's forward (made at the first)."""
        self.wrapping = False
        self.fast = False
        """Wrapped, and the wrapper's written-out case applies (see ``_wrapped_forward``)."""
        self.previous: Any = None
        self.inner: Any = None
        self.forward: Any = None

    def install(self) -> list[Any]:
        if may_wrap(self.module):
            return [self._wrap()]
        handles = []
        if self.pre_values or self.hook_inputs:
            handles.append(self.module.register_forward_pre_hook(self._pre))
        if self.post_values or self.track.backward:
            handles.append(self.module.register_forward_hook(self._post))
        return handles

    # -- the layer's forward, wrapped (see ``may_wrap``) -----------------------

    def _wrap(self) -> _Unwrap:
        module = self.module
        self.previous = module.__dict__.get("forward")
        """An instance-level forward that was there (another tool's, or another breakpoint's wrapper)."""
        self.inner = module.forward
        self.wrapping = True
        self.fast = not (self.pre_values or self.track.nonfinite)
        self.forward = _wrapped_forward(self)
        module.__dict__["forward"] = self.forward
        return _Unwrap(self)

    def compute_at_once(self) -> None:
        """A tensor this layer recorded changed in place before its value was computed: compute now."""
        self.at_once = True
        self.fast = False

    def around(self, args: tuple, kwargs: dict[str, Any]) -> Any:
        """The wrapped forward's general case: what ``_pre`` and ``_post`` do, around the layer's own."""
        if not self.wrapping or torch._C._get_tracing_state():
            return self.inner(*args, **kwargs)
        module = self.module
        if self.pre_values or self.hook_inputs:
            self._pre(module, args)
        output = self.inner(*args, **kwargs)
        self._post(module, args, output)
        return output

    # Both hooks run in every call of every watched layer: attribute reads and C calls, inline.

    def _pre(self, module: nn.Module, args: tuple) -> None:
        recorder = self.track.recorder
        if REPLAY.depth and not recorder.replaying:
            return
        if not recorder.open:
            self._outside_pre(module, args)
            return
        try:
            if self.pre_values:
                values = self.track.forward
                for arg in args:
                    if (
                        type(arg) is torch.Tensor
                        and arg.is_floating_point()
                        and arg.layout is _STRIDED
                        and arg.numel()
                        and not self.at_once
                    ):
                        values.refs.append(arg)
                        values.versions.append(arg._version)
                        values.owners.append(self)
                        values.bytes += arg.nbytes
                    elif isinstance(arg, (torch.Tensor, tuple, list, dict)):
                        _take(values, arg, self)
                if values.bytes > FLUSH_BYTES or len(values.refs) >= FLUSH_COUNT:
                    values.flush()
            if self.hook_inputs and recorder.hook_grads and torch.is_grad_enabled():
                grad = self.track.backward_values.grad
                for arg in args:
                    if type(arg) is torch.Tensor and arg.requires_grad:
                        # leaf_hooks.hook_gradient's activation case written out (one traced call less
                        # per layer): the hook in the tensor's hook dict, the dict registered once
                        grad_fn = arg.grad_fn
                        if grad_fn is not None:
                            hooks = arg._backward_hooks
                            if hooks is None:
                                hooks = arg._backward_hooks = OrderedDict()
                                grad_fn._register_hook_dict(arg)
                            hooks[grad] = grad
                        else:  # a leaf: its hook is removed at the step's end
                            self.track.leaves.register(arg, grad)
        except Exception as exc:  # noqa: BLE001 - never into the user's forward
            self.owner.failed(self.track.bp, self.name, exc)

    def _post(self, module: nn.Module, args: tuple, output: Any) -> None:
        recorder = self.track.recorder
        if REPLAY.depth and not recorder.replaying:
            return
        if not recorder.open:
            self._outside_post(module, args, output)
            return
        try:
            if self.post_values:
                values = self.track.forward
                if (
                    type(output) is torch.Tensor
                    and output.is_floating_point()
                    and output.layout is _STRIDED
                    and output.numel()
                    and not self.at_once
                ):
                    values.refs.append(output)
                    values.versions.append(output._version)
                    values.owners.append(self)
                    values.bytes += output.nbytes
                else:
                    _take(values, output, self)
                if self.track.nonfinite:  # the exact test looks at the inputs too
                    for arg in args:
                        if isinstance(arg, (torch.Tensor, tuple, list, dict)):
                            _take(values, arg, self)  # (a call more: NaN/Inf is break on NaN/Inf's job)
                if values.bytes > FLUSH_BYTES or len(values.refs) >= FLUSH_COUNT:
                    values.flush()
            if self.hook_outputs and recorder.hook_grads and torch.is_grad_enabled():
                values = self.track.backward_values
                if type(output) is torch.Tensor:
                    grad_fn = output.grad_fn
                    if grad_fn is not None:  # as in _pre
                        hooks = output._backward_hooks
                        if hooks is None:
                            hooks = output._backward_hooks = OrderedDict()
                            grad_fn._register_hook_dict(output)
                        hooks[values.grad] = values.grad
                    elif output.requires_grad:
                        self.track.leaves.register(output, values.grad)
                else:
                    self._hook_outputs(values, output)
        except Exception as exc:  # noqa: BLE001 - never into the user's forward
            self.owner.failed(self.track.bp, self.name, exc)

    def _hook_outputs(self, values: _Values, output: Any) -> None:
        outs = [t for t in tensors_in(output) if t.requires_grad]
        scaled = len(outs) > 1 and self.track.bp.spec.condition.kind == "grad_norm_above"
        for tensor in outs:
            handle = hook_gradient(tensor, partial(values.scaled_grad, len(outs)) if scaled else values.grad)
            if handle is not None:
                self.track.leaves.keep(handle)

    # -- calls outside the root's forward: the exact path, inline --------------

    def _outside_pre(self, module: nn.Module, args: tuple) -> None:
        if self.hook_inputs:
            if self.tap is None:
                self.tap = self.owner.make_tap(self.track.bp, self.model_id, self.name, module)
            self.tap._pre(module, args)
        if self.pre_values:
            self.owner.exact(
                self.track.bp, HookEvent(self.model_id, self.name, module, "forward_pre", inputs=args), args, None
            )

    def _outside_post(self, module: nn.Module, args: tuple, output: Any) -> None:
        if self.track.backward and not self.hook_inputs:
            # No pre-hook (a gradient-norm condition looks at grad_output only): the tap hooks the
            # inputs now, which differs from GradTap's grad_input only for a layer that changed its
            # input in place, and only in the stop's locals.
            if self.tap is None:
                self.tap = self.owner.make_tap(self.track.bp, self.model_id, self.name, module)
            self.tap._pre(module, args)
        if self.tap is not None:
            self.tap._post(module, args, output)
        if self.post_values:
            self.owner.exact(
                self.track.bp,
                HookEvent(self.model_id, self.name, module, "forward", inputs=args, output=output),
                output,
                args,
            )


def _wrapped_forward(hooks: _LayerHooks) -> Callable[..., Any]:
    """The function set as the layer's ``forward``: the one traced call per watched layer per step.

    The usual case of ``_pre`` and ``_post`` (tensor inputs, one floating output, the root's forward
    running) is written out in it over closure variables, the fewest bytecodes a debugger makes
    dearer (~5x); anything else goes through ``hooks.around``.
    """
    inner, track, module = hooks.inner, hooks.track, hooks.module
    recorder, forward_values = track.recorder, track.forward
    grad = track.backward_values.grad  # one bound method: the same key in every hook dict it enters
    post_values, hook_inputs, hook_outputs = hooks.post_values, hooks.hook_inputs, hooks.hook_outputs
    around, tracing, grad_enabled, tensor = (
        hooks.around,
        torch._C._get_tracing_state,
        torch.is_grad_enabled,
        torch.Tensor,
    )

    def forward(*args: Any, **kwargs: Any) -> Any:
        if not hooks.fast or not recorder.open or (REPLAY.depth and not recorder.replaying) or tracing():
            return around(args, kwargs)
        try:
            if hook_inputs and recorder.hook_grads and grad_enabled():
                for arg in args:
                    if type(arg) is tensor and arg.requires_grad:
                        grad_fn = arg.grad_fn  # leaf_hooks.hook_gradient's activation case, written out
                        if grad_fn is not None:
                            dict_ = arg._backward_hooks
                            if dict_ is None:
                                dict_ = arg._backward_hooks = OrderedDict()
                                grad_fn._register_hook_dict(arg)
                            dict_[grad] = grad
                        else:  # a leaf: its hook is removed at the step's end
                            track.leaves.register(arg, grad)
        except Exception as exc:  # noqa: BLE001 - never into the user's forward
            hooks.owner.failed(track.bp, hooks.name, exc)
        output = inner(*args, **kwargs)
        if type(output) is not tensor or not output.is_floating_point() or output.layout is not _STRIDED:
            hooks._post(module, args, output)
            return output
        try:
            if post_values:
                if output.numel():
                    forward_values.refs.append(output)
                    forward_values.versions.append(output._version)
                    forward_values.owners.append(hooks)
                    forward_values.bytes += output.nbytes
                    if forward_values.bytes > FLUSH_BYTES or len(forward_values.refs) >= FLUSH_COUNT:
                        forward_values.flush()
                else:
                    forward_values.odd(output)
            if hook_outputs and recorder.hook_grads:
                grad_fn = output.grad_fn
                if grad_fn is not None:
                    dict_ = output._backward_hooks
                    if dict_ is None:
                        dict_ = output._backward_hooks = OrderedDict()
                        grad_fn._register_hook_dict(output)
                    dict_[grad] = grad
                elif output.requires_grad:
                    track.leaves.register(output, grad)
        except Exception as exc:  # noqa: BLE001 - never into the user's forward
            hooks.owner.failed(track.bp, hooks.name, exc)
        return output

    forward.__wrapped__ = inner  # type: ignore[attr-defined]  # inspect.signature shows the layer's own
    forward.previous = hooks.previous  # type: ignore[attr-defined]  # copy_safety restores it in copies
    forward.hooks = hooks  # type: ignore[attr-defined]
    return forward


class _Unwrap:
    """The handle of a wrapped forward: ``remove()`` puts back what was there."""

    def __init__(self, hooks: _LayerHooks) -> None:
        self._hooks = hooks

    def remove(self) -> None:
        hooks = self._hooks
        hooks.wrapping = hooks.fast = False
        module = hooks.module
        if module.__dict__.get("forward") is not hooks.forward:
            return  # something wrapped it since: it stays there as a plain pass-through
        previous = hooks.previous
        while getattr(previous, "hooks", None) is not None and not previous.hooks.wrapping:
            previous = previous.previous  # a wrapper under this one was removed first: skip it too
        if previous is None:
            del module.__dict__["forward"]
        else:
            module.__dict__["forward"] = previous


def may_wrap(module: nn.Module) -> bool:
    """Whether the deferred path may record a layer by wrapping its ``forward`` instead of hooking it.

    A module with any hook takes torch's slow call path: three traced calls more per layer under a
    debugger (``inner``, ``is_compiling``, ``is_scripting``) on top of the hooks themselves, most of
    what watching a stack of small layers costs. An instance-level ``forward`` is called by the fast
    path; it is Hookscope's own (left out of copies and pickles by copy_safety, removed with the
    breakpoint, signature kept through ``__wrapped__``). Not when the layer already has someone
    else's forward or forward-pre hooks (they may replace its inputs or output: the values the
    exact test sees), or runs compiled (dynamo would trace the wrapper).
    """
    if getattr(module, "_compiled_call_impl", None) is not None or type(module).__name__ == "OptimizedModule":
        return False
    for hooks in (module._forward_hooks, module._forward_pre_hooks, _global_forward_hooks, _global_forward_pre_hooks):
        for hook in hooks.values():
            if not is_hookscope_hook(hook):
                return False
    return True


class _Recorder:
    """One model root: the snapshots of its calls, the once-per-step checks and the replays."""

    def __init__(self, model_id: str, root: nn.Module, owner: DeferredValues) -> None:
        self.model_id = model_id
        self._root = weakref.ref(root)  # a model the program drops is freed
        self.owner = owner
        self.tensors = ModuleTensors(root)
        self.tracks: list[_Track] = []
        self.open = False
        """The root's forward is running (its forward-pre took a snapshot)."""
        self.replaying = False
        self.hook_grads = True
        """Off while a forward is replayed alone: its graph gets no backward."""
        self.queued = False
        self.calls: list[CallSnapshot] = []
        """Root calls since the last end-of-backward check, oldest first."""
        self._spare: list[CallSnapshot] = []
        self.leaves = LeafHooks()
        self.backward = False
        """Some breakpoint watches the backward phase (kept up to date by ``DeferredValues.add``)."""
        STRUCTURE.acquire()
        # First among the root's pre-hooks and (see last_post) last among its forward hooks, so that
        # a watched root's own layer hooks run inside the recorded call.
        self.handles = [
            root.register_forward_pre_hook(self._pre, with_kwargs=True, prepend=True),
            root.register_forward_hook(self._post, with_kwargs=True),
        ]

    def last_post(self) -> None:
        """Put the forward hook back after the layer hooks added since (the root may be a watched layer)."""
        self.handles.pop().remove()
        self.handles.append(self.root.register_forward_hook(self._post, with_kwargs=True))

    @property
    def root(self) -> nn.Module:
        root = self._root()
        if root is None:
            raise RuntimeError("the model was freed")
        return root

    def remove(self) -> int:
        for handle in self.handles:
            handle.remove()
        count = len(self.handles)
        if self.handles:
            STRUCTURE.release()
        self.handles = []
        self.leaves.remove_all()
        for track in self.tracks:
            track.leaves.remove_all()
        for call in self.calls:
            call.release()
        self.calls, self._spare, self.tracks = [], [], []
        return count

    # -- steady state ------------------------------------------------------
    # These run once per step, so loops replace comprehensions and small helpers are written out:
    # under a debugger each Python call is traced (~2.5 µs here).

    def _pre(self, module: nn.Module, args: tuple, kwargs: dict[str, Any] = CALLED_WITHOUT_KWARGS) -> None:
        if REPLAY.depth or self.open or kwargs is CALLED_WITHOUT_KWARGS:
            return
        try:
            calls = self.calls
            if len(calls) >= MAX_PENDING_CALLS:
                self._spare.append(_released(calls.pop(0)))
            call = self._spare.pop() if self._spare else CallSnapshot()
            tensors = self.tensors
            call.take(args, kwargs, tensors.buffers() if tensors.bufferless_at != tensors.structure.generation else ())
            calls.append(call)
            self.open = True
        except Exception as exc:  # noqa: BLE001
            self.owner.failed(None, "", exc)

    def _post(
        self, module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any = CALLED_WITHOUT_KWARGS
    ) -> None:
        if REPLAY.depth or not self.open or output is CALLED_WITHOUT_KWARGS:
            return
        self.open = False
        if not self.calls:
            return
        call = self.calls[-1]
        try:
            hits = None
            for track in self.tracks:
                if track.forward_phases and track.forward.verdict():
                    hits = (hits or []) + [track]
            if hits:
                self._replay_forward(call, hits)
            if call.grad_enabled and self.backward:
                grads = call.root_grads
                for tensor in [output] if type(output) is torch.Tensor else tensors_in(output):
                    if tensor.requires_grad:
                        grads.append(None)
                        handle = hook_gradient(tensor, partial(self._root_grad, call, len(grads) - 1))
                        if handle is not None:  # the model returned a leaf: removed at the step's end
                            self.leaves.keep(handle)
            elif self.calls[-1] is call:  # no backward will replay it
                self._spare.append(_released(self.calls.pop()))
        except BreakpointHit:
            raise  # the user chose 'raise'
        except Exception as exc:
            self.owner.failed(None, "", exc)

    def _root_grad(self, call: CallSnapshot, j: int, grad: torch.Tensor) -> None:
        if REPLAY.depth or j >= len(call.root_grads):
            return  # a replay's, or a call released since
        call.root_grads[j] = grad
        if not self.queued:
            self.queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)

    def queue(self) -> None:
        self.queued = True
        torch.autograd.Variable._execution_engine.queue_callback(self._after_backward)

    def _after_backward(self) -> None:
        """End of the backward: check the step's backward values (one sync); replay it on a possible hit."""
        self.queued = False
        if self.replaying:
            return  # the replay's own backward: its values are read by the replay
        calls, self.calls = self.calls, []
        try:
            hits = None
            for track in self.tracks:
                if track.backward and track.backward_values.verdict():
                    hits = (hits or []) + [track]
                if track.leaves.handles:
                    track.leaves.remove_all()
            if self.leaves.handles:
                self.leaves.remove_all()
            if hits:
                replayable = [c for c in calls if any(g is not None for g in c.root_grads)]
                if replayable:
                    self._replay_backward(replayable, hits)
                else:
                    self._not_replayed(
                        hits, "the loss did not flow through the model's output, so the step cannot be replayed"
                    )
        except BreakpointHit:
            raise  # the user chose 'raise'
        except Exception as exc:
            self.owner.failed(None, "", exc)
        finally:
            for call in calls:
                self._spare.append(_released(call))

    # -- replays -------------------------------------------------------------

    def _replay_forward(self, call: CallSnapshot, tracks: list[_Track]) -> None:
        hits_before = _hits(tracks)
        sure = [t for t in tracks if not t.forward.doubtful]
        buffers = self.tensors.buffers()
        self.hook_grads = False
        try:
            with self._replaying(tracks, ("forward_pre", "forward"), buffers, call.cuda_rng is not None):
                call.apply(buffers)
                with torch.set_grad_enabled(call.grad_enabled):
                    self.root(*call.args, **call.kwargs)
        finally:
            self.hook_grads = True
        if _hits(tracks) == hits_before:
            self._check_reproduced([t for t in sure if not t.forward.verdict()], "forward")
        for track in self.tracks:
            track.forward.clear()

    def _replay_backward(self, calls: list[CallSnapshot], tracks: list[_Track]) -> None:
        hits_before = _hits(tracks)
        sure = [t for t in tracks if not t.backward_values.doubtful]
        params = self.tensors.parameters()
        saved = [p.grad for p in params]
        for p in params:
            p.grad = None  # the replay must not add to the step's gradients
        buffers = self.tensors.buffers()
        try:
            with self._replaying(tracks, ("backward",), buffers, any(c.cuda_rng is not None for c in calls)):
                outs: list[torch.Tensor] = []
                grads: list[torch.Tensor] = []
                for call in calls:
                    call.apply(buffers)
                    with torch.enable_grad():
                        out = self.root(*call.args, **call.kwargs)
                    tensors = [t for t in tensors_in(out) if t.requires_grad]
                    for tensor, grad in zip(tensors, call.root_grads):
                        if grad is not None:
                            outs.append(tensor)
                            grads.append(grad)
                if outs:
                    torch.autograd.backward(outs, grads)
                replayed = [t for t in tracks if t.backward_values.verdict()]
        finally:
            for p, g in zip(params, saved):
                p.grad = g
            for track in self.tracks:
                track.forward.clear()
                track.backward_values.clear()
                track.leaves.remove_all()
        if _hits(tracks) == hits_before:
            self._check_reproduced([t for t in sure if t not in replayed], "backward")

    def _replaying(
        self, tracks: list[_Track], phases: tuple[str, ...], buffers: list[torch.Tensor], cuda: bool
    ) -> AbstractContextManager[None]:
        return _Replay(self, tracks, phases, buffers, cuda)

    def _check_reproduced(self, lost: list[_Track], phase: str) -> None:
        """After a replay where no call hit: a breakpoint whose replayed values no longer may hit was lost."""
        if lost:
            self._not_replayed(
                lost,
                "the replay of the step did not reproduce the values (state outside the "
                "model, or a nondeterministic kernel)",
            )

    def _not_replayed(self, tracks: list[_Track], why: str) -> None:
        for track in tracks:
            self.owner.notice(
                "warning",
                f"breakpoint {track.bp.spec.id}: a call in step "
                f"{self.owner.step_of(self.model_id)} of model {self.model_id} may satisfy "
                f"{_describe(track.bp.spec.condition)}, but {why}; set it on fewer than "
                f"{DEFER_MIN_LAYERS} layers for the exact per-call check",
                "deferredNotReplayed",
            )


def _released(call: CallSnapshot) -> CallSnapshot:
    call.release()
    return call


class _Replay:
    """The replay's frame: state kept, Hookscope's other hooks quiet, the breakpoints' exact hooks on."""

    def __init__(
        self,
        recorder: _Recorder,
        tracks: list[_Track],
        phases: tuple[str, ...],
        buffers: list[torch.Tensor],
        cuda: bool,
    ) -> None:
        self.recorder, self.tracks, self.phases = recorder, tracks, phases
        self.kept = state_kept(buffers, cuda)
        self.exact: list[Any] = []
        self.outputs: AbstractContextManager[None] | None = None

    def __enter__(self) -> None:
        recorder = self.recorder
        self.kept.__enter__()
        REPLAY.depth += 1
        recorder.replaying = recorder.open = True
        for track in recorder.tracks:
            track.forward.clear()
            track.backward_values.clear()
        try:
            owner = recorder.owner
            for track in self.tracks:
                track.bp.replaying = True
                self.exact.extend(owner.exact_hooks(track.bp, recorder.model_id, self.phases))
            self.outputs = owner.keep_outputs([(recorder.model_id, t.bp) for t in self.tracks])
            self.outputs.__enter__()
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> None:
        recorder = self.recorder
        try:
            if self.outputs is not None:
                self.outputs.__exit__(None, None, None)
            for closer in self.exact:
                closer()
            for track in self.tracks:
                track.bp.replaying = False
        finally:
            recorder.replaying = recorder.open = False
            REPLAY.depth -= 1
            self.kept.__exit__(None, None, None)


def _hits(tracks: list[_Track]) -> int:
    return sum(t.bp.counter.hits for t in tracks)


def _describe(condition: Condition) -> str:
    if condition.kind == "nonfinite":
        return "NaN/Inf"
    what = {"absmax_above": "abs-max >", "grad_norm_above": "gradient norm >", "grad_norm_below": "gradient norm <"}[
        condition.kind
    ]
    return f"{what} {condition.threshold:g}"


ExactFn = Callable[["Breakpoint", HookEvent, Any, Any], None]
ExactHooksFn = Callable[["Breakpoint", str, tuple[str, ...]], list[Callable[[], Any]]]
TapFn = Callable[["Breakpoint", str, str, nn.Module], "GradTap"]
KeepOutputsFn = Callable[[list[tuple[str, "Breakpoint"]]], AbstractContextManager[None]]


@dataclass
class DeferredHooks:
    """What the deferred path needs from the exact one (LayerBreakpoints supplies it)."""

    exact: ExactFn
    """Run the exact test and fire for one call (``produced``, ``received`` as ``Condition.rejects`` takes them)."""
    exact_hooks: ExactHooksFn
    """Install a breakpoint's exact hooks for some phases on one model's layers; returns their removers."""
    make_tap: TapFn
    notice: Callable[[str, str, str], None]
    step_of: Callable[[str], int]
    keep_outputs: KeepOutputsFn = field(default=lambda entries: _nothing())


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _nothing() -> AbstractContextManager[None]:
    return _Nothing()


class DeferredValues:
    """Every deferred breakpoint of one process, by model."""

    def __init__(self, hooks: DeferredHooks) -> None:
        self._hooks = hooks
        self.recorders: dict[str, _Recorder] = {}
        self._reported: set[str] = set()

    @property
    def hook_count(self) -> int:
        return sum(len(r.handles) for r in self.recorders.values())

    def add(
        self, bp: Breakpoint, phases: Sequence[str], model_id: str, root: nn.Module, layers: list[tuple[str, nn.Module]]
    ) -> None:
        """Watch ``layers`` of one model for ``bp`` (its hooks go into ``bp.handles``)."""
        recorder = self.recorders.get(model_id)
        if recorder is None:
            recorder = self.recorders[model_id] = _Recorder(model_id, root, self)
        track = _Track(bp, phases, recorder)
        recorder.tracks.append(track)
        recorder.backward = recorder.backward or track.backward
        for name, module in layers:
            bp.handles.extend(_LayerHooks(track, model_id, name, module, self).install())
        bp.closers.append(track.leaves.remove_all)
        recorder.last_post()

    def clear(self) -> int:
        removed = sum(r.remove() for r in self.recorders.values())
        self.recorders = {}
        self._reported = set()
        return removed

    # -- what the layers and recorders call -------------------------------------

    def exact(self, bp: Breakpoint, event: HookEvent, produced: Any, received: Any) -> None:
        self._hooks.exact(bp, event, produced, received)

    def exact_hooks(self, bp: Breakpoint, model_id: str, phases: tuple[str, ...]) -> list[Callable[[], Any]]:
        return self._hooks.exact_hooks(bp, model_id, phases)

    def make_tap(self, bp: Breakpoint, model_id: str, name: str, module: nn.Module) -> GradTap:
        tap = self._hooks.make_tap(bp, model_id, name, module)
        bp.closers.append(tap.close)
        return tap

    def keep_outputs(self, entries: list[tuple[str, Breakpoint]]) -> AbstractContextManager[None]:
        return self._hooks.keep_outputs(entries)

    def notice(self, level: str, message: str, code: str) -> None:
        self._hooks.notice(level, message[:500], code)

    def step_of(self, model_id: str) -> int:
        return self._hooks.step_of(model_id)

    def failed(self, bp: Breakpoint | None, layer: str, exc: Exception) -> None:
        """A deferred hook failed: said once per distinct error, never raised into training."""
        text = f"{type(exc).__name__}: {exc}"
        where = f"breakpoint {bp.spec.id} on {layer}" if bp is not None else "a breakpoint's per-step check"
        key = f"{where}: {text}"
        log.debug("hookscope: deferred check failed: %s", key, exc_info=True)
        if key in self._reported or len(self._reported) > 16:
            return
        self._reported.add(key)
        self.notice("warning", key, "conditionError")
