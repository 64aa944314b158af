"""Panel images at stops: each is of the layer, tensor and step it names; backward stops have pictures;
the outputs of layers with a breakpoint are kept (only theirs, bounded); attention of an
nn.MultiheadAttention called with need_weights=False is recomputed without touching the run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from engine_models import Net, batch, hooks_left, outputs_alive_after_a_step, req
from torch import nn

from hookscope.debugger import stop
from hookscope.engine.core import Engine
from hookscope.hooks.kept_outputs import BreakpointOutputs
from hookscope.link.protocol_vocabulary import ERR_BAD_MESSAGE, ERR_NOT_AVAILABLE, ProtocolError
from hookscope.visuals import mha_weights


def render(engine: Engine, view: str = "featureMap", **fields: Any) -> dict:
    return req(engine, "render", view=view, **fields)


def render_error(engine: Engine, **fields: Any) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        render(engine, **fields)
    return info.value


def step(model: nn.Module, seed: int = 0) -> None:
    x, y = batch(seed)
    nn.functional.cross_entropy(model(x), y).backward()


@pytest.fixture
def at_stops(monkeypatch):
    """``at_stops(engine, look)``: every stop pauses as under a debugger, and ``look(engine, paused)``
    runs while paused (the agent thread's view of the stop); returns what each call returned."""

    def install(engine: Engine, look: Callable[[Engine, dict], Any]) -> list[Any]:
        seen: list[Any] = []
        monkeypatch.setattr(stop, "debugger_connected", lambda: True)
        monkeypatch.setattr(stop, "prepare", lambda *a, **k: object())
        monkeypatch.setattr(stop, "pause", lambda frame: seen.append(look(engine, engine._paused)))
        return seen

    return install


@pytest.fixture
def net():
    torch.manual_seed(0)
    model = Net()
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    yield model, engine
    engine.shutdown()
    assert hooks_left(model) == []


def test_a_backward_stop_shows_the_gradient_and_the_output_of_the_same_step(net, at_stops):
    model, engine = net
    engine.set_breakpoints([{"id": "b", "layer": "layer1.0.conv1", "phases": ["backward"]}])

    def look(engine: Engine, paused: dict) -> dict:
        return {
            "grad": render(engine, layer="layer1.0.conv1", tensor="grad_output"),
            "output": render(engine, layer="layer1.0.conv1", tensor="output"),
            "histogram": render(engine, "histogram", layer="layer1.0.conv1", tensor="grad_output[0]"),
        }

    seen = at_stops(engine, look)
    step(model)
    step(model, 1)
    assert len(seen) == 2
    for number, images in enumerate(seen):  # steps count from 0 (STEP_MEANING)
        assert images["grad"]["meta"]["of"] == {
            "layer": "layer1.0.conv1",
            "tensor": "grad_output[0]",
            "step": number,
            "phase": "backward",
        }
        assert images["grad"]["meta"]["layout"] == "grid"  # a 4-D gradient: a feature map of its channels
        assert images["output"]["meta"]["of"] == {
            "layer": "layer1.0.conv1",
            "tensor": "output",
            "step": number,
            "phase": "forward",
        }
        assert images["output"]["meta"]["shape"] == [4, 8, 8, 8]
        assert images["histogram"]["meta"]["of"]["tensor"] == "grad_output[0]"


def test_a_forward_stop_pictures_its_own_output_and_a_parameter_stop_its_gradient(net, at_stops):
    model, engine = net
    engine.set_breakpoints([{"id": "f", "layer": "fc1", "phases": ["forward", "param_grad"]}])
    seen = at_stops(
        engine,
        lambda e, paused: (
            paused["phase"],
            render(e, layer="fc1", tensor=("grad" if paused["phase"] == "param_grad" else "output"))["meta"],
        ),
    )
    step(model)
    forward = [meta for phase, meta in seen if phase == "forward"]
    grads = [meta for phase, meta in seen if phase == "param_grad"]
    assert forward[0]["of"] == {"layer": "fc1", "tensor": "output", "step": 0, "phase": "forward"}
    assert forward[0]["layout"] == "heatmap" and forward[0]["shape"] == [4, 16]  # 2-D: a heat map
    assert {m["of"]["tensor"] for m in grads} == {"weight.grad", "bias.grad"}


def test_gradients_are_pictured_only_at_a_stop_in_their_layer(net, at_stops):
    model, engine = net
    engine.set_breakpoints([{"id": "b", "layer": "fc2", "phases": ["backward"]}])
    seen = at_stops(engine, lambda e, paused: render_error(e, layer="fc1", tensor="grad_output"))
    step(model)
    assert "only while paused in fc1" in str(seen[0])
    assert render_error(engine, layer="fc2", tensor="weights").code == ERR_BAD_MESSAGE


def test_a_backward_nan_stop_in_a_layer_without_breakpoint_says_no_forward_was_kept_that_step(at_stops):
    torch.manual_seed(0)
    model = Net()
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_break_on_nonfinite(True)

    def look(engine: Engine, paused: dict) -> tuple[str, Any, Any]:
        layer = paused["layer"]
        try:
            output = render(engine, layer=layer, tensor="output")
        except ProtocolError as exc:
            output = exc
        return layer, render(engine, layer=layer, tensor="grad_output")["meta"]["of"], output

    seen = at_stops(engine, look)
    model.odd.planted = True
    step(model)
    layer, grad, output = seen[0]
    assert grad["layer"] == layer and grad["phase"] == "backward" and grad["tensor"].startswith("grad_output")
    assert isinstance(output, ProtocolError) and output.code == ERR_NOT_AVAILABLE
    assert f"no forward of {layer} was seen in step 0" in str(output)
    engine.shutdown()
    assert hooks_left(model) == []


def test_an_output_changed_in_place_after_the_layer_is_said_to_be(net, at_stops):
    model, engine = net  # layer1.0.bn1's output goes through ReLU(inplace=True)
    engine.set_breakpoints([{"id": "b", "layer": "layer1.0.bn1", "phases": ["backward"]}])
    seen = at_stops(engine, lambda e, paused: render(e, layer="layer1.0.bn1", tensor="output")["meta"]["of"])
    step(model)
    assert "changed in place" in seen[0]["note"]


def test_only_layers_with_a_breakpoint_keep_their_output_and_not_after_it_is_removed(net):
    model, engine = net
    layers = ["stem", "layer1.0.conv1", "layer1.1.conv1", "fc1", "fc2"]
    engine.set_breakpoints(
        [{"id": "b", "layer": "layer1.*.conv1", "phases": ["backward"], "callback": lambda hit: None}]
    )
    assert outputs_alive_after_a_step(model, layers) == ["layer1.0.conv1", "layer1.1.conv1"]
    assert render(engine, layer="layer1.1.conv1")["meta"]["of"]["step"] == 0  # live: the last forward
    engine.set_breakpoints([])
    assert outputs_alive_after_a_step(model, layers) == []
    assert engine.hook_count == 0 and hooks_left(model) == []


def test_kept_outputs_are_bounded_by_layers_and_bytes():
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(6)])
    kept = BreakpointOutputs(lambda m: 7, max_layers=3, max_bytes=10**9)
    kept.sync({("m", str(i)): model[i] for i in range(6)})
    model(torch.randn(8, 64))
    assert [layer for layer in map(str, range(6)) if kept.get("m", layer)] == ["3", "4", "5"]  # the last to run
    assert kept.get("m", "5").step == 7
    small = BreakpointOutputs(lambda m: 1, max_layers=8, max_bytes=3 * 8 * 64 * 4)
    small.sync({("m", str(i)): model[i] for i in range(6)})
    model(torch.randn(8, 64))
    assert [layer for layer in map(str, range(6)) if small.get("m", layer)] == ["3", "4", "5"]
    tiny = BreakpointOutputs(lambda m: 1, max_bytes=100)
    tiny.sync({("m", "0"): model[0]})
    model(torch.randn(8, 64))
    assert tiny.get("m", "0") is None and tiny.too_large("m", "0") == 8 * 64 * 4
    for keeper in (kept, small, tiny):
        assert keeper.clear() > 0
    assert not any(m._forward_hooks for m in model)


def test_a_keeping_hook_that_fails_never_raises_into_the_forward(monkeypatch):
    model = nn.Linear(4, 4)
    kept = BreakpointOutputs(lambda m: 1)
    kept.sync({("m", ""): model})
    monkeypatch.setattr("hookscope.hooks.kept_outputs.storage_bytes", lambda record: 1 / 0)
    assert model(torch.randn(2, 4)).shape == (2, 4)
    kept.clear()


class Attending(nn.Module):
    """Attention called as nn.TransformerEncoderLayer calls it: need_weights=False, masks by keyword."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, dropout=0.5, batch_first=True)
        self.head = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
        out, weights = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)
        assert weights is None
        return self.head(out).mean(1)


def attending_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    return torch.randn(2, 6, 16, generator=g), pad


def test_attention_asked_without_weights_is_recomputed_at_a_stop_with_the_calls_masks(at_stops):
    torch.manual_seed(0)
    model = Attending()
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_breakpoints([{"id": "a", "layer": "attn", "phases": ["forward", "backward"]}])

    def look(engine: Engine, paused: dict) -> dict:
        return render(engine, "attention", layer="attn", options={"head": "mean"})["meta"]

    seen = at_stops(engine, look)
    x, pad = attending_inputs(0)
    model(x, pad).sum().backward()
    forward, backward = seen
    for meta in seen:
        assert meta["of"]["layer"] == "attn" and meta["of"]["tensor"] == "attention weights"
        assert "need_weights=False" in meta["of"]["note"] and meta["heads"] == 4
    # The weights come from the call's own inputs and masks: the padded keys get no attention.
    args, kwargs = engine._bp_outputs.get("m", "attn").call
    weights = mha_weights(model.attn, args, kwargs)
    model.eval()
    own = model.attn(x, x, x, key_padding_mask=pad, need_weights=True, average_attn_weights=False)[1]
    torch.testing.assert_close(weights, own)
    assert float(weights[1, :, :, 4:].abs().max()) == 0.0
    engine.shutdown()
    assert hooks_left(model) == []


def test_attention_of_a_selected_layer_is_kept_with_its_call_when_live():
    torch.manual_seed(0)
    model = Attending()
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    req(engine, "watch", layers=["attn"], rateHz=1000.0)  # the panel shows this layer
    x, pad = attending_inputs(0)
    model(x, pad)
    meta = render(engine, "attention", layer="attn")["meta"]
    assert meta["of"]["tensor"] == "attention weights" and meta["of"]["step"] == 0
    engine.shutdown()
    assert hooks_left(model) == []


def test_recomputing_attention_leaves_the_training_run_bit_exact():
    def run(with_panel: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = Attending()
        engine = Engine(lambda e: None, shapes=False)
        engine.add_model("m", model)
        if with_panel:
            engine.set_breakpoints([{"id": "a", "layer": "attn", "phases": ["forward"], "callback": lambda hit: None}])
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(1)  # the dropout inside the attention draws from this stream
        losses = []
        for i in range(3):
            loss = model(*attending_inputs(i)).pow(2).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if with_panel:
                render(engine, "attention", layer="attn")
            losses.append(loss.detach())
        engine.shutdown()
        return losses + [p.detach().clone() for p in model.parameters()]

    for a, b in zip(run(False), run(True)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_only_probabilities_are_taken_as_attention_from_a_module_that_is_not_attention(at_stops):
    class HandWritten(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.score = nn.Linear(8, 8)
            self.softmax = nn.Softmax(dim=-1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.softmax(self.score(x) @ x.transpose(1, 2)) @ x

    torch.manual_seed(0)
    model = HandWritten()
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_breakpoints(
        [{"id": "s", "layer": "softmax", "phases": ["forward"]}, {"id": "l", "layer": "score", "phases": ["forward"]}]
    )

    def look(engine: Engine, paused: dict) -> Any:
        try:
            return render(engine, "attention", layer=paused["layer"])["meta"]["of"]
        except ProtocolError as exc:
            return str(exc)

    seen = at_stops(engine, look)
    model(torch.randn(2, 5, 8))
    score, softmax = seen
    assert "score returned no attention weights" in score
    assert softmax["layer"] == "softmax" and softmax["tensor"] == "output"
    engine.shutdown()


def test_without_numpy_or_matplotlib_a_picture_is_a_note_naming_the_packages_and_interpreter(net, monkeypatch):
    # The user's interpreter needs only torch: pictures say what they would need instead of failing.
    import importlib.util
    import sys

    from hookscope.engine import image_packages

    model, engine = net
    step(model)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real_find_spec(name, *a)
    )
    error = render_error(engine, layer="conv1", tensor="output")
    assert error.code == ERR_NOT_AVAILABLE
    assert str(error).startswith("Feature maps need matplotlib, which ") and sys.executable in str(error)
    assert f"{sys.executable} -m pip install matplotlib" in str(error)
    assert "Gradient-flow charts need matplotlib" in str(
        pytest.raises(ProtocolError, render, engine, "gradientFlow").value
    )
    assert image_packages.missing("histogram") == ["matplotlib"]
