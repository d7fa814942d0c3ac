"""Hypothesis strategies for random *valid* IR modules.

Graphs are grown one node at a time: an op is drawn, its operands come from
the values built so far (or from fresh consts shaped to fit, for conv1x1 and
matmul), its attributes are drawn from the op's schema, and the result types
come from ``ops.infer_types``. A draw the op rejects (``InferError``) is
simply skipped, so every generated module verifies. Names, weight keys,
annotation values and float attributes are deliberately awkward: digits-only
value names, keywords as func names, strings needing escapes, ``-0.0``,
``1e-300``, ``inf``.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

from anec.ir import ops
from anec.ir.graph import Graph, Module, Value, WeightSource
from anec.ir.types import DType, TensorType

IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,7}", fullmatch=True) | st.sampled_from(
    ["func", "return", "weights", "true", "nan", "inf", "fp16", "const", "add", "x"]
)
VALUE_NAME = (
    IDENT
    | st.from_regex(r"[0-9]{1,3}", fullmatch=True)
    | st.from_regex(r"[A-Za-z0-9_]{1,8}", fullmatch=True)
)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
FLOATS = st.floats(allow_nan=False, width=64) | st.sampled_from(
    [0.0, -0.0, 1e-05, 0.125, 1e-300, 1e16]
)
DTYPES = st.sampled_from(list(DType))
DATA_DTYPES = st.sampled_from([DType.fp16, DType.fp32, DType.fp16, DType.int32])

LITERALS = st.recursive(
    st.integers(-(2**70), 2**70) | FLOATS | TEXT | st.booleans() | DTYPES,
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)
"""Annotation values: any literal the IR can spell."""

_INT_RANGE = {DType.int32: (-(2**31), 2**31 - 1), DType.int8: (-128, 127), DType.uint8: (0, 255)}


def shapes(min_rank: int = 0, max_rank: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(1, 4), min_size=min_rank, max_size=max_rank).map(tuple)


def _element(dtype: DType) -> st.SearchStrategy[Any]:
    if dtype.is_float:
        return st.integers(-4, 4) | st.floats(-1e4, 1e4, width=16)
    if dtype == DType.bool:
        return st.booleans()
    lo, hi = _INT_RANGE[dtype]
    return st.integers(lo, hi)


def _nested(draw, dtype: DType, shape: tuple[int, ...]) -> Any:
    if not shape:
        return draw(_element(dtype))
    return [_nested(draw, dtype, shape[1:]) for _ in range(shape[0])]


class _Grower:
    """Adds random valid nodes to one graph."""

    def __init__(self, draw, graph: Graph, taken: set[str]) -> None:
        self.draw = draw
        self.g = graph
        self.taken = taken
        self.keys: set[str] = set()

    def name(self) -> str:
        name = self.draw(VALUE_NAME)
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def pool(self, pred=lambda v: True) -> list[Value]:
        return [v for v in self.g.values() if pred(v)]

    def pick(self, pred=lambda v: True) -> Value | None:
        values = self.pool(pred)
        return self.draw(st.sampled_from(values)) if values else None

    def add(
        self,
        op: str,
        operands: list[Value],
        attrs: dict[str, Any],
        optional: dict[str, Value] | None = None,
        declared: TensorType | None = None,
    ) -> list[Value]:
        optional = optional or {}
        try:
            types = ops.infer_types(
                op,
                [v.type for v in operands],
                {k: v.type for k, v in optional.items()},
                attrs,
                declared=declared,
            )
        except ops.InferError:
            return []
        node = self.g.create_node(
            op, operands, attrs, types, names=[self.name() for _ in types], optional=optional
        )
        if self.draw(st.integers(0, 4)) == 0:
            node.annotations = self.draw(st.dictionaries(IDENT, LITERALS, max_size=3))
        return node.results

    # -- one method per family of ops
    def const_value(
        self, dtype: DType | None = None, shape: tuple[int, ...] | None = None
    ) -> list[Value]:
        dtype = dtype or self.draw(DTYPES)
        shape = self.draw(shapes(0, 3)) if shape is None else shape
        if math.prod(shape) > 8 or self.draw(st.booleans()):
            value = self.draw(_element(dtype))  # a scalar fills the shape
        else:
            value = _nested(self.draw, dtype, shape)
        return self.add("const", [], {"value": value}, declared=TensorType(dtype, shape))

    def const_weight(
        self, dtype: DType | None = None, shape: tuple[int, ...] | None = None
    ) -> list[Value]:
        dtype = dtype or self.draw(st.sampled_from([DType.fp16, DType.fp32]))
        shape = self.draw(shapes(1, 4)) if shape is None else shape
        key = self.draw(TEXT.filter(bool))
        while key in self.keys:  # one stored tensor per key: its consts agree on its shape
            key += "_"
        self.keys.add(key)
        attrs: dict[str, Any] = {"weight": key}
        if self.draw(st.booleans()):
            attrs["perm"] = self.draw(st.permutations(list(range(len(shape)))))
        if self.draw(st.integers(0, 3)) == 0:
            axis = self.draw(st.integers(0, len(shape) - 1))
            start = self.draw(st.integers(0, 3))
            attrs["slice"] = [axis, start, start + shape[axis]]
            # a whole view of the same key first, so that the stored shape is known
            # (random weights, the interpreter): the slice's stop is the stored extent
            stop = attrs["slice"][2]
            view = list(shape)
            view[axis] = stop
            stored = list(view)
            for i, p in enumerate(attrs.get("perm", range(len(shape)))):
                stored[p] = view[i]
            self.add("const", [], {"weight": attrs["weight"]}, declared=TensorType(dtype, tuple(stored)))
        return self.add("const", [], attrs, declared=TensorType(dtype, shape))

    def unary(self) -> list[Value]:
        x = self.pick(lambda v: v.type.dtype.is_float)
        if x is None:
            return []
        op = self.draw(st.sampled_from(sorted(ops.UNARY)))
        attrs = {}
        if op == "gelu" and self.draw(st.booleans()):
            attrs["mode"] = self.draw(st.sampled_from(["exact", "tanh"]))
        return self.add(op, [x], attrs)

    def cast(self) -> list[Value]:
        x = self.pick()
        return self.add("cast", [x], {"dtype": self.draw(DTYPES)}) if x else []

    def binary(self) -> list[Value]:
        x = self.pick(lambda v: v.type.dtype in ops.NUMERIC)
        if x is None:
            return []
        y = self.pick(lambda v: v.type.dtype == x.type.dtype)
        if self.draw(st.booleans()):  # a scalar or broadcast const fits any x
            shape = tuple(self.draw(st.sampled_from([1, d])) for d in x.type.shape)
            y = (self.const_value(x.type.dtype, shape) or [y])[0]
        return self.add(self.draw(st.sampled_from(sorted(ops.BINARY))), [x, y], {})

    def softmax(self) -> list[Value]:
        x = self.pick(lambda v: v.type.dtype.is_float and v.type.rank > 0)
        if x is None:
            return []
        attrs = {}
        if self.draw(st.booleans()):
            attrs["axis"] = self.draw(st.integers(-x.type.rank, x.type.rank - 1))
        return self.add("softmax", [x], attrs)

    def reduce(self) -> list[Value]:
        x = self.pick(lambda v: v.type.dtype in ops.NUMERIC and v.type.rank > 0)
        if x is None:
            return []
        axes = self.draw(st.lists(st.integers(0, x.type.rank - 1), min_size=1, unique=True))
        attrs: dict[str, Any] = {"axes": axes}
        if self.draw(st.booleans()):
            attrs["keep_dims"] = self.draw(st.booleans())
        return self.add(self.draw(st.sampled_from(sorted(ops.REDUCTIONS))), [x], attrs)

    def reshape(self) -> list[Value]:
        x = self.pick()
        if x is None:
            return []
        shape = list(self.draw(st.permutations(list(x.type.shape)))) + [1] * self.draw(
            st.integers(0, 1)
        )
        if shape and self.draw(st.booleans()):
            shape[self.draw(st.integers(0, len(shape) - 1))] = -1
        return self.add("reshape", [x], {"shape": shape})

    def transpose(self) -> list[Value]:
        x = self.pick()
        if x is None:
            return []
        return self.add(
            "transpose", [x], {"perm": self.draw(st.permutations(list(range(x.type.rank))))}
        )

    def slice(self) -> list[Value]:
        x = self.pick(lambda v: v.type.rank > 0)
        if x is None:
            return []
        begin = [self.draw(st.integers(-d, d - 1)) for d in x.type.shape]
        end = [self.draw(st.integers(-d, d)) for d in x.type.shape]
        attrs: dict[str, Any] = {"begin": begin, "end": end}
        if self.draw(st.booleans()):
            attrs["stride"] = [self.draw(st.integers(1, 2)) for _ in x.type.shape]
        return self.add("slice", [x], attrs)

    def split(self) -> list[Value]:
        x = self.pick(lambda v: v.type.rank > 0 and v.type.dtype != DType.int8)
        if x is None:
            return []
        axis = self.draw(st.integers(0, x.type.rank - 1))
        n = x.type.shape[axis]
        cuts = sorted(self.draw(st.sets(st.integers(1, n - 1), max_size=2))) if n > 1 else []
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]
        return self.add("split", [x], {"axis": axis, "sizes": sizes})

    def pad(self) -> list[Value]:
        x = self.pick(lambda v: v.type.dtype.is_float)
        if x is None:
            return []
        attrs: dict[str, Any] = {
            "before": [self.draw(st.integers(0, 2)) for _ in x.type.shape],
            "after": [self.draw(st.integers(0, 2)) for _ in x.type.shape],
        }
        if self.draw(st.booleans()):
            attrs["value"] = self.draw(FLOATS)
        return self.add("pad", [x], attrs)

    def concat(self) -> list[Value]:
        x = self.pick(lambda v: v.type.rank > 0)
        if x is None:
            return []
        same = self.pool(lambda v: v.type == x.type)
        parts = self.draw(st.lists(st.sampled_from(same), min_size=2, max_size=3))
        return self.add(
            "concat", parts, {"axis": self.draw(st.integers(-x.type.rank, x.type.rank - 1))}
        )

    def conv1x1(self) -> list[Value]:
        x = self.pick(lambda v: v.type.dtype.is_float and v.type.rank == 4)
        if x is None:
            return []
        cout = self.draw(st.integers(1, 4))
        w = self.const_weight(x.type.dtype, (cout, x.type.shape[1], 1, 1))
        optional = {}
        if self.draw(st.booleans()):
            optional["bias"] = self.const_weight(x.type.dtype, (1, cout, 1, 1))[0]
        return self.add("conv1x1", [x, w[0]], {}, optional) if w else []

    def matmul(self) -> list[Value]:
        x = self.pick(lambda v: v.type.dtype.is_float and v.type.rank >= 2)
        if x is None:
            return []
        attrs = {}
        if self.draw(st.booleans()):
            attrs["transpose_x"] = self.draw(st.booleans())
        k = x.type.shape[-2] if attrs.get("transpose_x") else x.type.shape[-1]
        y = self.const_weight(x.type.dtype, (k, self.draw(st.integers(1, 4))))
        return self.add("matmul", [x, y[0]], attrs) if y else []


_STEPS = [
    "const_value",
    "const_weight",
    "unary",
    "unary",
    "cast",
    "binary",
    "binary",
    "softmax",
    "reduce",
    "reshape",
    "transpose",
    "slice",
    "split",
    "pad",
    "concat",
    "conv1x1",
    "matmul",
]


@st.composite
def graphs(draw, name: str | None = None, max_steps: int = 12) -> Graph:
    """A random valid func."""
    g = Graph(name if name is not None else draw(IDENT))
    grow = _Grower(draw, g, set())
    for _ in range(draw(st.integers(0, 3))):
        dtype = draw(DATA_DTYPES)
        g.add_input(grow.name(), TensorType(dtype, draw(shapes(0, 4))))
    for _ in range(draw(st.integers(1, max_steps))):
        getattr(grow, draw(st.sampled_from(_STEPS)))()
    results = [v for n in g.nodes for v in n.results]
    if not results:
        results = grow.const_value()
    g.set_outputs(draw(st.lists(st.sampled_from(results), min_size=1, max_size=3, unique_by=id)))
    return g


@st.composite
def modules(draw, max_funcs: int = 3) -> Module:
    """A random valid module: weights directives and 1..max_funcs funcs."""
    m = Module()
    for path in draw(st.lists(TEXT, max_size=2)):
        m.weight_sources.append(WeightSource(path))
    for name in draw(st.lists(IDENT, min_size=1, max_size=max_funcs, unique=True)):
        m.add_func(draw(graphs(name)))
    return m
