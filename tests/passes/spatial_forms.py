"""IR text of the canonical core-op forms of spatial layers, written from their specification.

Each builder returns a :class:`Form`: one func ``f(%x)`` holding one layer in its
canonical form (the statements, in the order and spelling the importer writes
them), its checkpoint tensors, and the native target op select-native should
replace it with. ``torch_*`` reference values come from numpy formulas
independent of anec's op table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Form:
    text: str
    weights: dict[str, np.ndarray]
    x_shape: tuple[int, ...]
    native: str
    """The one target op select-native writes (or "" when the form must stay)."""
    attrs: dict = field(default_factory=dict)
    """The attributes the target op must have."""


class _W:
    """A statement writer with fresh names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.n = 0

    def __call__(self, stmt: str, name: str | None = None) -> str:
        self.n += 1
        v = name or f"v{self.n}"
        self.lines.append(f"  %{v} = {stmt}")
        return f"%{v}"

    def func(self, x_shape, out: str, dtype: str = "fp16") -> str:
        dims = ", ".join(map(str, x_shape))
        return f"func f(%x: {dtype}[{dims}]) {{\n" + "\n".join(self.lines) + f"\n  return {out}\n}}\n"


def _ints(v) -> str:
    return "[" + ", ".join(str(int(a)) for a in v) + "]"


def _out(size, k, s, d, before, after):
    return (size + before + after - d * (k - 1) - 1) // s + 1


def _rng(seed):
    return np.random.default_rng(seed)


def _positions(w, xp, n, c, hw_out, k, s, d, weight, kind, cout_cin):
    """The per-position terms of form 1 (kind conv), 2 (depthwise) or 3 (transpose)."""
    (ho, wo), (kh, kw) = hw_out, k
    terms = []
    for i in range(kh):
        for j in range(kw):
            b = [0, 0, i * d[0], j * d[1]]
            e = [n, c, i * d[0] + (ho - 1) * s[0] + 1, j * d[1] + (wo - 1) * s[1] + 1]
            xs = w(f"slice({xp}, begin={_ints(b)}, end={_ints(e)}, stride={_ints([1, 1, s[0], s[1]])})")
            if kind == "conv":
                ws = w(f"slice({weight}, begin=[0, 0, {i}, {j}], end={_ints([*cout_cin, i + 1, j + 1])})")
                terms.append(w(f"conv1x1({xs}, {ws})"))
            elif kind == "depthwise":
                ws = w(f"slice({weight}, begin=[0, 0, {i}, {j}], end={_ints([c, 1, i + 1, j + 1])})")
                wr = w(f"reshape({ws}, shape={_ints([1, c, 1, 1])})")
                terms.append(w(f"mul({xs}, {wr})"))
            else:
                ws = w(f"slice({weight}, begin=[0, 0, {kh - 1 - i}, {kw - 1 - j}], "
                       f"end={_ints([*cout_cin, kh - i, kw - j])})")
                wt = w(f"transpose({ws}, perm=[1, 0, 2, 3])")
                terms.append(w(f"conv1x1({xs}, {wt})"))
    return terms


def _fold(w, terms, name=None):
    acc = terms[0]
    for k, t in enumerate(terms[1:]):
        acc = w(f"add({acc}, {t})", name if k == len(terms) - 2 else None)
    return acc


def _pad(w, x, p, value="0.0"):
    if not any(p):
        return x
    return w(f"pad({x}, before=[0, 0, {p[0]}, {p[2]}], after=[0, 0, {p[1]}, {p[3]}], value={value})")


def conv(n=1, cin=3, h=6, wd=7, cout=4, k=(3, 3), s=(1, 1), p=(1, 1, 1, 1), d=(1, 1), groups=1,
         bias=False, seed=0, depthwise_form=True) -> Form:
    """Forms 1 and 2 (torch Conv2d; Conv1d with k[0] = 1, h = 1)."""
    rng = _rng(seed)
    w = _W()
    cin_g = cin // groups
    weights = {"c.weight": (rng.standard_normal((cout, cin_g, *k)) / math.sqrt(cin_g * k[0] * k[1])).astype(np.float16)}
    W = w(f'const(weight="c.weight") : fp16{_ints([cout, cin_g, *k])}', "w")
    xp = _pad(w, "%x", p)
    hp, wp = h + p[0] + p[1], wd + p[2] + p[3]
    ho, wo = _out(h, k[0], s[0], d[0], p[0], p[1]), _out(wd, k[1], s[1], d[1], p[2], p[3])
    if groups == 1:
        y = _fold(w, _positions(w, xp, n, cin, (ho, wo), k, s, d, W, "conv", (cout, cin)))
    elif depthwise_form and cin == groups == cout:
        y = _fold(w, _positions(w, xp, n, cin, (ho, wo), k, s, d, W, "depthwise", None))
    else:
        og = cout // groups
        parts = []
        for g in range(groups):
            xk = w(f"slice({xp}, begin=[0, {g * cin_g}, 0, 0], end={_ints([n, (g + 1) * cin_g, hp, wp])})")
            wk = w(f"slice({W}, begin=[{g * og}, 0, 0, 0], end={_ints([(g + 1) * og, cin_g, *k])})")
            parts.append(_fold(w, _positions(w, xk, n, cin_g, (ho, wo), k, s, d, wk, "conv", (og, cin_g))))
        y = w(f"concat({', '.join(parts)}, axis=1)")
    if bias:
        weights["c.bias"] = rng.standard_normal(cout).astype(np.float16)
        b = w(f'const(weight="c.bias") : fp16[{cout}]')
        b4 = w(f"reshape({b}, shape=[1, {cout}, 1, 1])")
        y = w(f"add({y}, {b4})")
    w.lines[-1] = w.lines[-1].replace(y, "%y", 1)
    return Form(w.func((n, cin, h, wd), "%y"), weights, (n, cin, h, wd), "conv",
                {"strides": list(s), "pad": list(p), "dilations": list(d), "groups": groups})


def conv_transpose(n=1, cin=3, h=4, wd=5, cout=2, k=(3, 3), s=(2, 2), p=(1, 1), op=(0, 0), d=(1, 1),
                   seed=1, groups=1) -> Form:
    """Form 3 (torch ConvTranspose2d); groups > 1: per group k, form 3 on the channel slice k
    of the zero-inserted, padded input with the weight rows of group k, joined by a concat."""
    rng = _rng(seed)
    w = _W()
    cout_g = cout // groups
    weights = {"t.weight": (rng.standard_normal((cin, cout_g, *k)) / math.sqrt(cin * k[0] * k[1])).astype(np.float16)}
    W = w(f'const(weight="t.weight") : fp16{_ints([cin, cout_g, *k])}', "w")
    src, zh, zw = "%x", h, wd
    if s != (1, 1):
        x6 = w(f"reshape(%x, shape={_ints([n, cin, h, 1, wd, 1])})")
        z6 = w(f"pad({x6}, before=[0, 0, 0, 0, 0, 0], after=[0, 0, 0, {s[0] - 1}, 0, {s[1] - 1}], value=0.0)")
        z4 = w(f"reshape({z6}, shape={_ints([n, cin, h * s[0], wd * s[1]])})")
        zh, zw = (h - 1) * s[0] + 1, (wd - 1) * s[1] + 1
        src = w(f"slice({z4}, begin=[0, 0, 0, 0], end={_ints([n, cin, zh, zw])})")
    ext = (d[0] * (k[0] - 1), d[1] * (k[1] - 1))
    pad = (ext[0] - p[0], ext[0] - p[0] + op[0], ext[1] - p[1], ext[1] - p[1] + op[1])
    xp = _pad(w, src, pad)
    ho, wo = _out(zh, k[0], 1, d[0], pad[0], pad[1]), _out(zw, k[1], 1, d[1], pad[2], pad[3])
    if groups == 1:
        y = _fold(w, _positions(w, xp, n, cin, (ho, wo), k, (1, 1), d, W, "transpose", (cin, cout)))
    else:
        cin_g, hp, wp = cin // groups, zh + pad[0] + pad[1], zw + pad[2] + pad[3]
        parts = []
        for g in range(groups):
            xk = w(f"slice({xp}, begin=[0, {g * cin_g}, 0, 0], end={_ints([n, (g + 1) * cin_g, hp, wp])})")
            wk = w(f"slice({W}, begin=[{g * cin_g}, 0, 0, 0], end={_ints([(g + 1) * cin_g, cout_g, *k])})")
            parts.append(_fold(w, _positions(w, xk, n, cin_g, (ho, wo), k, (1, 1), d, wk, "transpose",
                                             (cin_g, cout_g))))
        y = w(f"concat({', '.join(parts)}, axis=1)")
    w.lines[-1] = w.lines[-1].replace(y, "%y", 1)
    crop = [p[0], p[0] - op[0], p[1], p[1] - op[1]]
    return Form(w.func((n, cin, h, wd), "%y"), weights, (n, cin, h, wd), "conv_transpose",
                {"strides": list(s), "pad": crop, "dilations": list(d), "groups": groups})


def max_pool(n=1, c=2, h=7, wd=6, k=(3, 3), s=(2, 2), p=(1, 1, 1, 1)) -> Form:
    """Form 4 (MaxPool2d; ceil_mode as extra end padding)."""
    w = _W()
    xp = _pad(w, "%x", p, "-inf")
    ho, wo = _out(h, k[0], s[0], 1, p[0], p[1]), _out(wd, k[1], s[1], 1, p[2], p[3])
    rs = []
    for i in range(k[0]):
        for j in range(k[1]):
            e = [n, c, i + (ho - 1) * s[0] + 1, j + (wo - 1) * s[1] + 1]
            xs = w(f"slice({xp}, begin=[0, 0, {i}, {j}], end={_ints(e)}, stride={_ints([1, 1, *s])})")
            rs.append(w(f"reshape({xs}, shape={_ints([n, c, 1, ho, wo])})"))
    st = w(f"concat({', '.join(rs)}, axis=2)")
    w(f"reduce_max({st}, axes=[2], keep_dims=false)", "y")
    return Form(w.func((n, c, h, wd), "%y"), {}, (n, c, h, wd), "max_pool",
                {"kernel_sizes": list(k), "strides": list(s), "pad": list(p)})


def avg_pool(n=1, c=2, h=7, wd=6, k=(3, 3), s=(2, 2), p=(1, 1, 1, 1), count_include_pad=True,
             divisor=None) -> Form:
    """Form 5 (AvgPool2d)."""
    w = _W()
    xp = _pad(w, "%x", p)
    ho, wo = _out(h, k[0], s[0], 1, p[0], p[1]), _out(wd, k[1], s[1], 1, p[2], p[3])
    xs = []
    for i in range(k[0]):
        for j in range(k[1]):
            e = [n, c, i + (ho - 1) * s[0] + 1, j + (wo - 1) * s[1] + 1]
            xs.append(w(f"slice({xp}, begin=[0, 0, {i}, {j}], end={_ints(e)}, stride={_ints([1, 1, *s])})"))
    acc = _fold(w, xs)
    weights = {}
    if count_include_pad or not any(p):
        dv = w(f"const(value={1.0 / (divisor or k[0] * k[1])!r}) : fp16[]")
    else:
        inside = np.pad(np.ones((h, wd)), ((p[0], p[1]), (p[2], p[3])))
        count = sum(inside[i: i + (ho - 1) * s[0] + 1: s[0], j: j + (wo - 1) * s[1] + 1: s[1]]
                    for i in range(k[0]) for j in range(k[1]))
        weights["a.avg_pool_divisor"] = (1.0 / count).reshape(1, 1, ho, wo).astype(np.float16)
        dv = w(f'const(weight="a.avg_pool_divisor") : fp16[1, 1, {ho}, {wo}]')
    w(f"mul({acc}, {dv})", "y")
    return Form(w.func((n, c, h, wd), "%y"), weights, (n, c, h, wd), "avg_pool" if divisor is None else "",
                {"kernel_sizes": list(k), "strides": list(s), "pad": list(p),
                 "exclude_padding_from_average": not count_include_pad and any(p)})


def upsample_nearest(n=1, c=2, h=3, wd=4, sc=(2, 3)) -> Form:
    """Form 7."""
    w = _W()
    x6 = w(f"reshape(%x, shape={_ints([n, c, h, 1, wd, 1])})")
    o6 = w(f"const(value=1.0) : fp16{_ints([1, 1, 1, sc[0], 1, sc[1]])}")
    m6 = w(f"mul({x6}, {o6})")
    w(f"reshape({m6}, shape={_ints([n, c, h * sc[0], wd * sc[1]])})", "y")
    return Form(w.func((n, c, h, wd), "%y"), {}, (n, c, h, wd), "upsample_nearest", {"scales": list(sc)})


def bilinear_weights(size: int, out: int, align: bool) -> np.ndarray:
    """torch's bilinear interpolation weights for an output size (an independent formula)."""
    a = np.zeros((out, size))
    scale = (size - 1) / (out - 1) if align and out > 1 else size / out
    for i in range(out):
        src = i * scale if align else max(scale * (i + 0.5) - 0.5, 0.0)
        i0 = min(int(src), size - 1)
        i1 = i0 + 1 if i0 < size - 1 else i0
        lam = src - i0
        a[i, i0] += 1 - lam
        a[i, i1] += lam
    return a


def upsample_bilinear(n=1, c=2, h=3, wd=4, size=(6, 8), align=False, perturb=0.0) -> Form:
    """Form 8."""
    w = _W()
    ah = bilinear_weights(h, size[0], align)
    aw = bilinear_weights(wd, size[1], align).T
    ah[0, 0] += perturb
    weights = {"u.interp_h": ah.astype(np.float16), "u.interp_w": aw.astype(np.float16)}
    a = w(f'const(weight="u.interp_h") : fp16[{size[0]}, {h}]')
    b = w(f'const(weight="u.interp_w") : fp16[{wd}, {size[1]}]')
    t = w(f"matmul({a}, %x)")
    w(f"matmul({t}, {b})", "y")
    return Form(w.func((n, c, h, wd), "%y"), weights, (n, c, h, wd), "upsample_bilinear" if not perturb else "",
                {"size": list(size), "align_corners": align})
