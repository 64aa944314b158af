"""Re-parsing only the top-level statements an edit touched.

A keystroke changes one or two lines of a 2,000-line file, yet ``ast.parse``
of the whole file costs ~10 ms of the 50 ms budget. The previous version's
tree says exactly where each top-level statement starts and ends, so after an
edit only the statements around the changed lines are parsed again; the
other statements are the previous version's node objects, unchanged (nothing
here mutates a node, so two versions can share them, and caches keyed by a
statement's identity stay valid for it).

The re-parsed region is whole top-level statements: from the statement before
the first changed line (an ``else:`` typed after an ``if`` joins it) to the
statement after the last changed line (a decorator typed above a ``def``
joins it). When the edit adds or removes lines, every statement after it
would move, so the region then runs to the end of the file (parsing C-fast
beats renumbering nodes in Python).

A region with a syntax error (the user is mid-way through typing ``if x``) is
repaired on its own by ``parse_tolerant``, so the error stays local and the
rest of the file keeps its layers; the next edit may re-use that version as
long as its region covers every repaired line. When the region cannot be
parsed even so, the caller parses the whole file tolerantly.
"""

from __future__ import annotations

import ast

from .source import ParsedSource, parse_tolerant, split_lines


def reparse_changed(previous: ParsedSource, source: str) -> ParsedSource | None:
    """``source`` parsed by re-using ``previous``'s unchanged statements, or None.

    None means "parse the whole file": nothing can be re-used, a line the
    previous parse repaired lies outside the region, or the region does not
    parse even tolerantly.
    """
    old_tree = previous.tree
    if old_tree is None or not old_tree.body:
        return None
    old_lines, new_lines = previous.lines, split_lines(source)
    first_changed, old_end, new_end = _changed_lines(old_lines, new_lines)
    if first_changed == old_end == new_end:  # the same lines (e.g. only a final newline changed)
        return ParsedSource(old_tree, new_lines, previous.repaired_lines)
    body = old_tree.body
    starts = [_start_line(statement) for statement in body]
    ends = [statement.end_lineno - 1 for statement in body]  # type: ignore[operator]
    line_shift = len(new_lines) - len(old_lines)

    first = _index_before(ends, first_changed)
    last = _index_after(starts, old_end) if line_shift == 0 else None
    while first > 0 and ends[first - 1] >= starts[first]:  # ``a = 1; b = 2``: one line, two statements
        first -= 1
    while last is not None and last + 1 < len(body) and starts[last + 1] <= ends[last]:
        last += 1
    region_start = min(starts[first], first_changed)
    region_old_end = ends[last] + 1 if last is not None else len(old_lines)  # exclusive
    if any(not region_start <= line < region_old_end for line in previous.repaired_lines):
        return None
    region_end = region_old_end if last is not None else len(new_lines)  # same line numbers when a statement follows
    # Blank lines in front keep the region's line numbers those of the whole file.
    snippet = "\n" * region_start + "\n".join(new_lines[region_start:region_end])
    region = parse_tolerant(snippet)
    if region.tree is None:
        return None
    kept_after = body[last + 1:] if last is not None else []
    tree = ast.Module(body=body[:first] + region.tree.body + kept_after, type_ignores=[])
    return ParsedSource(tree, new_lines, region.repaired_lines)


def _changed_lines(old: list[str], new: list[str]) -> tuple[int, int, int]:
    """(first changed line, end of the change in ``old``, end in ``new``), ends exclusive."""
    limit = min(len(old), len(new))
    prefix = 0
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[-1 - suffix] == new[-1 - suffix]:
        suffix += 1
    return prefix, len(old) - suffix, len(new) - suffix


def _start_line(statement: ast.stmt) -> int:
    """0-based first line of a top-level statement, its decorators included."""
    decorators = getattr(statement, "decorator_list", None)
    if decorators:
        return min(statement.lineno, *(d.lineno for d in decorators)) - 1
    return statement.lineno - 1


def _index_before(ends: list[int], line: int) -> int:
    """The statement before the first one reaching ``line`` (0 when there is none)."""
    for index, end in enumerate(ends):
        if end >= line:
            return max(index - 1, 0)
    return max(len(ends) - 1, 0)


def _index_after(starts: list[int], line: int) -> int | None:
    """The first statement starting at or after ``line``; None when none does."""
    for index, start in enumerate(starts):
        if start >= line:
            return index
    return None
