"""Views of weight consts and layout helpers used by the legalize rules.

Legalize never copies or rewrites weight values: a rewrite that needs a
transposed or partial weight declares a new ``const(weight=...)`` that views
the stored checkpoint tensor through ``perm`` and ``slice`` (applied in that
order, then a reshape to the declared type; see ``anec.ir.weight_binding.materialize``).
These helpers decide whether such a view exists and build it, and build the
reshapes/transposes that move activations in and out of the conv layout,
folding them with the layout ops already there.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from anec.ir.ops import is_weight_const
from anec.ir.types import TensorType
from anec.passes.rewrite import Rewriter

if TYPE_CHECKING:
    from anec.ir.nodes import Node, Value


def weight_const(v: "Value") -> "Node | None":
    """The ``const(weight=...)`` node defining ``v``, or None."""
    p = v.producer
    return p if p is not None and is_weight_const(p) else None


def view_shape(const: "Node", rw: Rewriter) -> tuple[int, ...]:
    """Shape of a weight const's stored tensor after perm and slice, before the reshape.

    Exact when the weights are known; otherwise the declared shape (how
    random weights and most checkpoints store a tensor). A wrong guess cannot
    go unnoticed: materialize checks element counts.
    """
    store, key = rw.ctx.weights, const.attrs["weight"]
    if store is None or key not in store:
        return const.result.type.shape
    shape = tuple(store[key].shape)
    perm = const.attrs.get("perm")
    if perm is not None:
        if len(perm) != len(shape):
            return const.result.type.shape
        shape = tuple(shape[p] for p in perm)
    sl = const.attrs.get("slice")
    if sl is not None:
        axis, start, stop = sl
        if axis >= len(shape):
            return const.result.type.shape
        shape = shape[:axis] + (stop - start,) + shape[axis + 1:]
    return shape


def _view_axis(view: Sequence[int], declared: Sequence[int], axis: int) -> int | None:
    """The view axis whose slices are the declared ``axis``'s slices (row-major), or None."""
    lead = math.prod(declared[:axis])
    for v in range(len(view)):
        if math.prod(view[:v]) == lead and view[v] == declared[axis]:
            return v
    return None


def _slice_attrs(const: "Node", axis: int, start: int, stop: int,
                 rw: Rewriter) -> dict[str, Any] | None:
    """Attributes viewing ``[start, stop)`` of the declared ``axis`` of ``const``, or None."""
    vaxis = _view_axis(view_shape(const, rw), const.result.type.shape, axis)
    if vaxis is None:
        return None
    attrs = {k: v for k, v in const.attrs.items() if k in ("weight", "perm")}
    old = const.attrs.get("slice")
    if old is not None:
        if old[0] != vaxis:
            return None  # one slice per const: the stored view is already cut along another axis
        start, stop = old[1] + start, old[1] + stop
    attrs["slice"] = [vaxis, start, stop]
    return attrs


def can_slice(const: "Node | None", axis: int, rw: Rewriter) -> bool:
    """Whether ``const`` is a weight const that :func:`slice_weight` can cut along ``axis``."""
    return const is not None and _slice_attrs(const, axis, 0, 1, rw) is not None


def slice_weight(const: "Node", axis: int, start: int, stop: int, rw: Rewriter) -> "Value":
    """A new weight const viewing ``[start, stop)`` of the declared ``axis`` of ``const``."""
    attrs = _slice_attrs(const, axis, start, stop, rw)
    if attrs is None:
        raise ValueError(f"weight const %{const.result.name} cannot be sliced along axis {axis}")
    shape = list(const.result.type.shape)
    shape[axis] = stop - start
    return rw.const_weight(attrs, TensorType(const.result.type.dtype, tuple(shape)), suffix="s")


def transpose_weight_2d(const: "Node", swap: bool, out_shape: tuple[int, ...],
                        rw: Rewriter) -> "Value | None":
    """A weight const of a 2-D weight, transposed when ``swap``, declared ``out_shape``."""
    declared = const.result.type
    view = view_shape(const, rw)
    if declared.rank != 2 or tuple(view) != declared.shape:
        return None
    attrs = {k: v for k, v in const.attrs.items() if k in ("weight", "perm", "slice")}
    if swap:
        perm = list(attrs.get("perm") or [0, 1])
        if len(perm) != 2:
            return None
        attrs["perm"] = [perm[1], perm[0]]
        if "slice" in attrs:
            a, s0, s1 = attrs["slice"]
            attrs["slice"] = [1 - a, s0, s1]
        if attrs["perm"] == [0, 1]:
            del attrs["perm"]
    return rw.const_weight(attrs, TensorType(declared.dtype, out_shape), suffix="cw")


def reshape(rw: Rewriter, v: "Value", shape: Sequence[int]) -> "Value":
    """``reshape(v, shape)``, reading through a reshape producer; nothing if already shaped."""
    shape = tuple(shape)
    p = v.producer
    if p is not None and p.op == "reshape":
        v = p.operands[0]  # reshape(reshape(x)) == reshape(x)
    if v.type.shape == shape:
        return v
    return rw.op("reshape", v, shape=list(shape), suffix="r")


def permute(rw: Rewriter, v: "Value", perm: Sequence[int]) -> "Value":
    """``transpose(v, perm)``: composed with a transpose producer, a reshape when only unit
    dims move, nothing for the identity."""
    perm = list(perm)
    p = v.producer
    if p is not None and p.op == "transpose":
        inner = list(p.attrs["perm"])
        v, perm = p.operands[0], [inner[q] for q in perm]  # transpose(transpose(x, a), b)
    if perm == sorted(perm):
        return v
    moved = [i for i in perm if v.type.shape[i] != 1]
    if moved == sorted(moved):
        return reshape(rw, v, [v.type.shape[i] for i in perm])
    return rw.op("transpose", v, perm=perm, suffix="t")
