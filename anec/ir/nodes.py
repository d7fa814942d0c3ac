"""SSA values, nodes and the change log of the in-memory IR (:mod:`anec.ir.graph` holds the
graphs and modules that own them).

A :class:`Value` is a func input or one result of a :class:`Node`; a Node holds its op,
operands positionally (``operands``) plus optional operands passed by keyword (``optional``,
e.g. conv1x1 ``bias=``), python-literal attributes (``attrs``) and free-form ``annotations``
written by analysis passes. :class:`Changes` records what the graph methods changed since
:meth:`~anec.ir.graph.Graph.track_changes`, for the incremental verifier.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from anec.diagnostics import Span
from anec.ir.types import TensorType

__all__ = ["Changes", "Node", "Value"]


class Value:
    """An SSA value: a func input or one result of a node.

    ``name`` is read-only here: a value is renamed by the graph that owns it
    (:meth:`Graph.rename_value`), which keeps the graph's name index right.
    """

    __slots__ = ("_name", "type", "producer", "index", "uses", "span", "__weakref__")

    def __init__(self, name: str, type: TensorType, producer: "Node | None" = None, index: int = 0,
                 uses: "list[Node] | None" = None, span: Span | None = None) -> None:
        self._name = name
        self.type = type
        """Static type."""
        self.producer = producer
        """The node defining this value, or None for a func input."""
        self.index = index
        """Result index within the producer."""
        self.uses: list[Node] = [] if uses is None else uses
        """Nodes using this value, once per operand slot (a multiset)."""
        self.span = span
        """Where the value is defined in the source text."""

    @property
    def name(self) -> str:
        """Name without the ``%`` sigil; unique within its func."""
        return self._name

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__ if k != "__weakref__"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


@dataclass(eq=False, slots=True)
class Node:
    """One op application.

    Slotted: a large pipeline creates hundreds of thousands of nodes, and a node without an
    instance ``__dict__`` is cheaper to build and one object less for the cyclic collector
    to traverse.
    """

    op: str
    """Op name from the op table."""
    operands: list[Value]
    """Positional operands."""
    attrs: dict[str, Any]
    """Attributes (int, float, str, bool, DType, lists of those)."""
    results: list[Value]
    """Result values, in order."""
    optional: dict[str, Value] = field(default_factory=dict)
    """Optional operands passed by keyword, e.g. ``{"bias": v}``."""
    span: Span | None = None
    """Where the node is written in the source text (the op name)."""
    annotations: dict[str, Any] = field(default_factory=dict)
    """Analysis results (e.g. SRAM bytes); printed, parsed, not verified."""

    @property
    def result(self) -> Value:
        """The single result (raises for multi-result nodes)."""
        if len(self.results) != 1:
            raise ValueError(f"{self.op} has {len(self.results)} results")
        return self.results[0]

    def inputs(self) -> list[Value]:
        """All operand values: positional, then optional in key order."""
        optional = self.optional
        if not optional:
            return self.operands[:]
        return self.operands + [optional[k] for k in sorted(optional)]

    def __repr__(self) -> str:
        res = ", ".join(f"%{r.name}" for r in self.results)
        args = ", ".join(f"%{v.name}" for v in self.operands)
        return f"<{res} = {self.op}({args})>"


class Changes:
    """What the :class:`Graph` methods changed since :meth:`Graph.track_changes`.

    The verifier re-checks only this (:func:`anec.ir.verifier.verify_changes`);
    an edit made behind the graph's back (assigning ``node.operands``,
    ``value.type``, ...) is not recorded, which is why only passes declared
    ``tracked`` are verified this way.
    """

    __slots__ = ("nodes", "removed", "values", "annotated", "typed", "everything")

    def __init__(self) -> None:
        self.nodes: dict[int, Node] = {}
        """Nodes added, or whose operands changed."""
        self.removed: dict[int, Node] = {}
        """Nodes erased (a later ``add_node`` of the same node lists it in ``nodes`` too)."""
        self.values: dict[int, Value] = {}
        """Values renamed or retyped (their producer and users are re-checked)."""
        self.annotated: dict[int, Node] = {}
        """Nodes whose annotations were set through :meth:`Graph.annotate`."""
        self.typed: set[int] = set()
        """ids of the nodes in ``nodes`` created with the result types the op table infers for
        their operands and attributes (``Graph.create_node(..., inferred=True)``, as the
        rewriter of :mod:`anec.passes.rewrite` builds them) and not rewired since: the
        verifier re-checks their place, names and use lists but does not infer their types
        again. Rewiring a node to read a value of another type (or retyping a func input it
        reads) drops it from here; rewiring it to a value of the same type keeps it, and lists
        here a node the log had not listed (it was valid when the log began, and what the op
        table infers from its operand types is unchanged). A rewrite creates most of the nodes
        a large pipeline re-checks, and rewires the users of each value it replaces; inferring
        each again cost as much as building it."""
        self.everything = False
        """A change the log cannot describe (``rebuild_uses``): verify the whole func."""
