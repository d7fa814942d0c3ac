"""The lowering context: what every ATen handler works with.

A handler receives the :class:`Lowering` (the emitter, the values of earlier
nodes, error helpers) and the op's arguments by schema name. ``Lowering``
turns operands into device tensors (``dev``, ``view``), builds fp16 IR consts
(weight views, inline literals, derived weights), and lowers the layout-aware
elementwise ops (``unary``, ``binary`` with torch broadcasting), their exact
compositions on 0/1 and integer values (``min1``, ``where``, ``maximum``...),
``matmul`` and ``linear``. Errors are :class:`~anec.frontends.UnsupportedOpError`
located at the node's Python line (``fail``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from anec.frontends import UnsupportedOpError
from anec.frontends.aten.values import (
    FP16,
    FP16_EXACT_INT,
    Const,
    Device,
    HostValue,
    InputRef,
    Args,
    Lowered,
    Operand,
    WeightRef,
    kind_of,
    shape_of,
)
from anec.frontends.fx import located_error
from anec.frontends.tensor_views import (
    FP16_MAX,
    INLINE_MAX,
    SENTINEL,
    Emitter,
    Expanded,
    View,
    align_array,
    align_view,
    as_view,
    ascending,
    broadcast_shape,
    channel_major,
    channel_view,
    fp16_values,
    frame_plan,
    materialize,
    natural,
    permute_view,
    reshape_view,
    same_frame,
    to_channels,
)
from anec.ir.nodes import Value
from anec.ir.types import TensorType

if TYPE_CHECKING:
    import torch


class Lowering:
    """What handlers work with: the emitter, value conversion, errors.

    The driver (:mod:`anec.frontends.torch.fx_import`) sets ``node`` (the FX node
    being lowered) before calling a handler, and provides ``device_input``
    (make an :class:`InputRef` a program input), ``host_input`` (a program
    input computed by the host) and ``host_source`` (a device tensor that
    host work at the outputs reads).
    """

    def __init__(self, em: Emitter, conv_limit: int) -> None:
        self.em = em
        self.conv_limit = conv_limit
        self.node: torch.fx.Node = None  # type: ignore[assignment]
        self.weights: dict[str, np.ndarray] = {}
        """Key -> array of every tensor the IR refers to (stored values, fp32)."""
        self.notes: list[str] = []
        self.env: dict[torch.fx.Node, Lowered] = {}
        """FX node -> its value (the driver's table; attention reads it for GQA bases)."""
        self.device_input: Callable[[InputRef], View] = _no_driver
        self.host_input: Callable[..., View] = _no_driver
        self.host_source: Callable[[Operand], str] = _no_driver
        self.bind: Callable[[torch.fx.Node], Args] = _no_driver
        """The arguments of an FX node by schema name (the driver's binding)."""
        self.folded: set[torch.fx.Node] = set()
        """FX nodes already computed by an earlier lowering (a batch norm folded into its conv)."""
        self.taken_keys: set[str] = set()
        """The program's own tensor keys (state_dict, constants): derived weights avoid them."""

    # ---- errors ------------------------------------------------------------
    def fail(self, message: str, hint: str | None = None) -> "UnsupportedOpError":
        """An error at the current node (raise it: ``raise lw.fail(...)``)."""
        return located_error(UnsupportedOpError, self.node, message, hint)

    # ---- operands ----------------------------------------------------------
    def dev(self, x: Operand) -> View | Expanded:
        """``x`` as a device tensor (inputs made program inputs, constants emitted)."""
        if isinstance(x, Device):
            return x
        if isinstance(x, InputRef):
            return self.device_input(x)
        if isinstance(x, Const):
            return natural(self.const(x), kind_of(x))
        if isinstance(x, HostValue):
            raise self.fail(
                "a result computed on the host (argmax, topk, sampling) is used inside the model",
                "only the module's outputs may come from argmax/argmin/topk/multinomial: return "
                "the scores and apply it after the model",
            )
        if isinstance(x, (int, float, bool)):
            return natural(self.scalar(float(x)), kind_of(x))
        raise self.fail(f"unsupported operand {type(x).__name__}")

    def view(self, x: Operand) -> View:
        return as_view(self.em, self.dev(x))

    def scalar(self, value: float, exact_int: bool = False) -> Value:
        """An fp16 scalar const; errors for values fp16 cannot hold (masking
        sentinels such as -inf become -1e4, see :func:`fp16_values`)."""
        self._sentinels(np.asarray(value, dtype=np.float64))
        v = float(fp16_values(np.asarray(value, dtype=np.float64)))
        if math.isfinite(v) and abs(v) > FP16_MAX:
            raise self.fail(f"constant {value:g} is beyond the fp16 range (+-65504)",
                            "scale the computation so its constants fit fp16 (the ANE computes in fp16)")
        if exact_int and abs(v) > FP16_EXACT_INT:
            raise self.fail(
                f"integer constant {value:g} is not exact in fp16 arithmetic (integers are exact up "
                f"to {FP16_EXACT_INT})", "keep such integer work on the host (before the model)")
        return self.em.scalar(v)

    def const(self, c: Const, shape: Sequence[int] | None = None) -> Value:
        """An fp16 IR const holding ``c`` (reshaped to ``shape``)."""
        shape = tuple(c.shape if shape is None else shape)
        if c.origin is not None and c.value.dtype.is_floating_point:
            ref = c.origin.reshape(shape)
            self.register_weight(ref.key, c.origin)
            return self.em.const(ref.attrs(), TensorType(FP16, shape), suffix=weight_hint(ref.key))
        return self.array(c.numpy().reshape(shape), kind_of(c))

    def array(self, arr: np.ndarray, kind: str = "float", key_hint: str | None = None) -> Value:
        """An fp16 IR const of a numpy array: a scalar, an inline literal or a derived weight."""
        arr = np.asarray(arr)
        if arr.dtype == np.bool_:
            arr = arr.astype(np.float32)
        if arr.dtype.kind in "iu":
            if arr.size and np.abs(arr).max() > FP16_EXACT_INT:
                raise self.fail(
                    f"integer constant {int(np.abs(arr).max())} is not exact in fp16 (the device "
                    f"holds integers exactly up to {FP16_EXACT_INT})",
                    "keep such integer work outside the model, or on the host",
                )
            arr = arr.astype(np.float32)
        self._sentinels(arr)
        vals = fp16_values(arr)
        finite = vals[np.isfinite(vals)]
        if finite.size and np.abs(finite).max() > FP16_MAX:
            raise self.fail(
                f"constant value {float(np.abs(finite).max()):g} is beyond the fp16 range (+-65504)",
                "scale the computation so its constants fit fp16 (the ANE computes in fp16)",
            )
        shape = tuple(arr.shape)
        t = TensorType(FP16, shape)
        if shape == ():
            return self.em.const({"value": float(vals)}, t, suffix="c")
        flat = vals.reshape(-1)
        if flat.size and np.all(flat == flat[0]):
            return self.em.const({"value": float(flat[0])}, t, suffix="c")
        if flat.size <= INLINE_MAX:
            lit = np.asarray(vals, dtype=np.float16).astype(np.float64).tolist()
            return self.em.const({"value": lit}, t, suffix="c")
        key = self._derived_key(key_hint)
        self.weights[key] = vals.astype(np.float32)
        return self.em.const({"weight": key}, t, suffix="k")

    def _sentinels(self, arr: np.ndarray) -> None:
        """Note (once) that masking sentinels were replaced by -1e4."""
        a = np.asarray(arr)
        if a.dtype.kind == "f" and a.size and bool((np.isinf(a) | (np.abs(a) >= SENTINEL)).any()):
            note = ("masking constants (-inf, finfo.min) became -1e4: fp16 has no -inf arithmetic, "
                    "and softmax gives -1e4 the same zero weight")
            if note not in self.notes:
                self.notes.append(note)

    def derived_weight(self, arr: np.ndarray, key: str, shape: Sequence[int] | None = None) -> Value:
        """A weight const (never an inline literal) holding ``arr``, stored under ``key``
        (made unique: ``key.1``, ... when taken by another tensor): a tensor computed at
        import (a folded batch norm, an interpolation matrix, a divisor map) that the
        saved model keeps in its weight file. ``shape`` is the const's type (default
        ``arr``'s own)."""
        arr = np.asarray(arr, dtype=np.float64)
        bad = ~np.isfinite(arr) | (np.abs(arr) > FP16_MAX)
        if bad.any():
            raise self.fail(
                f"a weight computed at import ('{key}') holds {float(arr[bad].flat[0]):g}, beyond the "
                "fp16 range (+-65504)",
                "check the layer's parameters (a batch norm with a near-zero running variance "
                "scales its conv's weights by 1/sqrt(var + eps))")
        base, i = key, 1
        while (key in self.taken_keys and key not in self.weights) or (
                key in self.weights and not np.array_equal(self.weights[key], arr.astype(np.float32))):
            key = f"{base}.{i}"
            i += 1
        self.weights[key] = arr.astype(np.float32)
        t = TensorType(FP16, tuple(arr.shape if shape is None else shape))
        return self.em.const({"weight": key}, t, suffix=weight_hint(key), cse=False)

    def _derived_key(self, hint: str | None) -> str:
        base = f"anec.const.{hint or self.em.hint}"
        key, i = base, 1
        while key in self.weights:
            key = f"{base}.{i}"
            i += 1
        return key

    def register_weight(self, key: str, ref: WeightRef) -> None:
        if key not in self.weights:
            self.weights[key] = self.stored(key)

    stored: Callable[[str], np.ndarray] = None  # type: ignore[assignment]
    """Set by the driver: the stored array of a state_dict key."""

    _exact = False
    """Set by :meth:`binary` while lowering integer arithmetic (constants must be exact)."""

    def operand(self, x: Operand, leader: View) -> Value:
        """``x`` (device tensor, constant or number) in ``leader``'s physical frame."""
        if isinstance(x, (int, float, bool)):
            return self.scalar(float(x), self._exact)
        if isinstance(x, Const):
            if math.prod(x.shape) == 1:
                return self.scalar(float(x.numpy().reshape(())), self._exact)
            return self.const_in_frame(x, leader)
        return align_view(self.em, self.dev(x), leader)

    def const_in_frame(self, x: Const, leader: View | None,
                       sizes: dict[int, int] | None = None) -> Value:
        """A constant laid out in ``leader``'s frame (as it is when None), as a view of
        its weight when it has one."""
        if leader is None:
            return self.const(x)
        arr = align_array(x.numpy(), leader, sizes)
        if x.origin is not None and x.value.dtype.is_floating_point:
            ref = _aligned_ref(x.origin, x.shape, leader, sizes)
            if ref is not None:
                return self.const(Const(x.value, ref.reshape(arr.shape)), arr.shape)
        return self.array(arr, kind_of(x))

    # ---- elementwise -------------------------------------------------------
    def unary(self, op: str, x: Operand, kind: str = "float", **attrs: Any) -> View | Expanded:
        x = self.dev(x)
        if isinstance(x, Expanded):
            return Expanded(self.unary(op, x.src, kind, **attrs), x.shape)
        return View(self.em.op(op, x.phys, **attrs), x.order, x.shape, kind)

    def binary(self, op: str, a: Operand, b: Operand, kind: str | None = None) -> View | Expanded:
        """``op(a, b)`` with torch broadcasting, in the layout of a full-size operand."""
        if kind is None:
            kind = "int" if kind_of(a) != "float" and kind_of(b) != "float" and op != "pow" else "float"
        if isinstance(a, InputRef):
            a = self.dev(a)
        if isinstance(b, InputRef):
            b = self.dev(b)
        if isinstance(a, HostValue) or isinstance(b, HostValue):
            self.dev(a if isinstance(a, HostValue) else b)
        out = broadcast_shape(shape_of(a), shape_of(b))
        if out is None:
            raise self.fail(f"shapes {list(shape_of(a))} and {list(shape_of(b))} do not broadcast")
        ua = a.src if isinstance(a, Expanded) else a
        ub = b.src if isinstance(b, Expanded) else b
        uout = broadcast_shape(shape_of(ua), shape_of(ub))
        res = self._binary(op, ua, ub, uout, kind)
        if uout != out:
            return Expanded(res, out)
        return res

    def _binary(self, op: str, a: Operand, b: Operand, out: tuple[int, ...], kind: str) -> View:
        em = self.em
        self._exact = kind_of(a) != "float" and kind_of(b) != "float"
        if isinstance(a, View) and isinstance(b, View) and same_frame(a, b):
            return View(em.op(op, a.phys, b.phys), a.order, out, kind)
        n = math.prod(out)
        cands = [x for x in (a, b) if isinstance(x, View) and x.numel == n]
        if not cands:
            xa = self._natural_operand(a, out)
            xb = self._natural_operand(b, out)
            return natural(em.op(op, xa, xb), kind)
        cands.sort(key=lambda v: (not channel_major(v), v is not a))
        leader = cands[0]
        leader_is_a = leader is a
        if leader.shape != out:
            leader = reshape_view(em, leader, out)
        if leader_is_a:
            x, y = leader.phys, self.operand(b, leader)
        else:
            x, y = self.operand(a, leader), leader.phys
        return View(em.op(op, x, y), leader.order, out, kind)

    def _natural_operand(self, x: Operand, out: Sequence[int]) -> Value:
        if isinstance(x, (int, float, bool)):
            return self.scalar(float(x), self._exact)
        if isinstance(x, Const):
            if math.prod(x.shape) == 1:
                return self.scalar(float(x.numpy().reshape(())), self._exact)
            return self.const(x)
        return materialize(self.em, self.dev(x))

    # small compositions (exact) -------------------------------------------
    def relu(self, x: Operand) -> View | Expanded:
        return self.unary("relu", x, kind_of(x))

    def neg(self, x: Operand) -> View | Expanded:
        return self.binary("mul", x, -1.0, kind_of(x))

    def min1(self, t: Operand, kind: str = "bool") -> View | Expanded:
        """``min(t, 1)`` for t >= 0: ``1 - relu(1 - t)``."""
        r = self.relu(self.binary("sub", 1.0, t))
        return self.binary("sub", 1.0, r, kind)

    def absolute(self, x: Operand) -> View | Expanded:
        return self.binary("add", self.relu(x), self.relu(self.neg(x)), kind_of(x))

    def maximum(self, a: Operand, b: Operand) -> View | Expanded:
        """``max(a, b) = b + relu(a - b)``."""
        return self.binary("add", b, self.relu(self.binary("sub", a, b)))

    def minimum(self, a: Operand, b: Operand) -> View | Expanded:
        """``min(a, b) = a - relu(a - b)``."""
        return self.binary("sub", a, self.relu(self.binary("sub", a, b)))

    def where(self, cond: Operand, a: Operand, b: Operand) -> View | Expanded:
        """``a * c + b * (1 - c)`` for c in {0, 1} (exact for finite a, b)."""
        kind = "float" if "float" in (kind_of(a), kind_of(b)) else kind_of(a)
        ca = self.binary("mul", a, cond, kind)
        nb = self.binary("mul", b, self.binary("sub", 1.0, cond), kind)
        return self.binary("add", ca, nb, kind)

    def require_discrete(self, x: Operand, what: str) -> None:
        if kind_of(x) == "float" and not isinstance(x, (Const, int, float, bool)):
            raise self.fail(
                f"{what} of real-valued (float) activations has no exact form in the IR "
                "(its core ops have no comparison or rounding)",
                "compute it on the host, or from integer/bool inputs (masks, ids), which the "
                "device holds exactly",
            )

    # ---- matmul --------------------------------------------------------------
    def mm_operand(self, v: View | Expanded) -> tuple[Value, bool]:
        """A matmul operand without moving data if its layout allows: ``(value, transposed)``."""
        v = as_view(self.em, v)
        if len(v.shape) >= 2 and not ascending(v.order):
            dims = list(range(len(v.shape)))
            dims[-2], dims[-1] = dims[-1], dims[-2]
            sw = permute_view(v, dims)
            if ascending(sw.order):
                return materialize(self.em, sw), True
        return materialize(self.em, v), False

    def matmul(self, a: Operand, b: Operand) -> View:
        """Batched ``a @ b`` of two device tensors (rank >= 2, batch dims broadcast)."""
        a, b = self.dev(a), self.dev(b)
        sa, sb = shape_of(a), shape_of(b)
        out_batch = broadcast_shape(sa[:-2], sb[:-2])
        if out_batch is None:
            raise self.fail(f"matmul batch dims {list(sa[:-2])} and {list(sb[:-2])} do not broadcast")
        # expansions over batch dims broadcast inside matmul
        a = a.src if isinstance(a, Expanded) and a.src.shape[-2:] == sa[-2:] else a
        b = b.src if isinstance(b, Expanded) and b.src.shape[-2:] == sb[-2:] else b
        va, vb = as_view(self.em, a), as_view(self.em, b)
        rank = max(len(va.shape), len(vb.shape))
        ea = (1,) * (rank - len(va.shape)) + va.shape
        eb = (1,) * (rank - len(vb.shape)) + vb.shape
        drop = 0
        while rank - drop > 4 and ea[drop] == 1 and eb[drop] == 1:
            drop += 1
        va = reshape_view(self.em, va, ea[drop:])
        vb = reshape_view(self.em, vb, eb[drop:])
        xa, ta = self.mm_operand(va)
        xb, tb = self.mm_operand(vb)
        r = self.em.op("matmul", xa, xb, transpose_x=ta, transpose_y=tb)
        full = out_batch + (sa[-2], sb[-1])
        res = natural(r)
        return reshape_view(self.em, res, full) if res.shape != full else res

    def swap_last(self, v: View) -> View:
        dims = list(range(len(v.shape)))
        dims[-2], dims[-1] = dims[-1], dims[-2]
        return permute_view(v, dims)

    def linear(self, x: Operand, w: Const, bias: Operand | None = None) -> View:
        """``x @ w (+ bias)`` with a constant ``w [K, N]``: conv1x1 in the channel layout,
        or a matmul when N exceeds the target's conv channel limit."""
        x = self.dev(x)
        k, n = w.shape
        out_shape = shape_of(x)[:-1] + (n,)
        if n > self.conv_limit:
            wv = self.const(w)
            y = natural(self.em.op("matmul", materialize(self.em, as_view(self.em, x)), wv))
            y = reshape_view(self.em, y, out_shape)
            return self.binary("add", y, bias) if bias is not None else y
        xc = to_channels(self.em, x)
        wt = Const(w.value.t(), w.origin.permute((1, 0)) if w.origin is not None else None)
        wc = self.const(wt, (n, k, 1, 1))
        kw: dict[str, Any] = {}
        rest = None
        if isinstance(bias, Const) and bias.value.dtype.is_floating_point \
                and math.prod(bias.shape) == n and bias.shape[-1:] == (n,):
            kw["bias"] = self.const(bias, (1, n, 1, 1))
        elif bias is not None:
            rest = bias
        y = self.em.op("conv1x1", xc, wc, **kw)
        out = channel_view(self.em, y, out_shape)
        return self.binary("add", out, rest) if rest is not None else out


def _no_driver(*a: Any, **k: Any) -> Any:  # pragma: no cover - set by the driver
    raise AssertionError("Lowering used without a driver")


def weight_hint(key: str) -> str:
    """A name suffix for a const of weight ``key`` (its letters and digits)."""
    return "".join(c if c.isalnum() else "_" for c in key).strip("_") or "w"


def _aligned_ref(ref: WeightRef, shape: tuple[int, ...], leader: View,
                 sizes: dict[int, int] | None = None) -> WeightRef | None:
    """The weight view that :func:`align_array` of this constant is, if one exists."""
    split, kept, aligned = frame_plan(leader, shape, sizes)
    perm = list(np.argsort(kept)) if kept else []
    r = ref.reshape(split)
    if perm and perm != sorted(perm):
        r = r.permute(perm)
        if r is None:
            return None
    return r
