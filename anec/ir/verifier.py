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

This module holds those entry points, the module-level checks and the incremental check;
the checks of one func are :mod:`anec.ir.verify_graph`'s, the type and literal checks and
the inference memo :mod:`anec.ir.verify_types`'.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from anec.diagnostics import Span, VerifyError
from anec.ir.graph import Graph, Module
from anec.ir.nogc import no_cyclic_gc
from anec.ir.nodes import Changes, Node, Value
from anec.ir.lexical import IDENT, VALUE_NAME
from anec.ir.ops import OPS, TARGET_OPS, infer_node_types
from anec.ir.types import TensorType
from anec.ir.verify_graph import GraphChecker, Report, VerifyWarning
from anec.ir.verify_types import (
    GOOD_NAMES,
    GOOD_TYPE_IDS,
    GOOD_TYPES,
    good_type,
    literal_key,
    printable_str,
    remembered_types,
    type_problem,
)

__all__ = ["Report", "VerifyWarning", "check", "verify", "verify_all", "verify_changes"]


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
            if id(r) in out_ids or r.uses and any(id(u) in alive for u in r.uses):
                return False
        for v in node.operands if not node.optional else node.inputs():
            if len(v.uses) <= _FEW_USES:
                if node in v.uses:  # (by identity: nodes compare so)
                    return False  # still listed as a use
                continue
            ids = readers.get(id(v))
            if ids is None:
                ids = readers[id(v)] = {id(u) for u in v.uses}
            if key in ids:
                return False  # still listed as a use
    listed = changes.nodes
    # (erasing a node takes it off the log: every listed node is alive, checked in one C-level scan)
    todo = dict(listed) if listed.keys() <= alive else {k: n for k, n in listed.items() if k in alive}
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
    annotated = changes.annotated
    # the nodes to re-check have theirs checked there (the others found with a set operation
    # when most annotated nodes are to be re-checked)
    for key, node in (((k, annotated[k]) for k in annotated.keys() - todo.keys())
                      if len(todo) > len(annotated) // 2 else annotated.items()):
        if key in alive and key not in todo and node.annotations and not _plain_annotations(
                node.annotations):
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
    """What :meth:`GraphChecker.node` checks, for one node at position ``pos[id(node)]``, and
    that its operands are defined before it, its users after it and the use lists agree.
    ``typed``: the node's result types are known to be the inferred ones
    (:attr:`~anec.ir.nodes.Changes.typed`), only the rest is checked."""
    opdef = OPS.get(node.op) or TARGET_OPS.get(node.op)  # (ops.lookup_op, without its call)
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
    k = 0
    for r in results:
        t, name = r.type, r._name
        if (r.producer is not node or r.index != k or names.get(name, 0) != 1
                or not (GOOD_TYPE_IDS.get(id(t)) is t or good_type(t))
                or type(name) is not str or match(name) is None):
            return False
        for u in r.uses:  # every user comes later (a node added again keeps its users)
            if pos.get(id(u), -1) <= i:
                return False
        k += 1
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
            and (type(t) is TensorType and t in GOOD_TYPES or type_problem(t) is None))


def _plain_annotations(notes: dict[str, Any]) -> bool:
    """Whether ``notes`` can be written in the IR (ints and bools under known names: fast)."""
    if GOOD_NAMES.issuperset(notes):  # (the names in one C-level scan)
        for v in notes.values():
            t = type(v)
            if not (t is int and -(10**18) < v < 10**18 or t is bool):
                break
        else:
            return True
    return literal_key(notes) is not None


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
            GraphChecker(target, report).run(warnings)
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
        if not isinstance(ws.path, str) or not printable_str(ws.path):
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
        GraphChecker(graph, report).run(warnings)
