"""One answer to "which layers does this line mean": the table of source lines → layers.

Every line of fixtures/line_table_model.py marked ``# @ a, b`` is asked through the engine's
``resolveLayers`` request (what the editor's cursor commands and ``hookscope run --break FILE:LINE``
ask) and through ``setBreakpoints`` (what a layer breakpoint on that line hooks): both must name
exactly the marked layers. Definitions in ``__init__``, Sequential / ModuleList / ModuleDict
entries, nested calls, calls through local names, conditional definitions, comprehension-built
lists, loops over a container, a second class used twice, and a line that means no layer.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from hookscope.engine.core import Engine
from hookscope.link.protocol_vocabulary import ProtocolError

SOURCE = Path(__file__).parent / "fixtures" / "line_table_model.py"
MARK = re.compile(r"#\s*@\s*(?P<layers>[\w.,\s]*)$")


def marked_lines() -> list[tuple[int, list[str]]]:
    table = []
    for number, text in enumerate(SOURCE.read_text().splitlines(), start=1):
        match = MARK.search(text)
        if match:
            table.append((number, [name.strip() for name in match["layers"].split(",") if name.strip()]))
    return table


@pytest.fixture(scope="module")
def engine():
    spec = importlib.util.spec_from_file_location("line_table_model", SOURCE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # imported as the user's code is: its classes' source is found
    spec.loader.exec_module(module)
    model = module.LineTable()  # the engine holds models weakly
    engine = Engine(lambda event: None, shapes=False)
    engine.add_model("m", model)
    yield engine
    engine.shutdown()
    del model
    sys.modules.pop(spec.name, None)


@pytest.mark.parametrize(("line", "expected"), marked_lines(), ids=lambda v: str(v))
def test_resolve_layers_names_the_marked_layers(engine, line, expected):
    reply = engine.handle({"type": "resolveLayers", "id": 1, "spec": {"file": str(SOURCE), "line": line}})
    assert sorted(entry["layer"] for entry in reply["layers"]) == sorted(expected)
    assert all(entry["model"] == "m" for entry in reply["layers"])


@pytest.mark.parametrize(("line", "expected"), marked_lines(), ids=lambda v: str(v))
def test_a_breakpoint_on_the_line_hooks_the_same_layers(engine, line, expected):
    [resolved] = engine.set_breakpoints([{"id": "bp", "file": str(SOURCE), "line": line}])
    engine.set_breakpoints([])
    assert sorted(resolved["layers"]) == sorted(expected)


def test_names_globs_and_classes_resolve_too(engine):
    def layers(**spec):
        return [e["layer"] for e in engine.handle({"type": "resolveLayers", "id": 1, "spec": spec})["layers"]]

    assert layers(layer="blocks.*") == ["blocks.0", "blocks.1", "blocks.2"]
    assert layers(cls="GELU") == ["act"]
    assert layers(layer="nothing") == []
    with pytest.raises(ProtocolError):
        engine.handle({"type": "resolveLayers", "id": 1, "spec": {"line": 3}})
