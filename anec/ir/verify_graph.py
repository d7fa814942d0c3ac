"""The verifier's checks of one func: SSA, per-node op-table checks, outputs and use lists.

:class:`GraphChecker` walks a :class:`~anec.ir.graph.Graph` once, in node order, and appends
every problem to a :class:`Report` (errors as :class:`~anec.diagnostics.VerifyError`, unused
results as :class:`VerifyWarning`): names and types of values defined once and before their
uses, each node against the op table (through :func:`anec.ir.ops.infer_node_types` and the
memo of :mod:`anec.ir.verify_types`), declared result types, attribute and annotation
literals, the returned values, and that each value's use list matches its readers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from anec.diagnostics import AnecError, Span, VerifyError, did_you_mean
from anec.ir import ops
from anec.ir.graph import Graph
from anec.ir.nodes import Node, Value
from anec.ir.lexical import IDENT, VALUE_NAME
from anec.ir.ops import infer_node_types
from anec.ir.types import TensorType
from anec.ir.verify_types import (
    GOOD_TYPE_IDS,
    GOOD_TYPES,
    INT32_SHAPE,
    WIDE_LAYOUT,
    literal_key,
    literal_problem,
    remembered_types,
    type_problem,
)

__all__ = ["GraphChecker", "Report", "VerifyWarning"]


class VerifyWarning(AnecError):
    """Something legal but probably unintended (rendered with ``warning:``)."""

    kind = "warning"


@dataclass
class Report:
    """Everything the verifier found, in source order."""

    errors: list[VerifyError] = field(default_factory=list)
    warnings: list[VerifyWarning] = field(default_factory=list)


class GraphChecker:
    def __init__(self, graph: Graph, report: Report) -> None:
        self.g = graph
        self.report = report
        self.defined: dict[int, Value] = {}
        """Values defined so far, by identity."""
        self.names: dict[str, Value] = {}
        self._later: dict[int, int] | None = None
        self.readers: dict[int, list[Node]] = {}
        """Nodes reading each value, once per operand slot, in node order."""

    @property
    def later(self) -> dict[int, int]:
        """Index of the node defining each result (built only to word an error)."""
        if self._later is None:
            self._later = {id(r): i for i, n in enumerate(self.g.nodes) for r in n.results}
        return self._later

    def error(
        self, message: str, span: Span | None, hint: str | None = None, notes: tuple[str, ...] = ()
    ) -> None:
        self.report.errors.append(VerifyError(message, span or self.g.span, hint=hint, notes=notes))

    def run(self, warnings: bool = True) -> None:
        g = self.g
        if not isinstance(g.name, str) or not IDENT.match(g.name):
            self.error(
                f"invalid func name {g.name!r}",
                g.span,
                hint="a func name is an identifier: letters, digits and '_'",
            )
        for v in g.inputs:
            if v.producer is not None:
                self.error(f"input %{v.name} has a producer", v.span)
            self.define(v)
        for i, node in enumerate(g.nodes):
            self.node(node, i)
        self.outputs()
        self.uses()
        if warnings:
            self.unused()

    # -- values
    def define(self, v: Value) -> None:
        if not isinstance(v.name, str) or not VALUE_NAME.match(v.name):
            self.error(
                f"invalid value name {v.name!r}",
                v.span,
                hint="a value name has letters, digits and '_' only (x, h_0, 3)",
            )
        elif v.name in self.names:
            first = self.names[v.name].span
            self.error(
                f"value %{v.name} is already defined",
                v.span,
                hint="SSA values are defined once; pick a new name",
                notes=(f"first defined at {first.location}",) if first else (),
            )
        else:
            self.names[v.name] = v
        t = v.type
        bad = None if type(t) is TensorType and t in GOOD_TYPES else type_problem(t)
        if bad and bad.startswith(WIDE_LAYOUT) and v.producer is not None and v.producer.op == "const":
            bad = None  # a const is bounded where it is made (the inline limit, the weights file)
        if bad:
            if bad.startswith(WIDE_LAYOUT):
                self.report.errors.append(VerifyError(
                    f"%{v.name} has an invalid type: {bad}", v.span or self.g.span, constraint=INT32_SHAPE,
                    hint="split the tensor (fewer positions per func, e.g. a smaller sequence bucket), "
                         "or keep it rank 4 with each axis below 2^31"))
            else:
                self.error(f"%{v.name} has an invalid type: {bad}", v.span)
        self.defined[id(v)] = v

    def use(self, v: Value, node: Node, index: int) -> bool:
        if id(v) in self.defined:
            return True
        name = getattr(v, "name", "?")
        if self.later.get(id(v), -1) >= index:
            self.error(
                f"value %{name} is used before it is defined",
                node.span,
                hint="nodes run in order; define a value above its uses",
            )
        else:
            self.error(
                f"use of undefined value %{name}",
                node.span,
                hint=_suggest_value(str(name), self.names),
            )
        return False

    # -- nodes
    def node(self, node: Node, index: int) -> None:
        ok = True
        defined, readers = self.defined, self.readers
        for v in node.operands if not node.optional else node.inputs():
            vid = id(v)
            seen = readers.get(vid)
            if seen is None:
                readers[vid] = [node]
            else:
                seen.append(node)
            if vid not in defined:
                ok = self.use(v, node, index) and ok
        names, match = self.names, VALUE_NAME.match
        for i, r in enumerate(node.results):
            name, t = r._name, r.type
            if (r.producer is node and r.index == i and type(name) is str and name not in names
                    and (GOOD_TYPE_IDS.get(id(t)) is t or type(t) is TensorType
                         and t in GOOD_TYPES) and match(name)):
                names[name] = r  # valid: what define() does without an error
                defined[id(r)] = r
                continue
            if r.producer is not node or r.index != i:
                self.error(
                    f"result %{r.name} of '{node.op}' has a stale producer link",
                    node.span,
                    hint="insert nodes with graph.add_node/create_node",
                )
            before = len(self.report.errors)
            self.define(r)
            ok = ok and len(self.report.errors) == before
        attrs_key = literal_key(node.attrs) if node.attrs else ()
        notes = node.annotations
        plain = attrs_key is not None and (not notes or literal_key(notes) is not None)
        for what, mapping in () if plain else (
                ("attribute", {} if attrs_key is not None else node.attrs),
                ("annotation", {} if not notes or literal_key(notes) is not None else notes)):
            for key, val in mapping.items():
                problem = literal_problem(val)
                if not isinstance(key, str) or not _is_ident(key):
                    self.error(f"invalid {what} name {key!r} on '{node.op}'", node.span)
                    ok = False
                elif problem:
                    self.error(
                        f"{what} '{key}' of '{node.op}' cannot be written in the IR: {problem}",
                        node.span,
                    )
                    ok = False
        if not ok:
            return
        opdef = ops.lookup_op(node.op)
        declared = None
        if opdef is not None and opdef.declared_type:
            if len(node.results) != 1:
                self.error(f"{node.op} has exactly one result, got {len(node.results)}", node.span)
                return
            declared = node.results[0].type
        def infer(ts: list[TensorType], opt: dict[str, TensorType]) -> list[TensorType]:
            # only on a memo miss: a hit means operand types equal to ones inferred before
            if not all(isinstance(t, TensorType) for t in [*ts, *opt.values()]):
                raise _ReportedElsewhere
            return infer_node_types(node.op, ts, opt, node.attrs, node.span, declared=declared)

        try:
            inferred = remembered_types(node.op, node.operands, node.optional, attrs_key,
                                        declared, infer)
        except _ReportedElsewhere:
            return  # a bad operand type is reported where the operand is defined
        except VerifyError as e:
            self.report.errors.append(e)
            return
        if len(inferred) != len(node.results):
            self.error(
                f"'{node.op}' produces {len(inferred)} result{_s(len(inferred))} "
                f"but {len(node.results)} {_are(len(node.results), 'is', 'are')} named",
                node.span,
                hint=f"name {len(inferred)} result{_s(len(inferred))} before '='",
            )
            return
        results = node.results
        if len(results) == 1 and results[0].type == inferred[0]:
            return
        for r, t in zip(results, inferred, strict=True):
            if r.type != t:
                self.error(
                    f"declared type {r.type} of %{r.name} does not match the inferred type {t}",
                    node.span,
                    hint="fix the ': type' (or leave it out and the parser infers it)",
                )

    # -- outputs
    def outputs(self) -> None:
        g = self.g
        span = g.return_span or g.span
        if not g.outputs:
            self.error(
                f"func '{g.name}' returns no value",
                span,
                hint="return at least one value: 'return %y'",
            )
        seen: set[str] = set()
        for v in g.outputs:
            if id(v) not in self.defined:
                self.error(
                    f"returned value %{v.name} is not defined in func '{g.name}'",
                    span,
                    hint=_suggest_value(v.name, self.names),
                )
            elif v.producer is None:
                self.error(
                    f"func '{g.name}' returns its input %{v.name} directly",
                    span,
                    hint=f"outputs must be op results: %{v.name}_out = identity(%{v.name}) "
                    f"and return %{v.name}_out",
                )
            if v.name in seen:
                self.error(
                    f"%{v.name} is returned twice",
                    span,
                    hint="output names must be unique: return a copy made with identity",
                )
            seen.add(v.name)

    # -- use lists
    def uses(self) -> None:
        # each value's use list against the nodes reading it (collected in node order by
        # node()), as multisets: linear in the graph
        readers = self.readers
        none: list[Node] = []
        stale: dict[int, Value] = {}  # each value once, in order (a value listed twice too)
        get = readers.get

        def check(values: Sequence[Value]) -> None:
            for v in values:
                uses = v.uses
                expected = get(id(v), none)
                if uses == expected:  # Node compares by identity: the common case, in order
                    continue
                if len(uses) != len(expected) or (
                    Counter(map(id, uses)) != Counter(map(id, expected))
                ):
                    stale[id(v)] = v

        check(self.g.inputs)
        for n in self.g.nodes:
            check(n.results)
        for v in stale.values():
            self.error(
                f"use list of %{v.name} is out of date",
                v.span,
                hint="after editing operands directly, call graph.rebuild_uses()",
            )

    def unused(self) -> None:
        readers = self.readers
        returned = {id(v) for v in self.g.outputs}
        for n in self.g.nodes:
            results = n.results
            if len(results) == 1:
                key = id(results[0])
                if key in readers or key in returned:
                    continue
            if results and not any(id(r) in readers or id(r) in returned for r in results):
                names = ", ".join(f"%{r.name}" for r in n.results)
                self.report.warnings.append(
                    VerifyWarning(
                        f"{names} {_are(len(n.results), 'is', 'are')} never used "
                        f"(dce removes '{n.op}')",
                        n.span,
                    )
                )


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _are(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _is_ident(key: str) -> bool:
    return bool(IDENT.match(key))


class _ReportedElsewhere(Exception):
    """A node is not checked further: its problem is reported at another node."""


def _suggest_value(name: str, names: dict[str, Value]) -> str | None:
    return did_you_mean(f"%{name}", [f"%{n}" for n in names])
