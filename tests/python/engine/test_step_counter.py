"""The step count: the program's own step from the moment a model is found, with no hook on it."""

from __future__ import annotations

import copy
import gc
import io
import pickle

import pytest
import torch
from engine_models import Net, batch, hooks_left
from torch import nn

from hookscope.engine import step_counter
from hookscope.engine.core import Engine
from hookscope.hooks.conditions import REPLAY


def step(model: nn.Module, seed: int = 0) -> None:
    x, y = batch(seed)
    nn.functional.cross_entropy(model(x), y).backward()


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = Net()
    engine = Engine(lambda event: None, shapes=False)
    engine.add_model("m", model)
    yield model, engine
    engine.shutdown()
    assert hooks_left(model) == [] and "_compiled_call_impl" not in vars(model)


def stop_steps(engine: Engine, **spec) -> list:
    hits: list = []
    engine.set_breakpoints([{"id": "bp", "callback": hits.append, **spec}])
    return hits


def test_a_breakpoint_added_mid_run_reads_the_programs_step(setup):
    model, engine = setup
    for program_step in range(3):  # nothing watched: no hook on the model, the steps are counted all the same
        step(model, program_step)
        assert hooks_left(model) == [] and engine.hook_count == 0
    hits = stop_steps(engine, layer="fc2", phases=["forward", "backward"])
    for program_step in range(3, 5):
        step(model, program_step)
    assert [(h.phase, h.step) for h in hits] == [("forward", 3), ("backward", 3), ("forward", 4), ("backward", 4)]


def test_a_model_found_at_its_first_forward_counts_that_forward():
    """Discovery's first-forward hook runs inside the root's first call: the counter comes too late for
    it, and install counts it; a model found again inside a call the counter counted is not counted twice."""
    torch.manual_seed(0)
    model = Net()
    engine = Engine(lambda event: None, shapes=False)
    found = []

    def discover(module: nn.Module, args: tuple) -> None:
        if module is model and len(found) < 2:
            if found:  # the model found again (its structure changed): removed and added under its id
                engine.remove_model("m")
            engine.add_model("m", model)
            found.append(True)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(discover)
    try:
        hits = stop_steps(engine, layer="fc2")
        for program_step in range(4):
            step(model, program_step)
    finally:
        handle.remove()
        engine.shutdown()
    assert [h.step for h in hits] == [0, 1, 2, 3]


def test_replays_are_not_counted(setup):
    """A value condition on every layer replays the step it hits in; the next step still reads 1 more."""
    model, engine = setup
    hits = stop_steps(engine, layer="*", phases=["forward"], condition={"kind": "absmax_above", "threshold": 1e3})
    step(model, 0)
    with torch.no_grad():
        model.fc2.weight.mul_(1e6)  # from step 1 on, fc2's output is far above the threshold
    step(model, 1)
    engine.set_breakpoints([{"id": "next", "layer": "fc2", "callback": hits.append}])
    step(model, 2)
    # step 1: fc2 and the model itself (its output is fc2's), then the next breakpoint's step 2
    assert [(h.layer, h.step) for h in hits] == [("fc2", 1), ("", 1), ("fc2", 2)]


def test_the_counter_stays_out_of_copies_and_pickles(setup):
    model, engine = setup
    step(model)
    assert step_counter.counts(model, "m")
    twin = copy.deepcopy(model)
    assert "_compiled_call_impl" not in vars(twin)
    step(twin)  # the copy runs as a plain model: the original's count does not move
    assert engine._step_of("m") == 0
    restored = pickle.loads(pickle.dumps(model))
    assert "_compiled_call_impl" not in vars(restored)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    assert "_compiled_call_impl" not in vars(torch.load(buffer, weights_only=False))


def test_a_model_compiled_in_place_keeps_its_compiled_call(setup):
    model, engine = setup
    assert step_counter.compiled_call(model) is None  # the counter is not a compiled call
    other = Net()
    other.compile()  # torch's own use of the slot: left alone, and still seen as compiled
    compiled = vars(other)["_compiled_call_impl"]
    engine.add_model("other", other)
    assert vars(other)["_compiled_call_impl"] is compiled and step_counter.compiled_call(other) is compiled
    engine.remove_model("other")
    assert vars(other)["_compiled_call_impl"] is compiled


def test_removing_all_hooks_keeps_counting_steps(setup):
    """Remove All Hookscope Hooks takes every hook off; a breakpoint set after it still reads the program's step."""
    model, engine = setup
    hits = stop_steps(engine, layer="fc2")
    step(model, 0)
    assert engine.handle({"type": "removeHooks", "id": 1})["removed"] > 0
    assert hooks_left(model) == [] and engine.hook_count == 0
    step(model, 1)
    engine.set_breakpoints([{"id": "again", "layer": "fc2", "callback": hits.append}])
    step(model, 2)
    assert [h.step for h in hits] == [0, 2]


def test_the_counter_goes_with_the_model_and_with_the_engine(setup):
    model, engine = setup
    engine.remove_model("m")
    assert "_compiled_call_impl" not in vars(model)
    engine.add_model("m", model)
    assert step_counter.counts(model, "m")
    engine.shutdown()  # the fixture checks it is gone


def test_a_ridden_model_that_is_freed_is_forgotten():
    """``heal`` finds the ridden models through weak references: a model the program drops leaves
    nothing behind."""
    model = nn.Linear(2, 2)
    step_counter.install(model, "m", {}, REPLAY)
    ride = step_counter.ride(model, None, None, lambda: None)
    assert ride is not None and id(model) in step_counter._ridden
    key = id(model)
    del model, ride
    gc.collect()
    assert key not in step_counter._ridden
    step_counter.heal()  # nothing to hand back, nothing raised
