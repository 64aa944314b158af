"""The editor goes away at any point of a step, and no Hookscope hook is left.

The agent notices on its own thread and removes every hook while the training thread is
wherever it was: inside a backward (a layer's backward hook is running), or paused at a layer
breakpoint (blocked in the stop). Hooks already taken by that step (a backward's hooks are
fixed when its forward ran) still run once, after the removal; they must not put anything
back. After the step: no hook on any module, parameter, or the reused leaf input, none
process-wide, none in the engine; training goes on bit-identical to a run without Hookscope.
(The first forward and the moments between steps are covered by
``test_a_shutdown_inside_the_first_forward_leaves_no_shape_hook`` and ``test_faults.py``.)
"""

from __future__ import annotations

import pytest
import torch
from reliability_support import (
    STEPS,
    SmallNet,
    arm_everything,
    assert_same_training,
    baseline,
    batches,
    global_hook_count,
    hook_count,
    params_of,
    train,
    wait_until,
)

from hookscope.debugger import stop
from hookscope.link.protocol_vocabulary import PHASES

DISCONNECT_STEP = 3


def leaf_input_data() -> list:
    """Batches that all feed the same input leaf, which requires grad: a hook on it would stay."""
    data = batches(STEPS)
    leaf = data[0][0].clone().requires_grad_(True)
    return [(leaf, y) for _, y in data]


def leaf_hooks(data: list) -> int:
    leaf = data[0][0]
    return len(leaf._backward_hooks or {}) + len(getattr(leaf, "_post_accumulate_grad_hooks", None) or {})


def connect_armed(link, live_agent, model, firing: dict):
    """A connected agent with every feature on, and ``firing``, a breakpoint that fires every step;
    returns the agent, its engine and the events the engine sends once ``after["disconnect"]`` is set."""
    agent = live_agent(link, model)
    conn = link.wait_connection(20)
    conn.wait_event("modelAdded", timeout=20)
    arm_everything(conn)
    conn.request(
        "setBreakpoints",
        breakpoints=[
            {
                "id": "all",
                "layer": "*",
                "phases": list(PHASES),
                "condition": {"kind": "absmax_above", "threshold": 1e30},
            },
            firing,
        ],
    )
    engine = agent._engine
    assert engine is not None and engine.hook_count > 0
    after: dict = {"disconnect": False, "events": []}
    emit = engine._emit_raw

    def recording(event: dict) -> None:
        if after["disconnect"]:
            after["events"].append(event.get("type"))
        emit(event)

    engine._emit_raw = recording
    return agent, engine, after


def assert_nothing_left(model, data, engine, user_hooks: int, globals_before: int) -> None:
    assert hook_count(model) == user_hooks, "a Hookscope hook is still on the model"
    assert leaf_hooks(data) == 0, "a Hookscope hook is still on the reused input"
    assert global_hook_count() == globals_before
    assert engine.hook_count == 0


def test_editor_gone_inside_a_backward_leaves_no_hook(link, live_agent):
    data = leaf_input_data()
    expected = baseline(SmallNet, data=[(x.detach().clone().requires_grad_(True), y) for x, y in data])
    globals_before = global_hook_count()
    torch.manual_seed(0)
    model = SmallNet()
    # shared's backward comes after the head's in the backward: it must not fire once the editor is gone
    agent, engine, after = connect_armed(
        link, live_agent, model, {"id": "f", "layer": "shared", "phases": ["backward", "param_grad"]}
    )
    step = [0]

    def inside_backward(module, grad_input, grad_output):  # the head's backward: the first of the step
        if step[0] == DISCONNECT_STEP and not after["disconnect"]:
            link.close()  # the editor goes away while this backward runs
            wait_until(
                lambda: not agent.connected and engine.hook_count == 0, timeout=15, what="the agent to remove the hooks"
            )
            after["disconnect"] = True

    user_hook = model.head.register_full_backward_hook(inside_backward)

    def on_step(i: int) -> None:
        step[0] = i + 1
        if i == DISCONNECT_STEP:
            assert after["disconnect"], "the disconnect happened inside the backward"
            assert_nothing_left(model, data, engine, 1, globals_before)

    losses = train(model, data, on_step)
    assert_nothing_left(model, data, engine, 1, globals_before)
    assert after["events"] == [], "Hookscope's hooks of that backward ran on after the editor was gone"
    user_hook.remove()
    assert hook_count(model) == 0
    assert_same_training((losses, params_of(model)), expected)


@pytest.mark.parametrize("phase", PHASES)
def test_editor_gone_while_paused_at_a_layer_breakpoint_leaves_no_hook(link, live_agent, monkeypatch, phase):
    data = leaf_input_data()
    expected = baseline(SmallNet, data=[(x.detach().clone().requires_grad_(True), y) for x, y in data])
    globals_before = global_hook_count()
    torch.manual_seed(0)
    model = SmallNet()
    paused: list[str] = []
    state: dict = {"armed": False}

    def pause(stop_frame) -> None:
        """The debugger's pause: the training thread blocks here until the user continues."""
        stop_frame.close()
        if not state["armed"]:
            return
        paused.append(phase)
        if len(paused) > 1:
            return  # a stop after the editor left: reported below
        link.close()  # the editor (and its debugger) goes away while the program is paused
        wait_until(
            lambda: not agent.connected and engine.hook_count == 0, timeout=15, what="the agent to remove the hooks"
        )
        after["disconnect"] = True

    monkeypatch.setattr(stop, "debugger_connected", lambda: True)
    monkeypatch.setattr(stop, "pause", pause)
    # shared runs twice per step: its second call (or the first's gradient) must not stop again
    agent, engine, after = connect_armed(link, live_agent, model, {"id": "p", "layer": "shared", "phases": [phase]})

    def on_step(i: int) -> None:
        if i == DISCONNECT_STEP - 1:
            state["armed"] = True
        if i == DISCONNECT_STEP:
            assert paused == [phase], "the disconnect happened while paused"
            assert_nothing_left(model, data, engine, 0, globals_before)

    losses = train(model, data, on_step)
    assert_nothing_left(model, data, engine, 0, globals_before)
    assert paused == [phase], "a stop after the editor was gone"
    assert "hit" not in after["events"] and "summaries" not in after["events"], after["events"]
    assert_same_training((losses, params_of(model)), expected)
