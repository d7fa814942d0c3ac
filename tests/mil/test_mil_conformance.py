"""Every emitted MIL program type-checks under coremltools 9.0's op definitions.

The programs are rebuilt op by op with coremltools' builder (iOS18 opset, or
iOS16 for the older dialect) by :mod:`tests.mil.milcheck`; declared result
types must equal the inferred ones. Examples are checked with their real
weight files (read back by coremltools' blob reader); hypothesis-generated
graphs are checked after the default pipeline.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anec.ir.ops import UNARY
from anec.compiler import compile_module
from anec.diagnostics import ConstraintError, VerifyError
from anec.ir import Builder

from .graphs import small_mlp
from .milcheck import assert_proven, check_mil, parse_mil
from .test_mil_golden import EXAMPLES, FORBIDDEN, compiled

pytest.importorskip("coremltools")
warnings.filterwarnings("ignore", message=".*(not supported|has not been tested).*")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_typecheck_with_weights(example):
    for func, art in compiled(example, 0).artifacts.items():
        check_mil(art.mil_text, art.blobs)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_examples_typecheck_on_m1_in_both_dialects(example):
    for dialect, header in ((None, "program(1.3)\n"), ("ios16", "program(1.0)\n")):
        result = compiled(example, None, "m1", True, dialect)
        for art in result.artifacts.values():
            assert art.mil_text.startswith(header)
            check_mil(art.mil_text)


def test_packed_weights_typecheck():
    from anec.ir.graph import Module

    m = Module()
    m.add_func(small_mlp())
    result = compile_module(m, random_seed=0, pack_weights=True)
    art = result.artifacts["mlp"]
    assert list(art.blobs) == ["weights/weight.bin"]
    check_mil(art.mil_text, art.blobs)


def test_checker_catches_a_wrong_declared_type():
    text = compiled(EXAMPLES[0], None).artifacts
    art = next(iter(text.values()))
    bad = art.mil_text.replace("tensor<fp16, [1, 768, 1, 64]> xh = cast", "tensor<fp16, [1, 768, 1, 63]> xh = cast", 1)
    assert bad != art.mil_text
    with pytest.raises(AssertionError, match="coremltools infers"):
        check_mil(bad)


def test_checker_catches_an_unknown_argument():
    art = next(iter(compiled(EXAMPLES[0], None).artifacts.values()))
    bad = art.mil_text.replace("cast(dtype = xh_dtype, x = x)", "cast(dtype = xh_dtype, x = x, y = x)", 1)
    assert bad != art.mil_text
    with pytest.raises(ValueError, match="Unknown input 'y'"):
        check_mil(bad)


# ---- hypothesis: random graphs through the default pipeline ----------------

_UNARY = sorted(UNARY)
_KINDS = _UNARY + ["binary", "conv", "matmul_w", "matmul_act", "softmax", "reduce", "reshape",
                   "transpose", "slice", "split", "pad", "concat_conv", "cast_roundtrip"]


@st.composite
def graphs(draw):
    c = draw(st.sampled_from([4, 8]))
    s = draw(st.sampled_from([2, 4, 8]))
    io = draw(st.sampled_from(["fp16", "fp32"]))
    b = Builder("g")
    x = b.input("x", io, [1, c, 1, s])
    pool = [b.cast(x, dtype="fp16", name="xh") if io == "fp32" else x]
    nweights = 0
    for i in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(_KINDS))
        v = pool[-1] if draw(st.booleans()) else draw(st.sampled_from(pool))  # favour chains
        shape, rank = v.type.shape, v.type.rank
        try:
            if kind in _UNARY:
                kw = {"mode": draw(st.sampled_from(["exact", "tanh"]))} if kind == "gelu" else {}
                out = b.op(kind, v, **kw)
            elif kind == "binary":
                op = draw(st.sampled_from(["add", "sub", "mul", "pow"]))
                other = draw(st.sampled_from(["scalar", "same", "weight"]))
                if other == "scalar":
                    y = b.const_value(draw(st.sampled_from([0.5, -1.0, 2.0])), "fp16[]")
                elif other == "weight" and rank == 4:
                    nweights += 1
                    y = b.const_weight(f"p{i}", f"fp16[1, {shape[1]}, 1, 1]")
                else:
                    y = draw(st.sampled_from([u for u in pool if u.type == v.type]))
                out = b.op(op, v, y)
            elif kind == "conv" and rank == 4:
                cout = draw(st.sampled_from([4, 8]))
                nweights += 1
                w = b.const_weight(f"w{i}", f"fp16[{cout}, {shape[1]}, 1, 1]")
                bias = None
                if draw(st.booleans()):
                    nweights += 1
                    bias = b.const_weight(f"b{i}", f"fp16[1, {cout}, 1, 1]")
                out = b.conv1x1(v, w, bias=bias)
            elif kind == "matmul_w" and rank >= 2:
                n = draw(st.sampled_from([4, 8]))
                ty = draw(st.booleans())
                nweights += 1
                wshape = [n, shape[-1]] if ty else [shape[-1], n]
                w = b.const_weight(f"m{i}", f"fp16[{wshape[0]}, {wshape[1]}]")
                out = b.matmul(v, w, transpose_y=ty)
            elif kind == "matmul_act" and rank >= 2:
                out = b.matmul(v, v, transpose_y=True)
            elif kind == "softmax" and rank >= 1:
                out = b.softmax(v, axis=draw(st.integers(-rank, rank - 1)))
            elif kind == "reduce" and rank >= 1:
                op = draw(st.sampled_from(["reduce_sum", "reduce_mean", "reduce_max"]))
                axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
                out = b.op(op, v, axes=axes, keep_dims=draw(st.booleans()))
            elif kind == "reshape" and rank >= 1:
                out = b.reshape(v, shape=[1, -1, shape[-1]])
            elif kind == "transpose" and rank >= 2:
                out = b.transpose(v, perm=draw(st.permutations(list(range(rank)))))
            elif kind == "slice" and rank >= 1:
                begin, end, stride = [], [], []
                for d in shape:
                    lo = draw(st.integers(0, d - 1))
                    begin.append(lo)
                    end.append(draw(st.integers(lo + 1, d)))
                    stride.append(draw(st.sampled_from([1, 2])))
                out = b.slice(v, begin=begin, end=end, stride=stride)
            elif kind == "split" and rank >= 1 and max(shape) >= 2:
                axis = draw(st.sampled_from([a for a in range(rank) if shape[a] >= 2]))
                k = draw(st.integers(1, shape[axis] - 1))
                outs = b.split(v, axis=axis, sizes=[k, shape[axis] - k])
                pool.extend(outs)
                continue
            elif kind == "pad" and rank >= 2:
                before = [0] * (rank - 2) + [draw(st.integers(0, 2)) for _ in range(2)]
                after = [0] * (rank - 2) + [draw(st.integers(0, 2)) for _ in range(2)]
                out = b.pad(v, before=before, after=after, value=draw(st.sampled_from([0.0, -1.0])))
            elif kind == "concat_conv" and rank == 4:
                cat = b.concat(v, v, axis=1)
                nweights += 1
                w = b.const_weight(f"k{i}", f"fp16[4, {2 * shape[1]}, 1, 1]")
                out = b.conv1x1(cat, w)
            elif kind == "cast_roundtrip":
                out = b.cast(b.cast(v, dtype="fp32"), dtype="fp16")
            else:
                continue
        except VerifyError:
            continue
        pool.append(out)
    candidates = [v for v in pool if v.producer is not None]
    if not candidates:
        candidates = [b.relu(pool[0])]
    outs = [candidates[-1]]  # the last value keeps most of the graph alive; maybe one more
    extra = draw(st.sampled_from([None, *candidates[:-1]]))
    if extra is not None:
        outs.append(extra)
    if io == "fp32":
        outs = [b.cast(v, dtype="fp32") for v in outs]
    b.ret(*outs)
    return Builder.module(b.graph), nweights


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
@pytest.mark.constraint("ANE-SPLIT")
def test_generated_graphs_typecheck_after_default_pipeline(case):
    module, nweights = case
    try:
        result = compile_module(module, random_seed=0)
    except ConstraintError as e:
        # only budget-type refusals are acceptable for these small random graphs
        assert e.constraint in ("ANE-BLOB-BUDGET", "ANE-CONCAT", "ANE-FP16-RANGE"), e.render()
        return
    art = result.artifacts["g"]
    for bad in FORBIDDEN:
        assert f" = {bad}" not in art.mil_text
    assert_proven(art.mil_text)
    assert all("bias" not in st.args for st in parse_mil(art.mil_text).stmts if st.op == "conv")
    check_mil(art.mil_text, art.blobs)
