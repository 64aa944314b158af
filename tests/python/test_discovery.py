"""Model discovery without a debugger: roots, wrapping, weak references, creation lines, ast fallback."""

from __future__ import annotations

import gc
import os
import weakref
from pathlib import Path

import pytest
import torch
from torch import nn

from hookscope.engine import creation_sites, discovery
from hookscope.engine.discovery import Discovery

HERE = Path(__file__).resolve()


def marker_line(marker: str) -> int:
    """1-based line of the comment ``# @<marker>`` in this file."""
    for number, text in enumerate(HERE.read_text(encoding="utf-8").splitlines(), 1):
        if text.rstrip().endswith(f"# @{marker}"):
            return number
    raise AssertionError(f"no marker {marker}")


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)  # @block.fc
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3)  # @conv1
        self.head = nn.Sequential(
            nn.Flatten(),  # @head.0
            nn.Linear(4 * 6 * 6, 8),  # @head.1
        )
        self.blocks = nn.ModuleList([Block(8) for _ in range(2)])  # @blocks
        self.add_module("extra", nn.Linear(8, 2))  # @extra
        self.encoder = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)  # @encoder

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.conv1(x))
        for block in self.blocks:
            x = block(x)
        x = self.encoder(x.unsqueeze(1)).squeeze(1)
        return self.extra(x)


class SelfProbing(nn.Module):
    """Calls a submodule inside its own __init__ (to size a layer): must not be reported half-built."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Linear(4, 3)
        width = self.features(torch.zeros(1, 4)).shape[1]
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.features(x))


class OptimizedModule(nn.Module):
    """Shaped like torch.compile's wrapper (same class name, the model under ``_orig_mod``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self._orig_mod = model


class Recorder:
    def __init__(self) -> None:
        self.added: list[tuple[str, weakref.ref, dict]] = []  # weak: the test must not keep models alive
        self.removed: list[str] = []
        self.discovery = Discovery(self.on_added, self.on_removed)
        self.discovery.start()

    def on_added(self, model_id, module, tree):
        self.added.append((model_id, weakref.ref(module), tree))

    def on_removed(self, model_id):
        self.removed.append(model_id)

    def tree_of(self, module: nn.Module) -> dict:
        trees = [tree for _, m, tree in self.added if m() is module]
        assert trees, f"{type(module).__name__} was not reported"
        return trees[-1]

    def id_of(self, module: nn.Module) -> str:
        return next(model_id for model_id, m, _ in self.added if m() is module)

    def reported(self, module: nn.Module) -> bool:
        return any(m() is module for _, m, _ in self.added)


@pytest.fixture
def recorder():
    rec = Recorder()
    rec.discovery.poll(min_age=0)  # absorb modules other tests left alive
    rec.added.clear()
    yield rec
    rec.discovery.stop()


def test_tree_has_names_classes_params_and_creation_lines(recorder):
    model = Net()  # @root
    model(torch.zeros(2, 3, 8, 8))  # the first forward reports it, before it runs
    tree = recorder.tree_of(model)
    modules = {m["name"]: m for m in tree["modules"]}
    assert list(modules) == [name for name, _ in model.named_modules()]
    assert tree["cls"] == "Net" and tree["name"] == "model"
    assert tree["params"] == sum(p.numel() for p in model.parameters())
    assert modules["conv1"]["cls"] == "Conv2d" and modules["conv1"]["leaf"]
    assert modules["conv1"]["params"] == modules["conv1"]["totalParams"] == 4 * 3 * 9 + 4
    assert modules["head"]["params"] == 0 and modules["head"]["totalParams"] == 144 * 8 + 8
    assert not modules["head"]["leaf"]
    file = str(HERE)
    expected = {
        "": "root",
        "conv1": "conv1",
        "head": "conv1",
        "head.0": "head.0",
        "head.1": "head.1",
        "blocks": "blocks",
        "blocks.0": "blocks",
        "blocks.1": "blocks",
        "blocks.0.fc": "block.fc",
        "extra": "extra",
        "encoder": "encoder",
    }
    expected["head"] = None  # the Sequential's own line: the one that opens the call
    for name, marker in expected.items():
        if marker is None:
            continue
        assert modules[name].get("file") == file, name
        assert modules[name].get("line") == marker_line(marker), name
    assert modules["head"]["line"] == marker_line("head.0") - 1
    # Submodules torch builds inside TransformerEncoderLayer belong to the user's line of the
    # layer only: the editor maps that line to `encoder`, not to its internals.
    assert "line" not in modules["encoder.self_attn"] and "line" not in modules["encoder.linear1"]
    assert not any(m.get("compiled") for m in tree["modules"])


def test_a_model_is_reported_once_whole_even_if_it_runs_during_init(recorder):
    model = SelfProbing()
    model(torch.zeros(1, 4))
    tree = recorder.tree_of(model)
    assert [m["name"] for m in tree["modules"]] == ["", "features", "out"]
    assert not recorder.reported(model.features) and not recorder.reported(model.out)


def test_no_global_hook_is_left_after_the_first_forward(recorder):
    model = Block(4)
    model(torch.zeros(1, 4))
    assert recorder.reported(model)
    from torch.nn.modules import module as module_mod

    assert not module_mod._global_forward_pre_hooks


def test_wrapping_replaces_the_root_and_nothing_is_kept_alive(recorder):
    model = Block(4)
    recorder.discovery.poll(min_age=0)
    inner_id = recorder.id_of(model)
    wrapper = nn.Sequential(model, nn.Linear(4, 1))
    recorder.discovery.poll(min_age=0)
    assert inner_id in recorder.removed and recorder.reported(wrapper)
    wrapper_id = recorder.id_of(wrapper)
    ref = weakref.ref(wrapper)
    del wrapper, model
    gc.collect()
    assert ref() is None  # discovery holds weak references only
    recorder.discovery.poll(min_age=0)
    assert wrapper_id in recorder.removed


def test_a_replaced_layer_is_reported_again(recorder):
    model = Block(4)
    recorder.discovery.poll(min_age=0)
    model_id = recorder.id_of(model)
    model.fc = nn.Linear(4, 4)
    recorder.discovery.check_structure()
    assert model_id in recorder.removed
    assert recorder.added[-1][0] == model_id and recorder.added[-1][1]() is model


def test_compiled_wrapper_marks_its_modules(recorder):
    wrapped = OptimizedModule(Block(4))
    recorder.discovery.poll(min_age=0)
    tree = recorder.tree_of(wrapped)
    assert all(m.get("compiled") for m in tree["modules"])
    assert [m["name"] for m in tree["modules"]][:2] == ["", "_orig_mod"]


def test_attach_falls_back_to_the_class_source(recorder):
    # A model made before discovery started has no recorded origins: forget them.
    model = Net()
    for module in model.modules():
        creation_sites._origins.pop(module, None)
    tree = discovery.describe("m", model)
    lines = {m["name"]: m.get("line") for m in tree["modules"]}
    assert lines["conv1"] == marker_line("conv1")
    assert lines["head"] == marker_line("head.0") - 1
    assert lines["head.0"] == marker_line("head.0") and lines["head.1"] == marker_line("head.1")
    assert lines["blocks"] == lines["blocks.1"] == marker_line("blocks")
    assert lines["blocks.0.fc"] == marker_line("block.fc")
    assert lines["extra"] == marker_line("extra")
    assert lines["encoder"] == marker_line("encoder")
    assert lines[""] is None and lines["encoder.self_attn"] is None  # torch's own classes: not read


def test_layers_made_before_their_model_are_not_reported_as_models(recorder, monkeypatch):
    """nn.Sequential(*[nn.Linear(...) for _ in range(2000)]): the agent polls (4 times a second) while
    the layers are made, a millisecond each; none is a model of its own, the Sequential is the one."""
    now = [1000.0]
    monkeypatch.setattr(creation_sites, "clock", lambda: now[0])
    layers = []
    for i in range(2000):
        layers.append(nn.Linear(4, 4))
        now[0] += 0.001
        if i % 250 == 249:
            recorder.discovery.poll(blocking=False)  # what the agent thread does every 0.25 s
    model = nn.Sequential(*layers)
    for _ in range(4):
        now[0] += 0.25
        recorder.discovery.poll(blocking=False)
    assert [tree["cls"] for _, _, tree in recorder.added] == ["Sequential"]
    assert recorder.reported(model) and not recorder.removed
    assert len(recorder.tree_of(model)["modules"]) == 2001


def test_layers_inside_a_container_under_construction_wait_for_it(recorder):
    """A container still in its constructor (filling itself) holds back the layers already in it."""
    seen: list[list[str]] = []

    class Filling(nn.Module):
        def __init__(self, layers: list[nn.Module]) -> None:
            super().__init__()
            for i, layer in enumerate(layers):
                self.add_module(str(i), layer)
            recorder.discovery.poll(min_age=0, blocking=False)  # the agent polls right now
            seen.append([tree["cls"] for _, _, tree in recorder.added])

    layers = [nn.Linear(2, 2) for _ in range(3)]
    model = Filling(layers)
    recorder.discovery.poll(min_age=0)
    assert seen == [[]]
    assert [tree["cls"] for _, _, tree in recorder.added] == ["Filling"] and recorder.reported(model)


def test_every_room_of_hookscope_is_library_code_not_the_users():
    """Modules built in Hookscope's own code (any room, however deep) are never recorded as the
    user's: discovery and the NaN locator both read PACKAGE_DIR, the package's top folder."""
    import pkgutil

    import hookscope

    rooms = [m.name for m in pkgutil.iter_modules(hookscope.__path__) if m.ispkg]
    assert {"engine", "hooks", "link", "debugger", "terminal"} <= set(rooms)
    for room in rooms:
        package = __import__(f"hookscope.{room}", fromlist=["_"])
        assert creation_sites.is_library_file(os.path.abspath(package.__file__)), room
    assert not creation_sites.is_library_file(os.path.abspath(__file__))
