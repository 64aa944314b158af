"""Which names in a file refer to ``torch``, ``torch.nn`` and its layer classes.

Covers ``import torch``, ``import torch.nn as nn``, ``from torch import nn``,
``from torch.nn import Conv2d as C`` (imports anywhere in the file count:
the analysis is per file, not per scope).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .tree_index import TreeIndex

NOT_MODULES = frozenset({"Parameter", "UninitializedParameter", "UninitializedBuffer", "Buffer"})
"""Capitalised names in ``torch.nn`` that are not ``nn.Module`` subclasses."""

CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})

EXTERNAL_MODULE_BASES = frozenset({"LightningModule"})
"""Base classes from other libraries known to derive from ``nn.Module``."""


@dataclass
class TorchNames:
    """The local names bound to torch things in one file."""

    torch_modules: set[str] = field(default_factory=set)
    """Names bound to the ``torch`` package (``torch``, ``import torch as th``)."""
    nn_modules: set[str] = field(default_factory=set)
    """Names bound to ``torch.nn`` (``nn``)."""
    functional_modules: set[str] = field(default_factory=set)
    """Names bound to ``torch.nn.functional`` (``F``)."""
    nn_classes: dict[str, str] = field(default_factory=dict)
    """Local name -> ``torch.nn`` attribute name (``from torch.nn import Conv2d as C``)."""
    functional_names: dict[str, str] = field(default_factory=dict)
    """Local name -> ``torch.nn.functional`` function (``from torch.nn.functional import relu``)."""

    def nn_attribute(self, expr: ast.expr) -> str | None:
        """The ``torch.nn`` attribute an expression names (``nn.Conv2d`` -> ``Conv2d``)."""
        if isinstance(expr, ast.Name):
            return self.nn_classes.get(expr.id)
        if isinstance(expr, ast.Attribute) and self.is_nn(expr.value):
            return expr.attr
        return None

    def nn_class(self, expr: ast.expr) -> str | None:
        """Like ``nn_attribute`` but only for layer classes (capitalised, modules)."""
        name = self.nn_attribute(expr)
        if name and name[0].isupper() and name not in NOT_MODULES:
            return name
        return None

    def is_nn(self, expr: ast.expr) -> bool:
        """Whether ``expr`` is ``torch.nn`` (``nn`` or ``torch.nn``)."""
        if isinstance(expr, ast.Name):
            return expr.id in self.nn_modules
        return (
            isinstance(expr, ast.Attribute)
            and expr.attr == "nn"
            and isinstance(expr.value, ast.Name)
            and expr.value.id in self.torch_modules
        )

    def functional_function(self, expr: ast.expr) -> str | None:
        """The ``torch.nn.functional`` function an expression names (``F.relu``)."""
        if isinstance(expr, ast.Name):
            return self.functional_names.get(expr.id)
        if not isinstance(expr, ast.Attribute):
            return None
        base = expr.value
        if isinstance(base, ast.Name) and base.id in self.functional_modules:
            return expr.attr
        if isinstance(base, ast.Attribute) and base.attr == "functional" and self.is_nn(base.value):
            return expr.attr
        return None

    def torch_function(self, expr: ast.expr) -> str | None:
        """The ``torch`` function an expression names (``torch.relu_``)."""
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            if expr.value.id in self.torch_modules:
                return expr.attr
        return None


def collect_torch_names(index: TreeIndex) -> TorchNames:
    """Read every import in the file and record the torch-related bindings."""
    names = TorchNames()
    for node in index.of(ast.Import, ast.ImportFrom):
        if isinstance(node, ast.Import):
            for alias in node.names:
                _record_import(names, alias)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                _record_import_from(names, node.module, alias)
    return names


def _record_import(names: TorchNames, alias: ast.alias) -> None:
    if alias.asname is None:
        # ``import torch.nn`` binds ``torch``; the dotted access is resolved later.
        if alias.name.split(".")[0] == "torch":
            names.torch_modules.add("torch")
        return
    if alias.name == "torch":
        names.torch_modules.add(alias.asname)
    elif alias.name == "torch.nn":
        names.nn_modules.add(alias.asname)
    elif alias.name == "torch.nn.functional":
        names.functional_modules.add(alias.asname)


def _record_import_from(names: TorchNames, module: str, alias: ast.alias) -> None:
    local = alias.asname or alias.name
    if module == "torch":
        if alias.name == "nn":
            names.nn_modules.add(local)
    elif module == "torch.nn":
        if alias.name == "functional":
            names.functional_modules.add(local)
        elif alias.name != "*":
            names.nn_classes[local] = alias.name
    elif module.startswith("torch.nn.modules"):
        if alias.name != "*":
            names.nn_classes[local] = alias.name
    elif module == "torch.nn.functional" and alias.name != "*":
        names.functional_names[local] = alias.name
