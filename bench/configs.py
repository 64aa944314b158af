"""What each Hookscope row asks of the agent, as protocol requests (shared by run.py and worker.py)."""

from __future__ import annotations

SUMMARY_RATE_HZ = 4.0
"""The panel's rate."""

NEVER_TRUE_BREAKPOINT = {
    "id": "never",
    "layer": "*",
    "phases": ["forward", "backward"],
    "condition": {"kind": "absmax_above", "threshold": 1e30},
}

NEVER_EXPLODING = 1e30
"""Break on exploding gradients above this: never true, so the row measures the check alone."""
NEVER_VANISHING = 1e-30
"""Break on vanishing gradients below this ('healthboth'): never true on the models that measure it."""
GRADIENTS_VANISH = ("stack100", "stack1000")
"""Models whose gradients really vanish (100 and 1,000 tanh layers: 4e-28 and exactly 0 at the first
layer), so no vanishing threshold is never true there: 'healthboth' is not measured on them, and
'health', a row of its own too, keeps vanishing off. Vanishing adds per-parameter and per-layer sums
to exploding's check (grad_health.py)."""

SIDE_BY_SIDE = ("idle", "nonfinite", "health", "healthboth", "summaries", "condbp")
"""The configurations the side-by-side row switches between, a few steps each."""
SIDE_BY_SIDE_ONLY = {
    "healthboth": "Hookscope break on exploding and vanishing gradients (both on, never-true thresholds)",
}
"""Labels of the configurations measured only side by side (no row of their own: see GRADIENTS_VANISH)."""


def configs_for(model: str) -> tuple[str, ...]:
    """The side-by-side configurations measured on the bench model ``model``."""
    return tuple(c for c in SIDE_BY_SIDE if not (c == "healthboth" and model in GRADIENTS_VANISH))


GRADIENT_THRESHOLDS = {
    "health": {"exploding": NEVER_EXPLODING},
    "healthboth": {"exploding": NEVER_EXPLODING, "vanishing": NEVER_VANISHING},
}


def requests_for(config: str, model_id: str, layers: list[str]) -> list[dict]:
    """The requests that put one model in ``config`` (and undo the other configurations)."""
    return [
        {"type": "setBreakOnNonFinite", "enabled": config == "nonfinite"},
        {"type": "setBreakOnGradients", **GRADIENT_THRESHOLDS.get(config, {})},
        {
            "type": "watch",
            "model": model_id,
            "layers": layers if config == "summaries" else [],
            "rateHz": SUMMARY_RATE_HZ,
        },
        {"type": "setBreakpoints", "breakpoints": [NEVER_TRUE_BREAKPOINT] if config == "condbp" else []},
    ]
