"""The ATen ops the PyTorch importer understands, and the IR each one becomes.

Every supported op is one entry of :data:`HANDLERS`, registered with
:func:`aten` together with the one-line description of its IR that the docs
table (``anec import --list-ops``, docs/torch.md) shows. A handler receives
the :class:`Lowering` (the emitter, the values of earlier nodes, error
helpers) and the op's arguments by schema name, and returns the value of the
node: a :class:`~anec.frontends.layout.View` (a device tensor), an
:class:`~anec.frontends.layout.Expanded`, a :class:`Const`, a
:class:`HostValue` (host work at the outputs) or a tuple of those.

Values:

* :class:`Const` -- a tensor known at import time (parameters, buffers and
  everything computed only from them, folded with torch itself), with the
  state_dict view it came from (:class:`WeightRef`) when it is one, so the IR
  refers to checkpoint keys (``const(weight="h.0.attn.c_attn.weight",
  perm=[1, 0])``) instead of copies;
* :class:`InputRef` -- an integer or bool user input not yet on the device:
  embedding lookups on it run on the host; any other use makes it a program
  input (fp32 on the device, exact for integers up to 2048);
* :class:`HostValue` -- argmax/argmin/topk/multinomial results, computed on
  the host from a program output; only view ops may follow them before the
  module's outputs.

Booleans live on the device as 0/1 and integers as exact fp16 integers (view
``kind``); comparisons, logical ops and ``where`` are exact compositions of
relu, add and mul on them (``min(t, 1) = 1 - relu(1 - t)``). Comparisons of
real-valued (float) activations have no exact IR form and are errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from anec.frontends import TorchImportError
from anec.frontends.layout import (
    FP16_MAX,
    INLINE_MAX,
    MASK_VALUE,
    SENTINEL,
    Emitter,
    Expanded,
    View,
    align_array,
    align_view,
    as_view,
    broadcast_shape,
    channel_major,
    channel_view,
    fp16_values,
    materialize,
    natural,
    permute_view,
    refine,
    reshape_view,
    same_frame,
    single_axis,
    to_channels,
    _ascending,
)
from anec.ir.graph import Value
from anec.ir.types import DType, TensorType

FP16 = DType.fp16
FP16_EXACT_INT = 2048
"""Integers up to this magnitude are exact in fp16."""


class UnsupportedOpError(TorchImportError):
    """An ATen op (or a use of one) that the 27 IR ops cannot express."""


# ---------------------------------------------------------------------------
# values


@dataclass(frozen=True)
class WeightRef:
    """A view of a stored tensor as a weight const expresses it:
    ``reshape(slice(transpose(stored[key], perm)), shape)``."""

    key: str
    stored: tuple[int, ...]
    perm: tuple[int, ...] | None = None
    slice: tuple[int, int, int] | None = None
    shape: tuple[int, ...] | None = None

    def viewed(self) -> tuple[int, ...]:
        """The stored shape after perm and slice (before the final reshape)."""
        s = self.stored
        if self.perm is not None:
            s = tuple(s[p] for p in self.perm)
        if self.slice is not None:
            a, lo, hi = self.slice
            s = s[:a] + (hi - lo,) + s[a + 1:]
        return s

    @property
    def final(self) -> tuple[int, ...]:
        return self.shape if self.shape is not None else self.viewed()

    def reshape(self, shape: Sequence[int]) -> "WeightRef":
        return WeightRef(self.key, self.stored, self.perm, self.slice, tuple(int(d) for d in shape))

    def permute(self, dims: Sequence[int]) -> "WeightRef | None":
        """The view permuted by ``dims`` (None when a slice is pending or a pending
        reshape regroups dims)."""
        dims = tuple(int(d) for d in dims)
        cur = self.final
        new_final = tuple(cur[d] for d in dims)
        moved = [d for d in dims if cur[d] != 1]
        if moved == sorted(moved):
            return self.reshape(new_final)
        viewed = self.viewed()
        if [d for d in viewed if d != 1] != [d for d in cur if d != 1]:
            return None
        base = self.perm or tuple(range(len(self.stored)))
        nonunit = [base[i] for i, d in enumerate(viewed) if d != 1]
        cur_nonunit = [i for i, d in enumerate(cur) if d != 1]
        new_seq = [nonunit[cur_nonunit.index(d)] for d in dims if cur[d] != 1]
        units = [a for a in range(len(self.stored)) if a not in nonunit]
        perm = tuple(units + new_seq)
        sl = None
        if self.slice is not None:  # the sliced stored axis moves with the permutation
            axis, lo, hi = self.slice
            sl = (perm.index(base[axis]), lo, hi)
        ref = WeightRef(self.key, self.stored, None if perm == tuple(sorted(perm)) else perm, sl, None)
        return ref.reshape(new_final)

    def narrow(self, dim: int, start: int, stop: int) -> "WeightRef | None":
        if self.slice is not None or self.final != self.viewed():
            return None
        shape = self.final
        if start == 0 and stop == shape[dim]:
            return self
        return WeightRef(self.key, self.stored, self.perm, (dim, start, stop), None)

    def attrs(self) -> dict:
        out: dict[str, Any] = {"weight": self.key}
        if self.perm is not None:
            out["perm"] = list(self.perm)
        if self.slice is not None:
            out["slice"] = list(self.slice)
        return out


@dataclass(eq=False)
class Const:
    """A tensor known at import time (a torch tensor), maybe a view of a weight."""

    value: Any  # torch.Tensor
    origin: WeightRef | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    def numpy(self) -> np.ndarray:
        t = self.value.detach()
        if t.dtype.is_floating_point:
            t = t.float()
        return t.cpu().numpy()


@dataclass(eq=False)
class InputRef:
    """An integer or bool user input, kept off the device until an op needs it there."""

    name: str
    shape: tuple[int, ...]
    dtype: Any  # torch.dtype
    host_shape: tuple[int, ...] | None = None
    """A reshape the host applies before an embedding lookup (view ops on the ids)."""

    @property
    def kind(self) -> str:
        import torch

        return "bool" if self.dtype == torch.bool else "int"


@dataclass(eq=False)
class HostValue:
    """A value computed on the host from program output ``source`` by ``ops``."""

    source: str
    ops: list[dict] = field(default_factory=list)
    shape: tuple[int, ...] = ()
    dtype: str = "int64"
    where: str = ""

    def then(self, op: dict, shape: Sequence[int], dtype: str | None = None) -> "HostValue":
        return HostValue(self.source, self.ops + [op], tuple(shape), dtype or self.dtype, self.where)


Device = (View, Expanded)


@dataclass(eq=False)
class Deferred:
    """One result of a multi-result op, lowered only if something uses it
    (``max.dim`` indices, which would otherwise make a host output)."""

    make: Callable[[], Any]
    node: Any


def shape_of(x: Any) -> tuple[int, ...]:
    if isinstance(x, (View, Expanded, Const, InputRef, HostValue)):
        return tuple(x.shape)
    return ()


def kind_of(x: Any) -> str:
    import torch

    if isinstance(x, (View, Expanded, InputRef)):
        return x.kind
    if isinstance(x, Const):
        if x.value.dtype == torch.bool:
            return "bool"
        return "float" if x.value.dtype.is_floating_point else "int"
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, int):
        return "int"
    return "float"


# ---------------------------------------------------------------------------
# the lowering context


class Lowering:
    """What handlers work with: the emitter, value conversion, errors.

    The driver (:mod:`anec.frontends.torch_import`) sets ``node`` (the FX node
    being lowered) before calling a handler, and provides ``device_input``
    (make an :class:`InputRef` a program input), ``host_input`` (a program
    input computed by the host) and ``host_source`` (a device tensor that
    host work at the outputs reads).
    """

    def __init__(self, em: Emitter, conv_limit: int) -> None:
        self.em = em
        self.conv_limit = conv_limit
        self.node: Any = None
        self.weights: dict[str, np.ndarray] = {}
        """Key -> array of every tensor the IR refers to (stored values, fp32)."""
        self.notes: list[str] = []
        self.env: dict[Any, Any] = {}
        """FX node -> its value (the driver's table; attention reads it for GQA bases)."""
        self.device_input: Callable[[InputRef], View] = _no_driver
        self.host_input: Callable[..., View] = _no_driver
        self.host_source: Callable[[Any], str] = _no_driver
        self.bind: Callable[[Any], dict] = _no_driver
        """The arguments of an FX node by schema name (the driver's binding)."""
        self.folded: set[Any] = set()
        """FX nodes already computed by an earlier lowering (a batch norm folded into its conv)."""
        self.taken_keys: set[str] = set()
        """The program's own tensor keys (state_dict, constants): derived weights avoid them."""

    # ---- errors ------------------------------------------------------------
    def fail(self, message: str, hint: str | None = None) -> "UnsupportedOpError":
        """An error at the current node (raise it: ``raise lw.fail(...)``)."""
        from anec.frontends.fx import located_error

        return located_error(UnsupportedOpError, self.node, message, hint)

    # ---- operands ----------------------------------------------------------
    def dev(self, x: Any) -> "View | Expanded":
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

    def view(self, x: Any) -> View:
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
            self._register(ref.key, c.origin)
            return self.em.const(ref.attrs(), TensorType(FP16, shape), suffix=_hint(ref.key))
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
        return self.em.const({"weight": key}, t, suffix=_hint(key), cse=False)

    def _derived_key(self, hint: str | None) -> str:
        base = f"anec.const.{hint or self.em.hint}"
        key, i = base, 1
        while key in self.weights:
            key = f"{base}.{i}"
            i += 1
        return key

    def _register(self, key: str, ref: WeightRef) -> None:
        if key not in self.weights:
            self.weights[key] = self.stored(key)

    stored: Callable[[str], np.ndarray] = None  # type: ignore[assignment]
    """Set by the driver: the stored array of a state_dict key."""

    _exact = False
    """Set by :meth:`binary` while lowering integer arithmetic (constants must be exact)."""

    def operand(self, x: Any, leader: View) -> Value:
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
    def unary(self, op: str, x: Any, kind: str = "float", **attrs: Any) -> "View | Expanded":
        x = self.dev(x)
        if isinstance(x, Expanded):
            return Expanded(self.unary(op, x.src, kind, **attrs), x.shape)
        return View(self.em.op(op, x.phys, **attrs), x.order, x.shape, kind)

    def binary(self, op: str, a: Any, b: Any, kind: str | None = None) -> "View | Expanded":
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

    def _binary(self, op: str, a: Any, b: Any, out: tuple[int, ...], kind: str) -> View:
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

    def _natural_operand(self, x: Any, out: Sequence[int]) -> Value:
        if isinstance(x, (int, float, bool)):
            return self.scalar(float(x), self._exact)
        if isinstance(x, Const):
            if math.prod(x.shape) == 1:
                return self.scalar(float(x.numpy().reshape(())), self._exact)
            return self.const(x)
        return materialize(self.em, self.dev(x))

    # small compositions (exact) -------------------------------------------
    def relu(self, x: Any) -> Any:
        return self.unary("relu", x, kind_of(x))

    def neg(self, x: Any) -> Any:
        return self.binary("mul", x, -1.0, kind_of(x))

    def min1(self, t: Any, kind: str = "bool") -> Any:
        """``min(t, 1)`` for t >= 0: ``1 - relu(1 - t)``."""
        r = self.relu(self.binary("sub", 1.0, t))
        return self.binary("sub", 1.0, r, kind)

    def absolute(self, x: Any) -> Any:
        return self.binary("add", self.relu(x), self.relu(self.neg(x)), kind_of(x))

    def maximum(self, a: Any, b: Any) -> Any:
        """``max(a, b) = b + relu(a - b)``."""
        return self.binary("add", b, self.relu(self.binary("sub", a, b)))

    def minimum(self, a: Any, b: Any) -> Any:
        """``min(a, b) = a - relu(a - b)``."""
        return self.binary("sub", a, self.relu(self.binary("sub", a, b)))

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        """``a * c + b * (1 - c)`` for c in {0, 1} (exact for finite a, b)."""
        kind = "float" if "float" in (kind_of(a), kind_of(b)) else kind_of(a)
        ca = self.binary("mul", a, cond, kind)
        nb = self.binary("mul", b, self.binary("sub", 1.0, cond), kind)
        return self.binary("add", ca, nb, kind)

    def require_discrete(self, x: Any, what: str) -> None:
        if kind_of(x) == "float" and not isinstance(x, (Const, int, float, bool)):
            raise self.fail(
                f"{what} of real-valued (float) activations has no exact form in the IR "
                "(its 27 ops have no comparison or rounding)",
                "compute it on the host, or from integer/bool inputs (masks, ids), which the "
                "device holds exactly",
            )

    # ---- matmul --------------------------------------------------------------
    def mm_operand(self, v: "View | Expanded") -> tuple[Value, bool]:
        """A matmul operand without moving data if its layout allows: ``(value, transposed)``."""
        v = as_view(self.em, v)
        if len(v.shape) >= 2 and not _ascending(v.order):
            dims = list(range(len(v.shape)))
            dims[-2], dims[-1] = dims[-1], dims[-2]
            sw = permute_view(v, dims)
            if _ascending(sw.order):
                return materialize(self.em, sw), True
        return materialize(self.em, v), False

    def matmul(self, a: Any, b: Any) -> View:
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

    def linear(self, x: Any, w: Const, bias: Any = None) -> View:
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


def _hint(key: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in key).strip("_") or "w"


def _aligned_ref(ref: WeightRef, shape: tuple[int, ...], leader: View,
                 sizes: dict[int, int] | None = None) -> WeightRef | None:
    """The weight view that :func:`align_array` of this constant is, if one exists."""
    from anec.frontends.layout import frame_plan

    split, kept, aligned = frame_plan(leader, shape, sizes)
    perm = list(np.argsort(kept)) if kept else []
    r = ref.reshape(split)
    if perm and perm != sorted(perm):
        r = r.permute(perm)
        if r is None:
            return None
    return r


# ---------------------------------------------------------------------------
# the table


@dataclass(frozen=True)
class Row:
    """One supported ATen op: its handler and the IR it becomes (for the docs)."""

    name: str
    fn: Callable[..., Any]
    ir: str
    group: str


HANDLERS: dict[str, Row] = {}
_GROUP = ["elementwise"]


def aten(*names: str, ir: str) -> Callable:
    """Register a handler for the ATen overloads ``names`` (``"add.Tensor"``)."""

    def deco(fn: Callable) -> Callable:
        for n in names:
            HANDLERS["aten." + n] = Row("aten." + n, fn, ir, _GROUP[0])
        return fn

    return deco


def group(name: str) -> None:
    _GROUP[0] = name


# ---- elementwise -----------------------------------------------------------------

group("elementwise")


def _float_only(lw: Lowering, x: Any, op: str) -> None:
    if kind_of(x) == "bool":
        raise lw.fail(f"{op} of a bool tensor", "cast it to a float dtype first")


for _op in ("relu", "tanh", "sigmoid", "exp", "sqrt", "rsqrt"):
    def _mk(op: str) -> Callable:
        def fn(lw: Lowering, a: dict) -> Any:
            return lw.unary(op, a["self"])
        fn.__name__ = f"lower_{op}"
        return fn
    aten(f"{_op}.default", ir=_op)(_mk(_op))


@aten("neg.default", ir="neg")
def lower_neg(lw: Lowering, a: dict) -> Any:
    return lw.unary("neg", a["self"], kind_of(a["self"]))


@aten("gelu.default", ir='gelu(mode="exact"), or mode="tanh" for approximate="tanh"')
def lower_gelu(lw: Lowering, a: dict) -> Any:
    mode = {"none": "exact", "tanh": "tanh"}.get(a["approximate"])
    if mode is None:
        raise lw.fail(f"gelu approximate='{a['approximate']}'", "use approximate='none' or 'tanh'")
    return lw.unary("gelu", a["self"], mode=mode)


@aten("silu.default", ir="mul(x, sigmoid(x))")
def lower_silu(lw: Lowering, a: dict) -> Any:
    return lw.binary("mul", a["self"], lw.unary("sigmoid", a["self"]))


@aten("reciprocal.default", ir="pow(x, -1)")
def lower_reciprocal(lw: Lowering, a: dict) -> Any:
    return lw.binary("pow", a["self"], -1.0, "float")


@aten("abs.default", ir="relu(x) + relu(-x)")
def lower_abs(lw: Lowering, a: dict) -> Any:
    return lw.absolute(a["self"])


@aten("exp2.default", ir="exp(x * ln 2)")
def lower_exp2(lw: Lowering, a: dict) -> Any:
    return lw.unary("exp", lw.binary("mul", a["self"], math.log(2.0)))


@aten("expm1.default", ir="exp(x) - 1")
def lower_expm1(lw: Lowering, a: dict) -> Any:
    return lw.binary("sub", lw.unary("exp", a["self"]), 1.0)


@aten("pow.Tensor_Scalar", ir="mul(x, x) for 2, sqrt for 0.5, rsqrt for -0.5, else pow(x, c)")
def lower_pow_scalar(lw: Lowering, a: dict) -> Any:
    x, e = a["self"], a["exponent"]
    if isinstance(e, Const):
        e = float(e.numpy().reshape(()))
    e = float(e)
    if e == 1.0:
        return lw.dev(x)
    if e == 2.0:
        return lw.binary("mul", x, x, kind_of(x))
    if e == 0.5:
        return lw.unary("sqrt", x)
    if e == -0.5:
        return lw.unary("rsqrt", x)
    return lw.binary("pow", x, e, "float")


@aten("pow.Tensor_Tensor", ir="pow(x, y)")
def lower_pow_tensor(lw: Lowering, a: dict) -> Any:
    return lw.binary("pow", a["self"], a["exponent"], "float")


@aten("pow.Scalar", ir="exp(x * ln c) (c > 0)")
def lower_pow_base(lw: Lowering, a: dict) -> Any:
    c = float(a["self"])
    if c <= 0:
        raise lw.fail(f"pow with base {c:g}", "only a positive constant base is supported")
    return lw.unary("exp", lw.binary("mul", a["exponent"], math.log(c)))


def _alpha(lw: Lowering, y: Any, alpha: Any) -> Any:
    if alpha in (None, 1, 1.0):
        return y
    return lw.binary("mul", y, float(alpha), kind_of(y))


@aten("add.Tensor", "add.Scalar", ir="add (broadcast; numbers become fp16 scalar consts)")
def lower_add(lw: Lowering, a: dict) -> Any:
    return lw.binary("add", a["self"], _alpha(lw, a["other"], a.get("alpha")))


@aten("sub.Tensor", "sub.Scalar", ir="sub")
def lower_sub(lw: Lowering, a: dict) -> Any:
    return lw.binary("sub", a["self"], _alpha(lw, a["other"], a.get("alpha")))


@aten("rsub.Tensor", "rsub.Scalar", ir="sub(other, x)")
def lower_rsub(lw: Lowering, a: dict) -> Any:
    return lw.binary("sub", a["other"], _alpha(lw, a["self"], a.get("alpha")))


@aten("mul.Tensor", "mul.Scalar", ir="mul")
def lower_mul(lw: Lowering, a: dict) -> Any:
    return lw.binary("mul", a["self"], a["other"])


@aten("div.Tensor", "div.Scalar", "div.Tensor_mode", "div.Scalar_mode",
      ir="mul(x, 1/c) for a constant c, else mul(x, pow(y, -1)); rounding modes are errors")
def lower_div(lw: Lowering, a: dict) -> Any:
    if a.get("rounding_mode") is not None:
        lw.require_discrete(a["self"], f"division with rounding_mode='{a['rounding_mode']}'")
        raise lw.fail(f"integer division (rounding_mode='{a['rounding_mode']}') on the device",
                      "compute it on the host")
    x, y = a["self"], a["other"]
    if isinstance(y, (int, float)) or (isinstance(y, Const) and math.prod(y.shape) == 1):
        c = float(y) if not isinstance(y, Const) else float(y.numpy().reshape(()))
        if c == 0.0:
            raise lw.fail("division by the constant 0")
        return lw.binary("mul", x, 1.0 / c, "float")
    if isinstance(y, Const):
        return lw.binary("mul", x, Const(1.0 / y.value.double()), "float")
    return lw.binary("mul", x, lw.binary("pow", y, -1.0, "float"), "float")


@aten("maximum.default", "fmax.default", ir="b + relu(a - b)")
def lower_maximum(lw: Lowering, a: dict) -> Any:
    return lw.maximum(a["self"], a["other"])


@aten("minimum.default", "fmin.default", ir="a - relu(a - b)")
def lower_minimum(lw: Lowering, a: dict) -> Any:
    return lw.minimum(a["self"], a["other"])


def _clamp(lw: Lowering, x: Any, lo: Any, hi: Any) -> Any:
    if lo is not None:
        x = lw.binary("add", lw.relu(lw.binary("sub", x, lo)), lo, kind_of(x))
    if hi is not None:
        x = lw.binary("sub", hi, lw.relu(lw.binary("sub", hi, x)), kind_of(x))
    return x


@aten("clamp.default", "clamp.Tensor", ir="lo + relu(x - lo), then hi - relu(hi - x)")
def lower_clamp(lw: Lowering, a: dict) -> Any:
    return _clamp(lw, a["self"], a.get("min"), a.get("max"))


@aten("clamp_min.default", ir="lo + relu(x - lo)")
def lower_clamp_min(lw: Lowering, a: dict) -> Any:
    return _clamp(lw, a["self"], a["min"], None)


@aten("clamp_max.default", ir="hi - relu(hi - x)")
def lower_clamp_max(lw: Lowering, a: dict) -> Any:
    return _clamp(lw, a["self"], None, a["max"])


@aten("hardtanh.default", ir="clamp composition (relu)")
def lower_hardtanh(lw: Lowering, a: dict) -> Any:
    return _clamp(lw, a["self"], a["min_val"], a["max_val"])


@aten("leaky_relu.default", ir="relu(x) - slope * relu(-x)")
def lower_leaky_relu(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    neg_part = lw.relu(lw.neg(x))
    return lw.binary("sub", lw.relu(x), lw.binary("mul", neg_part, float(a["negative_slope"])))


@aten("elu.default", ir="scale * (relu(x) + alpha * (exp(-relu(-x) * input_scale) - 1))")
def lower_elu(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    m = lw.neg(lw.relu(lw.neg(x)))  # min(x, 0)
    e = lw.binary("sub", lw.unary("exp", lw.binary("mul", m, float(a["input_scale"]))), 1.0)
    y = lw.binary("add", lw.relu(x), lw.binary("mul", e, float(a["alpha"])))
    return lw.binary("mul", y, float(a["scale"])) if float(a["scale"]) != 1.0 else y


@aten("where.self", "where.ScalarOther", "where.ScalarSelf", "where.Scalar",
      ir="a * c + b * (1 - c), c the 0/1 condition")
def lower_where(lw: Lowering, a: dict) -> Any:
    cond = a["condition"]
    if kind_of(cond) != "bool":
        raise lw.fail("where() with a non-bool condition")
    return lw.where(cond, a["self"], a["other"])


# ---- bool and integer logic (exact on 0/1 and integer-valued tensors) -------------

group("logic")


def _cmp(lw: Lowering, x: Any, y: Any, op: str) -> Any:
    lw.require_discrete(x, f"comparison '{op}'")
    lw.require_discrete(y, f"comparison '{op}'")
    if op in ("lt", "le"):
        x, y, op = y, x, {"lt": "gt", "le": "ge"}[op]
    d = lw.binary("sub", x, y, "int")
    if op == "gt":  # x - y >= 1
        return lw.min1(lw.relu(d))
    if op == "ge":  # x - y >= 0
        return lw.min1(lw.relu(lw.binary("add", d, 1.0, "int")))
    ne = lw.min1(lw.absolute(d))
    if op == "ne":
        return ne
    return lw.binary("sub", 1.0, ne, "bool")


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    def _mkc(op: str) -> Callable:
        def fn(lw: Lowering, a: dict) -> Any:
            return _cmp(lw, a["self"], a["other"], op)
        fn.__name__ = f"lower_{op}"
        return fn
    aten(f"{_op}.Tensor", f"{_op}.Scalar",
         ir={"eq": "1 - min(|a - b|, 1)", "ne": "min(|a - b|, 1)", "gt": "min(relu(a - b), 1)",
             "ge": "min(relu(a - b + 1), 1)", "lt": "gt with operands swapped",
             "le": "ge with operands swapped"}[_op] + " (integer/bool operands)")(_mkc(_op))


def _logic(lw: Lowering, a: Any, b: Any, op: str) -> Any:
    for x in (a, b):
        if kind_of(x) != "bool":
            if op.startswith("bitwise"):
                raise lw.fail(f"{op} of non-bool tensors", "bitwise ops are supported on bool tensors only")
            lw.require_discrete(x, op)
    a = _as_bool(lw, a)
    b = _as_bool(lw, b)
    kind = op.split("_")[-1]
    if kind == "and":
        return lw.binary("mul", a, b, "bool")
    if kind == "or":
        return lw.binary("sub", lw.binary("add", a, b, "int"), lw.binary("mul", a, b, "int"), "bool")
    d = lw.binary("sub", a, b, "int")
    return lw.binary("mul", d, d, "bool")  # xor


def _as_bool(lw: Lowering, x: Any) -> Any:
    if kind_of(x) == "bool":
        return x
    return lw.min1(lw.absolute(x))


for _op in ("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"):
    def _mkl(op: str) -> Callable:
        def fn(lw: Lowering, a: dict) -> Any:
            return _logic(lw, a["self"], a["other"], op)
        fn.__name__ = f"lower_{op}"
        return fn
    aten(f"{_op}.default" if _op.startswith("logical") else f"{_op}.Tensor",
         ir={"and": "mul", "or": "a + b - a * b", "xor": "(a - b)^2"}[_op.split("_")[-1]]
         + " (on 0/1)")(_mkl(_op))


@aten("logical_not.default", "bitwise_not.default", ir="1 - x (on 0/1)")
def lower_not(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    if kind_of(x) != "bool":
        lw.require_discrete(x, "logical_not")
        x = _as_bool(lw, x)
    return lw.binary("sub", 1.0, x, "bool")


@aten("any.dim", "any.dims", "any.default", ir="min(reduce_sum(x), 1) (bool)")
def lower_any(lw: Lowering, a: dict) -> Any:
    x = _as_bool(lw, a["self"])
    s = _reduce(lw, x, a.get("dim"), bool(a.get("keepdim", False)), "reduce_sum", "int")
    return lw.min1(s)


@aten("_to_copy.default", "to.dtype", ir="(none) between floats; to bool: min(|x|, 1); "
      "to an integer type only from integer/bool tensors")
def lower_to_copy(lw: Lowering, a: dict) -> Any:
    import torch

    x = a["self"]
    dt = a.get("dtype")
    if dt is None:
        return x
    if isinstance(x, HostValue):
        return x.then({"op": "astype", "dtype": str(dt).replace("torch.", "")}, x.shape,
                      str(dt).replace("torch.", ""))
    if dt.is_complex:
        raise lw.fail(f"conversion to {dt}", "complex tensors have no IR form")
    if dt == torch.bool:
        if kind_of(x) == "bool":
            return x
        lw.require_discrete(x, "conversion to bool")
        return _as_bool(lw, x)
    if dt.is_floating_point:
        return _with_kind(lw.dev(x) if isinstance(x, InputRef) else x, "float")
    if kind_of(x) == "float":
        raise lw.fail(f"conversion of a float tensor to {dt} (it truncates)",
                      "the IR has no rounding; convert on the host")
    if isinstance(x, InputRef):
        return x
    return _with_kind(x, "int") if kind_of(x) == "bool" else x


def _with_kind(x: Any, kind: str) -> Any:
    if isinstance(x, View):
        return x.with_kind(kind)
    if isinstance(x, Expanded):
        return Expanded(x.src.with_kind(kind), x.shape)
    if isinstance(x, Const) and kind == "float" and not x.value.dtype.is_floating_point:
        return Const(x.value.float())
    return x


# ---- reductions and normalizations -----------------------------------------------

group("reductions and normalizations")


def _dims(dim: Any, rank: int) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    return sorted({d % rank for d in dim}) if rank else []


def _reduce(lw: Lowering, x: Any, dim: Any, keepdim: bool, op: str, kind: str = "float") -> View:
    v = lw.view(x)
    rank = len(v.shape)
    dims = _dims(dim, rank)
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


@aten("sum.dim_IntList", "sum.default", ir="reduce_sum over the dims' axes (keep_dims)")
def lower_sum(lw: Lowering, a: dict) -> Any:
    kind = "int" if kind_of(a["self"]) != "float" else "float"
    return _reduce(lw, a["self"], a.get("dim"), bool(a.get("keepdim", False)), "reduce_sum", kind)


@aten("mean.dim", "mean.default", ir="reduce_mean")
def lower_mean(lw: Lowering, a: dict) -> Any:
    return _reduce(lw, a["self"], a.get("dim"), bool(a.get("keepdim", False)), "reduce_mean")


@aten("amax.default", ir="reduce_max")
def lower_amax(lw: Lowering, a: dict) -> Any:
    return _reduce(lw, a["self"], a.get("dim"), bool(a.get("keepdim", False)), "reduce_max",
                   kind_of(a["self"]))


@aten("max.dim", ir="reduce_max (values); indices: host argmax at an output")
def lower_max_dim(lw: Lowering, a: dict) -> Any:
    values = _reduce(lw, a["self"], a["dim"], bool(a["keepdim"]), "reduce_max", kind_of(a["self"]))
    x = a["self"]
    return (values, Deferred(lambda: _host(lw, x, "argmax", dim=a["dim"], keepdim=bool(a["keepdim"])),
                             lw.node))


@aten("max.default", ir="reduce_max over all dims")
def lower_max_all(lw: Lowering, a: dict) -> Any:
    return _reduce(lw, a["self"], None, False, "reduce_max", kind_of(a["self"]))


def _var(lw: Lowering, x: Any, dim: Any, correction: Any, keepdim: bool) -> tuple[View, View]:
    v = lw.view(x)
    dims = _dims(dim, len(v.shape))
    n = math.prod(v.shape[d] for d in dims)
    c = 1.0 if correction is None else float(correction)
    mu = _reduce(lw, v, dims, True, "reduce_mean")
    xc = lw.binary("sub", v, mu)
    ss = _reduce(lw, lw.binary("mul", xc, xc), dims, keepdim, "reduce_mean")
    if n - c <= 0:
        raise lw.fail(f"variance of {n} elements with correction {c:g}")
    if c:
        ss = lw.binary("mul", ss, n / (n - c))
    mean = mu if keepdim else reshape_view(lw.em, mu, ss.shape)
    return ss, mean


@aten("var.correction", "var.dim", ir="reduce_mean((x - mean)^2) * n / (n - correction)")
def lower_var(lw: Lowering, a: dict) -> Any:
    corr = a.get("correction")
    if "unbiased" in a:
        corr = 1 if a["unbiased"] else 0
    return _var(lw, a["self"], a.get("dim"), corr, bool(a.get("keepdim", False)))[0]


@aten("var_mean.correction", ir="the var composition; the mean is its reduce_mean")
def lower_var_mean(lw: Lowering, a: dict) -> Any:
    return _var(lw, a["self"], a.get("dim"), a.get("correction"), bool(a.get("keepdim", False)))


@aten("linalg_vector_norm.default", ir="sqrt(reduce_sum(x * x)) (ord 2)")
def lower_vector_norm(lw: Lowering, a: dict) -> Any:
    if float(a["ord"]) != 2.0:
        raise lw.fail(f"vector norm of order {a['ord']}", "only the 2-norm is supported")
    x = a["self"]
    s = _reduce(lw, lw.binary("mul", x, x), a.get("dim"), bool(a.get("keepdim", False)), "reduce_sum")
    return lw.unary("sqrt", s)


@aten("_softmax.default", "softmax.int", ir="softmax(axis) on the dim's physical axis")
def lower_softmax(lw: Lowering, a: dict) -> Any:
    v = lw.view(a["self"])
    dim = a["dim"] % len(v.shape) if v.shape else 0
    v, axis = single_axis(lw.em, v, dim)
    if axis is None:  # softmax over a dim of size 1 is 1
        return lw.binary("add", lw.binary("mul", v, 0.0), 1.0)
    return View(lw.em.op("softmax", v.phys, axis=axis), v.order, v.shape)


def _normalize(lw: Lowering, x: View, dims: list[int], eps: float) -> tuple[View, View, View]:
    """``(x - mean) * rsqrt(var + eps)`` over ``dims``: (result, mean, rstd)."""
    mu = _reduce(lw, x, dims, True, "reduce_mean")
    xc = lw.binary("sub", x, mu)
    var = _reduce(lw, lw.binary("mul", xc, xc), dims, True, "reduce_mean")
    eps = float(eps)  # 0 -> the smallest fp16 subnormal (rsqrt(0) of a constant row); < 0 as given
    rstd = lw.unary("rsqrt", lw.binary("add", var, eps if eps < 0 else max(eps, 2.0 ** -24)))
    return lw.binary("mul", xc, rstd), mu, rstd


@aten("native_layer_norm.default",
      ir="(x - reduce_mean) * rsqrt(reduce_mean((x - mean)^2) + eps) * w + b")
def lower_layer_norm(lw: Lowering, a: dict) -> Any:
    x = lw.view(a["input"])
    k = len(a["normalized_shape"])
    dims = list(range(len(x.shape) - k, len(x.shape)))
    y, mu, rstd = _normalize(lw, x, dims, a["eps"])
    if a.get("weight") is not None:
        y = lw.binary("mul", y, a["weight"])
    if a.get("bias") is not None:
        y = lw.binary("add", y, a["bias"])
    return (y, mu, rstd)


@aten("native_group_norm.default", ir="reshape to groups, the layer-norm composition, reshape back")
def lower_group_norm(lw: Lowering, a: dict) -> Any:
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


def _reshaped_const(lw: Lowering, c: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(c, Const):
        return Const(c.value.reshape(shape), c.origin.reshape(shape) if c.origin else None)
    return reshape_view(lw.em, lw.view(c), shape)


@aten("_native_batch_norm_legit_no_training.default",
      ir="folded into the weight and bias of the conv it follows (its only user); else x * scale "
         "+ shift, scale and shift folded from the running statistics at import")
def lower_batch_norm(lw: Lowering, a: dict) -> Any:
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


# ---- linear algebra -------------------------------------------------------------

group("linear algebra")


def _weight2d(x: Any) -> bool:
    return isinstance(x, Const) and len(x.shape) == 2 and x.value.dtype.is_floating_point


@aten("mm.default", ir="conv1x1 in the channel layout for a constant weight (matmul when wider "
      "than the conv channel limit); matmul of two activations")
def lower_mm(lw: Lowering, a: dict) -> Any:
    x, w = a["self"], a["mat2"]
    if _weight2d(w) and not isinstance(x, Const):
        return lw.linear(x, w)
    return _matmul_any(lw, x, w)


@aten("addmm.default", ir="conv1x1(x, w, bias=b) (a linear layer)")
def lower_addmm(lw: Lowering, a: dict) -> Any:
    bias, x, w = a["self"], a["mat1"], a["mat2"]
    beta, alpha = float(a.get("beta", 1)), float(a.get("alpha", 1))
    if beta != 1.0:
        bias = lw.binary("mul", bias, beta) if not isinstance(bias, Const) else Const(bias.value * beta)
    if _weight2d(w) and not isinstance(x, Const) and alpha == 1.0:
        return lw.linear(x, w, bias)
    y = _matmul_any(lw, x, w)
    if alpha != 1.0:
        y = lw.binary("mul", y, alpha)
    return lw.binary("add", y, bias)


def _matmul_any(lw: Lowering, x: Any, y: Any) -> Any:
    if isinstance(x, Const):
        wx = lw.const(x)
        r = lw.em.op("matmul", wx, materialize(lw.em, lw.view(y)))
        return natural(r)
    if isinstance(y, Const):
        r = lw.em.op("matmul", materialize(lw.em, lw.view(x)), lw.const(y))
        return natural(r)
    return lw.matmul(x, y)


@aten("bmm.default", "matmul.default", ir="matmul (transpose flags instead of moving data "
      "where the operand layouts allow)")
def lower_bmm(lw: Lowering, a: dict) -> Any:
    x, y = a["self"], a.get("mat2", a.get("other"))
    if _weight2d(y) and not isinstance(x, Const) and len(shape_of(x)) >= 2:
        return lw.linear(x, y)
    return _matmul_any(lw, x, y)


@aten("baddbmm.default", ir="matmul, scaled, plus the input")
def lower_baddbmm(lw: Lowering, a: dict) -> Any:
    y = _matmul_any(lw, a["batch1"], a["batch2"])
    if float(a.get("alpha", 1)) != 1.0:
        y = lw.binary("mul", y, float(a["alpha"]))
    inp = a["self"]
    if float(a.get("beta", 1)) != 1.0:
        inp = lw.binary("mul", inp, float(a["beta"]))
    return lw.binary("add", y, inp)


# ---- shapes ---------------------------------------------------------------------

group("shapes and data movement")


def _resolve_shape(shape: Sequence[int], numel: int) -> tuple[int, ...]:
    shape = [int(d) for d in shape]
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    return tuple(shape)


@aten("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default",
      ir="(none: the layout records it); a reshape where a dim splits a physical axis")
def lower_view(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    shape = _resolve_shape(a.get("size", a.get("shape")), math.prod(shape_of(x)))
    return _reshape_any(lw, x, shape)


def _reshape_any(lw: Lowering, x: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(x, InputRef):
        return InputRef(x.name, x.shape, x.dtype, shape)
    if isinstance(x, HostValue):
        return x.then({"op": "reshape", "shape": list(shape)}, shape)
    return reshape_view(lw.em, lw.dev(x), shape)


@aten("unsqueeze.default", ir="(none)")
def lower_unsqueeze(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    s = list(shape_of(x))
    d = a["dim"] % (len(s) + 1)
    s.insert(d, 1)
    return _reshape_any(lw, x, tuple(s))


@aten("squeeze.default", "squeeze.dim", "squeeze.dims", ir="(none)")
def lower_squeeze(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    s = shape_of(x)
    dims = a.get("dim", a.get("dims"))
    dims = _dims(dims, len(s)) if dims is not None else list(range(len(s)))
    return _reshape_any(lw, x, tuple(d for i, d in enumerate(s) if not (i in dims and d == 1)))


@aten("permute.default", ir="(none: the layout records it)")
def lower_permute(lw: Lowering, a: dict) -> Any:
    x = lw.dev(a["self"])
    v = as_view(lw.em, x)
    dims = [d % len(v.shape) for d in a["dims"]]
    return permute_view(v, dims)


@aten("transpose.int", ir="(none: the layout records it)")
def lower_transpose(lw: Lowering, a: dict) -> Any:
    v = lw.view(a["self"])
    dims = list(range(len(v.shape)))
    d0, d1 = a["dim0"] % len(dims), a["dim1"] % len(dims)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute_view(v, dims)


@aten("t.default", ir="(none)")
def lower_t(lw: Lowering, a: dict) -> Any:
    v = lw.view(a["self"])
    return permute_view(v, list(reversed(range(len(v.shape)))))


@aten("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default",
      "contiguous.default", "dropout.default", ir="(none)")
def lower_identity(lw: Lowering, a: dict) -> Any:
    if a.get("train"):
        raise lw.fail("dropout in training mode", "call model.eval() before importing")
    return a.get("self", a.get("input"))


@aten("native_dropout.default", ir="(none) in eval mode")
def lower_native_dropout(lw: Lowering, a: dict) -> Any:
    if a.get("train") is not False:
        raise lw.fail("dropout in training mode", "call model.eval() before importing")
    return (a["input"], None)


@aten("expand.default", "expand_copy.default", ir="(none: binary ops broadcast); add of zeros "
      "where a tensor must hold the copies")
def lower_expand(lw: Lowering, a: dict) -> Any:
    x = lw.dev(a["self"])
    src = shape_of(x)
    size = [int(d) for d in a["size"]]
    lead = len(size) - len(src)
    shape = tuple(s if s != -1 else src[i - lead] for i, s in enumerate(size))
    if isinstance(x, Expanded):
        x = x.src
    if math.prod(shape) == x.numel:
        return reshape_view(lw.em, x, shape)
    return Expanded(x, shape)


@aten("repeat.default", ir="expand over interleaved unit dims, then a reshape")
def lower_repeat(lw: Lowering, a: dict) -> Any:
    v = lw.view(a["self"])
    reps = [int(r) for r in a["repeats"]]
    s = (1,) * (len(reps) - len(v.shape)) + v.shape
    inter = tuple(x for d in s for x in (1, d))
    big = tuple(x for r, d in zip(reps, s) for x in (r, d))
    e = Expanded(reshape_view(lw.em, v, inter), big)
    return reshape_view(lw.em, e, tuple(r * d for r, d in zip(reps, s)))


def _slice_view(lw: Lowering, x: Any, dim: int, start: int, end: int, step: int) -> View:
    v = lw.view(x)
    dim %= len(v.shape)
    size = v.shape[dim]
    start, end, step = slice(start, end, step).indices(size)
    n = len(range(start, end, step))
    if n == 0:
        raise lw.fail(f"slice of dim {dim} is empty")
    if n == size:
        return v
    v, axis = single_axis(lw.em, v, dim)
    rank = v.phys.type.rank
    begin = [0] * rank
    stop = list(v.phys.type.shape)
    strides = [1] * rank
    begin[axis], stop[axis], strides[axis] = start, end, step
    kw: dict[str, Any] = {"begin": begin, "end": stop}
    if step != 1:
        kw["stride"] = strides
    r = lw.em.op("slice", v.phys, **kw)
    shape = list(v.shape)
    shape[dim] = n
    order = tuple(a for a in v.order if a != axis or n > 1)
    return View(r, order, tuple(shape), v.kind)


@aten("slice.Tensor", "slice_copy.Tensor", ir="slice on the dim's physical axis")
def lower_slice(lw: Lowering, a: dict) -> Any:
    end = a.get("end")
    if end is not None and end > 2**62:
        end = None
    return _slice_view(lw, a["self"], a.get("dim", 0), a.get("start"), end, a.get("step", 1))


@aten("select.int", ir="slice + (none)")
def lower_select(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    s = shape_of(x)
    dim = a["dim"] % len(s)
    i = a["index"] % s[dim]
    v = _slice_view(lw, x, dim, i, i + 1, 1)
    return reshape_view(lw.em, v, s[:dim] + s[dim + 1:])


@aten("split_with_sizes.default", "split.Tensor", "split_with_sizes_copy.default",
      ir="one slice per piece")
def lower_split(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    s = shape_of(x)
    dim = a.get("dim", 0) % len(s)
    sizes = a.get("split_sizes")
    if sizes is None:
        step = int(a["split_size"])
        sizes = [min(step, s[dim] - i) for i in range(0, s[dim], step)]
    out, pos = [], 0
    for n in sizes:
        out.append(_slice_view(lw, x, dim, pos, pos + int(n), 1))
        pos += int(n)
    return tuple(out)


@aten("unbind.int", ir="one slice per index")
def lower_unbind(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    s = shape_of(x)
    dim = a.get("dim", 0) % len(s)
    return tuple(reshape_view(lw.em, _slice_view(lw, x, dim, i, i + 1, 1), s[:dim] + s[dim + 1:])
                 for i in range(s[dim]))


@aten("cat.default", "concat.default", ir="pad each piece to the full size, then add "
      "(the ANE rejects concat); constant pieces folded into one const")
def lower_cat(lw: Lowering, a: dict) -> Any:
    items = [t for t in a["tensors"] if math.prod(shape_of(t)) > 0]
    if not items:
        raise lw.fail("concatenation of empty tensors")
    if len(items) == 1:
        return lw.dev(items[0])
    rank = len(shape_of(items[0]))
    dim = a.get("dim", 0) % rank
    sizes = [shape_of(t)[dim] for t in items]
    total = sum(sizes)
    out_shape = list(shape_of(items[0]))
    out_shape[dim] = total
    kinds = {kind_of(t) for t in items}
    kind = kinds.pop() if len(kinds) == 1 else "float"
    em = lw.em
    lead_item = next(t for t in items if not isinstance(t, Const))
    lead, axis = single_axis(em, lw.view(lead_item), dim)
    nat = axis is None  # the lead piece has size 1 there: join in the natural layout
    if nat:
        axis = dim
    parts: list[Value] = []
    pos = 0
    for t, n in zip(items, sizes):
        if isinstance(t, Const):
            piece = lw.const_in_frame(t, None if nat else lead, {axis: n})
        else:
            piece = (materialize(em, lw.view(t)) if nat else
                     lead.phys if t is lead_item else align_view(em, lw.dev(t), lead, {axis: n}))
        before, after = [0] * piece.type.rank, [0] * piece.type.rank
        before[axis], after[axis] = pos, total - pos - n
        parts.append(em.op("pad", piece, before=before, after=after))
        pos += n
    acc = parts[0]
    for p in parts[1:]:
        acc = em.op("add", acc, p)
    if nat:
        return natural(acc, kind)
    return View(acc, lead.order, tuple(out_shape), kind)


@aten("constant_pad_nd.default", ir="pad on the physical axes (value = the pad value)")
def lower_pad(lw: Lowering, a: dict) -> Any:
    v = lw.view(a["self"])
    pads = [int(p) for p in a["pad"]]
    value = float(a.get("value", 0.0) or 0.0)
    if any(p < 0 for p in pads):
        raise lw.fail("negative padding (cropping)", "use slicing")
    x = materialize(lw.em, v)
    rank = len(v.shape)
    before, after = [0] * rank, [0] * rank
    for i in range(len(pads) // 2):
        d = rank - 1 - i
        before[d], after[d] = pads[2 * i], pads[2 * i + 1]
    value = float(fp16_values(np.asarray(value)))
    return natural(lw.em.op("pad", x, before=before, after=after, value=value), v.kind)


@aten("index.Tensor", ir="with constant indices: a reshape/slice when they are a range, else a "
      "matmul by a constant one-hot matrix")
def lower_index(lw: Lowering, a: dict) -> Any:
    x = a["self"]
    idx = list(a["indices"])
    if any(i is not None and not isinstance(i, Const) for i in idx):
        raise lw.fail("indexing with indices computed in the model (a gather)",
                      "the IR has no gather: index with constants, or do the lookup on the host "
                      "(embedding lookups at the inputs run there)")
    pos = [i for i, t in enumerate(idx) if t is not None]
    if not pos:
        return x
    if pos != list(range(pos[0], pos[-1] + 1)):
        raise lw.fail("advanced indexing with tensor indices separated by slices",
                      "index one dim at a time (index_select)")
    rank = len(shape_of(x))
    if pos[0] == 0:
        return _gather(lw, x, [idx[i] for i in pos])
    # move the indexed dims first, gather, and put the result dims back where they were
    v = lw.view(x)
    rest = [d for d in range(rank) if d not in pos]
    moved = permute_view(v, pos + rest)
    r = as_view(lw.em, lw.dev(_gather(lw, moved, [idx[i] for i in pos])))
    nb = len(r.shape) - len(rest)
    lead = pos[0]
    order = list(range(nb, nb + lead)) + list(range(nb)) + list(range(nb + lead, len(r.shape)))
    return permute_view(r, order)


def _gather(lw: Lowering, x: Any, idx: list) -> Any:
    import torch

    s = shape_of(x)
    k = len(idx)
    if any(i is None for i in idx):
        raise lw.fail("indexing with None (a new axis) among tensor indices")
    tensors = []
    for i, t in enumerate(idx):
        v = t.value
        if v.dtype == torch.bool:
            raise lw.fail("boolean mask indexing", "its result shape depends on the data")
        tensors.append(torch.remainder(v.long(), s[i]))
    bshape = torch.broadcast_shapes(*[t.shape for t in tensors])
    flat = torch.zeros(bshape, dtype=torch.long)
    stride = 1
    for i in reversed(range(k)):
        flat = flat + tensors[i].expand(bshape) * stride
        stride *= s[i]
    n_src = math.prod(s[:k])
    rest = s[k:]
    out_shape = tuple(bshape) + tuple(rest)
    f = flat.reshape(-1).numpy()
    src = reshape_view(lw.em, lw.view(x), (n_src,) + tuple(rest))
    if np.array_equal(f, np.arange(n_src)):
        return reshape_view(lw.em, src, out_shape)
    if f.size and np.all(np.diff(f) == 1):
        sl = _slice_view(lw, src, 0, int(f[0]), int(f[-1]) + 1, 1)
        return reshape_view(lw.em, sl, out_shape)
    onehot = np.zeros((f.size, n_src), np.float32)
    onehot[np.arange(f.size), f] = 1.0
    flat_src = reshape_view(lw.em, src, (n_src, max(1, math.prod(rest))))
    r = lw.em.op("matmul", lw.array(onehot), materialize(lw.em, flat_src))
    return reshape_view(lw.em, natural(r, kind_of(x)), out_shape)


@aten("index_select.default", ir="as index.Tensor with one constant index")
def lower_index_select(lw: Lowering, a: dict) -> Any:
    idx = a["index"]
    if not isinstance(idx, Const):
        raise lw.fail("index_select with indices computed in the model (a gather)",
                      "the IR has no gather: use constant indices")
    x = a["self"]
    dim = a["dim"] % len(shape_of(x))
    v = lw.view(x)
    perm = [dim] + [d for d in range(len(v.shape)) if d != dim]
    moved = permute_view(v, perm)
    r = _gather(lw, moved, [idx])
    back = list(range(1, dim + 1)) + [0] + list(range(dim + 1, len(v.shape)))
    return permute_view(as_view(lw.em, r), back)


@aten("embedding.default", ir="host lookup when the ids are a model input; a weight slice for "
      "constant ids (positions)")
def lower_embedding(lw: Lowering, a: dict) -> Any:
    w, ids = a["weight"], a["indices"]
    if not isinstance(w, Const):
        raise lw.fail("embedding with a table computed in the model")
    if isinstance(ids, InputRef):
        return lw.host_input(w, ids)
    raise lw.fail("embedding lookup of ids computed in the model",
                  "the IR has no gather; only lookups of a model input's ids run (on the host)")


@aten("full_like.default", "zeros_like.default", "ones_like.default", "empty_like.default",
      "new_zeros.default", "new_ones.default", "new_full.default", "new_empty.default",
      ir="a constant (only the operand's shape matters)")
def lower_like(lw: Lowering, a: dict) -> Any:
    import torch

    val = lw.node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise lw.fail("the result's shape is not known", "export with static shapes")
    name = str(lw.node.target).split(".")[1]
    fill = {"zeros_like": 0, "empty_like": 0, "new_zeros": 0, "new_empty": 0, "ones_like": 1,
            "new_ones": 1}.get(name, a.get("fill_value", 0))
    return Const(torch.full(tuple(int(d) for d in val.shape), fill, dtype=val.dtype))


# ---- attention ------------------------------------------------------------------

group("attention")


@aten("scaled_dot_product_attention.default",
      ir="matmul(q * scale, k^T) + mask, softmax, matmul with v (computed as v^T p^T so the "
         "result lands in the channel layout); grouped-query heads broadcast, never copied")
def lower_sdpa(lw: Lowering, a: dict) -> Any:
    from anec.frontends.fx import repeat_kv_source

    if float(a.get("dropout_p") or 0.0) != 0.0:
        raise lw.fail("attention dropout", "call model.eval() / use dropout_p=0 before importing")
    node = lw.node
    q = lw.view(a["query"])
    k_node, v_node = node.args[1], node.args[2]
    k_base, v_base = repeat_kv_source(k_node), repeat_kv_source(v_node)
    k = lw.view(lw.env[k_base] if k_base is not None else a["key"])
    v = lw.view(lw.env[v_base] if v_base is not None else a["value"])
    if len(q.shape) < 3 or len(k.shape) != len(q.shape) or len(v.shape) != len(q.shape):
        raise lw.fail("attention with q, k, v of different ranks or rank < 3")
    *batch, h, length, e = q.shape
    kvh, s_len = k.shape[-3], k.shape[-2]
    ev = v.shape[-1]
    if h % kvh:
        raise lw.fail(f"attention with {h} query heads and {kvh} key/value heads")
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(e) if scale is None else float(scale)
    em = lw.em
    qs = lw.binary("mul", q, scale)
    g = h // kvh
    lead = tuple(batch)
    qg = reshape_view(em, as_view(em, qs), lead + (kvh, g, length, e))
    kg = reshape_view(em, k, lead + (kvh, 1, s_len, e))
    vg = reshape_view(em, v, lead + (kvh, 1, s_len, ev))
    scores = lw.matmul(qg, lw.swap_last(kg))
    scores = reshape_view(em, scores, lead + (h, length, s_len))
    mask = a.get("attn_mask")
    if mask is not None:
        scores = lw.binary("add", scores, _additive_mask(lw, mask))
    if a.get("is_causal"):
        causal = np.triu(np.full((length, s_len), -MASK_VALUE, np.float32), k=1)
        scores = lw.binary("add", scores, Const(_torch_tensor(causal)))
    p = lower_softmax(lw, {"self": scores, "dim": -1})
    pg = reshape_view(em, as_view(em, p), lead + (kvh, g, length, s_len))
    out_t = lw.matmul(lw.swap_last(vg), lw.swap_last(pg))  # [.., KV, G, Ev, L]
    out = lw.swap_last(as_view(em, out_t))
    return reshape_view(em, out, lead + (h, length, ev))


def _torch_tensor(arr: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.ascontiguousarray(arr))


def _additive_mask(lw: Lowering, m: Any) -> Any:
    """A boolean mask as 0 (attend) / -1e4 (masked); float masks as they are."""
    if kind_of(m) == "bool":
        if isinstance(m, Const):
            arr = np.where(m.numpy().astype(bool), 0.0, -MASK_VALUE).astype(np.float32)
            return Const(_torch_tensor(arr))
        return lw.binary("mul", lw.binary("sub", m, 1.0, "float"), MASK_VALUE, "float")
    return m


# ---- host work at the outputs ---------------------------------------------------

group("host (at the outputs)")


def _host(lw: Lowering, x: Any, op: str, **params: Any) -> HostValue:
    if isinstance(x, HostValue):
        src = x
        return src.then({"op": op, **params}, _host_shape(shape_of(x), op, params))
    source = lw.host_source(x)
    from anec.frontends.fx import node_location

    hv = HostValue(source, [], shape_of(x), "float32", node_location(lw.node))
    return hv.then({"op": op, **params}, _host_shape(shape_of(x), op, params),
                   "int64" if op in ("argmax", "argmin", "multinomial") else "float32")


def _host_shape(s: tuple[int, ...], op: str, p: dict) -> tuple[int, ...]:
    if not s and op in ("argmax", "argmin", "topk_values", "topk_indices"):
        return ()  # a 0-d tensor: its only dim (0 or -1) is the tensor itself
    if op in ("argmax", "argmin"):
        if p.get("dim") is None:
            return (1,) * len(s) if p.get("keepdim") else ()
        d = p["dim"] % len(s)
        return tuple(1 if i == d else n for i, n in enumerate(s)) if p.get("keepdim") else \
            tuple(n for i, n in enumerate(s) if i != d)
    if op in ("topk_values", "topk_indices"):
        d = p["dim"] % len(s)
        return tuple(p["k"] if i == d else n for i, n in enumerate(s))
    if op == "multinomial":
        return s[:-1] + (p["num_samples"],)
    return s


@aten("argmax.default", ir="host: numpy argmax of a program output")
def lower_argmax(lw: Lowering, a: dict) -> Any:
    return _host(lw, a["self"], "argmax", dim=a.get("dim"), keepdim=bool(a.get("keepdim", False)))


@aten("argmin.default", ir="host: numpy argmin of a program output")
def lower_argmin(lw: Lowering, a: dict) -> Any:
    return _host(lw, a["self"], "argmin", dim=a.get("dim"), keepdim=bool(a.get("keepdim", False)))


@aten("topk.default", ir="host: top-k values and indices of a program output")
def lower_topk(lw: Lowering, a: dict) -> Any:
    p = {"k": int(a["k"]), "dim": int(a.get("dim", -1)), "largest": bool(a.get("largest", True))}
    x, node = a["self"], lw.node
    return (Deferred(lambda: _host(lw, x, "topk_values", **p), node),
            Deferred(lambda: _host(lw, x, "topk_indices", **p), node))


@aten("multinomial.default", ir="host: sampling from a program output (probabilities)")
def lower_multinomial(lw: Lowering, a: dict) -> Any:
    if bool(a.get("replacement")) is False and int(a["num_samples"]) > 1:
        raise lw.fail("multinomial without replacement of several samples",
                      "sample one token at a time, or use replacement=True")
    return _host(lw, a["self"], "multinomial", num_samples=int(a["num_samples"]))


def rows() -> list[tuple[str, str, str]]:
    """(group, ATen op, IR) for every supported op, in registration order."""
    return [(row.group, name, row.ir) for name, row in HANDLERS.items()]


def format_table(markdown: bool = False) -> str:
    """The supported ATen ops (``anec import --ops``; the table in docs/torch.md)."""
    merged: dict[tuple[str, str, Callable], list[str]] = {}
    for name, row in HANDLERS.items():
        merged.setdefault((row.group, row.ir, row.fn), []).append(name)
    if markdown:
        lines = ["<!-- generated by `anec import --ops --markdown`; do not edit by hand -->", "",
                 "| ATen op | IR it becomes |", "|---|---|"]
        group = None
        for (g, ir, _), names in merged.items():
            if g != group:
                lines.append(f"| **{g}** | |")
                group = g
            ops = ", ".join(f"`{n}`" for n in names)
            lines.append(f"| {ops} | {ir.replace('|', chr(92) + '|')} |")
        lines.append("")
        lines.append(f"{len(HANDLERS)} ATen overloads. Any op whose operands are all constants is "
                     "folded at import time, whatever it is.")
        return "\n".join(lines) + "\n"
    out = []
    group = None
    for (g, ir, _), names in merged.items():
        if g != group:
            out.append(f"{g}:")
            group = g
        out.append(f"  {', '.join(names)}")
        out.append(f"      -> {ir}")
    return "\n".join(out) + "\n"

