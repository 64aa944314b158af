"""HS001: a hook handle thrown away; HS006: hooks over every module.

``register_*hook`` returns a ``RemovableHandle``; without it the hook stays
on the module for the life of the program. Inside a loop or a function that
runs every step the hooks pile up, each one running on every call.
``model.modules()`` yields the model itself and every container, so a hook
registered on each of them fires for the whole model and each Sequential too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ..analysis import DocumentAnalysis
from ..analysis.hooks import TENSOR_HOOK_METHOD, HookRegistration
from ..analysis.source import Span
from .context import CalledInLoops, enclosing_function, enclosing_loop, is_per_step
from .finding import Finding, Fix, TextEdit

MODULE_ITERATORS = frozenset({"modules", "named_modules"})
PARAMETER_ITERATORS = frozenset({"parameters", "named_parameters"})
PARAMETER_ATTRIBUTES = frozenset({"weight", "bias"})


def discarded_handles(
    analysis: DocumentAnalysis, registrations: list[HookRegistration], called_in_loops: CalledInLoops
) -> Iterator[Finding]:
    taken = _NamesInFile(analysis)
    for registration in registrations:
        if registration.method == TENSOR_HOOK_METHOD and not _is_parameter_like(analysis, registration.receiver):
            # A hook on a temporary tensor dies with the tensor: not a leak.
            continue
        if not _result_discarded(analysis, registration.call):
            continue
        method = registration.method
        span = analysis.positions.span(registration.call)
        loop = enclosing_loop(analysis, registration.call)
        function = enclosing_function(analysis, registration.call)
        if loop is not None:
            yield Finding(
                "HS001",
                span,
                f"The handle returned by {method}() is discarded inside a loop: every iteration adds a "
                "hook that can never be removed, and each one keeps running on every call. "
                "Collect the handles (handles.append(...)) and call handle.remove() on each when done.",
                escalated=True,
            )
        elif is_per_step(function, called_in_loops):
            name = getattr(function, "name", "?")
            yield Finding(
                "HS001",
                span,
                f"The handle returned by {method}() is discarded in {name}(), which runs every step: "
                "a new, unremovable hook is added each time and they pile up. Register the hook once, "
                "outside the step, and keep the handle to remove it.",
                escalated=True,
            )
        else:
            yield Finding(
                "HS001",
                span,
                f"The handle returned by {method}() is discarded, so this hook can never be removed: it "
                "stays on the module for the rest of the program. Keep it (handle = ...) and call "
                "handle.remove() when you are done.",
                fix=_keep_handle_fix(analysis, registration, taken),
            )


class _NamesInFile:
    """Every name used in the file, gathered once, at the first quick fix that needs it: gathering
    them per finding made a file with many discarded handles quadratic (45 s on 50k lines)."""

    def __init__(self, analysis: DocumentAnalysis) -> None:
        self.analysis = analysis
        self._names: set[str] | None = None

    def __contains__(self, name: object) -> bool:
        if self._names is None:
            self._names = {n.id for n in self.analysis.index.of(ast.Name)}
        return name in self._names


def _keep_handle_fix(analysis: DocumentAnalysis, registration: HookRegistration, taken: _NamesInFile) -> Fix | None:
    """``x.register_forward_hook(h)`` as a statement -> ``h_handle = x.register_forward_hook(h)``.

    Safe: the hook runs exactly as before, and the handle now exists to be removed. Offered only
    for a plain statement run once (in a loop, one variable would keep only the last handle).
    """
    statement = analysis.parent(registration.call)
    if not isinstance(statement, ast.Expr) or analysis.tree is None:
        return None
    hook = registration.call.args[-1] if registration.call.args else None
    base = f"{hook.id}_handle" if isinstance(hook, ast.Name) else "hook_handle"
    name, suffix = base, 2
    while name in taken:
        name, suffix = f"{base}{suffix}", suffix + 1
    start = analysis.positions.span(statement)
    insertion = Span(start.start_line, start.start_col, start.start_line, start.start_col)
    return Fix(
        f"Keep the handle in '{name}' (to call {name}.remove() later)",
        (TextEdit(insertion, f"{name} = "),),
        preferred=False,
    )


def _result_discarded(analysis: DocumentAnalysis, call: ast.Call) -> bool:
    parent = analysis.parent(call)
    if isinstance(parent, ast.Expr):
        return True
    if isinstance(parent, ast.Assign):
        return all(isinstance(t, ast.Name) and t.id == "_" for t in parent.targets)
    if isinstance(parent, (ast.ListComp, ast.SetComp, ast.GeneratorExp)) and parent.elt is call:
        return isinstance(analysis.parent(parent), ast.Expr)
    if isinstance(parent, ast.Lambda) and parent.body is call:
        # ``model.apply(lambda m: m.register_forward_hook(h))``: apply drops the results.
        holder = analysis.parent(parent)
        return isinstance(holder, ast.Call) and isinstance(holder.func, ast.Attribute) and holder.func.attr == "apply"
    return False


def _is_parameter_like(analysis: DocumentAnalysis, receiver: ast.expr | None) -> bool:
    if isinstance(receiver, ast.Attribute):
        return receiver.attr in PARAMETER_ATTRIBUTES
    if isinstance(receiver, ast.Name):
        iterable = _loop_iterable_of(analysis, receiver)
        return _iterator_method(iterable) in PARAMETER_ITERATORS
    return False


def _iterator_method(iterable: ast.expr | None) -> str | None:
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute):
        return iterable.func.attr
    return None


def _loop_iterable_of(analysis: DocumentAnalysis, name: ast.Name) -> ast.expr | None:
    """The iterable of the nearest ``for``/comprehension that binds ``name``."""
    for ancestor in analysis.ancestors(name):
        generators: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(ancestor, (ast.For, ast.AsyncFor)):
            generators = [(ancestor.target, ancestor.iter)]
        elif isinstance(ancestor, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            generators = [(g.target, g.iter) for g in ancestor.generators]
        for target, iterable in generators:
            if name.id in _bound_names(target):
                return iterable
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
    return None


def _bound_names(target: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def hooks_on_all_modules(analysis: DocumentAnalysis, registrations: list[HookRegistration]) -> Iterator[Finding]:
    reported: set[int] = set()
    for registration in registrations:
        if registration.kind is None or not isinstance(registration.receiver, ast.Name):
            continue
        loop = _module_loop(analysis, registration.receiver)
        if loop is None or id(loop) in reported:
            continue
        target, iterable = loop
        if _is_filtered(analysis, registration.call, target):
            continue
        reported.add(id(loop))
        method = _iterator_method(iterable)
        yield Finding(
            "HS006",
            analysis.positions.span(iterable),
            f"{method}() also yields the model itself and every container (Sequential, ModuleList, "
            f"your own blocks), so {registration.method}() fires for them too, with their whole "
            "input and output. If you meant the layers, hook only modules without children.",
            fix=_leaf_only_fix(analysis, target, iterable),
        )


def _module_loop(analysis: DocumentAnalysis, receiver: ast.Name):
    iterable = _loop_iterable_of(analysis, receiver)
    if iterable is None or _iterator_method(iterable) not in MODULE_ITERATORS:
        return None
    parent = analysis.parent(iterable)  # the For or the comprehension generator
    target = parent.target if isinstance(parent, (ast.For, ast.AsyncFor, ast.comprehension)) else None
    if target is None:
        return None
    return target, iterable


def _is_filtered(analysis: DocumentAnalysis, call: ast.Call, target: ast.expr) -> bool:
    """An ``if`` between the loop and the call, a comprehension filter, or ``if ...: continue``."""
    loop_node = analysis.parent(target)
    if isinstance(loop_node, ast.comprehension):
        return bool(loop_node.ifs)
    for ancestor in analysis.ancestors(call):
        if ancestor is loop_node:
            break
        if isinstance(ancestor, (ast.If, ast.IfExp)):
            return True
    if isinstance(loop_node, (ast.For, ast.AsyncFor)):
        for statement in loop_node.body:
            if any(isinstance(n, ast.Continue) for n in ast.walk(statement)) and isinstance(statement, ast.If):
                return True
    return False


def _leaf_only_fix(analysis: DocumentAnalysis, target: ast.expr, iterable: ast.expr) -> Fix | None:
    positions = analysis.positions
    if isinstance(target, ast.Name):
        module_name = target.id
        element = module_name
    elif isinstance(target, ast.Tuple) and len(target.elts) == 2 and all(isinstance(e, ast.Name) for e in target.elts):
        module_name = target.elts[1].id  # type: ignore[attr-defined]
        element = f"({positions.text(target.elts[0])}, {module_name})"
        element_target = f"{positions.text(target.elts[0])}, {module_name}"
    else:
        return None
    loop_target = element if isinstance(target, ast.Name) else element_target
    replacement = (
        f"({element} for {loop_target} in {positions.text(iterable)} if next({module_name}.children(), None) is None)"
    )
    return Fix(
        "Hook only leaf modules (skip the model and containers)",
        (TextEdit(positions.span(iterable), replacement),),
        preferred=False,
    )
