"""One model root of the deferred path: its calls recorded, the once-per-step verdicts, the exact replays.

The root's forward-pre keeps what a replay needs (``CallSnapshot``); its forward hook asks the
forward verdicts (one host sync), and a callback queued by the first gradient hook asks the
backward ones at the end of the backward. On a possible hit the step is replayed in the shared
frame (``frame.py``) with the breakpoints' exact hooks installed for that replay only: they stop
in the first call whose condition holds, with the exact path's locals, reason and stop location.
"""

from __future__ import annotations

import weakref
from contextlib import AbstractContextManager
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.debugger.stop import BreakpointHit
from hookscope.engine.replay.deferred_values import Track
from hookscope.engine.replay.frame import gradients_set_aside, pair_received, replay_frame
from hookscope.hooks.conditions import REPLAY
from hookscope.hooks.leaf_hooks import LeafHooks, hook_gradient
from hookscope.hooks.module_tensors import STRUCTURE, ModuleTensors
from hookscope.hooks.removed_hooks import CALLED_WITHOUT_KWARGS
from hookscope.hooks.step_snapshot import CallSnapshot
from hookscope.hooks.summaries import tensors_in

if TYPE_CHECKING:
    from hookscope.engine.replay.deferred import DeferredValues

MAX_PENDING_CALLS = 4
"""Root calls kept for one backward (two forwards, one loss); older ones are not replayed."""


class Recorder:
    """One model root: the snapshots of its calls, the once-per-step checks and the replays."""

    def __init__(self, model_id: str, root: nn.Module, owner: DeferredValues) -> None:
        self.model_id = model_id
        self._root = weakref.ref(root)  # a model the program drops is freed
        self.owner = owner
        self.tensors = ModuleTensors(root)
        self.tracks: list[Track] = []
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
        self.checking_previous = False
        """The backward being checked is the last step's (``_unchecked_backward``): the step count moved on."""
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

    def _pre(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] = CALLED_WITHOUT_KWARGS) -> None:
        if REPLAY.depth or self.open or kwargs is CALLED_WITHOUT_KWARGS:
            return
        if not self.queued:
            for track in self.tracks:
                if track.backward_values.pending:  # a backward's collected gradients, never checked
                    self._unchecked_backward()
                    break
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
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any = CALLED_WITHOUT_KWARGS
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

    def _unchecked_backward(self) -> None:
        """The last backward's collected gradients (``StepValues.collecting``) were never checked: the
        root output's hook, which queues the end-of-backward check, did not run (the loss bypassed the
        model's output). Check them now, as that check would have (without a replay: there is no
        output gradient to replay with), and let the Python gradient hook queue it from now on."""
        for track in self.tracks:
            track.backward_values.stop_collecting()
        self.checking_previous = True
        try:
            self._after_backward()
        finally:
            self.checking_previous = False

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

    def _replay_forward(self, call: CallSnapshot, tracks: list[Track]) -> None:
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

    def _replay_backward(self, calls: list[CallSnapshot], tracks: list[Track]) -> None:
        hits_before = _hits(tracks)
        sure = [t for t in tracks if not t.backward_values.doubtful]
        buffers = self.tensors.buffers()
        cuda = any(c.cuda_rng is not None for c in calls)
        try:
            with gradients_set_aside(self.tensors.parameters()), self._replaying(tracks, ("backward",), buffers, cuda):
                outs: list[torch.Tensor] = []
                grads: list[torch.Tensor] = []
                for call in calls:
                    call.apply(buffers)
                    with torch.enable_grad():
                        out = self.root(*call.args, **call.kwargs)
                    pair_received(out, call.root_grads, outs, grads)
                if outs:
                    torch.autograd.backward(outs, grads)
                replayed = [t for t in tracks if t.backward_values.verdict()]
        finally:
            for track in self.tracks:
                track.forward.clear()
                track.backward_values.clear()
                track.leaves.remove_all()
        if _hits(tracks) == hits_before:
            self._check_reproduced([t for t in sure if t not in replayed], "backward")

    def _replaying(
        self, tracks: list[Track], phases: tuple[str, ...], buffers: list[torch.Tensor], cuda: bool
    ) -> AbstractContextManager[None]:
        return _Replay(self, tracks, phases, buffers, cuda)

    def _check_reproduced(self, lost: list[Track], phase: str) -> None:
        """After a replay where no call hit: a breakpoint whose replayed values no longer may hit was lost."""
        if lost:
            self._not_replayed(
                lost,
                "the replay of the step did not reproduce the values (state outside the "
                "model, or a nondeterministic kernel)",
            )

    def _not_replayed(self, tracks: list[Track], why: str) -> None:
        for track in tracks:
            self.owner.not_replayed(track.bp, self.model_id, why, previous_step=self.checking_previous)


def _released(call: CallSnapshot) -> CallSnapshot:
    call.release()
    return call


class _Replay:
    """The replay's frame (``frame.py``: state kept, Hookscope's other hooks quiet), the breakpoints' exact hooks on."""

    def __init__(
        self,
        recorder: Recorder,
        tracks: list[Track],
        phases: tuple[str, ...],
        buffers: list[torch.Tensor],
        cuda: bool,
    ) -> None:
        self.recorder, self.tracks, self.phases = recorder, tracks, phases
        self.frame = replay_frame(buffers, cuda)
        self.exact: list[Any] = []
        self.outputs: AbstractContextManager[None] | None = None

    def __enter__(self) -> None:
        recorder = self.recorder
        self.frame.__enter__()
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
            self.frame.__exit__(None, None, None)


def _hits(tracks: list[Track]) -> int:
    return sum(t.bp.counter.hits for t in tracks)
