"""The values one deferred breakpoint looks at in one phase of a step: referenced, reduced on their device, one verdict.

Nothing syncs per call: the layer hooks (``deferred_layers.py``) keep a reference to each tensor,
every ``FLUSH_COUNT`` tensors (or ``FLUSH_BYTES``) one fused reduction runs on the device, and at
the end of the phase ``verdict`` reads the phase's values in one transfer (one host sync). A large
CPU tensor is reduced as it is recorded, while it is in cache (``PROMPT_MIN_NUMEL``), and so is every
CPU tensor of a phase that has few (``FEW_REDUCTIONS``), its value written into a preallocated slot.
The per-call test is a superset of the exact one: the same value, compared in float64
(gradient norms with a relative margin of ``NORM_MARGIN`` for the fused kernel's rounding), NaN
counted as a possible hit, a call of k outputs tested per output against the threshold divided
by sqrt(k); tensors of an unusual kind (integers, sparse, empty) are decided at once with the
exact path's own test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch

from hookscope.hooks.conditions import REPLAY, Condition
from hookscope.hooks.leaf_hooks import LeafHooks
from hookscope.hooks.module_tensors import FLATTEN_MAX_NUMEL

if TYPE_CHECKING:
    from hookscope.engine.breakpoints import Breakpoint
    from hookscope.engine.replay.deferred_recorder import Recorder

FLUSH_COUNT = 64
FLUSH_BYTES = 64 * 2**20
"""Tensors referenced before their values are computed (bounds the memory held past their use)."""
PROMPT_MIN_NUMEL = FLATTEN_MAX_NUMEL
"""A CPU tensor larger than this is reduced when it is recorded, while it is still in cache, not at
the flush. Measured here (one thread, the bench's CNN): reducing the step's input gradients at the
end of the backward cost 18% of the step, reducing each as its hook ran 1%. Smaller tensors still
wait for the flush's one flattened copy (a kernel per small tensor costs more than reading it cold).
On a GPU everything waits for the flush: its kernels run asynchronously and fuse over the list."""
FEW_REDUCTIONS = 32
"""A phase that reduced at most this many tensors in its last step reduces its small CPU tensors at
once too (``StepValues.prompt_min``): a flush of a few small tensors, cold by then, cost ~25 µs on the
bench's transformer, where reducing each as it is recorded costs ~2 µs. Many small tensors (a stack of
tiny layers) still go through the flush's one flattened copy."""
COLLECT_MAX_BYTES = 2**20
"""A backward whose hooked gradients were CPU tensors of at most this much in all in its last step
collects the next step's through a C-level hook (``list.append``: no Python frame per gradient, ~2.5 µs
each under a debugger, and no hook body) and reduces them at its end, while they are still in cache
(one core's L2 here). Measured here under debugpy 3.11, configurations alternating: the transformer's
0.8 MB, a value condition on every layer 1.180x -> 1.164x; the GPT's 3.5 MB, no gain under the
debugger and 2% slower without one (read cold). Larger ones, and any on a GPU (whose memory the
Python hook's flushes bound), keep the Python hook."""
SLOTS = 64
"""Values a phase writes into its preallocated buffer (``StepValues.slots``) in the first step; a step
that needs more makes it larger for the next (the overflow goes through a list meanwhile)."""
NORM_MARGIN = 1e-5
"""Relative margin on gradient-norm thresholds: the fused norm may round differently from the exact one."""

_STRIDED = torch.strided
_F32 = torch.float32
_INF = math.inf
_grad_enabled, _set_grad_enabled = torch.is_grad_enabled, torch._C._set_grad_enabled


class StepValues:
    """The tensors one breakpoint looks at in one phase of a step, and their values once computed.

    A reference is kept with the tensor's version: a tensor changed in place before its value is
    computed (an ``nn.ReLU(inplace=True)`` after the watched layer) no longer holds the value the
    call produced, so the step counts as a possible hit (the replay decides) and the layer that
    recorded it computes its value at once from then on (``LayerHooks.at_once``).
    """

    __slots__ = (
        "refs",
        "versions",
        "owners",
        "bytes",
        "vectors",
        "flag",
        "uncertain",
        "doubtful",
        "last",
        "last_version",
        "prompt",
        "reducer",
        "width",
        "slots",
        "views",
        "capacity",
        "used",
        "missed",
        "prompt_min",
        "flushed",
        "pending",
        "hook",
        "collecting",
        "may_collect",
        "hooked_bytes",
        "root_queued",
        "condition",
        "kind",
        "phase",
        "recorder",
        "cat_joins",
    )

    def __init__(self, condition: Condition, phase: str, recorder: Recorder) -> None:
        self.condition = condition
        self.kind = condition.kind
        self.phase = phase
        self.recorder = recorder
        self.width = 2 if self.kind == "absmax_above" else 1
        """Slots one value takes: abs-max writes (low, high)."""
        self.reducer: Callable[..., Any] = (
            torch.aminmax
            if self.width == 2
            else partial(torch.sum, dim=None, dtype=_F32)
            if self.kind == "nonfinite"
            else partial(torch.linalg.vector_norm, dtype=_F32)
        )
        """One tensor's value (a C call: no frame under a debugger): (low, high) for abs-max, the sum for
        NaN/Inf (it keeps any NaN/Inf), the 2-norm for gradient norms; written into a slot with ``out=``
        (nothing allocated), else returned as 0-d tensors."""
        self.missed = 0
        """Slots this phase would have used past ``capacity``: the next step has room for them."""
        self._allocate(SLOTS)
        self.pending: list[torch.Tensor] = []
        """Gradients collected by the C-level hook this step (``collecting``), reduced at the verdict."""
        self.hook: Callable[[torch.Tensor], Any] = self.grad
        """What the layers put in their tensors' hook dicts: ``grad``, or ``pending.append`` while
        ``collecting`` (one object for the step, so a tensor hooked by two layers has it once)."""
        self.collecting = False
        self.may_collect = True
        """False for good once a collected gradient was found changed in place (the C-level hook cannot
        note a gradient's version when it arrives) or the end-of-backward check was not queued."""
        self.hooked_bytes = 0
        """Gradient bytes this step's hook saw (whether collecting fits), past ``COLLECT_MAX_BYTES`` once
        one was on a GPU."""
        self.root_queued = True
        """The end-of-backward check was queued by the root output's hook before any gradient hook ran:
        nothing depends on the gradient hooks to queue it."""
        self.prompt_min = PROMPT_MIN_NUMEL
        """CPU tensors larger than this are reduced as they are recorded: ``PROMPT_MIN_NUMEL``, or 0 (all)
        after a step with few tensors (``FEW_REDUCTIONS``)."""
        self.doubtful = False
        """The last verdict was a possible hit only because a tensor changed in place (no notice if the
        replay finds nothing)."""
        self.cat_joins = True
        """A flush joins its small CPU tensors with ``torch.cat`` (``_joined``) until cat refuses them once."""
        self.clear()

    def clear(self) -> None:
        self.refs: list[torch.Tensor] = []
        self.versions: list[int] = []
        self.owners: list[Any] = []
        """The ``LayerHooks`` that recorded each reference (None: a gradient hook)."""
        self.bytes = 0
        self.pending.clear()
        self.used = 0
        """Slots written this phase."""
        self.flushed = 0
        """Tensors the flushes of this phase reduced."""
        self.vectors: list[torch.Tensor] = []
        """Values of a whole flush: norms (larger or, for 'below', smaller is worse), GPU inf-norms."""
        self.flag = False
        """A tensor decided at once (an unusual kind) may hit."""
        self.uncertain = False
        """A referenced tensor changed in place before its value was computed."""
        self.prompt: list[Any] = []
        """Values computed at once that had no slot: ``reducer``'s 0-d results (pairs for abs-max)."""
        self.last: torch.Tensor | None = None
        """The last tensor reduced by ``now`` (a container's output is its last child's: reduced once)."""
        self.last_version = -1
        """``last``'s version when it was reduced: a layer that changed it in place and returned it
        (``x.mul_(k)``, an in-place ReLU) returns new values in the same tensor, reduced again."""

    def _allocate(self, capacity: int) -> None:
        self.slots = torch.empty(capacity, dtype=_F32)
        """The phase's CPU values, written in place by ``out=`` reductions and read with one ``tolist()``:
        no 0-d tensor allocated per value, nothing to stack at the verdict (measured here: 29 abs-max
        reductions and their read, 131 µs through 0-d results and a stack, 87 µs through the slots)."""
        self.views = list(self.slots.unbind())
        """One 0-d view per slot, made once: the ``out=`` arguments."""
        self.capacity = capacity

    def failed(self, tensor: torch.Tensor, slot: int) -> None:
        """A reduction into ``slot`` failed: the slot gets a value that decides nothing (it may hold the
        last step's), and the exact test decides the tensor."""
        neutral = _INF if self.kind == "grad_norm_below" else 0.0
        for view in self.views[slot : slot + self.width]:
            view.fill_(neutral)
        self.odd(tensor)

    def odd(self, tensor: Any) -> None:
        """A tensor the fused reduction does not take: the exact path's own test decides now."""
        phase = self.phase
        produced, received = (tensor, tensor) if phase == "backward" else (tensor, None)
        if not self.condition.rejects(phase, produced, received):
            self.flag = True

    def now(self, tensor: torch.Tensor) -> None:
        """The value of one tensor, computed now: a large CPU tensor (``prompt_min``), or one that
        may change in place before the flush (``LayerHooks.at_once``). No sync: read at the verdict.
        (The two hot paths, the wrapped forward and ``grad``, write these lines out: a call less each.)"""
        if tensor is not self.last or tensor._version != self.last_version:
            self.last, self.last_version = tensor, tensor._version
            self.reduce((tensor,))

    def reduce(self, tensors: Sequence[torch.Tensor]) -> None:
        """Each tensor's value, written into the next free slot (a CPU tensor: abs-max takes float32 only),
        else kept as a 0-d result in ``prompt``. A sequence: a flush's tensors in one call (each call is
        traced under a debugger)."""
        width = self.width
        enabled = _grad_enabled()
        _set_grad_enabled(False)  # ``out=`` refuses an input that requires grad; a detach is a tensor call
        try:
            for tensor in tensors:
                used = self.used
                if used + width <= self.capacity and tensor.is_cpu and (width == 1 or tensor.dtype is _F32):
                    self.used = used + width  # taken before the kernel, which releases the GIL (another thread's slot)
                    try:
                        self.reducer(
                            tensor, out=(self.views[used], self.views[used + 1]) if width == 2 else self.views[used]
                        )
                    except (RuntimeError, TypeError):
                        self.failed(tensor, used)
                    continue
                if used + width > self.capacity:
                    self.missed += width
                try:
                    self.prompt.append(self.reducer(tensor))
                except (RuntimeError, TypeError):
                    self.odd(tensor)
        finally:
            _set_grad_enabled(enabled)

    def grad(self, grad: torch.Tensor) -> None:
        """Tensor hook on an input or output of a watched call: keep the gradient's reference."""
        recorder = self.recorder
        if REPLAY.depth and not recorder.replaying:
            return
        numel = grad.numel()
        if numel > self.prompt_min and grad.is_cpu and grad.is_floating_point() and grad.layout is _STRIDED:
            # ``now``, written out. A tensor is hooked once per breakpoint, but autograd hands one gradient
            # to several tensors (both sides of a residual add: 4 of 16 on the bench's transformer); only
            # the last is kept, not every one until the verdict (that would hold freed gradients' memory)
            version = grad._version
            if grad is not self.last or version != self.last_version:
                self.last, self.last_version = grad, version
                self.hooked_bytes += grad.nbytes
                used, width = self.used, self.width
                if used + width <= self.capacity and (width == 1 or grad.dtype is _F32):
                    self.used = used + width  # taken first, as in ``reduce``
                    enabled = _grad_enabled()
                    _set_grad_enabled(False)  # on under create_graph
                    try:
                        self.reducer(
                            grad, out=(self.views[used], self.views[used + 1]) if width == 2 else self.views[used]
                        )
                    except (RuntimeError, TypeError):
                        self.failed(grad, used)
                    finally:
                        _set_grad_enabled(enabled)
                else:
                    self.reduce((grad,))
        elif numel and grad.is_floating_point() and grad.layout is _STRIDED:
            self.refs.append(grad)
            self.versions.append(grad._version)
            self.owners.append(None)
            self.bytes += grad.nbytes
            self.hooked_bytes += grad.nbytes if grad.is_cpu else COLLECT_MAX_BYTES + 1  # (not collected)
            if self.bytes > FLUSH_BYTES or len(self.refs) >= FLUSH_COUNT:
                self.flush()
        else:
            self.odd(grad)
        if not recorder.queued:  # usually the root output's hook queued it already
            self.root_queued = False
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
        # Comprehensions, one traced frame each under a debugger, not a Python loop over the tensors
        # (a flush takes up to FLUSH_COUNT of them, and a backward's collected gradients all at once).
        if [tensor._version for tensor in refs] != versions:  # some tensor changed in place since
            unchanged = []
            for i, tensor in enumerate(refs):
                if tensor._version == versions[i]:
                    unchanged.append(tensor)
                    continue
                self.uncertain = True
                if owners[i] is not None:
                    owners[i].compute_at_once()
            refs = unchanged
        current = list({id(tensor): tensor for tensor in refs}.values())  # each tensor once
        if not current:
            return
        self.flushed += len(current)
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
            large = [tensor for tensor in current if tensor.numel() > FLATTEN_MAX_NUMEL]
            small = [tensor for tensor in current if tensor.numel() <= FLATTEN_MAX_NUMEL] if large else current
            if len(small) > 1:
                try:
                    large.append(self._joined(small))
                except RuntimeError:  # mixed dtypes
                    large.extend(small)
            else:
                large.extend(small)
            self.reduce(large)
        except (RuntimeError, TypeError):  # mixed devices or dtypes, float64 with a float32 norm: one at a time
            for tensor in current:
                self.odd(tensor)
        finally:
            torch._C._set_grad_enabled(enabled)

    def _joined(self, small: list[torch.Tensor]) -> torch.Tensor:
        """The small tensors in one (only their values count: abs-max and NaN/Inf read the extremes or the
        sum). ``torch.cat`` takes them as they are: 4x faster than ``flatten_dense_tensors``, which makes
        a flattened view of each first (999 gradients of a stack of tiny layers: 160 µs against 620 µs).
        It needs their sizes past the first dimension to agree and no 0-d tensor; the first time they do
        not, this phase flattens from then on (a model's shapes do not change from step to step)."""
        if self.cat_joins:
            try:
                return torch.cat(small)  # dtypes promote: each value is kept exactly
            except RuntimeError:
                self.cat_joins = False
        return torch._C._nn.flatten_dense_tensors(small)

    def verdict(self) -> bool:
        """Whether some call of the step may satisfy the condition (one host sync); then starts afresh."""
        if self.pending:
            self._take_collected()
        if self.refs:
            self.flush()
        vectors, flag, uncertain = self.vectors, self.flag, self.uncertain
        self.vectors, self.flag, self.uncertain = [], False, False
        prompt, self.prompt, self.last = self.prompt, [], None
        used, self.used = self.used, 0
        slotted: list[float] = self.slots.tolist()[:used] if used else []
        reductions, self.flushed = used // self.width + len(prompt) + self.flushed, 0
        self.prompt_min = 0 if reductions <= FEW_REDUCTIONS else PROMPT_MIN_NUMEL
        if self.missed:  # room for this step's values in the next
            self._allocate(self.capacity + self.missed + SLOTS)
            self.missed = 0
        if self.phase == "backward":
            self._choose_hook(uncertain)
        hit = flag or self._decide(slotted, prompt, vectors)
        self.doubtful = uncertain and not hit
        return hit or uncertain

    # -- the C-level gradient hook (COLLECT_MAX_BYTES) --------------------------

    def _take_collected(self) -> None:
        """The gradients ``pending.append`` collected, each once (autograd hands one gradient to both sides
        of a residual add), taken as ``grad`` would have taken them, in one loop: a gradient is made at
        version 0, so one changed in place since counts as uncertain; the large CPU ones are reduced
        here, the rest referenced for the flush."""
        refs, versions, owners = self.refs, self.versions, self.owners
        large: list[torch.Tensor] = []
        seen: set[int] = set()
        collected, on_device, prompt_min = 0, False, self.prompt_min
        for grad in self.pending:
            if id(grad) in seen:
                continue
            seen.add(id(grad))
            numel = grad.numel()
            if not grad.is_floating_point() or grad.layout is not _STRIDED or not numel:
                self.odd(grad)
                continue
            collected += grad.nbytes
            cpu = grad.is_cpu
            on_device = on_device or not cpu
            if grad._version:
                self.uncertain = True
            elif numel > prompt_min and cpu:
                large.append(grad)
            else:
                refs.append(grad)
                versions.append(0)
                owners.append(None)
                self.bytes += grad.nbytes  # what the flush will read (it resets the count)
        self.pending.clear()
        self.hooked_bytes = COLLECT_MAX_BYTES + 1 if on_device else collected  # (a GPU's: collected no more)
        if large:
            self.reduce(large)

    def _choose_hook(self, uncertain: bool) -> None:
        """The next step's gradient hook: collecting when this step's gradients fit ``COLLECT_MAX_BYTES``."""
        if uncertain or not self.root_queued:
            self.may_collect = False
        collect = self.may_collect and self.hooked_bytes <= COLLECT_MAX_BYTES
        self.hooked_bytes, self.root_queued = 0, True
        if collect != self.collecting:
            self.collecting = collect
            self.hook = self.pending.append if collect else self.grad

    def stop_collecting(self) -> None:
        """The collected gradients' end-of-backward check never ran (the root output's hook did not
        queue it: the loss bypassed the model's output): the Python hook from now on, which queues it."""
        self.may_collect = self.collecting = False
        self.hook = self.grad

    def _decide(self, slotted: list[float], prompt: list[Any], vectors: list[torch.Tensor]) -> bool:
        """Whether the phase's values may hit: the slots' (pairs for abs-max: low, high), and what went
        through tensors (values without a slot, GPU flushes, norm vectors), read in one more transfer."""
        kind = self.kind
        highs, lows = (slotted[1::2], slotted[0::2]) if self.width == 2 else (slotted, [])
        if prompt or vectors:
            scalars = [high for _, high in prompt] + [low for low, _ in prompt] if self.width == 2 else prompt
            try:  # compared as Python floats (float64: the exact value)
                parts = [torch.stack(scalars)] if scalars else []
                values: list[float] = (parts[0] if not vectors else torch.cat(parts + vectors)).tolist()
            except RuntimeError:  # values on several devices
                values = [float(t) for t in scalars]
                for vector in vectors:
                    values.extend(vector.tolist())
            if self.width == 2:
                n = len(prompt)
                highs = highs + values[:n] + values[2 * n :]  # the order: highs, lows, vectors (inf-norms)
                lows = lows + values[n : 2 * n]
            else:
                highs = highs + values
        if not highs and not lows:
            return False
        total = sum(highs) + sum(lows)
        if kind == "nonfinite":
            return not math.isfinite(total)  # NaN and Inf carry through the sum (and -Inf + Inf is NaN)
        if total != total:  # a NaN (or Inf beside -Inf, an abs-max of Inf): the replay decides
            return True
        threshold = self.condition.threshold or 0.0
        margin = abs(threshold) * NORM_MARGIN
        if kind == "grad_norm_below":
            return min(highs) < threshold + margin
        extreme = max(highs, default=-_INF)
        if lows:
            extreme = max(extreme, -min(lows))  # a negated low is an abs-max too
        return extreme > threshold if kind == "absmax_above" else extreme > threshold - margin


class Track:
    """One deferred breakpoint on one model: its phases' values in the current step."""

    def __init__(self, bp: Breakpoint, phases: Sequence[str], recorder: Recorder) -> None:
        condition = bp.spec.condition
        self.bp = bp
        self.recorder = recorder
        self.forward_phases = tuple(p for p in phases if p in ("forward_pre", "forward") and condition.applies_to(p))
        self.backward = "backward" in phases and condition.applies_to("backward")
        self.nonfinite = condition.kind == "nonfinite"
        self.forward = StepValues(condition, "forward", recorder)
        self.backward_values = StepValues(condition, "backward", recorder)
        self.leaves = LeafHooks()
        """Gradient hooks this step placed on leaf tensors (a model input that requires grad)."""
