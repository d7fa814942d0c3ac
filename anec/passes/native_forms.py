"""The canonical core-op forms of spatial layers, read back: windows, conv terms, the native conv.

The importer writes a convolution, pooling or upsampling layer as a fixed
form of the core IR ops (docs/torch.md); the select-native pass
(:mod:`anec.passes.select_native`) replaces each form with one target op. This
module holds what its rules share: reading the pieces of a form (strided
window slices, padding, left folds of adds, the per-position conv terms) and
writing the native ``conv`` a matched form becomes, or recording why a limit
keeps the core-op form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Sequence, cast

from anec.ir.ops import SPATIAL_LIMITS
from anec.passes.rewrite import Rewriter

if TYPE_CHECKING:
    from anec.ir.nodes import Node, Value


# ---- reading the pieces of a form -------------------------------------------------------


def producer_of(v: "Value | None", op: str) -> "Node | None":
    """The producer of ``v`` when it is an ``op`` node."""
    p = v.producer if v is not None else None
    return p if p is not None and p.op == op else None


def slice_ranges(node: "Node") -> list[range]:
    """The indices a slice node takes per dim (python slice semantics resolved)."""
    shape = node.operands[0].type.shape
    stride = node.attrs.get("stride") or [1] * len(shape)
    return [range(*slice(b, e, s).indices(d))
            for b, e, s, d in zip(node.attrs["begin"], node.attrs["end"], stride, shape)]


def sliced_source(v: "Value") -> tuple["Value", list[range]]:
    """(source, ranges): a window slice's operand and ranges (a slice keeping batch and
    channels whole), or ``v`` itself read whole (a group's channel slice is a source)."""
    p = producer_of(v, "slice")
    if p is not None:
        r = slice_ranges(p)
        shape = p.operands[0].type.shape
        if len(r) < 2 or (r[0] == range(shape[0]) and r[1] == range(shape[1])):
            return p.operands[0], r
    return v, [range(d) for d in v.type.shape]


def const_node(v: "Value") -> "Node | None":
    return producer_of(v, "const")


def _constant(v: "Value") -> bool:
    """A const, or one group's slice of a const (the general grouped form)."""
    s = producer_of(v, "slice")
    return const_node(v) is not None or (s is not None and const_node(s.operands[0]) is not None)


def padded_source(v: "Value", value: float) -> tuple["Value", list[int]]:
    """(x, [pt, pb, pl, pr]) when ``v = pad(x)`` pads only H and W with ``value``, else (v, zeros)."""
    p = producer_of(v, "pad")
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


def window_of(reads: list[list[range]], kernel: tuple[int, int], source: "Value") -> Window | None:
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
    strides: list[int] = []
    for a, size in ((0, hp), (1, wp)):
        span = size - dil[a] * (kernel[a] - 1) - 1
        # one output: the smallest stride for which the native op also has one
        s = first[2 + a].step if out[a] > 1 else max(1, span + 1)
        if span < 0 or span // s + 1 != out[a]:
            return None  # the native op's output size would differ from the form's
        strides.append(s)
    for pos, r in enumerate(reads):
        i, j = divmod(pos, kw)
        want = [range(n), range(c),
                range(i * dil[0], i * dil[0] + (out[0] - 1) * strides[0] + 1, strides[0]),
                range(j * dil[1], j * dil[1] + (out[1] - 1) * strides[1] + 1, strides[1])]
        if r != want:
            return None
    return Window(kernel, (strides[0], strides[1]), dil, out)


def fold_terms(v: "Value") -> list["Value"]:
    """The terms of a left fold ``add(add(t0, t1), t2)...`` ending at ``v`` (inner sums used
    once), or ``[v]``."""
    terms: list["Value"] = []
    while True:
        p = producer_of(v, "add")
        if p is None:
            terms.append(v)
            break
        acc, t = p.operands
        terms.append(t)
        if producer_of(acc, "add") is None or len(acc.uses) != 1:
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
    r = slice_ranges(ws)
    kh, kw = w.type.shape[2:]
    if r[0] != range(w.type.shape[0]) or r[1] != range(w.type.shape[1]) or len(r[2]) != 1 or len(r[3]) != 1:
        return None
    i, j = r[2].start, r[3].start
    return (kh - 1 - i, kw - 1 - j) if flipped else (i, j)


def conv_term(v: "Value") -> Term | None:
    """The conv term ``v`` is (forms 1, 2 depthwise, 3), or None."""
    if v.producer is None or len(v.uses) > 1:
        return None
    n = v.producer
    if n.op == "conv1x1" and not n.optional:
        xs, wv = n.operands
        kind, ws = "conv", producer_of(wv, "slice")
        t = producer_of(wv, "transpose")
        if t is not None and list(t.attrs["perm"]) == [1, 0, 2, 3]:
            kind, ws = "transpose", producer_of(t.operands[0], "slice")
        if ws is None or not _constant(ws.operands[0]):
            return None
        pos = _weight_pos(ws, ws.operands[0], kind == "transpose")
        if pos is None and kind == "conv" and const_node(ws.operands[0]) is not None \
                and tuple(wv.type.shape[2:]) == (1, 1):
            # a group's 1x1 kernel read whole: conv1x1(slice(x), slice(W)) per group (form 2)
            return Term(*sliced_source(xs), wv, (0, 0), kind)
    elif n.op == "mul":
        for xs, wr in (n.operands, n.operands[::-1]):
            r = producer_of(wr, "reshape")
            ws = producer_of(r.operands[0], "slice") if r is not None else None
            if ws is not None and const_node(ws.operands[0]) is not None and ws.operands[0].type.rank == 4:
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
    source, read = sliced_source(xs)
    return Term(source, read, ws.operands[0], pos, kind)


class ConvMatch(NamedTuple):
    kind: str
    x: "Value"
    weight: "Value"
    pad: list[int]
    window: Window


def conv_form(root: "Value") -> ConvMatch | None:
    """The form-1/2/3 conv whose sum is ``root`` (weight a const), or None."""
    last = producer_of(root, "add")
    if last is not None and conv_term(last.operands[1]) is None:
        return None  # not a sum of conv terms: no need to walk the chain back
    found = [conv_term(t) for t in fold_terms(root)]
    terms = [t for t in found if t is not None]
    if not terms or len(terms) != len(found):
        return None
    first = terms[0]
    w = first.weight
    if any(t.weight is not w or t.source is not first.source or t.kind != first.kind for t in terms):
        return None
    kh, kw = w.type.shape[2:]
    kernel = (kh, kw)
    if [t.pos for t in terms] != [(i, j) for i in range(kernel[0]) for j in range(kernel[1])]:
        return None
    win = window_of([t.read for t in terms], kernel, first.source)
    if win is None:
        return None
    x, pad = padded_source(first.source, 0.0)
    return ConvMatch(first.kind, x, w, pad, win)


def _zero_inserted(v: "Value") -> tuple["Value", tuple[int, int]] | None:
    """(x, strides) when ``v`` is form 3's zero insertion of x, else None."""
    zu = producer_of(v, "slice")
    z4 = producer_of(zu.operands[0], "reshape") if zu is not None else None
    z6 = producer_of(z4.operands[0], "pad") if z4 is not None else None
    x6 = producer_of(z6.operands[0], "reshape") if z6 is not None else None
    if zu is None or z4 is None or z6 is None or x6 is None or float(z6.attrs.get("value", 0.0)) != 0.0:
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
    if slice_ranges(zu) != want:
        return None
    return x, (sh, sw)


def _cropped(v: "Value") -> tuple["Value", list[int]]:
    """(z, [top, bottom, left, right]) when ``v`` is a unit-stride slice cropping only H and W of
    form 3's zero-inserted z (a transposed conv padded beyond its kernel extent), else
    (v, zeros)."""
    c = producer_of(v, "slice")
    if c is not None and c.operands[0].type.rank == 4 and _zero_inserted(c.operands[0]) is not None:
        z = c.operands[0]
        r = slice_ranges(c)
        n, ch, h, w = z.type.shape
        if r[0] == range(n) and r[1] == range(ch) and r[2].step == 1 and r[3].step == 1:
            return z, [r[2].start, h - r[2].stop, r[3].start, w - r[3].stop]
    return v, [0, 0, 0, 0]


def limit_problems(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                   pad: Sequence[int] = ()) -> list[str]:
    return SPATIAL_LIMITS.problems(kernel=kernel, strides=strides, dilations=dilations, pad=pad)


def record_declined(rw: Rewriter, what: str, problems: list[str], constraint: str) -> None:
    rw.record(constraint, f"{what} {'; '.join(problems)}: left in its core-op form")
    return None


def _channels_ok(rw: Rewriter, what: str, *counts: int) -> bool:
    limit = rw.ctx.target.max_conv_out_channels
    if max(counts) > limit:
        record_declined(rw, what, [f"{max(counts)} channels exceed {limit}"], "ANE-CONV-CHANNELS")
        return False
    return True


def conv_node(rw: Rewriter, m: ConvMatch, groups: int = 1, weight: "Value | None" = None,
               x: "Value | None" = None, pad: list[int] | None = None) -> "Value | None":
    """The target op for a matched conv form (None when a limit keeps the core-op form)."""
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
        what = f"conv_transpose %{cast('Node', rw.anchor).results[0].name}"
        problems = limit_problems(win.kernel, strides, win.dilations, native)
        if problems:
            record_declined(rw, what, problems, "ANE-SPATIAL-LIMITS")
            return None
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
    what = f"conv %{cast('Node', rw.anchor).results[0].name}"
    problems = limit_problems(win.kernel, win.strides, win.dilations, pad)
    if problems:
        if groups == 1:
            patched = _patchify(rw, what, problems, x, w, win, pad)
            if patched is not None:
                return patched
        record_declined(rw, what, problems, "ANE-SPATIAL-LIMITS")
        return None
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
    wc = const_node(w)
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
