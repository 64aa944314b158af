"""HS002: ``register_backward_hook`` is deprecated.

It hooks only the last operation of the module's forward, so ``grad_input``
is wrong for any module made of several operations (or with several inputs).
``register_full_backward_hook`` takes the same hook signature, so the quick
fix is a rename.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ..analysis import DocumentAnalysis
from ..analysis.hooks import HookRegistration
from ..analysis.source import Span
from .finding import Finding, Fix, TextEdit

REPLACEMENTS = {
    "register_backward_hook": "register_full_backward_hook",
    "register_module_backward_hook": "register_module_full_backward_hook",
}


def deprecated_backward_hooks(analysis: DocumentAnalysis, registrations: list[HookRegistration]) -> Iterator[Finding]:
    for registration in registrations:
        replacement = REPLACEMENTS.get(registration.method)
        if replacement is None:
            continue
        span = _method_name_span(analysis, registration.call.func, registration.method)
        yield Finding(
            "HS002",
            span,
            f"{registration.method}() is deprecated: it only sees the last operation inside the "
            "module's forward, so grad_input is wrong for modules built from several operations or "
            f"with several inputs. Use {replacement}(), which takes the same hook.",
            fix=Fix(f"Use {replacement}()", (TextEdit(span, replacement),)),
            deprecated=True,
        )


def _method_name_span(analysis: DocumentAnalysis, func: ast.expr, method: str) -> Span:
    span = analysis.positions.span(func)
    if isinstance(func, ast.Attribute):
        return Span(span.end_line, span.end_col - len(method), span.end_line, span.end_col)
    return span
