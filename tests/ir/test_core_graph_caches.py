"""Graph's name index and node set: the answers equal a full scan, whatever edits happened.

``fresh_name``, ``value_names``, ``has_value_name`` and ``has_node`` answer
from an index the Graph methods keep, so rewriting a large graph stays
linear. Every edit goes through those methods (the lists are read-only
views, a value's name is read-only): these tests make many edits and compare
every answer with a recomputation.
"""

from __future__ import annotations

import random

import pytest

from anec.ir.graph import Graph, Node, Value
from anec.ir.types import DType, TensorType

T = TensorType(DType.fp16, (1, 4, 1, 2))


def _chain(n: int) -> Graph:
    g = Graph("f")
    v = g.add_input("x", T)
    for _ in range(n):
        v = g.create_node("relu", [v], {}, [T]).results[0]
    g.set_outputs([v])
    return g


def _scan_names(g: Graph) -> set[str]:
    return {v.name for v in g.values()}


def _consistent(g: Graph) -> None:
    assert g.value_names() == _scan_names(g)
    for name in _scan_names(g):
        assert g.has_value_name(name)
    assert not g.has_value_name("no_such_value")
    for n in g.nodes:
        assert g.has_node(n)
    fresh = g.fresh_name("relu")
    assert fresh not in _scan_names(g)


def test_edits_only_through_the_graph():
    g = _chain(2)
    with pytest.raises(AttributeError):
        g.nodes.append(Node("relu", [g.inputs[0]], {}, [Value("direct", T)]))  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        g.outputs = []  # type: ignore[misc]
    with pytest.raises(AttributeError):
        g.inputs.append(Value("late", T))  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        g.nodes[0].results[0].name = "renamed"  # type: ignore[misc]
    g.add_input("late", T)
    assert g.fresh_name("late") != "late"
    _consistent(g)


def test_rename_value_and_replace_all_uses_keep_the_index_exact():
    g = _chain(4)
    a, b = g.nodes[1].results[0], g.nodes[2].results[0]
    old = a.name
    g.rename_value(a, "renamed")
    assert not g.has_value_name(old) and g.has_value_name("renamed")
    out = g.outputs[0]
    keep = out.name
    g.replace_all_uses(out, b)  # b takes over the returned name
    assert g.outputs[0] is b and b.name == keep
    _consistent(g)


def test_replace_uses_of_some_users_and_outputs():
    g = _chain(3)
    x = g.inputs[0]
    first = g.nodes[0]
    y = g.create_node("identity", [x], {}, [T], names=["y"], before=first).result
    g.replace_uses(x, y, [first])
    assert first.operands == [y] and first in y.uses and first not in x.uses
    assert x.uses == [y.producer]
    last = g.outputs[0]
    extra = g.create_node("relu", [last], {}, [T], names=["extra"]).result
    g.replace_output(last, [last, extra])
    assert g.output_names() == [last.name, "extra"]
    g.set_outputs([extra])
    assert g.outputs == (extra,)
    _consistent(g)


def test_erase_node_and_erase_nodes():
    g = _chain(5)
    names_before = _scan_names(g)
    last = g.nodes[-1]
    g.set_outputs([g.nodes[-2].results[0]])
    g.erase_node(last)
    assert not g.has_node(last) and last.results[0].name not in g.value_names()
    assert g.nodes[-1].results[0].uses == []
    with pytest.raises(ValueError, match="still used"):
        g.erase_nodes([g.nodes[0]])
    # erase a used node together with its only user: allowed in one batch
    g.set_outputs([g.nodes[0].results[0]])
    doomed = list(g.nodes)[1:]
    g.erase_nodes(doomed)
    assert len(g.nodes) == 1 and g.nodes[0].results[0].uses == []
    assert g.value_names() == {"x", g.nodes[0].results[0].name}
    assert g.value_names() < names_before
    _consistent(g)
    with pytest.raises(ValueError):
        g.erase_node(doomed[0], safe=False)  # not in the graph any more


def test_insertions_before_anchors_keep_order():
    g = _chain(6)
    order = list(g.nodes)
    # insert before every node walking forward (as the rewrite driver does), then backward
    for anchor in order + order[::-1]:
        new = g.create_node("identity", [g.inputs[0]], {}, [T], before=anchor)
        assert g.nodes.index(new) + 1 == g.nodes.index(anchor)
    assert [n for n in g.nodes if n.op == "relu"] == order
    _consistent(g)


def test_random_edit_sequences_match_a_full_scan():
    rng = random.Random(7)
    g = _chain(30)
    for step in range(400):
        kind = rng.randrange(6)
        values = list(g.values())
        if kind == 0:
            g.create_node("relu", [rng.choice(values)], {}, [T], before=rng.choice(g.nodes))
        elif kind == 1:
            g.create_node("relu", [rng.choice(values)], {}, [T], names=[g.fresh_name("r")])
        elif kind == 2:
            dead = [n for n in g.nodes if not n.results[0].uses and n.results[0] not in g.outputs]
            if dead:
                g.erase_node(rng.choice(dead))
        elif kind == 3:
            g.rename_value(rng.choice(values), g.fresh_name(f"n{step}"))
        elif kind == 4:
            live = [n for n in g.nodes if n.results[0].uses or n.results[0] in g.outputs]
            node = rng.choice(live) if live else None
            if node is not None and node.results[0] not in g.outputs:
                new = g.create_node("identity", [node.operands[0]], {}, [T], before=node).result
                g.replace_all_uses(node.results[0], new)
                g.erase_node(node)
        else:
            assert g.fresh_name("r") not in _scan_names(g)
        assert g.value_names() == _scan_names(g)
        assert all(g.has_node(n) for n in g.nodes)


def test_copies_have_their_own_index():
    import copy
    import pickle

    g = _chain(3)
    for other in (g.clone(), copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert all(other.has_node(n) for n in other.nodes)
        assert not any(other.has_node(n) for n in g.nodes)
        other.rename_value(other.nodes[0].results[0], "renamed")
        assert other.fresh_name("renamed") != "renamed"
        assert not g.has_value_name("renamed")
        _consistent(other)
    _consistent(g)
