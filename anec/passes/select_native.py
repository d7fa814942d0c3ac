"""select-native: the canonical 27-op forms of spatial layers become the ANE's native ops."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from anec.ir.ops import SPATIAL_LIMITS, bilinear_matrix
from anec.passes.base import Pass, PassContext
from anec.passes.dce import remove_dead_nodes
from anec.passes.rewrite import Rewriter, rewrite_greedily

if TYPE_CHECKING:
    from anec.ir.graph import Graph, Node, Value


# ---- reading the pieces of a form -------------------------------------------------------


def _prod(v: "Value | None", op: str) -> "Node | None":
    """The producer of ``v`` when it is an ``op`` node."""
    p = v.producer if v is not None else None
    return p if p is not None and p.op == op else None


def _ranges(node: "Node") -> list[range]:
    """The indices a slice node takes per dim (python slice semantics resolved)."""
    shape = node.operands[0].type.shape
    stride = node.attrs.get("stride") or [1] * len(shape)
    return [range(*slice(b, e, s).indices(d))
            for b, e, s, d in zip(node.attrs["begin"], node.attrs["end"], stride, shape)]


def _sliced(v: "Value") -> tuple["Value", list[range]]:
    """(source, ranges): a window slice's operand and ranges (a slice keeping batch and
    channels whole), or ``v`` itself read whole (a group's channel slice is a source)."""
    p = _prod(v, "slice")
    if p is not None:
        r = _ranges(p)
        shape = p.operands[0].type.shape
        if len(r) < 2 or (r[0] == range(shape[0]) and r[1] == range(shape[1])):
            return p.operands[0], r
    return v, [range(d) for d in v.type.shape]


def _const_node(v: "Value") -> "Node | None":
    return _prod(v, "const")


def _constant(v: "Value") -> bool:
    """A const, or one group's slice of a const (the general grouped form)."""
    s = _prod(v, "slice")
    return _const_node(v) is not None or (s is not None and _const_node(s.operands[0]) is not None)


def _padded(v: "Value", value: float) -> tuple["Value", list[int]]:
    """(x, [pt, pb, pl, pr]) when ``v = pad(x)`` pads only H and W with ``value``, else (v, zeros)."""
    p = _prod(v, "pad")
    if p is not None and p.operands[0].type.rank == 4:
        b, a = p.attrs["before"], p.attrs["after"]
        if float(p.attrs.get("value", 0.0)) == value and b[:2] == [0, 0] and a[:2] == [0, 0]:
            return p.operands[0], [b[2], a[2], b[3], a[3]]
    return v, [0, 0, 0, 0]


class Window(NamedTuple):
    """What the strided slices of one form read: kernel, strides, dilations, output size."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    out: tuple[int, int]


def _window(reads: list[list[range]], kernel: tuple[int, int], source: "Value") -> Window | None:
    """The window the per-position slices ``reads`` (row-major kernel order) of ``source``
    describe, or None when they are not exactly the spec's slices."""
    kh, kw = kernel
    if len(reads) != kh * kw or source.type.rank != 4:
        return None  # the forms are NCHW: anything else is someone else's sum of slices
    first = reads[0]
    n, c, hp, wp = source.type.shape
    out = (len(first[2]), len(first[3]))
    dil = (reads[kw][2].start if kh > 1 else 1, reads[1][3].start if kw > 1 else 1)
    if min(dil) < 1:
        return None
    strides = []
    for a, size in ((0, hp), (1, wp)):
        span = size - dil[a] * (kernel[a] - 1) - 1
        # one output: the smallest stride for which the native op also has one
        s = first[2 + a].step if out[a] > 1 else max(1, span + 1)
        if span < 0 or span // s + 1 != out[a]:
            return None  # the native op's output size would differ from the form's
        strides.append(s)
    strides = tuple(strides)
    for pos, r in enumerate(reads):
        i, j = divmod(pos, kw)
        want = [range(n), range(c),
                range(i * dil[0], i * dil[0] + (out[0] - 1) * strides[0] + 1, strides[0]),
                range(j * dil[1], j * dil[1] + (out[1] - 1) * strides[1] + 1, strides[1])]
        if r != want:
            return None
    return Window(kernel, strides, dil, out)


def _fold(v: "Value") -> list["Value"]:
    """The terms of a left fold ``add(add(t0, t1), t2)...`` ending at ``v`` (inner sums used
    once), or ``[v]``."""
    terms: list["Value"] = []
    while True:
        p = _prod(v, "add")
        if p is None:
            terms.append(v)
            break
        acc, t = p.operands
        terms.append(t)
        if _prod(acc, "add") is None or len(acc.uses) != 1:
            terms.append(acc)
            break
        v = acc
    return terms[::-1]


# ---- conv terms -------------------------------------------------------------------------


class Term(NamedTuple):
    """One kernel position's product: the input slice, the weight const, (i, j), and kind."""

    source: "Value"
    read: list[range]
    weight: "Value"
    pos: tuple[int, int]
    kind: str  # "conv" (form 1), "depthwise" (form 2), "transpose" (form 3)


def _weight_pos(ws: "Node", w: "Value", flipped: bool) -> tuple[int, int] | None:
    """(i, j) of a one-position weight slice covering dims 0 and 1 whole."""
    if ws is None:
        return None
    r = _ranges(ws)
    kh, kw = w.type.shape[2:]
    if r[0] != range(w.type.shape[0]) or r[1] != range(w.type.shape[1]) or len(r[2]) != 1 or len(r[3]) != 1:
        return None
    i, j = r[2].start, r[3].start
    return (kh - 1 - i, kw - 1 - j) if flipped else (i, j)


def _term(v: "Value") -> Term | None:
    """The conv term ``v`` is (forms 1, 2 depthwise, 3), or None."""
    if v.producer is None or len(v.uses) > 1:
        return None
    n = v.producer
    if n.op == "conv1x1" and not n.optional:
        xs, wv = n.operands
        kind, ws = "conv", _prod(wv, "slice")
        t = _prod(wv, "transpose")
        if t is not None and list(t.attrs["perm"]) == [1, 0, 2, 3]:
            kind, ws = "transpose", _prod(t.operands[0], "slice")
        if ws is None or not _constant(ws.operands[0]):
            return None
        pos = _weight_pos(ws, ws.operands[0], kind == "transpose")
        if pos is None and kind == "conv" and _const_node(ws.operands[0]) is not None \
                and tuple(wv.type.shape[2:]) == (1, 1):
            # a group's 1x1 kernel read whole: conv1x1(slice(x), slice(W)) per group (form 2)
            return Term(*_sliced(xs), wv, (0, 0), kind)
    elif n.op == "mul":
        for xs, wr in (n.operands, n.operands[::-1]):
            r = _prod(wr, "reshape")
            ws = _prod(r.operands[0], "slice") if r is not None else None
            if ws is not None and _const_node(ws.operands[0]) is not None and ws.operands[0].type.rank == 4:
                break
        else:
            return None
        w = ws.operands[0]
        c = w.type.shape[0]
        if w.type.shape[1] != 1 or list(wr.type.shape) != [1, c, 1, 1] or xs.type.rank != 4 \
                or xs.type.shape[1] != c:
            return None
        kind, pos = "depthwise", _weight_pos(ws, w, False)
    else:
        return None
    if pos is None:
        return None
    source, read = _sliced(xs)
    return Term(source, read, ws.operands[0], pos, kind)


class ConvMatch(NamedTuple):
    kind: str
    x: "Value"
    weight: "Value"
    pad: list[int]
    window: Window


def _conv_form(root: "Value") -> ConvMatch | None:
    """The form-1/2/3 conv whose sum is ``root`` (weight a const), or None."""
    last = _prod(root, "add")
    if last is not None and _term(last.operands[1]) is None:
        return None  # not a sum of conv terms: no need to walk the chain back
    terms = [_term(t) for t in _fold(root)]
    if not terms or any(t is None for t in terms):
        return None
    first = terms[0]
    w = first.weight
    if any(t.weight is not w or t.source is not first.source or t.kind != first.kind for t in terms):
        return None
    kernel = tuple(w.type.shape[2:])
    if [t.pos for t in terms] != [(i, j) for i in range(kernel[0]) for j in range(kernel[1])]:
        return None
    win = _window([t.read for t in terms], kernel, first.source)
    if win is None:
        return None
    x, pad = _padded(first.source, 0.0)
    return ConvMatch(first.kind, x, w, pad, win)


def _zero_inserted(v: "Value") -> tuple["Value", tuple[int, int]] | None:
    """(x, strides) when ``v`` is form 3's zero insertion of x, else None."""
    zu = _prod(v, "slice")
    z4 = _prod(zu.operands[0], "reshape") if zu is not None else None
    z6 = _prod(z4.operands[0], "pad") if z4 is not None else None
    x6 = _prod(z6.operands[0], "reshape") if z6 is not None else None
    if x6 is None or float(z6.attrs.get("value", 0.0)) != 0.0:
        return None
    x = x6.operands[0]
    if x.type.rank != 4:
        return None
    n, c, h, w = x.type.shape
    if list(x6.result.type.shape) != [n, c, h, 1, w, 1] or z6.attrs["before"] != [0] * 6:
        return None
    a = z6.attrs["after"]
    sh, sw = a[3] + 1, a[5] + 1
    if a[:3] != [0, 0, 0] or a[4] != 0 or list(z4.result.type.shape) != [n, c, h * sh, w * sw]:
        return None
    want = [range(n), range(c), range((h - 1) * sh + 1), range((w - 1) * sw + 1)]
    if _ranges(zu) != want:
        return None
    return x, (sh, sw)


def _cropped(v: "Value") -> tuple["Value", list[int]]:
    """(z, [top, bottom, left, right]) when ``v`` is a unit-stride slice cropping only H and W of
    form 3's zero-inserted z (a transposed conv padded beyond its kernel extent), else
    (v, zeros)."""
    c = _prod(v, "slice")
    if c is not None and c.operands[0].type.rank == 4 and _zero_inserted(c.operands[0]) is not None:
        z = c.operands[0]
        r = _ranges(c)
        n, ch, h, w = z.type.shape
        if r[0] == range(n) and r[1] == range(ch) and r[2].step == 1 and r[3].step == 1:
            return z, [r[2].start, h - r[2].stop, r[3].start, w - r[3].stop]
    return v, [0, 0, 0, 0]


def _limit_problems(kernel, strides, dilations, pad=()) -> list[str]:
    return SPATIAL_LIMITS.problems(kernel=kernel, strides=strides, dilations=dilations, pad=pad)


def _declined(rw: Rewriter, what: str, problems: list[str], constraint: str) -> None:
    rw.record(constraint, f"{what} {'; '.join(problems)}: left in its 27-op form")
    return None


def _channels_ok(rw: Rewriter, what: str, *counts: int) -> bool:
    limit = rw.ctx.target.max_conv_out_channels
    if max(counts) > limit:
        _declined(rw, what, [f"{max(counts)} channels exceed {limit}"], "ANE-CONV-CHANNELS")
        return False
    return True


def _conv_node(rw: Rewriter, m: ConvMatch, groups: int = 1, weight: "Value | None" = None,
               x: "Value | None" = None, pad: list[int] | None = None) -> "Value | None":
    """The target op for a matched conv form (None when a limit keeps the 27-op form)."""
    win, w = m.window, weight or m.weight
    x, pad = x or m.x, pad if pad is not None else m.pad
    if m.kind == "transpose":
        if win.strides != (1, 1):
            return None
        x, cropped = _cropped(x)
        z = _zero_inserted(x)
        x, strides = z if z is not None else (x, (1, 1))
        ext = [win.dilations[a // 2] * (win.kernel[a // 2] - 1) for a in range(4)]
        crop = [e - p + c for e, p, c in zip(ext, pad, cropped)]
        if min(crop) < 0:
            return None  # padding the output beyond a transposed conv's: not form 3
        # padding beyond the kernel extent (the importer's crop): the native op crops what its
        # limits allow, a slice the rest
        native = [min(c, e) for c, e in zip(crop, ext)]
        rest = [c - k for c, k in zip(crop, native)]
        what = f"conv_transpose %{rw.anchor.results[0].name}"
        problems = _limit_problems(win.kernel, strides, win.dilations, native)
        if problems:
            return _declined(rw, what, problems, "ANE-SPATIAL-LIMITS")
        if not _channels_ok(rw, what, x.type.shape[1], w.type.shape[1] * groups):
            return None
        y = rw.op("conv_transpose", x, w, strides=list(strides), pad=native, dilations=list(win.dilations),
                  groups=groups, suffix="convt")
        if any(rest):
            n, c, h, wd = y.type.shape
            y = rw.op("slice", y, begin=[0, 0, rest[0], rest[2]], end=[n, c, h - rest[1], wd - rest[3]],
                      suffix="crop")
        rw.record(None, f"{what}: {win.kernel[0]}x{win.kernel[1]} transposed conv "
                  f"(strides {list(strides)}, crop {crop}) -> one conv_transpose"
                  + (f", then a slice cropping {rest}" if any(rest) else ""))
        return y
    what = f"conv %{rw.anchor.results[0].name}"
    problems = _limit_problems(win.kernel, win.strides, win.dilations, pad)
    if problems:
        if groups == 1:
            y = _patchify(rw, what, problems, x, w, win, pad)
            if y is not None:
                return y
        return _declined(rw, what, problems, "ANE-SPATIAL-LIMITS")
    cout = w.type.shape[0]
    if not _channels_ok(rw, what, x.type.shape[1], cout):
        return None
    y = rw.op("conv", x, w, strides=list(win.strides), pad=list(pad), dilations=list(win.dilations),
              groups=groups, suffix="conv")
    rw.record(None, f"{what}: {win.kernel[0]}x{win.kernel[1]} conv (strides {list(win.strides)}, pad {pad}, "
              f"dilations {list(win.dilations)}, groups {groups}) -> one conv")
    return y


def _patchify(rw: Rewriter, what: str, problems: list[str], x: "Value", w: "Value", win: Window,
              pad: list[int]) -> "Value | None":
    """A patch embedding beyond the limits (kernel == stride, no padding or dilation, batch 1,
    e.g. ViT-B/16's stride 16) as the patches gathered into channels: reshape to
    [Cin, Ho, KH, Wo, KW], transpose to [Cin, KH, KW, Ho, Wo], reshape to
    [1, Cin*KH*KW, 1, Ho*Wo], one conv1x1 by the weight viewed as [Cout, Cin*KH*KW, 1, 1],
    reshape to [1, Cout, Ho, Wo]. None when the conv is not such a patch embedding."""
    (kh, kw), (ho, wo) = win.kernel, win.out
    wc = _const_node(w)
    if win.strides != win.kernel or win.dilations != (1, 1) or any(pad) or x.type.rank != 4 \
            or x.type.shape[0] != 1 or wc is None or "weight" not in wc.attrs:
        return None
    _, cin, h, wd = x.type.shape
    cout = w.type.shape[0]
    if not _channels_ok(rw, what, cin * kh * kw, cout):
        return None
    if (h, wd) != (ho * kh, wo * kw):  # the rows and columns no patch reads
        x = rw.op("slice", x, begin=[0, 0, 0, 0], end=[1, cin, ho * kh, wo * kw], suffix="patch_rows")
    p = rw.op("reshape", x, shape=[cin, ho, kh, wo, kw], suffix="patches")
    p = rw.op("transpose", p, perm=[0, 2, 4, 1, 3], suffix="patches_t")
    p = rw.op("reshape", p, shape=[1, cin * kh * kw, 1, ho * wo], suffix="patches_c")
    from anec.ir.types import TensorType

    w2 = rw.const_weight(dict(wc.attrs), TensorType(w.type.dtype, (cout, cin * kh * kw, 1, 1)), suffix="w")
    y = rw.op("conv1x1", p, w2, suffix="patch_conv")
    y = rw.op("reshape", y, shape=[1, cout, ho, wo], suffix="patch_out")
    rw.record("ANE-SPATIAL-LIMITS", f"{what} {'; '.join(problems)}: a {kh}x{kw} patch embedding -> "
              f"patches as {cin * kh * kw} channels, one conv1x1")
    return y


# ---- rules ----------------------------------------------------------------------------


def _is_fold_root(node: "Node") -> bool:
    """Whether ``node``'s result ends its fold (no user adds another term to it)."""
    v = node.results[0]
    if len(v.uses) == 1:
        u = v.uses[0]
        if u.op == "add" and u.operands[0] is v and _term(u.operands[1]) is not None:
            return False
    return True


# sum over kernel positions of conv1x1(slice(pad(x)), slice(W)) -> conv(x, W)      (form 1)
# sum of mul(slice(pad(x)), reshape(slice(W)))                  -> conv(x, W, groups=C) (form 2)
# the same over zero-inserted x with flipped, transposed slices -> conv_transpose(x, W)   (form 3)
def conv_from_positions(node: "Node", rw: Rewriter) -> "Value | None":
    if not _is_fold_root(node):
        return None
    m = _conv_form(node.results[0])
    if m is None or _const_node(m.weight) is None:
        return None
    if m.kind == "depthwise":
        return _conv_node(rw, m, groups=m.weight.type.shape[0])
    return _conv_node(rw, m)


# concat(form 1 on group k's channels, ...) {axis=1} -> conv(x, W, groups=g)             (form 2)
# concat(form 3 on group k's channels, ...) {axis=1} -> conv_transpose(x, W, groups=g)   (form 3)
def grouped_conv(node: "Node", rw: Rewriter) -> "Value | None":
    out = node.results[0]
    if out.type.rank != 4 or node.attrs["axis"] % 4 != 1 or len(node.operands) < 2:
        return None
    g = len(node.operands)
    parts = []
    for v in node.operands:
        if len(v.uses) != 1 or v.producer is None:
            return None
        m = _conv_form(v)
        if m is None or m.kind == "depthwise" or m.pad != [0, 0, 0, 0]:
            return None
        parts.append(m)
    first = parts[0]
    wk = _prod(first.weight, "slice")
    src = _prod(first.x, "slice")
    if wk is None or src is None or _const_node(wk.operands[0]) is None:
        return None
    w, xp = wk.operands[0], src.operands[0]
    kh, kw = w.type.shape[2:]
    cin = xp.type.shape[1]
    # a conv weight is [Cout, Cin/g, KH, KW] (groups along dim 0); a transposed conv's is
    # [Cin, Cout/g, KH, KW] (groups along dim 0 as well, by input channel)
    if w.type.shape[0] % g or (first.kind == "conv" and w.type.shape[1] * g != cin) \
            or (first.kind == "transpose" and w.type.shape[0] != cin):
        return None
    rows, cin_g = w.type.shape[0] // g, cin // g
    for k, m in enumerate(parts):
        ws, xs = _prod(m.weight, "slice"), _prod(m.x, "slice")
        if m.kind != first.kind or ws is None or xs is None or ws.operands[0] is not w \
                or xs.operands[0] is not xp or m.window != first.window:
            return None
        if _ranges(ws) != [range(k * rows, (k + 1) * rows), range(w.type.shape[1]), range(kh), range(kw)]:
            return None
        n, _, hp, wp = xp.type.shape
        if _ranges(xs) != [range(n), range(k * cin_g, (k + 1) * cin_g), range(hp), range(wp)]:
            return None
    x, pad = _padded(xp, 0.0)
    return _conv_node(rw, first, groups=g, weight=w, x=x, pad=pad)


def _pool_reads(values: list["Value"]) -> tuple["Value", list[list[range]]] | None:
    reads, source = [], None
    for v in values:
        src, r = _sliced(v)
        if source is None:
            source = src
        if src is not source:
            return None
        reads.append(r)
    return source, reads


def _square_kernel(count: int, source: "Value", reads: list[list[range]]) -> Window | None:
    """The window of ``count`` positions: try every (kh, kw) with kh * kw == count."""
    for kh in range(1, count + 1):
        if count % kh == 0:
            win = _window(reads, (kh, count // kh), source)
            if win is not None and win.dilations == (1, 1):
                return win
    return None


def _pool_limits(rw: Rewriter, what: str, win: Window, pad: list[int]) -> bool:
    problems = _limit_problems(win.kernel, win.strides, (1, 1), pad)
    if problems:
        _declined(rw, what, problems, "ANE-SPATIAL-LIMITS")
        return False
    return True


# reduce_max(concat(reshape(slice(pad(x, -inf)))...) {axis=2}) {axes=[2]} -> max_pool(x)   (form 4)
def max_pool_from_windows(node: "Node", rw: Rewriter) -> "Value | None":
    st = node.operands[0]
    cat = _prod(st, "concat")
    if cat is None or st.type.rank != 5 or [a % 5 for a in node.attrs["axes"]] != [2] \
            or node.attrs.get("keep_dims", False) or cat.attrs["axis"] % 5 != 2 or len(st.uses) != 1:
        return None
    slices = []
    for r in cat.operands:
        rp = _prod(r, "reshape")
        if rp is None or len(r.uses) != 1 or r.type.shape[2] != 1:
            return None
        slices.append(rp.operands[0])
    got = _pool_reads(slices)
    if got is None:
        return None
    win = _square_kernel(len(slices), *got)
    if win is None:
        return None
    x, pad = _padded(got[0], -math.inf)
    what = f"max_pool %{node.results[0].name}"
    if not _pool_limits(rw, what, win, pad):
        return None
    y = rw.op("max_pool", x, kernel_sizes=list(win.kernel), strides=list(win.strides), pad=pad, suffix="pool")
    rw.record(None, f"{what}: {win.kernel[0]}x{win.kernel[1]} max pool (strides {list(win.strides)}, "
              f"pad {pad}) -> one max_pool")
    return y


def _const_array(rw: Rewriter, v: "Value") -> np.ndarray | None:
    """The value of a const (None when it is not a const or its weight is not available)."""
    c = _const_node(v)
    if c is None:
        return None
    from anec.ir.weight_binding import materialize

    try:
        return np.asarray(materialize(c, rw.ctx.weights), dtype=np.float64)
    except Exception:  # noqa: BLE001 - a weight the store lacks: the form cannot be checked
        return None


def _rounded(a: np.ndarray, v: "Value") -> np.ndarray:
    return np.asarray(a).astype(v.type.dtype.np).astype(np.float64)


# mul(sum of slice(pad(x, 0)) windows, 1/(KH*KW) or 1/count) -> avg_pool(x)   (form 5)
def avg_pool_from_windows(node: "Node", rw: Rewriter) -> "Value | None":
    for acc, d in (node.operands, node.operands[::-1]):
        if _prod(acc, "add") is not None and len(acc.uses) == 1:
            break
    else:
        return None
    got = _pool_reads(_fold(acc))
    if got is None:
        return None
    source, reads = got
    win = _square_kernel(len(reads), source, reads)
    if win is None:
        return None
    x, pad = _padded(source, 0.0)
    div = _const_array(rw, d)
    if div is None or acc.type.rank != 4 or node.results[0].type != acc.type:
        return None
    k = win.kernel[0] * win.kernel[1]
    inside = np.ones((1, 1) + x.type.shape[2:])
    inside = np.pad(inside, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    count = sum(inside[:, :, i: i + (win.out[0] - 1) * win.strides[0] + 1: win.strides[0],
                       j: j + (win.out[1] - 1) * win.strides[1] + 1: win.strides[1]]
                for i in range(win.kernel[0]) for j in range(win.kernel[1]))
    try:
        got_div = np.broadcast_to(div, (1, 1) + win.out)
    except ValueError:
        return None
    if np.array_equal(got_div, np.broadcast_to(_rounded(np.float64(1.0 / k), d), got_div.shape)):
        exclude = False
    elif np.array_equal(got_div, _rounded(1.0 / count, d)):
        exclude = True
    else:  # divisor_override, ceil-mode windows counting the padding in part: the window sum
        exclude = None  # (the average times KH*KW) times the form's own divisor
    what = f"avg_pool %{node.results[0].name}"
    if not _pool_limits(rw, what, win, pad):
        return None
    y = rw.op("avg_pool", x, kernel_sizes=list(win.kernel), strides=list(win.strides), pad=pad,
              exclude_padding_from_average=bool(exclude), suffix="pool")
    if exclude is None:
        from anec.ir.types import TensorType

        kk = rw.const_value(float(k), TensorType(y.type.dtype, ()), suffix="kk")
        y = rw.op("mul", rw.op("mul", y, kk, suffix="sum"), d, suffix="div")
        rw.record(None, f"{what}: {win.kernel[0]}x{win.kernel[1]} window sum (strides {list(win.strides)}, "
                  f"pad {pad}) -> one avg_pool times {k}, times the divisor")
        return y
    rw.record(None, f"{what}: {win.kernel[0]}x{win.kernel[1]} average pool (strides {list(win.strides)}, "
              f"pad {pad}, exclude_padding_from_average={str(exclude).lower()}) -> one avg_pool")
    return y


# reshape(mul(reshape(x, [N,C,H,1,W,1]), ones[1,1,1,sh,1,sw]), [N,C,H*sh,W*sw]) -> upsample_nearest(x)  (form 7)
def upsample_nearest_from_broadcast(node: "Node", rw: Rewriter) -> "Value | None":
    m6 = node.operands[0]
    mul = _prod(m6, "mul")
    if mul is None or len(m6.uses) != 1 or m6.type.rank != 6 or node.results[0].type.rank != 4:
        return None
    for x6, o6 in (mul.operands, mul.operands[::-1]):
        r = _prod(x6, "reshape")
        if r is not None and _const_node(o6) is not None:
            break
    else:
        return None
    x = r.operands[0]
    if x.type.rank != 4:
        return None
    n, c, h, w = x.type.shape
    sh, sw = m6.type.shape[3], m6.type.shape[5]
    ones = _const_array(rw, o6)
    if list(x6.type.shape) != [n, c, h, 1, w, 1] or list(o6.type.shape) != [1, 1, 1, sh, 1, sw] \
            or ones is None or not np.all(ones == 1.0) \
            or list(node.results[0].type.shape) != [n, c, h * sh, w * sw]:
        return None
    what = f"upsample_nearest %{node.results[0].name}"
    problems = SPATIAL_LIMITS.problems(scales=(sh, sw))
    if problems:
        return _declined(rw, what, problems, "ANE-SPATIAL-LIMITS")
    y = rw.op("upsample_nearest", x, scales=[sh, sw], suffix="up")
    rw.record(None, f"{what}: nearest x{sh}x{sw} -> one upsample_nearest")
    return y


BILINEAR_ATOL = 2e-3
"""How far a stored interpolation matrix may be from the exact bilinear weights (fp16 storage
rounds weights <= 1 by at most 2**-12; a checkpoint in float32 is closer)."""


# matmul(matmul(A_h, x), A_w) with bilinear weight matrices -> upsample_bilinear(x)   (form 8)
def upsample_bilinear_from_matrices(node: "Node", rw: Rewriter) -> "Value | None":
    t, aw = node.operands
    inner = _prod(t, "matmul")
    if inner is None or len(t.uses) != 1 or node.attrs.get("transpose_x") or node.attrs.get("transpose_y") \
            or inner.attrs.get("transpose_x") or inner.attrs.get("transpose_y"):
        return None
    ah, x = inner.operands
    if x.type.rank != 4 or ah.type.rank != 2 or aw.type.rank != 2:
        return None
    h, w = x.type.shape[2:]
    ho, wo = ah.type.shape[0], aw.type.shape[1]
    if ah.type.shape[1] != h or aw.type.shape[0] != w or ho < h or wo < w:
        return None
    a_h, a_w = _const_array(rw, ah), _const_array(rw, aw)
    if a_h is None or a_w is None:
        return None
    for align in (False, True):
        if np.allclose(a_h, bilinear_matrix(h, ho, align), rtol=0, atol=BILINEAR_ATOL) and \
                np.allclose(a_w, bilinear_matrix(w, wo, align).T, rtol=0, atol=BILINEAR_ATOL):
            break
    else:
        return None
    what = f"upsample_bilinear %{node.results[0].name}"
    y = rw.op("upsample_bilinear", x, size=[ho, wo], align_corners=align, suffix="up")
    rw.record(None, f"{what}: bilinear {h}x{w} -> {ho}x{wo} (align_corners={str(align).lower()}) "
              "-> one upsample_bilinear")
    return y


SELECT_RULES: dict[str, tuple] = {
    "add": (conv_from_positions,),
    "conv1x1": (conv_from_positions,),
    "mul": (conv_from_positions, avg_pool_from_windows),
    "concat": (grouped_conv,),
    "reduce_max": (max_pool_from_windows,),
    "reshape": (upsample_nearest_from_broadcast,),
    "matmul": (upsample_bilinear_from_matrices,),
}
"""op of a form's last statement -> the rules that recognize a form ending there."""


@dataclass(frozen=True)
class SelectNative(Pass):
    """Replace the canonical 27-op forms of spatial layers with one native target op each.

    The importer writes convolutions, pooling and upsampling in the 27 IR ops
    (a readable, interpretable model.ir); the ANE runs each as one native MIL
    op. This pass recognizes exactly those canonical forms and writes the
    target-level op (``conv``, ``conv_transpose``, ``max_pool``, ``avg_pool``,
    ``upsample_nearest``, ``upsample_bilinear``: ``anec ops``, "Target
    forms"): a sum over kernel positions of ``conv1x1`` on strided slices of
    the (zero-)padded input becomes ``conv`` with the full weight const; the
    depthwise ``mul`` form and the per-group ``concat`` become ``conv`` with
    ``groups``; zero insertion plus flipped, transposed weight slices becomes
    ``conv_transpose`` (grouped: a concat of that form on each group's channels
    of the zero-inserted, padded input; padded beyond its kernel extent, where
    the importer crops the zero-inserted input: the op crops what the limits
    allow, a ``slice`` the rest); ``reduce_max`` over stacked windows of a ``-inf``
    padded input becomes ``max_pool``; a window sum times ``1/(KH*KW)`` (or
    a const of ``1/count`` per position) becomes ``avg_pool``, times any other
    const divisor (divisor_override, ceil-mode windows counting padding in
    part) ``avg_pool`` times ``KH*KW`` times that divisor; the broadcast
    ``mul`` by ones between two reshapes becomes ``upsample_nearest``; two
    matmuls by constant matrices equal to bilinear weights become
    ``upsample_bilinear``. A bias stays the separate ``add`` after the conv
    (ANE-CONV-BIAS). A patch embedding (kernel == stride, no padding or
    dilation, batch 1) beyond the target forms' limits (ViT-B/16's stride 16)
    becomes its patches gathered into Cin*KH*KW channels (reshape, transpose,
    reshape) and one ``conv1x1`` (recorded). Anything else is left alone, and
    so is any other form beyond the target forms' limits (ANE-SPATIAL-LIMITS,
    ANE-CONV-CHANNELS: recorded), a form whose weights are not constants (a
    conv reads a constant weight), and bilinear matrices that differ from the
    bilinear weights of an output size. Checking divisors and matrices needs
    the weights.

    Before:
        func f(%x: fp16[1, 2, 4, 4]) {
          %w = const(weight="c.weight") : fp16[3, 2, 1, 2]
          %xp = pad(%x, before=[0, 0, 0, 1], after=[0, 0, 0, 0], value=0.0) : fp16[1, 2, 4, 5]
          %xs0 = slice(%xp, begin=[0, 0, 0, 0], end=[1, 2, 4, 4], stride=[1, 1, 1, 1]) : fp16[1, 2, 4, 4]
          %ws0 = slice(%w, begin=[0, 0, 0, 0], end=[3, 2, 1, 1]) : fp16[3, 2, 1, 1]
          %t0 = conv1x1(%xs0, %ws0) : fp16[1, 3, 4, 4]
          %xs1 = slice(%xp, begin=[0, 0, 0, 1], end=[1, 2, 4, 5], stride=[1, 1, 1, 1]) : fp16[1, 2, 4, 4]
          %ws1 = slice(%w, begin=[0, 0, 0, 1], end=[3, 2, 1, 2]) : fp16[3, 2, 1, 1]
          %t1 = conv1x1(%xs1, %ws1) : fp16[1, 3, 4, 4]
          %y = add(%t0, %t1) : fp16[1, 3, 4, 4]
          return %y
        }
    After:
        func f(%x: fp16[1, 2, 4, 4]) {
          %w = const(weight="c.weight") : fp16[3, 2, 1, 2]
          %y = conv(%x, %w, strides=[1, 1], pad=[0, 0, 1, 0], dilations=[1, 1], groups=1) : fp16[1, 3, 4, 4]
          return %y
        }

    Unchanged: a 1x1 conv without stride or padding is already native (conv1x1).
        func f(%x: fp16[1, 2, 4, 4]) {
          %w = const(weight="c.weight") : fp16[3, 2, 1, 1]
          %y = conv1x1(%x, %w) : fp16[1, 3, 4, 4]
          return %y
        }
    """

    name: ClassVar[str] = "select-native"
    tracked: ClassVar[bool] = True  # edits only through the Rewriter and remove_dead_nodes

    def run(self, graph: "Graph", ctx: PassContext) -> None:
        rw = Rewriter(graph, ctx, self.name)
        if rewrite_greedily(graph, SELECT_RULES, rw):
            remove_dead_nodes(graph)
