"""Break on NaN/Inf: the sentinel finds bad steps and the exact replay names the first layer."""

from __future__ import annotations

import copy

import pytest
import torch
from engine_models import Net, batch, hooks_left, train
from torch import nn

from hookscope.debugger.stop import BreakpointHit
from hookscope.engine.core import Engine


def make(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net()


def run_with_engine(model: Net, steps: int, plant: dict, optimizer: bool = True):
    events: list[dict] = []
    hits = []
    engine = Engine(events.append)
    engine.add_model("m", model)
    engine.set_break_on_nonfinite(True, action="callback", callback=hits.append)
    torch.manual_seed(123)
    losses = train(model, steps, plant, optimizer=optimizer)
    return engine, events, hits, losses


def sentinel_on(model: nn.Module) -> tuple[Engine, list]:
    """An engine with break on NaN on for ``model`` ("m"), its hits collected by a callback."""
    hits: list = []
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_break_on_nonfinite(True, action="callback", callback=hits.append)
    return engine, hits


def plant_forward_nan(model: Net) -> None:
    with torch.no_grad():
        model.fc1.weight[3, 5] = float("nan")


def plant_backward_nan(model: Net) -> None:
    model.odd.planted = True


def assert_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)


def test_forward_nan_found_in_the_layer_that_produced_it_with_exact_replay():
    model = make()
    # The user's own hook records what fc1 really produced in the failing step.
    seen: dict[int, torch.Tensor] = {}
    counter = {"calls": 0}

    def record(module, args, output):
        counter["calls"] += 1
        seen[counter["calls"]] = output.detach().clone()

    model.fc1.register_forward_hook(record)
    engine, events, hits, _ = run_with_engine(model, 6, {3: plant_forward_nan})

    assert len(hits) == 1, [h.reason for h in hits]
    hit = hits[0]
    assert (hit.layer, hit.phase, hit.origin) == ("fc1", "forward", "born here")
    assert "first produced in layer fc1 (forward)" in hit.reason and "NaN" in hit.reason
    assert hit.breakpoint == "nonfinite"
    # step 3 is the 4th forward call; the replay's output is bit-identical to the
    # original (same dropout mask, same BatchNorm statistics): call 4 is the original forward.
    assert_same([hit.output], [seen[4]])
    hit_events = [e for e in events if e["type"] == "hit"]
    assert hit_events[0]["layer"] == "fc1" and hit_events[0]["origin"] == "born here"
    assert hit_events[0]["step"] == 3 and hit_events[0]["pausing"] is False  # the script's step 3
    assert any(s["path"] == "output" and s["nan"] > 0 for s in hit_events[0]["summaries"])
    engine.shutdown()
    assert hooks_left(model) == ["fc1._forward_hooks"]  # only the user's own hook stays


def test_training_is_unchanged_by_the_sentinel_and_the_replay():
    reference = make()
    watched = copy.deepcopy(reference)
    torch.manual_seed(123)
    ref_losses = train(reference, 6, {3: plant_forward_nan})
    engine, _, hits, losses = run_with_engine(watched, 6, {3: plant_forward_nan})
    assert hits
    assert_same([torch.tensor(losses)], [torch.tensor(ref_losses)])
    assert_same(list(watched.parameters()), list(reference.parameters()))
    assert_same(list(watched.buffers()), list(reference.buffers()))
    engine.shutdown()


def test_backward_only_nan_found_in_the_layer_whose_backward_made_it():
    reference = make()
    model = copy.deepcopy(reference)
    engine, events, hits, losses = run_with_engine(model, 5, {2: plant_backward_nan})
    assert len(hits) == 1, [h.reason for h in hits]
    hit = hits[0]
    assert (hit.layer, hit.phase, hit.origin) == ("odd", "backward", "born here")
    assert "(backward)" in hit.reason
    grad_in = [g for g in hit.grad_input if g is not None]
    assert grad_in and torch.isnan(grad_in[0]).all()
    assert all(torch.isfinite(g).all() for g in hit.grad_output if g is not None)
    # The replay restored .grad: the optimizer saw exactly what it would have seen.
    torch.manual_seed(123)
    ref_losses = train(reference, 5, {2: plant_backward_nan})
    assert_same([torch.tensor(losses)], [torch.tensor(ref_losses)])
    assert_same(list(model.parameters()), list(reference.parameters()))
    engine.shutdown()
    assert hooks_left(model) == []


def test_backward_nan_without_an_optimizer_is_found_by_the_end_of_backward_check():
    model = make()
    engine, _, hits, _ = run_with_engine(model, 4, {1: plant_backward_nan}, optimizer=False)
    assert [(h.layer, h.phase) for h in hits] == [("odd", "backward")]
    engine.shutdown()


def test_nan_from_the_loss_is_reported_at_the_model_output():
    model = make()
    engine, hits = sentinel_on(model)
    x, _ = batch(0)
    out = model(x)
    (out.sum() * torch.tensor(float("nan"))).backward()
    assert len(hits) == 1
    assert (hits[0].layer, hits[0].origin) == ("", "came in from the loss")
    assert torch.isnan(hits[0].grad_output[0]).all()
    engine.shutdown()


def test_nan_in_the_inputs_is_reported_as_coming_in_through_them():
    model = make()
    engine, hits = sentinel_on(model)
    x, _ = batch(0)
    x[0, 0, 0, 0] = float("inf")
    model(x)
    assert len(hits) == 1
    assert (hits[0].layer, hits[0].phase, hits[0].origin) == ("", "forward_pre", "came in through inputs")
    assert "+Inf" in hits[0].reason
    engine.shutdown()


def test_nan_made_between_layers_is_blamed_on_the_parent_code():
    class Between(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Linear(4, 2)

        def forward(self, x):
            return self.b(torch.log(self.a(x) - 1e6))  # log of a negative number, not in a layer

    model = Between()
    engine, hits = sentinel_on(model)
    model(torch.randn(3, 4))
    assert len(hits) == 1
    assert (hits[0].layer, hits[0].origin) == ("b", "came in through inputs")
    assert "code in the model's forward between layers" in hits[0].reason
    engine.shutdown()


def test_reports_once_until_a_clean_step_then_again():
    model = make()
    engine, _, hits, _ = run_with_engine(model, 6, {2: plant_forward_nan})
    assert len(hits) == 1  # weights stay NaN after step 2: one report, not one per step
    engine.shutdown()


def test_after_a_stop_it_fires_at_the_next_new_nan_and_is_quiet_while_the_weights_are_nan():
    """REARM_RULE: one stop per step; a later bad step stops again when the weights are finite;
    while they hold NaN/Inf it is quiet (one notice) until a clean step re-arms it (one notice)."""
    from hookscope.engine.replay.nonfinite import REARM_RULE
    from hookscope.link import protocol

    model = make()
    engine, events, hits, _ = run_with_engine(model, 0, {})
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(10):
        x, y = batch(step)
        if step in (2, 3, 9):
            x[0, 0, 0, 0] = float("nan")  # a bad batch: the weights stay finite (the update is skipped)
        if step == 5:
            plant_forward_nan(model)  # the weights themselves go bad...
        if step == 8:
            with torch.no_grad():
                model.fc1.weight[3, 5] = 0.0  # ...until the user repairs them
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if torch.isfinite(loss):  # the GradScaler way: no update from a bad step
            opt.step()
        opt.zero_grad()

    # Steps 2 and 3 both stop (each once, although its backward is bad too); 6 and 7 are quiet.
    assert [h.step for h in hits] == [2, 3, 5, 9], [(h.step, h.reason) for h in hits]
    notices = [(e["code"], e["message"]) for e in events if e["type"] == "notice"]
    quiet = [m for c, m in notices if c == "nonfiniteQuiet"]
    rearmed = [m for c, m in notices if c == "nonfiniteRearmed"]
    assert len(quiet) == 1 and "from step 6" in quiet[0] and "fc1.weight hold NaN/Inf" in quiet[0], quiet
    assert len(rearmed) == 1 and "step 8 ran clean" in rearmed[0], rearmed
    hit_events = [e for e in events if e["type"] == "hit"]
    assert all(e["rearm"] == REARM_RULE for e in hit_events)
    for event in hit_events:
        protocol.validate(event)
    engine.shutdown()
    assert hooks_left(model) == []


def test_raise_action_names_the_layer():
    model = make()
    engine = Engine(lambda e: None)
    engine.add_model("m", model)
    engine.set_break_on_nonfinite(True, action="raise")
    plant_forward_nan(model)
    x, _ = batch(0)
    with pytest.raises(BreakpointHit) as info:
        model(x)
    assert info.value.layer == "fc1"
    engine.shutdown()
    assert hooks_left(model) == []


def test_no_hooks_when_off_and_none_left_after_turning_off():
    model = make()
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    assert hooks_left(model) == []
    engine.set_break_on_nonfinite(True)
    left = hooks_left(model)
    # the root's check rides its step counter (no root hook), and no layer has a forward hook
    assert "<root> step counter riders" in left and "global optimizer pre hooks" in left
    assert not any(m._forward_hooks for m in model.modules()) and not model._forward_pre_hooks
    engine.set_break_on_nonfinite(False)
    assert hooks_left(model) == []


def test_a_root_whose_counter_is_displaced_is_hooked_instead_and_still_checked():
    """The root's check rides its step counter; ``model.compile()`` after Hookscope found the model puts
    torch's call in that slot. At the next optimizer step the sentinel and the engine's step hook move
    to root hooks, and a NaN is still found in its layer."""
    model = make()
    engine, hits = sentinel_on(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train_step(seed: int) -> None:
        x, y = batch(seed)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    train_step(0)
    assert not model._forward_pre_hooks and not model._forward_hooks
    taken = model._call_impl  # what model.compile() puts there, without compiling: another call implementation
    vars(model)["_compiled_call_impl"] = taken
    train_step(1)  # its forward ran unseen: the optimizer hook finds the rides lost
    assert len(model._forward_pre_hooks) == 2 and len(model._forward_hooks) == 1
    plant_forward_nan(model)
    train_step(2)
    assert [(h.layer, h.phase) for h in hits] == [("fc1", "forward")]
    engine.shutdown()
    assert hooks_left(model) == [] and vars(model)["_compiled_call_impl"] is taken


def test_idle_models_cost_one_look_for_a_lost_counter_per_optimizer_step(monkeypatch):
    """Copies that never run forward (an EMA of the weights, a frozen teacher) are idle at every
    optimizer step; whether a counter was lost is asked once per step, not once per idle model
    (each look runs over every ridden model: with seven models it cost the stack of ten a tenth
    of its step under debugpy). A NaN in the model that trains is still found in its layer."""
    from hookscope.engine import step_counter

    model = make()
    engine, hits = sentinel_on(model)
    for n in range(3):
        engine.add_model(f"ema{n}", copy.deepcopy(model))
    looks = []
    heal = step_counter.heal
    monkeypatch.setattr(step_counter, "heal", lambda: looks.append(1) or heal())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for seed in range(4):
        x, y = batch(seed)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    assert len(looks) == 4
    plant_forward_nan(model)
    train(model, steps=1)
    assert [(h.layer, h.phase) for h in hits] == [("fc1", "forward")]
    engine.shutdown()
    assert hooks_left(model) == []


def test_the_replay_sees_the_inputs_the_users_own_root_pre_hook_saw():
    """The step is recorded before the root's own forward pre-hooks run (the check rides the step
    counter): the replay calls the root with the program's inputs and the user's hook changes them
    once, as in the step. Recorded after that hook, they were changed twice and the NaN went away."""

    class Shifted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sqrt(self.inner(x) - 3.0)  # NaN where the input was shifted once (2 - 3 < 0)

    model = Shifted()
    with torch.no_grad():
        model.inner.weight.copy_(torch.eye(4))
        model.inner.bias.zero_()
    model.register_forward_pre_hook(lambda module, args: (args[0] * 2.0,))  # the user's own input transform
    engine, hits = sentinel_on(model)
    model(torch.ones(2, 4))  # shifted once: 2, NaN; shifted twice it would be 4, finite
    [hit] = hits
    assert (hit.layer, hit.phase, hit.origin) == ("", "forward", "born here"), hit.reason
    engine.shutdown()


def test_the_gradient_check_is_exact_where_a_sum_or_norm_overflows_and_for_odd_dtypes():
    from hookscope.engine.replay.nonfinite_sentinel import grads_finite

    nan, inf = float("nan"), float("inf")
    big = torch.full((64,), 60000.0, dtype=torch.half)  # finite, but its norm is far above fp16's max
    huge = torch.full((64,), 3e38)  # finite fp32, but its sum and its norm overflow
    assert torch.isinf(torch._foreach_norm([big])[0])
    for flat, norm, half in (([big], [], True), ([], [big], False), ([], [big], True), ([huge], [huge], False)):
        assert grads_finite(flat, norm, half)
    for bad in (nan, inf, -inf):
        t = torch.tensor([1.0, bad])
        assert not grads_finite([t, torch.ones(3)], [big], True)  # in the flattened group
        assert not grads_finite([torch.ones(3)], [big, t])  # in the norm group
    assert grads_finite([], [])
    assert grads_finite([torch.ones(2)], [torch.arange(3)])  # an integer tensor falls back, and is skipped
    assert not grads_finite([torch.tensor([nan])], [torch.arange(3)])
    assert not grads_finite([torch.ones(2, dtype=torch.float64), torch.tensor([nan], dtype=torch.half)], [])


def test_the_forward_check_is_exact_for_a_huge_finite_output_and_odd_output_dtypes():
    class Emit(nn.Module):
        """Returns a fixed tensor: a finite fp32 one whose sum overflows, fp16, or integers."""

        def __init__(self, value: torch.Tensor) -> None:
            super().__init__()
            self.value = value

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.value

    hits = []
    engine = Engine(lambda e: None, shapes=False)
    engine.set_break_on_nonfinite(True, action="callback", callback=hits.append)
    cases = {
        "huge": torch.full((8,), 3e38),
        "half": torch.full((4,), 60000.0, dtype=torch.half),
        "ints": torch.arange(3),
        "half nan": torch.tensor([1.0, float("nan")], dtype=torch.half),
        "fp32 inf": torch.tensor([1.0, float("inf")]),
    }
    models = {name: Emit(value) for name, value in cases.items()}
    for name, model in models.items():
        engine.add_model(name, model)
        model(torch.ones(1))
    named = {id(model): name for name, model in models.items()}
    assert sorted(named[id(h.module)] for h in hits) == ["fp32 inf", "half nan"], [h.reason for h in hits]
    engine.shutdown()


def test_the_users_own_hooks_on_the_output_and_the_sentinels_do_not_disturb_each_other():
    model = make()
    engine, hits = sentinel_on(model)
    x, _ = batch(0)
    out = model(x)
    seen = []
    removed = out.register_hook(lambda grad: seen.append("removed"))
    kept = out.register_hook(lambda grad: seen.append(grad))
    removed.remove()  # the user's handle removes the user's hook only
    (out.sum() * torch.tensor(float("nan"))).backward()
    assert [(h.layer, h.origin) for h in hits] == [("", "came in from the loss")]
    assert len(seen) == 1 and torch.isnan(seen[0]).all()
    kept.remove()
    engine.shutdown()


def test_a_buffer_added_to_a_model_that_had_none_is_put_back_for_the_replay():
    class Countdown(nn.Module):
        """Divides by a buffer it counts down each call: Inf at the fourth call, only with that buffer."""

        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("denominator", torch.tensor(3.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x / self.denominator.clone()  # a copy: the division saves it for the backward
            with torch.no_grad():
                self.denominator -= 1
            return y

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4))
    engine, hits = sentinel_on(model)
    model(torch.randn(2, 4)).sum().backward()  # the sentinel learns the model has no buffer
    out = model(torch.randn(2, 4))
    model.append(Countdown())  # between a forward and its backward: the gradient check sees it first
    out.sum().backward()
    for _ in range(4):
        model(torch.randn(2, 4) + 10).sum().backward()
    # the replay ran with the denominator as it was before the bad forward (0), not after it (-1)
    assert [(h.layer, h.phase, h.origin) for h in hits] == [("1", "forward", "born here")], [h.reason for h in hits]
    assert model[1].denominator.item() == -1.0  # and training's own value was put back after it
    engine.shutdown()


def test_two_watched_roots_sharing_one_output_each_see_its_gradient():
    class Wrapper(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)  # the inner root's output, handed back as it is

    inner = nn.Linear(4, 2)
    outer = Wrapper(inner)
    hits = []
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("inner", inner)
    engine.add_model("outer", outer)
    engine.set_break_on_nonfinite(True, action="callback", callback=hits.append)
    (outer(torch.randn(3, 4)).sum() * torch.tensor(float("nan"))).backward()
    assert sorted((type(h.module).__name__, h.origin) for h in hits) == [
        ("Linear", "came in from the loss"),
        ("Wrapper", "came in from the loss"),
    ], [h.reason for h in hits]
    engine.shutdown()


def test_armed_from_inside_the_first_forward_a_nan_in_that_step_is_found():
    """Discovery's first-forward flush (a global forward pre-hook) adds a model created and called
    at once: the sentinel lands while that call is starting and still checks it exactly."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    model = make()
    plant_forward_nan(model)
    hits: list = []
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.set_break_on_nonfinite(True, action="callback", callback=hits.append)

    def first_forward(module, args):
        if module is model and "m" not in engine._indexes:
            engine.add_model("m", model)

    handle = register_module_forward_pre_hook(first_forward)
    try:
        model(batch(0)[0])
    finally:
        handle.remove()
    assert [(h.layer, h.phase) for h in hits] == [("fc1", "forward")], events
    assert not [e for e in events if e["type"] == "notice" and e["level"] != "info"], events
    engine.shutdown()
    assert hooks_left(model) == []


def test_hooks_landing_in_the_middle_of_a_forward_leave_that_call_alone_and_check_the_next():
    """Turned on from another thread while a forward runs: no half-state replay, no error, and the
    next forward is checked."""
    model = make()
    hits: list = []
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m", model)

    def turn_on_mid_forward(module, args, output):
        if not engine._nonfinite_enabled:
            engine.set_break_on_nonfinite(True, action="callback", callback=hits.append)

    handle = model.layer1.register_forward_hook(turn_on_mid_forward)
    plant_forward_nan(model)
    model(batch(0)[0])  # the root's pre-hook never ran for this call
    handle.remove()
    assert hits == [] and not [e for e in events if e["type"] == "notice"], events
    model(batch(1)[0])
    assert [(h.layer, h.phase) for h in hits] == [("fc1", "forward")]
    engine.shutdown()
    assert hooks_left(model) == []


class _Gen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.log = _Log()

    def forward(self, x):
        return self.fc(self.log(x))


class _Log(nn.Module):
    def forward(self, x):
        return torch.log(x)  # NaN where x < 0


class _Pair(nn.Module):
    """A GAN-style wrapper: the loop calls pair.disc(pair.gen(z)); forward runs only sometimes."""

    def __init__(self) -> None:
        super().__init__()
        self.gen = _Gen()
        self.disc = nn.Linear(4, 1)

    def forward(self, z):
        return self.disc(self.gen(z))


def test_sub_models_the_loop_calls_directly_are_watched():
    torch.manual_seed(0)
    pair = _Pair()
    engine, hits = sentinel_on(pair)
    pair.disc(pair.gen(torch.rand(3, 4) + 1.0)).sum().backward()  # clean
    assert hits == []
    pair.disc(pair.gen(-torch.rand(3, 4) - 1.0))  # log of negatives, born in gen.log
    assert [(h.layer, h.phase) for h in hits] == [("gen.log", "forward")]
    assert "torch.log" in hits[0].reason
    engine.shutdown()
    assert hooks_left(pair) == []


def test_a_child_called_through_the_root_and_on_its_own_is_checked_once_per_call():
    torch.manual_seed(0)
    pair = _Pair()
    engine, hits = sentinel_on(pair)
    pair.gen(torch.rand(3, 4) + 1.0)  # on its own, clean: gen gets a sentinel of its own
    pair(-torch.rand(3, 4) - 1.0)  # through the root: the root's sentinel reports, gen's stays quiet
    assert [(h.layer, h.phase) for h in hits] == [("gen.log", "forward")]
    pair.gen(-torch.rand(3, 4) - 1.0)  # on its own again, a new step: reported by gen's sentinel
    assert [(h.layer, h.phase) for h in hits] == [("gen.log", "forward")] * 2
    engine.shutdown()
    assert hooks_left(pair) == []


def test_a_backward_nan_in_a_sub_model_called_directly_is_found():
    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gen = nn.Sequential(nn.Linear(4, 4), _Flat())
            self.disc = nn.Linear(4, 1)

    torch.manual_seed(0)
    pair = Root()
    engine, hits = sentinel_on(pair)
    pair.disc(pair.gen(torch.randn(3, 4))).sum().backward()
    assert [(h.layer, h.phase) for h in hits] == [("gen.1", "backward")], [h.reason for h in hits]
    assert "SqrtBackward0" in hits[0].reason
    engine.shutdown()
    assert hooks_left(pair) == []


class _Flat(nn.Module):
    def forward(self, x):
        return torch.sqrt(x * 0.0)  # sqrt(0) = 0, its gradient +Inf
