"""The in-memory IR: SSA values, nodes, graphs (funcs) and modules (files).

A :class:`Graph` is one func: named inputs, an ordered list of nodes kept in
topological order (every operand is defined before its use), and the returned
values. Output *names* are the program interface: passes may replace the value
that is returned, but :meth:`Graph.replace_all_uses` keeps the returned name.

Nodes hold operands positionally (``operands``) plus optional operands passed
by keyword (``optional``, e.g. conv1x1 ``bias=``), python-literal attributes
(``attrs``) and free-form ``annotations`` written by analysis passes (printed
as ``@{key=value}`` after the type).

This module holds :class:`Graph`, its read-only :class:`NodeList` view, :class:`Module` and
:class:`WeightSource`; values, nodes and the change log are :mod:`anec.ir.nodes`'.
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence, overload

from anec.diagnostics import Source, Span
from anec.ir.func_facts import FuncFacts
from anec.ir.nodes import Changes, Node, Value
from anec.ir.types import TensorType

__all__ = ["Graph", "Module", "Node", "NodeList", "Value", "WeightSource"]


class NodeList(Sequence[Node]):
    """A read-only view of a graph's node list (no copy; edits go through the Graph)."""

    __slots__ = ("_list", "_graph")

    def __init__(self, nodes: list[Node], graph: "Graph | None" = None) -> None:
        self._list = nodes
        self._graph = graph

    @property
    def _nodes(self) -> list[Node]:
        g = self._graph
        if g is not None and g._pending:
            g._settle()
        return self._list

    @overload
    def __getitem__(self, i: int) -> Node: ...

    @overload
    def __getitem__(self, i: slice) -> list[Node]: ...

    def __getitem__(self, i: int | slice) -> Node | list[Node]:
        return self._nodes[i]

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self._nodes)

    def __reversed__(self) -> Iterator[Node]:
        return reversed(self._nodes)

    def __contains__(self, node: object) -> bool:
        return any(n is node for n in self._nodes)

    def index(self, node: Node, start: int = 0, stop: int | None = None) -> int:
        nodes = self._nodes
        return nodes.index(node, start, len(nodes) if stop is None else stop)

    def __repr__(self) -> str:
        return repr(self._nodes)


class Graph:
    """A func: inputs, topologically ordered nodes, returned values.

    ``inputs``, ``nodes`` and ``outputs`` are read-only views; every change
    goes through the methods below, which keep the use lists, the index of
    value names (for :meth:`fresh_name` and :meth:`has_value_name`) and the
    set of nodes (for :meth:`has_node`) right in constant time per change.
    """

    def __init__(self, name: str, span: Span | None = None) -> None:
        self.name = name
        self.span = span
        self._inputs: list[Value] = []
        self._nodes: list[Node] = []
        self._outputs: tuple[Value, ...] = ()
        self.return_span: Span | None = None
        self.facts = FuncFacts()
        """Typed facts passes hand to later stages, not printed (the partition plan, logical
        I/O, host casts, weights compiled as inputs, the SRAM summary)."""
        self.meta: dict[str, Any] = {}
        """Free-form notes a front end keeps on the func, not printed (autodiff's weight shapes)."""
        self._counter = itertools.count()
        self._names: Counter[str] = Counter()
        self._node_ids: set[int] = set()
        # Inserting into or deleting from the middle of a Python list moves its tail: a rewrite
        # of every node of a 100k-node graph would be quadratic. Insertions before or after a
        # node and erasures are therefore recorded here and applied in one linear pass
        # (_settle) the next time the order is read.
        self._pending = False
        self._before: dict[int, list[Node]] = {}
        self._after: dict[int, list[Node]] = {}
        self._front: list[Node] = []
        self._dead: dict[int, Node] = {}  # erased, still in _nodes (kept alive: ids stay unique)
        self._changes: Changes | None = None

    def __getstate__(self) -> dict[str, Any]:
        self._settle()
        state = self.__dict__.copy()
        state["_node_ids"] = None  # ids do not survive a copy or a pickle
        state["_changes"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._node_ids = {id(n) for n in self._nodes}
        self._pending, self._front, self._dead = False, [], {}
        self._before, self._after, self._changes = {}, {}, None

    # ---- views ----------------------------------------------------------
    @property
    def inputs(self) -> tuple[Value, ...]:
        """The func inputs, in signature order."""
        return tuple(self._inputs)

    @property
    def nodes(self) -> NodeList:
        """The nodes, in topological order (a read-only view)."""
        if self._pending:
            self._settle()
        return NodeList(self._nodes, self)

    def _settle(self) -> None:
        """Apply the recorded insertions and erasures to the node list, in one pass."""
        if not self._pending:
            return
        before, after, dead = self._before, self._after, self._dead
        out: list[Node] = []
        append = out.append

        def place(node: Node) -> None:
            # an explicit stack: a node inserted before a node that was itself inserted, ...
            stack: list[tuple[Node, bool]] = [(node, False)]
            while stack:
                node, expanded = stack.pop()
                key = id(node)
                if not expanded:
                    stack.append((node, True))
                    stack += [(n, False) for n in reversed(before.pop(key, ()))]
                    continue
                if key not in dead:
                    append(node)
                # each went right after ``node``: the last one first
                stack += [(n, False) for n in after.pop(key, ())]

        for node in reversed(self._front):  # each went to index 0: the last one first
            place(node)
        for node in self._nodes:
            key = id(node)
            if key not in before and key not in after:
                if key not in dead:
                    append(node)
                continue  # (an erased node with nothing inserted next to it: dropped)
            inserted = before.get(key)
            if inserted is not None and key not in after:
                for n in inserted:
                    k = id(n)
                    if k in before or k in after or k in dead:
                        break
                else:
                    # the common cases (new nodes inserted before a node, none of them with
                    # insertions of its own or erased; the node itself kept, or erased as a
                    # rewrite erases the node it replaced): what place() does, without its stack
                    del before[key]
                    out += inserted
                    if key not in dead:
                        append(node)
                    continue
            place(node)
        self._nodes[:] = out  # in place: NodeList views hold this list
        self._front = []
        self._dead = {}
        self._before.clear()
        self._after.clear()
        self._pending = False

    # ---- change tracking ------------------------------------------------
    def track_changes(self) -> Changes:
        """Start a new log of what the graph methods change (replacing any previous one)."""
        self._changes = Changes()
        return self._changes

    def stop_tracking(self) -> None:
        self._changes = None

    @property
    def changes(self) -> Changes | None:
        """The log being kept (None when no one tracks this graph)."""
        return self._changes

    @property
    def outputs(self) -> tuple[Value, ...]:
        """The returned values, in return order (the program interface)."""
        return self._outputs

    # ---- construction -------------------------------------------------
    def add_input(self, name: str, type: TensorType, span: Span | None = None) -> Value:
        v = Value(name, type, None, 0, [], span)
        self._inputs.append(v)
        self._names[name] += 1
        return v

    def reorder_inputs(self, order: Sequence[Value]) -> None:
        """Put the func inputs in ``order`` (the same inputs, another signature order)."""
        if len(order) != len(self._inputs) or {id(v) for v in order} != {id(v) for v in self._inputs}:
            raise ValueError("reorder_inputs takes every input of the func exactly once")
        self._inputs[:] = list(order)

    def set_input_type(self, value: Value, type: TensorType) -> None:
        """Change the declared type of the func input ``value`` (its uses are the caller's business)."""
        if value.producer is not None:
            raise ValueError(f"%{value.name} is not a func input")
        value.type = type
        if self._changes is not None:
            self._changes.values[id(value)] = value
            for user in value.uses:  # their types are inferred again
                self._rewired(user)

    def add_node(self, node: Node, index: int | None = None) -> Node:
        """Insert ``node`` (at ``index``, default: the end) and record its uses."""
        if index is not None or id(node) in self._dead:
            self._settle()
        self._link(node)
        if index is None:
            self._nodes.append(node)
        else:
            self._nodes.insert(index, node)
        return node

    def _link(self, node: Node) -> None:
        for v in node.operands if not node.optional else node.inputs():
            v.uses.append(node)
        names = self._names
        for i, r in enumerate(node.results):
            r.producer, r.index = node, i
            names[r._name] = names.get(r._name, 0) + 1  # (Counter's += calls __missing__)
        self._node_ids.add(id(node))
        if self._changes is not None:
            self._rewired(node)

    def _rewired(self, node: Node, same_types: bool = False) -> None:
        """Log ``node`` as added or as reading other operands. ``same_types``: each operand it
        now reads has the type of the one it replaced, so a node the log had not listed (valid
        when the log began) is listed as :attr:`Changes.typed`; a listed node keeps what it was."""
        changes = self._changes
        assert changes is not None  # called only while changes are logged
        key = id(node)
        if not same_types:
            changes.typed.discard(key)
        elif key not in changes.nodes:
            changes.typed.add(key)
        changes.nodes[key] = node

    def _insert_next_to(self, node: Node, anchor: Node | None, after: bool) -> None:
        """Put ``node`` right before (or after) ``anchor`` (None: at the front), deferred."""
        if id(node) in self._dead:
            self._settle()
        if anchor is not None and id(anchor) not in self._node_ids:
            raise ValueError(f"{anchor!r} is not in graph '{self.name}'")
        self._link(node)
        if anchor is None:
            self._front.append(node)
        else:
            (self._after if after else self._before).setdefault(id(anchor), []).append(node)
        self._pending = True

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
        inferred: bool = False,
    ) -> Node:
        """Build and insert a node; ``before`` keeps topological order for rewrites.

        ``inferred`` says that ``result_types`` are what the op table infers for these
        operands and attributes (the caller just inferred them, with attributes that are plain
        IR literals): the change log then spares the verifier inferring them again
        (:attr:`Changes.typed`).
        """
        if names is None:
            names = []
            for _ in result_types:
                names.append(self.fresh_name(op, exclude=names))
        if len(result_types) == 1 and len(names) == 1:  # (most nodes: no comprehension's frame)
            results = [Value(names[0], result_types[0], None, 0, [], span)]
        else:
            results = [Value(n, t, None, 0, [], span) for n, t in zip(names, result_types)]
        node = Node(op, list(operands), dict(attrs), results, dict(optional) if optional else {},
                    span, {})
        if before is None:
            self.add_node(node)
        elif optional or len(results) != 1:
            self._insert_next_to(node, before, after=False)
        else:
            # what _insert_next_to and _link do, inlined for the common case (one result, no
            # optional operand): the rewriter builds most of a large pipeline's nodes this way
            key = id(before)
            if key not in self._node_ids:
                raise ValueError(f"{before!r} is not in graph '{self.name}'")
            for v in node.operands:
                v.uses.append(node)
            r = results[0]
            r.producer = node
            counts = self._names
            counts[r._name] = counts.get(r._name, 0) + 1
            nid = id(node)
            self._node_ids.add(nid)
            pending = self._before.get(key)
            if pending is None:
                self._before[key] = [node]
            else:
                pending.append(node)
            self._pending = True
            changes = self._changes
            if changes is not None:
                changes.nodes[nid] = node
                if inferred:
                    changes.typed.add(nid)
                else:
                    changes.typed.discard(nid)
            return node
        if inferred and self._changes is not None:
            self._changes.typed.add(id(node))
        return node

    def fresh_name(self, hint: str = "v", exclude: "Iterable[str]" = ()) -> str:
        """A value name not used in this graph (nor in ``exclude``), derived from ``hint``."""
        names = self._names
        excluded = set(exclude) if exclude else ()
        base = hint.lstrip("%") or "v"
        if base not in names and base not in excluded:
            return base
        while True:
            cand = f"{base}_{next(self._counter)}"
            if cand not in names and cand not in excluded:
                return cand

    # ---- queries --------------------------------------------------------
    def values(self) -> Iterator[Value]:
        yield from self._inputs
        self._settle()
        for n in self._nodes:
            yield from n.results

    def value_names(self) -> set[str]:
        return set(self._names)

    def has_value_name(self, name: str) -> bool:
        """Whether some input or node result of this graph is called ``name``."""
        return self._names[name] > 0

    def has_node(self, node: Node) -> bool:
        """Whether ``node`` is in ``self.nodes`` (constant time, unlike ``in``)."""
        return id(node) in self._node_ids

    def value(self, name: str) -> Value:
        for v in self.values():
            if v.name == name:
                return v
        raise KeyError(name)

    def output_names(self) -> list[str]:
        return [v.name for v in self._outputs]

    # ---- mutation -------------------------------------------------------
    def set_outputs(self, values: Iterable[Value]) -> None:
        """Make ``values`` the returned values, in order."""
        self._outputs = tuple(values)

    def replace_output(self, old: Value, new: Sequence[Value]) -> None:
        """Return the values ``new`` where ``old`` was returned (one or several, in order)."""
        pos = self._outputs.index(old)
        self._outputs = self._outputs[:pos] + tuple(new) + self._outputs[pos + 1:]

    def rename_value(self, value: Value, name: str) -> None:
        """Rename ``value`` (an input or node result of this graph) to ``name``."""
        names = self._names
        old = value._name
        names[old] -= 1
        if names[old] <= 0:
            del names[old]
        value._name = name
        names[name] += 1
        if self._changes is not None:
            self._changes.values[id(value)] = value

    def annotate(self, node: Node, values: dict[str, Any] | None = None,
                 drop: Iterable[str] = ()) -> None:
        """Remove the annotations ``drop`` of ``node``, then set ``values``."""
        notes = node.annotations
        for k in drop:
            notes.pop(k, None)
        if values:
            notes.update(values)
            if self._changes is not None:
                self._changes.annotated[id(node)] = node

    def annotate_all(self, items: Iterable[tuple[Node, dict[str, Any]]],
                     drop: Sequence[str] = ()) -> None:
        """:meth:`annotate` for many nodes: ``annotate(node, values, drop)`` for each
        ``(node, values)`` (an analysis refreshing every node's annotations at once)."""
        annotated = self._changes.annotated if self._changes is not None else None
        dropped = frozenset(drop)
        for node, values in items:
            notes = node.annotations
            if notes:
                if notes.keys() <= dropped:  # (an analysis refreshing its own notes)
                    notes.clear()
                else:
                    for k in drop:
                        notes.pop(k, None)
            if values:
                notes.update(values)
                if annotated is not None:
                    annotated[id(node)] = node

    def set_operand(self, node: Node, index: int, new: Value) -> None:
        """Make positional operand ``index`` of ``node`` read ``new``."""
        old = node.operands[index]
        old.uses.remove(node)
        node.operands[index] = new
        new.uses.append(node)
        if self._changes is not None:
            self._rewired(node, same_types=new.type == old.type)

    def replace_uses(self, old: Value, new: Value, users: Iterable[Node]) -> None:
        """Make the nodes ``users`` read ``new`` wherever they read ``old`` (returned values stay)."""
        if old is new:
            return
        for user in dict.fromkeys(users):
            n = sum(v is old for v in user.inputs())
            if not n:
                continue
            user.operands = [new if v is old else v for v in user.operands]
            user.optional = {k: (new if v is old else v) for k, v in user.optional.items()}
            old.uses = [u for u in old.uses if u is not user]
            new.uses.extend([user] * n)
            if self._changes is not None:
                self._rewired(user, same_types=new.type == old.type)

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Make every use of ``old`` use ``new``; returned names never change.

        If ``old`` is returned, ``new`` takes over its name (``old`` is renamed
        to a fresh name); when ``new`` cannot be renamed (a func input or
        another returned value) an ``identity`` node carrying the name is added.
        """
        if old is new:
            return
        tracking = self._changes is not None
        same_types = tracking and new.type == old.type
        for user in list(old.uses):
            user.operands = [new if v is old else v for v in user.operands]
            user.optional = {k: (new if v is old else v) for k, v in user.optional.items()}
            if tracking:
                self._rewired(user, same_types)
        new.uses.extend(old.uses)
        old.uses = []
        if old in self._outputs:
            keep = old.name
            self.rename_value(old, self.fresh_name(keep + "_old"))
            if new.producer is None or new in self._outputs:
                # keep the identity after every node defining its operand
                node = Node("identity", [new], {}, [Value(keep, new.type, None, 0, [], old.span)],
                            {}, old.span)
                self._insert_next_to(node, new.producer, after=True)
                new = node.results[0]
            else:
                self.rename_value(new, keep)
            self._outputs = tuple(new if v is old else v for v in self._outputs)

    def erase_node(self, node: Node, safe: bool = True) -> None:
        """Remove ``node``; with ``safe`` it must have no used or returned results."""
        if safe:
            self._check_erasable(node)
        if id(node) not in self._node_ids:
            raise ValueError(f"{node!r} is not in graph '{self.name}'")
        for v in node.operands if not node.optional else node.inputs():
            if node in v.uses:
                v.uses.remove(node)
        self._dead[id(node)] = node  # taken out of the list by _settle
        self._pending = True
        self._forget(node)

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
                    if r in self._outputs or any(id(u) not in doomed for u in r.uses):
                        raise ValueError(f"cannot erase {n!r}: %{r.name} is still used")
        touched: dict[int, Value] = {}
        for n in doomed.values():
            for v in n.inputs():
                touched[id(v)] = v
        for v in touched.values():
            v.uses = [u for u in v.uses if id(u) not in doomed]
        self._settle()
        self._nodes[:] = [n for n in self._nodes if id(n) not in doomed]
        for n in doomed.values():
            self._forget(n)

    def _check_erasable(self, node: Node) -> None:
        for r in node.results:
            if r.uses or r in self._outputs:
                raise ValueError(f"cannot erase {node!r}: %{r.name} is still used")

    def _forget(self, node: Node) -> None:
        names = self._names
        self._node_ids.discard(id(node))
        if self._changes is not None:
            self._changes.removed[id(node)] = node
            self._changes.nodes.pop(id(node), None)
            self._changes.typed.discard(id(node))
        for r in node.results:
            name = r._name
            left = names.get(name, 0) - 1
            if left > 0:
                names[name] = left
            else:
                names.pop(name, None)

    def rebuild_uses(self) -> None:
        """Recompute every ``uses`` list from the operands (repairs a graph edited behind its back)."""
        for v in self.values():
            v.uses = []
        for n in self._nodes:
            for v in n.inputs():
                v.uses.append(n)
        if self._changes is not None:
            self._changes.everything = True

    def clone(self) -> "Graph":
        """A structural copy whose nodes and values can be rewritten freely.

        Iterative (one pass over the nodes), unlike ``copy.deepcopy``, which
        recurses through use lists and exhausts the stack on long chains.
        Spans are shared; attrs, annotations and meta are copied.
        """
        g = Graph(self.name, self.span)
        vmap: dict[int, Value] = {}
        for v in self._inputs:
            vmap[id(v)] = g.add_input(v.name, v.type, v.span)
        self._settle()
        for n in self._nodes:
            results = [Value(r.name, r.type, None, 0, [], r.span) for r in n.results]
            g.add_node(Node(n.op, [vmap[id(v)] for v in n.operands], copy.deepcopy(n.attrs),
                            results, {k: vmap[id(v)] for k, v in n.optional.items()}, n.span,
                            copy.deepcopy(n.annotations)))
            for old, new in zip(n.results, results):
                vmap[id(old)] = new
        g.set_outputs(vmap[id(v)] for v in self._outputs)
        g.return_span = self.return_span
        g.facts = self.facts.copy()
        g.meta = copy.deepcopy(self.meta)
        return g

    # ---- comparison -----------------------------------------------------
    def structure(self) -> tuple[Any, ...]:
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

    def structure(self) -> tuple[Any, ...]:
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
