"""Pure source analysis for the language server (no LSP types, no torch).

``analyze(source, previous)`` parses a document tolerantly and finds its
module classes, layer definitions and layer call sites; given the previous
version's analysis it re-parses and re-indexes only the top-level statements
the edit touched (``incremental.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from .incremental import reparse_changed
from .layers import LayerFinder, find_module_classes
from .model import LayerCall, LayerDefinition, ModuleClass
from .source import ParsedSource, Positions, Span, parse_tolerant
from .torch_names import TorchNames, collect_torch_names
from .tree_index import TreeIndex

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
    index: TreeIndex = field(default_factory=lambda: TreeIndex(None), repr=False)
    """Parents and nodes by type, for rules that look at a node's context."""

    @property
    def tree(self) -> ast.Module | None:
        return self.parsed.tree

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.index.parents.get(id(node))

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        """Parents of ``node`` from the nearest outwards."""
        parents = self.index.parents
        current = parents.get(id(node))
        while current is not None:
            yield current
            current = parents.get(id(current))


def analyze(source: str, previous: DocumentAnalysis | None = None) -> DocumentAnalysis:
    """Analyse one document's text; never raises on bad input.

    ``previous`` (the analysis of the document's last version) makes it
    faster; for text that parses the result is the same as without it, and
    for text with a syntax error the repair stays inside the edited region
    (``incremental.py``), where the whole-file recovery might blank more.
    """
    parsed = reparse_changed(previous.parsed, source) if previous is not None else None
    if parsed is None:
        parsed = parse_tolerant(source)
    positions = Positions(parsed.lines)
    if parsed.tree is None:
        return DocumentAnalysis(parsed, positions, TorchNames(), {}, [], [])
    tree = parsed.tree
    index = TreeIndex(tree, previous.index if previous is not None else None)
    names = collect_torch_names(index)
    classes = find_module_classes(index, names)
    finder = LayerFinder(tree, index, names, classes, positions)
    finder.run()
    return DocumentAnalysis(parsed, positions, names, classes, finder.definitions, finder.calls, index)
