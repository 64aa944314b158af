"""Where a submodule was made, read from its parent class's source with ``ast``.

The fallback for modules created before discovery started (attach), whose creation was not
recorded: ``self.<name> = ...``, ``self.add_module("<name>", ...)`` and the entries of an
``nn.Sequential(...)`` / ``nn.ModuleList([...])`` / ``nn.ModuleDict({...})`` literal, in the
user's classes only (torch's own are not read).
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import textwrap
from typing import Any

from hookscope.engine.creation_sites import is_library_file


@functools.lru_cache(maxsize=512)
def _class_assignments(cls: type) -> tuple[str | None, dict[str, ast.expr]]:
    """``{attribute: value node}`` for ``self.<attr> = value`` and ``add_module`` calls in a class."""
    try:
        file = inspect.getsourcefile(cls)
        lines, start = inspect.getsourcelines(cls)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, IndentationError):
        return None, {}
    ast.increment_lineno(tree, start - 1)
    found: dict[str, ast.expr] = {}
    methods = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    methods.sort(key=lambda n: n.name != "__init__")  # __init__ wins over helpers
    for method in methods:
        for node in ast.walk(method):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        found.setdefault(target.attr, node.value)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("add_module", "register_module")
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.setdefault(node.args[0].value, node.args[1])
    return (os.path.abspath(file) if file else None), found


def _user_class(cls: type) -> bool:
    try:
        file = inspect.getsourcefile(cls)
    except TypeError:
        return False
    return file is not None and file != "" and not is_library_file(os.path.abspath(file))


def _source_assignment(parent: Any, attr: str) -> tuple[str, ast.expr] | None:
    for cls in type(parent).__mro__:
        if cls is object or not _user_class(cls):
            continue
        file, found = _class_assignments(cls)
        if file and attr in found:
            return file, found[attr]
    return None


def _container_entries(node: ast.expr) -> list[ast.expr] | None:
    """The entries of ``nn.Sequential(a, b)`` or ``nn.ModuleList([a, b])`` literals, in order."""
    if not isinstance(node, ast.Call):
        return None
    if node.args and all(not isinstance(a, ast.Starred) for a in node.args) and len(node.args) > 1:
        return list(node.args)
    if len(node.args) == 1:
        arg = node.args[0]
        if isinstance(arg, (ast.List, ast.Tuple)):
            return list(arg.elts)
        if isinstance(arg, (ast.ListComp, ast.GeneratorExp)):
            return [arg.elt]  # every element comes from the same line
        if isinstance(arg, ast.Call) or isinstance(arg, ast.Name):
            return [arg]
    return None


def _dict_entry(node: ast.expr, key: str) -> ast.expr | None:
    """The value for ``key`` in an ``nn.ModuleDict({"key": layer, ...})`` literal."""
    if isinstance(node, ast.Call) and len(node.args) == 1 and isinstance(node.args[0], ast.Dict):
        for k, v in zip(node.args[0].keys, node.args[0].values):
            if isinstance(k, ast.Constant) and k.value == key:
                return v
    return None


def location_in_source(
    parent: Any, grandparent: Any, parent_attr: str | None, attr: str
) -> tuple[str | None, int | None]:
    """File and line that made ``parent.<attr>``, read from the source of ``parent``'s classes.

    ``grandparent`` holds ``parent`` as ``<parent_attr>``: for an entry of a container literal
    (``parent`` is the Sequential/ModuleList/ModuleDict) the line is read in its class instead.
    """
    found = _source_assignment(parent, attr)
    if found is not None:
        return found[0], found[1].lineno
    # An entry of a container literal: look up the container in its own parent.
    if grandparent is not None and parent_attr is not None and not attr.isdigit():
        container = _source_assignment(grandparent, parent_attr)
        if container is not None:
            entry = _dict_entry(container[1], attr)
            if entry is not None:
                return container[0], entry.lineno
    if grandparent is not None and parent_attr is not None and attr.isdigit():
        container = _source_assignment(grandparent, parent_attr)
        if container is not None:
            entries = _container_entries(container[1])
            if entries:
                index = int(attr)
                entry = entries[index] if index < len(entries) else (entries[0] if len(entries) == 1 else None)
                if entry is not None:
                    return container[0], entry.lineno
    return None, None
