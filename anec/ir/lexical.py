"""The lexical facts of the IR text that the parser, the verifier and the printer share.

The parser reads names and literals with these rules; the verifier checks
that a graph built in memory (by a pass or the Builder) can be printed and
parsed back under the same rules.
"""

from __future__ import annotations

import re

VALUE_NAME = re.compile(r"[A-Za-z0-9_]+\Z")
"""A value name (without ``%``): letters, digits and ``_`` (``x``, ``h_0``, ``3``,
``0_weight``), as the Builder derives them from weight keys."""

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
"""A func, attribute or annotation name."""

MAX_LIST_DEPTH = 32
"""Nested-list literals deeper than this are rejected (and never printed)."""
