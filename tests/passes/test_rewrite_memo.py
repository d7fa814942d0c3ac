"""The rewriter remembers the types it infers for new nodes (in the verifier's memo); on a cold cache, on a warm one
and for attributes it cannot key (unhashable), every answer must be the op table's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from anec.ir.ops import InferError, infer_types
from anec.ir.parser import parse_file
from anec.ir.printer import print_module
from anec.ir import verify_types
from anec.ir.types import DType, TensorType
from anec.passes import PassContext, run_pipeline
from anec.passes import rewrite
from anec.passes.pipelines import OPTIMIZE

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.ir"))
assert EXAMPLES


def _cold_memo(monkeypatch) -> None:
    """Both tables of the memo empty for this test."""
    monkeypatch.setattr(verify_types, "INFERRED", {})
    monkeypatch.setattr(verify_types, "INFERRED_BY_ID", {})


def _legalized(path):
    m = parse_file(path)
    run_pipeline(m, OPTIMIZE, PassContext.default())
    return print_module(m)


@pytest.mark.parametrize("path", EXAMPLES[:6], ids=lambda p: p.name)
def test_legalize_gives_the_same_program_on_a_cold_and_a_warm_cache(path, monkeypatch):
    _cold_memo(monkeypatch)
    cold = _legalized(path)
    assert verify_types.INFERRED  # the cold run filled it
    warm = _legalized(path)
    assert cold == warm


class _V:
    def __init__(self, t):
        self.type = t


F16 = TensorType(DType.fp16, (1, 4, 1, 8))


def test_each_answer_is_the_op_tables_cold_and_warm(monkeypatch):
    _cold_memo(monkeypatch)
    cases = [("add", [F16, F16], {}, {}, None),
             ("mul", [F16, TensorType(DType.fp16, ())], {}, {}, None),
             ("cast", [F16], {}, {"dtype": DType.fp32}, None),
             ("reduce_sum", [F16], {}, {"axes": [1], "keep_dims": True}, None),
             ("const", [], {}, {"value": 2.0}, TensorType(DType.fp16, ())),
             ("const", [], {}, {"value": 3.0}, TensorType(DType.fp16, ())),
             ("const", [], {}, {"value": 2.0}, TensorType(DType.fp32, ()))]
    for _ in range(2):  # cold, then every answer again from the cache
        for op, ops, opt, attrs, declared in cases:
            got = rewrite._infer(op, [_V(t) for t in ops], {k: _V(t) for k, t in opt.items()}, attrs, declared)
            assert got == infer_types(op, ops, opt, attrs, declared=declared), (op, attrs)
    assert len(verify_types.INFERRED) == len(cases)


def test_unhashable_attributes_are_inferred_every_time(monkeypatch):
    _cold_memo(monkeypatch)
    attrs = {"axes": [[1]], "keep_dims": True}  # a nested list: no plain key
    with pytest.raises(InferError, match="must be a list of ints"):
        rewrite._infer("reduce_sum", [_V(F16)], {}, attrs)
    assert verify_types.INFERRED == {}


def test_the_cache_is_bounded(monkeypatch):
    _cold_memo(monkeypatch)
    monkeypatch.setattr(verify_types, "_INFERRED_MAX", 3)
    for v in (1.0, 2.0, 3.0):
        rewrite._infer("const", [], {}, {"value": v}, TensorType(DType.fp16, ()))
    assert len(verify_types.INFERRED) == 3
    rewrite._infer("const", [], {}, {"value": 4.0}, TensorType(DType.fp16, ()))
    assert len(verify_types.INFERRED) == 1  # full: emptied, then the new answer
    assert len(verify_types.INFERRED_BY_ID) == 1


def test_two_ops_on_the_same_operands_are_remembered_apart(monkeypatch):
    """add and matmul of [1, 4] and [4, 1]: a broadcast [4, 4], then a [1, 1] product, cold and warm."""
    _cold_memo(monkeypatch)
    a, b = _V(TensorType(DType.fp16, (1, 4))), _V(TensorType(DType.fp16, (4, 1)))
    for _ in range(2):
        assert rewrite._infer("add", [a, b], {}, {}) == [TensorType(DType.fp16, (4, 4))]
        assert rewrite._infer("matmul", [a, b], {}, {}) == [TensorType(DType.fp16, (1, 1))]


def test_an_equal_type_object_not_seen_before_gets_the_same_answer(monkeypatch):
    """The memo's table by object id misses a type equal to a remembered one but built apart;
    the table by value answers, and both answers are the op table's."""
    _cold_memo(monkeypatch)
    first, again = TensorType(DType.fp16, (1, 4, 1, 8)), TensorType(DType.fp16, (1, 4, 1, 8))
    assert first == again and first is not again
    want = infer_types("relu", [first], {}, {})
    calls = []

    def counted(op, operands, optional, attrs, declared=None):
        calls.append(op)
        return infer_types(op, operands, optional, attrs, declared=declared)

    monkeypatch.setattr(rewrite, "infer_types", counted)
    assert rewrite._infer("relu", [_V(first)], {}, {}) == want
    assert rewrite._infer("relu", [_V(again)], {}, {}) == want
    assert rewrite._infer("relu", [_V(again)], {}, {}) == want
    assert calls == ["relu"]  # inferred once; the equal object found by value, then by id
    assert len(verify_types.INFERRED) == 1 and len(verify_types.INFERRED_BY_ID) == 2
    # each entry by id holds the type objects it is keyed by (their ids cannot be reused)
    held = [key[1][0] for key, _ in verify_types.INFERRED_BY_ID.values()]
    assert any(t is first for t in held) and any(t is again for t in held)
