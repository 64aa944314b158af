"""Finds layer definitions and layer call sites in a parsed file.

A layer is a constructor call of a ``torch.nn`` class or of an ``nn.Module``
subclass from the same file, found where it becomes part of a model:
``self.x = ...`` (or ``self.add_module('x', ...)``) in a method of a module
class, an entry of ``nn.Sequential`` / ``nn.ModuleList`` / ``nn.ModuleDict``
(recursively), or a variable assigned outside module classes
(``model = nn.Sequential(...)``), also as either branch of a conditional
(``self.damp = Damp() if cfg.damp else nn.Identity()``). Call sites are
``self.x(...)`` inside the methods of the class that owns ``x`` (or a
subclass of it in the file), an entry of it (``self.heads["cls"](x)``) and
the same through a local name (``f = self.fc; f(x)``, ``b = self.branches;
b["mix"](h)``, ``for block in self.blocks: block(x)``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .call_targets import EVERY_ENTRY, Target, called_target, is_name, local_layer_names, walk_statements
from .model import DefinitionKind, LayerCall, LayerDefinition, ModuleClass
from .source import Positions, Span
from .torch_names import CONTAINERS, EXTERNAL_MODULE_BASES, TorchNames
from .tree_index import TreeIndex

MAX_CONSTRUCTOR_TEXT = 120
"""Longer constructor texts are shortened in hovers."""


def find_module_classes(index: TreeIndex, names: TorchNames) -> dict[str, ModuleClass]:
    """Every class deriving (in this file, transitively) from ``nn.Module``."""
    classes = index.of(ast.ClassDef)
    found: dict[str, ModuleClass] = {}
    changed = True
    while changed:  # a fixed point: a base may be defined after its subclass
        changed = False
        for node in classes:
            if node.name in found:
                continue
            local_bases = [b.id for b in node.bases if isinstance(b, ast.Name) and b.id in found]
            if local_bases or any(_is_torch_module_base(b, names) for b in node.bases):
                found[node.name] = ModuleClass(node.name, node, local_bases)
                changed = True
    return found


def _is_torch_module_base(base: ast.expr, names: TorchNames) -> bool:
    if names.nn_class(base) is not None:
        return True
    name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else None
    return name in EXTERNAL_MODULE_BASES


class LayerFinder:
    """Collects layer definitions and call sites of one file."""

    def __init__(
        self,
        tree: ast.Module,
        index: TreeIndex,
        names: TorchNames,
        classes: dict[str, ModuleClass],
        positions: Positions,
    ) -> None:
        self.tree = tree
        self.index = index
        self.names = names
        self.classes = classes
        self.positions = positions
        self.definitions: list[LayerDefinition] = []
        self.calls: list[LayerCall] = []

    def run(self) -> None:
        class_nodes = {id(c.node) for c in self.classes.values()}
        for module_class in self.classes.values():
            for method in _methods(module_class.node):
                self._scan_method(module_class, method)
        self._scan_variables(self.tree, class_nodes)
        self._scan_calls()
        self.definitions.sort(key=lambda d: (d.call_span.start_line, d.call_span.start_col))
        self.calls.sort(key=lambda c: (c.attribute_span.start_line, c.attribute_span.start_col))

    # -- what a constructor is ------------------------------------------------

    def layer_class(self, node: ast.expr) -> tuple[str, bool] | None:
        """(class name, user-defined) if ``node`` constructs a layer."""
        if not isinstance(node, ast.Call):
            return None
        nn_name = self.names.nn_class(node.func)
        if nn_name is not None:
            return nn_name, False
        if isinstance(node.func, ast.Name) and node.func.id in self.classes:
            return node.func.id, True
        return None

    # -- definitions -------------------------------------------------------------

    def _scan_method(self, owner: ModuleClass, method: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self_name = _first_param(method)
        if self_name is None:
            return
        local_constructors: dict[str, ast.Call] = {}
        for statement in walk_statements(method.body):
            target, value = _single_assignment(statement)
            if target is None or value is None:
                if isinstance(statement, ast.Expr):
                    self._scan_add_module(owner, self_name, statement.value)
                continue
            if isinstance(target, ast.Name) and isinstance(value, ast.Call) and self.layer_class(value):
                local_constructors[target.id] = value
                continue
            if not (isinstance(target, ast.Attribute) and is_name(target.value, self_name)):
                continue
            if isinstance(value, ast.Name) and value.id in local_constructors:
                value = local_constructors[value.id]
            call, whole = self._constructor_of(value)
            if call is not None:
                name_span = self.positions.span(target)
                attr_span = _attribute_name_span(name_span, target.attr)
                self._add(owner, target.attr, target.attr, call, "attribute", attr_span, top_level=True, whole=whole)

    def _constructor_of(self, value: ast.expr) -> tuple[ast.Call | None, ast.expr | None]:
        """(the call to record, the whole expression when it is a conditional) for an assigned value.

        ``Damp() if cfg.damp else nn.Identity()`` is one layer whichever branch runs: its first
        branch that constructs a layer stands for it (class, arguments), the whole expression for
        its place in the file.
        """
        if isinstance(value, ast.Call):
            return value, None
        if isinstance(value, ast.IfExp):
            for branch in (value.body, value.orelse):
                call, _ = self._constructor_of(branch)
                if call is not None and self.layer_class(call) is not None:
                    return call, value
        return None, None

    def _scan_add_module(self, owner: ModuleClass, self_name: str, expr: ast.expr) -> None:
        if not (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in ("add_module", "register_module")
            and is_name(expr.func.value, self_name)
            and len(expr.args) == 2
        ):
            return
        key, value = expr.args
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Call):
            self._add(owner, key.value, key.value, value, "add_module", self.positions.span(key), top_level=True)

    def _scan_variables(self, tree: ast.Module, class_nodes: set[int]) -> None:
        """``model = nn.Sequential(...)`` outside module classes."""
        for statement in _walk_outside_classes(tree.body, class_nodes):
            target, value = _single_assignment(statement)
            if not isinstance(target, ast.Name) or value is None:
                continue
            call, whole = self._constructor_of(value)
            if call is not None:
                self._add(
                    None, "", target.id, call, "variable", self.positions.span(target), top_level=False, whole=whole
                )

    def _add(
        self,
        owner: ModuleClass | None,
        path: str,
        display: str,
        call: ast.Call,
        kind: DefinitionKind,
        name_span: Span,
        *,
        top_level: bool,
        whole: ast.expr | None = None,
    ) -> None:
        """``whole``: the conditional expression ``call`` is a branch of (its span and text are the layer's)."""
        found = self.layer_class(call)
        if found is None:
            return
        cls, user_defined = found
        definition = LayerDefinition(
            path=path,
            display_name=display,
            cls=cls,
            user_defined=user_defined,
            owner=owner.name if owner else None,
            kind=kind,
            call_span=self.positions.span(whole or call),
            name_span=name_span,
            constructor_text=_shorten(self.positions.text(whole or call)),
            inplace=_has_true_keyword(call, "inplace"),
            call_node=call,
        )
        self.definitions.append(definition)
        if owner is not None and top_level:
            owner.layers.setdefault(path, definition)
        if not user_defined and cls in CONTAINERS:
            for entry_path, entry_display, entry_kind, entry in self._container_entries(cls, call, path, display):
                self._add(
                    owner, entry_path, entry_display, entry, entry_kind, self._class_name_span(entry), top_level=False
                )

    def _class_name_span(self, call: ast.Call) -> Span:
        func = call.func
        span = self.positions.span(func)
        if isinstance(func, ast.Attribute):
            return _attribute_name_span(span, func.attr)
        return span

    def _container_entries(
        self, cls: str, call: ast.Call, path: str, display: str
    ) -> Iterator[tuple[str, str, DefinitionKind, ast.Call]]:
        def child(key: str) -> tuple[str, str]:
            child_path = f"{path}.{key}" if path else key
            return child_path, f"{display}[{key!r}]" if not key.isdigit() and key != "*" else f"{display}[{key}]"

        if cls == "Sequential":
            if len(call.args) == 1 and _is_ordered_dict(call.args[0]):
                yield from self._pair_entries(call.args[0].args[0] if call.args[0].args else None, child)  # type: ignore[attr-defined]
                return
            for index, argument in enumerate(call.args):
                if isinstance(argument, ast.Starred):
                    return
                if isinstance(argument, ast.Call):
                    yield (*child(str(index)), "sequential-entry", argument)
        elif cls == "ModuleList" and call.args:
            items = call.args[0]
            if isinstance(items, (ast.List, ast.Tuple)):
                for index, element in enumerate(items.elts):
                    if isinstance(element, ast.Starred):
                        return
                    if isinstance(element, ast.Call):
                        yield (*child(str(index)), "list-entry", element)
            elif isinstance(items, (ast.ListComp, ast.GeneratorExp)) and isinstance(items.elt, ast.Call):
                yield (*child("*"), "list-entry", items.elt)
        elif cls == "ModuleDict" and call.args:
            items = call.args[0]
            if isinstance(items, ast.Dict):
                for key, value in zip(items.keys, items.values):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Call):
                        yield (*child(key.value), "dict-entry", value)
            else:
                yield from self._pair_entries(items, child)

    def _pair_entries(self, items: ast.expr | None, child) -> Iterator[tuple[str, str, DefinitionKind, ast.Call]]:
        """``[('conv', nn.Conv2d(...)), ...]`` as given to OrderedDict/ModuleDict."""
        if not isinstance(items, (ast.List, ast.Tuple)):
            return
        for element in items.elts:
            if (
                isinstance(element, ast.Tuple)
                and len(element.elts) == 2
                and isinstance(element.elts[0], ast.Constant)
                and isinstance(element.elts[0].value, str)
                and isinstance(element.elts[1], ast.Call)
            ):
                yield (*child(element.elts[0].value), "dict-entry", element.elts[1])

    # -- call sites -----------------------------------------------------------------

    def attribute_layers(self, module_class: ModuleClass) -> dict[str, LayerDefinition]:
        """Layers of a class including those inherited from module classes in the file."""
        merged: dict[str, LayerDefinition] = {}
        seen: set[str] = set()
        stack = [module_class]
        while stack:
            current = stack.pop()
            if current.name in seen:
                continue
            seen.add(current.name)
            for name, definition in current.layers.items():
                merged.setdefault(name, definition)
            stack.extend(self.classes[b] for b in current.bases if b in self.classes)
        return merged

    def _scan_calls(self) -> None:
        """Calls of a class's layers in its methods, from the file's call index: ``self.x(...)``,
        ``self.x[key](...)`` and the same through a local name."""
        parents = self.index.parents
        layers_of: dict[str, dict[str, LayerDefinition]] = {}
        names_of: dict[int, dict[str, Target]] = {}
        # keyed by (owner, path); a lookup with an owner of None simply misses
        entries: dict[tuple[str | None, str], LayerDefinition] = {
            (d.owner, d.path): d for d in self.definitions if d.owner is not None
        }
        for node in self.index.of(ast.Call):
            func = node.func
            if not isinstance(func, (ast.Attribute, ast.Name, ast.Subscript)):
                continue
            method = _enclosing_method(parents, node)
            if method is None:
                continue
            function, class_node = method
            module_class = self.classes.get(class_node.name)
            self_name = _first_param(function)
            if module_class is None or module_class.node is not class_node or self_name is None:
                continue
            if id(function) not in names_of:
                names_of[id(function)] = local_layer_names(function, self_name)
            target = called_target(func, self_name, names_of[id(function)])
            if target is None:
                continue
            if module_class.name not in layers_of:
                layers_of[module_class.name] = self.attribute_layers(module_class)
            attr, key = target
            layer = layers_of[module_class.name].get(attr)
            if layer is None:
                continue
            if key is not None and key != EVERY_ENTRY:  # an entry defined in the container's call, if it is
                layer = entries.get((layer.owner, f"{layer.path}.{key}"), layer)
            self.calls.append(
                LayerCall(
                    layer=layer,
                    attribute_span=self.positions.span(func),
                    call_span=self.positions.span(node),
                    call_node=node,
                    method=function.name,
                )
            )


def _enclosing_method(
    parents: dict[int, ast.AST], node: ast.AST
) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef] | None:
    """The outermost function directly inside a class around ``node`` (closures count)."""
    found = None
    current = parents.get(id(node))
    while current is not None:
        parent = parents.get(id(current))
        if isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef)) and isinstance(parent, ast.ClassDef):
            found = (current, parent)
            break
        current = parent
    return found


# -- small AST helpers -------------------------------------------------------------


def _methods(node: ast.ClassDef) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield statement


def _first_param(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    params = function.args.posonlyargs + function.args.args
    return params[0].arg if params else None


def _single_assignment(statement: ast.stmt) -> tuple[ast.expr | None, ast.expr | None]:
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        return statement.targets[0], statement.value
    if isinstance(statement, ast.AnnAssign) and statement.value is not None:
        return statement.target, statement.value
    return None, None


def _walk_outside_classes(body: list[ast.stmt], class_nodes: set[int]) -> Iterator[ast.stmt]:
    """Statements at module level and inside functions, skipping module classes."""
    for statement in body:
        if id(statement) in class_nodes:
            continue
        yield statement
        if isinstance(statement, ast.ClassDef):
            for inner in statement.body:
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield from _walk_outside_classes(inner.body, class_nodes)
            continue
        for name in ("body", "orelse", "finalbody"):
            yield from _walk_outside_classes(getattr(statement, name, []) or [], class_nodes)
        for handler in getattr(statement, "handlers", []) or []:
            yield from _walk_outside_classes(handler.body, class_nodes)


def _attribute_name_span(expr_span: Span, attr: str) -> Span:
    """The span of ``attr`` at the end of an attribute expression ``a.b.attr``."""
    return Span(expr_span.end_line, max(expr_span.end_col - len(attr), 0), expr_span.end_line, expr_span.end_col)


def _has_true_keyword(call: ast.Call, keyword: str) -> bool:
    return any(k.arg == keyword and isinstance(k.value, ast.Constant) and k.value.value is True for k in call.keywords)


def _is_ordered_dict(node: ast.expr) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "OrderedDict"


def _shorten(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_CONSTRUCTOR_TEXT else flat[: MAX_CONSTRUCTOR_TEXT - 1] + "…"
