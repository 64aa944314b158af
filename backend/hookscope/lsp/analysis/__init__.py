"""Pure source analysis for the language server (no LSP types, no torch).

``analyze(source)`` parses a document tolerantly and finds its module
classes, layer definitions and layer call sites.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .layers import LayerFinder, find_module_classes
from .model import LayerCall, LayerDefinition, ModuleClass
from .source import ParsedSource, Positions, Span, parse_tolerant
from .torch_names import TorchNames, collect_torch_names

__all__ = [
    "DocumentAnalysis",
    "LayerCall",
    "LayerDefinition",
    "ModuleClass",
    "Positions",
    "Span",
    "analyze",
]


@dataclass
class DocumentAnalysis:
    """Everything the features need to know about one version of a document."""

    parsed: ParsedSource
    positions: Positions
    names: TorchNames
    classes: dict[str, ModuleClass]
    layers: list[LayerDefinition]
    calls: list[LayerCall]
    parents: dict[int, ast.AST] = field(default_factory=dict, repr=False)
    """id(node) -> parent node, for rules that look at a node's context."""

    @property
    def tree(self) -> ast.Module | None:
        return self.parsed.tree

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def ancestors(self, node: ast.AST):
        """Parents of ``node`` from the nearest outwards."""
        current = self.parents.get(id(node))
        while current is not None:
            yield current
            current = self.parents.get(id(current))


def analyze(source: str) -> DocumentAnalysis:
    """Analyse one document's text; never raises on bad input."""
    parsed = parse_tolerant(source)
    positions = Positions(parsed.lines)
    if parsed.tree is None:
        return DocumentAnalysis(parsed, positions, TorchNames(), {}, [], [])
    tree = parsed.tree
    names = collect_torch_names(tree)
    classes = find_module_classes(tree, names)
    finder = LayerFinder(tree, names, classes, positions)
    finder.run()
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    return DocumentAnalysis(parsed, positions, names, classes, finder.definitions, finder.calls, parents)
