"""Range-safe reductions of squares: norms that survive fp16 activations of any size.

The ANE stores every value in fp16 (largest finite value 65504), so ``x * x``
overflows once ``|x| > 255.9``: an RMSNorm or LayerNorm written the obvious
way, ``x * rsqrt(mean(x * x) + eps)``, turns an activation of 300 into
``inf``, ``rsqrt(inf)`` into 0 and the whole row into zeros -- finite, silent
and wrong. Real residual streams carry such values (the "massive activations"
of pretrained LLMs reach the thousands).

This pass rewrites every reduction of squares so that nothing it computes
leaves the fp16 range unless its true result does. Each row is first divided
by ``s``, half its largest magnitude (plus a floor ``c``), so the scaled row
``y = x / s`` has ``|y| <= 2`` and ``y * y <= 4``; the identities

    rsqrt(mean(x^2) + eps) * x  =  rsqrt(mean(y^2) + eps / s^2) * y
    sqrt(mean(x^2) + eps)       =  sqrt(mean(y^2) + eps / s^2) * s
    mean(x^2)                   =  (mean(y^2) * s) * s

hold exactly for every ``s > 0``, so the result is the same number in exact
arithmetic; in fp16 every intermediate is bounded: ``y^2 <= 4``, ``eps / s^2 =
(sqrt(eps) / s)^2 <= 256`` because ``c >= sqrt(eps) / 16``, ``1 / s <= 2^14``
because ``c >= 2^-14``. A sum is taken as ``N`` times a mean (``N`` the
elements reduced), so a long axis cannot overflow the sum either. A
mean-subtracted operand (LayerNorm, variance) is scaled before the mean is
subtracted, so ``x - mean(x)`` cannot overflow when the row holds both large
positive and large negative values. ``max |x|`` is ``max(reduce_max(x),
reduce_max(-x))``, taken as ``a/2 + relu(b/2 - a/2)`` so that the difference
cannot overflow either.

Matched forms (``r`` is the reduction over ``axes``, or none for a square
reduced over a size-1 dim; ``eps`` an optional scalar const, possibly with a
positive scalar factor such as a variance's ``n / (n - 1)`` or a reshape around it;
``pow(v, -0.5)`` stands for ``rsqrt(v)``):

* ``rsqrt(r(x * x) + eps)``: its uses ``mul(x, .)`` become ``mul(y, rsqrt(...))``
  (no value ever leaves ``[2^-14, 2^14]`` on the way); any other use reads
  ``(1 / s) * rsqrt(...)`` (an fp16 subnormal once ``|x|`` passes ~16,000);
* ``sqrt(r(x * x) + eps)`` (an L2 norm);
* ``r(x * x)`` with other uses (a variance, a sum of squares);
* each with ``x = sub(z, reduce_mean(z, axes, keep_dims=true))``: scaled as
  ``d = z / s - mean(z / s)``.

Means over long axes lose small values the same way: legalize writes
``reduce_mean`` as ``reduce_sum(x * (1 / N))``, and ``x / N`` is an fp16
subnormal (a few significant bits, or zero) once ``|x| < N * 2^-14``: a mean of
values near 0.01 over 65,536 elements is 17% off. The means this pass writes
are ``reduce_sum(v * 2^-a) * (2^a / N)`` over values it has bounded (``|v| <=
2``, ``4`` or ``16``), with the smallest ``a`` that keeps the sum within 32768,
and a ``reduce_mean`` over more than 2048 elements is scaled by its row's
largest magnitude first (``mean(x) = s * mean(x / s)``): scaling by a power of
two is exact, so no term is rounded to a subnormal.

And, for attention scores, ``mul(matmul(a, b), c)`` with a scalar ``|c| < 1`` and no
other use of the product becomes ``matmul(mul(a, c), b)``: the scores are scaled
before the dot products are summed (as ``scaled_dot_product_attention`` does),
so a product that only fits fp16 once scaled never leaves it.

``x * x`` may also be written ``pow(x, 2)``. Values this pass built are not
matched again, so running it twice changes nothing more.

The pass's docstring shows it on an RMSNorm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence, cast

import numpy as np

from anec.ir.ops import const_literal
from anec.passes.base import Pass, PassContext
from anec.passes.rewrite import HANDLED, Handled, Rewriter, erase_if_dead, rewrite_greedily

if TYPE_CHECKING:
    from anec.ir.graph import Graph
    from anec.ir.nodes import Node, Value

SQUARES = ("reduce_mean", "reduce_sum")
"""The reductions whose squared operand is scaled."""

SCALE_FLOOR = 2.0 ** -14
"""Smallest scale ``s``: ``1 / s`` stays below 2^14 (a zero row divides by this)."""


# ---- matching ---------------------------------------------------------------------


def scalar_const(v: "Value") -> float | None:
    """The number a one-element ``const(value=...)`` holds, else None."""
    p = v.producer
    if p is None or p.op != "const" or "value" not in p.attrs or math.prod(v.type.shape) != 1:
        return None
    value, dtype = p.attrs["value"], v.type.dtype
    if type(value) is float and dtype.is_float:
        # the common case, a float literal of a float const: rounded to the dtype as
        # const_literal rounds it (to nearest), without building and validating an array (this
        # runs for every mul, add and pow of every sweep; the func was verified before the pass)
        return float(dtype.np.type(value))
    return float(np.asarray(const_literal(value, v.type)).reshape(-1)[0])


def squared(v: "Value") -> "Value | None":
    """``x`` when ``v`` is ``mul(x, x)`` or ``pow(x, 2)``."""
    p = v.producer
    if p is None:
        return None
    if p.op == "mul" and p.operands[0] is p.operands[1]:
        return p.operands[0]
    if p.op == "pow" and scalar_const(p.operands[1]) == 2.0:
        return p.operands[0]
    return None


def axes_of(node: "Node") -> list[int]:
    rank = node.operands[0].type.rank
    return sorted({int(a) % rank for a in node.attrs["axes"]})


@dataclass
class SumOfSquares:
    """``reduce_mean|reduce_sum(x * x, axes)``, with ``x = z - mean(z)`` recognized."""

    node: "Node"
    x: "Value"
    axes: list[int]
    count: int
    """Elements reduced per result (a sum is ``count`` times the mean)."""
    centered: "Value | None"
    """``z`` when ``x = sub(z, reduce_mean(z, axes, keep_dims=true))``."""


def sum_of_squares(v: "Value") -> SumOfSquares | None:
    """The reduction of squares producing ``v``, unless its rows are already scaled."""
    red = v.producer
    if red is None or not v.type.dtype.is_float:
        return None
    if red.op not in SQUARES:  # a square reduced over no axis (a size-1 dim): rows of one
        x = squared(v)
        if x is None or scaled_row(x):
            return None
        return SumOfSquares(red, x, [], 1, None)
    x = squared(red.operands[0])
    if x is None or scaled_row(x):
        return None
    axes = axes_of(red)
    count = math.prod(x.type.shape[a] for a in axes)
    return SumOfSquares(red, x, axes, count, _centered_source(x, axes))


def _centered_source(x: "Value", axes: list[int]) -> "Value | None":
    sub = x.producer
    if sub is None or sub.op != "sub":
        return None
    z, mu = sub.operands
    red = mu.producer
    if (red is None or red.op != "reduce_mean" or red.operands[0] is not z
            or not red.attrs.get("keep_dims") or axes_of(red) != axes):
        return None
    return z


PEEL_DEPTH = 4
"""How many scalar ``add``/``mul`` and ``reshape`` nodes may stand between a reduction and its root."""


def peel(p: "Node | None", out: "Value") -> "tuple[Value, str, float] | None":
    """``(inner, kind, c)`` when ``out = p(inner)`` is a step :func:`affine` looks through: a
    ``reshape`` (kind ``"reshape"``), an ``add`` of a finite scalar const ``c`` or a ``mul`` by
    one ``c > 0``; else None. :func:`affine` walks it backwards, :func:`_only_roots` forwards."""
    if p is None:
        return None
    if p.op == "reshape":
        return p.operands[0], "reshape", 0.0
    if p.op not in ("add", "mul"):
        return None
    for m, c in (p.operands, p.operands[::-1]):
        e = scalar_const(c)
        if e is not None and math.isfinite(e) and m.type == out.type and (p.op == "add" or e > 0.0):
            return m, p.op, e
    return None


def affine(v: "Value") -> tuple["Value", float, float, list["Node"]]:
    """``(m, k, eps, nodes)`` with ``v = k * m + eps`` (up to a reshape), peeling up to
    :data:`PEEL_DEPTH` steps (:func:`peel`: a variance's ``n / (n - 1)``, an eps, a reshape),
    and the nodes peeled; ``(v, 1, 0, [])`` if there are none."""
    k, eps = 1.0, 0.0
    nodes: list["Node"] = []
    cur = v
    for _ in range(PEEL_DEPTH):
        p = cur.producer
        step = peel(p, cur)
        if p is None or step is None:
            break
        inner, kind, c = step
        if kind == "mul":
            k *= c
        elif kind == "add":
            eps += k * c
        nodes.append(p)
        cur = inner
    return cur, k, eps, nodes


def root_of(node: "Node") -> str | None:
    """``"rsqrt"`` or ``"sqrt"`` for ``rsqrt(v)``, ``pow(v, -0.5)``, ``sqrt(v)``, ``pow(v, 0.5)``."""
    if node.op in ("rsqrt", "sqrt"):
        return node.op
    if node.op == "pow":
        e = scalar_const(node.operands[1])
        return {-0.5: "rsqrt", 0.5: "sqrt"}.get(e) if e is not None else None
    return None


# ---- building ---------------------------------------------------------------------


class SafeRewriter(Rewriter):
    """A :class:`Rewriter` that keeps the nodes a rewrite left behind (erased when dead)."""

    def __init__(self, graph: Graph, ctx: PassContext, pass_name: str) -> None:
        super().__init__(graph, ctx, pass_name)
        self.left: list["Node"] = []

    def leave(self, sq: "SumOfSquares") -> None:
        """The reduction, its square and the centering it replaced: erased at the end if unused."""
        for v in (sq.node.result, sq.node.operands[0], sq.x):
            if v.producer is not None:
                self.left.append(v.producer)
        if sq.centered is not None:  # x = sub(a, mean): its producer is the centering
            center = cast("Node", sq.x.producer)
            self.left.append(cast("Node", center.operands[1].producer))

    def k(self, value: float, like: "Value", suffix: str) -> "Value":
        return self.scalar(value, like.type.dtype, suffix)


@dataclass
class Scaled:
    """The rewritten row: ``y`` (``x / s``, or ``d`` when centered), ``inv = 1 / s``, ``s``."""

    y: "Value"
    inv: "Value"
    s: "Value"
    mean_sq: "Value"
    """``mean(y * y)`` over the axes, dims kept."""


def row_scale(rw: SafeRewriter, src: "Value", axes: list[int], floor: float) -> tuple["Value", "Value"]:
    """``(s, 1 / s)`` with ``s = max|src| / 2 + floor`` over ``axes`` (each element its own row
    when there are none), taken as ``a/2 + relu(b/2 - a/2)`` of the largest ``src`` and ``-src``."""
    neg = rw.op("neg", src, suffix="neg")
    if axes:
        top = rw.op("reduce_max", src, axes=axes, keep_dims=True, suffix="max")
        bottom = rw.op("reduce_max", neg, axes=axes, keep_dims=True, suffix="min")
    else:  # no axis: each element is its own row
        top, bottom = src, neg
    half = rw.k(0.5, src, "half")
    ha = rw.op("mul", top, half, suffix="ha")
    hb = rw.op("mul", bottom, half, suffix="hb")
    up = rw.op("relu", rw.op("sub", hb, ha, suffix="gap"), suffix="up")
    amax = rw.op("add", ha, up, suffix="amax")
    s = rw.op("add", amax, rw.k(floor, src, "floor"), suffix="s")
    inv = rw.op("pow", s, rw.k(-1.0, src, "m1"), suffix="inv")
    return s, inv


def scale_rows(rw: SafeRewriter, sq: SumOfSquares, floor: float) -> Scaled:
    """``s = max|src| / 2 + floor`` over the axes, ``y = src / s`` (centered if recognized)."""
    src = sq.centered if sq.centered is not None else sq.x
    axes = sq.axes
    s, inv = row_scale(rw, src, axes, floor)
    y = rw.op("mul", src, inv, suffix="y")
    if sq.centered is not None:
        mu = bounded_mean(rw, y, axes, 2.0, "mu")
        y = rw.op("sub", y, mu, suffix="d")
    y2 = rw.op("mul", y, y, suffix="y2")
    m2 = bounded_mean(rw, y2, axes, 16.0 if sq.centered is not None else 4.0, "m2") if axes else y2
    return Scaled(y, inv, s, m2)


SUM_BOUND = 32768.0
"""What a :func:`bounded_mean` lets a partial sum reach (half the fp16 range)."""


def bounded_mean(rw: SafeRewriter, v: "Value", axes: list[int], bound: float, suffix: str) -> "Value":
    """The mean over ``axes`` of ``v``, whose values are known to be at most ``bound`` in
    magnitude: ``reduce_sum(v * 2^-a) * (2^a / N)`` with the smallest ``a >= 0`` that keeps the
    sum within :data:`SUM_BOUND`. Scaling by a power of two is exact while the values stay
    normal, so a long axis (N = 16384) loses none of the small values that ``v * (1 / N)``,
    legalize's form of ``reduce_mean``, would round to fp16 subnormals; the factor
    ``2^a / N`` is at least ``bound / 32768``, a normal fp16 number."""
    n = math.prod(v.type.shape[a] for a in axes)
    a = max(0, math.ceil(math.log2(bound * n / SUM_BOUND)))
    if a == 0 and n <= 2048:  # short axes: legalize's own form is as good
        return rw.op("reduce_mean", v, axes=axes, keep_dims=True, suffix=suffix)
    scaled = rw.op("mul", v, rw.k(2.0 ** -a, v, f"{suffix}_pre"), suffix=f"{suffix}_scaled") if a else v
    total = rw.op("reduce_sum", scaled, axes=axes, keep_dims=True, suffix=f"{suffix}_sum")
    return rw.op("mul", total, rw.k(2.0 ** a / n, total, f"{suffix}_per"), suffix=suffix)


def floor_for(eps: float) -> float:
    """The scale floor ``c``: ``|eps| / s^2 <= 256`` and ``1 / s <= 2^14``."""
    return max(math.sqrt(abs(eps)) / 16.0, SCALE_FLOOR)


def fp16_floor(value: float) -> float:
    """``value`` rounded up to an fp16 number (the floor must stay above its bound in fp16)."""
    h = np.float16(value)
    if float(h) < value:
        h = np.nextafter(h, np.float16(np.inf))
    return float(h)


def root_term(rw: SafeRewriter, sc: Scaled, eps: float, op: str) -> "Value":
    """``op(mean(y^2) + eps / s^2)`` (a negative eps is subtracted)."""
    t = sc.mean_sq
    if eps != 0.0:
        e = rw.op("mul", sc.inv, rw.k(math.sqrt(abs(eps)), sc.inv, "reps"), suffix="e")
        t = rw.op("add" if eps > 0 else "sub", t, rw.op("mul", e, e, suffix="e2"), suffix="t")
    return rw.op(op, t, suffix="q")


def to_shape(rw: SafeRewriter, v: "Value", like: "Value") -> "Value":
    if v.type.shape == like.type.shape:
        return v
    return rw.op("reshape", v, shape=list(like.type.shape), suffix="shape")


# ---- rules ------------------------------------------------------------------------


# rsqrt(r(x*x) + eps) -> rsqrt(mean(y*y) + eps/s^2) [* N^-1/2], its uses mul(x, .) -> mul(y, .)
# sqrt(r(x*x) + eps)  -> sqrt(mean(y*y) + eps/s^2) [* N^1/2] * s
def safe_root(node: "Node", rw: SafeRewriter) -> "Value | Handled | None":
    op = root_of(node)
    if op is None:
        return None
    m, k, eps, peeled = affine(node.operands[0])
    sq = sum_of_squares(m)
    if sq is None:
        return None
    rw.left.extend(peeled)
    rw.leave(sq)
    n = k * (sq.count if sq.node.op == "reduce_sum" else 1)  # root(n * (mean + eps / n))
    per = eps / n
    sc = scale_rows(rw, sq, fp16_floor(floor_for(per)))
    q = root_term(rw, sc, per, op)
    what = f"{node.op}(reduce of {sq.x.name}^2): scaled by max|{(sq.centered or sq.x).name}|"
    rw.record("ANE-FP16-RANGE", what + " (no fp16 overflow)")
    if op == "sqrt":
        if n != 1:
            q = rw.op("mul", q, rw.k(math.sqrt(n), q, "rootn"), suffix="qn")
        return to_shape(rw, rw.op("mul", q, sc.s, suffix="norm"), node.result)
    if n != 1:
        q = rw.op("mul", q, rw.k(1.0 / math.sqrt(n), q, "rootn"), suffix="qn")
    r = node.result
    if r.type.shape == q.type.shape:
        for use in list(dict.fromkeys(r.uses)):
            if use.op == "mul" and set(map(id, use.operands)) == {id(sq.x), id(r)}:
                rw.replace(use.result, rw.op("mul", sc.y, q, suffix="yq"))
    if not r.uses and not _returned(r, rw.graph.outputs):
        return HANDLED
    return to_shape(rw, rw.op("mul", sc.inv, q, suffix="rstd"), r)


# r(x*x) -> ((mean(y*y) * s) * s) [* N]   (when not under a root that safe_root takes)
def safe_sum_of_squares(node: "Node", rw: SafeRewriter) -> "Value | None":
    r = node.result
    if not r.uses and not _returned(r, rw.graph.outputs):
        return None  # a reduction a root's rewrite left unused (erased at the end)
    sq = sum_of_squares(r)
    if sq is None or _only_roots(r, rw.graph.outputs):
        return None
    rw.leave(sq)
    sc = scale_rows(rw, sq, SCALE_FLOOR)
    v = rw.op("mul", rw.op("mul", sc.mean_sq, sc.s, suffix="ms"), sc.s, suffix="mss")
    if node.op == "reduce_sum" and sq.count != 1:
        v = rw.op("mul", v, rw.k(float(sq.count), v, "n"), suffix="sum")
    rw.record("ANE-FP16-RANGE", f"{node.op}({sq.x.name}^2): scaled by max|{(sq.centered or sq.x).name}| "
                    "(no fp16 overflow)")
    return to_shape(rw, v, node.result)


LONG_AXIS = 2048
"""A ``reduce_mean`` over more elements than this is scaled (:func:`safe_long_mean`)."""


# reduce_mean(x) over N > LONG_AXIS elements -> s * bounded_mean(x / s)
def safe_long_mean(node: "Node", rw: SafeRewriter) -> "Value | None":
    x = node.operands[0]
    axes = axes_of(node)
    n = math.prod(x.type.shape[a] for a in axes)
    r = node.result
    if (n <= LONG_AXIS or not x.type.dtype.is_float or sum_of_squares(r) is not None or scaled_row(x)
            or any(u.op == "sub" and u.operands[0] is x and u.operands[1] is r for u in r.uses)):
        return None  # short, a square (the rules above), or the mean a centered variance subtracts
    s, inv = row_scale(rw, x, axes, SCALE_FLOOR)
    y = rw.op("mul", x, inv, suffix="y")
    m = bounded_mean(rw, y, axes, 2.0, "m")
    rw.record("ANE-FP16-RANGE", f"reduce_mean over {n} elements of {x.name}: scaled by its largest "
                                "magnitude, summed in exact power-of-two steps (no subnormal terms)")
    return to_shape(rw, rw.op("mul", m, s, suffix="mean"), r)


def _only_roots(v: "Value", outputs: Sequence["Value"], depth: int = PEEL_DEPTH) -> bool:
    """Every use of ``v`` reaches a root that :func:`safe_root` takes, directly or through steps
    :func:`peel` looks through (or is such a step a rewrite left unused)."""
    if not v.uses or _returned(v, outputs):
        return False
    for use in v.uses:
        if root_of(use) is not None:
            continue
        step = peel(use, use.result) if depth else None
        if step is not None and step[0] is v and (
                not use.result.uses and not _returned(use.result, outputs)
                or _only_roots(use.result, outputs, depth - 1)):
            continue
        return False
    return True


def _returned(v: "Value", outputs: Sequence["Value"]) -> bool:
    return any(o is v for o in outputs)


# mul(matmul(a, b), c) -> matmul(mul(a, c), b)   (|c| < 1 a scalar: scale the operand first)
def scale_before_matmul(node: "Node", rw: SafeRewriter) -> "Value | None":
    for mm, c in (node.operands, node.operands[::-1]):
        p = mm.producer
        if p is None or p.op != "matmul":  # first: every mul of the func is asked, few read a matmul
            continue
        k = scalar_const(c)
        if (k is None or not 0.0 < abs(k) < 1.0
                or len(mm.uses) != 1 or _returned(mm, rw.graph.outputs)
                or c.type.dtype != mm.type.dtype or node.result.type != mm.type):
            continue
        a, b = p.operands
        scaled = rw.op("mul", a, c, suffix="scaled")
        rw.record("ANE-FP16-RANGE", f"{mm.name} * {k:g} -> the matmul of {a.name} * {k:g} "
                                    "(the scores are scaled before they are summed)")
        rw.left.append(p)
        return rw.op("matmul", scaled, b, suffix="mm", **dict(p.attrs))
    return None


RULES = {
    "mul": (scale_before_matmul,),
    "rsqrt": (safe_root,),
    "sqrt": (safe_root,),
    "pow": (safe_root,),
    "reduce_mean": (safe_sum_of_squares, safe_long_mean),
    "reduce_sum": (safe_sum_of_squares,),
}


@dataclass(frozen=True)
class RangeSafe(Pass):
    """Scale rows before squaring: norms, variances and L2 norms never overflow fp16.

    The forms it matches, the identities it uses and the bounds they give are in
    the module docstring. Each row is divided by half its largest magnitude
    before it is squared; an ``rsqrt`` whose uses multiply the squared value
    multiplies the scaled row instead.

    Before:
        func f(%x: fp16[1, 64, 1, 8]) {
          %sq = mul(%x, %x) : fp16[1, 64, 1, 8]
          %ms = reduce_mean(%sq, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          %eps = const(value=1e-05) : fp16[]
          %me = add(%ms, %eps) : fp16[1, 1, 1, 8]
          %r = rsqrt(%me) : fp16[1, 1, 1, 8]
          %y = mul(%x, %r) : fp16[1, 64, 1, 8]
          return %y
        }

    After: the squares and their reduction are gone (the unused eps const is left to dce).
        func f(%x: fp16[1, 64, 1, 8]) {
          %eps = const(value=1e-05) : fp16[]
          %r_neg = neg(%x) : fp16[1, 64, 1, 8]
          %r_max = reduce_max(%x, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          %r_min = reduce_max(%r_neg, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          %r_half = const(value=0.5) : fp16[]
          %r_ha = mul(%r_max, %r_half) : fp16[1, 1, 1, 8]
          %r_hb = mul(%r_min, %r_half) : fp16[1, 1, 1, 8]
          %r_gap = sub(%r_hb, %r_ha) : fp16[1, 1, 1, 8]
          %r_up = relu(%r_gap) : fp16[1, 1, 1, 8]
          %r_amax = add(%r_ha, %r_up) : fp16[1, 1, 1, 8]
          %r_floor = const(value=0.00019788742065429688) : fp16[]
          %r_s = add(%r_amax, %r_floor) : fp16[1, 1, 1, 8]
          %r_m1 = const(value=-1.0) : fp16[]
          %r_inv = pow(%r_s, %r_m1) : fp16[1, 1, 1, 8]
          %r_y = mul(%x, %r_inv) : fp16[1, 64, 1, 8]
          %r_y2 = mul(%r_y, %r_y) : fp16[1, 64, 1, 8]
          %r_m2 = reduce_mean(%r_y2, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          %r_reps = const(value=0.003164424169144463) : fp16[]
          %r_e = mul(%r_inv, %r_reps) : fp16[1, 1, 1, 8]
          %r_e2 = mul(%r_e, %r_e) : fp16[1, 1, 1, 8]
          %r_t = add(%r_m2, %r_e2) : fp16[1, 1, 1, 8]
          %r_q = rsqrt(%r_t) : fp16[1, 1, 1, 8]
          %y = mul(%r_y, %r_q) : fp16[1, 64, 1, 8]
          return %y
        }

    Unchanged: a mean of values that are not squared, and a row this pass already scaled.
        func f(%x: fp16[1, 64, 1, 8]) {
          %mu = reduce_mean(%x, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          %mx = reduce_max(%x, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          %m1 = const(value=-1.0) : fp16[]
          %inv = pow(%mx, %m1) : fp16[1, 1, 1, 8]
          %y = mul(%x, %inv) : fp16[1, 64, 1, 8]
          %y2 = mul(%y, %y) : fp16[1, 64, 1, 8]
          %m2 = reduce_mean(%y2, axes=[1], keep_dims=true) : fp16[1, 1, 1, 8]
          %r = rsqrt(%m2) : fp16[1, 1, 1, 8]
          %z = mul(%y, %r) : fp16[1, 64, 1, 8]
          return %mu, %z
        }
    """

    name: ClassVar[str] = "range-safe"
    tracked: ClassVar[bool] = True

    def run(self, graph: Graph, ctx: PassContext) -> None:
        rw = SafeRewriter(graph, ctx, self.name)
        rewrite_greedily(graph, RULES, rw)
        for node in rw.left:  # the squares and reductions the rewrites replaced
            erase_if_dead(graph, node)


def scaled_row(v: "Value") -> bool:
    """``v`` is a row this pass scaled: ``mul(src, pow(s, -1))`` with ``s`` computed from
    ``-src`` or ``reduce_max(src)`` (the largest magnitude), or that row minus its
    ``reduce_mean``. Such a row
    is bounded by 2 (4 when centered), so squaring it is safe and it is not matched again."""
    p = v.producer
    if p is None:
        return False
    if p.op == "sub":
        y, mu = p.operands
        red = mu.producer
        return red is not None and red.op == "reduce_mean" and red.operands[0] is y and scaled_row(y)
    if p.op != "mul":
        return False
    for src, inv in (p.operands, p.operands[::-1]):
        q = inv.producer
        if q is not None and q.op == "pow" and scalar_const(q.operands[1]) == -1.0 and _from_max(
                q.operands[0], src):
            return True
    return False


def _from_max(s: "Value", src: "Value") -> bool:
    """``s`` is computed (within a few ops) from ``neg(src)`` or ``reduce_max(src)``: the
    largest magnitude."""
    frontier = [s]
    for _ in range(10):
        nxt: list["Value"] = []
        for v in frontier:
            p = v.producer
            if p is None:
                continue
            if p.op in ("neg", "reduce_max") and p.operands[0] is src:  # max(src, -src), reduced or not
                return True
            nxt.extend(p.operands)
        frontier = nxt
    return False
