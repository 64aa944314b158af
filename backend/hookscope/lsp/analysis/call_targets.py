"""What a call inside a module's method calls: ``self.fc``, ``self.heads["cls"]``, a local name.

Shared by the language server's call-site lenses (``layers.py``) and the
backend's resolution of a breakpoint on a call line (``hookscope.engine.model_index``),
so a lens and the breakpoint it sets agree on the layer. Pure ``ast``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

EVERY_ENTRY = "*"
"""The key of a call through a loop variable or a computed index: every entry of the container."""

Target = tuple[str, "str | None"]
"""(attribute of ``self``, entry key, ``EVERY_ENTRY`` or None for the attribute itself)."""


def called_target(func: ast.expr, self_name: str, names: dict[str, Target]) -> Target | None:
    """The layer attribute (and entry) an expression stands for: ``self.fc``, ``self.heads["cls"]``,
    ``self.blocks[i]`` (every entry), a local name bound to one of these, ``b["mix"]`` through one."""
    if isinstance(func, ast.Attribute) and is_name(func.value, self_name):
        return func.attr, None
    if isinstance(func, ast.Name):
        return names.get(func.id)
    if isinstance(func, ast.Subscript):
        base = called_target(func.value, self_name, names)
        if base is None or base[1] is not None:
            return None  # one level of entries: the containers the analysis knows go no deeper
        return base[0], _constant_key(func.slice)
    return None


def _constant_key(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
        and node.value >= 0
    ):
        return str(node.value)
    return EVERY_ENTRY


def local_layer_names(function: ast.FunctionDef | ast.AsyncFunctionDef, self_name: str) -> dict[str, Target]:
    """Local names a method binds to its layers: ``f = self.fc``, ``b = self.branches``,
    ``for block in self.blocks`` (every entry), ``for key, branch in self.branches.items()``.

    Flow-insensitive: a name also bound to something else in the method is no layer's.
    """
    names: dict[str, Target] = {}
    other: set[str] = set()

    def bind(name: str, target: Target | None) -> None:
        if target is None:
            other.add(name)
        else:
            names.setdefault(name, target)

    for statement in walk_statements(function.body):
        if isinstance(statement, ast.Assign):
            for assigned in statement.targets:
                if isinstance(assigned, ast.Name):
                    bind(
                        assigned.id,
                        called_target(statement.value, self_name, names) if len(statement.targets) == 1 else None,
                    )
                else:
                    other.update(n.id for n in ast.walk(assigned) if isinstance(n, ast.Name))
        elif isinstance(statement, (ast.For, ast.AsyncFor)):
            container, items = _iterated_container(statement.iter, self_name, names)
            loop_target = statement.target
            if items and isinstance(loop_target, ast.Tuple) and len(loop_target.elts) == 2:
                first, loop_target = loop_target.elts
                other.update(n.id for n in ast.walk(first) if isinstance(n, ast.Name))
            if isinstance(loop_target, ast.Name):
                bind(loop_target.id, (container, EVERY_ENTRY) if container is not None else None)
            else:
                other.update(n.id for n in ast.walk(loop_target) if isinstance(n, ast.Name))
    return {name: target for name, target in names.items() if name not in other}


def _iterated_container(node: ast.expr, self_name: str, names: dict[str, Target]) -> tuple[str | None, bool]:
    """(container attribute, iterated by ``.items()``) for ``self.blocks``, ``self.heads.values()``,
    ``self.heads.items()`` or a local name bound to such a container; (None, False) otherwise."""
    items = False
    if (
        isinstance(node, ast.Call)
        and not node.args
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("values", "items", "children")
    ):
        items = node.func.attr == "items"
        node = node.func.value
    target = called_target(node, self_name, names)
    if target is None or target[1] is not None:
        return None, False
    return target[0], items


def walk_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a function body in source order, entering if/for/while/with/try, not nested defs."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for name in ("body", "orelse", "finalbody"):
            yield from walk_statements(getattr(statement, name, []) or [])
        for handler in getattr(statement, "handlers", []) or []:
            yield from walk_statements(handler.body)
        for case in getattr(statement, "cases", []) or []:
            yield from walk_statements(case.body)


def is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name
