"""Cast folding: drop casts that change nothing, fold chains that lose nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from anec.ir.ops import OPS, const_literal, is_weight_const, literal_shape
from anec.ir.types import DType
from anec.passes.base import Pass, PassContext
from anec.passes.rewrite import Rewriter, rewrite_greedily

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node, Value

# dtype -> the dtypes whose every value it represents exactly (besides itself).
# fp32 has a 24-bit significand: it holds fp16, the 8-bit ints and bool, not int32.
# fp16 has an 11-bit significand and max 65504: it holds int8/uint8 (|v| <= 255).
_HOLDS: dict[DType, frozenset[DType]] = {
    DType.fp32: frozenset({DType.fp16, DType.int8, DType.uint8, DType.bool}),
    DType.fp16: frozenset({DType.int8, DType.uint8, DType.bool}),
    DType.int32: frozenset({DType.int8, DType.uint8, DType.bool}),
    DType.int8: frozenset({DType.bool}),
    DType.uint8: frozenset({DType.bool}),
    DType.bool: frozenset(),
}


def holds_all(wide: DType, narrow: DType) -> bool:
    """True when dtype ``wide`` represents every value of dtype ``narrow`` exactly."""
    return wide == narrow or narrow in _HOLDS[wide]


def _kind(d: DType) -> str:
    return "float" if d.is_float else "bool" if d == DType.bool else "int"


def folds(src: DType, a: DType, b: DType) -> bool:
    """``cast(cast(x, a), b) == cast(x, b)`` for every ``x`` of dtype ``src``.

    The inner cast must be exact (``a`` holds every value of ``src``); then the
    outer cast sees the same numbers. That suffices when conversions to ``b``
    depend on the value only, which fails in one corner: out-of-range values
    wrap (int -> int) but saturate (float -> int), so an int ``b`` that cannot
    hold every ``src`` value also needs ``a`` and ``src`` of the same kind.
    """
    if not holds_all(a, src):
        return False
    if _kind(b) != "int" or holds_all(b, src):
        return True
    return _kind(a) == _kind(src)


def _cast_value(node: "Node") -> "Value":
    return node.operands[0]


def _target(node: "Node") -> DType:
    return node.result.type.dtype


# ---- rules ------------------------------------------------------------------------


# cast(x, dtype(x)) -> x
def drop_identity_cast(node: "Node", rw: Rewriter) -> "Value | None":
    x = _cast_value(node)
    return x if x.type.dtype == _target(node) else None


# cast(cast(x, a), b) -> cast(x, b) if folds(dtype(x), a, b); -> x if also b == dtype(x)
def fold_cast_of_cast(node: "Node", rw: Rewriter) -> "Value | None":
    inner = _cast_value(node).producer
    if inner is None or inner.op != "cast":
        return None
    x = _cast_value(inner)
    if not folds(x.type.dtype, _target(inner), _target(node)):
        return None
    if x.type.dtype == _target(node):
        return x
    return rw.op("cast", x, dtype=_target(node))


def _stored_dtype(key: str, rw: Rewriter) -> DType | None:
    """The dtype the checkpoint stores ``key`` in; fp32 when no weights are known."""
    store = rw.ctx.weights
    if store is None or key not in store:
        return DType.fp32
    try:
        return DType.from_np(np.asarray(store[key]).dtype)
    except ValueError:
        return None  # e.g. float64: no anec dtype holds it, so never fold


# cast(const(weight=k) : a, b) -> const(weight=k) : b if a holds every stored value (floats)
def fold_cast_into_weight(node: "Node", rw: Rewriter) -> "Value | None":
    const = _cast_value(node).producer
    if const is None or not is_weight_const(const):
        return None
    a, b = const.result.type.dtype, _target(node)
    stored = _stored_dtype(const.attrs["weight"], rw)
    if not (a.is_float and b.is_float) or stored is None or not holds_all(a, stored):
        return None
    return rw.const_weight(dict(const.attrs), const.result.type.with_dtype(b), suffix=str(b),
                           at=node)


def _python_literal(arr: np.ndarray, scalar: bool) -> Any:
    if scalar and arr.size and np.all(arr == arr.reshape(-1)[0]):
        return arr.reshape(-1)[0].item()
    return arr.tolist()


# cast(const(value=v) : a, b) -> const(value=cast(v, b)) : b
def fold_cast_into_value(node: "Node", rw: Rewriter) -> "Value | None":
    const = _cast_value(node).producer
    if const is None or const.op != "const" or "value" not in const.attrs:
        return None
    literal = const.attrs["value"]
    held = const_literal(literal, const.result.type)
    converted = OPS["cast"].ref([held], {}, {"dtype": _target(node)})[0]
    converted = np.asarray(converted).astype(_target(node).np)
    value = _python_literal(converted, literal_shape(literal) == ())
    if value != value:  # a NaN scalar: keep the cast rather than write a NaN literal
        return None
    return rw.const_value(value, node.result.type, suffix=str(_target(node)), at=node)


CAST_RULES = {
    "cast": (drop_identity_cast, fold_cast_into_weight, fold_cast_into_value, fold_cast_of_cast),
}


@dataclass(frozen=True)
class FuseCasts(Pass):
    """Remove no-op casts and fold cast chains and casts of constants, losing nothing.

    Rules (each keeps returned names; the inner casts left unused are removed
    by the dce that follows in the pipeline):

    * ``cast(x, dtype(x)) -> x``;
    * ``cast(cast(x, a), b) -> cast(x, b)`` when ``a`` represents every value
      of ``dtype(x)`` (then the inner cast is exact and the outer one sees the
      original values), and ``-> x`` when also ``b == dtype(x)``; one corner
      needs more: out-of-range values wrap int -> int but saturate
      float -> int, so for an integer ``b`` that cannot hold every value of
      ``dtype(x)``, ``a`` and ``dtype(x)`` must be both ints or both floats;
    * ``cast(const(weight=k) : a, b) -> const(weight=k) : b`` for floats, when
      ``a`` represents every value of the stored checkpoint tensor (its dtype
      from the weights; fp32 assumed when the weights are not known);
    * ``cast(const(value=v) : a, b) -> const(value=v') : b`` with ``v'`` the
      converted literal.

    Before:
        func f(%x: fp16[1, 64, 1, 64]) {
          %a = cast(%x, dtype=fp32) : fp32[1, 64, 1, 64]
          %y = cast(%a, dtype=fp16) : fp16[1, 64, 1, 64]
          %w = const(weight="w") : fp32[64, 64, 1, 1]
          %wh = cast(%w, dtype=fp16) : fp16[64, 64, 1, 1]
          %s = const(value=0.5) : fp32[]
          %sh = cast(%s, dtype=fp16) : fp16[]
          %c = conv1x1(%y, %wh) : fp16[1, 64, 1, 64]
          %z = mul(%c, %sh) : fp16[1, 64, 1, 64]
          return %z
        }
    After: the casts are folded; ``%a``, ``%w`` and ``%s`` are left for the dce that follows.
        func f(%x: fp16[1, 64, 1, 64]) {
          %a = cast(%x, dtype=fp32) : fp32[1, 64, 1, 64]
          %w = const(weight="w") : fp32[64, 64, 1, 1]
          %wh = const(weight="w") : fp16[64, 64, 1, 1]
          %s = const(value=0.5) : fp32[]
          %sh = const(value=0.5) : fp16[]
          %c = conv1x1(%x, %wh) : fp16[1, 64, 1, 64]
          %z = mul(%c, %sh) : fp16[1, 64, 1, 64]
          return %z
        }

    Unchanged (negative examples, in order): fp32 -> fp16 -> fp32 rounds (fp16
    drops precision and range); int32 -> fp32 -> int32 (fp32 cannot hold every
    int32, e.g. 2**24 + 1); fp16 -> int8 -> fp32 (int8 truncates); int8 ->
    uint8 -> int32 (uint8 cannot hold negative values); int8 -> fp16 -> uint8
    (fp16 holds every int8, but -128 saturates to 0 from fp16 and wraps to 128
    from int8); ``cast(const(weight=k) : fp16, fp32)`` when the checkpoint
    stores k in fp32 (the fp16 declaration rounds the weights, the fold would
    not; fp32 is assumed when the weights are not known).
        func f(%x: fp32[1, 8, 1, 8], %i: int32[1, 8, 1, 8], %h: fp16[1, 8, 1, 8], %b: int8[1, 8, 1, 8]) {
          %x16 = cast(%x, dtype=fp16) : fp16[1, 8, 1, 8]
          %x32 = cast(%x16, dtype=fp32) : fp32[1, 8, 1, 8]
          %if = cast(%i, dtype=fp32) : fp32[1, 8, 1, 8]
          %ii = cast(%if, dtype=int32) : int32[1, 8, 1, 8]
          %h8 = cast(%h, dtype=int8) : int8[1, 8, 1, 8]
          %hf = cast(%h8, dtype=fp32) : fp32[1, 8, 1, 8]
          %bu = cast(%b, dtype=uint8) : uint8[1, 8, 1, 8]
          %bi = cast(%bu, dtype=int32) : int32[1, 8, 1, 8]
          %bh = cast(%b, dtype=fp16) : fp16[1, 8, 1, 8]
          %bu2 = cast(%bh, dtype=uint8) : uint8[1, 8, 1, 8]
          %w = const(weight="w") : fp16[8, 8, 1, 1]
          %w32 = cast(%w, dtype=fp32) : fp32[8, 8, 1, 1]
          return %x32, %ii, %hf, %bi, %bu2, %w32
        }
    """

    name: ClassVar[str] = "fuse-casts"
    tracked: ClassVar[bool] = True

    def run(self, graph: Graph, ctx: PassContext) -> None:
        rewrite_greedily(graph, CAST_RULES, Rewriter(graph, ctx, self.name))
