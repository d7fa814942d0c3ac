"""Source layout the IR does not model: where comments and blank lines were (for ``anec fmt``).

:class:`Comment` and :class:`Layout` record each ``//`` comment and blank line against the
layout item (directive, func header, statement, return, closing brace) it belongs to, keyed by
:func:`item_key`; :func:`build_layout` computes a Layout from the parsed items' positions and
the comments the parser collected. :mod:`anec.ir.printer` re-attaches them when formatting.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from anec.diagnostics import Source

__all__ = ["Comment", "Layout", "build_layout", "item_key"]


@dataclass
class Comment:
    """A ``//`` comment: its text, position and whether code precedes it on its line."""

    text: str
    start: int
    line: int
    trailing: bool
    blank_before: bool
    """An empty line directly precedes this comment's line."""


@dataclass
class Layout:
    """Source layout the IR does not model: comments and blank lines.

    Items are top-level directives, func headers, statements, returns and
    closing braces, keyed by object identity (see :func:`item_key`), so a
    layout is meant for the module it was parsed with, unchanged. The
    formatter re-attaches each own-line comment before the item that follows
    it, and each trailing comment after the item on whose line it stands.
    """

    leading: dict[tuple[Any, ...], list[Comment]] = field(default_factory=dict)
    trailing: dict[tuple[Any, ...], list[Comment]] = field(default_factory=dict)
    blank_before: set[tuple[Any, ...]] = field(default_factory=set)


def item_key(kind: str, obj: Any = None) -> tuple[Any, ...]:
    """Key of a layout item: ``("weights", ws)``, ``("func", g)``, ``("node", n)``,
    ``("return", g)``, ``("close", g)`` or ``("eof",)``."""
    return (kind,) if obj is None else (kind, id(obj))


def _blank_before(text: str, pos: int) -> bool:
    """Whether the line holding ``pos`` is directly preceded by an empty line."""
    line_start = text.rfind("\n", 0, pos) + 1
    if line_start == 0:
        return False
    prev_start = text.rfind("\n", 0, line_start - 1) + 1
    return text[prev_start : line_start - 1].strip() == ""


def build_layout(
    source: Source, items: list[tuple[int, int, tuple[Any, ...]]], comments: list[tuple[str, int]]
) -> Layout:
    """The layout of the parsed items (start, end, key) and the comments (text, position)."""
    text = source.text
    layout = Layout()
    items = sorted(items, key=lambda it: (it[0], it[1]))
    for start, _end, key in items:
        if key[0] not in ("eof", "close") and _blank_before(text, start):
            layout.blank_before.add(key)
    j = 0
    for comment_text, pos in comments:
        line_start = text.rfind("\n", 0, pos) + 1
        trailing = text[line_start:pos].strip() != ""
        comment = Comment(
            comment_text.rstrip(), pos, source.line_col(pos)[0], trailing, _blank_before(text, pos)
        )
        while j < len(items) and items[j][0] <= pos:
            j += 1
        if trailing and j > 0:
            layout.trailing.setdefault(items[j - 1][2], []).append(comment)
        else:
            key = items[j][2] if j < len(items) else item_key("eof")
            layout.leading.setdefault(key, []).append(comment)
    return layout
