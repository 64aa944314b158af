"""Hovers on layer names: class and constructor, plus live summaries in a session."""

from __future__ import annotations

from lsprotocol import types

from .analysis import LayerDefinition, Span
from .documents import DocumentState, RangeConverter
from .live import LiveSummary, format_number
from .markdown import escape_markdown as text

MAX_LIVE_ROWS = 8


def build_hover(
    state: DocumentState, converter: RangeConverter, position: types.Position, live: dict[int, list[LiveSummary]]
) -> types.Hover | None:
    line, col = converter.from_client(position)
    found = _layer_at(state, line, col)
    if found is None:
        return None
    layer, span = found
    return types.Hover(
        contents=types.MarkupContent(
            kind=types.MarkupKind.Markdown, value=hover_markdown(layer, live.get(id(layer), []))
        ),
        range=converter.range(span),
    )


def _layer_at(state: DocumentState, line: int, col: int) -> tuple[LayerDefinition, Span] | None:
    for call in state.analysis.calls:
        if call.attribute_span.contains(line, col):
            return call.layer, call.attribute_span
    best: tuple[LayerDefinition, Span] | None = None
    for layer in state.analysis.layers:
        if layer.name_span.contains(line, col):
            best = (layer, layer.name_span)  # later (inner) definitions win
    return best


def hover_markdown(layer: LayerDefinition, summaries: list[LiveSummary]) -> str:
    """Names from the file and the running model go in through ``text`` (a ``ModuleDict`` key can hold
    any string); the constructor's text is one line (``_shorten``), so it cannot close its code block."""
    origin = "defined in this file" if layer.user_defined else "torch.nn"
    owner = f" in {text(layer.owner)}" if layer.owner else ""
    parts = [
        f"**{text(layer.display_name)}** · {text(layer.cls)} ({origin}){owner}",
        f"```python\n{layer.constructor_text}\n```",
    ]
    if layer.inplace:
        parts.append("Runs in place (`inplace=True`).")
    if summaries:
        rows = ["| module | output shape | mean | std | NaN | grad norm |", "|---|---|---|---|---|---|"]
        for summary in summaries[:MAX_LIVE_ROWS]:
            rows.append(
                f"| {text(summary.name or '(root)')} | {text(summary.shape or '–')} | {format_number(summary.mean)} | "
                f"{format_number(summary.std)} | {summary.nan if summary.nan is not None else '–'} | "
                f"{format_number(summary.grad_norm)} |"
            )
        if len(summaries) > MAX_LIVE_ROWS:
            rows.append(f"| … {len(summaries) - MAX_LIVE_ROWS} more | | | | | |")
        parts.append("**Live** (last seen in this debug session)\n\n" + "\n".join(rows))
    return "\n\n".join(parts)
