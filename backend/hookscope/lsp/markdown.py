"""Text from the user's file or the running model, made safe to put into hover Markdown."""

from __future__ import annotations

import re

_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
"""Every ASCII punctuation character: CommonMark lets each be backslash-escaped, and escaping them all
leaves no link, image, emphasis, code span, HTML tag, entity, table cell or theme icon to open."""
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def escape_markdown(text: str) -> str:
    """``text`` as literal Markdown text on one line (a line break would end a table row or paragraph)."""
    return _PUNCTUATION.sub(r"\\\1", _LINE_BREAK.sub(" ", text))
