"""HS005: a full backward hook on a module whose input or output is changed in place.

``register_full_backward_hook`` (and the backward pre-hook) wraps the
module's inputs and outputs in views made by ``BackwardHookFunction``.
Modifying one of those in place — an ``nn.ReLU(inplace=True)`` right after
the hooked layer, ``x += ...``, ``x.relu_()`` in its forward — makes
autograd raise "Output 0 of BackwardHookFunctionBackward is a view and is
being modified inplace" during forward. Where the in-place op comes from an
``inplace=True`` argument in this file the quick fix turns it off.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..analysis import DocumentAnalysis, LayerDefinition, ModuleClass
from ..analysis.hooks import HookRegistration
from ..analysis.source import Span
from .finding import Finding, Fix, TextEdit

FULL_BACKWARD_METHODS = frozenset({"register_full_backward_hook", "register_full_backward_pre_hook"})
MODULE_ITERATORS = frozenset({"modules", "named_modules", "children", "named_children"})


@dataclass(frozen=True)
class InPlaceUse:
    """Where a tensor is modified in place, and the ``inplace=True`` to turn off if any."""

    node: ast.AST
    description: str
    keyword: ast.keyword | None = None


class InPlaceChecker:
    """Answers 'is this modified in place?' for layers and expressions of one file."""

    def __init__(self, analysis: DocumentAnalysis) -> None:
        self.analysis = analysis
        self._self_inplace: dict[int, InPlaceUse | None] = {}

    # -- a layer that modifies its own input ---------------------------------------

    def layer_modifies_input(self, layer: LayerDefinition) -> InPlaceUse | None:
        key = id(layer.call_node)
        if key in self._self_inplace:
            return self._self_inplace[key]
        self._self_inplace[key] = None  # guards recursion through user classes
        result = self._compute_layer(layer)
        self._self_inplace[key] = result
        return result

    def _compute_layer(self, layer: LayerDefinition) -> InPlaceUse | None:
        call = layer.call_node
        if layer.inplace:
            keyword = next(k for k in call.keywords if k.arg == "inplace")
            return InPlaceUse(call, f"{layer.cls}(inplace=True) at line {layer.line + 1}", keyword)
        if layer.cls == "Sequential" and not layer.user_defined:
            first = self._first_entry(layer)
            return self.layer_modifies_input(first) if first else None
        if layer.user_defined:
            module_class = self.analysis.classes.get(layer.cls)
            if module_class is not None:
                return self.forward_modifies_input(module_class)
        return None

    def _first_entry(self, layer: LayerDefinition) -> LayerDefinition | None:
        prefix = f"{layer.path}.0" if layer.path else "0"
        return next(
            (
                d
                for d in self.analysis.layers
                if d.owner == layer.owner and d.path == prefix and d.call_span.start_line >= layer.call_span.start_line
            ),
            None,
        )

    def forward_modifies_input(self, module_class: ModuleClass) -> InPlaceUse | None:
        forward = module_class.method("forward")
        if forward is None:
            return None
        params = [a.arg for a in forward.args.posonlyargs + forward.args.args][1:]
        live = set(params)
        for statement in forward.body:
            use = self.first_inplace_use(statement, lambda e: isinstance(e, ast.Name) and e.id in live, module_class)
            if use is not None:
                return use
            live.difference_update(_assigned_names(statement))  # in place: the lambda above reads this set
            if not live:
                return None
        return None

    # -- in-place uses of a value inside a statement ---------------------------------

    def first_inplace_use(
        self, root: ast.AST, is_value: Callable[[ast.expr], bool], owner: ModuleClass | None
    ) -> InPlaceUse | None:
        for node in ast.walk(root):
            use = self._inplace_use(node, is_value, owner)
            if use is not None:
                return use
        return None

    def _inplace_use(
        self, node: ast.AST, is_value: Callable[[ast.expr], bool], owner: ModuleClass | None
    ) -> InPlaceUse | None:
        names = self.analysis.names
        text = self.analysis.positions.text
        if isinstance(node, ast.AugAssign) and is_value(_strip_subscripts(node.target)):
            return InPlaceUse(node, f"'{text(node)}' at line {node.lineno}")
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Subscript) and is_value(_strip_subscripts(t)) for t in node.targets
        ):
            return InPlaceUse(node, f"an item assignment at line {node.lineno}")
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr.endswith("_") and not func.attr.startswith("_"):
            if is_value(_strip_subscripts(func.value)) and func.attr != "requires_grad_":
                return InPlaceUse(node, f".{func.attr}() at line {node.lineno}")
        if not node.args or not is_value(node.args[0]):
            return None
        inplace_keyword = next(
            (
                k
                for k in node.keywords
                if k.arg == "inplace" and isinstance(k.value, ast.Constant) and k.value.value is True
            ),
            None,
        )
        if inplace_keyword is not None:
            return InPlaceUse(node, f"{text(func)}(..., inplace=True) at line {node.lineno}", inplace_keyword)
        for function in (names.torch_function(func), names.functional_function(func)):
            if function and function.endswith("_") and not function.startswith("_"):
                return InPlaceUse(node, f"{text(func)}() at line {node.lineno}")
        if (
            owner is not None
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
        ):
            layer = _class_layers(self.analysis, owner).get(func.attr)
            if layer is not None:
                use = self.layer_modifies_input(layer)
                if use is not None:
                    return InPlaceUse(node, f"self.{func.attr} ({use.description})", use.keyword)
        return None

    # -- the output of a layer, used in place by its parent ---------------------------

    def output_modified_after(self, layer: LayerDefinition) -> InPlaceUse | None:
        if layer.kind == "sequential-entry":
            following = self._next_sequential_entry(layer)
            if following is not None:
                return self.layer_modifies_input(following)
            return None
        if layer.owner is None:
            return None
        owner = self.analysis.classes.get(layer.owner)
        if owner is None:
            return None
        for call in self.analysis.calls:
            if call.layer is layer:
                use = self._use_after_call(call.call_node, owner)
                if use is not None:
                    return use
        return None

    def _next_sequential_entry(self, layer: LayerDefinition) -> LayerDefinition | None:
        parent_path, _, index = layer.path.rpartition(".")
        if not index.isdigit():
            return None
        sibling = f"{parent_path}.{int(index) + 1}" if parent_path else str(int(index) + 1)
        return next(
            (
                d
                for d in self.analysis.layers
                if d.owner == layer.owner and d.path == sibling and d.kind == "sequential-entry"
            ),
            None,
        )

    def _use_after_call(self, call: ast.Call, owner: ModuleClass) -> InPlaceUse | None:
        parent = self.analysis.parent(call)
        # ``self.relu(self.conv(x))``, ``self.conv(x).relu_()``
        if isinstance(parent, ast.Call) or (isinstance(parent, ast.Attribute) and parent.value is call):
            holder = parent if isinstance(parent, ast.Call) else self.analysis.parent(parent)
            if holder is not None:
                use = self._inplace_use(holder, lambda e: e is call, owner)
                if use is not None:
                    return use
        # ``x = self.conv(x)`` followed by statements using x in place
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
            name = parent.targets[0].id
            block = _containing_block(self.analysis, parent)
            if block is None:
                return None
            following = block[block.index(parent) + 1 :]
            for statement in following:
                use = self.first_inplace_use(statement, lambda e: isinstance(e, ast.Name) and e.id == name, owner)
                if use is not None:
                    return use
                if name in _assigned_names(statement):
                    return None
        return None


def full_backward_inplace(analysis: DocumentAnalysis, registrations: list[HookRegistration]) -> Iterator[Finding]:
    checker = InPlaceChecker(analysis)
    for registration in registrations:
        if registration.method not in FULL_BACKWARD_METHODS or registration.receiver is None:
            continue
        found = _problem_for_receiver(analysis, checker, registration)
        if found is None:
            continue
        target, where, use = found
        func = registration.call.func
        span = analysis.positions.span(func)
        name_span = Span(span.end_line, span.end_col - len(registration.method), span.end_line, span.end_col)
        fix = None
        if use.keyword is not None:
            value_span = analysis.positions.span(use.keyword.value)
            fix = Fix(f"Use inplace=False (line {use.keyword.value.lineno})", (TextEdit(value_span, "False"),))
        yield Finding(
            "HS005",
            name_span,
            f"{registration.method}() on {target}: {where} {use.description}. A full backward hook wraps "
            "the module's inputs and outputs in views, and modifying them in place makes autograd raise "
            "'Output 0 of BackwardHookFunctionBackward is a view and is being modified inplace'. "
            "Use inplace=False there, or hook another module.",
            fix=fix,
        )


def _problem_for_receiver(
    analysis: DocumentAnalysis, checker: InPlaceChecker, registration: HookRegistration
) -> tuple[str, str, InPlaceUse] | None:
    receiver = registration.receiver
    assert receiver is not None
    text = analysis.positions.text(receiver)
    # for m in model.modules(): m.register_full_backward_hook(...)
    if isinstance(receiver, ast.Name):
        iterable = _loop_iterable(analysis, receiver)
        if (
            isinstance(iterable, ast.Call)
            and isinstance(iterable.func, ast.Attribute)
            and iterable.func.attr in MODULE_ITERATORS
        ):
            root = _resolve_module(analysis, iterable.func.value, registration.call)
            layers = _layers_under(analysis, root) if root is not None else []
            for member in layers:
                use = checker.layer_modifies_input(member)
                if use is not None:
                    return f"every module of {analysis.positions.text(iterable.func.value)}", "it includes", use
            return None
    layer = _resolve_layer(analysis, receiver, registration.call)
    if layer is None:
        return None
    use = checker.layer_modifies_input(layer)
    if use is not None:
        return f"'{text}'", "it modifies its own input in place:", use
    use = checker.output_modified_after(layer)
    if use is not None:
        return f"'{text}'", "its output is modified in place right after, by", use
    return None


# -- resolving receivers to layers ------------------------------------------------------


def _class_layers(analysis: DocumentAnalysis, module_class: ModuleClass) -> dict[str, LayerDefinition]:
    merged: dict[str, LayerDefinition] = {}
    stack, seen = [module_class], set()
    while stack:
        current = stack.pop()
        if current.name in seen:
            continue
        seen.add(current.name)
        for name, definition in current.layers.items():
            merged.setdefault(name, definition)
        stack.extend(analysis.classes[b] for b in current.bases if b in analysis.classes)
    return merged


def _enclosing_class(analysis: DocumentAnalysis, node: ast.AST) -> ModuleClass | None:
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, ast.ClassDef):
            return analysis.classes.get(ancestor.name)
    return None


def _resolve_module(analysis: DocumentAnalysis, expr: ast.expr, at: ast.AST) -> ModuleClass | LayerDefinition | None:
    """``self`` -> its class; ``model`` -> the class of ``model = Net()``; ``a.b`` -> a layer."""
    if isinstance(expr, ast.Name):
        if expr.id == "self":
            return _enclosing_class(analysis, at)
        for definition in analysis.layers:
            if definition.kind == "variable" and definition.display_name == expr.id:
                return _as_class(analysis, definition) or definition
        return None
    if isinstance(expr, ast.Attribute):
        base = _resolve_module(analysis, expr.value, at)
        module_class = _as_class(analysis, base) if isinstance(base, LayerDefinition) else base
        if isinstance(module_class, ModuleClass):
            return _class_layers(analysis, module_class).get(expr.attr)
        if isinstance(base, LayerDefinition):
            return _child(analysis, base, expr.attr)
        return None
    if isinstance(expr, ast.Subscript):
        base = _resolve_module(analysis, expr.value, at)
        key = expr.slice
        if isinstance(base, LayerDefinition) and isinstance(key, ast.Constant):
            return _child(analysis, base, str(key.value))
    return None


def _resolve_layer(analysis: DocumentAnalysis, expr: ast.expr, at: ast.AST) -> LayerDefinition | None:
    found = _resolve_module(analysis, expr, at)
    return found if isinstance(found, LayerDefinition) else None


def _as_class(analysis: DocumentAnalysis, layer: LayerDefinition | ModuleClass | None) -> ModuleClass | None:
    if isinstance(layer, LayerDefinition) and layer.user_defined:
        return analysis.classes.get(layer.cls)
    return layer if isinstance(layer, ModuleClass) else None


def _child(analysis: DocumentAnalysis, layer: LayerDefinition, key: str) -> LayerDefinition | None:
    path = f"{layer.path}.{key}" if layer.path else key
    return next(
        (
            d
            for d in analysis.layers
            if d.owner == layer.owner
            and d.path == path
            and layer.call_span.start_line <= d.call_span.start_line <= layer.call_span.end_line
        ),
        None,
    )


def _layers_under(analysis: DocumentAnalysis, root: ModuleClass | LayerDefinition) -> list[LayerDefinition]:
    """Every layer definition reachable from a class or a layer in this file."""
    result: list[LayerDefinition] = []
    classes_seen: set[str] = set()
    pending: list[ModuleClass | LayerDefinition] = [root]
    while pending:
        item = pending.pop()
        if isinstance(item, ModuleClass):
            if item.name in classes_seen:
                continue
            classes_seen.add(item.name)
            owned = [d for d in analysis.layers if d.owner == item.name]
            result.extend(owned)
            pending.extend(c for d in owned if (c := _as_class(analysis, d)) is not None)
        else:
            span = item.call_span
            inside = [
                d
                for d in analysis.layers
                if d.owner == item.owner and span.start_line <= d.call_span.start_line <= span.end_line
            ]
            result.extend(inside)
            pending.extend(c for d in inside if (c := _as_class(analysis, d)) is not None)
    return result


def _loop_iterable(analysis: DocumentAnalysis, name: ast.Name) -> ast.expr | None:
    for ancestor in analysis.ancestors(name):
        if isinstance(ancestor, (ast.For, ast.AsyncFor)):
            if any(isinstance(n, ast.Name) and n.id == name.id for n in ast.walk(ancestor.target)):
                return ancestor.iter
        elif isinstance(ancestor, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            for generator in ancestor.generators:
                if any(isinstance(n, ast.Name) and n.id == name.id for n in ast.walk(generator.target)):
                    return generator.iter
        elif isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return None
    return None


# -- small helpers ---------------------------------------------------------------------------


def _strip_subscripts(expr: ast.expr) -> ast.expr:
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return expr


def _assigned_names(statement: ast.stmt) -> set[str]:
    names: set[str] = set()
    targets: list[ast.expr] = []
    if isinstance(statement, ast.Assign):
        targets = list(statement.targets)
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        targets = [statement.target] if isinstance(statement, ast.AnnAssign) else []
    for target in targets:
        names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def _containing_block(analysis: DocumentAnalysis, statement: ast.stmt) -> list[ast.stmt] | None:
    parent = analysis.parent(statement)
    if parent is None:
        return None
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and statement in block:
            return block
    return None
