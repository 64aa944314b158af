"""Hookscope's hooks are invisible to copying and pickling the user's model (issue 22, point 3).

EMA copies, best-model copies, ``AveragedModel`` and whole-model checkpoints are everyday
code: with every Hookscope feature on, ``copy.deepcopy``, ``pickle``/``torch.save`` of the
model work, and a copy carries no Hookscope hook.
"""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from engine_models import Net, batch, hooks_left, req
from torch import nn
from torch.optim.swa_utils import AveragedModel

from hookscope.engine.core import Engine


def every_feature(engine: Engine) -> None:
    req(
        engine,
        "setBreakpoints",
        breakpoints=[
            {"id": "f", "layer": "fc1", "phases": ["forward_pre", "forward"], "action": "log"},
            {"id": "b", "layer": "layer1.0.conv1", "phases": ["backward"], "action": "log"},
            {"id": "p", "layer": "fc2", "phases": ["param_grad"], "action": "log"},
            {"id": "c", "layer": "*", "phases": ["forward"], "condition": {"kind": "nonfinite"}, "action": "log"},
        ],
    )
    req(engine, "setBreakOnNonFinite", enabled=True)
    req(engine, "watch", layers=["fc1", "layer1.0"], rateHz=1000.0)
    req(engine, "addIntervention", layer="fc1", kind="scale", value=1.0)


@pytest.fixture
def watched():
    torch.manual_seed(0)
    model = Net()
    events: list[dict] = []
    engine = Engine(events.append)
    engine.add_model("m", model)
    every_feature(engine)
    x, y = batch(0)
    nn.functional.cross_entropy(model(x), y).backward()  # hooks installed and used once
    assert hooks_left(model), "the features are on: the model carries Hookscope's hooks"
    yield model, engine
    engine.shutdown()
    assert hooks_left(model) == []


def copied_hooks(model: nn.Module) -> list[str]:
    """Hooks on the model's modules and parameters (the process-wide ones belong to no copy)."""
    return [h for h in hooks_left(model) if not h.startswith("global ")]


def same_outputs(a: nn.Module, b: nn.Module) -> None:
    x = batch(3)[0]
    a.eval(), b.eval()
    with torch.no_grad():
        torch.testing.assert_close(a(x), b(x))


def test_deepcopy_works_and_the_copy_carries_no_hookscope_hook(watched):
    model, _ = watched
    twin = copy.deepcopy(model)
    assert copied_hooks(twin) == []
    same_outputs(model, twin)


def test_pickle_and_torch_save_of_the_whole_model_work(watched):
    model, _ = watched
    restored = pickle.loads(pickle.dumps(model))
    assert copied_hooks(restored) == []
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert copied_hooks(loaded) == []
    same_outputs(model, loaded)


def test_averaged_model_works(watched):
    model, _ = watched
    ema = AveragedModel(model)
    ema.update_parameters(model)
    assert copied_hooks(ema.module) == []
    same_outputs(model, ema.module)


def test_the_users_own_hooks_are_copied_as_torch_copies_them(watched):
    model, _ = watched
    calls = []
    handle = model.fc2.register_forward_hook(_UserHook(calls))
    twin = copy.deepcopy(model)
    handle.remove()
    [user_hook] = twin.fc2._forward_hooks.values()
    assert isinstance(user_hook, _UserHook) and user_hook.calls is not calls  # deep-copied, as torch does
    twin(batch(0)[0])
    assert user_hook.calls == [1] and calls == []
    # The original keeps Hookscope's hooks: the copy did not touch it.
    assert model.fc2._forward_hooks


class _UserHook:
    """A user's picklable hook (a module-level class)."""

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def __call__(self, module, args, output) -> None:
        self.calls.append(1)


def test_the_python_apis_hooks_stay_out_of_copies_too():
    import hookscope

    torch.manual_seed(0)
    model = Net()
    with hookscope.stop_on_nonfinite(model):
        twin = copy.deepcopy(model)
        restored = pickle.loads(pickle.dumps(model))
    assert copied_hooks(twin) == [] and copied_hooks(restored) == []
