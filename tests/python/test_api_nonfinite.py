"""stop_on_nonfinite: the first layer producing NaN/Inf is named, forward and backward."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hookscope
from hookscope.hooks import inventory


class Log(nn.Module):
    def forward(self, x):
        return torch.log(x)


class SqrtOfZero(nn.Module):
    """Finite forward (sqrt(0) = 0), infinite gradient backward (d sqrt / dx at 0)."""

    def forward(self, x):
        return torch.sqrt(x * 0)


def build(middle: nn.Module) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Tanh(), middle), nn.Linear(4, 1))


def no_hooks(model: nn.Module) -> bool:
    return inventory.list_hooks({"m": model})["hooks"] == []


def test_forward_names_the_innermost_producing_layer():
    model = build(Log())  # tanh output is negative somewhere -> log gives NaN
    x = torch.randn(8, 4)
    with pytest.raises(hookscope.NonFiniteError) as info:
        with hookscope.stop_on_nonfinite(model):
            model(x)
    err = info.value
    assert err.layer == "1.1" and err.phase == "forward"
    assert err.event.born_here and err.event.counts["nan"] > 0
    assert "1.1" in str(err) and "produced by this layer" in str(err)
    # The op and the line, as break on NaN/Inf in the editor names them.
    assert err.event.op is not None and err.event.op.site.op == "torch.log"
    assert err.event.op.site.stack[0].function.endswith("Log.forward") and "torch.log" in str(err)
    assert no_hooks(model)


def test_bad_inputs_are_not_blamed_on_the_layer():
    model = build(nn.Identity())
    x = torch.randn(2, 4)
    x[0, 0] = float("inf")
    events = []
    with hookscope.stop_on_nonfinite(model, on_hit=events.append):
        model(x)
    assert len(events) == 1 and events[0].layer == "0" and events[0].born_here is False
    assert events[0].where == "inputs"


def test_backward_names_the_layer_whose_backward_produced_it():
    model = build(SqrtOfZero())
    with pytest.raises(hookscope.NonFiniteError) as info:
        with hookscope.stop_on_nonfinite(model):
            out = model(torch.randn(3, 4))
            assert torch.isfinite(out).all()
            out.sum().backward()
    err = info.value
    assert err.phase == "backward" and err.layer == "1.1" and err.event.born_here
    assert no_hooks(model)


def test_a_non_finite_loss_gradient_is_traced_to_outside_the_modules():
    model = build(nn.Identity())
    events = []
    with hookscope.stop_on_nonfinite(model, on_hit=events.append):
        out = model(torch.randn(3, 4))
        (out * float("inf")).sum().backward()
    assert [(e.phase, e.layer, e.born_here, e.where) for e in events] == [("backward", "2", False, "grad_output")]


def test_callback_mode_reports_once_per_pass_and_training_goes_on():
    model = build(Log())
    events = []
    with hookscope.stop_on_nonfinite(model, backward=False, on_hit=events.append) as guard:
        for _ in range(3):
            model(torch.randn(8, 4))
    assert [e.layer for e in events] == ["1.1"] * 3 and guard.events == events
    assert no_hooks(model)


def test_clean_runs_report_nothing():
    model = build(nn.Identity())
    with hookscope.stop_on_nonfinite(model) as guard:
        for _ in range(3):
            model(torch.randn(3, 4)).sum().backward()
    assert guard.events == [] and no_hooks(model)
