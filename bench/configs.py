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
"""Break on exploding gradients above this: never true, so the row measures the check alone. The
vanishing switch is left off: the stacks of 100 and 1,000 tanh layers really have vanishing
gradients (0 at the first layer of the 1,000), so no threshold is never true on every model. The row
is exploding's cost; vanishing adds per-parameter and per-layer sums (grad_health.py), which this
row does not measure."""

SIDE_BY_SIDE = ("idle", "nonfinite", "health", "summaries", "condbp")
"""The configurations the side-by-side row switches between, a few steps each."""


def requests_for(config: str, model_id: str, layers: list[str]) -> list[dict]:
    """The requests that put one model in ``config`` (and undo the other configurations)."""
    return [
        {"type": "setBreakOnNonFinite", "enabled": config == "nonfinite"},
        {"type": "setBreakOnGradients", **({"exploding": NEVER_EXPLODING} if config == "health" else {})},
        {
            "type": "watch",
            "model": model_id,
            "layers": layers if config == "summaries" else [],
            "rateHz": SUMMARY_RATE_HZ,
        },
        {"type": "setBreakpoints", "breakpoints": [NEVER_TRUE_BREAKPOINT] if config == "condbp" else []},
    ]
