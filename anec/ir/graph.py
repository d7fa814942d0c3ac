"""The in-memory IR: SSA values, nodes, graphs (funcs) and modules (files).

A :class:`Graph` is one func: named inputs, an ordered list of nodes kept in
topological order (every operand is defined before its use), and the returned
values. Output *names* are the program interface: passes may replace the value
that is returned, but :meth:`Graph.replace_all_uses` keeps the returned name.

Nodes hold operands positionally (``operands``) plus optional operands passed
by keyword (``optional``, e.g. conv1x1 ``bias=``), python-literal attributes
(``attrs``) and free-form ``annotations`` written by analysis passes (printed
as ``@{key=value}`` after the type).
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from anec.diagnostics import Source, Span
from anec.ir.types import TensorType

_renames = [0]
"""How many times an existing Value was renamed, process-wide. A Graph's name
cache (see :meth:`Graph.fresh_name`) is valid only while this is unchanged,
or when the Graph made the rename itself (:meth:`Graph.rename_value`)."""


@dataclass(eq=False)
class Value:
    """An SSA value: a func input or one result of a node."""

    name: str
    """Name without the ``%`` sigil; unique within its func."""
    type: TensorType
    """Static type."""
    producer: "Node | None" = None
    """The node defining this value, or None for a func input."""
    index: int = 0
    """Result index within the producer."""
    uses: list["Node"] = field(default_factory=list)
    """Nodes using this value, once per operand slot (a multiset)."""
    span: Span | None = None
    """Where the value is defined in the source text."""

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


def _get_name(self: Value) -> str:
    return self._name


def _set_name(self: Value, name: str) -> None:
    if "_name" in self.__dict__:
        _renames[0] += 1
    self.__dict__["_name"] = name


# ``name`` is a plain dataclass field for construction and copying, read and
# written through a property so that renames done outside the Graph's methods
# (``v.name = ...``) invalidate the Graph's name cache.
Value.name = property(_get_name, _set_name, doc="Name without the ``%`` sigil; unique within its func.")  # type: ignore[assignment]


@dataclass(eq=False)
class Node:
    """One op application."""

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
        return self.operands + [self.optional[k] for k in sorted(self.optional)]

    def __repr__(self) -> str:
        res = ", ".join(f"%{r.name}" for r in self.results)
        args = ", ".join(f"%{v.name}" for v in self.operands)
        return f"<{res} = {self.op}({args})>"


class Graph:
    """A func: inputs, topologically ordered nodes, returned values.

    ``inputs``, ``nodes`` and ``outputs`` are plain lists that passes may edit
    directly. The mutation methods below additionally keep two caches, so that
    rewriting a large graph stays linear: the multiset of value names (for
    :meth:`fresh_name`) and the set of node ids (for :meth:`has_node`). Each
    cache remembers the lists it was built from (identity and length) and the
    process-wide rename count; a direct edit that changes any of these makes
    the next query rebuild it, so direct edits stay correct, only slower.
    """

    def __init__(self, name: str, span: Span | None = None) -> None:
        self.name = name
        self.span = span
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self.return_span: Span | None = None
        self.meta: dict[str, Any] = {}
        """Facts passes hand to later stages, not printed (e.g. chunked outputs)."""
        self._counter = itertools.count()
        self._names: Counter[str] | None = None
        self._node_ids: set[int] | None = None
        self._cache_key: tuple | None = None
        self._pos_hint = 0

    def __getstate__(self) -> dict[str, Any]:
        """Copies and pickles start without caches (they describe this object's lists)."""
        state = self.__dict__.copy()
        state.update(_names=None, _node_ids=None, _cache_key=None, _pos_hint=0)
        return state

    # ---- caches -------------------------------------------------------------
    def _key(self) -> tuple:
        # the objects themselves, not their ids: the key keeps them alive, so an id can
        # never be reused by a new list; the last node catches a direct remove + append
        nodes, inputs = self.nodes, self.inputs
        return (nodes, len(nodes), nodes[-1] if nodes else None, inputs, len(inputs),
                _renames[0])

    def _current(self) -> bool:
        """Whether the caches describe the graph (lists compared by identity)."""
        key = self._cache_key
        if key is None:
            return False
        nodes, inputs = self.nodes, self.inputs
        return (key[0] is nodes and key[1] == len(nodes)
                and key[2] is (nodes[-1] if nodes else None) and key[3] is inputs
                and key[4] == len(inputs) and key[5] == _renames[0])

    def _caches(self) -> tuple[Counter[str], set[int]]:
        """The name multiset and node-id set, rebuilt if the graph changed behind our back."""
        if not self._current() or self._names is None or self._node_ids is None:
            self._names = Counter(v.name for v in self.values())
            self._node_ids = {id(n) for n in self.nodes}
            self._cache_key = self._key()
        return self._names, self._node_ids

    def _valid_caches(self) -> tuple[Counter[str], set[int]] | None:
        """The caches if they are up to date (before a mutation), else None."""
        if self._current() and self._names is not None:
            return self._names, self._node_ids  # type: ignore[return-value]
        return None

    def _commit(self, caches: tuple | None) -> None:
        """After a mutation applied to ``caches`` as well: mark them current again."""
        if caches is not None:
            self._cache_key = self._key()

    # ---- construction -------------------------------------------------
    def add_input(self, name: str, type: TensorType, span: Span | None = None) -> Value:
        caches = self._valid_caches()
        v = Value(name, type, None, 0, [], span)
        self.inputs.append(v)
        if caches is not None:
            caches[0][name] += 1
        self._commit(caches)
        return v

    def add_node(self, node: Node, index: int | None = None) -> Node:
        """Insert ``node`` (at ``index``, default: the end) and record its uses."""
        caches = self._valid_caches()
        for v in node.inputs():
            v.uses.append(node)
        for i, r in enumerate(node.results):
            r.producer, r.index = node, i
        if index is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(index, node)
            self._pos_hint = index + 1  # where the node we inserted before now is
        if caches is not None:
            names, ids = caches
            for r in node.results:
                names[r.name] += 1
            ids.add(id(node))
        self._commit(caches)
        return node

    def create_node(
        self,
        op: str,
        operands: list[Value],
        attrs: dict[str, Any],
        result_types: list[TensorType],
        names: list[str] | None = None,
        optional: dict[str, Value] | None = None,
        span: Span | None = None,
        before: Node | None = None,
    ) -> Node:
        """Build and insert a node; ``before`` keeps topological order for rewrites."""
        if names is None:
            names = []
            for _ in result_types:
                names.append(self.fresh_name(op, exclude=names))
        results = [Value(n, t, None, 0, [], span) for n, t in zip(names, result_types)]
        node = Node(op, list(operands), dict(attrs), results, dict(optional or {}), span)
        index = self._position(before) if before is not None else None
        return self.add_node(node, index)

    def _position(self, node: Node) -> int:
        """``self.nodes.index(node)``, searching first from the last insertion point.

        Rewrites insert before the node being rewritten and walk the list
        forward, so the next anchor is usually at or just after that point.
        """
        nodes, hint = self.nodes, self._pos_hint
        if hint < len(nodes) and nodes[hint] is node:
            return hint
        try:
            return nodes.index(node, min(hint, len(nodes)))
        except ValueError:
            return nodes.index(node)

    def fresh_name(self, hint: str = "v", exclude: "Iterable[str]" = ()) -> str:
        """A value name not used in this graph (nor in ``exclude``), derived from ``hint``."""
        names, _ = self._caches()
        excluded = set(exclude)
        base = hint.lstrip("%") or "v"
        if base not in names and base not in excluded:
            return base
        while True:
            cand = f"{base}_{next(self._counter)}"
            if cand not in names and cand not in excluded:
                return cand

    # ---- queries --------------------------------------------------------
    def values(self) -> Iterator[Value]:
        yield from self.inputs
        for n in self.nodes:
            yield from n.results

    def value_names(self) -> set[str]:
        return set(self._caches()[0])

    def has_value_name(self, name: str) -> bool:
        """Whether some input or node result of this graph is called ``name``."""
        return self._caches()[0][name] > 0

    def has_node(self, node: Node) -> bool:
        """Whether ``node`` is in ``self.nodes`` (constant time, unlike ``in``)."""
        return id(node) in self._caches()[1]

    def value(self, name: str) -> Value:
        for v in self.values():
            if v.name == name:
                return v
        raise KeyError(name)

    def output_names(self) -> list[str]:
        return [v.name for v in self.outputs]

    # ---- mutation -------------------------------------------------------
    def rename_value(self, value: Value, name: str) -> None:
        """Rename ``value`` (an input or node result of this graph) to ``name``."""
        caches = self._valid_caches()
        old = value.name
        value.name = name
        if caches is not None:
            names = caches[0]
            names[old] -= 1
            if names[old] <= 0:
                del names[old]
            names[name] += 1
        self._commit(caches)

    def set_operand(self, node: Node, index: int, new: Value) -> None:
        old = node.operands[index]
        old.uses.remove(node)
        node.operands[index] = new
        new.uses.append(node)

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every use of ``old`` use ``new``; returned names never change.

        If ``old`` is returned, ``new`` takes over its name (``old`` is renamed
        to a fresh name); when ``new`` cannot be renamed (a func input or
        another returned value) an ``identity`` node carrying the name is added.
        """
        if old is new:
            return
        for user in list(old.uses):
            user.operands = [new if v is old else v for v in user.operands]
            user.optional = {k: (new if v is old else v) for k, v in user.optional.items()}
        new.uses.extend(old.uses)
        old.uses = []
        if old in self.outputs:
            keep = old.name
            self.rename_value(old, self.fresh_name(keep + "_old"))
            if new.producer is None or new in self.outputs:
                after = new.producer
                idx = self._position(after) + 1 if after is not None else 0
                # keep the identity after every node defining its operand
                node = Node("identity", [new], {}, [Value(keep, new.type, None, 0, [], old.span)],
                            {}, old.span)
                self.add_node(node, idx)
                new = node.results[0]
            else:
                self.rename_value(new, keep)
            self.outputs = [new if v is old else v for v in self.outputs]

    def erase_node(self, node: Node, safe: bool = True) -> None:
        """Remove ``node``; with ``safe`` it must have no used or returned results."""
        if safe:
            self._check_erasable(node)
        caches = self._valid_caches()
        for v in node.inputs():
            if node in v.uses:
                v.uses.remove(node)
        index = self._position(node)
        del self.nodes[index]
        self._pos_hint = index  # the node that followed the erased one is there now
        if caches is not None:
            self._forget(caches, node)
        self._commit(caches)

    def erase_nodes(self, nodes: "Iterable[Node]", safe: bool = True) -> None:
        """Remove several nodes at once, in time linear in the graph size.

        With ``safe``, no result of an erased node may be returned or used by
        a node that stays.
        """
        doomed = {id(n): n for n in nodes}
        if not doomed:
            return
        if safe:
            for n in doomed.values():
                for r in n.results:
                    if r in self.outputs or any(id(u) not in doomed for u in r.uses):
                        raise ValueError(f"cannot erase {n!r}: %{r.name} is still used")
        caches = self._valid_caches()
        touched: dict[int, Value] = {}
        for n in doomed.values():
            for v in n.inputs():
                touched[id(v)] = v
        for v in touched.values():
            v.uses = [u for u in v.uses if id(u) not in doomed]
        self.nodes[:] = [n for n in self.nodes if id(n) not in doomed]
        self._pos_hint = 0
        if caches is not None:
            for n in doomed.values():
                self._forget(caches, n)
        self._commit(caches)

    def _check_erasable(self, node: Node) -> None:
        for r in node.results:
            if r.uses or r in self.outputs:
                raise ValueError(f"cannot erase {node!r}: %{r.name} is still used")

    @staticmethod
    def _forget(caches: tuple[Counter[str], set[int]], node: Node) -> None:
        names, ids = caches
        ids.discard(id(node))
        for r in node.results:
            names[r.name] -= 1
            if names[r.name] <= 0:
                del names[r.name]

    def rebuild_uses(self) -> None:
        """Recompute every ``uses`` list from scratch (after bulk edits)."""
        for v in self.values():
            v.uses = []
        for n in self.nodes:
            for v in n.inputs():
                v.uses.append(n)

    def clone(self) -> "Graph":
        """A structural copy whose nodes and values can be rewritten freely.

        Iterative (one pass over the nodes), unlike ``copy.deepcopy``, which
        recurses through use lists and exhausts the stack on long chains.
        Spans are shared; attrs, annotations and meta are copied.
        """
        g = Graph(self.name, self.span)
        vmap: dict[int, Value] = {}
        for v in self.inputs:
            vmap[id(v)] = g.add_input(v.name, v.type, v.span)
        for n in self.nodes:
            results = [Value(r.name, r.type, None, 0, [], r.span) for r in n.results]
            g.add_node(Node(n.op, [vmap[id(v)] for v in n.operands], copy.deepcopy(n.attrs),
                            results, {k: vmap[id(v)] for k, v in n.optional.items()}, n.span,
                            copy.deepcopy(n.annotations)))
            for old, new in zip(n.results, results):
                vmap[id(old)] = new
        g.outputs = [vmap[id(v)] for v in self.outputs]
        g.return_span = self.return_span
        g.meta = copy.deepcopy(self.meta)
        return g

    # ---- comparison -----------------------------------------------------
    def structure(self) -> tuple:
        """A hashable description of everything but source spans."""
        return (
            self.name,
            tuple((v.name, v.type) for v in self.inputs),
            tuple(
                (
                    n.op,
                    tuple(v.name for v in n.operands),
                    tuple(sorted((k, v.name) for k, v in n.optional.items())),
                    _freeze(n.attrs),
                    tuple((r.name, r.type) for r in n.results),
                    _freeze(n.annotations),
                )
                for n in self.nodes
            ),
            tuple(v.name for v in self.outputs),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.structure() == other.structure()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes>"


def _freeze(obj: Any) -> Any:
    if isinstance(obj, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return tuple(_freeze(v) for v in obj)
    if isinstance(obj, bool):
        return ("bool", obj)
    if isinstance(obj, float):
        return ("float", obj)
    return obj


@dataclass(eq=False)
class WeightSource:
    """A ``weights "file"`` directive."""

    path: str
    """The path as written (relative paths resolve against the .ir file)."""
    span: Span | None = None


class Module:
    """A file: weight sources and one or more funcs (one ANE program each)."""

    def __init__(self, source: Source | None = None, path: str | None = None) -> None:
        self.funcs: dict[str, Graph] = {}
        self.weight_sources: list[WeightSource] = []
        self.source = source
        self.path = path
        """File system path the module was read from (for relative weight paths)."""

    def add_func(self, graph: Graph) -> Graph:
        self.funcs[graph.name] = graph
        return graph

    def func(self, name: str | None = None) -> Graph:
        """The func called ``name``; without a name, the only func."""
        if name is None:
            if len(self.funcs) != 1:
                raise KeyError("module has several funcs; pass a name")
            return next(iter(self.funcs.values()))
        return self.funcs[name]

    def structure(self) -> tuple:
        return (
            tuple(w.path for w in self.weight_sources),
            tuple(g.structure() for g in self.funcs.values()),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Module) and self.structure() == other.structure()

    __hash__ = None  # type: ignore[assignment]

    def clone(self) -> "Module":
        m = Module(self.source, self.path)
        m.weight_sources = list(self.weight_sources)
        for g in self.funcs.values():
            m.add_func(g.clone())
        return m

    def __repr__(self) -> str:
        return f"<Module {list(self.funcs)}>"
