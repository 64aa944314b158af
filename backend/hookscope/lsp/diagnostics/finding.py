"""What a diagnostic rule reports: a finding with an optional quick fix.

Findings are plain data with server-unit spans; ``server.py`` turns them
into LSP diagnostics and code actions.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..analysis.source import Span


class Severity(str, Enum):
    """Severities in the order of importance (lowest first)."""

    HINT = "hint"
    INFORMATION = "information"
    WARNING = "warning"
    ERROR = "error"

    def raised(self) -> Severity:
        """One step more severe (used for findings inside loops / per step)."""
        order = list(Severity)
        return order[min(order.index(self) + 1, len(order) - 1)]


@dataclass(frozen=True, slots=True)
class Rule:
    """A diagnostic code and what it is about."""

    code: str
    name: str
    default: Severity
    summary: str

    @property
    def anchor(self) -> str:
        """The anchor of its section in ``docs/diagnostics.md``."""
        return self.code.lower()


RULES: dict[str, Rule] = {
    rule.code: rule
    for rule in (
        Rule(
            "HS001",
            "discarded-hook-handle",
            Severity.WARNING,
            "The handle returned by register_*hook is thrown away; the hook can never be removed.",
        ),
        Rule(
            "HS002",
            "deprecated-backward-hook",
            Severity.WARNING,
            "register_backward_hook is deprecated and reports wrong gradients for some modules.",
        ),
        Rule(
            "HS003",
            "hook-keeps-graph",
            Severity.WARNING,
            "A hook stores a tensor without .detach(), keeping the autograd graph alive.",
        ),
        Rule(
            "HS004",
            "hook-modifies-argument",
            Severity.WARNING,
            "A hook changes its argument instead of returning a new value.",
        ),
        Rule(
            "HS005",
            "full-backward-hook-inplace",
            Severity.WARNING,
            "register_full_backward_hook on a module whose output or input is modified in place.",
        ),
        Rule(
            "HS006",
            "hook-on-all-modules",
            Severity.INFORMATION,
            "Hooks registered over model.modules() include the model itself and containers.",
        ),
    )
}


@dataclass(frozen=True, slots=True)
class TextEdit:
    span: Span
    new_text: str


@dataclass(frozen=True, slots=True)
class Fix:
    """A quick fix: edits in the same document."""

    title: str
    edits: tuple[TextEdit, ...]
    preferred: bool = True


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found by a rule."""

    code: str
    span: Span
    message: str
    escalated: bool = False
    """Raise the configured severity one step (a leak inside a loop...)."""
    fix: Fix | None = None
    deprecated: bool = False
    """Mark with the LSP ``Deprecated`` tag (struck through in the editor)."""
