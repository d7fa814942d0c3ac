"""Every op of the op table, end to end: IR -> default passes -> MIL -> sim, values checked
against the reference interpreter.

``CASES`` holds one hypothesis case generator per op of ``anec.ir.ops.OPS``
(``test_every_op_has_a_case`` fails when the table gains an op without one). A case
draws shapes, attributes, the float dtype of the program (fp16 or fp32) and input
values that include fp16 specials: +-0, subnormals, values at and next to 65504, and
+-inf (NaN for data movement) where the op defines a result for them. The program is
compiled for m4 with the default pipeline, run on the sim, and compared (rule of
tests/tolerances.py, worst errors in tests/tolerances.json):

* with the interpreter (fp16 mode) running the *compiled* program, after legalize:
  emitter and sim against the op table's semantics of what was emitted, op by op
  (``every-op/<op>:compiled``, COMPILED_ULPS);
* with the interpreter running the program *as written*: the whole pipeline including
  legalize's rewrites (rsqrt -> pow, exact gelu -> its tanh form, reduce_mean -> sum of
  x * 1/N, matmul with a weight -> conv1x1, concat into partial convs, conv bias -> add)
  (``every-op/<op>:source``, the case's own ulps).

Both round every op result to fp16 (sim: fp32 arithmetic, fp16 storage; interpreter:
float64 arithmetic rounded once). They differ by libm and by summation: the sim
accumulates in fp32, the reference in float64, so the sum-type ops draw values whose
partial sums fp32 holds exactly (multiples of 2**-6 below 8, fp16 subnormals alone,
non-negative large values): with mixed magnitudes and cancellation the two could
legitimately differ by far more than an ulp of the (cancelled) result.

``ANEC_OP_EXAMPLES=N`` draws N examples per op (default 12).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from anec.compiler import compile_module
from anec.ir.interp import interpret
from anec.ir.ops import BINARY, OPS, REDUCTIONS
from anec.ir.parser import parse
from anec.ir.printer import format_literal
from anec.weight_store import WeightStore
from tolerances import assert_close

N_EXAMPLES = int(os.environ.get("ANEC_OP_EXAMPLES", "12"))
COMPILED_ULPS = 1
"""Sim vs the interpreter on the same (compiled) program: one fp16 ulp (libm vs float64
math rounded once; the sums are exact by construction)."""

ZEROS = [0.0, -0.0]
SUBNORMALS = [2.0**-24, -(2.0**-24), 2.0**-14 - 2.0**-24, 3 * 2.0**-24, -(2.0**-14 - 2.0**-24)]
TINY_NORMALS = [2.0**-14, -(2.0**-14)]
LIMITS = [65504.0, -65504.0, 65472.0, -65472.0]
INFS = [math.inf, -math.inf]
NANS = [math.nan]
ALL_SPECIALS = ZEROS + SUBNORMALS + TINY_NORMALS + LIMITS + INFS
NP = {"fp16": np.float16, "fp32": np.float32}


@dataclass
class Case:
    params: dict[str, tuple[str, tuple[int, ...]]]
    lines: list[str]
    returns: list[str]
    feeds: dict[str, np.ndarray]
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    source_ulps: float = 1
    variant: str = ""
    """Appended to the op in the check id when the variant has its own tolerance."""
    source_lines: list[str] | None = None
    """The program the source check interprets, when it is not ``lines``."""
    source_where: np.ndarray | None = None
    """The output elements the source check compares (all when None)."""

    def text(self, lines: list[str] | None = None) -> str:
        sig = ", ".join(f"%{k}: {_type(dt, sh)}" for k, (dt, sh) in self.params.items())
        body = "".join(f"  {line}\n" for line in lines or self.lines)
        return f"func f({sig}) {{\n{body}  return {', '.join('%' + r for r in self.returns)}\n}}\n"


def _type(dtype: str, shape) -> str:
    return f"{dtype}[{', '.join(str(d) for d in shape)}]"


def _lit(v) -> str:
    return format_literal(v.tolist() if isinstance(v, np.ndarray) else v)


# ---- value strategies ---------------------------------------------------------------------

DTYPES = st.sampled_from(["fp16", "fp32"])
SHAPES = hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4)


def elements(dtype: str, lo: float, hi: float, specials=()) -> st.SearchStrategy[float]:
    width = 16 if dtype == "fp16" else 32
    base = st.floats(lo, hi, width=width)
    return st.one_of(base, st.sampled_from(list(specials))) if specials else base


def grid(step: float, bound: int) -> st.SearchStrategy[float]:
    """Multiples of ``step`` up to ``bound * step``: fp32 adds them exactly."""
    return st.integers(-bound, bound).map(lambda k: k * step)


def arrays(draw, dtype: str, shape, elems: st.SearchStrategy[float]) -> np.ndarray:
    return draw(hnp.arrays(NP[dtype], shape, elements=elems))


def sum_safe(draw, dtype: str, shape, nonneg: bool = False, specials=True,
             modes=("grid", "tiny", "large")) -> np.ndarray:
    """Values whose sums fp32 computes exactly (see the module docstring); products of
    two such arrays too, unless both are "large"."""
    mode = draw(st.sampled_from(modes))
    if mode == "grid":
        elems = grid(2.0**-6, 512) | st.sampled_from(ZEROS + (INFS if specials else []))
    elif mode == "tiny":  # fp16 subnormals and the smallest normals
        elems = grid(2.0**-24, 1023)
    else:  # large and non-negative: overflow to inf, no cancellation
        elems = st.integers(0, 8188).map(lambda k: k * 8.0) | st.sampled_from([65504.0])
    if nonneg:
        elems = elems.map(abs)
    return arrays(draw, dtype, shape, elems)


def broadcastable(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against ``shape`` (some dims 1, maybe fewer leading dims)."""
    out = tuple(d if draw(st.booleans()) else 1 for d in shape)
    return out[draw(st.integers(0, len(out) - 1)):] if out else out


# ---- cases, one generator per op ----------------------------------------------------------

UNARY_VALUES = {
    # op: (lo, hi, specials): the inputs where the op defines a result, specials included
    "identity": (-65504, 65504, ALL_SPECIALS + NANS),
    "neg": (-65504, 65504, ALL_SPECIALS + NANS),
    "relu": (-65504, 65504, ALL_SPECIALS),
    "exp": (-20, 12, ALL_SPECIALS),
    "sqrt": (0, 65504, ALL_SPECIALS + [-1.0]),
    "rsqrt": (0, 65504, ALL_SPECIALS + [-1.0]),
    "tanh": (-20, 20, ALL_SPECIALS),
    "sigmoid": (-20, 20, ALL_SPECIALS),
    "gelu": (-10, 10, ALL_SPECIALS),
}
SOURCE_ULPS = {"gelu": 4, "rsqrt": 2}
GELU_TAIL = -1.5
"""Legalize expands gelu into eight fp16 ops whose ``1 + tanh(..)`` cancels for negative x:
below -1.5 the result (|y| < 0.1) is off by up to 2e-3, ~1000 ulps of a tiny output (the
sigmoid form x * sigmoid(2z) would not cancel). The source check stops there; above it the
worst measured over every fp16 input is 3.5 ulps."""


@st.composite
def unary_case(draw, op: str) -> Case:
    dt, shape = draw(DTYPES), draw(SHAPES)
    lo, hi, specials = UNARY_VALUES[op]
    x = arrays(draw, dt, shape, elements(dt, lo, hi, specials))
    if op == "rsqrt":
        # legalize writes pow(x, -0.5): +inf at -0 and 0 at -inf, where 1/sqrt(x) gives -inf
        # and NaN (test_rsqrt_keeps_its_value_at_negative_zero_and_infinity)
        x = np.where((x == 0) | (x == -np.inf), np.abs(x), x)
    attrs = ""
    if op == "gelu":
        mode = draw(st.sampled_from([None, "exact", "tanh"]))
        attrs = f', mode="{mode}"' if mode else ""
    case = Case({"x": (dt, shape)}, [f"%y = {op}(%x{attrs})"], ["y"], {"x": x},
                source_ulps=SOURCE_ULPS.get(op, 1))
    if op == "gelu" and attrs != ', mode="tanh"':
        # legalize replaces erf by the tanh form, an absolute error up to 4.7e-4 (10% of a
        # small output; tests/passes bounds it): the source reference is the tanh form
        case.variant, case.source_lines = "-exact", ['%y = gelu(%x, mode="tanh")']
    if op == "gelu":
        case.source_where = x >= GELU_TAIL
    return case


@st.composite
def binary_case(draw, op: str) -> Case:
    dt, shape = draw(DTYPES), draw(SHAPES)
    yshape = broadcastable(draw, shape)
    if draw(st.booleans()):
        shape, yshape = yshape, shape
    if op == "pow":
        xs = arrays(draw, dt, shape, elements(dt, 0, 8, ALL_SPECIALS + [-2.0, -1.5]))
        ys = arrays(draw, dt, yshape, elements(dt, -4, 4, [0.0, 0.5, -0.5, 1.0, 2.0, 3.0, -1.0, -2.0]))
    else:
        xs = arrays(draw, dt, shape, elements(dt, -100, 100, ALL_SPECIALS))
        ys = arrays(draw, dt, yshape, elements(dt, -100, 100, ALL_SPECIALS))
    how = draw(st.sampled_from(["input", "value", "weight"]))
    if how == "input":
        return Case({"x": (dt, shape), "y": (dt, yshape)}, [f"%z = {op}(%x, %y)"], ["z"], {"x": xs, "y": ys})
    if how == "value":  # an inline literal: a scalar or a small nested list
        lit = _lit(ys.reshape(-1)[0]) if ys.size > 8 or draw(st.booleans()) else _lit(ys)
        line = f"%y = const(value={lit}) : {_type(dt, yshape)}"
        return Case({"x": (dt, shape)}, [line, f"%z = {op}(%x, %y)"], ["z"], {"x": xs})
    ys = np.where(np.isfinite(ys), ys, 0).astype(ys.dtype)  # a weight holds no inf (ANE-FP16-RANGE)
    return Case({"x": (dt, shape)}, [f'%y = const(weight="y") : {_type(dt, yshape)}', f"%z = {op}(%x, %y)"],
                ["z"], {"x": xs}, {"y": ys})


@st.composite
def const_case(draw) -> Case:
    dt, shape = draw(DTYPES), draw(SHAPES)
    x = arrays(draw, dt, shape, elements(dt, -100, 100, ZEROS + SUBNORMALS))
    cshape = broadcastable(draw, shape)
    c = arrays(draw, dt, cshape, elements(dt, -100, 100, ZEROS + SUBNORMALS + LIMITS))
    if draw(st.booleans()):
        if c.size > 8 or draw(st.booleans()):
            cshape = draw(st.sampled_from([cshape, ()]))
            lit = _lit(c.reshape(-1)[0])
        else:
            lit = _lit(c)
        return Case({"x": (dt, shape)}, [f"%c = const(value={lit}) : {_type(dt, cshape)}", "%y = add(%x, %c)"],
                    ["y"], {"x": x})
    attrs, stored = "", c
    if len(cshape) >= 2 and draw(st.booleans()):  # a weight stored in another layout
        perm = draw(st.permutations(list(range(len(cshape)))))
        inverse = list(np.argsort(perm))
        stored = np.ascontiguousarray(np.transpose(c, inverse))
        attrs = f", perm={list(perm)}"
    return Case({"x": (dt, shape)}, [f'%c = const(weight="c"{attrs}) : {_type(dt, cshape)}', "%y = add(%x, %c)"],
                ["y"], {"x": x}, {"c": stored.astype(np.float32)})


@st.composite
def cast_case(draw) -> Case:
    src = draw(DTYPES)
    target = draw(st.sampled_from(["fp16", "fp32", "int32", "int8", "uint8", "bool"]))
    shape = draw(SHAPES)
    near = [65519.0, 65520.0, -65520.0, 70000.0, 2.0**-25, 1.5 * 2.0**-25, 1e-8, 2.0**-24 * 1.5] if src == "fp32" else []
    if target in ("int8", "uint8"):
        x = arrays(draw, src, shape, elements(src, -300, 300, ZEROS + [127.5, 128.0, -128.5, 255.5, 256.0]))
    elif target == "int32":
        x = arrays(draw, src, shape, elements(src, -65504, 65504, ZEROS + SUBNORMALS + LIMITS))
    else:
        x = arrays(draw, src, shape, elements(src, -65504, 65504, ALL_SPECIALS + near))
    lines = [f"%y = cast(%x, dtype={target})"]
    out = "y"
    if target not in ("fp16", "fp32"):  # program outputs are float: cast back
        back = draw(st.sampled_from(["fp16", "fp32"]))
        lines.append(f"%z = cast(%y, dtype={back})")
        out = "z"
    return Case({"x": (src, shape)}, lines, [out], {"x": x})


@st.composite
def conv_case(draw) -> Case:
    dt = draw(DTYPES)
    n, cin, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 6)), draw(st.integers(1, 2)), draw(st.integers(1, 5))
    cout = draw(st.integers(1, 6))
    x = sum_safe(draw, dt, (n, cin, h, w))
    wt = arrays(draw, "fp32", (cout, cin, 1, 1), grid(2.0**-2, 8))
    lines = [f'%w = const(weight="w") : {_type(dt, (cout, cin, 1, 1))}']
    weights = {"w": wt}
    bias = ""
    if draw(st.booleans()):
        lines.append(f'%b = const(weight="b") : {_type(dt, (1, cout, 1, 1))}')
        weights["b"] = arrays(draw, "fp32", (1, cout, 1, 1), grid(2.0**-2, 64))
        bias = ", bias=%b"
        x = arrays(draw, dt, (n, cin, h, w), grid(2.0**-2, 8))  # conv + bias then exact in fp16
    lines.append(f"%y = conv1x1(%x, %w{bias})")
    return Case({"x": (dt, (n, cin, h, w))}, lines, ["y"], {"x": x}, weights)


@st.composite
def matmul_case(draw) -> Case:
    dt = draw(DTYPES)
    m, k, n = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    tx, ty = draw(st.booleans()), draw(st.booleans())
    xs = (k, m) if tx else (m, k)
    ys = (n, k) if ty else (k, n)
    attrs = "".join(f", {name}={'true' if v else 'false'}" for name, v in (("transpose_x", tx), ("transpose_y", ty))
                    if v or draw(st.booleans()))
    kind = draw(st.sampled_from(["inputs", "weight_right", "weight_left"]))
    if kind == "inputs":  # batched, batch dims broadcast
        batch = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
        bx, by = broadcastable(draw, batch) if batch else (), batch
        if draw(st.booleans()):
            bx, by = by, bx
        x = sum_safe(draw, dt, bx + xs, specials=False)
        y = sum_safe(draw, dt, by + ys, specials=False, modes=("grid", "tiny"))
        return Case({"x": (dt, bx + xs), "y": (dt, by + ys)}, [f"%z = matmul(%x, %y{attrs})"], ["z"],
                    {"x": x, "y": y})
    batch = draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3))
    act_shape = batch + (xs if kind == "weight_right" else ys)
    act = sum_safe(draw, dt, act_shape, specials=False)
    wshape = ys if kind == "weight_right" else xs
    wt = arrays(draw, "fp32", wshape, grid(2.0**-2, 8))
    wline = f'%w = const(weight="w") : {_type(dt, wshape)}'
    call = f"%z = matmul(%a, %w{attrs})" if kind == "weight_right" else f"%z = matmul(%w, %a{attrs})"
    return Case({"a": (dt, act_shape)}, [wline, call], ["z"], {"a": act}, {"w": wt})


@st.composite
def softmax_case(draw) -> Case:
    dt, shape = draw(DTYPES), draw(SHAPES)
    x = arrays(draw, dt, shape, elements(dt, -20, 20, ZEROS + SUBNORMALS + LIMITS + [-math.inf]))
    axis = draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    attrs = "" if axis is None else f", axis={axis}"
    return Case({"x": (dt, shape)}, [f"%y = softmax(%x{attrs})"], ["y"], {"x": x})


@st.composite
def reduce_case(draw, op: str) -> Case:
    dt, shape = draw(DTYPES), draw(SHAPES)
    rank = len(shape)
    axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    axes = [a - rank if draw(st.booleans()) else a for a in axes]
    keep = draw(st.sampled_from(["", ", keep_dims=true", ", keep_dims=false"]))
    if op == "reduce_max":
        x = arrays(draw, dt, shape, elements(dt, -65504, 65504, ALL_SPECIALS))
    else:
        # reduce_mean: legalize scales each element by 1/N, rounded to fp16, before summing;
        # fp16 subnormals lose bits in that scaling beyond any ulp bound (their own test below)
        x = sum_safe(draw, dt, shape, nonneg=op == "reduce_mean",
                     modes=("grid", "large") if op == "reduce_mean" else ("grid", "tiny", "large"))
    ulps = 3 if op == "reduce_mean" else 1
    lines = [f"%y = {op}(%x, axes={axes}{keep})"]
    if "true" not in keep and len(axes) == rank:  # a scalar: program outputs are tensors
        lines.append("%r = reshape(%y, shape=[1])")
    return Case({"x": (dt, shape)}, lines, [lines[-1].split(" ")[0][1:]], {"x": x}, source_ulps=ulps)


MOVE_SPECIALS = ALL_SPECIALS + NANS


@st.composite
def reshape_case(draw) -> Case:
    dt, shape = draw(DTYPES), draw(SHAPES)
    dims = list(draw(st.permutations(list(shape)))) + [1] * draw(st.integers(0, 1))
    if len(dims) >= 2 and draw(st.booleans()):
        dims = [dims[0] * dims[1]] + dims[2:]
    if draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    x = arrays(draw, dt, shape, elements(dt, -65504, 65504, MOVE_SPECIALS))
    return Case({"x": (dt, shape)}, [f"%y = reshape(%x, shape={dims})"], ["y"], {"x": x})


@st.composite
def transpose_case(draw) -> Case:
    dt, shape = draw(DTYPES), draw(SHAPES)
    perm = draw(st.permutations(list(range(len(shape)))))
    x = arrays(draw, dt, shape, elements(dt, -65504, 65504, MOVE_SPECIALS))
    return Case({"x": (dt, shape)}, [f"%y = transpose(%x, perm={list(perm)})"], ["y"], {"x": x})


@st.composite
def slice_case(draw) -> Case:
    dt, shape = draw(DTYPES), draw(SHAPES)
    begin, end, stride = [], [], []
    for d in shape:
        s = draw(st.integers(1, 3))
        b = draw(st.integers(0, d - 1))
        e = draw(st.integers(b + 1, d))
        # spelled with negative indices or out-of-range bounds (python slicing clamps them)
        begin.append(draw(st.sampled_from([b, b - d, b - d - 7 if b == 0 else b])))
        end.append(draw(st.sampled_from([e, e - d if e < d else e + 5, e + 100 if e == d else e])))
        stride.append(s)
    attrs = f"begin={begin}, end={end}" + (f", stride={stride}" if draw(st.booleans()) or any(s != 1 for s in stride) else "")
    x = arrays(draw, dt, shape, elements(dt, -65504, 65504, MOVE_SPECIALS))
    return Case({"x": (dt, shape)}, [f"%y = slice(%x, {attrs})"], ["y"], {"x": x})


@st.composite
def split_case(draw) -> Case:
    dt = draw(DTYPES)
    shape = draw(SHAPES.filter(lambda s: max(s) > 1))
    axis = draw(st.sampled_from([i for i, d in enumerate(shape) if d > 1]))
    d = shape[axis]
    cuts = sorted(draw(st.sets(st.integers(1, d - 1), min_size=1, max_size=min(2, d - 1))))
    sizes = [b - a for a, b in zip([0, *cuts], [*cuts, d])]
    names = [f"s{i}" for i in range(len(sizes))]
    spelled = axis - len(shape) if draw(st.booleans()) else axis
    x = arrays(draw, dt, shape, elements(dt, -65504, 65504, MOVE_SPECIALS))
    line = f"{', '.join('%' + n for n in names)} = split(%x, axis={spelled}, sizes={sizes})"
    return Case({"x": (dt, shape)}, [line], names, {"x": x})


@st.composite
def pad_case(draw) -> Case:
    dt, shape = draw(DTYPES), draw(SHAPES)
    before = [draw(st.integers(0, 2)) for _ in shape]
    after = [draw(st.integers(0, 2)) for _ in shape]
    value = draw(st.none() | st.sampled_from([0.0, -0.0, 1.5, -1e4, 65504.0, -math.inf, math.inf, 2.0**-24]))
    attrs = f"before={before}, after={after}" + ("" if value is None else f", value={_lit(value)}")
    x = arrays(draw, dt, shape, elements(dt, -65504, 65504, MOVE_SPECIALS))
    return Case({"x": (dt, shape)}, [f"%y = pad(%x, {attrs})"], ["y"], {"x": x})


@st.composite
def concat_case(draw) -> Case:
    """concat is legal on the ANE only into a conv1x1 along channels (legalize splits the conv)."""
    dt = draw(DTYPES)
    n, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.integers(1, 4))
    chans = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    cout = draw(st.integers(1, 4))
    params, feeds = {}, {}
    for i, c in enumerate(chans):
        params[f"x{i}"] = (dt, (n, c, h, w))
        feeds[f"x{i}"] = arrays(draw, dt, (n, c, h, w), grid(2.0**-2, 8))
    axis = draw(st.sampled_from([1, -3]))
    lines = [f"%c = concat({', '.join('%' + k for k in params)}, axis={axis})",
             f'%w = const(weight="w") : {_type(dt, (cout, sum(chans), 1, 1))}',
             "%y = conv1x1(%c, %w)"]
    wt = arrays(draw, "fp32", (cout, sum(chans), 1, 1), grid(2.0**-2, 8))
    return Case(params, lines, ["y"], feeds, {"w": wt})


CASES = {
    "const": const_case(),
    **{op: unary_case(op) for op in UNARY_VALUES},
    "cast": cast_case(),
    "conv1x1": conv_case(),
    "matmul": matmul_case(),
    **{op: binary_case(op) for op in OPS if op in BINARY},
    "softmax": softmax_case(),
    **{op: reduce_case(op) for op in OPS if op in REDUCTIONS},
    "reshape": reshape_case(),
    "transpose": transpose_case(),
    "slice": slice_case(),
    "split": split_case(),
    "pad": pad_case(),
    "concat": concat_case(),
}


def test_every_op_has_a_case():
    assert sorted(CASES) == sorted(OPS), "an op of the op table has no end-to-end case here"


def _logical(graph, outputs):
    """The compiled func's outputs as the caller sees them: chunks joined, device shapes undone."""
    out = dict(outputs)
    for entry in graph.facts.logical_outputs:
        pieces = [out.pop(p) for p in entry["pieces"]]
        joined = pieces[0] if entry["axis"] is None else np.concatenate(pieces, entry["axis"])
        out[entry["name"]] = joined.reshape(entry["shape"])
    return out


def _device_feeds(graph, feeds):
    """Feeds in the compiled func's input shapes (rank-4 device shapes, same bytes)."""
    shapes = {v.name: v.type.shape for v in graph.inputs}
    return {k: np.asarray(v).reshape(shapes[k]) for k, v in feeds.items()}


def run_case(rt, op: str, case: Case) -> None:
    text = case.text()
    module = parse(text, f"{op}.ir")
    store = WeightStore(case.weights)
    result = compile_module(module, store)
    prog = rt.load(result.artifacts["f"])
    try:
        got = prog(**case.feeds)
    finally:
        prog.close()
    compiled = result.module.funcs["f"]
    host = {c["name"] for c in compiled.facts.host_casts if c["kind"] == "input"}
    feeds = {k: (v.astype(np.float16) if k in host else v) for k, v in case.feeds.items()}
    want_compiled = _logical(compiled, interpret(compiled, _device_feeds(compiled, feeds), store, "fp16"))
    source = parse(case.text(case.source_lines), f"{op}.ir") if case.source_lines else module
    want_source = interpret(source.funcs["f"], case.feeds, store, "fp16")
    assert list(got) == case.returns
    context = f"\n{text}inputs: {case.feeds}\nweights: {case.weights}"
    for name in case.returns:
        assert got[name].dtype == want_source[name].dtype, name
        check = f"every-op/{op}{case.variant}"
        assert_close(got[name], want_compiled[name], f"{check}:compiled", COMPILED_ULPS, context)
        where = case.source_where if case.source_where is not None else slice(None)
        assert_close(got[name][where], want_source[name][where], f"{check}:source", case.source_ulps, context)


OP_SETTINGS = settings(max_examples=N_EXAMPLES, deadline=None,
                       suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                              HealthCheck.data_too_large, HealthCheck.filter_too_much])


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_through_the_sim_matches_the_interpreter(rt, op):
    @OP_SETTINGS
    @given(CASES[op])
    def check(case: Case) -> None:
        run_case(rt, op, case)

    check()


@pytest.mark.parametrize("k,n", [(128, 256), (4, 16), (3, 4), (1023, 64)])
def test_reduce_mean_of_fp16_subnormals_loses_at_most_half_an_ulp_per_element(rt, k, n):
    """legalize's reduce_sum(x * 1/N) rounds each scaled subnormal to the fp16 grid
    (2**-24) before the sum: the mean is off by at most N/2 subnormal ulps plus the
    final rounding (the price of a sum that cannot overflow; ANE-REDUCE-MEAN), and
    the sim computes exactly what the compiled program says."""
    x = np.full((1, n), k * 2.0**-24, np.float16)
    case = Case({"x": ("fp16", (1, n))}, ["%y = reduce_mean(%x, axes=[1], keep_dims=true)"], ["y"], {"x": x})
    module = parse(case.text(), "mean.ir")
    result = compile_module(module, WeightStore({}))
    prog = rt.load(result.artifacts["f"])
    try:
        got = prog(x=x)["y"].astype(np.float64)
    finally:
        prog.close()
    compiled = result.module.funcs["f"]
    want_compiled = interpret(compiled, {"x": x.reshape(compiled.inputs[0].type.shape)}, WeightStore({}), "fp16")
    assert got.ravel().tolist() == want_compiled["y"].astype(np.float64).ravel().tolist()
    exact = k * 2.0**-24  # the mean of N equal values
    assert abs(float(got.ravel()[0]) - exact) <= (n / 2 + 0.5) * 2.0**-24
    scaled = float(np.float16(np.float16(k * 2.0**-24) * np.float16(1.0 / n)))
    assert float(got.ravel()[0]) == float(np.float16(scaled * n))  # each term rounded, then summed


def test_slice_with_a_stride_beyond_int32_runs(rt):
    """A stride longer than the dim takes one element; MIL writes it as the dim (an int32)."""
    x = np.arange(2 * 5 * 6, dtype=np.float16).reshape(2, 5, 6)
    case = Case({"x": ("fp16", (2, 5, 6))},
                ["%y = slice(%x, begin=[0, 1, 0], end=[2, 5, 6], stride=[1, 2147483648, 4])"], ["y"], {"x": x})
    run_case(rt, "slice", case)


# ---- known gaps, pinned: each test fails (XPASS, strict) once the gap is closed -------------


@pytest.mark.xfail(strict=True, reason="legalize writes rsqrt(x) as pow(x, -0.5): +inf at -0 and 0 "
                   "at -inf, where the op's meaning 1/sqrt(x) gives -inf and NaN")
def test_rsqrt_keeps_its_value_at_negative_zero_and_infinity(rt):
    case = Case({"x": ("fp16", (4,))}, ["%y = rsqrt(%x)"], ["y"],
                {"x": np.float16([-0.0, -np.inf, 4.0, 0.0])})
    run_case(rt, "rsqrt", case)


@pytest.mark.constraint("ANE-FLOAT-COMPUTE")
def test_int32_arithmetic_is_rejected_when_compiling(rt):
    from anec.diagnostics import AnecError

    text = ("func f(%x: fp32[2, 4]) {\n  %i = cast(%x, dtype=int32)\n  %j = add(%i, %i)\n"
            "  %y = cast(%j, dtype=fp32)\n  return %y\n}\n")
    module = parse(text, "int_add.ir")
    try:
        art = compile_module(module, WeightStore({})).artifacts["f"]
    except AnecError as e:  # a located constraint error, before any MIL reaches the device
        assert e.constraint == "ANE-FLOAT-COMPUTE" and e.span is not None and e.span.location == "int_add.ir:3:8"
        return
    rt.load(art).close()
    pytest.fail("int32 arithmetic compiled")
