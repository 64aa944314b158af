"""Hook registrations in a file and the functions they register.

A registration is a call ``<receiver>.register_<...>hook(fn, ...)``.  The
hook function is resolved when it is written in the same file: a function
name, ``self.method``, a lambda, a factory call returning a nested function
(``make_hook(name)``) or ``functools.partial(fn, ...)``.  Hook parameters are
matched from the end of the signature, which also works for methods and
partials: ``(module, input, output)`` -> output is the last parameter.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from .tree_index import TreeIndex

HookKind = Literal["forward", "forward_pre", "backward", "backward_pre", "tensor"]

MODULE_HOOK_METHODS: dict[str, HookKind] = {
    "register_forward_hook": "forward",
    "register_forward_pre_hook": "forward_pre",
    "register_full_backward_hook": "backward",
    "register_backward_hook": "backward",
    "register_full_backward_pre_hook": "backward_pre",
    "register_module_forward_hook": "forward",
    "register_module_forward_pre_hook": "forward_pre",
    "register_module_full_backward_hook": "backward",
    "register_module_backward_hook": "backward",
    "register_module_full_backward_pre_hook": "backward_pre",
}
"""Hooks on modules (methods, and the global ``torch.nn.modules.module`` functions)."""

TENSOR_HOOK_METHOD = "register_hook"

HookFunction = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


@dataclass
class HookRegistration:
    """One ``register_*hook`` call."""

    call: ast.Call
    method: str
    """``register_forward_hook``, ``register_hook``, ..."""
    kind: HookKind | None
    """None for other ``register_*hook`` methods (state dict hooks...)."""
    receiver: ast.expr | None
    """What the hook is registered on; None for global module hooks."""
    with_kwargs: bool
    functions: list[HookFunction] = field(default_factory=list)

    def params(self, function: HookFunction) -> dict[str, str]:
        """Role -> parameter name for a resolved hook function.

        Roles: ``input``, ``output``, ``grad_input``, ``grad_output``, ``grad``;
        ``returned`` names the role whose replacement the hook may return.
        """
        names = [a.arg for a in function.args.posonlyargs + function.args.args]
        roles: list[str]
        if self.kind == "forward":
            roles = ["input", "kwargs", "output"] if self.with_kwargs else ["input", "output"]
        elif self.kind == "forward_pre":
            roles = ["input", "kwargs"] if self.with_kwargs else ["input"]
        elif self.kind == "backward":
            roles = ["grad_input", "grad_output"]
        elif self.kind == "backward_pre":
            roles = ["grad_output"]
        elif self.kind == "tensor":
            roles = ["grad"]
        else:
            return {}
        if len(names) < len(roles) or function.args.vararg is not None:
            return {}
        mapped = dict(zip(roles, names[len(names) - len(roles) :]))
        mapped.pop("kwargs", None)
        return mapped


RETURNED_ROLE: dict[HookKind, str] = {
    "forward": "output",
    "forward_pre": "input",
    "backward": "grad_input",
    "backward_pre": "grad_output",
    "tensor": "grad",
}
"""The argument whose new value a hook of each kind returns."""


def is_hook_method(name: str) -> bool:
    return name.startswith("register_") and name.endswith("hook")


def find_registrations(index: TreeIndex) -> list[HookRegistration]:
    """Every ``register_*hook`` call in the file, with resolved hook functions."""
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] | None = None
    registrations: list[HookRegistration] = []
    for node in index.of(ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            method, receiver = func.attr, func.value
        elif isinstance(func, ast.Name):
            method, receiver = func.id, None
        else:
            continue
        if not is_hook_method(method):
            continue
        kind: HookKind | None = MODULE_HOOK_METHODS.get(method)
        if method == TENSOR_HOOK_METHOD:
            kind = "tensor"
        if method.startswith("register_module_"):
            receiver = None
        elif receiver is None:
            continue  # a bare function named register_*hook that is not torch's
        registration = HookRegistration(
            call=node,
            method=method,
            kind=kind,
            receiver=receiver,
            with_kwargs=any(
                k.arg == "with_kwargs" and isinstance(k.value, ast.Constant) and k.value.value is True
                for k in node.keywords
            ),
        )
        hook_expr = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "hook"), None)
        if hook_expr is not None:
            if functions is None:
                functions = _index_functions(index)
            registration.functions = list(_resolve(hook_expr, functions, depth=0))
        registrations.append(registration)
    return registrations


def _index_functions(index: TreeIndex) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
    by_name: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = [
        *index.of(ast.FunctionDef),
        *index.of(ast.AsyncFunctionDef),
    ]
    for node in functions:
        by_name.setdefault(node.name, []).append(node)
    return by_name


def _resolve(
    expr: ast.expr, functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]], depth: int
) -> Iterator[HookFunction]:
    if depth > 3:
        return
    if isinstance(expr, ast.Lambda):
        yield expr
    elif isinstance(expr, ast.Name):
        yield from functions.get(expr.id, [])
    elif isinstance(expr, ast.Attribute):
        # ``self.hook`` / ``obj.hook``: a method of that name in the file.
        yield from functions.get(expr.attr, [])
    elif isinstance(expr, ast.Call):
        callee = expr.func
        callee_name = (
            callee.attr if isinstance(callee, ast.Attribute) else callee.id if isinstance(callee, ast.Name) else ""
        )
        if callee_name == "partial" and expr.args:
            yield from _resolve(expr.args[0], functions, depth + 1)
            return
        for factory in functions.get(callee_name, []):
            for returned in _returned_values(factory):
                if isinstance(returned, ast.Lambda):
                    yield returned
                elif isinstance(returned, ast.Name):
                    yield from (f for f in _nested_functions(factory) if f.name == returned.id)
                elif isinstance(returned, ast.Call):
                    yield from _resolve(returned, functions, depth + 1)


def _returned_values(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.expr]:
    for node in walk_body(function):
        if isinstance(node, ast.Return) and node.value is not None:
            yield node.value


def _nested_functions(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(function):
        if node is not function and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def walk_body(function: HookFunction) -> Iterator[ast.AST]:
    """Nodes of a function's own body: nested functions and lambdas are not entered."""
    roots: list[ast.AST] = [function.body] if isinstance(function, ast.Lambda) else list(function.body)  # type: ignore[list-item]
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))
