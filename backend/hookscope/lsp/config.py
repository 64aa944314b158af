"""Diagnostic settings: a severity (or off) per code.

They come from ``initializationOptions`` and from
``workspace/didChangeConfiguration`` under ``hookscope.diagnostics``, e.g.
``{"hookscope": {"diagnostics": {"HS001": "error", "HS004": "off"}}}``.
``{"diagnostics": {...}}`` and the bare mapping are accepted too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .diagnostics.finding import RULES, Severity

SEVERITY_NAMES: dict[str, Severity | None] = {
    "error": Severity.ERROR,
    "warning": Severity.WARNING,
    "warn": Severity.WARNING,
    "information": Severity.INFORMATION,
    "info": Severity.INFORMATION,
    "hint": Severity.HINT,
    "off": None,
    "none": None,
    "false": None,
}


@dataclass
class DiagnosticSettings:
    """Per-code overrides of the rules' default severities."""

    overrides: dict[str, Severity | None] = field(default_factory=dict)
    """Code -> severity, None meaning the code is off."""
    problems: list[str] = field(default_factory=list)
    """Human-readable complaints about values that were ignored."""

    def severity(self, code: str) -> Severity | None:
        if code in self.overrides:
            return self.overrides[code]
        rule = RULES.get(code)
        return rule.default if rule else Severity.WARNING

    @classmethod
    def from_settings(cls, settings: Any) -> DiagnosticSettings:
        """Read overrides from any of the accepted shapes; unknown values are reported, not fatal."""
        section = _diagnostics_section(settings)
        result = cls()
        if section is None:
            return result
        for code, value in section.items():
            key = str(code).upper()
            if key not in RULES:
                result.problems.append(f"unknown diagnostic code {code!r} (known: {', '.join(RULES)})")
                continue
            if value is False or value is None:
                result.overrides[key] = None
                continue
            name = str(value).strip().lower()
            if name not in SEVERITY_NAMES:
                result.problems.append(
                    f"{key}: unknown severity {value!r} (use error, warning, information, hint or off)"
                )
                continue
            result.overrides[key] = SEVERITY_NAMES[name]
        return result


def _diagnostics_section(settings: Any) -> Mapping[str, Any] | None:
    if not isinstance(settings, Mapping):
        return None
    hookscope = settings.get("hookscope")
    if isinstance(hookscope, Mapping):
        settings = hookscope
    diagnostics = settings.get("diagnostics")
    if isinstance(diagnostics, Mapping):
        return diagnostics
    if any(str(k).upper() in RULES for k in settings):
        return settings
    return None
