"""What ``hookscope run`` prints: the run's events, the program's output and each hit, as text or JSON lines."""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from hookscope.terminal.report import SUMMARY_COLUMNS, summary_cells


class Printer:
    """Human-readable or JSON-lines output of the run."""

    def __init__(self, as_json: bool, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> None:
        self.as_json, self.out, self.err = as_json, out, err

    def event(self, name: str, text: str | None = None, **fields: Any) -> None:
        if self.as_json:
            self.out.write(json.dumps({"event": name, **fields}, default=_json_default) + "\n")
            self.out.flush()
        elif text is not None:
            stream = self.err if name in ("notice", "warning", "error") else self.out
            stream.write(text + "\n")
            stream.flush()

    def program_output(self, category: str, text: str) -> None:
        if self.as_json:
            self.event("output", category=category, output=text)
            return
        stream = self.err if category == "stderr" else self.out
        stream.write(text)
        stream.flush()

    def hit(
        self,
        number: int,
        hit: dict[str, Any],
        model_name: str | None,
        pid: int | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        fields = {
            k: hit.get(k)
            for k in ("breakpoint", "model", "layer", "phase", "reason", "step", "origin", "summaries", "pausing", "op")
        }
        if self.as_json:
            self.event("hit", number=number, pid=pid, rank=rank, worldSize=world_size, **fields)
            return
        where = f"{model_name}.{hit['layer']}" if model_name and hit["layer"] else hit["layer"] or model_name
        process = f", rank {rank} of {world_size}" if world_size and world_size > 1 else ""
        lines = [
            f"hookscope: hit {number} at {where}  [{hit['phase']}, step {hit['step']}{process}]",
            f"  reason: {hit['reason']}" + (f" ({hit['origin']})" if hit.get("origin") else ""),
        ]
        op = hit.get("op")
        if op and op.get("file"):
            lines.append(f"  born at: {op['file']}:{op['line']} in {op.get('function')} ({op.get('op')})")
        rows = [list(SUMMARY_COLUMNS)] + [summary_cells(s) for s in hit.get("summaries") or []]
        widths = [max(len(row[i]) for row in rows) for i in range(len(SUMMARY_COLUMNS))]
        keep = [i for i in range(len(SUMMARY_COLUMNS)) if any(row[i] for row in rows[1:])] or [0]
        for row in rows:
            lines.append("  " + "  ".join(row[i].ljust(widths[i]) if i == 0 else row[i].rjust(widths[i]) for i in keep))
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    return str(value)
