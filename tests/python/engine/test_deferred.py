"""Value conditions on many layers, checked once per step (deferred.py), against the exact per-call path.

The deferred path must stop in the same layer, call and phase, with the same reason, as the exact
path would, never miss a hit, and leave no hook, whatever the model and threshold.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any
from unittest.mock import patch

import pytest
import torch
from engine_models import hooks_left
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from hookscope.engine.core import Engine
from hookscope.engine.replay import deferred, deferred_values
from hookscope.hooks.conditions import Condition

EXACT = 10**9
"""DEFER_MIN_LAYERS that keeps every breakpoint on the exact path."""


class Residual(nn.Module):
    """A block with an in-place ReLU after its inner layer (values change after the layer ran)."""

    def __init__(self, width: int, inplace: bool) -> None:
        super().__init__()
        self.inner = nn.Linear(width, width)
        self.act = nn.ReLU(inplace=inplace)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.inner(x))


class TwoOut(nn.Module):
    """Returns a tuple: a layer with several outputs, and an integer one (the wrapper's general case)
    or a None (attention's ``(output, None)``: the wrapper's written-out case)."""

    def __init__(self, width: int, integer: bool) -> None:
        super().__init__()
        self.a = nn.Linear(width, width)
        self.integer = integer

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        y = self.a(x)
        return y, y * 2.0, y.argmax(dim=-1) if self.integer else None


class Picks(nn.Module):
    def __init__(self, width: int, integer: bool = True) -> None:
        super().__init__()
        self.two = TwoOut(width, integer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, z, _ = self.two(x)
        return y - z * 0.25


class _Aside(nn.Module):
    """Returns ``(x, x * 1000, None)``, as attention returns its weights beside its output."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        return x, x * 1000.0, None


class _TakesFirst(nn.Module):
    """Uses only the first tensor of its child's tuple: the second one's values go nowhere else."""

    def __init__(self) -> None:
        super().__init__()
        self.aside = _Aside()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.aside(x)[0]


def layer(kind: str, width: int) -> nn.Module:
    return {
        "linear": lambda: nn.Linear(width, width),
        "tanh": nn.Tanh,
        "relu": lambda: nn.Sequential(nn.Linear(width, width), nn.ReLU(inplace=True)),
        "norm": lambda: nn.LayerNorm(width),
        "drop": lambda: nn.Dropout(0.3),
        "res": lambda: Residual(width, True),
        "res2": lambda: Residual(width, False),
        "picks": lambda: Picks(width),
        "picks2": lambda: Picks(width, integer=False),
        "seq": lambda: nn.Sequential(nn.Linear(width, width), nn.Tanh()),
        "scale": lambda: _Scale(),
        "scale_": lambda: nn.Sequential(nn.Linear(width, width), _ScaleInPlace()),
        "neg": lambda: _Negative(),
        "aside": lambda: _TakesFirst(),
        "gru": lambda: _Recurrent(nn.GRU(width, width)),
        "lstm": lambda: _Recurrent(nn.LSTM(width, width)),
        "attn": lambda: _Attention(width),
        "conv": lambda: _Conv(width),
    }[kind]()


class _Recurrent(nn.Module):
    """A GRU's ``(output, h_n)`` or an LSTM's nested ``(output, (h_n, c_n))``, over the batch as one
    unbatched sequence: a recurrent layer's outputs, and a container the wrapper's written-out case
    does not take."""

    def __init__(self, rnn: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, state = self.rnn(x)
        h = state[0] if isinstance(state, tuple) else state
        return out + h


class _Attention(nn.Module):
    """Self-attention that returns its averaged weights beside its output (two floating outputs that
    require grad: the exact gradient norm is over both)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, weights = self.attn(x, x, x, need_weights=True)
        return out + weights.sum(dim=-1, keepdim=True)


class _Conv(nn.Module):
    """A 1-d convolution over the features, the batch as channels of one: a conv's 3-d activations."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(5, 5, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.unsqueeze(0)).squeeze(0)


class _ScaleInPlace(nn.Module):
    """Multiplies its input in place and returns it: new values in the tensor the layer before returned."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(7.0)


class _Scale(nn.Module):
    """Multiplies by a large factor: abs-max and gradient norms spread over orders of magnitude."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 7.0


class _Negative(nn.Module):
    """Every value below zero: its abs-max is its most negative value, never its largest."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return -(x.abs() * 7.0) - 1.0


KINDS = [
    *("linear", "tanh", "relu", "norm", "drop", "res", "res2", "picks", "picks2", "seq", "scale", "scale_", "neg"),
    *("gru", "lstm", "attn", "conv"),  # layers of the field: recurrent state, attention weights, conv activations
]

conditions = st.sampled_from(
    [
        ("absmax_above", ["forward"]),
        ("absmax_above", ["forward", "backward"]),
        ("absmax_above", ["backward"]),
        ("grad_norm_above", ["backward"]),
        ("grad_norm_below", ["backward"]),
        ("nonfinite", ["forward_pre", "forward", "backward"]),
    ]
)


def build(kinds: list[str], seed: int, width: int = 6) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, width), *[layer(k, width) for k in kinds], nn.Linear(width, 3))


def run(
    model: nn.Module, cond: dict, phases: list[str], steps: int, seed: int, plant_nan_at: int | None
) -> tuple[list[tuple], list[dict]]:
    """Train ``model`` a few steps with a breakpoint on every layer; (layer, phase, step, reason) of each hit."""
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m", model)
    hits: list = []
    engine.set_breakpoints([{"id": "bp", "layer": "*", "phases": phases, "condition": cond, "callback": hits.append}])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # dropout masks: the same in both runs
    for step in range(steps):
        x = torch.randn(5, 4, generator=generator) * 3
        if step == plant_nan_at:
            x[0, 0] = float("nan")
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), torch.zeros(5, 3))
        loss.backward()
        optimizer.step()
    engine.shutdown()
    assert hooks_left(model) == []
    seen = [(h.layer, h.phase, h.step, h.reason) for h in hits]
    return seen, [e for e in events if e.get("type") == "notice"]


def threshold_for(kind: str, kinds: list[str], seed: int, quantile: float) -> float:
    """A threshold among the values the exact test sees, so that some calls hit and some do not."""
    model = build(kinds, seed)
    values: list[float] = []
    hooks = []
    for module in model.modules():
        if kind == "absmax_above":
            hooks.append(
                module.register_forward_hook(
                    lambda m, a, o: values.extend(float(t.detach().abs().max()) for t in _floats(o))
                )
            )
        else:  # tensor hooks: a full backward hook forbids the in-place ReLU after a layer

            def hook_grads(m: nn.Module, a: tuple, o: object) -> None:
                for t in _floats(o):
                    if t.requires_grad:
                        t.register_hook(lambda g: values.append(float(g.norm())))

            hooks.append(module.register_forward_hook(hook_grads))
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(seed)) * 3
    nn.functional.mse_loss(model(x), torch.zeros(5, 3)).backward()
    for hook in hooks:
        hook.remove()
    values.sort()
    return values[min(int(quantile * len(values)), len(values) - 1)] if values else 1.0


def _floats(value) -> list[torch.Tensor]:
    tensors = [value] if isinstance(value, torch.Tensor) else [t for t in value if isinstance(t, torch.Tensor)]
    return [t for t in tensors if t.is_floating_point() and t.numel()]


@contextmanager
def deferred_with(prompt: str, slots: int = deferred_values.SLOTS, collect: bool = True) -> Iterator[None]:
    """Breakpoints on the deferred path, their tensors reduced as ``prompt`` says: "all" as they are
    recorded (as a large CPU tensor is), "flush" the small ones at a flush, "learned" as the values
    learn from the last step (``FEW_REDUCTIONS``); ``slots``: 2, the first step overflows the buffer;
    ``collect``: the gradients through the C-level hook after the first step (``COLLECT_MAX_BYTES``)."""
    names = ("PROMPT_MIN_NUMEL", "FEW_REDUCTIONS", "SLOTS", "COLLECT_MAX_BYTES")
    saved = deferred.DEFER_MIN_LAYERS, [getattr(deferred_values, name) for name in names]
    try:
        deferred.DEFER_MIN_LAYERS = 1
        if prompt == "all":
            deferred_values.PROMPT_MIN_NUMEL = 0
        elif prompt == "flush":
            deferred_values.FEW_REDUCTIONS = -1
        deferred_values.SLOTS = slots
        if not collect:
            deferred_values.COLLECT_MAX_BYTES = -1
        yield
    finally:
        deferred.DEFER_MIN_LAYERS = saved[0]
        for name, value in zip(names, saved[1]):
            setattr(deferred_values, name, value)


def exact_path() -> AbstractContextManager[None]:
    return patch.object(deferred, "DEFER_MIN_LAYERS", EXACT)


PROMPTS = ["all", "flush", "learned"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=5),
    condition=conditions,
    quantile=st.floats(0.0, 1.0),
    seed=st.integers(0, 10_000),
    nan=st.sampled_from([None, 1]),
    prompt=st.sampled_from(PROMPTS),
    slots=st.sampled_from([2, deferred_values.SLOTS]),
    collect=st.booleans(),
)
def test_the_deferred_path_stops_where_the_exact_path_stops(
    kinds, condition, quantile, seed, nan, prompt, slots, collect
):
    kind, phases = condition
    cond = (
        {"kind": kind}
        if kind == "nonfinite"
        else {"kind": kind, "threshold": threshold_for(kind, kinds, seed, quantile)}
    )
    plant = nan if kind == "nonfinite" else None
    with exact_path():
        exact, _ = run(build(kinds, seed), cond, phases, 3, seed, plant)
    with deferred_with(prompt, slots, collect):
        deferred_hits, notices = run(build(kinds, seed), cond, phases, 3, seed, plant)
    assert deferred_hits == exact
    assert not [n for n in notices if n.get("code") in ("deferredNotReplayed", "conditionError")]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_an_abs_max_that_is_a_layer_s_most_negative_value_is_found(prompt):
    """The layer's values are all negative: only its low crosses the threshold, whichever way it is reduced."""
    kinds, seed = ["neg"], 3
    threshold = threshold_for("absmax_above", kinds, seed, 1.0) * 0.9  # below the largest abs-max only
    cond = {"kind": "absmax_above", "threshold": threshold}
    with exact_path():
        exact, _ = run(build(kinds, seed), cond, ["forward"], 2, seed, None)
    with deferred_with(prompt):
        deferred_hits, _ = run(build(kinds, seed), cond, ["forward"], 2, seed, None)
    assert exact and exact[0][0] == "1"  # the negative layer
    assert deferred_hits == exact


@pytest.mark.parametrize("prompt", PROMPTS)
def test_every_tensor_of_a_tuple_output_is_checked(prompt):
    """Only the second tensor of a layer's ``(output, aside, None)`` crosses the threshold."""
    kinds, seed = ["aside"], 4
    threshold = threshold_for("absmax_above", kinds, seed, 1.0) * 0.9  # below the aside's abs-max only
    cond = {"kind": "absmax_above", "threshold": threshold}
    with exact_path():
        exact, _ = run(build(kinds, seed), cond, ["forward"], 2, seed, None)
    with deferred_with(prompt):
        deferred_hits, _ = run(build(kinds, seed), cond, ["forward"], 2, seed, None)
    assert exact and {hit[:2] for hit in exact} == {("1.aside", "forward")}
    assert deferred_hits == exact


def test_a_hit_stops_in_the_replay_with_the_call_values_and_the_step_goes_on_unchanged():
    torch.manual_seed(0)
    model = build(["tanh", "linear", "drop", "res"], 0)
    twin = copy.deepcopy(model)
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    hits: list = []
    engine.set_breakpoints(
        [
            {
                "id": "bp",
                "layer": "*",
                "phases": ["forward", "backward"],
                "condition": {"kind": "absmax_above", "threshold": 0.0},
                "callback": hits.append,
            }
        ]
    )
    assert engine._breakpoints.breakpoints[0].deferred == ("forward", "backward")
    x = torch.randn(5, 4)
    torch.manual_seed(1)
    out = model(x)
    out.sum().backward()
    torch.manual_seed(1)
    expected = twin(x)
    expected.sum().backward()
    assert torch.equal(out, expected)  # the replays put the RNG back: the step is the one without Hookscope
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad)  # the replay's backward did not add to the gradients
    forward = [h for h in hits if h.phase == "forward"]
    backward = [h for h in hits if h.phase == "backward"]
    assert [h.layer for h in forward][:3] == ["0", "1", "2"]
    assert torch.equal(forward[0].output, twin[0](x))  # the stop's locals are the call's values
    assert backward and all(h.grad_input is not None for h in backward)
    engine.shutdown()
    assert hooks_left(model) == []


def test_copies_and_pickles_of_a_watched_model_carry_no_wrapper():
    model = build(["tanh", "linear", "relu"], 0)
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_breakpoints(
        [{"id": "bp", "layer": "*", "phases": ["forward"], "condition": {"kind": "absmax_above", "threshold": 1e30}}]
    )
    assert "forward" in vars(model[1])  # wrapped, not hooked
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert [h for h in hooks_left(clone) if not h.startswith("global")] == []  # (the engine's are global)
        clone(torch.randn(2, 4))
    engine.shutdown()
    assert hooks_left(model) == []


def test_a_layer_called_outside_its_model_is_checked_at_once():
    model = build(["tanh", "linear", "tanh"], 0)
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    hits: list = []
    engine.set_breakpoints(
        [
            {
                "id": "bp",
                "layer": "*",
                "phases": ["forward", "backward"],
                "condition": {"kind": "absmax_above", "threshold": 0.0},
                "callback": hits.append,
            }
        ]
    )
    h = model[2](torch.randn(3, 6, requires_grad=True))  # no snapshot to replay: the exact test, inline
    h.sum().backward()
    assert [(x.layer, x.phase) for x in hits] == [("2", "forward"), ("2", "backward")]
    engine.shutdown()
    assert hooks_left(model) == []


def test_a_user_hook_on_a_layer_keeps_it_hooked_not_wrapped():
    model = build(["linear"], 0)
    model[1].register_forward_hook(lambda m, a, o: o * 2)  # changes the output the exact test sees
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_breakpoints(
        [{"id": "bp", "layer": "*", "phases": ["forward"], "condition": {"kind": "absmax_above", "threshold": 1e30}}]
    )
    assert "forward" not in vars(model[1]) and "forward" in vars(model[0])
    engine.shutdown()


@pytest.mark.parametrize("kind", ["absmax_above", "nonfinite"])
def test_a_value_changed_in_place_after_its_layer_is_still_caught(kind):
    """A layer's output that an in-place op changes before the step's check: the deferred path must
    not read the changed value (here the ReLU zeroes the large negative output that hits)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    with torch.no_grad():
        model[0].bias.fill_(-1e6 if kind == "absmax_above" else float("-inf"))
    cond = {"kind": kind, "threshold": 1e5} if kind == "absmax_above" else {"kind": kind}
    for minimum in (EXACT, 1):
        deferred.DEFER_MIN_LAYERS = minimum
        try:
            hits = run(copy.deepcopy(model), cond, ["forward"], 2, 0, None)[0]
        finally:
            deferred.DEFER_MIN_LAYERS = 4
        assert hits[0][:3] == ("0", "forward", 0)
        if minimum == EXACT:
            exact = hits
    assert hits == exact


def test_a_layer_that_changes_its_input_in_place_and_returns_it_is_checked_on_its_new_values():
    """Large CPU outputs are reduced as they are produced; the layer after returns the same tensor
    with new values (x.mul_(7)), which must be reduced again, not skipped as already seen."""
    model = nn.Sequential(nn.Linear(4, 1000), _ScaleInPlace(), nn.Linear(1000, 3))
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.fill_(1.0)  # the Linear's output is all 1 (abs-max 1), the in-place layer's all 7
        model[2].weight.zero_()  # and the last layer's below the threshold: only the in-place layer hits
    cond = {"kind": "absmax_above", "threshold": 3.0}
    found = {}
    for minimum in (EXACT, 1):
        deferred.DEFER_MIN_LAYERS = minimum
        try:
            found[minimum] = run(copy.deepcopy(model), cond, ["forward"], 2, 0, None)[0]
        finally:
            deferred.DEFER_MIN_LAYERS = 4
    assert found[EXACT][0][:3] == ("1", "forward", 0)
    assert found[1] == found[EXACT]


def test_root_hooks_called_as_removed_hooks_stay_quiet():
    """torch calls a ``with_kwargs`` hook that was removed while it looped over the module's hooks
    without its kwargs (removed_hooks.py): the deferred root hooks must return, not raise."""
    model = build(["tanh", "linear", "relu"], 0)
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_breakpoints(
        [
            {
                "id": "bp",
                "layer": "*",
                "phases": ["forward", "backward"],
                "condition": {"kind": "absmax_above", "threshold": 1e30},
            }
        ]
    )
    pre = [
        h
        for h in model._forward_pre_hooks.values()
        if "deferred" in getattr(h, "__module__", "") or "deferred" in type(getattr(h, "__self__", None)).__module__
    ]
    post = [h for h in model._forward_hooks.values() if "deferred" in type(getattr(h, "__self__", None)).__module__]
    assert pre and post, "the deferred path hooks the root"
    engine.shutdown()
    x = torch.randn(2, 4)
    for hook in pre:
        assert hook(model, (x,)) is None
    for hook in post:
        assert hook(model, (x,), model(x)) is None
    assert hooks_left(model) == []


@pytest.mark.parametrize(
    ("kind", "threshold", "planted"),
    [("absmax_above", 50.0, -60.0), ("absmax_above", 50.0, 40.0), ("nonfinite", None, float("inf"))],
)
def test_values_past_the_slots_or_of_another_dtype_are_read_with_the_slotted_ones(kind, threshold, planted):
    """A phase that outgrows its slots, or records float64 tensors (abs-max writes float32 slots only),
    keeps those values as 0-d tensors; the verdict reads both, and the next step has room for all."""
    raw = {"kind": kind} if threshold is None else {"kind": kind, "threshold": threshold}
    values = deferred_values.StepValues(Condition.parse(raw), "forward", recorder=None)  # type: ignore[arg-type]
    capacity = values.capacity
    tensors = [torch.randn(8) for _ in range(capacity)] + [torch.randn(8, dtype=torch.float64)]
    tensors[-2][5] = planted  # past the slots for abs-max (two a value), in the last one for NaN/Inf
    values.reduce([tensor.requires_grad_() for tensor in tensors])
    assert values.used == capacity and len(values.prompt) == len(tensors) - capacity // values.width
    hits = abs(planted) > (threshold or math.inf) or not math.isfinite(planted)
    assert values.verdict() is hits
    assert values.capacity > len(tensors) * values.width  # room next step
    values.reduce(tensors[:-1])
    assert values.used == (len(tensors) - 1) * values.width and values.prompt == []
    assert values.verdict() is hits


SHAPE_MIXES = {
    "same": [(8, 16)] * 6,
    "first dims differ": [(8, 16), (3, 16), (8, 16), (1, 16), (8, 16), (2, 16)],
    "other sizes": [(8, 16), (4, 4), (16,), (2, 3, 5), (8, 16), (7,)],
    "a 0-d one": [(8, 16), (8, 16), (), (8, 16), (8, 16), (8, 16)],
    "other dtypes": [(8, 16), (8, 16), (8, 16), (8, 16), (8, 16), (8, 16)],
}


@pytest.mark.parametrize("mix", list(SHAPE_MIXES))
@pytest.mark.parametrize(
    ("kind", "threshold", "planted"), [("absmax_above", 50.0, -60.0), ("nonfinite", None, math.nan)]
)
def test_a_flush_of_small_tensors_reads_every_value_whatever_their_shapes(mix, kind, threshold, planted):
    """A flush joins its small tensors (``torch.cat``, or flattened where cat refuses their shapes) and
    reduces them at once: a value planted in any one of them, of any shape, is seen, each flush."""
    raw = {"kind": kind} if threshold is None else {"kind": kind, "threshold": threshold}
    values = deferred_values.StepValues(Condition.parse(raw), "forward", recorder=None)  # type: ignore[arg-type]
    dtypes = [torch.float32, torch.float16, torch.float64, torch.bfloat16, torch.float32, torch.float32]
    for where in range(len(SHAPE_MIXES[mix])):
        tensors = [
            torch.rand(shape, dtype=dtypes[i] if mix == "other dtypes" else torch.float32)
            for i, shape in enumerate(SHAPE_MIXES[mix])
        ]
        values.refs, values.versions, values.owners = list(tensors), [t._version for t in tensors], [None] * 6
        values.flush()
        assert values.verdict() is False, "nothing planted yet"
        tensors[where].view(-1)[-1] = planted
        values.refs, values.versions, values.owners = list(tensors), [t._version for t in tensors], [None] * 6
        values.flush()
        assert values.verdict() is True, f"planted in the tensor of shape {tuple(tensors[where].shape)}"


@pytest.mark.parametrize(("kind", "stale"), [("absmax_above", 1e9), ("grad_norm_below", 0.0)])
def test_a_reduction_that_fails_leaves_its_slot_deciding_nothing_and_the_exact_test_decides(kind, stale):
    """The slot may hold the last step's value: a failed kernel must not let it through."""
    values = deferred_values.StepValues(Condition.parse({"kind": kind, "threshold": 1.0}), "backward", recorder=None)  # type: ignore[arg-type]
    values.slots.fill_(stale)

    def failing(*args, **kwargs):
        raise RuntimeError("kernel failed")

    with patch.object(values, "reducer", failing):
        values.reduce([torch.full((8,), 0.5) if kind == "absmax_above" else torch.full((8,), 2.0)])
        assert values.used == values.width
        assert values.verdict() is False  # neither the stale value nor the failed tensor hits
        values.reduce([torch.full((8,), 5.0) if kind == "absmax_above" else torch.full((8,), 0.01)])
        assert values.verdict() is True  # the exact test saw it


def test_collected_gradients_are_decided_at_the_verdict_and_leave_no_count_behind():
    """The gradients the C-level hook collected (one twice: both sides of a residual add) are reduced at
    the verdict, whether large or small, and the flush's byte count starts afresh after each."""
    values = deferred_values.StepValues(
        Condition.parse({"kind": "absmax_above", "threshold": 10.0}), "backward", recorder=None
    )  # type: ignore[arg-type]
    large = torch.full((deferred_values.PROMPT_MIN_NUMEL + 1,), 3.0)
    small = torch.full((8,), -20.0)
    values.pending.extend([large, large, torch.full((deferred_values.PROMPT_MIN_NUMEL + 1,), 5.0)])
    assert values.verdict() is False
    assert values.bytes == 0 and values.refs == []
    values.pending.extend([large, small])
    assert values.verdict() is True  # the small one's -20
    assert values.bytes == 0


class _ZeroesItsGradient(torch.autograd.Function):
    """Its backward changes the gradient it receives in place: a gradient hook's value, read later, is gone."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x * 1.0

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return grad.mul_(0.0)


class _ZeroesGradients(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.zero = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ZeroesItsGradient.apply(x) if self.zero else x * 1.0


def _steps(model: nn.Module, cond: dict, steps: int, before_step: Any) -> tuple[list[tuple], list[dict], Engine]:
    """``run``'s loop, with ``before_step(step)`` called before each step; the engine is left running."""
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m", model)
    hits: list = []
    engine.set_breakpoints(
        [{"id": "bp", "layer": "*", "phases": ["backward"], "condition": cond, "callback": hits.append}]
    )
    generator = torch.Generator().manual_seed(0)
    for step in range(steps):
        before_step(step)
        x = torch.randn(5, 4, generator=generator)
        loss = model(x)
        (loss if isinstance(loss, torch.Tensor) else loss[1]).sum().backward()
    seen = [(h.layer, h.phase, h.step) for h in hits]
    return seen, [e for e in events if e.get("type") == "notice"], engine


def test_a_collected_gradient_changed_in_place_before_the_check_is_still_caught():
    """From the second step the gradients are collected through the C-level hook and read at the end of
    the backward; the layer behind the watched one then zeroes the gradient it received in place."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), _ZeroesGradients(), nn.Linear(4, 4), nn.Linear(4, 1))
    with torch.no_grad():
        model[2].weight.fill_(1e3)  # the gradient reaching layer 2's input: ~1e3, above the threshold
    cond = {"kind": "absmax_above", "threshold": 100.0}

    found = {}
    for path in ("exact", "collected"):
        copied = copy.deepcopy(model)

        def zero_from_step_1(step: int, layer: nn.Module = copied[1]) -> None:
            layer.zero = step >= 1

        with exact_path() if path == "exact" else deferred_with("learned"):
            found[path], notices, engine = _steps(copied, cond, 3, zero_from_step_1)
            if path == "collected":
                values = next(iter(engine._breakpoints.deferred.recorders.values())).tracks[0].backward_values
                assert not values.collecting and not values.may_collect  # the Python hook from then on
            engine.shutdown()
    exact, collected = found["exact"], found["collected"]
    assert ("2", "backward", 1) in exact
    assert collected == exact, (collected, exact)
    assert not [n for n in notices if n.get("code") == "deferredNotReplayed"]


class _SideLoss(nn.Module):
    """Keeps an intermediate, which a loss can use without going through the model's output."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.head = nn.Linear(4, 1)
        self.side: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.side = self.body(x)
        return self.head(self.side)


@pytest.mark.parametrize("collect", [True, False])
def test_collected_gradients_whose_loss_bypassed_the_output_are_checked_at_the_next_forward(collect):
    """The root output's hook queues the end-of-backward check; a loss that bypasses the output (step 1)
    leaves the collected gradients unchecked until the next forward, which checks them as the Python
    hook's queued check would have: a possible hit that cannot be replayed, said for step 1."""
    torch.manual_seed(0)
    model = _SideLoss()
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m", model)
    cond = {"kind": "absmax_above", "threshold": 1e3}
    with deferred_with("learned", collect=collect):
        engine.set_breakpoints([{"id": "bp", "layer": "*", "phases": ["backward"], "condition": cond}])
        values = next(iter(engine._breakpoints.deferred.recorders.values())).tracks[0].backward_values
        for step in range(3):
            out = model(torch.randn(5, 4))
            assert values.collecting is (collect and step == 1)
            loss = model.side.sum() * 1e6 if step == 1 else out.sum()  # step 1: only the side loss
            loss.backward()
    engine.shutdown()
    notices = [e for e in events if e.get("type") == "notice" and e.get("code") == "deferredNotReplayed"]
    assert len(notices) == 1, notices
    assert "in step 1 of model m" in notices[0]["message"] and "did not flow through" in notices[0]["message"]
    assert not values.collecting
    assert hooks_left(model) == []
