"""Engine requests: watch, summaries, parameter gradients, shapes, render, interventions, hygiene."""

from __future__ import annotations

import copy
import time
import types

import pytest
import torch
from engine_models import Net, batch, hooks_left, outputs_alive_after_a_step, req, train
from torch import nn

from hookscope.engine.core import Engine
from hookscope.link import protocol
from hookscope.link.protocol_vocabulary import (
    ERR_BAD_MESSAGE,
    ERR_NOT_AVAILABLE,
    ERR_UNKNOWN_LAYER,
    ERR_UNKNOWN_TYPE,
    ProtocolError,
)


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = Net()
    events: list[dict] = []
    engine = Engine(events.append)
    engine.add_model("m", model)
    yield model, engine, events
    engine.shutdown()
    assert hooks_left(model) == []


def step(model: nn.Module, seed: int = 0) -> None:
    x, y = batch(seed)
    nn.functional.cross_entropy(model(x), y).backward()


def test_shapes_once_then_no_hook(setup):
    model, engine, events = setup
    model(batch(0)[0])
    shapes = [e for e in events if e["type"] == "shapes"]
    assert len(shapes) == 1 and shapes[0]["shapes"]["fc2"] == [4, 5] and shapes[0]["shapes"][""] == [4, 5]
    assert shapes[0]["shapes"]["layer1.0.conv1"] == [4, 8, 8, 8]
    assert hooks_left(model) == []  # nothing watched: no Hookscope hook at all
    model(batch(1)[0])
    assert len([e for e in events if e["type"] == "shapes"]) == 1


def test_a_shutdown_inside_the_first_forward_leaves_no_shape_hook():
    """The editor goes away while the one-shot shape capture's per-layer hooks are on."""
    torch.manual_seed(0)
    model = Net()
    engine = Engine(lambda event: None)
    engine.add_model("m", model)
    calls = []

    def disconnect_once(module, args, output):
        if not calls:
            calls.append(engine.shutdown())

    handle = model.layer1.register_forward_hook(disconnect_once)
    model(batch(0)[0])
    handle.remove()
    assert calls and calls[0] > 2, "the shutdown removed the per-layer shape hooks with the root's"
    assert hooks_left(model) == []
    model(batch(1)[0])
    assert hooks_left(model) == []


@pytest.mark.parametrize(
    "where",
    [
        {"layer": "fc1", "phases": ["forward"]},
        {"cls": "Net", "phases": ["forward_pre"]},
        {"cls": "Net", "phases": ["forward"]},
    ],
)
def test_a_shutdown_while_stopped_in_a_hook_never_raises_into_training(where):
    """The editor goes away while the program is stopped in a layer breakpoint's hook. torch's loop over
    that module's hooks already holds Hookscope's later ones; removing them takes them out of the
    module's ``with_kwargs`` set, so torch calls them without ``kwargs``: they must stay quiet."""
    torch.manual_seed(0)
    model = Net()
    engine = Engine(lambda event: None)
    engine.add_model("m", model)
    removed: list[int] = []
    # registered first: the watch, break on NaN and the engine's root hook come after it in each loop
    engine.set_breakpoints([{"id": "p", **where, "callback": lambda hit: removed or removed.append(engine.shutdown())}])
    req(engine, "setBreakOnNonFinite", enabled=True)
    req(engine, "watch", layers=["fc1"], rateHz=1000.0)
    x, y = batch(0)
    nn.functional.cross_entropy(model(x), y).backward()  # raised TypeError: hook() missing ... 'output'
    assert removed and removed[0] > 0
    assert hooks_left(model) == []
    step(model, 1)
    assert hooks_left(model) == []


def test_watch_streams_forward_and_backward_summaries(setup):
    model, engine, events = setup
    assert req(engine, "watch", layers=["fc1", "layer1.0"], rateHz=1000.0) == {"layers": ["fc1", "layer1.0"]}
    step(model)
    got = [(e["layer"], e["phase"]) for e in events if e["type"] == "summaries"]
    assert ("fc1", "forward") in got and ("fc1", "backward") in got and ("layer1.0", "forward") in got
    fwd = next(e for e in events if e["type"] == "summaries" and e["layer"] == "fc1")
    protocol.validate(fwd)
    assert {t["path"] for t in fwd["tensors"]} == {"inputs[0]", "output"} and fwd["step"] == 0  # the first forward
    body = req(engine, "getSummaries", layer="fc1")
    paths = {t["path"] for t in body["tensors"]}
    assert {"inputs[0]", "output", "grad_output", "weight.grad", "bias.grad"} <= paths
    assert body["step"] == 0
    assert req(engine, "watch", layers=[]) == {"layers": []}
    model(batch(0)[0])
    assert hooks_left(model) == []


def test_watch_rate_limits(setup):
    model, engine, events = setup
    req(engine, "watch", layers=["fc2"], rateHz=0.001)  # at most once in 1000 s
    for i in range(5):
        model(batch(i)[0])
    assert len([e for e in events if e["type"] == "summaries" and e["phase"] == "forward"]) == 1


def wait_until_a_sample_is_due(engine: Engine, deadline_s: float = 5.0) -> None:
    """A condition with a deadline, not a fixed wait."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < engine._arm_at and time.monotonic() < deadline:
        time.sleep(0.005)


def test_between_samples_no_hook_sits_on_a_watched_layer_and_the_next_forward_puts_them_back(setup, monkeypatch):
    model, engine, events = setup
    now = fake_engine_clock(monkeypatch)  # a loaded machine's slow step must not make a sample due
    layers = ["stem", "layer1.0", "fc1", "fc2"]
    req(engine, "watch", layers=layers, rateHz=4.0)  # the panel's rate: a sample every 250 ms
    assert all(model.get_submodule(name)._forward_hooks for name in layers), "armed: the first forward samples"
    step(model)
    assert not any(model.get_submodule(name)._forward_hooks for name in layers), "sampled: off until due"
    step(model, 1)  # not due yet: no summary
    assert len([e for e in events if e["type"] == "summaries" and e["phase"] == "forward"]) == len(layers)
    now[0] += 0.3  # a sample is due
    step(model, 2)  # the root's forward-pre puts the hooks back before the layers run
    forward = [e["layer"] for e in events if e["type"] == "summaries" and e["phase"] == "forward"]
    assert sorted(forward) == sorted(layers * 2)


def test_the_layers_of_a_model_are_sampled_in_the_same_steps(setup, monkeypatch):
    """At the panel's 4 Hz and a step every 10 ms (the engine's clock is a fake one the test moves
    on, so a loaded machine does not turn every step into a sample), every layer is sampled in the
    same steps."""
    model, engine, events = setup
    now = fake_engine_clock(monkeypatch)
    layers = [name for name, _ in model.named_modules() if name]
    req(engine, "watch", layers=layers, rateHz=4.0)
    for seed in range(120):
        step(model, seed)
        now[0] += 0.01
    sampled: dict[int, set[str]] = {}
    for e in events:
        if e["type"] == "summaries" and e["phase"] == "forward":
            sampled.setdefault(e["step"], set()).add(e["layer"])
    assert 4 <= len(sampled) < 20, f"several samples, not every step: {sorted(sampled)}"
    assert all(got == set(layers) for got in sampled.values()), {s: len(v) for s, v in sampled.items()}


def fake_engine_clock(monkeypatch) -> list[float]:
    """The engine's clocks (monotonic and perf_counter) read ``now[0]``, which the test moves on."""
    from hookscope.engine import step_hooks, watches

    now = [1000.0]
    clock = types.SimpleNamespace(monotonic=lambda: now[0], perf_counter=lambda: now[0])
    for engine_mod in (watches, step_hooks):  # the modules of the engine that read the clock
        monkeypatch.setattr(engine_mod, "time", clock)
    return now


def test_the_layers_stay_in_the_same_steps_when_summarising_them_takes_longer_than_the_interval(setup, monkeypatch):
    """A round of summaries slower than the watch interval (big activations, a slow machine) must
    not split the layers over two steps for good. The engine's clock is a fake one that each
    summary moves on by 20 ms: one round over 16 layers then takes 320 ms, the interval 50 ms."""
    from hookscope.hooks import summaries

    model, engine, events = setup
    now = fake_engine_clock(monkeypatch)
    summarize_many = summaries.summarize_many

    def slow_summaries(tensors):
        now[0] += 0.02
        return summarize_many(tensors)

    monkeypatch.setattr(summaries, "summarize_many", slow_summaries)
    layers = [name for name, _ in model.named_modules() if name]
    req(engine, "watch", layers=layers, rateHz=20.0)
    for seed in range(12):
        step(model, seed)
        now[0] += 0.001  # the rest of the step
    sampled: dict[int, set[str]] = {}
    for e in events:
        if e["type"] == "summaries" and e["phase"] == "forward":
            sampled.setdefault(e["step"], set()).add(e["layer"])
    assert len(sampled) >= 2, sampled
    assert all(got == set(layers) for got in sampled.values()), {s: len(v) for s, v in sampled.items()}


def test_the_agent_tick_rearms_a_watch_whose_layer_is_called_without_the_root(setup):
    model, engine, events = setup
    req(engine, "watch", layers=["fc1"], rateHz=4.0)
    x = torch.randn(2, 32)
    model.fc1(x)  # the root's forward never runs in this loop
    wait_until_a_sample_is_due(engine)
    model.fc1(x)  # due, but nothing put the hook back yet
    assert len([e for e in events if e["type"] == "summaries"]) == 1
    engine.tick()  # what the agent thread does every 0.25 s
    model.fc1(x)
    assert len([e for e in events if e["type"] == "summaries" and e["phase"] == "forward"]) == 2


def test_watching_costly_layers_slows_their_refresh_to_keep_within_the_budget(setup, monkeypatch):
    """Summaries that cost more than the budget allows at the panel's rate: every layer still
    refreshes, all at a slower pace, and the user is told how slow (once)."""

    from hookscope.hooks import summaries

    model, engine, events = setup
    now = fake_engine_clock(monkeypatch)  # each summary moves it on by 4 ms, each step by 1 ms
    real = summaries.summarize_many

    def costly(pairs):  # as if each summary reduced a large activation
        now[0] += 0.004
        return real(pairs)

    monkeypatch.setattr(summaries, "summarize_many", costly)
    layers = [name for name, _ in model.named_modules() if name]
    req(engine, "watch", layers=layers, rateHz=1000.0)
    started, steps = now[0], 0
    while now[0] - started < 1.5:
        step(model, steps)
        now[0] += 0.001
        steps += 1
    forward = [e["layer"] for e in events if e["type"] == "summaries" and e["phase"] == "forward"]
    assert set(forward) == set(layers), "every watched layer refreshes"
    # At 1000 Hz every step would summarise every layer; the budget allows about one round here
    # (a layer measured before the others may go twice while the round's cost is still unknown).
    assert max(forward.count(layer) for layer in layers) <= 2 < steps, (steps, forward)
    throttled = [e for e in events if e["type"] == "notice" and e.get("code") == "watchThrottled"]
    assert len(throttled) == 1 and f"{len(layers)} watched layers" in throttled[0]["message"], throttled


def test_the_budget_counts_putting_the_hooks_back_too(setup, monkeypatch):
    """Free summaries but costly re-arming (a thousand hooks put back every round): the budget
    slows the refresh for what the round really costs, not only for the summaries. The
    engine's clock is a fake one that each hook put back moves on by 10 ms."""
    model, engine, events = setup
    now = fake_engine_clock(monkeypatch)
    arm = engine._arm

    def costly_arm(watch):
        now[0] += 0.01
        arm(watch)

    monkeypatch.setattr(engine, "_arm", costly_arm)
    layers = ["stem", "layer1.0", "fc1", "fc2"]
    req(engine, "watch", layers=layers, rateHz=20.0)  # a round every 50 ms if sampling were free
    for seed in range(200):
        step(model, seed)
        now[0] += 0.01  # a 10 ms step: 2 s in all
    rounds = {e["step"] for e in events if e["type"] == "summaries" and e["phase"] == "forward"}
    # re-arming costs 40 ms a round: within 4% that is a round per second, not 40 in 2 s
    assert 2 <= len(rounds) <= 4, sorted(rounds)


def test_unknown_layer_and_model_are_clear_errors(setup):
    _, engine, _ = setup
    with pytest.raises(ProtocolError) as info:
        req(engine, "watch", layers=["nope"])
    assert info.value.code == ERR_UNKNOWN_LAYER and "nope" in str(info.value)
    with pytest.raises(ProtocolError) as info:
        req(engine, "getSummaries", layer="fc1", model="other")
    assert info.value.code == ERR_UNKNOWN_LAYER
    with pytest.raises(ProtocolError) as info:
        engine.handle({"type": "frobnicate", "id": 3})
    assert info.value.code == ERR_UNKNOWN_TYPE


def test_param_grads_in_one_pass(setup):
    model, engine, _ = setup
    step(model)
    params = req(engine, "getParamGrads")["params"]
    by_name = {p["name"]: p for p in params}
    assert set(by_name) == {n for n, p in model.named_parameters() if p.grad is not None}
    w = model.fc2.weight.grad
    assert by_name["fc2.weight"]["norm"] == pytest.approx(float(w.norm()), rel=1e-6)
    assert by_name["fc2.weight"]["absmax"] == pytest.approx(float(w.abs().max()))
    assert by_name["fc2.weight"]["shape"] == [5, 16] and by_name["fc2.weight"]["nan"] == 0


def test_training_is_bit_exact_with_everything_watched():
    torch.manual_seed(0)
    reference = Net()
    watched = copy.deepcopy(reference)
    torch.manual_seed(5)
    ref_losses = train(reference, 4)
    engine = Engine(lambda e: None)
    engine.add_model("m", watched)
    engine.handle({"type": "watch", "id": 1, "layers": [n for n, _ in watched.named_modules()], "rateHz": 1e6})
    engine.set_breakpoints(
        [{"id": "a", "layer": "*", "phases": ["forward", "backward", "param_grad"], "callback": lambda hit: None}]
    )
    engine.set_break_on_nonfinite(True)
    torch.manual_seed(5)
    losses = train(watched, 4)
    assert losses == ref_losses
    for a, b in zip(watched.parameters(), reference.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(watched.buffers(), reference.buffers()):
        assert torch.equal(a, b)
    assert engine.handle({"type": "removeHooks", "id": 2})["removed"] > 0
    assert hooks_left(watched) == []


def test_remove_model_drops_its_hooks(setup):
    model, engine, _ = setup
    req(engine, "watch", layers=["fc1"])
    engine.set_breakpoints([{"id": "a", "layer": "fc2"}])
    engine.set_break_on_nonfinite(True)
    engine.remove_model("m")
    assert hooks_left(model) == []
    assert engine.hook_count == 0


def test_render_feature_map_captures_on_demand(setup):
    model, engine, _ = setup
    with pytest.raises(ProtocolError) as info:
        req(engine, "render", view="featureMap", layer="stem")
    assert info.value.code == ERR_NOT_AVAILABLE and "next forward" in str(info.value)
    model(batch(0)[0])
    body = req(engine, "render", view="featureMap", layer="stem")
    assert body["png"].startswith(b"\x89PNG") and body["width"] > 0
    body = req(engine, "render", view="histogram", layer="stem")
    assert body["png"].startswith(b"\x89PNG")
    step(model)
    assert req(engine, "render", view="gradientFlow")["png"].startswith(b"\x89PNG")


def test_a_watch_keeps_no_activation_alive_and_a_render_keeps_only_the_last_few_rendered(setup):
    from hookscope.engine.renders import RENDERED_LAYERS_KEPT

    model, engine, _ = setup
    layers = ["stem", "layer1.0", "layer1.1", "pool", "fc1", "fc2"]
    req(engine, "watch", layers=layers, rateHz=1000.0)
    assert outputs_alive_after_a_step(model, layers) == [], "summaries alone retain nothing"
    with pytest.raises(ProtocolError) as info:
        req(engine, "render", view="featureMap", layer="stem")  # the panel shows stem: kept from now on
    assert info.value.code == ERR_NOT_AVAILABLE
    assert outputs_alive_after_a_step(model, layers) == ["stem"]
    assert req(engine, "render", view="featureMap", layer="stem")["png"].startswith(b"\x89PNG")
    rendered = ["stem", "layer1.0", "layer1.1", "pool", "fc1"]  # one more than are kept
    for name in rendered[1:]:
        with pytest.raises(ProtocolError):
            req(engine, "render", view="histogram", layer=name)
    assert outputs_alive_after_a_step(model, layers) == rendered[-RENDERED_LAYERS_KEPT:]


def test_a_watch_of_a_few_layers_renders_at_once(setup):
    model, engine, _ = setup
    req(engine, "watch", layers=["stem"], rateHz=1000.0)  # what the panel does for its target layer
    step(model)
    assert req(engine, "render", view="featureMap", layer="stem")["png"].startswith(b"\x89PNG")


def test_interventions_are_routed_and_removed(setup):
    model, engine, _ = setup
    x = batch(0)[0]
    model.eval()
    iv = req(engine, "addIntervention", layer="fc1", kind="scale", value=0.0)["id"]
    with torch.no_grad():
        out = model(x)
    expected = model.fc2(torch.tanh(torch.zeros(4, 16)))
    assert torch.allclose(out, expected)
    assert [i["id"] for i in req(engine, "listInterventions")["interventions"]] == [iv]
    assert req(engine, "removeIntervention", intervention=iv) == {"removed": 1}
    with pytest.raises(ProtocolError) as info:
        req(engine, "addIntervention", layer="fc1", kind="explode")
    assert info.value.code == ERR_BAD_MESSAGE


def test_breakpoints_and_watches_set_earlier_see_the_intervened_output(setup):
    """An intervention acts like an edit of the layer: hooks registered before it see its result."""
    model, engine, events = setup
    req(engine, "watch", layers=["fc1"], rateHz=1000.0)
    req(engine, "setBreakpoints", breakpoints=[{"id": "b", "layer": "fc1", "phases": ["forward"], "action": "log"}])
    req(engine, "addIntervention", layer="fc1", kind="scale", value=0.0)
    step(model)
    hit = next(e for e in events if e["type"] == "hit")
    watched = next(e for e in events if e["type"] == "summaries" and e["phase"] == "forward")
    for tensors in (hit["summaries"], watched["tensors"]):
        output = next(t for t in tensors if t["path"] == "output")
        assert output["zeroFrac"] == 1.0 and output["max"] == 0.0
    req(engine, "removeIntervention")
    req(engine, "setBreakpoints", breakpoints=[])
    req(engine, "watch", layers=[])


def test_list_hooks_routes_to_the_inventory(setup):
    model, engine, _ = setup
    engine.set_breakpoints([{"id": "a", "layer": "fc2"}])
    hooks = req(engine, "listHooks")["hooks"]
    assert any(h["module"].endswith("fc2") or h["module"] == "fc2" for h in hooks)


def test_inspect_value_needs_a_pause(setup):
    _, engine, _ = setup
    with pytest.raises(ProtocolError) as info:
        req(engine, "inspectValue", expression="output")
    assert info.value.code == ERR_NOT_AVAILABLE


def test_a_bug_inside_a_handler_is_not_called_a_bad_message(setup, monkeypatch):
    """An internal KeyError is Hookscope's bug: it leaves the engine as itself (the agent answers
    'internal' and logs the traceback), not as a badMessage blaming the editor."""
    _, engine, _ = setup

    def broken(request):
        return {}["missing"]

    monkeypatch.setattr(engine, "_req_listHooks", broken)
    with pytest.raises(KeyError):
        req(engine, "listHooks")
