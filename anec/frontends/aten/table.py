"""The rows of the ATen table: an op, its handler and the IR it becomes.

Each family module of :mod:`anec.frontends.aten` registers its handlers with a
:class:`Family` (``@ELEMENTWISE.op("add.Tensor", ir="add")``); the complete
table, in the docs' order, is assembled from the families by
:mod:`anec.frontends.lowerings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from anec.frontends.aten.context import Lowering
    from anec.frontends.aten.values import Args, Lowered

Handler = Callable[["Lowering", "Args"], "Lowered"]
"""``fn(lw, args_by_schema_name) -> value``."""


@dataclass(frozen=True)
class Row:
    """One supported ATen op: its handler and the IR it becomes (for the docs)."""

    name: str
    fn: Handler
    ir: str
    group: str


class Family:
    """The supported ATen ops of one group of the docs table, in registration order."""

    def __init__(self, group: str) -> None:
        self.group = group
        self.rows: dict[str, Row] = {}

    def op(self, *names: str, ir: str) -> Callable[[Handler], Handler]:
        """Register a handler for the ATen overloads ``names`` (``"add.Tensor"``)."""

        def deco(fn: Handler) -> Handler:
            for n in names:
                self.rows["aten." + n] = Row("aten." + n, fn, ir, self.group)
            return fn

        return deco
