"""Imports point one way: front ends → link → engine → hook primitives (docs/ARCHITECTURE.md).

Module-level imports only: a function-local import is how the agent starts the engine once torch
is there, and such late imports are listed by the rooms' docstrings, not here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "backend" / "hookscope"
VOCABULARY = {"hookscope.link.protocol_vocabulary", "hookscope.link.bounds"}
"""The protocol's version and limits, error codes, phases and condition kinds, and the request bounds:
every room may read them (they import nothing of Hookscope)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


NAMES = {module_name(p) for p in PACKAGE.rglob("*.py")}


def top_level_imports(path: Path) -> set[str]:
    """The Hookscope modules imported at module level (``from a.b import c``: a.b.c when c is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if candidate in NAMES else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("hookscope.")}


MODULES = {module_name(p): top_level_imports(p) for p in PACKAGE.rglob("*.py")}


def room(name: str) -> str:
    return name.split(".")[1] if name.count(".") >= 1 else ""


def imports_of(prefix: str) -> list[tuple[str, str]]:
    return [(m, i) for m, imported in MODULES.items() if m.startswith(prefix) for i in imported]


def test_the_hook_primitives_depend_on_nothing_above_them():
    bad = [(m, i) for m, i in imports_of("hookscope.hooks") if room(i) not in ("hooks", "") and i not in VOCABULARY]
    assert bad == []


def test_the_engine_never_reaches_up_to_the_link_or_the_front_ends():
    bad = [(m, i) for m, i in imports_of("hookscope.engine") if room(i) in ("link", "terminal") and i not in VOCABULARY]
    assert bad == []


@pytest.mark.parametrize("front_end", ["hookscope.terminal"])
def test_only_front_ends_import_the_front_ends(front_end):
    bad = [
        (m, i)
        for m, imported in MODULES.items()
        if not m.startswith(front_end)
        for i in imported
        if i.startswith(front_end)
    ]
    assert bad == []


AGENT = {
    f"hookscope.link.{m}"
    for m in ("agent", "serve_loop", "engine_dispatch", "outgoing", "request_pacing", "process_policy", "agent_log")
}
"""The agent's modules (``link/agent.py`` and the layers it is built from)."""


def test_the_debugger_glue_does_not_import_the_engine_or_the_agent():
    assert AGENT <= NAMES  # the list above names modules that exist
    bad = [
        (m, i)
        for m, i in imports_of("hookscope.debugger")
        if m != "hookscope.debugger.launch"  # the `python -m hookscope.launch` front door starts the agent
        and (room(i) in ("engine", "terminal") or i in AGENT)
    ]
    assert bad == []


def test_the_language_server_stands_alone():
    bad = [(m, i) for m, i in imports_of("hookscope.lsp") if room(i) not in ("lsp", "")]
    assert bad == []


def test_the_vocabulary_imports_nothing_of_hookscope():
    assert MODULES["hookscope.link.protocol_vocabulary"] == set()
    assert MODULES["hookscope.link.bounds"] == set()


def test_the_protocol_declaration_stays_inside_the_link():
    """The catalogue, its shapes and its schema are the link's (and the TS generator's) business."""
    declaration = {
        "hookscope.link.protocol_messages",
        "hookscope.link.protocol_structs",
        "hookscope.link.protocol_schema",
    }
    bad = [(m, i) for m, imported in MODULES.items() if room(m) != "link" for i in imported if i in declaration]
    assert bad == []
