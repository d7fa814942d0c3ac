"""Graph's name and node caches: the answers equal a full scan, whatever edits happened.

``fresh_name``, ``value_names``, ``has_value_name`` and ``has_node`` use caches
so rewriting a large graph stays linear; these tests edit graphs through the
methods and behind their back and compare every answer with a recomputation.
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
    g.outputs = [v]
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


def test_fresh_name_sees_direct_renames():
    g = _chain(3)
    assert g.fresh_name("relu") not in _scan_names(g)  # builds the cache
    g.nodes[1].results[0].name = "picked"  # behind the graph's back
    assert g.fresh_name("picked") != "picked"
    _consistent(g)


def test_fresh_name_sees_direct_list_edits():
    g = _chain(2)
    g.fresh_name("v")
    extra = Node("relu", [g.outputs[0]], {}, [Value("direct", T)])
    g.nodes.append(extra)  # not through add_node
    assert g.fresh_name("direct") != "direct"
    assert g.has_node(extra)
    g.nodes = [n for n in g.nodes if n is not extra]  # a new list object
    assert not g.has_node(extra)
    assert g.fresh_name("direct") == "direct"
    g.inputs.append(Value("late_input", T))
    assert g.fresh_name("late_input") != "late_input"


def test_rename_value_and_replace_all_uses_keep_the_cache_exact():
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


def test_erase_node_and_erase_nodes():
    g = _chain(5)
    names_before = _scan_names(g)
    last = g.nodes[-1]
    g.outputs = [g.nodes[-2].results[0]]
    g.erase_node(last)
    assert not g.has_node(last) and last.results[0].name not in g.value_names()
    assert g.nodes[-1].results[0].uses == []
    with pytest.raises(ValueError, match="still used"):
        g.erase_nodes([g.nodes[0]])
    # erase a used node together with its only user: allowed in one batch
    g.outputs = [g.nodes[0].results[0]]
    doomed = g.nodes[1:]
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
            rng.choice(values).name = g.fresh_name(f"d{step}")  # direct rename
        else:
            assert g.fresh_name("r") not in _scan_names(g)
        assert g.value_names() == _scan_names(g)
        assert all(g.has_node(n) for n in g.nodes)


def test_direct_remove_then_append_is_noticed():
    g = _chain(3)
    g.fresh_name("v")  # cache built
    gone = g.nodes[-1]
    g.outputs = [g.nodes[-2].results[0]]
    g.nodes.remove(gone)  # same list, same length after the append below
    extra = Node("relu", [g.inputs[0]], {}, [Value("sneaky", T)])
    g.nodes.append(extra)
    assert g.fresh_name("sneaky") != "sneaky"
    assert g.has_node(extra) and not g.has_node(gone)


def test_copies_start_with_their_own_caches():
    import copy
    import pickle

    g = _chain(3)
    g.fresh_name("v")  # cache built on the original
    for other in (g.clone(), copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert all(other.has_node(n) for n in other.nodes)
        assert not any(other.has_node(n) for n in g.nodes)
        other.nodes[0].results[0].name = "renamed"
        assert other.fresh_name("renamed") != "renamed"
        _consistent(other)
    _consistent(g)
