"""Questions rules ask about where a node sits: in a loop, in a per-step function."""

from __future__ import annotations

import ast

from ..analysis import DocumentAnalysis

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

PER_STEP_FUNCTION_NAMES = frozenset(
    {
        "forward",
        "__call__",
        "step",
        "train_step",
        "training_step",
        "validation_step",
        "test_step",
        "predict_step",
        "eval_step",
        "train_one_epoch",
        "train_epoch",
        "run_epoch",
    }
)
"""Functions that run once per training step (or more often) by convention."""


def enclosing_function(
    analysis: DocumentAnalysis, node: ast.AST
) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, FUNCTIONS):
            return ancestor
    return None


def enclosing_loop(analysis: DocumentAnalysis, node: ast.AST) -> ast.AST | None:
    """The nearest loop around ``node`` within its function."""
    for ancestor in analysis.ancestors(node):
        if isinstance(ancestor, FUNCTIONS):
            return None
        if isinstance(ancestor, LOOPS):
            return ancestor
    return None


class CalledInLoops:
    """Names of functions called from inside some loop in the file (computed on first use)."""

    def __init__(self, analysis: DocumentAnalysis) -> None:
        self.analysis = analysis
        self._names: set[str] | None = None

    def __contains__(self, name: object) -> bool:
        if self._names is None:
            self._names = self._compute()
        return name in self._names

    def _compute(self) -> set[str]:
        names: set[str] = set()
        loops = (ast.For, ast.AsyncFor, ast.While)
        for call in self.analysis.index.of(ast.Call):
            func = call.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name is None or name in names:
                continue
            if any(isinstance(a, loops) for a in self.analysis.ancestors(call)):
                names.add(name)
        return names


def is_per_step(function: ast.AST | None, called_in_loops: CalledInLoops) -> bool:
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    return function.name in PER_STEP_FUNCTION_NAMES or function.name in called_in_loops
