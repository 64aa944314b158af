"""What each Hookscope row asks of the agent, as protocol requests (shared by run.py and worker.py)."""

from __future__ import annotations

SUMMARY_RATE_HZ = 4.0
"""The panel's rate."""

NEVER_TRUE_BREAKPOINT = {"id": "never", "layer": "*", "phases": ["forward", "backward"],
                         "condition": {"kind": "absmax_above", "threshold": 1e30}}

SIDE_BY_SIDE = ("idle", "nonfinite", "summaries", "condbp")
"""The configurations the side-by-side row switches between, a few steps each."""


def requests_for(config: str, model_id: str, layers: list[str]) -> list[dict]:
    """The requests that put one model in ``config`` (and undo the other configurations)."""
    return [
        {"type": "setBreakOnNonFinite", "enabled": config == "nonfinite"},
        {"type": "watch", "model": model_id, "layers": layers if config == "summaries" else [],
         "rateHz": SUMMARY_RATE_HZ},
        {"type": "setBreakpoints", "breakpoints": [NEVER_TRUE_BREAKPOINT] if config == "condbp" else []},
    ]
