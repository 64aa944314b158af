"""On a bad step, where the NaN/Inf was born: the inputs, the loss, or the first layer (and op) of an exact replay.

No replay is needed when the inputs are already non-finite (reported at the root: "came in
through the inputs") or when the gradient reaching the root output is ("came in from the
loss"). Otherwise the sentinel's recorded call is replayed in the shared frame (``frame.py``)
with the probes on every module (``nonfinite_probes.py``) and the op tracer
(``nan_origin.py``); the stop is made after the replay, so the replay never runs with the
debugger holding it half-way. The parameters' ``.grad`` are set aside during a backward
replay, so the replay does not accumulate twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from hookscope.engine.replay.frame import gradients_set_aside, pair_received, replay_frame
from hookscope.engine.replay.nan_origin import NodeWatch, OpTracer, named_tensors
from hookscope.engine.replay.nonfinite_probes import BackwardProbe, ForwardProbe, Found
from hookscope.hooks.conditions import ORIGIN_INPUTS, ORIGIN_LOSS, HookEvent, describe_counts, nonfinite_counts
from hookscope.hooks.summaries import all_finite, tensors_in

if TYPE_CHECKING:
    from hookscope.engine.replay.nonfinite_sentinel import RootSentinel


def investigate_gradients(sentinel: RootSentinel, root_grads: list[torch.Tensor], replay: bool) -> None:
    """The backward went bad: the loss, the first layer of a replayed backward, or (no replay) the bad gradients."""
    if root_grads and not all_finite(root_grads):
        step = sentinel.step_of(sentinel.model_id)
        counts = describe_counts(nonfinite_counts(root_grads))
        sentinel.fire(
            HookEvent(
                sentinel.model_id,
                sentinel.qualified(""),
                sentinel.root,
                "backward",
                grad_output=tuple(root_grads),
                step=step,
            ),
            f"NaN/Inf in the gradient reaching the model output ({counts}): it came in from the loss",
            ORIGIN_LOSS,
        )
    elif replay and root_grads:
        _investigate_backward(sentinel)
    else:
        _report_param_grads(sentinel, "the gradient did not flow through the model's output; no replay")


def investigate_forward(sentinel: RootSentinel, output: Any) -> None:
    """The root's output holds NaN/Inf: the inputs, or the first layer and op of the replayed forward."""
    call = sentinel.call
    step = sentinel.step_of(sentinel.model_id)
    inputs = tensors_in((call.args, call.kwargs))
    if not all_finite(inputs):
        if any(s is not sentinel and s.reported_at is not None for s in sentinel.family):
            return  # the value came from a sub-model of this model that already stopped on it
        counts = describe_counts(nonfinite_counts(inputs))
        sentinel.fire(
            HookEvent(
                sentinel.model_id, sentinel.qualified(""), sentinel.root, "forward_pre", inputs=call.args, step=step
            ),
            f"NaN/Inf came in through the inputs of the model ({counts})",
            ORIGIN_INPUTS,
        )
        return
    root = sentinel.root
    probe = ForwardProbe(_named(sentinel))
    ops = OpTracer(_named_tensors(sentinel))
    buffers = sentinel.tensors.buffers()
    with replay_frame(buffers, call.cuda_rng is not None):
        call.apply(buffers)
        with torch.set_grad_enabled(call.grad_enabled):
            probe.install()
            try:
                with ops:
                    root(*call.args, **call.kwargs)
            finally:
                probe.remove()
    found = probe.found
    if found is None:
        outs = tensors_in(output)
        sentinel.fire(
            HookEvent(
                sentinel.model_id,
                sentinel.qualified(""),
                root,
                "forward",
                inputs=call.args,
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
    _fire_found(sentinel, found.at_op(ops.found, sentinel.clean_before))


def _named(sentinel: RootSentinel) -> list[tuple[str, nn.Module]]:
    return [(sentinel.qualified(n), m) for n, m in sentinel.root.named_modules()]


def _named_tensors(sentinel: RootSentinel) -> dict[int, str]:
    return {i: sentinel.qualified(n) for i, n in named_tensors(sentinel.root).items()}


def _investigate_backward(sentinel: RootSentinel) -> None:
    call = sentinel.call
    step = sentinel.step_of(sentinel.model_id)
    root = sentinel.root
    probe = BackwardProbe(_named(sentinel))
    ops = OpTracer(_named_tensors(sentinel), record_nodes=True)
    nodes = NodeWatch(ops.nodes)
    buffers = sentinel.tensors.buffers()
    with gradients_set_aside(list(root.parameters())), replay_frame(buffers, call.cuda_rng is not None):
        call.apply(buffers)
        with torch.enable_grad():
            probe.install()
            try:
                with ops:
                    out = root(*call.args, **call.kwargs)
                outs: list[torch.Tensor] = []
                grads: list[torch.Tensor] = []
                pair_received(out, call.root_grads, outs, grads)
                if outs:
                    nodes.install()
                    torch.autograd.backward(outs, grads)
            finally:
                probe.remove()
                nodes.remove()
    if probe.found is None:
        _report_param_grads(sentinel, "the replay of the step did not reproduce it")
        return
    probe.found.event.step = step
    _fire_found(sentinel, probe.found.at_op(nodes.found, sentinel.clean_before))


def _fire_found(sentinel: RootSentinel, found: Found) -> None:
    # The probe recorded the culprit while the replay ran; the stop happens here, after
    # the replay, so the replay never runs with the debugger holding it half-way.
    sentinel.fire(found.event, found.reason, found.origin)


def _report_param_grads(sentinel: RootSentinel, why: str) -> None:
    """No replay, or one that did not reproduce it: the parameters whose gradients hold NaN/Inf."""
    root = sentinel.root
    bad = [(name, p) for name, p in root.named_parameters() if p.grad is not None and not all_finite([p.grad])]
    step = sentinel.step_of(sentinel.model_id)
    if not bad:
        root_grads = [g for g in sentinel.call.root_grads if g is not None]
        sentinel.fire(
            HookEvent(
                sentinel.model_id, sentinel.qualified(""), root, "backward", grad_output=tuple(root_grads), step=step
            ),
            "NaN/Inf in the gradient reaching the model output: it came in from the loss",
            ORIGIN_LOSS,
        )
        return
    # Backward runs last layer first: the last parameter registered is the closest guess.
    name, param = bad[-1]
    layer = name.rpartition(".")[0]
    module = root.get_submodule(layer) if layer else root
    names = ", ".join(sentinel.qualified(n) for n, _ in bad[:5]) + (" ..." if len(bad) > 5 else "")
    sentinel.fire(
        HookEvent(
            sentinel.model_id,
            sentinel.qualified(layer),
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
