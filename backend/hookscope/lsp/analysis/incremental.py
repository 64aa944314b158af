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

Both ends of the region must be where a logical line starts, in the new text.
A backslash at the end of a line joins the next physical line to it, so the
region widens by a statement when the line above it ends in one (``a = 1; \\``),
when its own last line does, and when a changed line does (``@\\`` typed above
``name`` makes ``@name``, and the statement after the change is then the one
after ``name``). A line the previous parse repaired is no statement of the
text (``method)`` that closes a bracket opened above it), so the statement
after the change is also one after every repaired line.

A region with a syntax error (the user is mid-way through typing ``if x``) is
repaired on its own by ``parse_tolerant``, so the error stays local and the
rest of the file keeps its layers; the next edit may re-use that version as
long as no repaired line lies before its region. When the region cannot be
parsed even so, the caller parses the whole file tolerantly. The one error
the text after the region can undo is a triple-quoted string the region opens
and a later ``\"\"\"`` closes; only when the region fails on such a string is
the whole file parsed once more, without repairs.
"""

from __future__ import annotations

import ast

from .source import ParsedSource, parse_tolerant, split_lines


def reparse_changed(previous: ParsedSource, source: str) -> ParsedSource | None:
    """``source`` parsed by re-using ``previous``'s unchanged statements, or None.

    None means "parse the whole file": nothing can be re-used, a line the
    previous parse repaired lies before the region, or the region does not
    parse even tolerantly.
    """
    old_tree = previous.tree
    if old_tree is None or not old_tree.body:
        return None
    old_lines, new_lines = previous.lines, split_lines(source)
    first_changed, old_end, new_end = _changed_lines(old_lines, new_lines)
    # The same lines (e.g. only a final newline changed), unless the last one ends in a
    # backslash: then the final line break decides whether the file parses.
    if first_changed == old_end == new_end and not _joins_next(new_lines, len(new_lines) - 1):
        return ParsedSource(old_tree, new_lines, previous.repaired_lines)
    body = old_tree.body
    starts = [_start_line(statement) for statement in body]
    ends = [statement.end_lineno - 1 for statement in body]  # type: ignore[operator]
    line_shift = len(new_lines) - len(old_lines)

    first, region_start = _region_start(starts, ends, new_lines, first_changed)
    last = _region_last(starts, ends, new_lines, old_end, previous.repaired_lines) if line_shift == 0 else None
    region_old_end = ends[last] + 1 if last is not None else len(old_lines)  # exclusive
    if any(not region_start <= line < region_old_end for line in previous.repaired_lines):
        return None
    region_end = region_old_end if last is not None else len(new_lines)  # same line numbers when a statement follows
    # Blank lines in front keep the region's line numbers those of the whole file.
    snippet = "\n" * region_start + "\n".join(new_lines[region_start:region_end])
    snippet += "\n" if last is not None else _final_line_break(source)
    region = parse_tolerant(snippet)
    if region.tree is None:
        return None
    if region.repaired_lines and last is not None:  # text follows that might close what the region opens
        whole = _parse_whole_if_string_runs_on(snippet, source, new_lines)
        if whole is not None:
            return whole
    kept_after = body[last + 1 :] if last is not None else []
    tree = ast.Module(body=body[:first] + region.tree.body + kept_after, type_ignores=[])
    return ParsedSource(tree, new_lines, region.repaired_lines)


def _final_line_break(source: str) -> str:
    """How ``source`` ends after its last line: a region that runs to the end must end alike.

    A backslash on the last line parses or not by it: ``x = 1 \\`` then an empty last line,
    or ``x = 1 \\`` then ``\\r\\n``, parse; ``x = 1 \\`` then ``\\n`` alone does not.
    """
    for line_break in ("\r\n", "\n", "\r"):
        if source.endswith(line_break):
            return line_break
    return ""


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


def _region_start(starts: list[int], ends: list[int], lines: list[str], first_changed: int) -> tuple[int, int]:
    """(first statement of the region, its first line): the statement before the change, on a line of its own.

    Only lines before ``first_changed`` are read, so old and new text agree on them.
    """
    first = _index_before(ends, first_changed)
    # ``a = 1; b = 2`` is one line with two statements, and after ``a = 1; \`` the next
    # line continues it: parsed alone, an indented ``    b = 2`` would be an error.
    while first > 0 and (ends[first - 1] >= starts[first] or _joins_next(lines, starts[first] - 1)):
        first -= 1
    region_start = min(starts[first], first_changed)
    if first == 0 and _joins_next(lines, region_start - 1):
        region_start = 0  # above the first statement there are only comments and continuations
    return first, region_start


def _region_last(
    starts: list[int], ends: list[int], lines: list[str], changed_end: int, repaired: tuple[int, ...]
) -> int | None:
    """The region's last statement when no line was added or removed; None: up to the end of the file.

    That is the first statement after the change (a decorator typed above a ``def`` joins
    it) and after every repaired line, counting as changed every line that a changed line's
    final backslash joins to it: ``@\\`` typed above ``name`` makes it ``@name``, so the
    statement after is the ``def``. The region then runs on while its last line shares a
    line with the next statement or ends in a backslash (``b = 2; \\``), which would leave
    the region cut mid-line.
    """
    changed_end = max([changed_end, *(line + 1 for line in repaired)])
    while changed_end < len(lines) and _joins_next(lines, changed_end - 1):
        changed_end += 1
    last = _index_after(starts, changed_end)
    while last is not None and _cut_mid_line(starts, ends, lines, last):
        last = last + 1 if last + 1 < len(starts) else None
    return last


def _cut_mid_line(starts: list[int], ends: list[int], lines: list[str], last: int) -> bool:
    """Whether a region ending with statement ``last`` would end inside a logical line."""
    shares_line = last + 1 < len(starts) and starts[last + 1] <= ends[last]
    return shares_line or _joins_next(lines, ends[last])


def _joins_next(lines: list[str], index: int) -> bool:
    """Whether line ``index`` ends in a backslash, so the next physical line continues it.

    A comment or a string can end in one too; counting those only widens the region.
    """
    return 0 <= index < len(lines) and lines[index].endswith("\\")


def _parse_whole_if_string_runs_on(snippet: str, source: str, lines: list[str]) -> ParsedSource | None:
    """The whole file parsed, when the region fails on a triple-quoted string it leaves open
    and the text after it closes that string (``# \"\"\"`` in a later comment); else None.

    Any other construct the region leaves open stays open (the statements after the region
    balance their brackets) or was taken into the region (a backslash, a decorator above
    the next statement), so only this failure costs a whole-file parse.
    """
    try:
        ast.parse(snippet)  # parse_tolerant keeps no error; this runs only for a region that needed repair
        return None
    except SyntaxError as error:
        if "unterminated triple-quoted" not in (error.msg or ""):  # an f-string on 3.12 too
            return None
    except (ValueError, RecursionError, MemoryError):
        return None
    try:
        return ParsedSource(ast.parse(source), lines, ())
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


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
