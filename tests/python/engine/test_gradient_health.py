"""Break on exploding and vanishing gradients: the end-of-backward check names the layer and parameter."""

from __future__ import annotations

import pytest
import torch
from engine_models import hooks_left
from torch import nn

from hookscope.engine.core import Engine
from hookscope.link.bounds import check_bounds
from hookscope.terminal.cli import build_parser


class Chain(nn.Module):
    """Three layers; ``damp`` scales what reaches ``first`` (tiny: its gradients vanish)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 8)
        self.middle = nn.Linear(8, 8)
        self.last = nn.Linear(8, 2)
        self.damp = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.tanh(self.middle(self.first(x) * self.damp)))


@pytest.fixture
def setup():
    torch.manual_seed(0)
    model = Chain()
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m", model)
    yield model, engine, events
    engine.shutdown()
    assert hooks_left(model) == []


def step(model: nn.Module, scale: float = 1.0) -> None:
    model.zero_grad()
    (model(torch.randn(3, 4)).sum() * scale).backward()


def hits(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "hit"]


def test_exploding_names_the_parameter_with_the_largest_gradient_norm_and_shows_the_profile(setup):
    model, engine, events = setup
    engine.handle({"type": "setBreakOnGradients", "id": 1, "exploding": 100.0})
    step(model)
    assert hits(events) == []
    step(model, scale=1e4)
    [hit] = hits(events)
    norms = {name: float(p.grad.norm()) for name, p in model.named_parameters()}
    worst = max(norms, key=norms.get)
    assert hit["breakpoint"] == "gradients" and hit["phase"] == "param_grad"
    assert hit["layer"] == worst.rpartition(".")[0] and worst in hit["reason"]
    assert f"{norms[worst]:.4g}" in hit["reason"] and "> 100" in hit["reason"]
    assert hit["view"] == "gradientFlow"
    assert hit["viewOptions"] == {"metric": "norm", "highlight": hit["layer"], "exploding": 100.0}
    # the view it names renders the step's per-layer norms, the stopped layer marked
    render = {"type": "render", "id": 2, "view": "gradientFlow", "options": hit["viewOptions"]}
    check_bounds(render)  # the panel asks with these options: the agent's bounds let them through
    image = engine.handle(render)
    layers = {layer["name"]: layer for layer in image["meta"]["layers"]}
    assert layers[hit["layer"]]["status"] == "exploding" and image["meta"]["highlight"] == hit["layer"]


def test_vanishing_names_the_layer_whose_gradient_norm_is_below(setup):
    model, engine, events = setup
    engine.set_gradient_health(None, 1e-7)
    model.damp = 1e-12  # what first produces barely reaches the loss: its gradients vanish
    step(model)
    [hit] = hits(events)
    assert hit["layer"] == "first" and "Vanishing gradient: layer first" in hit["reason"]
    assert hit["viewOptions"]["vanishing"] == 1e-7


@pytest.mark.parametrize("vanishing", [None, 1e-7])
def test_one_stop_per_crossing_then_quiet_until_a_step_runs_within_the_thresholds(setup, monkeypatch, vanishing):
    """Exploding alone, and beside vanishing (the other path). While quiet, a crossing is not
    described: no pass over every parameter's name in a step that will not stop."""
    from hookscope.engine.replay.grad_health import HealthCheck

    described: list[str] = []
    explain = HealthCheck._exploding
    monkeypatch.setattr(HealthCheck, "_exploding", lambda *a: described.append("exploding") or explain(*a))
    model, engine, events = setup
    engine.set_gradient_health(100.0, vanishing)
    for scale in (1e4, 1e4, 1.0, 1e4):
        step(model, scale)
    assert len(hits(events)) == 2  # the first crossing, then again after the clean step
    assert described == ["exploding", "exploding"]  # the second step crossed too, quietly
    assert all("stops again" in h["rearm"] for h in hits(events))


def test_only_the_health_switches_on_a_nan_is_not_theirs_and_off_removes_every_hook(setup):
    model, engine, events = setup
    engine.set_gradient_health(100.0, 1e-30)
    with torch.no_grad():
        model.middle.weight[0, 0] = float("nan")
    step(model)
    assert hits(events) == []  # break on NaN/Inf is off
    engine.set_gradient_health(None, None)
    assert engine.hook_count == 0 and hooks_left(model) == []


def test_thresholds_are_validated():
    engine = Engine(lambda e: None, shapes=False)
    for bad in (0, -1.0, float("inf"), True, "big"):
        with pytest.raises(ValueError):
            engine.set_gradient_health(bad, None)


@pytest.mark.parametrize("vanishing", [None, 1e-30])
@pytest.mark.parametrize("where", ["weight", "gradient"])
def test_with_break_on_nan_the_nan_stop_comes_first(setup, vanishing, where):
    """Exploding alone, and with vanishing (whose per-parameter sums carry a NaN through their max);
    a bad weight (the forward check), a NaN made in one parameter's gradient (the gradient check)."""
    model, engine, events = setup
    engine.set_break_on_nonfinite(True)
    engine.set_gradient_health(100.0, vanishing)
    if where == "weight":
        with torch.no_grad():
            model.last.weight[0, 0] = float("inf")
    else:
        user_hook = model.middle.bias.register_hook(lambda grad: grad * float("nan"))
    step(model)
    assert [h["breakpoint"] for h in hits(events)] == ["nonfinite"]
    if where == "gradient":
        user_hook.remove()  # the user's own: the fixture counts what is left


def test_the_cli_takes_the_thresholds():
    args = build_parser().parse_args(["run", "--break-on-exploding", "100", "--break-on-vanishing", "1e-7", "train.py"])
    assert (args.break_on_exploding, args.break_on_vanishing) == (100.0, 1e-7)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--break-on-exploding", "-3", "train.py"])


def test_exploding_is_each_parameter_s_norm_not_their_sum(setup):
    """The small gradients' joint norm only bounds each one's: above the threshold it must not stop by itself."""
    model, engine, events = setup
    torch.manual_seed(5)
    step(model)
    norms = sorted(float(p.grad.norm()) for p in model.parameters())
    joint = sum(n * n for n in norms) ** 0.5
    assert joint > norms[-1] * 1.01
    engine.set_gradient_health((norms[-1] + joint) / 2, None)  # above every parameter's norm, below their joint one
    torch.manual_seed(5)
    step(model)  # the same gradients
    assert hits(events) == []
    engine.set_gradient_health(norms[-1] * 0.99, None)
    torch.manual_seed(5)
    step(model)
    assert len(hits(events)) == 1


@pytest.mark.parametrize("vanishing", [None, 1e-30])
def test_finite_gradients_whose_norm_overflows_float32_are_exploding(setup, vanishing):
    """Gradients of ~1e20: every value finite, their squares past float32's range; not a NaN/Inf, an explosion."""
    model, engine, events = setup
    engine.set_gradient_health(100.0, vanishing)
    step(model, scale=1e20)
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
    [hit] = hits(events)
    norms = {name: float(p.grad.double().norm()) for name, p in model.named_parameters()}
    worst = max(norms, key=norms.get)
    assert norms[worst] > 1e19 and worst in hit["reason"] and "Exploding gradient" in hit["reason"]
    assert f"{norms[worst]:.4g}" in hit["reason"]


def test_gradients_whose_squares_underflow_float32_are_judged_in_float64(setup):
    """Gradients of ~1e-25 reaching ``first``: their float32 squares are 0. A threshold below that
    norm does not stop; one above it stops with the norm float64 gives, not 0."""
    model, engine, events = setup
    model.damp = 1e-25
    engine.set_gradient_health(None, 1e-30)
    step(model)
    true_norm = float(torch.cat([p.grad.double().flatten() for p in model.first.parameters()]).norm())
    assert 1e-30 < true_norm < 1e-20 and float(model.first.weight.grad.square().sum()) == 0.0
    assert hits(events) == []  # float32 alone would have called it 0 < 1e-30
    engine.set_gradient_health(None, 1e-20)
    step(model)
    [hit] = hits(events)
    true_norm = float(torch.cat([p.grad.double().flatten() for p in model.first.parameters()]).norm())
    assert hit["layer"] == "first" and f"gradient norm {true_norm:.4g} < 1e-20" in hit["reason"]
