"""Rewrite rules as data, and the one greedy driver that applies them.

A rule is a plain function ``rule(node, rw) -> Value | HANDLED | None``
looked up by the node's op (tinygrad's ``PatternMatcher.pdict``):

* ``None``: no match, try the next rule;
* a ``Value``: the node's (single) result is replaced by it everywhere;
  returned names never change (``Graph.replace_all_uses``), and the node is
  erased;
* ``HANDLED``: the rule rewired the uses itself (e.g. chunking one output into
  several); the node is erased if nothing uses it any more.

New nodes are created through the :class:`Rewriter`, which infers their
types from the op table, inserts them before the node being rewritten (so
the graph stays topologically ordered) and gives them that node's span, so
errors and the rewrite list point at the user's source line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Final, Mapping, TypeVar

from anec.diagnostics import PassError, Span
from anec.ir.ops import infer_types
from anec.ir.types import DType, TensorType
from anec.ir.verify_types import literal_key, remembered_types

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node, Value
    from anec.passes.base import PassContext


def _infer(op: str, operands: "list[Value]", optional: "dict[str, Value]", attrs: dict[str, Any],
           declared: TensorType | None = None) -> list[TensorType]:
    """``infer_types`` for new nodes, remembered in the verifier's memo: a rewrite creates the
    same few nodes many times (validating one scalar const value costs more than building its
    node)."""
    return _infer_plain(op, operands, optional, attrs, declared)[0]


def _infer_plain(op: str, operands: "list[Value]", optional: "dict[str, Value]",
                 attrs: dict[str, Any], declared: TensorType | None = None,
                 ) -> tuple[list[TensorType], bool]:
    """:func:`_infer`, and whether the attributes are plain IR literals: a node built with
    both is created ``inferred`` (the verifier after the pass does not infer it again)."""
    def infer(ts: list[TensorType], opt: dict[str, TensorType]) -> list[TensorType]:
        return infer_types(op, ts, opt, attrs, declared=declared)

    attrs_key = literal_key(attrs) if attrs else ()
    return list(remembered_types(op, operands, optional, attrs_key, declared, infer)), (
        attrs_key is not None)


_SCALAR_TYPES: dict[DType, TensorType] = {}
"""One rank-0 type object per dtype for :meth:`Rewriter.scalar` (a rewrite makes thousands of
scalar consts; a shared type is built, hashed and checked once)."""


class Handled:
    def __repr__(self) -> str:
        return "HANDLED"


HANDLED: Final[Handled] = Handled()
"""Returned by a rule that rewired the node's uses itself."""

Rule = Callable[["Node", "Rewriter"], Any]
Rules = Mapping[str, tuple[Rule, ...]]
R = TypeVar("R", bound="Rewriter")

MAX_SWEEPS = 64
"""Fixpoint bound: more sweeps than this means two rules undo each other (a bug)."""


class Rewriter:
    """Node construction and bookkeeping for rules working on one graph."""

    def __init__(self, graph: "Graph", ctx: "PassContext", pass_name: str) -> None:
        self.graph = graph
        self.ctx = ctx
        self.pass_name = pass_name
        self.anchor: "Node | None" = None
        """The node being rewritten: new nodes go before it and take its span."""
        self.rule_name = ""
        """Name of the rule being tried (recorded with each rewrite)."""
        self.on_rewrite: Callable[["Node | None", dict[str, Any]], None] | None = None
        """Observer called with (original node or None, record) for every recorded rewrite."""
        self.created: set[int] = set()
        """ids of the nodes created by the rule being applied."""

    # ---- building ------------------------------------------------------------
    def settled(self, node: "Node") -> bool:
        """True when no further rule may rewrite ``node`` (a legalize rejection: rewriting the
        node would only report its problem again on the nodes it becomes)."""
        return False

    def name_for(self, suffix: str, base: "Node | None" = None) -> str:
        node = base or self.anchor
        stem = node.results[0]._name if node is not None and node.results else "v"
        return self.graph.fresh_name(f"{stem}_{suffix}" if suffix else stem)

    def op(self, opname: str, *operands: "Value", name: str | None = None, suffix: str = "",
           optional: dict[str, "Value"] | None = None, at: "Node | None" = None,
           **attrs: Any) -> "Value":
        """Insert ``opname(operands, attrs)`` before ``at`` (default: the anchor)."""
        optional = dict(optional) if optional else {}
        args = list(operands)
        types, plain = _infer_plain(opname, args, optional, attrs)
        return self._insert(opname, args, attrs, types, optional, name, suffix, at, plain)

    def const_value(self, value: Any, type: TensorType, suffix: str = "c",
                    at: "Node | None" = None) -> "Value":
        """Insert ``const(value=...) : type``."""
        attrs = {"value": value}
        types, plain = _infer_plain("const", [], {}, attrs, declared=type)
        return self._insert("const", [], attrs, types, {}, None, suffix, at, plain)

    def scalar(self, value: float, dtype: DType, suffix: str = "c",
               at: "Node | None" = None) -> "Value":
        """Insert a rank-0 ``const(value=...) : dtype[]``."""
        t = _SCALAR_TYPES.get(dtype)
        if t is None:
            t = _SCALAR_TYPES[dtype] = TensorType(dtype, ())
        return self.const_value(value, t, suffix, at)

    def const_weight(self, attrs: dict[str, Any], type: TensorType, suffix: str = "w",
                     at: "Node | None" = None) -> "Value":
        """Insert ``const(weight=..., perm=..., slice=...) : type``."""
        types, plain = _infer_plain("const", [], {}, attrs, declared=type)
        return self._insert("const", [], dict(attrs), types, {}, None, suffix, at, plain)

    def _insert(self, opname: str, operands: list["Value"], attrs: dict[str, Any], types: list[TensorType],
                optional: dict[str, "Value"], name: str | None, suffix: str, at: "Node | None",
                inferred: bool) -> "Value":
        anchor = at or self.anchor
        if name is None:
            name = self.name_for(suffix or opname)
        span = anchor.span if anchor is not None else None
        node = self.graph.create_node(opname, operands, attrs, types, names=[name],
                                      optional=optional, span=span, before=anchor,
                                      inferred=inferred)
        self.created.add(id(node))
        return node.results[0]

    # ---- rewiring ------------------------------------------------------------
    def replace(self, old: "Value", new: "Value") -> None:
        """Replace every use of ``old`` (keeping returned names); erase its node if dead.

        A replacement built by this rule inherits the old name once the old
        node is gone, so rewritten programs keep the user's value names.
        """
        node, name = old.producer, old.name
        self.graph.replace_all_uses(old, new)
        if node is None or not erase_if_dead(self.graph, node):
            return
        fresh = new.producer is not None and id(new.producer) in self.created
        if fresh and new.name != name and not self.graph.has_value_name(name):
            self.graph.rename_value(new, name)

    # ---- bookkeeping -----------------------------------------------------------
    def record(self, constraint: str | None, detail: str, node: "Node | None" = None,
               name: str | None = None, span: Span | None = None) -> dict[str, Any]:
        """Add a rewrite record to ``ctx.rewrites`` (rule, constraint, node, location, detail).

        ``node`` defaults to the anchor; ``name``/``span`` override what is
        recorded (for rewrites of func inputs, which have no node).
        """
        node = node or self.anchor
        if span is None and node is not None:
            span = node.span
        if name is None and node is not None and node.results:
            name = node.results[0].name
        entry = {
            "rule": self.rule_name,
            "constraint": constraint,
            "node": name,
            "location": span.location if span is not None else None,
            "detail": detail,
            "func": self.graph.name,
        }
        self.ctx.rewrites.append(entry)
        if self.on_rewrite is not None:
            self.on_rewrite(node, entry)
        return entry


def erase_if_dead(graph: "Graph", node: "Node") -> bool:
    """Erase ``node`` when none of its results is used or returned."""
    if not graph.has_node(node):
        return False
    outputs = graph.outputs
    for r in node.results:  # (plain loops: this runs once per rewrite)
        if r.uses:
            return False
        for v in outputs:
            if v is r:
                return False
    graph.erase_node(node)
    return True


def rewrite_greedily(graph: "Graph", rules: Mapping[str, tuple[Callable[["Node", R], Any], ...]], rw: R) -> int:
    """Apply ``rules`` (op -> rules) until none matches; the number of rewrites."""
    count = 0
    rules_of, present, settled = rules.get, graph.has_node, rw.settled
    for _ in range(MAX_SWEEPS):
        changed = False
        for node in list(graph.nodes):
            tried = rules_of(node.op)
            if tried is None or not present(node):
                continue
            for rule in tried:
                if settled(node):
                    break
                rw.anchor, rw.rule_name = node, rule.__name__
                if rw.created:
                    rw.created = set()  # (a rule that built nothing leaves it empty)
                new = rule(node, rw)
                if new is None:
                    continue
                if new is not HANDLED:
                    rw.replace(node.results[0], new)
                erase_if_dead(graph, node)
                count += 1
                changed = True
                break
        if not changed:
            return count
    raise PassError(f"{rw.pass_name}: rewrite rules did not reach a fixpoint after "
                    f"{MAX_SWEEPS} sweeps over func '{graph.name}'")
