"""torch.compile: what fires, what does not, and that Hookscope says so instead of failing silently.

Checked on torch 2.13 CPU (backend 'eager' here: dynamo's handling of hooks is the
same as with inductor, which needs ~70 s of C++ compilation on this machine):
hooks added to submodules of a compiled model after it was compiled never fire
(dynamo inlines the submodules and does not guard on their hook dicts); hooks on
the compiled root do; ``torch.compiler.set_stance("force_eager")`` makes every
hook fire again, and ``"default"`` restores compiled execution.
"""

from __future__ import annotations

import pytest
import torch
from reliability_support import hook_count
from torch import nn

from hookscope.engine import discovery
from hookscope.engine.core import Engine
from hookscope.link.protocol_vocabulary import ProtocolError


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.fixture
def eager_stance_restored():
    yield
    torch.compiler.set_stance("default")
    torch._dynamo.reset()


def _step(model, hits_before: int, events: list) -> int:
    x = torch.randn(4, 8)
    model(x).pow(2).mean().backward()
    return len([e for e in events if e["type"] == "hit"]) - hits_before


@pytest.mark.parametrize("how", ["wrapper", "in_place"])
def test_compiled_layers_are_marked_noticed_and_fire_when_run_eagerly(how, eager_stance_restored):
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = Net()
    if how == "wrapper":
        model: nn.Module = torch.compile(net, backend="eager")
        prefix = "_orig_mod."
    else:
        net.compile(backend="eager")
        model, prefix = net, ""
    model(torch.randn(4, 8))  # compiled before any Hookscope hook exists

    tree = discovery.describe("m1", model, "net")
    marks = {m["name"]: m.get("compiled", False) for m in tree["modules"]}
    assert marks[prefix + "fc1"] and marks[prefix + "fc2"], marks

    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m1", model)
    resolved = engine.set_breakpoints([{"id": "b", "layer": prefix + "fc1", "phases": ["forward"]}])
    assert resolved[0]["layers"] == [prefix + "fc1"]
    notices = [e for e in events if e["type"] == "notice" and e.get("code") == "compiled"]
    assert notices and "runCompiledEagerly" in notices[0]["message"], events

    # Compiled: the hook is installed but does not fire (what the notice says).
    assert _step(model, 0, events) == 0
    # Opt in to eager execution (the editor's setting sends this): the same hook fires,
    # the training code is unchanged.
    assert engine.handle({"type": "setCompiledEager", "id": 2, "enabled": True}) == {"enabled": True}
    fired = _step(model, 0, events)
    assert fired == 1
    hit = [e for e in events if e["type"] == "hit"][0]
    assert hit["layer"] == prefix + "fc1" and hit["pausing"] is False
    # While forced eager, setting the breakpoint again raises no notice.
    before = len(notices)
    engine.set_breakpoints([{"id": "b", "layer": prefix + "fc1", "phases": ["forward"]}])
    assert len([e for e in events if e["type"] == "notice" and e.get("code") == "compiled"]) == before
    # Off again: compiled execution is back and the hook is silent again.
    assert engine.handle({"type": "setCompiledEager", "id": 3, "enabled": False}) == {"enabled": False}
    assert _step(model, fired, events) == 0
    assert engine.shutdown() > 0 and hook_count(model) == 0


def test_eager_opt_in_is_undone_when_hookscope_goes_and_leaves_the_users_own_stance(eager_stance_restored):
    """The opt-in never outlives the session, and a stance the user set is theirs."""
    from torch._dynamo import eval_frame

    engine = Engine(lambda e: None, shapes=False)
    engine.handle({"type": "setCompiledEager", "id": 1, "enabled": True})
    assert eval_frame._stance.stance == "force_eager"
    engine.shutdown()  # the editor went away
    assert eval_frame._stance.stance == "default"

    torch.compiler.set_stance("force_eager")  # the user's own choice
    engine = Engine(lambda e: None, shapes=False)
    engine.handle({"type": "setCompiledEager", "id": 1, "enabled": True})
    engine.handle({"type": "setCompiledEager", "id": 2, "enabled": False})
    engine.shutdown()
    assert eval_frame._stance.stance == "force_eager", "Hookscope only undoes what it did"
    with pytest.raises(ProtocolError):
        engine.handle({"type": "setCompiledEager", "id": 3, "enabled": "yes"})


def test_root_hooks_of_a_compiled_model_fire(eager_stance_restored):
    """Break on NaN watches the root: it works on a compiled model without eager mode."""
    torch._dynamo.reset()
    net = Net()
    model = torch.compile(net, backend="eager")
    model(torch.randn(4, 8))
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m1", model)
    engine.handle({"type": "setBreakOnNonFinite", "id": 1, "enabled": True})
    x = torch.randn(4, 8)
    x[0, 0] = float("nan")
    model(x).pow(2).mean().backward()
    hits = [e for e in events if e["type"] == "hit"]
    assert hits and hits[0]["breakpoint"] == "nonfinite", events
    engine.shutdown()
    assert hook_count(model) == 0


def test_breakpoints_set_before_the_compiled_model_appears_are_noticed_once(eager_stance_restored):
    """The editor sends breakpoints before the program builds its model: the notice comes when the
    model is found, and breakpoints re-sent later (the editor does, on every model change) repeat nothing."""
    torch._dynamo.reset()
    model = torch.compile(Net(), backend="eager")
    model(torch.randn(4, 8))
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    spec = {"id": "b", "layer": "_orig_mod.fc1", "phases": ["forward"]}
    engine.set_breakpoints([spec])
    engine.add_model("m1", model)
    engine.set_breakpoints([spec])
    notices = [e for e in events if e["type"] == "notice" and e.get("code") == "compiled"]
    assert len(notices) == 1 and "_orig_mod.fc1" in notices[0]["message"], events
    engine.shutdown()
