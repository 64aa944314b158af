"""What ``hookscope run --report DIR`` writes: ``report.json`` and a readable ``index.html``.

The report holds the run's models (layer trees), every hit with its tensor
summaries, the notices, and, for hits in conv-like layers, a feature-map PNG
when the backend could render one (``hit-<n>.png`` next to the page).
Self-contained: no scripts, no network, one inline stylesheet.
"""

from __future__ import annotations

import html
import json
import math
import os
import time
from typing import Any

SUMMARY_COLUMNS = (
    "path",
    "shape",
    "dtype",
    "mean",
    "std",
    "min",
    "max",
    "absmax",
    "norm",
    "nan",
    "posinf",
    "neginf",
    "zeroFrac",
)


def format_number(value: Any) -> str:
    """Compact and readable: 4 significant digits, integers as they are."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "x".join(str(v) for v in value) if all(isinstance(v, int) for v in value) else str(value)
    return str(value)


def summary_cells(summary: dict[str, Any]) -> list[str]:
    cells = [format_number(summary.get(column)) for column in SUMMARY_COLUMNS]
    if summary.get("note"):
        cells[-1] = (cells[-1] + " " + str(summary["note"])).strip()
    return cells


class Report:
    """Collects what a run saw; ``write`` puts it into the folder."""

    def __init__(self, directory: str, command: list[str]) -> None:
        self.directory = os.path.abspath(directory)
        self.command = command
        self.started = time.time()
        self.models: dict[str, dict[str, Any]] = {}
        self.hits: list[dict[str, Any]] = []
        self.notices: list[dict[str, Any]] = []
        self.exit_code: int | None = None
        os.makedirs(self.directory, exist_ok=True)

    def add_model(self, tree: dict[str, Any]) -> None:
        self.models[tree["id"]] = tree

    def add_notice(self, notice: dict[str, Any]) -> None:
        self.notices.append({k: notice.get(k) for k in ("level", "message", "code")})

    def add_hit(self, hit: dict[str, Any], image: dict[str, Any] | None = None) -> None:
        entry = {k: v for k, v in hit.items() if k != "type"}
        if image is not None and isinstance(image.get("png"), (bytes, bytearray)):
            name = f"hit-{len(self.hits) + 1}.png"
            with open(os.path.join(self.directory, name), "wb") as f:
                f.write(image["png"])
            entry["image"] = {
                "file": name,
                "width": image.get("width"),
                "height": image.get("height"),
                "meta": image.get("meta") or {},
            }
        self.hits.append(entry)

    def write(self) -> str:
        """Write report.json and index.html; returns the page's path."""
        data = {
            "command": self.command,
            "started": self.started,
            "finished": time.time(),
            "exitCode": self.exit_code,
            "models": list(self.models.values()),
            "hits": self.hits,
            "notices": self.notices,
        }
        with open(os.path.join(self.directory, "report.json"), "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, default=_jsonable)
        page = os.path.join(self.directory, "index.html")
        with open(page, "w", encoding="utf-8") as f:
            f.write(self._html())
        return page

    def _html(self) -> str:
        esc = html.escape
        parts = [
            "<!doctype html><html><head><meta charset='utf-8'><title>Hookscope report</title>",
            "<style>body{font:14px system-ui,sans-serif;margin:2em;color:#222}"
            "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;"
            "padding:2px 6px;text-align:right;font-family:monospace}th{background:#f3f3f3}"
            "td:first-child{text-align:left}.bad{background:#fdd}h2{margin-top:2em}"
            "img{image-rendering:pixelated;max-width:100%;border:1px solid #ccc}</style></head><body>",
            "<h1>Hookscope report</h1>",
            f"<p><code>{esc(' '.join(self.command))}</code> &mdash; exit code "
            f"{esc(str(self.exit_code))}, {len(self.hits)} hit(s)</p>",
        ]
        for tree in self.models.values():
            parts.append(
                f"<p>Model <b>{esc(tree['name'])}</b> ({esc(tree['cls'])}, id {esc(tree['id'])}): "
                f"{len(tree['modules'])} modules, {tree['params']:,} parameters</p>"
            )
        for notice in self.notices:
            parts.append(f"<p class='bad'>{esc(str(notice.get('level')))}: {esc(str(notice.get('message')))}</p>")
        for number, hit in enumerate(self.hits, 1):
            parts.append(
                f"<h2>Hit {number}: <code>{esc(str(hit.get('layer')))}</code> "
                f"({esc(str(hit.get('phase')))}, step {esc(str(hit.get('step')))})</h2>"
            )
            reason = str(hit.get("reason", ""))
            if hit.get("origin"):
                reason += f" ({hit['origin']})"
            parts.append(f"<p>{esc(reason)}</p>")
            parts.append("<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in SUMMARY_COLUMNS) + "</tr>")
            for summary in hit.get("summaries") or []:
                bad = summary.get("nan") or summary.get("posinf") or summary.get("neginf")
                cells = "".join(f"<td>{esc(c)}</td>" for c in summary_cells(summary))
                parts.append(f"<tr class='{'bad' if bad else ''}'>{cells}</tr>")
            parts.append("</table>")
            image = hit.get("image")
            if image:
                parts.append(
                    f"<p><img src='{esc(image['file'])}' alt='feature map of "
                    f"{esc(str(hit.get('layer')))}' width='{esc(str(image.get('width') or ''))}'></p>"
                )
        if not self.hits:
            parts.append("<p>No layer breakpoint fired.</p>")
        parts.append("</body></html>")
        return "\n".join(parts)


def _jsonable(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return str(value)
