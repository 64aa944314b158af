"""HS003 and HS004: what a hook function does with its arguments.

HS003 — a forward (pre-)hook that stores ``output``/``input`` (or a view of
it, ``output[0]``, ``output.cpu()``) in a list, dict, attribute or global
without ``.detach()`` keeps every step's autograd graph alive: memory grows
until the container is cleared. The quick fix inserts ``.detach()`` right
after the argument (``output[0].detach().cpu()``).

HS004 — a hook that changes its argument instead of returning a new value:
rebinding the argument (``output = output * 2``) with no ``return`` does
nothing at all (quick fix: return it); modifying in place the gradients a
backward hook receives, or the input of a forward hook (forward has already
run), is unsupported or has no effect.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ..analysis import DocumentAnalysis
from ..analysis.hooks import RETURNED_ROLE, HookFunction, HookKind, HookRegistration, walk_body
from ..analysis.source import Span
from .finding import Finding, Fix, TextEdit

STORE_METHODS = {"append": -1, "add": -1, "appendleft": -1, "insert": -1, "put": 0, "put_nowait": 0, "setdefault": -1}
"""Container methods that keep a value, and which positional argument is kept."""

GRAPH_KEEPING_METHODS = frozenset(
    {
        "clone",
        "cpu",
        "cuda",
        "to",
        "float",
        "double",
        "half",
        "bfloat16",
        "contiguous",
        "view",
        "reshape",
        "flatten",
        "squeeze",
        "unsqueeze",
        "permute",
        "transpose",
        "t",
        "mean",
        "sum",
        "abs",
        "norm",
        "softmax",
        "relu",
        "sigmoid",
        "tanh",
        "view_as",
        "expand",
        "narrow",
    }
)
"""Tensor methods whose result is still attached to the autograd graph."""

STORED_ROLES = ("input", "output")
"""HS003 looks at forward hooks' activations (gradients rarely carry a graph)."""

INPLACE_FORBIDDEN: dict[HookKind, tuple[str, ...]] = {
    "forward": ("input",),
    "backward": ("grad_input", "grad_output"),
    "backward_pre": ("grad_output",),
    "tensor": ("grad",),
}
"""Arguments a hook must not modify in place (per the PyTorch hook docs)."""

NOT_INPLACE_UNDERSCORE = frozenset({"requires_grad_", "share_memory_", "retain_grad_"})


def hook_body_findings(analysis: DocumentAnalysis, registrations: list[HookRegistration]) -> Iterator[Finding]:
    seen: set[tuple[int, str]] = set()
    for registration in registrations:
        if registration.kind is None:
            continue
        for function in registration.functions:
            key = (id(function), registration.kind)
            if key in seen:
                continue
            seen.add(key)
            params = registration.params(function)
            if not params:
                continue
            if registration.kind in ("forward", "forward_pre"):
                yield from _stored_without_detach(analysis, function, params, registration.method)
            yield from _rebound_not_returned(analysis, function, params, registration.kind, registration.method)
            yield from _modified_in_place(analysis, function, params, registration.kind, registration.method)


# -- HS003 ---------------------------------------------------------------------------


def _stored_without_detach(
    analysis: DocumentAnalysis, function: HookFunction, params: dict[str, str], method: str
) -> Iterator[Finding]:
    tracked = {params[role]: role for role in STORED_ROLES if role in params}
    if not tracked:
        return
    shared_names = _global_names(function)
    for node in walk_body(function):
        for value in _stored_values(node, shared_names):
            for element in _elements(value):
                root = _graph_root(element, tracked)
                if root is None:
                    continue
                name, anchor = root
                role = tracked[name]
                fix = None
                if not (role == "input" and anchor is element and isinstance(element, ast.Name)):
                    # ``input`` itself is a tuple: .detach() would fail; its items are tensors.
                    fix = Fix(
                        f"Store {analysis.positions.text(anchor)}.detach()",
                        (TextEdit(analysis.positions.end_of(anchor), ".detach()"),),
                    )
                advice = (
                    f"store {analysis.positions.text(anchor)}.detach()"
                    if fix
                    else f"store tuple(t.detach() for t in {name})"
                )
                yield Finding(
                    "HS003",
                    analysis.positions.span(element),
                    f"This {method.removeprefix('register_').removesuffix('_hook').replace('_', ' ')} hook "
                    f"keeps '{name}' without .detach(): the stored tensor holds the whole autograd graph "
                    f"of the step, so memory grows with every call until the container is cleared. "
                    f"Unless you need gradients through it, {advice}.",
                    fix=fix,
                )


def _global_names(function: HookFunction) -> set[str]:
    names: set[str] = set()
    for node in walk_body(function):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    return names


def _stored_values(node: ast.AST, shared_names: set[str]) -> Iterator[ast.expr]:
    """Values that outlive the hook call: container items, attributes, globals."""
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(_is_lasting_target(t, shared_names) for t in targets):
            yield node.value
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method = node.func.attr
        if method in STORE_METHODS and node.args:
            index = STORE_METHODS[method]
            if -len(node.args) <= index < len(node.args):
                yield node.args[index]
        elif method == "extend" and node.args:
            yield node.args[0]
        elif method == "update" and node.args and isinstance(node.args[0], ast.Dict):
            yield from (v for v in node.args[0].values if v is not None)
        elif method == "update":
            yield from (k.value for k in node.keywords)


def _is_lasting_target(target: ast.expr, shared_names: set[str]) -> bool:
    if isinstance(target, (ast.Subscript, ast.Attribute)):
        return True
    if isinstance(target, ast.Name):
        return target.id in shared_names
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_is_lasting_target(t, shared_names) for t in target.elts)
    return False


def _elements(value: ast.expr) -> Iterator[ast.expr]:
    """A tuple/list/dict literal stores each of its elements."""
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        for element in value.elts:
            yield from _elements(element)
    elif isinstance(value, ast.Dict):
        for element in value.values:
            yield from _elements(element)
    else:
        yield value


def _graph_root(expr: ast.expr, tracked: dict[str, str]) -> tuple[str, ast.expr] | None:
    """(argument name, where to insert .detach()) when ``expr`` still holds the graph.

    ``expr`` must be the argument, subscripts of it, and graph-keeping method
    calls on those; anything else (``.detach()``, ``.item()``, ``.shape``)
    means it does not keep the graph.
    """
    chain: list[ast.expr] = []
    node = expr
    while True:
        chain.append(node)
        if isinstance(node, ast.Subscript):
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in GRAPH_KEEPING_METHODS
        ):
            node = node.func.value
        elif isinstance(node, ast.Name):
            break
        else:
            return None
    if node.id not in tracked:  # type: ignore[union-attr]
        return None
    # Insert after the argument and its subscripts: output[0].detach().cpu()
    anchor: ast.expr = chain[-1]
    for item in reversed(chain[:-1]):
        if isinstance(item, ast.Subscript):
            anchor = item
        else:
            break
    return node.id, anchor  # type: ignore[union-attr]


# -- HS004 ---------------------------------------------------------------------------


def _rebound_not_returned(
    analysis: DocumentAnalysis, function: HookFunction, params: dict[str, str], kind: HookKind, method: str
) -> Iterator[Finding]:
    if isinstance(function, ast.Lambda) or _returns_value(function):
        return
    statements = list(_own_statements(function.body))
    for role, name in params.items():
        last_store = None
        for index, statement in enumerate(statements):
            if isinstance(statement, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in statement.targets
            ):
                last_store = index
        if last_store is None:
            continue
        later = statements[last_store + 1 :]
        store = statements[last_store]
        if any(_loads(s, name) for s in later) or _is_inside_branch_or_loop(analysis, store, function):
            continue
        returned_role = RETURNED_ROLE[kind]
        span = analysis.positions.span(store)
        if role == returned_role:
            fix = _return_fix(analysis, function, name)
            yield Finding(
                "HS004",
                span,
                f"'{name} = ...' only rebinds the hook's local name: without 'return {name}' the new "
                f"value is thrown away and the {_what(role)} stays unchanged. A hook replaces "
                f"{_what(role)} only by returning the new value.",
                fix=fix,
            )
        else:
            yield Finding(
                "HS004",
                span,
                f"'{name} = ...' only rebinds the hook's local name and has no effect; in a "
                f"{method}() hook only {_what(returned_role)} can be replaced, by returning it.",
            )


def _modified_in_place(
    analysis: DocumentAnalysis, function: HookFunction, params: dict[str, str], kind: HookKind, method: str
) -> Iterator[Finding]:
    forbidden = {params[role]: role for role in INPLACE_FORBIDDEN.get(kind, ()) if role in params}
    if not forbidden:
        return
    for node in walk_body(function):
        target: ast.expr | None = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr.endswith("_") and not attr.startswith("_") and attr not in NOT_INPLACE_UNDERSCORE:
                target = node.func.value
        elif isinstance(node, ast.AugAssign):
            target = node.target
        elif isinstance(node, ast.Assign):
            target = next((t.value for t in node.targets if isinstance(t, ast.Subscript)), None)
        name = _argument_of(target)
        if name is None or name not in forbidden:
            continue
        role = forbidden[name]
        if kind == "forward":
            why = (
                "forward has already run when a forward hook is called, so changing its input in "
                "place does not change the output, and it corrupts the tensor for anyone else using it."
            )
        else:
            why = (
                "PyTorch requires backward hooks not to modify their arguments: the change can be "
                "ignored or corrupt gradients shared with other hooks and layers."
            )
        returned = RETURNED_ROLE[kind]
        yield Finding(
            "HS004",
            analysis.positions.span(node),
            f"This hook modifies '{name}' ({_what(role)}) in place; {why} "
            f"Return a new {_what(returned)} instead (e.g. 'return ...').",
        )


def _argument_of(target: ast.expr | None) -> str | None:
    while isinstance(target, ast.Subscript):
        target = target.value
    return target.id if isinstance(target, ast.Name) else None


def _returns_value(function: HookFunction) -> bool:
    return any(isinstance(n, ast.Return) and n.value is not None for n in walk_body(function))


def _own_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    for statement in body:
        yield statement
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for field in ("body", "orelse", "finalbody"):
            yield from _own_statements(getattr(statement, field, []) or [])
        for handler in getattr(statement, "handlers", []) or []:
            yield from _own_statements(handler.body)


def _is_inside_branch_or_loop(analysis: DocumentAnalysis, statement: ast.stmt, function: HookFunction) -> bool:
    for ancestor in analysis.ancestors(statement):
        if ancestor is function:
            return False
        if isinstance(ancestor, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.Try, ast.With)):
            return True
    return False


def _loads(statement: ast.stmt, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in ast.walk(statement))


def _what(role: str) -> str:
    return {
        "output": "module's output",
        "input": "module's input",
        "grad_input": "gradient w.r.t. the module's inputs",
        "grad_output": "gradient w.r.t. the module's output",
        "grad": "gradient",
    }.get(role, role)


def _return_fix(analysis: DocumentAnalysis, function: HookFunction, name: str) -> Fix | None:
    """Append ``return <name>`` as the hook's last statement (at the end of its line)."""
    if isinstance(function, ast.Lambda) or function.body[0].lineno == function.lineno:
        return None  # a one-line ``def hook(...): ...``: no safe place for a new line
    lines = analysis.positions.lines
    first = lines[function.body[0].lineno - 1]
    indent = first[: len(first) - len(first.lstrip())]
    end_line = (function.body[-1].end_lineno or function.body[-1].lineno) - 1
    end = Span(end_line, len(lines[end_line]), end_line, len(lines[end_line]))
    return Fix(f"Return {name} from the hook", (TextEdit(end, f"\n{indent}return {name}"),))
