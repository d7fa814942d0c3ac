"""The VJP column of the op table: each op's vector-Jacobian product as IR.

A rule ``rule(c, xs, ys, gs, attrs) -> [cotangent per operand or None]``
receives the forward node's operands ``xs`` and results ``ys`` as values of
the backward func, the cotangent of each result ``gs`` (None where a result
has none), and the node's attributes; it emits IR through the context ``c``
(:class:`anec.autodiff.Ctx`: ``c.op``, ``c.scalar``, ``c.sum_to``, ``c.full``,
``c.needs[i]``, ``c.fail``) and returns the operands' cotangents. Each op's
row in :mod:`anec.ir.ops` names its rule (``OpDef.vjp``); :func:`anec.autodiff.grad`
runs them. See :mod:`anec.autodiff` for broadcast-shaped cotangents, the fused
rules and the approximations stated below (relu, reduce_max, gelu).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from anec.ir.types import DType

Value = Any  # a value of the backward func (anec.ir.graph.Value)
Attrs = Mapping[str, Any]  # the forward node's attributes




def vjp_identity(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    return [gs[0]]


def vjp_neg(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    return [c.op("mul", gs[0], c.scalar(-1.0, gs[0]))]


def vjp_exp(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    return [c.op("mul", gs[0], ys[0])]


def vjp_sqrt(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    """d sqrt(x) = 0.5 / sqrt(x)."""
    inv = c.op("pow", ys[0], c.scalar(-1.0, ys[0]))
    return [c.op("mul", c.op("mul", gs[0], inv), c.scalar(0.5, inv))]


def vjp_rsqrt(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    """d x**-0.5 = -0.5 * y**3."""
    y = ys[0]
    y3 = c.op("mul", c.op("mul", y, y), y)
    return [c.op("mul", c.op("mul", gs[0], y3), c.scalar(-0.5, y))]


def vjp_relu(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    """The step is ``sigmoid(x * K)`` (K = 2**15 in fp16, 2**60 in fp32): exactly 1 or 0 for
    ``|x| >= 2**-11`` (fp16), 1/2 at 0 (torch takes 0 there)."""
    x = xs[0]
    k = 2.0 ** 15 if x.type.dtype == DType.fp16 else 2.0 ** 60
    step = c.op("sigmoid", c.op("mul", x, c.scalar(k, x)))
    return [c.op("mul", gs[0], step)]


def vjp_tanh(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    y = ys[0]
    one_m = c.op("sub", c.scalar(1.0, y), c.op("mul", y, y))
    return [c.op("mul", gs[0], one_m)]


def vjp_sigmoid(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    y = ys[0]
    return [c.op("mul", gs[0], c.op("mul", y, c.op("sub", c.scalar(1.0, y), y)))]


_GELU_K0 = math.sqrt(2.0 / math.pi)
_GELU_K1 = 0.044715


def vjp_gelu(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    """Derivative of ``0.5 x (1 + tanh(k0 (x + k1 x^3)))``, the formula the ANE computes for both
    modes (max abs difference to the exact-GELU derivative: 8.7e-4, near |x| = 2)."""
    x = xs[0]
    x2 = c.op("mul", x, x)
    inner = c.op("mul", c.op("add", c.scalar(1.0, x), c.op("mul", x2, c.scalar(_GELU_K1, x))), x)
    t = c.op("tanh", c.op("mul", inner, c.scalar(_GELU_K0, x)))
    half_1pt = c.op("mul", c.op("add", t, c.scalar(1.0, x)), c.scalar(0.5, x))
    sech2 = c.op("sub", c.scalar(1.0, x), c.op("mul", t, t))
    du = c.op("add", c.op("mul", x2, c.scalar(3.0 * _GELU_K1 * _GELU_K0, x)), c.scalar(_GELU_K0, x))
    d = c.op("add", half_1pt, c.op("mul", c.op("mul", c.op("mul", x, c.scalar(0.5, x)), sech2), du))
    return [c.op("mul", gs[0], d)]


def vjp_cast(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    x = xs[0]
    if not x.type.dtype.is_float:
        return [None]
    return [c.op("cast", gs[0], dtype=x.type.dtype.value)]


def _transposed_weight(c: Any, w: Value) -> Value:
    """``w [Cout, Cin, 1, 1]`` as ``[Cin, Cout, 1, 1]``: the same checkpoint tensor under another
    ``perm=`` when the const's view allows it (the stored tensor, permuted, is ``[Cout, Cin]`` or
    ``[Cout, Cin, 1, 1]``, and no slice), else a transpose op."""
    p = w.producer
    shapes = c.b.graph.facts.weight_shapes
    if p is not None and p.op == "const" and "weight" in p.attrs and p.attrs.get("slice") is None \
            and p.attrs["weight"] in shapes:
        shape = tuple(int(d) for d in shapes[p.attrs["weight"]])
        perm = list(p.attrs.get("perm") or range(len(shape)))
        permuted = tuple(shape[i] for i in perm)
        co, ci = w.type.shape[:2]
        if permuted in ((co, ci), (co, ci, 1, 1)):
            new = [perm[1], perm[0], *perm[2:]]
            v = c.b.const_weight(p.attrs["weight"], f"{w.type.dtype.value}[{ci}, {co}, 1, 1]",
                                 name=c.b.graph.fresh_name(f"{w.name}_t"), perm=new)
            v.producer.span = p.span
            return v
    return c.op("transpose", w, perm=[1, 0, 2, 3])


def vjp_conv1x1(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    """y = W x (+ b) over channels at every position: dx = W^T dy, dW = sum over positions of
    dy x^T, db = sum of dy over N, H, W."""
    x, w = xs[0], xs[1]
    g = c.full(gs[0], ys[0].type.shape)
    n, ci, h, wd = x.type.shape
    co = w.type.shape[0]
    out: list[Value | None] = [None] * len(xs)
    if c.needs[0]:
        out[0] = c.op("conv1x1", g, _transposed_weight(c, w))
    if c.needs[1]:
        g3 = c.op("reshape", g, shape=[n, co, h * wd])
        x3 = c.op("reshape", x, shape=[n, ci, h * wd])
        dw = c.op("matmul", g3, x3, transpose_y=True)  # [n, co, ci]
        if n != 1:
            dw = c.op("reduce_sum", dw, axes=[0], keep_dims=False)
        out[1] = c.op("reshape", dw, shape=[co, ci, 1, 1])
    if len(xs) > 2 and c.needs[2]:
        out[2] = c.sum_to(g, xs[2].type.shape)
    return out


def vjp_matmul(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    """z = X' Y' (X' = X^T if transpose_x, ...): dX' = G Y'^T, dY' = X'^T G, as matmuls with
    transpose flags; summed over broadcast batch dims."""
    x, y = xs
    if x.type.rank < 2 or y.type.rank < 2:
        raise c.fail("matmul of a rank-1 operand", "reshape the vector to a [1, K] or [K, 1] matrix")
    g = c.full(gs[0], ys[0].type.shape)
    tx, ty = bool(attrs.get("transpose_x", False)), bool(attrs.get("transpose_y", False))
    out: list[Value | None] = [None, None]
    if c.needs[0]:
        if not tx:
            dx = c.op("matmul", g, y, transpose_y=not ty)
        else:
            dx = c.op("matmul", y, g, transpose_x=ty, transpose_y=True)
        out[0] = c.sum_to(dx, x.type.shape)
    if c.needs[1]:
        if not ty:
            dy = c.op("matmul", x, g, transpose_x=not tx)
        else:
            dy = c.op("matmul", g, x, transpose_x=True, transpose_y=tx)
        out[1] = c.sum_to(dy, y.type.shape)
    return out


def vjp_add(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    return [c.sum_to(gs[0], x.type.shape) if need else None for x, need in zip(xs, c.needs)]


def vjp_sub(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    out: list[Value | None] = [None, None]
    if c.needs[0]:
        out[0] = c.sum_to(gs[0], xs[0].type.shape)
    if c.needs[1]:
        out[1] = c.sum_to(c.op("mul", gs[0], c.scalar(-1.0, gs[0])), xs[1].type.shape)
    return out


def vjp_mul(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    x, y = xs
    out: list[Value | None] = [None, None]
    if c.needs[0]:
        out[0] = c.sum_to(c.op("mul", gs[0], y), x.type.shape)
    if c.needs[1]:
        out[1] = c.sum_to(c.op("mul", gs[0], x), y.type.shape)
    return out


def vjp_pow(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    """d x**y / dx = y x**(y - 1); the exponent is not differentiable (the IR has no log)."""
    x, y = xs
    if c.needs[1]:
        raise c.fail("the gradient with respect to the exponent needs log(x), which the IR does not have",
                     "make the exponent a constant")
    if not c.needs[0]:
        return [None, None]
    ym1 = c.op("sub", y, c.scalar(1.0, y))
    d = c.op("mul", c.op("pow", x, ym1), y)
    return [c.sum_to(c.op("mul", gs[0], d), x.type.shape), None]


def vjp_softmax(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    """dx = y (g - sum(g y)) over the axis."""
    y = ys[0]
    g = gs[0]
    gy = c.op("mul", g, y)
    s = c.op("reduce_sum", gy, axes=[int(attrs.get("axis", -1))], keep_dims=True)
    return [c.op("mul", y, c.op("sub", g, s))]


def _keep_shape(x: Value, axes: Sequence[int]) -> list[int]:
    r = x.type.rank
    ax = {a % r for a in axes} if r else set()
    return [1 if i in ax else d for i, d in enumerate(x.type.shape)]


def vjp_reduce_sum(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    g = gs[0]
    keep = _keep_shape(xs[0], attrs["axes"])
    if list(g.type.shape) != keep:
        g = c.op("reshape", g, shape=keep)
    return [g]  # broadcast-shaped: accumulation and elementwise rules broadcast it


def vjp_reduce_mean(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    x = xs[0]
    keep = _keep_shape(x, attrs["axes"])
    n = int(np.prod(x.type.shape)) // max(1, int(np.prod(keep)))
    g = gs[0]
    if list(g.type.shape) != keep:
        g = c.op("reshape", g, shape=keep)
    return [c.op("mul", g, c.scalar(1.0 / n, g))]


def vjp_reduce_max(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    """The gradient goes to the maximum, split evenly among ties (as torch's amax):
    ``e = exp((x - max) * K)``, ``dx = g e / sum(e)``, K = 2**15 (fp16) or 2**60 (fp32); exact
    except for values within 2**-11 (fp16) of the maximum."""
    x = xs[0]
    keep = _keep_shape(x, attrs["axes"])
    m = ys[0] if list(ys[0].type.shape) == keep else c.op("reshape", ys[0], shape=keep)
    g = gs[0] if list(gs[0].type.shape) == keep else c.op("reshape", gs[0], shape=keep)
    k = 2.0 ** 15 if x.type.dtype == DType.fp16 else 2.0 ** 60
    e = c.op("exp", c.op("mul", c.op("sub", x, m), c.scalar(k, x)))
    z = c.op("reduce_sum", e, axes=list(attrs["axes"]), keep_dims=True)
    return [c.op("mul", c.op("mul", e, c.op("pow", z, c.scalar(-1.0, z))), g)]


def vjp_reshape(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    g = c.full(gs[0], ys[0].type.shape)
    return [c.op("reshape", g, shape=list(xs[0].type.shape))]


def vjp_transpose(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    perm = list(attrs["perm"])
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return [c.op("transpose", gs[0], perm=inv)]


def vjp_slice(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    x = xs[0]
    stride = attrs.get("stride") or [1] * x.type.rank
    if any(int(s) != 1 for s in stride):
        raise c.fail("the gradient of a strided slice is a scatter, which the IR does not have",
                     "slice with stride 1 (reshape to expose the stride as an axis first)")
    g = c.full(gs[0], ys[0].type.shape)
    before, after = [], []
    for b, e, d in zip(attrs["begin"], attrs["end"], x.type.shape):
        start, stop, _ = slice(b, e, 1).indices(d)
        stop = max(stop, start)
        before.append(start)
        after.append(d - stop)
    if not any(before) and not any(after):
        return [g]
    return [c.op("pad", g, before=before, after=after, value=0.0)]


def vjp_split(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    x = xs[0]
    axis = int(attrs["axis"]) % x.type.rank
    total: Value | None = None
    start = 0
    for y, g in zip(ys, gs):
        size = y.type.shape[axis]
        if g is not None:
            before = [0] * x.type.rank
            after = [0] * x.type.rank
            before[axis] = start
            after[axis] = x.type.shape[axis] - start - size
            part = c.op("pad", c.full(g, y.type.shape), before=before, after=after, value=0.0)
            total = part if total is None else c.op("add", total, part)
        start += size
    return [total]


def vjp_pad(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    x = xs[0]
    g = c.full(gs[0], ys[0].type.shape)
    begin = [int(b) for b in attrs["before"]]
    end = [b + d for b, d in zip(begin, x.type.shape)]
    return [c.op("slice", g, begin=begin, end=end)]


def vjp_concat(c: Any, xs: Sequence[Value], ys: Sequence[Value], gs: Sequence[Value], attrs: Attrs) -> list[Value]:
    y = ys[0]
    axis = int(attrs["axis"]) % y.type.rank
    g = c.full(gs[0], y.type.shape)
    out: list[Value | None] = []
    start = 0
    for x, need in zip(xs, c.needs):
        size = x.type.shape[axis]
        if need:
            begin = [0] * y.type.rank
            end = list(y.type.shape)
            begin[axis], end[axis] = start, start + size
            out.append(c.op("slice", g, begin=begin, end=end))
        else:
            out.append(None)
        start += size
    return out
