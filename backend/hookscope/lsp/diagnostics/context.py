"""Questions rules ask about where a node sits: in a loop, in a per-step function."""

from __future__ import annotations

import ast

from ..analysis import DocumentAnalysis

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)

PER_STEP_FUNCTION_NAMES = frozenset({
    "forward", "__call__", "step", "train_step", "training_step", "validation_step",
    "test_step", "predict_step", "eval_step", "train_one_epoch", "train_epoch", "run_epoch",
})
"""Functions that run once per training step (or more often) by convention."""


def enclosing_function(analysis: DocumentAnalysis, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | None:
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


def functions_called_in_loops(analysis: DocumentAnalysis) -> set[str]:
    """Names of functions called from inside some loop in the file."""
    if analysis.tree is None:
        return set()
    called: set[str] = set()
    for node in ast.walk(analysis.tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    func = inner.func
                    if isinstance(func, ast.Name):
                        called.add(func.id)
                    elif isinstance(func, ast.Attribute):
                        called.add(func.attr)
    return called


def is_per_step(function: ast.AST | None, called_in_loops: set[str]) -> bool:
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    return function.name in PER_STEP_FUNCTION_NAMES or function.name in called_in_loops
