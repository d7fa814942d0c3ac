"""Verifying only what a tracked pass changed: the same errors as a full verify, the pass named."""

from __future__ import annotations

import pickle
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar

import pytest

from anec.diagnostics import PassError, VerifyError
from anec.ir import verifier
from anec.ir.graph import Graph
from anec.ir.parser import parse
from anec.ir.types import DType, TensorType
from anec.ir.verifier import verify, verify_changes
from anec.passes import Pass, PassContext, run_pipeline
from anec.passes.pipelines import DEFAULT, OPTIMIZE, PIPELINES
from anec.passes.rewrite import Rewriter

from .passes_util import parse_func

TEXT = """
func f(%x: fp16[1, 8, 1, 8]) {
  %a = relu(%x) : fp16[1, 8, 1, 8]
  %b = sigmoid(%a) : fp16[1, 8, 1, 8]
  %c = mul(%a, %b) : fp16[1, 8, 1, 8]
  %y = tanh(%c) : fp16[1, 8, 1, 8]
  return %y
}"""

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.ir"))


def _node(graph: Graph, name: str):
    return next(n for n in graph.nodes if n.results and n.results[0].name == name)


# ---- broken passes that edit only through the graph methods -----------------------


def _bad_type(g: Graph) -> None:  # a node whose declared type inference contradicts
    c = _node(g, "c")
    g.create_node("relu", [c.result], {}, [TensorType(DType.fp16, (1, 8, 1, 4))], ["r"], before=c)


def _dangling(g: Graph) -> None:  # a used node erased: its users read an undefined value
    g.erase_node(_node(g, "b"), safe=False)


def _cycle(g: Graph) -> None:  # a node reading a value defined after it
    g.set_operand(_node(g, "a"), 0, _node(g, "c").result)


def _wrong_order(g: Graph) -> None:  # a new node inserted before the producer of its operand
    b = _node(g, "b")
    new = g.create_node("exp", [b.result], {}, [b.result.type], ["e"], before=b)
    g.replace_uses(_node(g, "c").result, new.result, [_node(g, "y")])


def _duplicate_name(g: Graph) -> None:
    g.rename_value(_node(g, "b").result, "a")


def _bad_input_type(g: Graph) -> None:  # the input retyped, its users not
    g.set_input_type(g.inputs[0], TensorType(DType.fp16, (1, 4, 1, 8)))


def _returns_erased(g: Graph) -> None:  # the returned value's node erased
    g.erase_node(_node(g, "y"), safe=False)


def _bad_attribute(g: Graph) -> None:  # a new node with an attribute the op does not take
    a = _node(g, "a")
    g.create_node("relu", [a.result], {"axis": 1}, [a.result.type], ["r"], before=_node(g, "y"))


def _moved(g: Graph) -> None:  # a node erased and added again at the end, after its users
    b = _node(g, "b")
    g.erase_node(b, safe=False)
    g.add_node(b)


def _rewired_after_rewrite(g: Graph) -> None:  # a node the rewriter typed, then rewired
    rw = Rewriter(g, PassContext.default(), "broken")
    rw.anchor = _node(g, "y")
    row = rw.op("reduce_sum", g.inputs[0], axes=[1], keep_dims=True)  # fp16[1, 1, 1, 8]
    e = rw.op("exp", _node(g, "c").result)  # fp16[1, 8, 1, 8], inferred
    g.set_operand(e.producer, 0, row)  # exp(%row) still declares fp16[1, 8, 1, 8]
    g.replace_uses(_node(g, "c").result, e, [_node(g, "y")])


def _input_retyped_under_rewrite(g: Graph) -> None:  # the input's only user typed by the rewriter
    rw = Rewriter(g, PassContext.default(), "broken")
    rw.anchor = _node(g, "a")
    x = g.inputs[0]
    e = rw.op("exp", x)
    g.replace_uses(x, e, [_node(g, "a")])
    g.set_input_type(x, TensorType(DType.fp16, (1, 4, 1, 8)))  # exp(%x) is now fp16[1, 4, 1, 8]


def _bad_bulk_annotation(g: Graph) -> None:  # annotations no IR text can spell, set in bulk
    g.annotate_all([(_node(g, "a"), {"in_bytes": 1}), (_node(g, "b"), {"in_bytes": object()})])


def _use_listed_twice(g: Graph) -> None:  # a rewired node listed twice among a few uses
    a, c = _node(g, "a"), _node(g, "c")
    g.set_operand(c, 0, a.result)  # recorded (reads %a once, as before)
    a.result.uses.append(c)  # %a's use list: [b, c, c]


def _typed_bad_dimension(g: Graph) -> None:  # a node built as inferred, with a 0 dimension
    a = _node(g, "a")
    g.create_node("relu", [a.result], {}, [TensorType(DType.fp16, (1, 0, 1, 8))], ["r"],
                  before=_node(g, "y"), inferred=True)


BREAKERS: dict[str, Callable[[Graph], None]] = {
    "bad-type": _bad_type, "dangling": _dangling, "cycle": _cycle, "wrong-order": _wrong_order,
    "duplicate-name": _duplicate_name, "bad-input-type": _bad_input_type,
    "returns-erased": _returns_erased, "bad-attribute": _bad_attribute, "moved": _moved,
    "rewired-after-rewrite": _rewired_after_rewrite,
    "input-retyped-under-rewrite": _input_retyped_under_rewrite,
    "bad-bulk-annotation": _bad_bulk_annotation, "use-listed-twice": _use_listed_twice,
    "typed-bad-dimension": _typed_bad_dimension,
}


def _tracked_pass(name: str, edit: Callable[[Graph], None]) -> Pass:
    @dataclass(frozen=True)
    class Broken(Pass):
        """A broken pass that edits through the graph methods.

        Before: a valid graph. After: an invalid one.
        """

        tracked: ClassVar[bool] = True

        def run(self, graph, ctx) -> None:
            edit(graph)

    Broken.name = name  # type: ignore[misc]
    return Broken()


@pytest.mark.parametrize("kind", sorted(BREAKERS))
def test_the_incremental_check_catches_a_broken_tracked_pass(kind):
    g = parse_func(TEXT)
    changes = g.track_changes()
    BREAKERS[kind](g)
    g.stop_tracking()
    assert not verifier._changes_ok(g, changes)  # caught by the incremental check itself
    with pytest.raises(VerifyError) as full:
        verify(g)
    with pytest.raises(VerifyError) as incremental:
        verify_changes(g, changes)
    assert incremental.value.render() == full.value.render()


@pytest.mark.parametrize("kind", sorted(BREAKERS))
def test_the_manager_names_the_broken_tracked_pass_as_a_full_verify_does(kind):
    reference = parse_func(TEXT)
    BREAKERS[kind](reference)
    with pytest.raises(VerifyError) as full:
        verify(reference)
    ctx = PassContext.default()
    with pytest.raises(PassError) as info:
        run_pipeline(parse_func(TEXT), (_tracked_pass(f"broken-{kind}", BREAKERS[kind]),), ctx)
    assert info.value.message == f"pass 'broken-{kind}' left func 'f' invalid: {full.value.message}"
    assert getattr(info.value.span, "location", None) == getattr(full.value.span, "location", None)
    assert info.value.hint == full.value.hint


def test_an_untracked_pass_is_verified_whole(monkeypatch):
    """A pass that may edit behind the graph's back (tracked is False) gets a full verify."""

    @dataclass(frozen=True)
    class Behind(Pass):
        """Edits an operand list directly.

        Before: a valid graph. After: a stale use list.
        """

        name: ClassVar[str] = "behind"

        def run(self, graph, ctx) -> None:
            n = _node(graph, "y")
            n.operands[0] = _node(graph, "a").result

    assert Behind.tracked is False
    with pytest.raises(PassError) as info:
        run_pipeline(parse_func(TEXT), (Behind(),), PassContext.default())
    assert "pass 'behind' left func 'f' invalid: use list of %" in info.value.message


def test_a_pass_running_a_pipeline_on_its_own_graph_keeps_the_outer_log():
    """The inner pipeline neither replaces nor ends the log of the pass that runs it, so a
    break after it is still caught."""
    from anec.passes import DeadCodeElimination

    def edit(g: Graph) -> None:
        log = g.changes
        run_pipeline(g, (DeadCodeElimination(),), PassContext.default(), verify_input=False)
        assert g.changes is log is not None
        _cycle(g)

    with pytest.raises(PassError) as info:
        run_pipeline(parse_func(TEXT), (_tracked_pass("outer", edit),), PassContext.default())
    assert "pass 'outer' left func 'f' invalid: value %c is used before it is defined" in (
        info.value.message)


def test_an_erased_node_left_in_a_use_list_is_caught():
    g = parse_func(TEXT)
    changes = g.track_changes()
    d = g.create_node("exp", [g.inputs[0]], {}, [g.inputs[0].type], ["d"])
    g.erase_node(d)
    g.inputs[0].uses.append(d)  # behind the graph's back
    g.stop_tracking()
    assert not verifier._changes_ok(g, changes)
    with pytest.raises(VerifyError, match="use list of %x is out of date"):
        verify_changes(g, changes)


def test_the_log_trusts_inferred_types_only_until_a_node_is_rewired():
    """Nodes the rewriter builds are logged as typed (the verifier does not infer them again);
    rewiring one to read a value of another type, or retyping an input it reads, drops it;
    a node built with types given by the caller never is, even rewired to a value alike."""
    g = parse_func(TEXT)
    changes = g.track_changes()
    rw = Rewriter(g, PassContext.default(), "test")
    rw.anchor = _node(g, "y")
    c = _node(g, "c").result
    e = rw.op("exp", c).producer
    k = rw.scalar(0.5, DType.fp16).producer
    s = rw.op("sigmoid", g.inputs[0]).producer
    given = g.create_node("exp", [c], {}, [c.type], ["given"], before=_node(g, "y"))
    assert {id(e), id(k), id(s)} <= changes.typed and id(given) not in changes.typed
    g.set_operand(e, 0, _node(g, "b").result)  # the same type: what the op table infers is unchanged
    g.set_operand(given, 0, _node(g, "b").result)
    g.set_input_type(g.inputs[0], g.inputs[0].type)
    assert id(e) in changes.typed and id(k) in changes.typed
    assert id(s) not in changes.typed and id(given) not in changes.typed
    wide = rw.op("cast", c, dtype=DType.fp32, at=e)
    g.set_operand(e, 0, wide)  # another type: exp(fp32) is fp32, not e's declared fp16
    assert id(e) not in changes.typed
    g.stop_tracking()
    assert not verifier._changes_ok(g, changes)
    with pytest.raises(VerifyError, match="y_exp does not match the inferred type fp32"):
        verify_changes(g, changes)


def test_an_inferred_node_is_not_inferred_again(monkeypatch):
    """The work the typed log saves: a pass built only of rewriter nodes, rewiring an existing
    node to a value of the type it read before, is verified without a single type inference;
    rewired to a value of another type, that node is inferred again."""
    def inferences(retype: bool) -> list[str]:
        g = parse_func(TEXT)
        changes = g.track_changes()
        rw = Rewriter(g, PassContext.default(), "test")
        rw.anchor = _node(g, "y")
        e = rw.op("exp", rw.op("mul", _node(g, "c").result, rw.scalar(0.5, DType.fp16)))
        if retype:
            e = rw.op("cast", e, dtype=DType.fp32)
        g.replace_uses(_node(g, "c").result, e, [_node(g, "y")])
        g.stop_tracking()
        inferred: list[str] = []
        real = verifier.remembered_types
        monkeypatch.setattr(verifier, "remembered_types",
                            lambda op, *a: inferred.append(op) or real(op, *a))
        ok = verifier._changes_ok(g, changes)
        monkeypatch.setattr(verifier, "remembered_types", real)
        assert ok is not retype  # tanh(fp32) is fp32, not %y's declared fp16
        return inferred

    assert inferences(retype=False) == []
    assert inferences(retype=True) == ["tanh"]  # only %y, rewired to read a wider value


def test_builtin_passes_that_edit_the_graph_are_tracked():
    """Every pass but emit-mil (which writes an artifact): partition edits nothing, so the
    incremental check after it has nothing to re-verify."""
    tracked = {p.name for p in DEFAULT if p.tracked}
    assert tracked == {"dce", "fuse-casts", "select-native", "range-safe", "annotate-sram",
                       "legalize", "partition"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("pipeline", ["optimize", "cleanup"])
def test_valid_pipelines_never_fall_back_to_a_full_verify(path, pipeline, monkeypatch):
    """After each tracked pass of a real program the incremental check alone accepts the
    result, and a full verify agrees."""
    module = parse(path.read_text(), str(path))
    verify(module)
    calls = []

    def full(target, **kw):
        calls.append(target)
        return verify(target, **kw)

    monkeypatch.setattr(verifier, "verify", full)  # verify_changes falls back through this name
    ctx = PassContext.default(host_casts=True)
    for graph in module.funcs.values():
        for p in PIPELINES[pipeline]:
            changes = graph.track_changes()
            p.run(graph, ctx)
            graph.stop_tracking()
            assert verifier._changes_ok(graph, changes), (path.name, p.name)
            verify_changes(graph, changes)
            verify(graph)
    assert calls == []


def test_optimize_on_every_example_verifies_incrementally_without_errors():
    for path in EXAMPLES:
        module = parse(path.read_text(), str(path))
        run_pipeline(module, OPTIMIZE, PassContext.default(host_casts=True))
        verify(module)


# ---- the deferred node order ------------------------------------------------------------


def test_deferred_insertions_and_erasures_give_the_order_of_eager_list_edits():
    """Random inserts before nodes, appends, erasures and identity-after inserts, against a
    plain list edited eagerly."""
    rng = random.Random(7)
    t = TensorType(DType.fp16, (1, 4, 1, 4))
    for trial in range(30):
        g = Graph("f")
        x = g.add_input("x", t)
        model = []
        for _ in range(rng.randint(1, 40)):
            kind = rng.random()
            alive = list(model)
            if kind < 0.45 and alive:
                anchor = rng.choice(alive)
                n = g.create_node("relu", [x], {}, [t], before=anchor)
                model.insert(model.index(anchor), n)
            elif kind < 0.7 or not alive:
                n = g.create_node("relu", [x], {}, [t])
                model.append(n)
            elif kind < 0.85:
                victim = rng.choice(alive)
                g.erase_node(victim, safe=False)
                model.remove(victim)
            else:  # replace_all_uses of a returned value by a returned value: identity after
                a, b = rng.sample(alive, 2) if len(alive) > 1 else (alive[0], None)
                if b is None:
                    continue
                g.set_outputs([a.result, b.result])
                g.replace_all_uses(a.result, b.result)
                ident = g.outputs[0].producer
                model.insert(model.index(b) + 1, ident)
                g.set_outputs([])
            if rng.random() < 0.2:
                assert list(g.nodes) == model, trial  # reading the order settles it
        assert list(g.nodes) == model, trial
        assert all(g.has_node(n) for n in model)


def test_a_node_list_view_sees_later_edits():
    g = parse_func(TEXT)
    view = g.nodes
    first = view[0]
    new = g.create_node("relu", [g.inputs[0]], {}, [g.inputs[0].type], ["z"], before=first)
    assert view[0] is new and len(view) == 5


def test_a_graph_with_pending_edits_pickles_and_clones_in_order():
    g = parse_func(TEXT)
    a = _node(g, "a")
    g.create_node("relu", [g.inputs[0]], {}, [g.inputs[0].type], ["z"], before=a)
    names = [n.results[0].name for n in g.nodes]
    g.create_node("exp", [g.inputs[0]], {}, [g.inputs[0].type], ["w"], before=a)
    names.insert(1, "w")
    back = pickle.loads(pickle.dumps(g))
    assert [n.results[0].name for n in back.nodes] == names
    assert [n.results[0].name for n in g.clone().nodes] == names


# ---- types ------------------------------------------------------------------------------


def test_tensor_type_hash_and_size_are_cached_but_not_pickled():
    t = TensorType(DType.fp16, (1, 64, 1, 32))
    assert hash(t) == hash((DType.fp16, (1, 64, 1, 32)))
    assert t.nbytes == 64 * 32 * 2 and TensorType(DType.int8, (3, 5)).nbytes == 15
    assert t == TensorType(DType.fp16, [1, 64, 1, 32]) and t != TensorType(DType.fp32, t.shape)
    assert "_hash" in t.__dict__ and "_nbytes" in t.__dict__
    back = pickle.loads(pickle.dumps(t))
    assert back == t and back.__dict__ == {"dtype": DType.fp16, "shape": (1, 64, 1, 32)}
    assert {t: 1}[back] == 1
