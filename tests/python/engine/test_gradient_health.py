"""Break on exploding and vanishing gradients: the end-of-backward check names the layer and parameter."""

from __future__ import annotations

import re

import pytest
import torch
from engine_models import hooks_left
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
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


# -- against a reference, on random models ------------------------------------------------------


class _Zoo(nn.Module):
    """Random layers of the field, on a (5, 8) batch: the parameter groups the check reads differently
    (small CPU gradients through one flattened copy, large ones through norms), a recurrent layer's
    flattened weights, a tied weight (counted once, under its first name), a frozen layer, and
    parameters that get no gradient ("tied" makes a Linear it never calls)."""

    def __init__(self, kinds: list[str], scales: list[float]) -> None:
        super().__init__()
        self.kinds = kinds
        self.scales = scales
        self.layers = nn.ModuleList()
        for kind in kinds:
            self.layers.append(
                {
                    "linear": lambda: nn.Linear(8, 8),
                    "wide": lambda: nn.Sequential(nn.Linear(8, 700), nn.Tanh(), nn.Linear(700, 8)),  # > 4,096
                    "gru": lambda: nn.GRU(8, 8),
                    "lstm": lambda: nn.LSTM(8, 8),
                    "norm": lambda: nn.LayerNorm(8),
                    "conv": lambda: nn.Conv1d(5, 5, 3, padding=1),
                    "frozen": lambda: nn.Linear(8, 8).requires_grad_(False),
                    "tied": lambda: nn.Linear(8, 8),  # never called: parameters without a gradient
                }[kind]()
            )
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for kind, scale, layer in zip(self.kinds, self.scales, self.layers, strict=True):
            if kind in ("gru", "lstm"):
                y = layer(x)[0]
            elif kind == "conv":
                y = layer(x.unsqueeze(0)).squeeze(0)
            elif kind == "tied":
                y = x @ self.head.weight.t() @ self.head.weight  # head's weight used here too
            else:
                y = layer(x)
            x = torch.tanh(x + y * scale)
        return self.head(x)


def _reference(model: nn.Module) -> tuple[dict[str, float], dict[str, float]]:
    """Each parameter's gradient norm and each layer's (its own parameters, each once), in float64."""
    params: dict[str, float] = {}
    layers: dict[str, float] = {}
    for name, param in model.named_parameters():
        if param.grad is not None:
            norm = float(param.grad.double().norm())
            params[name] = norm
            layer = name.rpartition(".")[0]
            layers[layer] = (layers.get(layer, 0.0) ** 2 + norm**2) ** 0.5
    return params, layers


def _between(values: list[float], quantile: float, position: float) -> float | None:
    """A threshold in the gap between two neighbouring values that ``quantile`` picks, ``position`` of
    the way up it on a log scale (close to either end: a check that rounds or bounds loosely shows),
    and farther than float32's rounding from both; None when the gap is too narrow for that."""
    ordered = sorted(set(values))
    i = min(int(quantile * (len(ordered) + 1)), len(ordered))
    low = ordered[i - 1] if i > 0 else ordered[0] / 10
    high = ordered[i] if i < len(ordered) else ordered[-1] * 10
    if low <= 0:
        return None
    threshold = low * (high / low) ** position
    return threshold if min(threshold / low, high / threshold) > 1 + 1e-4 else None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kinds=st.lists(st.sampled_from(["linear", "wide", "gru", "lstm", "norm", "conv", "frozen", "tied"]), max_size=5),
    scales=st.lists(st.sampled_from([1.0, 1e-6, 30.0]), min_size=5, max_size=5),
    switch=st.sampled_from(["exploding", "vanishing", "both"]),
    quantile=st.floats(0.0, 1.0),
    position=st.sampled_from([0.001, 0.5, 0.999]),
    nonfinite=st.booleans(),
    seed=st.integers(0, 10_000),
)
# thresholds a hair under the largest parameter's norm, and over the weakest layer's
@example(kinds=[], scales=[1.0] * 5, switch="exploding", quantile=0.5, position=0.999, nonfinite=False, seed=0)
@example(kinds=["wide"], scales=[1.0] * 5, switch="both", quantile=1.0, position=0.001, nonfinite=True, seed=1)
@example(kinds=["gru"], scales=[1e-6] * 5, switch="vanishing", quantile=0.0, position=0.999, nonfinite=False, seed=2)
def test_the_stop_names_what_plain_torch_norms_name(kinds, scales, switch, quantile, position, nonfinite, seed):
    """Exploding: the parameter with the largest gradient norm, when it is above the threshold;
    vanishing: the layer with the smallest, when below, and its weakest parameter. Whatever the
    layers, which path reads each gradient, and whether break on NaN/Inf shares the check."""
    torch.manual_seed(seed)
    model = _Zoo(kinds, scales[: len(kinds)])
    x = torch.randn(5, 8)
    model.zero_grad()
    model(x).square().sum().backward()
    params, layers = _reference(model)
    exploding = _between(list(params.values()), quantile, position) if switch != "vanishing" else None
    vanishing = _between(list(layers.values()), quantile, position) if switch != "exploding" else None
    assume((exploding is not None) == (switch != "vanishing") and (vanishing is not None) == (switch != "exploding"))

    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m", model)
    engine.set_break_on_nonfinite(nonfinite)
    engine.set_gradient_health(exploding, vanishing)
    model.zero_grad()
    model(x).square().sum().backward()  # the same gradients, now checked
    engine.shutdown()
    assert hooks_left(model) == []

    worst = max(params, key=params.__getitem__)
    weakest = min(layers, key=layers.__getitem__)
    if exploding is not None and params[worst] > exploding:
        [hit] = hits(events)
        named = re.match(r"Exploding gradient: (\S+) gradient norm (\S+) > ", hit["reason"])
        assert named and params[named[1]] == params[worst], (hit["reason"], params)  # a tie: either
        assert hit["layer"] == named[1].rpartition(".")[0] and named[2] == f"{params[worst]:.4g}"
    elif vanishing is not None and layers[weakest] < vanishing:
        [hit] = hits(events)
        named = re.match(
            r"Vanishing gradient: layer (\S+) gradient norm (\S+) < \S+ \(smallest: (\S+)\)", hit["reason"]
        )
        assert named and layers[named[1]] == layers[weakest], (hit["reason"], layers)  # saturated layers tie at 0
        owned = [norm for name, norm in params.items() if name.rpartition(".")[0] == named[1]]
        assert named[2] == f"{layers[weakest]:.4g}" and params[named[3]] == min(owned), hit["reason"]
        assert hit["layer"] == named[1]
    else:
        assert hits(events) == []


class _Gain(nn.Module):
    """A learned gain that broadcasts, whatever its size: a program may swap in a larger one."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.gain = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) + self.gain.sum()


@pytest.mark.parametrize("vanishing", [None, 1e-30])
def test_a_gradient_that_changes_size_under_the_same_name_is_read_whole(vanishing):
    """The segments of the flattened gradients are kept between steps (and not checked by the kernel
    that sums them): a parameter given data of another size must not be read with the old ones."""
    torch.manual_seed(0)
    model = _Gain()
    events: list[dict] = []
    engine = Engine(events.append, shapes=False)
    engine.add_model("m", model)
    engine.set_gradient_health(5000.0, vanishing)
    model(torch.randn(3, 4)).sum().backward()
    assert hits(events) == []
    model.zero_grad()
    model.gain.data = torch.ones(300)  # 300 gradients where there was one, under the same name
    (model(torch.randn(3, 4)).sum() * 100).backward()
    norms = {name: float(p.grad.norm()) for name, p in model.named_parameters()}
    assert norms["gain"] > 5000 > max(n for name, n in norms.items() if name != "gain")
    [hit] = hits(events)
    assert f"Exploding gradient: gain gradient norm {norms['gain']:.4g} > 5000" in hit["reason"]
    engine.shutdown()
    assert hooks_left(model) == []
