"""What the analysis finds in one document: module classes, layers, call sites."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Literal

from .source import Span

DefinitionKind = Literal["attribute", "add_module", "sequential-entry", "list-entry", "dict-entry", "variable"]


@dataclass(frozen=True, slots=True)
class LayerDefinition:
    """One place where a layer (an ``nn.Module`` instance) is constructed."""

    path: str
    """Name relative to its owner: ``conv1``, ``features.0``, ``heads.cls``,
    ``blocks.*`` (a comprehension), ``''`` for a variable root."""
    display_name: str
    """What the user reads: ``conv1``, ``features[0]``, or the variable name."""
    cls: str
    """Class name as written: ``Conv2d``, ``Block``."""
    user_defined: bool
    """The class is an ``nn.Module`` subclass defined in this file."""
    owner: str | None
    """The ``nn.Module`` subclass whose attribute this is, None for a variable."""
    kind: DefinitionKind
    call_span: Span
    """The constructor call ``nn.Conv2d(...)`` (a conditional ``A() if c else B()``: all of it)."""
    name_span: Span
    """Where the name is written (``conv1`` in ``self.conv1 = ...``); the
    constructor's class name for container entries."""
    constructor_text: str
    """Source text of the call, shortened for display."""
    inplace: bool
    """Constructed with ``inplace=True`` (``nn.ReLU(inplace=True)``)."""
    call_node: ast.Call = field(compare=False, repr=False)
    """The constructor call (of a conditional: its first branch that constructs a layer)."""

    @property
    def line(self) -> int:
        """0-based line of the definition (where its code lens sits)."""
        return self.call_span.start_line


@dataclass(frozen=True, slots=True)
class LayerCall:
    """A call of a layer attribute in a method: ``self.conv1(x)``, ``self.heads["cls"](x)``, ``f(x)``
    after ``f = self.fc``."""

    layer: LayerDefinition
    attribute_span: Span
    """The called expression: ``self.conv1``, ``self.heads["cls"]``, ``f``, ``b["mix"]``."""
    call_span: Span
    call_node: ast.Call = field(compare=False, repr=False)
    method: str
    """Name of the method containing the call (``forward``)."""

    @property
    def line(self) -> int:
        return self.attribute_span.start_line


@dataclass(slots=True)
class ModuleClass:
    """An ``nn.Module`` subclass defined in the file."""

    name: str
    node: ast.ClassDef = field(repr=False)
    bases: list[str]
    """Names of base classes that are module classes in this file."""
    layers: dict[str, LayerDefinition] = field(default_factory=dict)
    """Top-level attribute name -> its definition (``conv1``, ``features``)."""

    def method(self, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        for statement in self.node.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name == name:
                return statement
        return None
