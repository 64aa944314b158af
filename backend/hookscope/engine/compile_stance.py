"""The torch.compile stance: whether compiled code runs eagerly, so layer hooks fire in it."""

from __future__ import annotations

import torch


def _compile_forced_eager() -> bool:
    """Whether torch.compile'd code currently runs eagerly (``torch.compiler.set_stance('force_eager')``)."""
    try:
        from torch._dynamo import eval_frame

        return getattr(getattr(eval_frame, "_stance", None), "stance", "default") == "force_eager"
    except Exception:
        return False


def _set_compile_stance(stance: str) -> str:
    """Set dynamo's stance process-wide; returns the one it replaced."""
    from torch._dynamo import eval_frame

    before = getattr(getattr(eval_frame, "_stance", None), "stance", "default")
    torch.compiler.set_stance(stance)
    return before
