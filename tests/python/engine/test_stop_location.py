"""Where a stop is shown: the user's line for each phase, the frame's name, locals and globals."""

from __future__ import annotations

import torch
from torch import nn

from hookscope.debugger import stop_location
from hookscope.engine.model_index import ModelIndex


class Branch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 3)  # @inner.defined

    def forward(self, x):
        return self.inner(x)  # @inner.called


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Branch(), Branch()])
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(3, 1))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)  # @blocks.called
        return self.head(x)  # @head.called


def line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as f:
        return next(n for n, text in enumerate(f, 1) if text.rstrip().endswith(f"# @{marker}"))


def index_of(model: nn.Module) -> ModelIndex:
    return ModelIndex("m", model, {"blocks.1.inner": (__file__, line_of("inner.defined"))})


def first(layer: str, module: nn.Module, phase: str, index: ModelIndex) -> tuple[str, int]:
    location = next(stop_location.candidates(layer, module, phase, index))  # @running
    return location.file, location.line


def test_a_forward_stop_is_shown_at_the_line_calling_the_layer():
    model = Net()
    index = index_of(model)
    seen = []
    model.blocks[1].inner.register_forward_hook(
        lambda m, args, out: seen.append(first("blocks.1.inner", m, "forward", index))
    )
    model.head[1].register_forward_hook(lambda m, args, out: seen.append(first("head.1", m, "forward", index)))
    model(torch.randn(2, 3))
    # head.1 is called by nn.Sequential (torch's code): the user's line calls the Sequential.
    assert seen == [(__file__, line_of("inner.called")), (__file__, line_of("head.called"))]


def test_a_backward_stop_is_shown_at_the_calling_line_read_from_the_source():
    model = Net()
    index = index_of(model)
    # Outside the layer's call (as in a backward hook): the parent's forward line, from the source.
    assert first("blocks.1.inner", model.blocks[1].inner, "backward", index) == (__file__, line_of("inner.called"))
    assert first("blocks.0", model.blocks[0], "backward", index) == (__file__, line_of("blocks.called"))
    assert first("head.1", model.head[1], "backward", index) == (__file__, line_of("head.called"))


def test_a_parameter_gradient_stop_is_shown_at_the_creating_line_else_the_running_one():
    model = Net()
    index = index_of(model)
    assert first("blocks.1.inner", model.blocks[1].inner, "param_grad", index) == (__file__, line_of("inner.defined"))
    file, line = first("blocks.0.inner", model.blocks[0].inner, "param_grad", index)
    assert (file, line) == (__file__, line_of("running"))  # no creating line known: the running line


def test_the_stop_frame_has_the_hooks_values_as_locals_and_the_users_globals():
    location = stop_location.Location(__file__, line_of("head.called"), globals())
    name = stop_location.frame_name("head.1", None, "forward", None)
    generator = stop_location.stop_generator(location, name, {"layer": "head.1", "output": 7})
    frame = generator.gi_frame
    assert (frame.f_code.co_filename, frame.f_code.co_firstlineno, frame.f_code.co_name) == (
        __file__,
        line_of("head.called"),
        "head.1 · forward",
    )
    assert frame.f_locals == {"layer": "head.1", "output": 7}
    assert frame.f_globals is globals()
    assert list(generator) == [None]  # runs to the end: the stop frame returns as soon as it resumes


def test_frame_names_say_the_layer_and_phase():
    assert stop_location.frame_name("blocks.2.mix", None, "backward", None) == "blocks.2.mix · backward"
    assert stop_location.frame_name("", Net(), "forward", None) == "Net · forward"
    assert stop_location.frame_name("fc", None, "param_grad", "weight") == "fc · weight.grad"
    assert stop_location.frame_name("fc", None, "forward_pre", None) == "fc · before forward"


def test_a_location_the_debugger_hides_gives_way_to_the_next():
    model = Net()
    index = index_of(model)
    hidden_line = line_of("inner.called")
    candidates = stop_location.candidates("blocks.1.inner", model.blocks[1].inner, "backward", index)
    generator = stop_location.first_shown(
        candidates, lambda frame: frame.f_code.co_firstlineno == hidden_line, "x", {"layer": "blocks.1.inner"}
    )
    assert generator is not None and generator.gi_frame.f_code.co_firstlineno == line_of("inner.defined")
    everything_hidden = stop_location.first_shown(
        stop_location.candidates("blocks.1.inner", model.blocks[1].inner, "backward", index),
        lambda frame: True,
        "x",
        {},
    )
    assert everything_hidden is None


def test_hookscope_and_torch_files_are_internal():
    assert stop_location.is_internal(stop_location.__file__)
    assert stop_location.is_internal(torch.nn.modules.module.__file__)
    assert stop_location.is_internal("<string>")
    assert not stop_location.is_internal(__file__)
