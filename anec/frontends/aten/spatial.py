"""The canonical forms of spatial layers: their geometry and the statements they share.

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

:mod:`~anec.frontends.aten.conv` lowers convolutions with these forms,
:mod:`~anec.frontends.aten.pooling` pooling, upsampling and padding modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from anec.frontends.aten.context import Lowering
from anec.frontends.aten.values import Operand
from anec.frontends.tensor_views import View, materialize, natural, reshape_view
from anec.ir.nodes import Value

SPATIAL_GROUP = "convolution, pooling and upsampling"
"""The docs table's group of every spatial layer."""


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


def size_arg(v: int | Sequence[int] | None, n: int, default: Sequence[int] | None = None) -> list[int]:
    """A size argument of n dims (an int, a one-element list, or n values)."""
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        if default is None:
            raise ValueError("missing size argument")
        return [int(d) for d in default]
    if isinstance(v, int):
        return [v] * n
    vals = [int(d) for d in v]
    return vals * n if len(vals) == 1 else vals


def conv_window(h: int, w: int, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
            pads: Sequence[int]) -> Window:
    """``pads`` = (top, bottom, left, right)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    pt, pb, pl, pr = pads
    return Window(kh, kw, sh, sw, dh, dw, pt, pb, pl, pr,
                  _out(h, kh, sh, dh, pt, pb), _out(w, kw, sw, dw, pl, pr))


def pool_window(lw: Lowering, h: int, w: int, kernel: list[int], stride: list[int],
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


def as_nchw(lw: Lowering, x: Operand, nsp: int, what: str) -> Value:
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


def from_nchw(lw: Lowering, y: Value, nsp: int) -> View:
    n, c, h, w = y.type.shape
    return natural(y) if nsp == 2 else reshape_view(lw.em, natural(y), (n, c, w))


def form_op(lw: Lowering, name: str, *operands: Value, suffix: str | None = None, **attrs: Any) -> Value:
    """One statement of a form (never shared with another layer)."""
    return lw.em.op(name, *operands, suffix=suffix, cse=False, **attrs)


def pad_form(lw: Lowering, x: Value, g: Window, value: float) -> Value:
    if not g.padded:
        return x
    return form_op(lw, "pad", x, before=[0, 0, g.pt, g.pl], after=[0, 0, g.pb, g.pr], value=value,
               suffix="pad")


def slice_at(lw: Lowering, xp: Value, g: Window, i: int, j: int) -> Value:
    """``%xs_ij``: the input under kernel position (i, j) for every output position."""
    n, c, hp, wp = xp.type.shape
    begin = [0, 0, i * g.dh, j * g.dw]
    end = [n, c, i * g.dh + (g.ho - 1) * g.sh + 1, j * g.dw + (g.wo - 1) * g.sw + 1]
    stride = [1, 1, g.sh, g.sw]
    if begin == [0, 0, 0, 0] and end == [n, c, hp, wp] and stride == [1, 1, 1, 1]:
        return xp
    return form_op(lw, "slice", xp, begin=begin, end=end, stride=stride, suffix=f"x{i}_{j}")


def add_fold(lw: Lowering, terms: list[Value]) -> Value:
    acc = terms[0]
    for t in terms[1:]:
        acc = form_op(lw, "add", acc, t, suffix="acc")
    return acc


def layer_path(lw: Lowering) -> str:
    """The module path of the current node (``features.3``), else the node's name."""
    stack = (getattr(lw.node, "meta", None) or {}).get("nn_module_stack") or {}
    if stack:
        path = list(stack.values())[-1][0]
        if path:
            return str(path)
    return str(getattr(lw.node, "name", "layer"))
