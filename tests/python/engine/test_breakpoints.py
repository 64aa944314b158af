"""Layer breakpoints: which layers a spec selects, conditions, hit counts, phases, hygiene."""

from __future__ import annotations

import math

import pytest
import torch
from engine_models import Block, Net, batch, hooks_left, line_of, train
from torch import nn

from hookscope.debugger.stop import BreakpointHit
from hookscope.engine.core import Engine


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = Net()
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m", model)
    yield model, engine, events
    engine.shutdown()
    assert hooks_left(model) == []


def set_bp(engine: Engine, hits: list, **spec) -> list[dict]:
    spec.setdefault("id", "bp")
    spec.setdefault("callback", hits.append)
    return engine.set_breakpoints([spec])


def step(model: nn.Module, seed: int = 0) -> None:
    x, y = batch(seed)
    nn.functional.cross_entropy(model(x), y).backward()


@pytest.mark.parametrize(
    "spec, layers",
    [
        ({"layer": "fc2"}, ["fc2"]),
        ({"layer": "layer1.*.conv1"}, ["layer1.0.conv1", "layer1.1.conv1"]),
        ({"cls": "BatchNorm2d"}, ["layer1.0.bn1", "layer1.1.bn1"]),
        ({"cls": "Linear", "layer": "fc*"}, ["fc1", "fc2"]),
    ],
)
def test_spec_selects_layers(setup, spec, layers):
    model, engine, _ = setup
    hits: list = []
    resolved = set_bp(engine, hits, **spec)
    assert resolved == [{"id": "bp", "layers": layers}]
    step(model)
    assert [h.layer for h in hits] == layers


def test_definition_line_selects_every_instance(setup):
    model, engine, _ = setup
    file, line = line_of(Block, "self.conv1 = nn.Conv2d(")
    hits: list = []
    resolved = set_bp(engine, hits, file=file, line=line)
    assert resolved[0]["layers"] == ["layer1.0.conv1", "layer1.1.conv1"]


def test_call_site_line_selects_the_called_layer(setup):
    model, engine, _ = setup
    hits: list = []
    file, line = line_of(Net, "x = self.act(self.fc1(x))")
    assert set_bp(engine, hits, file=file, line=line)[0]["layers"] == ["fc1", "act"]
    file, line = line_of(Block, "out = self.conv1(x)  # call site")
    assert set_bp(engine, hits, file=file, line=line)[0]["layers"] == ["layer1.0.conv1", "layer1.1.conv1"]


def test_calls_through_local_names_and_a_chosen_instance():
    from branch_models import Block, Gate, Stack

    model = Stack()
    engine = Engine(lambda _: None, shapes=False)
    engine.add_model("m", model)
    try:
        mix = [f"blocks.{i}.branches.mix" for i in range(3)]
        file, line = line_of(Block, 'mixed = b["mix"](h)')
        assert engine.set_breakpoints([{"id": "a", "file": file, "line": line}])[0]["layers"] == mix
        file, line = line_of(Gate, "return self.damp(torch.sigmoid(f(h)))")
        assert engine.set_breakpoints([{"id": "a", "file": file, "line": line}])[0]["layers"] == [
            f"blocks.{i}.branches.gate.{name}" for i in range(3) for name in ("lin", "damp")
        ]
        # The conditional definition line: every instance, whichever branch made it.
        file, line = line_of(Gate, "self.damp = Damp() if damp else nn.Identity()")
        assert engine.set_breakpoints([{"id": "a", "file": file, "line": line}])[0]["layers"] == [
            f"blocks.{i}.branches.gate.damp" for i in range(3)
        ]
        # One instance chosen among those of a line (what the editor sends after its QuickPick):
        # layer and line together select it alone, on a call line and on a definition line.
        hits: list = []
        resolved = engine.set_breakpoints(
            [{"id": "a", "file": file, "line": line, "layer": "blocks.2.branches.gate.damp", "callback": hits.append}]
        )
        assert resolved == [{"id": "a", "layers": ["blocks.2.branches.gate.damp"]}]
        file, line = line_of(Block, 'mixed = b["mix"](h)')
        resolved = engine.set_breakpoints(
            [{"id": "b", "file": file, "line": line, "layer": mix[1], "callback": hits.append}]
        )
        assert resolved == [{"id": "b", "layers": [mix[1]]}]
        model(torch.randn(2, 4))
        assert [h.layer for h in hits] == [mix[1]]
        resolved = engine.set_breakpoints([{"id": "a", "file": file, "line": line, "layer": "blocks.1.branches.gate"}])
        assert "matches no layer" in resolved[0]["error"]
        # The line that calls an instance's branch is the one naming it (b["gate"], not b["mix"]).
        index = engine._indexes["m"]
        assert index.call_site("blocks.2.branches.gate") == line_of(Block, 'gated = b["gate"](h)')
        assert index.call_site("blocks.2.branches.mix") == line_of(Block, 'mixed = b["mix"](h)')
        assert index.call_site("blocks.2") == line_of(Stack, "h = block(h)")
    finally:
        engine.shutdown()
    assert hooks_left(model) == []


def test_explicit_locations_are_used(setup):
    model, engine, _ = setup
    engine.add_model("m2", model, locations={"fc2": ("/src/net.py", 7)})
    resolved = engine.set_breakpoints([{"id": "x", "file": "/src/net.py", "line": 7, "model": "m2", "callback": print}])
    assert resolved[0]["layers"] == ["fc2"]
    engine.remove_model("m2")


def test_spec_matching_nothing_says_so(setup):
    model, engine, events = setup
    resolved = set_bp(engine, [], layer="nope*")
    assert "matches no layer" in resolved[0]["error"]
    assert any(e["type"] == "notice" and "matches no layer" in e["message"] for e in events)
    assert hooks_left(model) == []
    bad = engine.handle(
        {"type": "setBreakpoints", "id": 1, "breakpoints": [{"id": "b", "layer": "fc1", "phases": ["sideways"]}]}
    )
    assert "phases" in bad["resolved"][0]["error"]


def test_phases_and_their_locals(setup):
    model, engine, _ = setup
    hits: list = []
    set_bp(engine, hits, layer="layer1.0.relu", phases=["forward_pre", "forward", "backward"])
    step(model)
    assert [h.phase for h in hits] == ["forward_pre", "forward", "backward"]
    pre, fwd, bwd = hits
    assert pre.inputs[0].shape == (4, 8, 8, 8) and pre.output is None
    assert fwd.output.shape == (4, 8, 8, 8)
    assert bwd.grad_output[0].shape == (4, 8, 8, 8) and bwd.grad_input[0].shape == (4, 8, 8, 8)
    # in-place ReLU: the gradient reaching its input (taken before the in-place change) is the
    # output gradient masked where the ReLU was off
    assert torch.equal(bwd.grad_input[0], bwd.grad_output[0] * (fwd.output > 0))
    assert not torch.equal(bwd.grad_input[0], bwd.grad_output[0])
    assert bwd.reason == "Layer breakpoint: layer1.0.relu (backward)"


def test_backward_on_a_layer_followed_by_inplace_relu_does_not_break_training(setup):
    model, engine, _ = setup
    hits: list = []
    set_bp(engine, hits, cls="BatchNorm2d", phases=["backward"])
    step(model)  # a full backward hook here would raise "BackwardHookFunction ... modified inplace"
    assert [h.layer for h in hits] == ["layer1.1.bn1", "layer1.0.bn1"]  # backward order


def test_param_grad_phase(setup):
    model, engine, _ = setup
    hits: list = []
    set_bp(engine, hits, layer="fc2", phases=["param_grad"])
    step(model)
    assert sorted(h.param_name for h in hits) == ["bias", "weight"]
    weight = next(h for h in hits if h.param_name == "weight")
    assert torch.equal(weight.grad, model.fc2.weight.grad)
    assert weight.stats[0]["path"] == "weight.grad"


def test_nonfinite_condition_born_here_or_came_in(setup):
    model, engine, _ = setup
    hits: list = []
    engine.set_breakpoints([{"id": "a", "cls": "Linear", "condition": {"kind": "nonfinite"}, "callback": hits.append}])
    step(model)
    assert hits == []  # finite: does not fire
    with torch.no_grad():
        model.fc1.weight[0, 0] = float("nan")
    model(batch(0)[0])
    assert [(h.layer, h.origin) for h in hits] == [("fc1", "born here"), ("fc2", "came in through inputs")]
    assert "NaN" in hits[0].reason


@pytest.mark.parametrize(
    "kind, threshold, fires",
    [
        ("grad_norm_below", 1e9, True),
        ("grad_norm_below", 1e-12, False),
        ("grad_norm_above", 1e-12, True),
        ("grad_norm_above", 1e9, False),
    ],
)
def test_gradient_norm_conditions(setup, kind, threshold, fires):
    model, engine, _ = setup
    hits: list = []
    set_bp(engine, hits, layer="fc2", phases=["backward"], condition={"kind": kind, "threshold": threshold})
    step(model)
    assert len(hits) == (1 if fires else 0)
    if fires:
        assert ("vanishing" if kind.endswith("below") else "exploding") in hits[0].reason


def test_absmax_condition(setup):
    model, engine, _ = setup
    hits: list = []
    x, _ = batch(0)
    with torch.no_grad():
        expected = float(model.stem(x).abs().max())
    set_bp(engine, hits, layer="stem", condition={"kind": "absmax_above", "threshold": expected * 0.99})
    model(x)
    set_bp(engine, hits, layer="stem", condition={"kind": "absmax_above", "threshold": expected * 1.01})
    model(x)
    assert len(hits) == 1 and "abs-max" in hits[0].reason


def test_expression_condition_and_a_raising_expression(setup):
    model, engine, events = setup
    hits: list = []
    set_bp(engine, hits, layer="fc2", condition={"kind": "expression", "expression": "output.shape[1] == 5"})
    model(batch(0)[0])
    set_bp(engine, hits, layer="fc2", condition={"kind": "expression", "expression": "output.mean() > 1e9"})
    model(batch(0)[0])
    assert len(hits) == 1
    set_bp(engine, hits, layer="fc2", condition={"kind": "expression", "expression": "undefined_name > 1"})
    train(model, 2)  # never raises into training
    assert len(hits) == 1
    notices = [e for e in events if e["type"] == "notice" and e.get("code") == "conditionError"]
    assert len(notices) == 1 and "NameError" in notices[0]["message"]
    assert set_bp(engine, hits, layer="fc2", condition={"kind": "expression", "expression": "1 +"})[0]["error"]


def test_hit_count_and_every(setup):
    model, engine, _ = setup
    hits: list = []
    set_bp(engine, hits, layer="fc2", hitCount=3)
    for i in range(6):
        model(batch(i)[0])
    assert [h.step for h in hits] == [2]  # the third forward is step 2 (protocol.STEP_MEANING)
    hits.clear()
    set_bp(engine, hits, layer="fc2", every=2)
    for i in range(6):
        model(batch(i)[0])
    assert len(hits) == 3


def test_disabled_breakpoint_installs_nothing(setup):
    model, engine, _ = setup
    hits: list = []
    resolved = set_bp(engine, hits, layer="fc2", enabled=False)
    assert resolved[0]["layers"] == ["fc2"]
    assert hooks_left(model) == []
    model(batch(0)[0])
    assert hits == []


def test_log_and_raise_actions_without_a_debugger(setup):
    model, engine, events = setup
    engine.set_breakpoints([{"id": "l", "layer": "fc2"}])
    model(batch(0)[0])
    hit = next(e for e in events if e["type"] == "hit")
    assert hit["pausing"] is False and hit["layer"] == "fc2" and hit["phase"] == "forward"
    assert {s["path"] for s in hit["summaries"]} == {"inputs[0]", "output"}
    assert any(e["type"] == "notice" and "Layer breakpoint: fc2" in e["message"] for e in events)
    engine.set_breakpoints([{"id": "r", "layer": "fc2", "action": "raise"}])
    with pytest.raises(BreakpointHit, match="Layer breakpoint: fc2"):
        model(batch(0)[0])


def test_replacing_and_shutdown_leave_no_hook(setup):
    model, engine, _ = setup
    set_bp(engine, [], layer="*", phases=["forward_pre", "forward", "backward", "param_grad"])
    assert len(hooks_left(model)) > 20
    engine.set_breakpoints([])
    assert hooks_left(model) == []
    set_bp(engine, [], layer="*", phases=["forward", "backward", "param_grad"])
    step(model)
    assert engine.shutdown() > 0
    assert hooks_left(model) == []
    assert engine.hook_count == 0


def test_absmax_and_norm_of_odd_tensors():
    from hookscope.hooks.conditions import _absmax, _norm

    assert _absmax([torch.tensor([1.0, -5.0, 2.0])]) == 5.0  # the negative side wins
    assert _absmax([torch.tensor([3, -7])]) == 7  # integers
    assert _absmax([torch.tensor([60000.0, -1.0], dtype=torch.half)]) == 60000.0
    assert math.isnan(_absmax([torch.tensor([1.0, float("nan")])]))  # never "above" a threshold
    assert _absmax([torch.tensor([1.0]), torch.tensor([-9.0], dtype=torch.bfloat16)]) == 9.0
    assert _absmax([torch.tensor([True])]) == 0.0 and _absmax([]) == 0.0
    assert _norm([torch.full((4,), 60000.0, dtype=torch.half)]) == pytest.approx(120000.0)  # fp32, no overflow
    assert _norm([torch.tensor([3.0]), torch.tensor([4.0])]) == pytest.approx(5.0)


@pytest.mark.parametrize(
    "raw",
    [
        {"kind": "absmax_above", "threshold": 2.0},
        {"kind": "nonfinite"},
        {"kind": "grad_norm_above", "threshold": 2.0},
        {"kind": "grad_norm_below", "threshold": 2.0},
    ],
)
def test_the_cheap_reject_never_rejects_a_call_that_check_would_stop(raw):
    from hookscope.hooks.conditions import Condition, HookEvent

    condition = Condition.parse(raw)
    nan, inf = float("nan"), float("inf")
    values = [
        torch.tensor([1.0, -1.5]),
        torch.tensor([1.0, -3.0]),
        torch.tensor([nan, 1.0]),
        torch.tensor([inf]),
        torch.tensor([0.5], dtype=torch.half),
        torch.tensor([3, -1]),
        (torch.tensor([0.1]), None, torch.tensor([-2.5])),
        {"a": torch.tensor([1.0])},
        None,
    ]
    fields = {
        "forward": ("output", "inputs"),
        "forward_pre": ("inputs", None),
        "backward": ("grad_input", "grad_output"),
        "param_grad": ("grad", None),
    }
    for phase, (produced_name, received_name) in fields.items():
        for produced in values:
            for received in values if received_name else [None]:
                kwargs = {produced_name: produced, **({received_name: received} if received_name else {})}
                holds = condition.check(HookEvent("m", "l", nn.Identity(), phase, **kwargs))[0]
                if condition.rejects(phase, produced, received):
                    assert not holds, (raw, phase, produced, received)


def test_a_condition_that_fails_on_odd_tensors_reports_and_training_goes_on(setup):
    _, engine, events = setup
    model = nn.Sequential(nn.Linear(2, 2, device="meta"))  # values that cannot reach the host
    engine.add_model("meta", model)
    hits: list = []
    set_bp(engine, hits, layer="0", model="meta", condition={"kind": "absmax_above", "threshold": 1.0})
    model(torch.zeros(3, 2, device="meta"))  # no exception into the forward
    assert hits == []
    notices = [e for e in events if e["type"] == "notice" and e.get("code") == "conditionError"]
    assert len(notices) == 1 and "meta" in notices[0]["message"].lower()
    engine.remove_model("meta")
    assert hooks_left(model) == []


def test_backward_phase_hands_the_exact_gradients_also_for_inplace_layers_and_leaf_inputs(setup):
    _, engine, _ = setup
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2))
    engine.add_model("seq", model)
    hits: list = []
    set_bp(engine, hits, layer="[01]", model="seq", phases=["backward"])
    x = torch.randn(3, 4, requires_grad=True)  # a leaf input of layer 0
    model(x).square().sum().backward()
    by_layer = {h.layer: h for h in hits}
    assert sorted(by_layer) == ["0", "1"]
    # The reference: the same computation with retained gradients, ReLU out of place.
    h = model[0](x)
    h.retain_grad()
    r = torch.relu(h)
    r.retain_grad()
    x.grad = None
    model[2](r).square().sum().backward()
    relu = by_layer["1"]
    torch.testing.assert_close(relu.grad_output[0], r.grad)  # what reached the ReLU's output
    torch.testing.assert_close(relu.grad_input[0], h.grad)  # what its backward passed on (pre-in-place value)
    linear = by_layer["0"]
    torch.testing.assert_close(linear.grad_output[0], h.grad)
    torch.testing.assert_close(linear.grad_input[0], x.grad)
    engine.remove_model("seq")
    assert hooks_left(model) == []


def test_backward_on_a_layer_that_returns_its_input_unchanged_gets_its_output_gradient(setup):
    # nn.Identity (or dropout in eval mode) hands its input back: input and output are one tensor,
    # whose input hook runs first; the breakpoint must still see the output gradient.
    _, engine, _ = setup
    model = nn.Sequential(nn.Linear(4, 4), nn.Identity(), nn.Linear(4, 2))
    engine.add_model("seq", model)
    hits: list = []
    set_bp(
        engine,
        hits,
        layer="1",
        model="seq",
        phases=["backward"],
        condition={"kind": "grad_norm_above", "threshold": 0.0},
    )
    h = model[0](torch.randn(3, 4))
    h.retain_grad()
    model[2](model[1](h)).sum().backward()
    assert [hit.layer for hit in hits] == ["1"]
    torch.testing.assert_close(hits[0].grad_output[0], h.grad)
    torch.testing.assert_close(hits[0].grad_input[0], h.grad)
    engine.remove_model("seq")


@pytest.mark.parametrize(
    "spec",
    [
        {"condition": {"kind": "absmax_above", "threshold": 1e30}},  # the deferred path
        {"hitCount": 10**9},  # the exact path (and the outputs its stops keep)
    ],
    ids=["deferred", "exact"],
)
def test_a_breakpoint_on_every_layer_of_a_deep_model_walks_the_model_a_few_times_not_once_per_layer(monkeypatch, spec):
    # A walk per layer made `*` on a 1,000-layer stack take 2 s of the program's time (the agent holds the GIL).
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(300)))
    engine = Engine(lambda event: None, shapes=False)
    engine.add_model("m", model)
    walks = []
    named_modules = nn.Module.named_modules

    def counted(self, *args, **kwargs):
        if self is model:
            walks.append(1)
        return named_modules(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "named_modules", counted)
    [resolved] = engine.handle(
        {
            "type": "setBreakpoints",
            "breakpoints": [{"id": "bp", "layer": "*", "phases": ["forward", "backward"], **spec}],
        }
    )["resolved"]
    assert len(resolved["layers"]) == 301 and "error" not in resolved
    assert len(walks) < 10, f"{len(walks)} walks of the model for one breakpoint on 301 layers"
    model(torch.randn(2, 4)).sum().backward()  # the hooks are there and quiet
    engine.shutdown()
    assert hooks_left(model) == []
