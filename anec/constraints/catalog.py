"""The ANE constraint catalog by id: :data:`CONSTRAINTS` and :func:`get_constraint`."""

from __future__ import annotations

from anec.constraints import entries_io_formats, entries_ops_runtime
from anec.constraints.model import Constraint
from anec.diagnostics import AnecError, did_you_mean

CONSTRAINTS: dict[str, Constraint] = {c.id: c for c in (*entries_ops_runtime.ENTRIES, *entries_io_formats.ENTRIES)}
"""Every entry by id, in the order ``anec constraints`` lists them."""


def get_constraint(cid: str) -> Constraint:
    """The entry with id ``cid``; ``AnecError`` with a suggestion otherwise."""
    key = cid.strip().upper()
    if key in CONSTRAINTS:
        return CONSTRAINTS[key]
    hint = did_you_mean(key, CONSTRAINTS) or "run `anec constraints` for the list"
    raise AnecError(f"unknown constraint id '{cid}'", hint=hint)
