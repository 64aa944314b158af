"""Parsing a Python document for analysis: tolerant parse and position spans.

The language server must keep answering while the user types, so a file with
a syntax error is parsed again with the offending lines blanked out (line
numbers stay where they were). Positions are 0-based lines and columns in
code points ("server units"); the server converts them to the client's
encoding. ``ast`` reports columns as UTF-8 byte offsets, hence ``Positions``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

MAX_RECOVERY_ATTEMPTS = 8
"""How many failing lines are blanked out before giving up on a parse."""


@dataclass(frozen=True, slots=True)
class Span:
    """A range in the document: 0-based lines, columns in code points."""

    start_line: int
    start_col: int
    end_line: int
    end_col: int

    def contains(self, line: int, col: int) -> bool:
        """Whether the position lies inside the span (end inclusive)."""
        if line < self.start_line or line > self.end_line:
            return False
        if line == self.start_line and col < self.start_col:
            return False
        if line == self.end_line and col > self.end_col:
            return False
        return True

    def overlaps_lines(self, first: int, last: int) -> bool:
        """Whether any line of the span lies in ``first..last``."""
        return self.start_line <= last and self.end_line >= first

    @property
    def line_count(self) -> int:
        return self.end_line - self.start_line + 1


class Positions:
    """Converts ``ast`` positions (1-based line, UTF-8 byte column) to spans."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def column(self, lineno: int, byte_col: int) -> int:
        """Code-point column of a byte offset on the 1-based line ``lineno``."""
        if lineno < 1 or lineno > len(self.lines):
            return byte_col
        text = self.lines[lineno - 1]
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def span(self, node: ast.AST) -> Span:
        """The span of a node that carries positions (expressions, statements)."""
        lineno = node.lineno  # type: ignore[attr-defined]
        end_lineno = getattr(node, "end_lineno", None) or lineno
        end_col = getattr(node, "end_col_offset", None)
        if end_col is None:
            end_col = node.col_offset  # type: ignore[attr-defined]
        return Span(
            lineno - 1,
            self.column(lineno, node.col_offset),  # type: ignore[attr-defined]
            end_lineno - 1,
            self.column(end_lineno, end_col),
        )

    def end_of(self, node: ast.AST) -> Span:
        """An empty span at the end of a node (an insertion point)."""
        full = self.span(node)
        return Span(full.end_line, full.end_col, full.end_line, full.end_col)

    def text(self, node: ast.AST) -> str:
        """The source text of a node."""
        span = self.span(node)
        if span.start_line == span.end_line:
            return self.lines[span.start_line][span.start_col:span.end_col]
        parts = [self.lines[span.start_line][span.start_col:]]
        parts.extend(self.lines[span.start_line + 1:span.end_line])
        parts.append(self.lines[span.end_line][:span.end_col])
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class ParsedSource:
    """A parse result: the tree (None if even recovery failed) and how it went."""

    tree: ast.Module | None
    lines: list[str]
    blanked_lines: tuple[int, ...]
    """0-based lines replaced by ``pass`` so that the rest could be parsed."""

    @property
    def clean(self) -> bool:
        return self.tree is not None and not self.blanked_lines


def split_lines(source: str) -> list[str]:
    """Lines without their terminators (``\\r\\n``, ``\\n``, ``\\r``)."""
    return source.splitlines() or [""]


def parse_tolerant(source: str) -> ParsedSource:
    """Parse ``source``; on a syntax error, blank the failing line and retry."""
    lines = split_lines(source)
    try:
        return ParsedSource(ast.parse(source), lines, ())
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    working = list(lines)
    blanked: list[int] = []
    for _ in range(MAX_RECOVERY_ATTEMPTS):
        try:
            tree = ast.parse("\n".join(working))
            return ParsedSource(tree, lines, tuple(blanked))
        except SyntaxError as error:
            line = _failing_line(error, len(working))
            if line is None or line in blanked:
                # The same line again: blank the next non-empty one after it.
                line = _next_unblanked(working, blanked, line)
                if line is None:
                    break
            working[line] = _neutral_line(working[line])
            blanked.append(line)
        except (ValueError, RecursionError, MemoryError):
            break
    return ParsedSource(None, lines, tuple(blanked))


def _failing_line(error: SyntaxError, count: int) -> int | None:
    if error.lineno is None:
        return None
    line = min(max(error.lineno - 1, 0), count - 1)
    return line


def _next_unblanked(working: list[str], blanked: list[int], after: int | None) -> int | None:
    start = 0 if after is None else after + 1
    for index in range(start, len(working)):
        if index not in blanked and working[index].strip():
            return index
    return None


def _neutral_line(text: str) -> str:
    """Keep the indentation so the surrounding block stays valid."""
    indent = text[: len(text) - len(text.lstrip())]
    return f"{indent}pass" if text.strip() else text
