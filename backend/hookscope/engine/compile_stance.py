"""The torch.compile stance: whether compiled code runs eagerly, so layer hooks fire in it.

Hooks inside a torch.compile'd module do not fire (dynamo does not guard on hooks added later):
the engine says so once per layer (the ``compiled`` notice), and its opt-in, ``setCompiledEager``,
sets ``torch.compiler.set_stance('force_eager')`` until it is turned off or Hookscope goes.
"""

from __future__ import annotations

from typing import Any

import torch

from hookscope.engine import step_counter
from hookscope.engine.state import EngineState


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

    before: str = getattr(getattr(eval_frame, "_stance", None), "stance", "default")
    torch.compiler.set_stance(stance)
    return before


class CompileStance(EngineState):
    """Engine's torch.compile half: the notice that hooks do not fire there, and its opt-in."""

    def _warn_if_compiled(self, layers: list[str]) -> None:
        """Hooks inside a torch.compile'd module do not fire (dynamo does not guard on hooks added
        later): say so instead of failing silently, with the opt-in that makes them fire."""
        compiled: list[str] = []
        with self._lock:
            for index in self._indexes.values():
                model = index.model
                if model is None:
                    continue
                # torch.compile(m) wraps m: the wrapper's own hooks fire, those below it do not.
                # m.compile() compiles m's own call: its hooks and those below it do not.
                wrapped = [n for n, m in model.named_modules() if type(m).__name__ == "OptimizedModule"]
                in_place = [n for n, m in model.named_modules() if step_counter.compiled_call(m) is not None]
                for layer in layers:
                    below = any(r == "" and layer != "" or layer.startswith(r + ".") for r in wrapped)
                    at_or_below = any(r == "" or layer == r or layer.startswith(r + ".") for r in in_place)
                    if below or at_or_below:
                        compiled.append(layer)
        compiled = [layer for layer in compiled if layer not in self._compiled_noticed]
        if compiled and not _compile_forced_eager():
            self._compiled_noticed.update(compiled)  # once per layer, however often breakpoints are re-sent
            names = ", ".join(sorted(set(compiled))[:5])
            self._notice(
                "warning",
                f"{names} run inside a torch.compile'd module: hooks added after it was "
                "compiled do not fire there (only the compiled root's own hooks do). To debug them, "
                "run compiled code "
                "eagerly while debugging (setting hookscope.runCompiledEagerly; in code: "
                "torch.compiler.set_stance('force_eager')).",
                "compiled",
            )

    def _req_setCompiledEager(self, request: dict[str, Any]) -> dict[str, Any]:
        """The opt-in of the ``compiled`` notice: run torch.compile'd code eagerly so layer hooks
        inside it fire (``torch.compiler.set_stance('force_eager')``, process-wide, no recompile);
        off, or when Hookscope goes, restores the stance it replaced."""
        enabled = request.get("enabled")
        if not isinstance(enabled, bool):
            raise ValueError("'enabled' must be true or false")
        self.set_compiled_eager(enabled)
        return {"enabled": _compile_forced_eager()}

    def set_compiled_eager(self, enabled: bool) -> None:
        with self._lock:
            if enabled and self._stance_before_eager is None and not _compile_forced_eager():
                self._stance_before_eager = _set_compile_stance("force_eager")
            elif not enabled and self._stance_before_eager is not None:
                _set_compile_stance(self._stance_before_eager)
                self._stance_before_eager = None
