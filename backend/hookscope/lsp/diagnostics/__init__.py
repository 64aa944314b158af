"""Hook-hygiene diagnostics: each rule is a module; ``find_problems`` runs them all.

Codes, default severities and summaries are in ``finding.RULES``; the long
explanations are in ``docs/diagnostics.md`` (one section per code).
"""

from __future__ import annotations

import logging

from ..analysis import DocumentAnalysis
from ..analysis.hooks import find_registrations
from .context import CalledInLoops
from .deprecated import deprecated_backward_hooks
from .finding import RULES, Finding, Fix, Rule, Severity, TextEdit
from .handles import discarded_handles, hooks_on_all_modules
from .hook_bodies import hook_body_findings
from .inplace_backward import full_backward_inplace

__all__ = ["RULES", "Finding", "Fix", "Rule", "Severity", "TextEdit", "find_problems"]

log = logging.getLogger(__name__)


def find_problems(analysis: DocumentAnalysis) -> list[Finding]:
    """All findings of all rules, sorted by position. A failing rule is logged and skipped."""
    if analysis.tree is None:
        return []
    registrations = find_registrations(analysis.index)
    if not registrations:
        return []
    called_in_loops = CalledInLoops(analysis)
    rules = (
        lambda: discarded_handles(analysis, registrations, called_in_loops),
        lambda: deprecated_backward_hooks(analysis, registrations),
        lambda: hook_body_findings(analysis, registrations),
        lambda: full_backward_inplace(analysis, registrations),
        lambda: hooks_on_all_modules(analysis, registrations),
    )
    findings: list[Finding] = []
    for rule in rules:
        try:
            findings.extend(rule())
        except Exception:  # a rule bug must not cost the user every other diagnostic
            log.exception("a diagnostic rule failed")
    findings.sort(key=lambda f: (f.span.start_line, f.span.start_col, f.code))
    return findings
