"""Validity of a Module or Graph: SSA, the op table, declared types, outputs.

The verifier accepts any in-memory graph (parsed, built, or rewritten by a
pass) and reports every problem as a :class:`~anec.diagnostics.VerifyError`
at the span of the node (its op name) or value concerned:

* SSA: each value is defined once, before its uses, inside this func;
  value and func names are unique and printable; every dimension of its type
  is at least 1 and fits MIL's int32 shapes, and so does every dimension of
  the rank-4 ``[1, C, 1, S]`` layout the compiler gives a tensor of another
  rank (ANE-INT32-SHAPE: ``[4, 10**9, 1]`` is ``[1, 4 * 10**9, 1, 1]``; checked
  at the first value computed from a ``const``, whose size is bounded where it
  is made: the inline limit, the weights file);
* each node: the op exists, operand count and keyword operands, the attribute
  schema, dtype domains and shape rules (all through
  :func:`anec.ir.ops.infer_node_types`, as the parser does); the declared
  result types equal the inferred ones; ``const`` has exactly one of
  ``weight=``/``value=`` and an inline value fits its declared type (a scalar
  fills any shape, a nested list must match the shape exactly);
* outputs: at least one, each an op result (MIL outputs cannot be inputs),
  no name returned twice;
* use lists match the operands (they do when every edit goes through the
  :class:`~anec.ir.graph.Graph` methods).

A node none of whose results is used or returned is not an error but a
warning (``dce`` removes it). :func:`verify` raises the first error and
returns the warnings; :func:`verify_all` returns every error.

:func:`verify_changes` verifies a func after edits recorded by the graph
(:meth:`~anec.ir.graph.Graph.track_changes`): it re-checks the nodes those
edits touched and the func-level facts they can break, and falls back to
:func:`verify` (the same error, word for word) when anything looks wrong.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np

from anec.diagnostics import AnecError, Span, VerifyError, did_you_mean
from anec.ir import ops
from anec.ir.graph import Changes, Graph, Module, Node, Value, no_cyclic_gc
from anec.ir.lexical import IDENT, MAX_LIST_DEPTH, VALUE_NAME
from anec.ir.ops import infer_node_types
from anec.ir.types import DType, TensorType, device_shape

__all__ = ["Report", "VerifyWarning", "check", "verify", "verify_all", "verify_changes"]

MAX_DIM = 2**31 - 1
"""The largest dimension of a tensor type: MIL writes shapes and shape parameters as int32."""

INT32_SHAPE = "ANE-INT32-SHAPE"
_WIDE = "on the device it is laid out as"


class VerifyWarning(AnecError):
    """Something legal but probably unintended (rendered with ``warning:``)."""

    kind = "warning"


@dataclass
class Report:
    """Everything the verifier found, in source order."""

    errors: list[VerifyError] = field(default_factory=list)
    warnings: list[VerifyWarning] = field(default_factory=list)


def verify(target: Module | Graph, *, warnings: bool = True) -> list[str]:
    """Raise the first VerifyError; return the rendered warnings (none looked for without
    ``warnings``)."""
    report = check(target, warnings=warnings)
    if report.errors:
        raise report.errors[0]
    return [w.render() for w in report.warnings]


def verify_changes(graph: Graph, changes: Changes) -> list[str]:
    """Raise what :func:`verify` raises for ``graph``, re-checking only what ``changes`` touched.

    ``changes`` (from :meth:`Graph.track_changes`) lists what the graph
    methods changed since the func was last found valid. Re-checked: every
    node added or rewired and the producer and users of every value renamed
    or retyped, in full (op table, types, names, attributes, that each
    operand is defined earlier in this func and each user comes later, use
    lists), except that a node created with the types the op table inferred
    for it and not rewired since (:attr:`Changes.typed`; retyping a func
    input rewires its users) is not inferred again; that nothing still reads or
    returns a result of an erased node;
    the annotations set through :meth:`Graph.annotate` or ``annotate_all``; the func name, the
    inputs and the outputs. An edit made behind the graph's back is not in
    ``changes``: callers use this only after code that edits through the
    graph methods. When a check fails (or ``changes.everything``), the whole
    func is verified, so the error is the one :func:`verify` gives. Returns
    no warnings.
    """
    with no_cyclic_gc():
        if not changes.everything and _changes_ok(graph, changes):
            return []
    return verify(graph, warnings=False)


def _changes_ok(g: Graph, changes: Changes) -> bool:
    """True when the edits in ``changes`` left ``g`` valid (False: verify it all to say why)."""
    if not isinstance(g.name, str) or not IDENT.match(g.name):
        return False
    nodes = g.nodes  # applies deferred insertions
    alive = g._node_ids
    names = g._names
    inputs = g.inputs
    input_ids = {id(v) for v in inputs}
    for v in inputs:
        if v.producer is not None or names.get(v.name, 0) != 1 or not _value_ok(v):
            return False
    outputs = g.outputs
    if not outputs:
        return False
    returned: set[str] = set()
    for v in outputs:
        p = v.producer
        if (p is None or id(p) not in alive or len(p.results) <= v.index
                or p.results[v.index] is not v or v.name in returned):
            return False
        returned.add(v.name)
    out_ids = {id(v) for v in outputs}
    readers: dict[int, set[int]] = {}
    for key, node in changes.removed.items():
        if key in alive:
            continue  # erased, then added again: checked below
        for r in node.results:
            if id(r) in out_ids or any(id(u) in alive for u in r.uses):
                return False
        for v in node.operands if not node.optional else node.inputs():
            ids = readers.get(id(v))
            if ids is None:
                ids = readers[id(v)] = {id(u) for u in v.uses}
            if key in ids:
                return False  # still listed as a use
    todo = {k: n for k, n in changes.nodes.items() if k in alive}
    typed = changes.typed
    for v in changes.values.values():
        p = v.producer
        if p is not None:
            if id(p) not in alive:
                continue
            todo[id(p)] = p
        elif id(v) not in input_ids:
            continue
        for u in v.uses:
            if id(u) not in alive:
                return False
            todo[id(u)] = u
    for key, node in changes.annotated.items():
        if key in alive and key not in todo and node.annotations and not _plain_annotations(
                node.annotations):  # (the nodes to re-check have theirs checked there)
            return False
    if not todo:
        return True
    pos = {id(n): i for i, n in enumerate(nodes)}
    use_counts: dict[int, Counter[int]] = {}
    for key, node in todo.items():
        if not _node_ok(node, pos, input_ids, alive, names, use_counts, key in typed):
            return False
    return True


_FEW_USES = 8
"""Up to this many uses, :func:`_node_ok` counts a node in a value's use list directly; a
longer list (a weight or a constant read by thousands of nodes) is counted once into a
``Counter`` shared by all its readers, so the check stays linear."""


def _node_ok(node: Node, pos: dict[int, int], input_ids: set[int], alive: set[int],
             names: Counter[str], use_counts: dict[int, Counter[int]], typed: bool = False) -> bool:
    """What :meth:`_GraphChecker.node` checks, for one node at position ``pos[id(node)]``, and
    that its operands are defined before it, its users after it and the use lists agree.
    ``typed``: the node's result types are known to be the inferred ones
    (:attr:`~anec.ir.graph.Changes.typed`), only the rest is checked."""
    opdef = ops.lookup_op(node.op)
    if opdef is None:
        return False
    i = pos[id(node)]
    optional = node.optional
    operands = node.operands if not optional else node.inputs()
    several = len(operands) > 1
    for v in operands:
        p = v.producer
        if p is None:
            if id(v) not in input_ids:
                return False
        elif pos.get(id(p), i) >= i or len(p.results) <= v.index or p.results[v.index] is not v:
            return False  # undefined here, defined later (a cycle), or a stale producer link
        uses = v.uses
        if len(uses) == 1:
            if uses[0] is not node or several and operands.count(v) != 1:
                return False
            continue
        if len(uses) <= _FEW_USES:  # counted in place: cheaper than building a Counter
            for u in uses:
                if id(u) not in alive:
                    return False
            if uses.count(node) != (operands.count(v) if several else 1):  # by identity
                return False
            continue
        counts = use_counts.get(id(v))
        if counts is None:
            if not all(id(u) in alive for u in uses):
                return False
            counts = use_counts[id(v)] = Counter(map(id, uses))
        if counts[id(node)] != (operands.count(v) if several else 1):
            return False
    results = node.results
    match = VALUE_NAME.match
    for k, r in enumerate(results):
        t, name = r.type, r._name
        if (r.producer is not node or r.index != k or names.get(name, 0) != 1
                or not (_GOOD_TYPE_IDS.get(id(t)) is t or _good_type(t))
                or type(name) is not str or match(name) is None):
            return False
        for u in r.uses:  # every user comes later (a node added again keeps its users)
            if pos.get(id(u), -1) <= i:
                return False
    notes = node.annotations
    if notes and not _plain_annotations(notes):
        return False
    if typed:
        return True
    attrs = node.attrs
    attrs_key = literal_key(attrs) if attrs else ()
    if attrs_key is None:
        return False  # the general path says whether it is valid
    declared = None
    if opdef.declared_type:
        if len(results) != 1:
            return False
        declared = results[0].type
    try:
        inferred = remembered_types(
            node.op, node.operands, optional, attrs_key, declared,
            lambda ts, opt: infer_node_types(node.op, ts, opt, node.attrs, node.span,
                                             declared=declared))
    except (VerifyError, TypeError, AttributeError):  # TypeError: an unhashable (invalid) type
        return False
    if len(inferred) != len(results):
        return False
    if len(results) == 1:
        return results[0].type == inferred[0]
    return all(r.type == t for r, t in zip(results, inferred))


def _value_ok(v: Value) -> bool:
    t = v.type
    return (isinstance(v.name, str) and VALUE_NAME.match(v.name) is not None
            and (type(t) is TensorType and t in _GOOD_TYPES or _bad_type(t) is None))


def _plain_annotations(notes: dict[str, Any]) -> bool:
    """Whether ``notes`` can be written in the IR (ints and bools under known names: fast)."""
    for k, v in notes.items():
        t = type(v)
        if k not in _GOOD_NAMES or not (t is bool or (t is int and -(10**18) < v < 10**18)):
            return _literal_key(notes) is not None
    return True


def verify_all(target: Module | Graph) -> list[VerifyError]:
    """Every VerifyError, in source order (empty when valid)."""
    return check(target).errors


def check(target: Module | Graph, *, warnings: bool = True) -> Report:
    """Errors and warnings (unless not ``warnings``) of a Module or a single Graph."""
    report = Report()
    with no_cyclic_gc():  # linear time on large graphs
        if isinstance(target, Module):
            _check_module(target, report, warnings)
        else:
            _GraphChecker(target, report).run(warnings)
    return report


# ---- module ---------------------------------------------------------------------


def _check_module(module: Module, report: Report, warnings: bool = True) -> None:
    if not module.funcs:
        source = module.source
        report.errors.append(
            VerifyError(
                "the file defines no func",
                Span(source, 0, 0) if source is not None else None,
                hint="a file holds one or more funcs: func main(%x: fp16[1, 64, 1, 64]) "
                "{ %y = relu(%x)  return %y }",
            )
        )

    for ws in module.weight_sources:
        if not isinstance(ws.path, str) or not _printable_str(ws.path):
            report.errors.append(VerifyError(f"invalid weights path {ws.path!r}", ws.span))
    for key, graph in module.funcs.items():
        if key != graph.name:
            report.errors.append(
                VerifyError(
                    f"func '{graph.name}' is registered under the name '{key}'",
                    graph.span,
                    hint="add funcs with module.add_func(graph)",
                )
            )
        elif not isinstance(key, str) or not IDENT.match(key):
            report.errors.append(
                VerifyError(
                    f"invalid func name {key!r}",
                    graph.span,
                    hint="a func name is an identifier: letters, digits and '_'",
                )
            )
        _GraphChecker(graph, report).run(warnings)


# ---- graph ----------------------------------------------------------------------


class _GraphChecker:
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
        bad = None if type(t) is TensorType and t in _GOOD_TYPES else _bad_type(t)
        if bad and bad.startswith(_WIDE) and v.producer is not None and v.producer.op == "const":
            bad = None  # a const is bounded where it is made (the inline limit, the weights file)
        if bad:
            if bad.startswith(_WIDE):
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
                    and (_GOOD_TYPE_IDS.get(id(t)) is t or type(t) is TensorType
                         and t in _GOOD_TYPES) and match(name)):
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
        attrs_key = _literal_key(node.attrs) if node.attrs else ()
        notes = node.annotations
        plain = attrs_key is not None and (not notes or _literal_key(notes) is not None)
        for what, mapping in () if plain else (
                ("attribute", {} if attrs_key is not None else node.attrs),
                ("annotation", {} if not notes or _literal_key(notes) is not None else notes)):
            for key, val in mapping.items():
                problem = _literal_problem(val)
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


# ---- helpers ----------------------------------------------------------------------


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _are(n: int, one: str, many: str) -> str:
    return one if n == 1 else many


def _is_ident(key: str) -> bool:
    return bool(IDENT.match(key))


_GOOD_TYPES: set[TensorType] = set()
"""Types already found valid (a graph has few distinct types)."""

_GOOD_TYPE_IDS: dict[int, TensorType] = {}
"""The TensorType objects already found valid, by ``id``: the per-node checks look a result
type up here first, a dict lookup by an int, where ``t in _GOOD_TYPES`` calls the
Python-level ``TensorType.__hash__`` and ``__eq__`` (rewrites share one type object among
many nodes). The dict keeps each object alive, so its id is not reused while listed; a
TensorType is immutable, so a listed object stays valid. A miss falls back to
:data:`_GOOD_TYPES` and :func:`_bad_type` (:func:`_good_type`)."""


def _good_type(t: Any) -> bool:
    """Whether ``t`` is a valid result type, listing the object in :data:`_GOOD_TYPE_IDS`."""
    if type(t) is TensorType and t in _GOOD_TYPES or _bad_type(t) is None:
        if len(_GOOD_TYPE_IDS) < _INFERRED_MAX:
            _GOOD_TYPE_IDS[id(t)] = t
        return True
    return False


class _ReportedElsewhere(Exception):
    """A node is not checked further: its problem is reported at another node."""


_INFERRED: dict[tuple[Any, ...], tuple[TensorType, ...]] = {}
"""Result types inferred for (op, operand types, optional operand types, attributes,
declared type): every node is still checked, but nodes alike share one inference. Only
successes are kept. The verifier and the rewriter's new nodes share it."""
_INFERRED_MAX = 1 << 16


def remembered_types(
    op: str,
    operands: Sequence[Value],
    optional: Mapping[str, Value],
    attrs_key: tuple[Any, ...] | None,
    declared: TensorType | None,
    infer: Callable[[list[TensorType], dict[str, TensorType]], Sequence[TensorType]],
) -> tuple[TensorType, ...]:
    """The result types of ``op`` on these values: from the memo when a node alike was
    inferred before, else ``infer(operand types, optional operand types)``, remembered.

    ``attrs_key`` is :func:`literal_key` of the attributes; None (not plainly hashable)
    always infers. ``infer`` raises for an invalid node and nothing is remembered then.
    """
    operand_types = [v.type for v in operands]
    optional_types = {k: v.type for k, v in optional.items()}
    if attrs_key is None:
        return tuple(infer(operand_types, optional_types))
    key = (op, tuple(operand_types), tuple(optional_types.items()), attrs_key, declared)
    try:
        types = _INFERRED.get(key)
    except TypeError:  # an unhashable (invalid) type: infer reports it
        return tuple(infer(operand_types, optional_types))
    if types is None:
        types = tuple(infer(operand_types, optional_types))
        if len(_INFERRED) >= _INFERRED_MAX:
            _INFERRED.clear()
        _INFERRED[key] = types
    return types

_GOOD_NAMES: set[str] = set()
"""Attribute names already found to be identifiers."""

_SCALARS = (bool, np.bool_, DType, int, np.integer, str)
_SHORT_LIST = 64


def literal_key(attrs: dict[str, Any]) -> tuple[Any, ...] | None:
    """A hashable key for ``attrs`` when every name and value is plainly valid, else None.

    None sends the node down the general path (which reports the problem, or
    checks a long list such as an inline ``value=``). Values are keyed with
    their type (``1``, ``1.0`` and ``True`` are different attributes) and
    floats by ``repr`` (``-0.0`` and ``nan`` stay distinct).
    """
    key = []
    for name, v in attrs.items():
        if name not in _GOOD_NAMES:
            if not isinstance(name, str) or not IDENT.match(name):
                return None
            _GOOD_NAMES.add(name)
        k = _scalar_key(v)
        if k is None:
            if not isinstance(v, (list, tuple)) or len(v) > _SHORT_LIST:
                return None
            items = []
            for x in v:
                kx = _scalar_key(x)
                if kx is None:
                    return None
                items.append(kx)
            k = (type(v), tuple(items))
        key.append((name, k))
    return tuple(key)


_literal_key = literal_key


def _scalar_key(v: Any) -> tuple[Any, ...] | None:
    t = type(v)
    if t is float or isinstance(v, np.floating):
        return (t, repr(v))
    if isinstance(v, _SCALARS):
        if t is str:
            return (t, v) if _printable_str(cast(str, v)) else None
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
            return (t, v) if -(10**18) < v < 10**18 else None
        return (t, v)
    return None


def _bad_type(t: Any) -> str | None:
    if not isinstance(t, TensorType) or not isinstance(t.dtype, DType):
        return f"{t!r} is not a TensorType"
    if any(d < 1 for d in t.shape):
        return f"{t} has a dimension < 1"
    if any(d > MAX_DIM for d in t.shape):
        return f"a dimension is larger than {MAX_DIM} (MIL shapes are int32)"
    if t.rank != 4:
        dev = device_shape(t.shape)
        if dev[1] > MAX_DIM:
            return (f"{_WIDE} {list(dev)}, whose dimension {dev[1]} is larger than {MAX_DIM} "
                    "(MIL shapes and strides are int32)")
    if len(_GOOD_TYPES) < _INFERRED_MAX:
        _GOOD_TYPES.add(t)
    if len(_GOOD_TYPE_IDS) < _INFERRED_MAX:
        _GOOD_TYPE_IDS[id(t)] = t
    return None


def _suggest_value(name: str, names: dict[str, Value]) -> str | None:
    return did_you_mean(f"%{name}", [f"%{n}" for n in names])


def _printable_str(s: str) -> bool:
    return not any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def _literal_problem(v: Any, depth: int = 0) -> str | None:
    """Why ``v`` has no IR spelling (None when it prints and parses back)."""
    if isinstance(v, (bool, np.bool_, DType)):
        return None
    if isinstance(v, (int, np.integer)):
        return None if len(str(int(v))) < 4000 else "integer too large"
    if isinstance(v, (float, np.floating)):
        return None
    if isinstance(v, str):
        return None if _printable_str(v) else "string holds lone surrogates"
    if isinstance(v, (list, tuple)):
        if depth >= MAX_LIST_DEPTH:
            return f"lists nested deeper than {MAX_LIST_DEPTH}"
        for x in v:
            p = _literal_problem(x, depth + 1)
            if p:
                return p
        return None
    return f"{type(v).__name__} is not a literal"
