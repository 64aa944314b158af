"""Parsing a Python document for analysis: tolerant parse and position spans.

The language server must keep answering while the user types, so a file with
a syntax error is parsed again with the offending lines blanked out (line
numbers stay where they were). Positions are 0-based lines and columns in
code points ("server units"); the server converts them to the client's
encoding. ``ast`` reports columns as UTF-8 byte offsets, hence ``Positions``.
"""

from __future__ import annotations

import ast
import re
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
            return self.lines[span.start_line][span.start_col : span.end_col]
        parts = [self.lines[span.start_line][span.start_col :]]
        parts.extend(self.lines[span.start_line + 1 : span.end_line])
        parts.append(self.lines[span.end_line][: span.end_col])
        return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class ParsedSource:
    """A parse result: the tree (None if even recovery failed) and how it went."""

    tree: ast.Module | None
    lines: list[str]
    repaired_lines: tuple[int, ...]
    """0-based lines changed (colon added, replaced by ``pass``) so that the rest could be parsed."""

    @property
    def clean(self) -> bool:
        return self.tree is not None and not self.repaired_lines


LINE_BREAK = re.compile(r"\r\n|\r|\n")
"""What ends a line for Python's tokenizer and for LSP positions; ``str.splitlines``
also splits at form feeds and other separators, which would shift every position
after a page break."""


def split_lines(source: str) -> list[str]:
    """Lines without their terminators (``\\r\\n``, ``\\n``, ``\\r``); no empty last line."""
    lines = LINE_BREAK.split(source)
    if len(lines) > 1 and not lines[-1]:
        lines.pop()
    return lines


NEUTRAL_HEADERS = {
    "elif": "elif True:",
    "else": "else:",
    "try": "try:",
    "except": "except Exception:",
    "finally": "finally:",
    "match": "match 0:",
    "case": "case _:",
}
"""A header that cannot be repaired keeps its place in the statement it belongs to;
the others (``def``, ``class``, ``if``, ``for``, ``while``, ``with``) become ``if True:``."""

COMPOUND_HEADERS = re.compile(r"^\s*(async\s+)?(def|class|if|elif|else|for|while|with|try|except|finally|match|case)\b")


def parse_tolerant(source: str) -> ParsedSource:
    """Parse ``source``; on a syntax error, repair or blank the failing line and retry.

    Repairs, in order: a compound statement header missing its colon gets one;
    an unexpectedly indented line is replaced by ``pass`` at the indentation of
    the line before; any other failing line becomes ``pass``. When the same
    line fails again, it is neutralised itself first (a header becomes
    ``if True:`` so its block stays a block, ``if x y`` is no condition even
    with a colon), and only then the nearest earlier line is blanked (an
    unclosed bracket is usually reported after the line that opened it).
    """
    lines = split_lines(source)
    try:
        return ParsedSource(ast.parse(source), lines, ())
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    working = list(lines)
    touched: list[int] = []
    for _ in range(MAX_RECOVERY_ATTEMPTS):
        try:
            tree = ast.parse("\n".join(working))
            return ParsedSource(tree, lines, tuple(sorted(set(touched))))
        except SyntaxError as error:
            line = _failing_line(error, len(working))
            if line is None:
                break
            if line in touched and working[line] != _neutral_line(lines[line]):
                working[line] = _neutral_line(lines[line])
            elif line in touched:
                line = _previous_untouched(working, touched, line)
                if line is None:
                    break
                working[line] = _neutral_line(working[line])
            else:
                working[line] = _repaired_line(working, line, error)
            touched.append(line)
        except (ValueError, RecursionError, MemoryError):
            break
    return ParsedSource(None, lines, tuple(sorted(set(touched))))


def _failing_line(error: SyntaxError, count: int) -> int | None:
    if error.lineno is None:
        return None
    return min(max(error.lineno - 1, 0), count - 1)


def _repaired_line(working: list[str], index: int, error: SyntaxError) -> str:
    text = working[index]
    stripped = text.rstrip()
    if COMPOUND_HEADERS.match(text) and not stripped.endswith(":") and not isinstance(error, IndentationError):
        return stripped + ":"
    if isinstance(error, IndentationError):
        previous = _previous_code_line(working, index)
        indent = _indent(previous) if previous is not None else ""
        if previous is not None and previous.rstrip().endswith(":"):
            indent += "    "
        return f"{indent}pass"
    return _neutral_line(text)


def _previous_code_line(working: list[str], index: int) -> str | None:
    for candidate in range(index - 1, -1, -1):
        if working[candidate].strip() and not working[candidate].lstrip().startswith("#"):
            return working[candidate]
    return None


def _previous_untouched(working: list[str], touched: list[int], before: int) -> int | None:
    for index in range(before - 1, -1, -1):
        if index not in touched and working[index].strip():
            return index
    return None


def _indent(text: str) -> str:
    return text[: len(text) - len(text.lstrip())]


def _neutral_line(text: str) -> str:
    """Keep the indentation (and a header's block) so the surrounding code stays valid."""
    if not text.strip():
        return text
    header = COMPOUND_HEADERS.match(text)
    if header:
        return f"{_indent(text)}{NEUTRAL_HEADERS.get(header.group(2), 'if True:')}"
    return f"{_indent(text)}pass"
