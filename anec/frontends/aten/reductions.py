"""ATen lowerings of reductions, softmax and normalizations.

Reductions over whole dims apply to the physical axes of the dims' groups
(``reduce_sum``/``reduce_mean``/``reduce_max`` with ``keep_dims``), so a
reduction never moves data; ``var``, the vector 2-norm, layer, group and batch
norms are compositions of them (batch norm in eval mode is folded into a scale
and shift at import, or into the conv it follows).
"""

from __future__ import annotations

import math
from typing import Sequence

from anec.frontends.aten.context import Lowering
from anec.frontends.aten.host import host_value
from anec.frontends.aten.table import Family
from anec.frontends.aten.values import Args, Const, Deferred, Lowered, Operand, dim_list, kind_of
from anec.frontends.tensor_views import View, as_view, refine, reshape_view, single_axis

REDUCTIONS = Family("reductions and normalizations")


def reduce_over(lw: Lowering, x: Operand, dim: int | Sequence[int] | None, keepdim: bool, op: str,
                kind: str = "float") -> View:
    """``op`` (``reduce_sum``, ``reduce_mean``, ``reduce_max``) of ``x`` over ``dim`` (every dim when None)."""
    v = lw.view(x)
    rank = len(v.shape)
    dims = dim_list(dim, rank)
    g = v.groups()
    axes = sorted(a for d in dims for a in g[d])
    if keepdim:
        shape = tuple(1 if i in dims else s for i, s in enumerate(v.shape))
    else:
        shape = tuple(s for i, s in enumerate(v.shape) if i not in dims)
    if not axes:
        return reshape_view(lw.em, v, shape)
    r = lw.em.op(op, v.phys, axes=axes, keep_dims=True)
    order = tuple(a for a in v.order if a not in axes)
    out = refine(lw.em, r, order, shape, kind)
    assert out is not None
    return out


@REDUCTIONS.op("sum.dim_IntList", "sum.default", ir="reduce_sum over the dims' axes (keep_dims)")
def lower_sum(lw: Lowering, a: Args) -> Lowered:
    kind = "int" if kind_of(a["self"]) != "float" else "float"
    return reduce_over(lw, a["self"], a.get("dim"), bool(a.get("keepdim", False)), "reduce_sum", kind)


@REDUCTIONS.op("mean.dim", "mean.default", ir="reduce_mean")
def lower_mean(lw: Lowering, a: Args) -> Lowered:
    return reduce_over(lw, a["self"], a.get("dim"), bool(a.get("keepdim", False)), "reduce_mean")


@REDUCTIONS.op("amax.default", ir="reduce_max")
def lower_amax(lw: Lowering, a: Args) -> Lowered:
    return reduce_over(lw, a["self"], a.get("dim"), bool(a.get("keepdim", False)), "reduce_max",
                   kind_of(a["self"]))


@REDUCTIONS.op("max.dim", ir="reduce_max (values); indices: host argmax at an output")
def lower_max_dim(lw: Lowering, a: Args) -> Lowered:
    values = reduce_over(lw, a["self"], a["dim"], bool(a["keepdim"]), "reduce_max", kind_of(a["self"]))
    x = a["self"]
    return (values, Deferred(lambda: host_value(lw, x, "argmax", dim=a["dim"], keepdim=bool(a["keepdim"])),
                             lw.node))


@REDUCTIONS.op("max.default", ir="reduce_max over all dims")
def lower_max_all(lw: Lowering, a: Args) -> Lowered:
    return reduce_over(lw, a["self"], None, False, "reduce_max", kind_of(a["self"]))


def _var(lw: Lowering, x: Operand, dim: int | Sequence[int] | None, correction: float | None,
         keepdim: bool) -> tuple[View, View]:
    v = lw.view(x)
    dims = dim_list(dim, len(v.shape))
    n = math.prod(v.shape[d] for d in dims)
    c = 1.0 if correction is None else float(correction)
    mu = reduce_over(lw, v, dims, True, "reduce_mean")
    xc = lw.binary("sub", v, mu)
    ss = reduce_over(lw, lw.binary("mul", xc, xc), dims, keepdim, "reduce_mean")
    if n - c <= 0:
        raise lw.fail(f"variance of {n} elements with correction {c:g}")
    if c:
        ss = lw.binary("mul", ss, n / (n - c))
    mean = mu if keepdim else reshape_view(lw.em, mu, ss.shape)
    return ss, mean


@REDUCTIONS.op("var.correction", "var.dim", ir="reduce_mean((x - mean)^2) * n / (n - correction)")
def lower_var(lw: Lowering, a: Args) -> Lowered:
    corr = a.get("correction")
    if "unbiased" in a:
        corr = 1 if a["unbiased"] else 0
    return _var(lw, a["self"], a.get("dim"), corr, bool(a.get("keepdim", False)))[0]


@REDUCTIONS.op("var_mean.correction", ir="the var composition; the mean is its reduce_mean")
def lower_var_mean(lw: Lowering, a: Args) -> Lowered:
    return _var(lw, a["self"], a.get("dim"), a.get("correction"), bool(a.get("keepdim", False)))


@REDUCTIONS.op("linalg_vector_norm.default", ir="sqrt(reduce_sum(x * x)) (ord 2)")
def lower_vector_norm(lw: Lowering, a: Args) -> Lowered:
    if float(a["ord"]) != 2.0:
        raise lw.fail(f"vector norm of order {a['ord']}", "only the 2-norm is supported")
    x = a["self"]
    s = reduce_over(lw, lw.binary("mul", x, x), a.get("dim"), bool(a.get("keepdim", False)), "reduce_sum")
    return lw.unary("sqrt", s)


@REDUCTIONS.op("_softmax.default", "softmax.int", ir="softmax(axis) on the dim's physical axis")
def lower_softmax(lw: Lowering, a: Args) -> Lowered:
    v = lw.view(a["self"])
    dim = a["dim"] % len(v.shape) if v.shape else 0
    v, axis = single_axis(lw.em, v, dim)
    if axis is None:  # softmax over a dim of size 1 is 1
        return lw.binary("add", lw.binary("mul", v, 0.0), 1.0)
    return View(lw.em.op("softmax", v.phys, axis=axis), v.order, v.shape)


def _normalize(lw: Lowering, x: View, dims: list[int], eps: float) -> tuple[View, View, View]:
    """``(x - mean) * rsqrt(var + eps)`` over ``dims``: (result, mean, rstd)."""
    mu = reduce_over(lw, x, dims, True, "reduce_mean")
    xc = lw.binary("sub", x, mu)
    var = reduce_over(lw, lw.binary("mul", xc, xc), dims, True, "reduce_mean")
    eps = float(eps)  # 0 -> the smallest fp16 subnormal (rsqrt(0) of a constant row); < 0 as given
    rstd = lw.unary("rsqrt", lw.binary("add", var, eps if eps < 0 else max(eps, 2.0 ** -24)))
    return lw.binary("mul", xc, rstd), mu, rstd


@REDUCTIONS.op("native_layer_norm.default",
      ir="(x - reduce_mean) * rsqrt(reduce_mean((x - mean)^2) + eps) * w + b")
def lower_layer_norm(lw: Lowering, a: Args) -> Lowered:
    x = lw.view(a["input"])
    k = len(a["normalized_shape"])
    dims = list(range(len(x.shape) - k, len(x.shape)))
    y, mu, rstd = _normalize(lw, x, dims, a["eps"])
    if a.get("weight") is not None:
        y = lw.binary("mul", y, a["weight"])
    if a.get("bias") is not None:
        y = lw.binary("add", y, a["bias"])
    return (y, mu, rstd)


@REDUCTIONS.op("native_group_norm.default", ir="reshape to groups, the layer-norm composition, reshape back")
def lower_group_norm(lw: Lowering, a: Args) -> Lowered:
    x = lw.view(a["input"])
    n, c = x.shape[0], x.shape[1]
    g = int(a["group"])
    rest = x.shape[2:]
    xg = reshape_view(lw.em, x, (n, g, (c // g) * math.prod(rest)))
    yg, mu, rstd = _normalize(lw, xg, [2], a["eps"])
    y = reshape_view(lw.em, as_view(lw.em, yg), x.shape)
    bshape = (c,) + (1,) * len(rest)
    if a.get("weight") is not None:
        y = lw.binary("mul", y, _reshaped_const(lw, a["weight"], bshape))
    if a.get("bias") is not None:
        y = lw.binary("add", y, _reshaped_const(lw, a["bias"], bshape))
    return (y, reshape_view(lw.em, as_view(lw.em, mu), (n, g)),
            reshape_view(lw.em, as_view(lw.em, rstd), (n, g)))


def _reshaped_const(lw: Lowering, c: Operand, shape: tuple[int, ...]) -> Const | View:
    if isinstance(c, Const):
        return Const(c.value.reshape(shape), c.origin.reshape(shape) if c.origin else None)
    return reshape_view(lw.em, lw.view(c), shape)


@REDUCTIONS.op("_native_batch_norm_legit_no_training.default",
      ir="folded into the weight and bias of the conv it follows (its only user); else x * scale "
         "+ shift, scale and shift folded from the running statistics at import")
def lower_batch_norm(lw: Lowering, a: Args) -> Lowered:
    import torch

    if lw.node in lw.folded:  # folded into the conv that computes its input
        return (a["input"], Const(torch.zeros(0)), Const(torch.zeros(0)))
    x = lw.view(a["input"])
    mean, var = a["running_mean"], a["running_var"]
    if not isinstance(mean, Const) or not isinstance(var, Const):
        raise lw.fail("batch norm with running statistics computed in the model")
    c = x.shape[1]
    w = a.get("weight")
    b = a.get("bias")
    wv = w.value.double() if isinstance(w, Const) else torch.ones(c, dtype=torch.float64)
    bv = b.value.double() if isinstance(b, Const) else torch.zeros(c, dtype=torch.float64)
    if (w is not None and not isinstance(w, Const)) or (b is not None and not isinstance(b, Const)):
        raise lw.fail("batch norm with an affine weight computed in the model")
    scale = wv / torch.sqrt(var.value.double() + float(a["eps"]))
    shift = bv - mean.value.double() * scale
    bshape = (c,) + (1,) * (len(x.shape) - 2)
    y = lw.binary("mul", x, Const(scale.float().reshape(bshape)))
    y = lw.binary("add", y, Const(shift.float().reshape(bshape)))
    return (y, Const(torch.zeros(0)), Const(torch.zeros(0)))
