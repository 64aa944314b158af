"""Break on NaN/Inf to the op and the line: what the replay's tracer names, for each kind of birth."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hookscope.engine.core import Engine
from hookscope.engine.replay.nan_origin import op_name


def line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith(f"# @{marker}"))


class Exp(nn.Module):
    def forward(self, x):
        scaled = x * 100.0
        return torch.exp(scaled)  # @exp


class OverflowNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.exp = Exp()

    def forward(self, x):
        return self.exp(self.fc(x))


class LossInside(nn.Module):
    """A loss computed in the model's own forward (nanoGPT's GPT.forward does this)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 3)

    def forward(self, x, targets):
        logits = self.head(x)
        return F.cross_entropy(logits, targets, ignore_index=-1)  # @loss


class Root(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))

    def forward(self, x):
        flat = self.fc(x) * self.scale * 0.0  # sqrt(0) = 0 is fine; its gradient is +Inf
        return torch.sqrt(flat)  # @sqrt


def hits_of(model: nn.Module, run) -> list:
    hits: list = []
    engine = Engine(lambda e: None, shapes=False)
    engine.add_model("m", model)
    engine.set_break_on_nonfinite(True, action="callback", callback=hits.append)
    try:
        run()
    finally:
        engine.shutdown()
    return hits


def origin(hit):
    return hit.extra["nan_origin"]


def test_a_forward_op_in_user_code_is_named_with_its_line_dtype_and_counts():
    torch.manual_seed(0)
    model = OverflowNet()
    [hit] = hits_of(model, lambda: model(torch.randn(2, 4) * 10))
    found = origin(hit)
    assert (hit.layer, found.site.op, found.phase) == ("exp", "torch.exp", "forward")
    assert (found.site.location.file, found.site.location.line) == (__file__, line_of("exp"))
    assert found.counts[1] > 0 and found.counts[0] == 0  # +Inf, not NaN
    assert found.dtype == "float32" and found.shape == [2, 4]
    assert found.site.stack[0].function.endswith("Exp.forward")
    assert "scaled" in found.site.frame_locals  # the frame's locals, for the stop
    assert "torch.exp" in hit.reason and f"test_nan_origin.py:{line_of('exp')}" in hit.reason


def test_a_loss_in_the_models_own_forward_names_the_model_and_the_library_call():
    model = LossInside()
    targets = torch.full((3,), -1)  # every target ignored: a mean over nothing is NaN
    [hit] = hits_of(model, lambda: model(torch.randn(3, 4), targets))
    found = origin(hit)
    assert hit.layer == "" and "LossInside.forward (the model itself)" in hit.reason
    assert found.site.op == "F.cross_entropy"
    assert found.site.location.line == line_of("loss")
    assert found.counts == (1, 0, 0)


def test_a_parameter_already_non_finite_is_named_not_the_op():
    torch.manual_seed(0)
    model = OverflowNet()

    def run():
        model(torch.randn(2, 4))  # a clean step first
        with torch.no_grad():
            model.fc.weight[1, 2] = float("nan")
        model(torch.randn(2, 4))

    [hit] = hits_of(model, run)
    found = origin(hit)
    assert hit.layer == "fc" and found.tensor_name == "fc.weight" and found.counts == (1, 0, 0)
    assert "fc.weight: 1 NaN" in hit.reason and "the step before was clean" in hit.reason


def test_a_buffer_already_non_finite_is_named():
    torch.manual_seed(0)
    model = Root()
    with torch.no_grad():
        model.scale[0] = float("nan")
    [hit] = hits_of(model, lambda: model(torch.randn(2, 4)))
    assert origin(hit).tensor_name == "scale"
    assert "step before was clean" not in hit.reason  # there was no step before


def test_a_backward_birth_names_the_node_and_its_forward_line():
    torch.manual_seed(0)
    model = Root()

    def run():
        x = torch.randn(6, 4)
        model(x).sum().backward()

    [hit] = hits_of(model, run)
    found = origin(hit)
    assert (hit.phase, found.phase, found.node) == ("backward", "backward", "SqrtBackward0")
    assert found.site.op == "torch.sqrt" and found.site.location.line == line_of("sqrt")
    assert found.counts[1] > 0
    assert "SqrtBackward0" in hit.reason and f":{line_of('sqrt')}" in hit.reason


def test_fp16_overflow_is_a_birth_of_inf():
    model = nn.Sequential(nn.Linear(2, 2)).half()
    with torch.no_grad():
        model[0].weight.fill_(300.0)
        model[0].bias.zero_()
    [hit] = hits_of(model, lambda: model(torch.full((1, 2), 200.0, dtype=torch.float16)))
    found = origin(hit)
    assert found.site.op == "F.linear" and found.dtype == "float16" and found.counts[1] == 2


def test_op_names_are_the_ones_users_write():
    assert op_name(torch.exp) == "torch.exp"
    assert op_name(F.cross_entropy) == "F.cross_entropy"
    assert op_name(torch.Tensor.div) == "Tensor.div"


class LogZero(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        gate = torch.relu(self.fc(x))
        return torch.log(gate)  # @log


def test_minus_inf_is_told_apart_from_nan_and_plus_inf():
    torch.manual_seed(0)
    model = LogZero()
    [hit] = hits_of(model, lambda: model(torch.randn(8, 4)))  # relu zeros: log(0) = -Inf
    found = origin(hit)
    assert found.site.op == "torch.log" and found.site.location.line == line_of("log")
    assert found.counts[0] == 0 and found.counts[1] == 0 and found.counts[2] > 0
    assert "-Inf" in hit.reason and "NaN," not in hit.reason.split("torch.log")[1]
