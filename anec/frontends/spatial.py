"""Convolutions, pooling, upsampling and padding modes, lowered to the 27 IR ops.

Each torch layer becomes one *canonical form* (docs/torch.md, "Spatial
layers"): a fixed sequence of IR statements that a reader can interpret and
check, and that the compiler's native-op selection recognises and replaces
with one native MIL op (conv, conv_transpose, max_pool, avg_pool, upsample).
All forms work on rank-4 NCHW values; 1-d layers reshape ``[N, C, L]`` to
``[N, C, 1, L]``, apply the 2-d form with a kernel of height 1, and are viewed
back as ``[N, C, L]`` (no IR). Kernel positions go in row-major order (``i``
over the kernel height outer, ``j`` over its width inner), and a layer's
weight is ONE full-shape const sliced inside the IR. A 3x3 conv with padding 1::

    %xp = pad(%x, before=[0, 0, 1, 1], after=[0, 0, 1, 1], value=0.0)
    %w = const(weight="conv.weight") : fp16[8, 4, 3, 3]
    %x0_0 = slice(%xp, begin=[0, 0, 0, 0], end=[1, 4, 16, 16], stride=[1, 1, 1, 1])
    %w0_0 = slice(%w, begin=[0, 0, 0, 0], end=[8, 4, 1, 1])
    %t0_0 = conv1x1(%x0_0, %w0_0)
    ...                                      # 9 positions
    %acc = add(%t0_0, %t0_1)  ...            # left fold, row-major
    %b = const(weight="conv.bias") : fp16[8]
    %b4 = reshape(%b, shape=[1, 8, 1, 1])
    %y = add(%acc, %b4)

The statements of a form are never shared with other layers (no CSE), so each
form stands alone. Tensors computed at import (batch norms folded into their
conv, interpolation matrices, average-pool divisor maps) are weights of the
imported model, saved with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from anec.frontends.aten import (
    Const,
    Deferred,
    Lowering,
    _hint,
    _reduce,
    aten,
    group,
)
from anec.frontends.layout import (
    View,
    channel_view,
    materialize,
    natural,
    permute_view,
    reshape_view,
    to_channels,
)
from anec.ir.graph import Value
from anec.ir.types import DType, TensorType

FP16 = DType.fp16

group("convolution, pooling and upsampling")


# ---------------------------------------------------------------------------
# geometry


@dataclass(frozen=True)
class Window:
    """Where the kernel positions of a layer read its padded input."""

    kh: int
    kw: int
    sh: int = 1
    sw: int = 1
    dh: int = 1
    dw: int = 1
    pt: int = 0
    pb: int = 0
    pl: int = 0
    pr: int = 0
    ho: int = 0
    wo: int = 0

    @property
    def padded(self) -> bool:
        return any((self.pt, self.pb, self.pl, self.pr))

    def positions(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(self.kh) for j in range(self.kw)]


def _out(size: int, k: int, s: int, d: int, p0: int, p1: int) -> int:
    return (size + p0 + p1 - d * (k - 1) - 1) // s + 1


def _ints(v: Any, n: int, default: Sequence[int] | None = None) -> list[int]:
    """A size argument of n dims (an int, a one-element list, or n values)."""
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        if default is None:
            raise ValueError("missing size argument")
        return [int(d) for d in default]
    if isinstance(v, int):
        return [v] * n
    vals = [int(d) for d in v]
    return vals * n if len(vals) == 1 else vals


def _window(h: int, w: int, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
            pads: Sequence[int]) -> Window:
    """``pads`` = (top, bottom, left, right)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    pt, pb, pl, pr = pads
    return Window(kh, kw, sh, sw, dh, dw, pt, pb, pl, pr,
                  _out(h, kh, sh, dh, pt, pb), _out(w, kw, sw, dw, pl, pr))


def _pool_window(lw: Lowering, h: int, w: int, kernel: list[int], stride: list[int],
                 dilation: list[int], padding: list[int], ceil: bool) -> Window:
    """torch's pooling geometry (symmetric padding; ceil_mode extends the end padding so
    the last window fits, and drops a last window that would start in the end padding)."""
    outs, ends = [], []
    for size, k, s, d, p in zip((h, w), kernel, stride, dilation, padding):
        if 2 * p > k:
            raise lw.fail(f"pooling padding {p} is more than half the kernel {k}",
                          "torch itself rejects it in eager mode")
        o = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
        if ceil and (o - 1) * s >= size + p:
            o -= 1
        if o < 1:
            raise lw.fail(f"pooling a size-{size} dim with kernel {k} leaves no output")
        outs.append(o)
        ends.append(max(p, (o - 1) * s + d * (k - 1) + 1 - size - p))
    return Window(kernel[0], kernel[1], stride[0], stride[1], dilation[0], dilation[1],
                  padding[0], ends[0], padding[1], ends[1], outs[0], outs[1])


# ---------------------------------------------------------------------------
# operands and the statements every form shares


def _nchw(lw: Lowering, x: Any, nsp: int, what: str) -> Value:
    """The operand as an [N, C, H, W] value ([N, C, L] -> [N, C, 1, L] for 1-d layers)."""
    v = lw.view(x)
    if len(v.shape) != nsp + 2:
        raise lw.fail(f"{what} of a rank-{len(v.shape)} tensor {list(v.shape)}",
                      f"anec imports batched {nsp}-d inputs ([N, C{', H' if nsp == 2 else ''}, "
                      f"{'W' if nsp == 2 else 'L'}]): add the batch dim (unsqueeze(0))")
    x4 = materialize(lw.em, v)
    if nsp == 1:
        n, c, length = v.shape
        x4 = lw.em.reshape(x4, (n, c, 1, length))
    return x4


def _result(lw: Lowering, y: Value, nsp: int) -> View:
    n, c, h, w = y.type.shape
    return natural(y) if nsp == 2 else reshape_view(lw.em, natural(y), (n, c, w))


def _op(lw: Lowering, name: str, *operands: Value, suffix: str | None = None, **attrs: Any) -> Value:
    """One statement of a form (never shared with another layer)."""
    return lw.em.op(name, *operands, suffix=suffix, cse=False, **attrs)


def _pad(lw: Lowering, x: Value, g: Window, value: float) -> Value:
    if not g.padded:
        return x
    return _op(lw, "pad", x, before=[0, 0, g.pt, g.pl], after=[0, 0, g.pb, g.pr], value=value,
               suffix="pad")


def _slice_at(lw: Lowering, xp: Value, g: Window, i: int, j: int) -> Value:
    """``%xs_ij``: the input under kernel position (i, j) for every output position."""
    n, c, hp, wp = xp.type.shape
    begin = [0, 0, i * g.dh, j * g.dw]
    end = [n, c, i * g.dh + (g.ho - 1) * g.sh + 1, j * g.dw + (g.wo - 1) * g.sw + 1]
    stride = [1, 1, g.sh, g.sw]
    if begin == [0, 0, 0, 0] and end == [n, c, hp, wp] and stride == [1, 1, 1, 1]:
        return xp
    return _op(lw, "slice", xp, begin=begin, end=end, stride=stride, suffix=f"x{i}_{j}")


def _add_fold(lw: Lowering, terms: list[Value]) -> Value:
    acc = terms[0]
    for t in terms[1:]:
        acc = _op(lw, "add", acc, t, suffix="acc")
    return acc


def _layer(lw: Lowering) -> str:
    """The module path of the current node (``features.3``), else the node's name."""
    stack = (getattr(lw.node, "meta", None) or {}).get("nn_module_stack") or {}
    if stack:
        path = list(stack.values())[-1][0]
        if path:
            return str(path)
    return str(getattr(lw.node, "name", "layer"))


def _plain_ref(c: Any) -> bool:
    """Whether the constant is a whole stored tensor (its state_dict key names it as it is)."""
    r = getattr(c, "origin", None)
    return (r is not None and r.perm is None and r.slice is None and r.final == r.stored
            and c.value.dtype.is_floating_point)


def _weight(lw: Lowering, c: Const, shape: Sequence[int], name: str) -> Value:
    """A layer's full-shape weight const (its checkpoint key when it is one, else a
    weight computed at import named ``<layer>.<name>``)."""
    shape = tuple(int(d) for d in shape)
    if _plain_ref(c):
        key = c.origin.key
        lw._register(key, c.origin)
        return lw.em.const({"weight": key}, TensorType(FP16, shape), suffix=_hint(key), cse=False)
    return lw.derived_weight(c.numpy().reshape(shape), f"{_layer(lw)}.{name}")


def _bias_add(lw: Lowering, y: Value, bias: Value | None) -> Value:
    """``%y = add(%acc, reshape(%b) {shape=[1, Cout, 1, 1]})``."""
    if bias is None:
        return y
    cout = y.type.shape[1]
    b4 = _op(lw, "reshape", bias, shape=[1, cout, 1, 1], suffix="b4")
    return _op(lw, "add", y, b4)


# ---------------------------------------------------------------------------
# convolution


def _conv_sum(lw: Lowering, xp: Value, w: Value, g: Window, transposed: bool = False) -> Value:
    """Form 1 on an already padded input: one conv1x1 per kernel position, summed.

    ``transposed``: ``w`` is a ConvTranspose weight [Cin, Cout, KH, KW]; each position
    takes the spatially flipped slice and swaps its channel dims (form 3)."""
    a, b = w.type.shape[:2]
    if not transposed and (g.kh, g.kw, g.sh, g.sw) == (1, 1, 1, 1) and not g.padded:
        return _op(lw, "conv1x1", xp, w)
    terms = []
    for i, j in g.positions():
        xs = _slice_at(lw, xp, g, i, j)
        if transposed:
            fi, fj = g.kh - 1 - i, g.kw - 1 - j
            ws = _op(lw, "slice", w, begin=[0, 0, fi, fj], end=[a, b, fi + 1, fj + 1], suffix=f"w{i}_{j}")
            ws = _op(lw, "transpose", ws, perm=[1, 0, 2, 3], suffix=f"wt{i}_{j}")
        else:
            ws = _op(lw, "slice", w, begin=[0, 0, i, j], end=[a, b, i + 1, j + 1], suffix=f"w{i}_{j}")
        terms.append(_op(lw, "conv1x1", xs, ws, suffix=f"t{i}_{j}"))
    return _add_fold(lw, terms)


def _depthwise_sum(lw: Lowering, xp: Value, w: Value, g: Window) -> Value:
    """Form 2 (depthwise, multiplier 1): one mul by a [1, C, 1, 1] kernel tap per position."""
    c = w.type.shape[0]
    terms = []
    for i, j in g.positions():
        xs = _slice_at(lw, xp, g, i, j)
        ws = _op(lw, "slice", w, begin=[0, 0, i, j], end=[c, 1, i + 1, j + 1], suffix=f"w{i}_{j}")
        wr = _op(lw, "reshape", ws, shape=[1, c, 1, 1], suffix=f"wr{i}_{j}")
        terms.append(_op(lw, "mul", xs, wr, suffix=f"t{i}_{j}"))
    return _add_fold(lw, terms)


def _grouped_sum(lw: Lowering, xp: Value, w: Value, g: Window, groups: int,
                 transposed: bool = False) -> Value:
    """Form 2 (general groups): form 1 per group on its channel slices, then a concat."""
    n, cin, hp, wp = xp.type.shape
    cig = cin // groups
    a, b, kh, kw = w.type.shape
    unpadded = Window(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, 0, 0, 0, 0, g.ho, g.wo)
    parts = []
    for k in range(groups):
        xk = _op(lw, "slice", xp, begin=[0, k * cig, 0, 0], end=[n, (k + 1) * cig, hp, wp], suffix=f"g{k}")
        if transposed:  # [Cin, Cout/g, KH, KW]: the group's input channels
            wk = _op(lw, "slice", w, begin=[k * cig, 0, 0, 0], end=[(k + 1) * cig, b, kh, kw], suffix=f"wg{k}")
        else:  # [Cout, Cin/g, KH, KW]: the group's output channels
            cog = a // groups
            wk = _op(lw, "slice", w, begin=[k * cog, 0, 0, 0], end=[(k + 1) * cog, b, kh, kw], suffix=f"wg{k}")
        parts.append(_conv_sum(lw, xk, wk, unpadded, transposed))
    return _op(lw, "concat", *parts, axis=1, suffix="cat")


def _bn_fold(lw: Lowering, node: Any, w: Const, b: Any, transposed: bool, groups: int):
    """``(weight, bias)`` arrays with the batch norm that is the conv's only user folded in,
    and the weight and bias keys, or None when it cannot be folded (then the batch norm
    stays a mul and an add)."""
    import torch

    from anec.frontends.fx import _short

    users = list(node.users)
    if len(users) != 1 or _short(users[0]) != "_native_batch_norm_legit_no_training":
        return None
    bn = users[0]
    if bn.args[0] is not node:
        return None
    a = lw.bind(bn)
    mean, var, gamma, beta = a["running_mean"], a["running_var"], a.get("weight"), a.get("bias")
    if not all(isinstance(t, Const) for t in (mean, var)) or \
            not all(t is None or isinstance(t, Const) for t in (gamma, beta)):
        return None
    # the conv's weight (and bias) must be its own: they are replaced by the folded values
    wnode, bnode = node.args[1], node.args[2] if len(node.args) > 2 else None
    if not _plain_ref(w) or len(wnode.users) != 1:
        return None
    if b is not None and (not _plain_ref(b) or bnode is None or len(bnode.users) != 1):
        return None
    cout = w.shape[0] if not transposed else w.shape[1] * groups
    scale = (gamma.value.double() if gamma is not None else torch.ones(cout, dtype=torch.float64)) \
        / torch.sqrt(var.value.double() + float(a["eps"]))
    shift = (beta.value.double() if beta is not None else torch.zeros(cout, dtype=torch.float64)) \
        - mean.value.double() * scale
    wt = w.value.double()
    if transposed:  # [Cin, Cout/g, ...]: output channel k*Cout/g + j of group k
        cin, cog = wt.shape[:2]
        ws = wt.reshape(groups, cin // groups, cog, *wt.shape[2:]) \
            * scale.reshape(groups, 1, cog, *([1] * (wt.dim() - 2)))
        ws = ws.reshape(wt.shape)
    else:
        ws = wt * scale.reshape(-1, *([1] * (wt.dim() - 1)))
    bias = (b.value.double() if b is not None else torch.zeros(cout, dtype=torch.float64)) * scale + shift
    wkey = w.origin.key
    bkey = b.origin.key if b is not None else (wkey[:-len("weight")] + "bias" if wkey.endswith("weight")
                                                else wkey + ".bias")
    if b is None and bkey in lw.taken_keys:
        return None
    lw.folded.add(bn)
    return ws.numpy(), bias.numpy(), wkey, bkey


def _fp16_check(lw: Lowering, arr: np.ndarray, key: str) -> None:
    bad = ~np.isfinite(arr) | (np.abs(arr) > 65504.0)
    if bad.any():
        raise lw.fail(
            f"folding the batch norm into '{key}' gives {float(arr[bad].flat[0]):g}, beyond the fp16 "
            "range (+-65504)", "check the batch norm's running variance (near zero scales the "
            "conv's weights by 1/sqrt(var + eps))")


def _zero_pad_input(lw: Lowering, node: Any, nsp: int) -> tuple[Any, list[int]] | None:
    """A zero ``constant_pad_nd`` of the spatial dims whose only user is this conv (how torch
    writes padding='same' with an even kernel): ``(its input, [top, bottom, left, right])``."""
    from anec.frontends.fx import _short

    src = node.args[0]
    if _short(src) != "constant_pad_nd" or len(src.users) != 1:
        return None
    a = lw.bind(src)
    pads = [int(p) for p in a["pad"]]
    if float(a.get("value") or 0.0) != 0.0 or any(p < 0 for p in pads) or len(pads) > 2 * nsp:
        return None
    pads += [0] * (2 * nsp - len(pads))
    if nsp == 1:
        return lw.env[src.args[0]], [0, 0, pads[0], pads[1]]
    return lw.env[src.args[0]], [pads[2], pads[3], pads[0], pads[1]]


@aten("convolution.default",
      ir="conv1x1 for 1x1 kernels with stride 1 and no padding; else one conv1x1 per kernel "
         "position on a slice of the padded input, summed (depthwise: mul); groups: per-group "
         "sums joined by concat; transposed: zero insertion (reshape + pad), then the flipped "
         "kernel (docs/torch.md, spatial layers)")
def lower_convolution(lw: Lowering, a: dict) -> Any:
    x, w, b = a["input"], a["weight"], a["bias"]
    if not isinstance(w, Const) or not w.value.dtype.is_floating_point:
        raise lw.fail("convolution with a weight computed in the model",
                      "the weight must be a parameter or a constant")
    if b is not None and not isinstance(b, Const):
        raise lw.fail("convolution with a bias computed in the model",
                      "the bias must be a parameter or a constant")
    nsp = len(w.shape) - 2
    if nsp not in (1, 2):
        raise lw.fail(f"{nsp}-d convolution", "anec imports 1-d and 2-d convolutions; fold the "
                      "extra spatial dim into the batch or channels (e.g. a Conv3d with kernel depth 1 "
                      "as a Conv2d)")
    transposed = bool(a["transposed"])
    groups = int(a["groups"])
    stride = _ints(a["stride"], nsp)
    padding = _ints(a["padding"], nsp)
    dilation = _ints(a["dilation"], nsp)
    out_pad = _ints(a["output_padding"], nsp, [0] * nsp)
    kernel = list(w.shape[2:])
    node = lw.node
    extra = [0, 0, 0, 0]
    if not transposed:
        hit = _zero_pad_input(lw, node, nsp)
        if hit is not None:
            x, extra = hit
    if nsp == 1:
        kernel, stride, padding, dilation, out_pad = ([1] + kernel, [1] + stride, [0] + padding,
                                                      [1] + dilation, [0] + out_pad)
    x4 = _nchw(lw, x, nsp, "convolution")
    n, cin, h, wid = x4.type.shape
    if transposed:
        cout = w.shape[1] * groups
        cin_w = w.shape[0]
    else:
        cout, cin_w = w.shape[0], w.shape[1] * groups
    if cin_w != cin or cin % groups or cout % groups:
        raise lw.fail(f"convolution of {cin} channels with a weight {list(w.shape)} and groups={groups}")
    if any(s < 1 for s in stride) or any(d < 1 for d in dilation):
        raise lw.fail(f"convolution with stride {stride} and dilation {dilation}")
    if any(p < 0 for p in padding):
        raise lw.fail(f"convolution with negative padding {padding}")

    wshape = (w.shape[0], w.shape[1], kernel[0], kernel[1])
    folded = _bn_fold(lw, node, w, b, transposed, groups)
    em = lw.em
    if folded is not None:
        warr, barr, wkey, bkey = folded
        _fp16_check(lw, warr, wkey)
        _fp16_check(lw, barr, bkey)
        lw.weights[wkey] = warr.astype(np.float32)
        lw.weights[bkey] = barr.astype(np.float32)
        lw.taken_keys.add(bkey)

        def wconst() -> Value:
            return em.const({"weight": wkey}, TensorType(FP16, wshape), suffix=_hint(wkey), cse=False)

        def bconst(shape: Sequence[int] = (cout,)) -> Value:
            return em.const({"weight": bkey}, TensorType(FP16, tuple(shape)), suffix=_hint(bkey), cse=False)
    else:
        def wconst() -> Value:
            return _weight(lw, w, wshape, "weight")

        def bconst(shape: Sequence[int] = (cout,)) -> Value:
            return _weight(lw, b, shape, "bias")

    has_bias = b is not None or folded is not None
    pads = [padding[0] + extra[0], padding[0] + extra[1], padding[1] + extra[2], padding[1] + extra[3]]

    if not transposed:
        g = _window(h, wid, kernel, stride, dilation, pads)
        if g.ho < 1 or g.wo < 1:
            raise lw.fail(f"convolution of a {h}x{wid} input with kernel {kernel} leaves no output")
        if kernel == [1, 1] and stride == [1, 1] and not g.padded and groups == 1:
            return _conv1x1(lw, x4, wconst(), bconst((1, cout, 1, 1)) if has_bias else None, nsp)
        xp = _pad(lw, x4, g, 0.0)
        wv = wconst()
        if groups == 1:
            y = _conv_sum(lw, xp, wv, g)
        elif groups == cin and cout == cin:
            y = _depthwise_sum(lw, xp, wv, g)
        else:
            y = _grouped_sum(lw, xp, wv, g, groups)
        y = _bias_add(lw, y, bconst() if has_bias else None)
        return _result(lw, y, nsp)

    # transposed: zero insertion, then a stride-1 conv with the flipped, swapped kernel
    sh, sw = stride
    if any(op >= max(s, d) for op, s, d in zip(out_pad, stride, dilation)):
        raise lw.fail(f"output_padding {out_pad} must be smaller than the stride or the dilation")
    z = x4
    if sh > 1 or sw > 1:
        x6 = _op(lw, "reshape", x4, shape=[n, cin, h, 1, wid, 1], suffix="x6")
        z6 = _op(lw, "pad", x6, before=[0] * 6, after=[0, 0, 0, sh - 1, 0, sw - 1], value=0.0, suffix="z6")
        z4 = _op(lw, "reshape", z6, shape=[n, cin, h * sh, wid * sw], suffix="z4")
        z = _op(lw, "slice", z4, begin=[0, 0, 0, 0], end=[n, cin, (h - 1) * sh + 1, (wid - 1) * sw + 1],
                suffix="zu")
    tp = [dilation[0] * (kernel[0] - 1) - padding[0], dilation[0] * (kernel[0] - 1) - padding[0] + out_pad[0],
          dilation[1] * (kernel[1] - 1) - padding[1], dilation[1] * (kernel[1] - 1) - padding[1] + out_pad[1]]
    if any(p < 0 for p in tp):  # padding beyond the kernel's reach crops the output instead
        zh, zw = z.type.shape[2:]
        crop = [max(0, -p) for p in tp]
        if zh - crop[0] - crop[1] < 1 or zw - crop[2] - crop[3] < 1:
            raise lw.fail(f"transposed convolution with padding {padding} leaves no output")
        z = _op(lw, "slice", z, begin=[0, 0, crop[0], crop[2]], end=[n, cin, zh - crop[1], zw - crop[3]],
                suffix="crop")
        tp = [max(0, p) for p in tp]
    zh, zw = z.type.shape[2:]
    g = _window(zh, zw, kernel, [1, 1], dilation, tp)
    xp = _pad(lw, z, g, 0.0)
    wv = wconst()
    y = _conv_sum(lw, xp, wv, g, transposed=True) if groups == 1 else \
        _grouped_sum(lw, xp, wv, g, groups, transposed=True)
    y = _bias_add(lw, y, bconst() if has_bias else None)
    return _result(lw, y, nsp)


def _conv1x1(lw: Lowering, x4: Value, w: Value, bias: Value | None, nsp: int) -> View:
    """A 1x1 stride-1 unpadded conv: conv1x1 in the channel layout ([1, C, 1, N*H*W])."""
    em = lw.em
    n, cin, h, wid = x4.type.shape
    cout = w.type.shape[0]
    xin = to_channels(em, permute_view(natural(x4), (0, 2, 3, 1)))
    y = em.op("conv1x1", xin, w, **({"bias": bias} if bias is not None else {}))
    out = permute_view(channel_view(em, y, (n, h, wid, cout)), (0, 3, 1, 2))
    return out if nsp == 2 else reshape_view(em, out, (n, cout, wid))


# ---------------------------------------------------------------------------
# pooling


def _pool_input(lw: Lowering, x: Any, what: str) -> tuple[Value, tuple[int, ...]]:
    """An [N, C, H, W] value for a 2-d pool (an unbatched [C, H, W] gets N = 1)."""
    v = lw.view(x)
    if len(v.shape) == 3:
        return lw.em.reshape(materialize(lw.em, v), (1,) + v.shape), v.shape
    return _nchw(lw, v, 2, what), v.shape


def _pool_result(lw: Lowering, y: Value, shape: tuple[int, ...]) -> View:
    if len(shape) == 3:
        return reshape_view(lw.em, natural(y), y.type.shape[1:])
    return natural(y)


@aten("max_pool2d_with_indices.default",
      ir="pad with -inf, one strided slice per kernel position, reshaped to [N, C, 1, Ho, Wo], "
         "concat on axis 2, reduce_max (values only; MaxPool1d through its 2-d form)")
def lower_max_pool(lw: Lowering, a: dict) -> Any:
    x4, shape = _pool_input(lw, a["self"], "max pooling")
    kernel = _ints(a["kernel_size"], 2)
    stride = _ints(a.get("stride"), 2, kernel)
    padding = _ints(a.get("padding", 0), 2)
    dilation = _ints(a.get("dilation", 1), 2)
    n, c, h, w = x4.type.shape
    g = _pool_window(lw, h, w, kernel, stride, dilation, padding, bool(a.get("ceil_mode", False)))
    xp = _pad(lw, x4, g, float("-inf"))
    if g.kh * g.kw == 1:
        y = _slice_at(lw, xp, g, 0, 0)
    else:
        rs = []
        for i, j in g.positions():
            xs = _slice_at(lw, xp, g, i, j)
            rs.append(_op(lw, "reshape", xs, shape=[n, c, 1, g.ho, g.wo], suffix=f"r{i}_{j}"))
        st = _op(lw, "concat", *rs, axis=2, suffix="st")
        y = _op(lw, "reduce_max", st, axes=[2], keep_dims=False)
    node = lw.node

    def indices() -> Any:
        raise lw.fail("the indices of max pooling are used (MaxUnpool, return_indices=True)",
                      "anec computes the pooled values only: use return_indices=False")

    return (_pool_result(lw, y, shape), Deferred(indices, node))


def _avg_divisor(g: Window, h: int, w: int, pad_h: int, pad_w: int, count_include_pad: bool) -> np.ndarray:
    """1 / (torch's divisor) per output position [Ho, Wo] (``pad_*``: the layer's own padding)."""
    def counts(n_out: int, k: int, s: int, p: int, size: int) -> np.ndarray:
        out = []
        for o in range(n_out):
            start = o * s - p
            end = min(start + k, size + p)
            full = end - start
            inside = min(end, size) - max(start, 0)
            out.append(full if count_include_pad else inside)
        return np.asarray(out, dtype=np.float64)

    ch = counts(g.ho, g.kh, g.sh, pad_h, h)
    cw = counts(g.wo, g.kw, g.sw, pad_w, w)
    return 1.0 / np.outer(ch, cw)


def _avg_pool(lw: Lowering, x4: Value, g: Window, pad_h: int, pad_w: int, count_include_pad: bool,
              divisor_override: Any) -> Value:
    n, c, h, w = x4.type.shape
    xp = _pad(lw, x4, g, 0.0)
    acc = _add_fold(lw, [_slice_at(lw, xp, g, i, j) for i, j in g.positions()])
    if divisor_override:
        inv = np.full((g.ho, g.wo), 1.0 / float(divisor_override))
    else:
        inv = _avg_divisor(g, h, w, pad_h, pad_w, count_include_pad)
    if np.all(inv == inv.flat[0]):
        d = lw.em.const({"value": float(inv.flat[0])}, TensorType(FP16, ()), suffix="d", cse=False)
    else:
        d = lw.derived_weight(inv.reshape(1, 1, g.ho, g.wo), f"{_layer(lw)}.avg_pool_divisor")
    return _op(lw, "mul", acc, d)


@aten("avg_pool2d.default",
      ir="pad with 0, one strided slice per kernel position, summed, times 1/divisor (a scalar, "
         "or a [1, 1, Ho, Wo] map where windows cover padding or run past the input); "
         "AvgPool1d through its 2-d form")
def lower_avg_pool(lw: Lowering, a: dict) -> Any:
    x4, shape = _pool_input(lw, a["self"], "average pooling")
    kernel = _ints(a["kernel_size"], 2)
    stride = _ints(a.get("stride"), 2, kernel)
    padding = _ints(a.get("padding", 0), 2)
    n, c, h, w = x4.type.shape
    g = _pool_window(lw, h, w, kernel, stride, [1, 1], padding, bool(a.get("ceil_mode", False)))
    div = a.get("divisor_override")
    if div is not None and int(div) == 0:
        raise lw.fail("average pooling with divisor_override=0")
    y = _avg_pool(lw, x4, g, padding[0], padding[1], bool(a.get("count_include_pad", True)), div)
    return _pool_result(lw, y, shape)


@aten("_adaptive_avg_pool2d.default",
      ir="reduce_mean for a 1x1 output; else the avg_pool form with kernel = stride = input / output "
         "(the output must divide the input)")
def lower_adaptive_avg_pool(lw: Lowering, a: dict) -> Any:
    x4, shape = _pool_input(lw, a["self"], "adaptive average pooling")
    n, c, h, w = x4.type.shape
    ho, wo = _ints(a["output_size"], 2)
    if (ho, wo) == (1, 1):  # global average pooling (already a native reduction)
        y = _reduce(lw, natural(x4), [2, 3], True, "reduce_mean")
        return _pool_result(lw, materialize(lw.em, y), shape)
    if h % ho or w % wo:
        raise lw.fail(f"adaptive average pooling from {h}x{w} to {ho}x{wo}: the output size does not "
                      "divide the input size (the windows would overlap unevenly)",
                      f"pool to a size that divides {h}x{w}, or resize the input to a multiple of "
                      f"{ho}x{wo} first")
    k = [h // ho, w // wo]
    g = _window(h, w, k, k, [1, 1], [0, 0, 0, 0])
    return _pool_result(lw, _avg_pool(lw, x4, g, 0, 0, True, None), shape)


# ---------------------------------------------------------------------------
# upsampling


def _out_sizes(lw: Lowering, sizes: Sequence[int], output_size: Any, scales: Any) -> list[int]:
    if output_size:
        return [int(s) for s in output_size]
    if not scales:
        raise lw.fail("upsampling without an output size or a scale factor")
    return [int(math.floor(s * float(f))) for s, f in zip(sizes, scales)]


def _nearest(lw: Lowering, a: dict, nsp: int) -> Any:
    x4 = _nchw(lw, a["input"], nsp, "nearest upsampling")
    n, c, h, w = x4.type.shape
    sizes = [h, w][2 - nsp:]
    outs = _out_sizes(lw, sizes, a.get("output_size"), a.get("scale_factors"))
    scales = a.get("scale_factors")
    factors = []
    for i, (size, out) in enumerate(zip(sizes, outs)):
        f = float(scales[i]) if scales else out / size
        if out % size or f != out // size or out < size:
            shown = f"{f:g}" if scales else f"{size} -> {out}"
            raise lw.fail(f"nearest upsampling by a non-integer factor ({shown})",
                          "anec imports nearest upsampling by integer factors (scale_factor=2, or "
                          "an output size that is a multiple of the input size); for other sizes "
                          "use mode='bilinear', or resize on the host")
        factors.append(out // size)
    sh, sw = ([1] + factors) if nsp == 1 else factors
    x6 = _op(lw, "reshape", x4, shape=[n, c, h, 1, w, 1], suffix="x6")
    o6 = lw.em.const({"value": 1.0}, TensorType(FP16, (1, 1, 1, sh, 1, sw)), suffix="o6", cse=False)
    m6 = _op(lw, "mul", x6, o6, suffix="m6")
    y = _op(lw, "reshape", m6, shape=[n, c, h * sh, w * sw])
    return _result(lw, y, nsp)


@aten("upsample_nearest2d.vec", "upsample_nearest1d.vec",
      ir="reshape to [N, C, H, 1, W, 1], mul by ones [1, 1, 1, sh, 1, sw], reshape (integer factors)")
def lower_upsample_nearest(lw: Lowering, a: dict) -> Any:
    return _nearest(lw, a, 2 if "2d" in str(lw.node.target) else 1)


def interp_matrix(n_in: int, n_out: int, align_corners: bool, scale: float | None) -> np.ndarray:
    """torch's linear interpolation weights from ``n_in`` to ``n_out`` points: [n_out, n_in],
    rows summing to 1 (``scale``: the scale factor the call gave, which torch uses instead of
    the size ratio when align_corners is false)."""
    if align_corners:
        r = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    else:
        r = 1.0 / scale if scale is not None and scale > 0 else n_in / n_out
    m = np.zeros((n_out, n_in), dtype=np.float64)
    for o in range(n_out):
        src = r * o if align_corners else max(r * (o + 0.5) - 0.5, 0.0)
        i0 = min(int(src), n_in - 1)
        i1 = i0 + 1 if i0 < n_in - 1 else i0
        l1 = src - i0
        m[o, i0] += 1.0 - l1
        m[o, i1] += l1
    return m


def _bilinear(lw: Lowering, a: dict, nsp: int) -> Any:
    x4 = _nchw(lw, a["input"], nsp, "linear upsampling")
    n, c, h, w = x4.type.shape
    sizes = [h, w][2 - nsp:]
    outs = _out_sizes(lw, sizes, a.get("output_size"), a.get("scale_factors"))
    scales = a.get("scale_factors") or [None] * nsp
    if any(o < 1 for o in outs):
        raise lw.fail(f"upsampling {sizes} to {outs}")
    ac = bool(a.get("align_corners"))
    if nsp == 1:
        ah = np.ones((1, 1))
        aw = interp_matrix(w, outs[0], ac, scales[0])
        ho, wo = 1, outs[0]
    else:
        ah = interp_matrix(h, outs[0], ac, scales[0])
        aw = interp_matrix(w, outs[1], ac, scales[1])
        ho, wo = outs
    layer = _layer(lw)
    mh = lw.derived_weight(ah, f"{layer}.interp_h")
    mw = lw.derived_weight(aw.T, f"{layer}.interp_w")
    t = _op(lw, "matmul", mh, x4, suffix="t")
    y = _op(lw, "matmul", t, mw)
    assert y.type.shape == (n, c, ho, wo)
    return _result(lw, y, nsp)


@aten("upsample_bilinear2d.vec", "upsample_linear1d.vec",
      ir="matmul by [Ho, H] row weights, then by [W, Wo] column weights (derived weights of the "
         "import); align_corners either way, any sizes")
def lower_upsample_bilinear(lw: Lowering, a: dict) -> Any:
    return _bilinear(lw, a, 2 if "2d" in str(lw.node.target) else 1)


# ---------------------------------------------------------------------------
# padding modes


def _pad_pieces(lw: Lowering, x: Value, axis: int, before: int, after: int, mode: str) -> Value:
    """``x`` padded along ``axis`` by slices of itself joined with one concat."""
    size = x.type.shape[axis]
    if before == 0 and after == 0:
        return x
    limit = size - 1 if mode == "reflect" else size
    if max(before, after) > limit and mode != "replicate":
        raise lw.fail(f"{mode} padding of {max(before, after)} on a dim of size {size}",
                      "the padding must be smaller than the dim for reflect (at most the dim for "
                      "circular)")

    def piece(lo: int, hi: int) -> Value:
        begin = [0] * x.type.rank
        end = list(x.type.shape)
        begin[axis], end[axis] = lo, hi
        return _op(lw, "slice", x, begin=begin, end=end, suffix="pc")

    head: list[Value] = []
    tail: list[Value] = []
    if mode == "reflect":
        head = [piece(k, k + 1) for k in range(before, 0, -1)]
        tail = [piece(size - 1 - k, size - k) for k in range(1, after + 1)]
    elif mode == "replicate":
        head = [piece(0, 1)] * before
        tail = [piece(size - 1, size)] * after
    else:  # circular
        head = [piece(size - before, size)] if before else []
        tail = [piece(0, after)] if after else []
    return _op(lw, "concat", *head, x, *tail, axis=axis, suffix="padded")


@aten("pad.default", ir="constant: as constant_pad_nd; reflect, replicate, circular: slices of the "
      "input joined by concat along each padded dim (H, then W)")
def lower_pad_modes(lw: Lowering, a: dict) -> Any:
    from anec.frontends.aten import lower_pad

    mode = a.get("mode", "constant")
    pads = [int(p) for p in a["pad"]]
    if mode == "constant":
        return lower_pad(lw, {"self": a["self"], "pad": pads, "value": a.get("value") or 0.0})
    if mode not in ("reflect", "replicate", "circular"):
        raise lw.fail(f"padding mode '{mode}'", "use constant, reflect, replicate or circular")
    if any(p < 0 for p in pads):
        raise lw.fail(f"negative {mode} padding (cropping)", "slice the tensor instead")
    v = lw.view(a["self"])
    rank = len(v.shape)
    if len(pads) // 2 > rank:
        raise lw.fail(f"{mode} padding of {len(pads) // 2} dims of a rank-{rank} tensor")
    y = materialize(lw.em, v)
    for d in range(rank - len(pads) // 2, rank):  # outer dims first: H, then W
        i = rank - 1 - d
        y = _pad_pieces(lw, y, d, pads[2 * i], pads[2 * i + 1], mode)
    return natural(y, v.kind)
