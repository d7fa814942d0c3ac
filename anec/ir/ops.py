"""The op table: the one place that says what each of the 27 IR ops is.

Every op is a declarative :class:`OpDef`: its operands, its attribute schema
(kinds and defaults), the dtype domain of its data operands, a type-inference
function and reference semantics in numpy. The parser, verifier, builder,
interpreter, passes, printer and the ``anec ops`` listing all read this table,
so adding or changing an op happens here and nowhere else.

Type inference
    :func:`infer_types` checks everything that can be checked from types and
    attributes alone (operand count, attribute kinds, dtype domain, shapes) and
    returns the result types, or raises :class:`InferError` whose message is
    lowercase and specific and whose ``hint`` says how to fix it. The verifier
    turns an ``InferError`` into a ``VerifyError`` at the node's span.

Const
    ``const`` is the one op whose result type is *declared* (``: fp16[...]``)
    rather than inferred. ``infer_types("const", [], {}, attrs, declared=T)``
    validates the attributes against ``T`` (literal shape and range, ``perm``
    and ``slice`` form) and returns ``[T]``; without ``declared`` it raises.
    The const entry's ``infer`` and ``ref`` therefore take the keyword-only
    argument ``declared`` (its ``OpDef.declared_type`` is True). The values of
    *weight* consts live in a :class:`~anec.weights.WeightStore`; the
    interpreter obtains them through :func:`anec.weights.materialize`.

Reference semantics
    ``ref(operands, optional, attrs)`` takes numpy arrays and attributes with
    defaults applied, and returns a list of arrays in the dtype of the inputs.
    Float math is evaluated in float64 and rounded once to the input dtype,
    so the result is the correctly rounded value of the formula (reductions,
    matmul and conv accumulate in float64; int32 arithmetic wraps modulo 2**32
    like the hardware). The interpreter decides which precision the inputs
    have (see :mod:`anec.ir.interp`).

Semantics decisions worth knowing:

* binary ops broadcast numpy-style and require equal dtypes (no implicit
  promotion: insert a ``cast``);
* ``matmul`` needs rank >= 2 operands (a vector must be reshaped to ``[1, K]``
  or ``[K, 1]``); batch dims broadcast numpy-style; ``transpose_x`` /
  ``transpose_y`` swap the last two dims of the operand before multiplying;
* ``slice`` uses python slice semantics per dim (negative indices count from
  the end, out-of-range bounds clamp); strides must be positive and empty
  results are rejected;
* ``reduce_mean`` on int32 divides the int32 sum truncating toward zero;
  ``pow`` on int32 with a negative exponent gives ``trunc(x ** e)``
  (1 for x = 1, +-1 for x = -1, else 0);
* ``cast`` from float to an integer type truncates toward zero and saturates
  at the integer range (NaN becomes 0); casting to bool tests ``!= 0``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from anec.diagnostics import did_you_mean
from anec.ir.types import ALL_DTYPES, FLOATS, NUMERIC, DType, TensorType, parse_dtype


class _Required:
    """Sentinel default of an attribute that must be given."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self):
        return (_Required, ())


REQUIRED: Any = _Required()
"""Default of an attribute that has no default. An attribute whose default is
``None`` is optional and simply absent when not given."""


class InferError(ValueError):
    """Types or attributes that an op does not accept; carries a fix-it hint."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


ATTR_KINDS = ("int", "float", "str", "bool", "dtype", "ints", "literal")


@dataclass(frozen=True)
class OperandDef:
    """One operand slot: positional, keyword-only optional, or variadic."""

    name: str
    optional: bool = False
    variadic: bool = False


@dataclass(frozen=True)
class AttrDef:
    """One attribute: its kind (one of :data:`ATTR_KINDS`), default, choices."""

    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple | None = None
    shown_default: str | None = None
    """How an implicit default is described when it depends on the operand
    (``slice`` ``stride`` defaults to ones of the operand's rank)."""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


InferFn = Callable[..., list[TensorType]]
RefFn = Callable[..., list[np.ndarray]]


@dataclass(frozen=True)
class OpDef:
    """The declarative description of one op."""

    name: str
    operands: tuple[OperandDef, ...]
    attrs: tuple[AttrDef, ...]
    dtypes: frozenset[DType]
    """Domain of the data operands (for const: of the declared type)."""
    infer: InferFn
    ref: RefFn
    doc: str
    declared_type: bool = False
    """True for const: the result type is declared, not inferred."""
    attr_index: dict[str, AttrDef] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attr_index", {a.name: a for a in self.attrs})

    @property
    def positional(self) -> tuple[OperandDef, ...]:
        return tuple(o for o in self.operands if not o.optional)

    @property
    def optional_operands(self) -> tuple[OperandDef, ...]:
        return tuple(o for o in self.operands if o.optional)

    @property
    def variadic(self) -> bool:
        return any(o.variadic for o in self.operands)

    def signature(self) -> str:
        """``conv1x1(x, w, bias=?)``-style summary of the operands."""
        parts = []
        for o in self.operands:
            if o.variadic:
                parts.append(f"{o.name}1, {o.name}2, ...")
            elif o.optional:
                parts.append(f"{o.name}=?")
            else:
                parts.append(o.name)
        return f"{self.name}({', '.join(parts)})"


# ---------------------------------------------------------------------------
# attribute validation


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _beyond_float(v: Any) -> bool:
    """An integer literal no float64 holds (``float(v)`` would overflow)."""
    if not isinstance(v, int) or isinstance(v, bool):
        return False
    try:
        float(v)
    except OverflowError:
        return True
    return False


def _digits(v: int) -> str:
    """A huge integer for a message: its first digits and its length."""
    digits = str(abs(v))
    sign = "-" if v < 0 else ""
    return f"{sign}{digits}" if len(digits) <= 24 else f"{sign}{digits[:12]}... ({len(digits)} digits)"


def _is_literal(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return all(_is_literal(x) for x in v)
    return _is_number(v) or isinstance(v, (bool, np.bool_))


_KIND_TEXT = {
    "int": "an int",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "dtype": "a dtype (fp16, fp32, int32, bool, int8, uint8)",
    "ints": "a list of ints",
    "literal": "a number or a (nested) list of numbers",
}


def _kind_ok(kind: str, v: Any) -> bool:
    if kind == "int":
        return _is_int(v)
    if kind == "float":
        return _is_number(v) and not _beyond_float(v)
    if kind == "str":
        return isinstance(v, str)
    if kind == "bool":
        return isinstance(v, (bool, np.bool_))
    if kind == "dtype":
        return isinstance(v, DType) or (isinstance(v, str) and parse_dtype(v) is not None)
    if kind == "ints":
        return isinstance(v, (list, tuple)) and all(_is_int(x) for x in v)
    if kind == "literal":
        return _is_literal(v)
    raise ValueError(f"unknown attribute kind {kind!r}")


def _show(v: Any) -> str:
    """An attribute value as written in the IR."""
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return str(v)


def check_attrs(opdef: OpDef, attrs: Mapping[str, Any]) -> None:
    """Unknown, missing, mistyped or out-of-choice attributes raise InferError."""
    for key, val in attrs.items():
        adef = opdef.attr_index.get(key)
        if adef is None:
            known = [a.name for a in opdef.attrs]
            hint = did_you_mean(key, known) or (
                f"{opdef.name} takes: {', '.join(known)}" if known else f"{opdef.name} takes no attributes"
            )
            raise InferError(f"{opdef.name} has no attribute '{key}'", hint)
        if not _kind_ok(adef.kind, val):
            if adef.kind == "float" and _beyond_float(val):
                raise InferError(
                    f"attribute '{key}' of {opdef.name} is {_digits(val)}, beyond the float range",
                    "write inf (or -inf) for an infinite value",
                )
            raise InferError(
                f"attribute '{key}' of {opdef.name} must be {_KIND_TEXT[adef.kind]}, got {_show(val)}"
            )
        if adef.choices is not None and val not in adef.choices:
            opts = ", ".join(_show(c) for c in adef.choices)
            hint = did_you_mean(str(val), [str(c) for c in adef.choices]) if isinstance(val, str) else None
            raise InferError(
                f"attribute '{key}' of {opdef.name} must be one of {opts}, got {_show(val)}", hint
            )
    for adef in opdef.attrs:
        if adef.required and adef.name not in attrs:
            raise InferError(
                f"{opdef.name} requires attribute '{adef.name}'",
                f"write {opdef.name}(..., {adef.name}=<{adef.kind}>)",
            )


def with_defaults(op: str, attrs: Mapping[str, Any]) -> dict:
    """``attrs`` plus the defaults of the attributes not given.

    Optional attributes without a default (``default=None``) stay absent.
    ``dtype`` attributes given as strings become :class:`DType`.
    """
    opdef = get_op(op)
    out = dict(attrs)
    for adef in opdef.attrs:
        if adef.name not in out and adef.default is not REQUIRED and adef.default is not None:
            d = adef.default
            out[adef.name] = list(d) if isinstance(d, tuple) else d
    for adef in opdef.attrs:
        if adef.kind == "dtype" and isinstance(out.get(adef.name), str):
            out[adef.name] = DType(out[adef.name])
    return out


# ---------------------------------------------------------------------------
# shape helpers


def _dims(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _axis(op: str, what: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        valid = f"{-rank}..{rank - 1}" if rank else "none: the operand is a scalar"
        raise InferError(f"{op} {what} {axis} is out of range for rank {rank} (valid: {valid})")
    return axis % rank


def broadcast_shapes(op: str, a: Sequence[int], b: Sequence[int], what: str = "operands") -> tuple[int, ...]:
    """numpy broadcasting of two shapes, or an InferError naming the clash."""
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for i, (x, y) in enumerate(zip(pa, pb)):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise InferError(
                f"{op} {what} do not broadcast: {_dims(a)} vs {_dims(b)} (dim {i}: {x} vs {y})",
                "broadcast dims must be equal or 1, aligned from the right; reshape one operand",
            )
    return tuple(out)


def _same_dtype(op: str, types: Sequence[TensorType], what: str = "operands") -> DType:
    first = types[0].dtype
    for t in types[1:]:
        if t.dtype != first:
            raise InferError(
                f"{op} {what} have different dtypes: {first} vs {t.dtype}",
                f"insert a cast so both are the same, e.g. cast(..., dtype={first})",
            )
    return first


def _check_dtype(op: OpDef, t: TensorType, role: str) -> None:
    if t.dtype not in op.dtypes:
        accepted = ", ".join(d.value for d in DType if d in op.dtypes)
        hint = None
        if op.dtypes <= FLOATS or DType.fp16 in op.dtypes:
            hint = f"cast the {role} first, e.g. cast(..., dtype=fp16)"
        raise InferError(f"{op.name} does not accept {t.dtype} {role}s (accepts {accepted})", hint)


# ---------------------------------------------------------------------------
# float helpers for reference semantics

_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """Elementwise erf in float64 (``math.erf``: correctly rounded to ~1 ulp)."""
    x64 = np.asarray(x, dtype=np.float64)
    return np.asarray(_erf(x64), dtype=np.float64).reshape(x64.shape)


def _f64(fn: Callable[..., np.ndarray]) -> RefFn:
    """Wrap a float formula: evaluate in float64, round once to the input dtype."""

    def ref(operands, optional, attrs):
        x = operands[0]
        out = fn(*[np.asarray(o, dtype=np.float64) for o in operands], **attrs)
        return [np.asarray(out).astype(x.dtype, copy=False)]

    ref.__name__ = fn.__name__
    ref.__doc__ = fn.__doc__
    return ref


def _arith(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> RefFn:
    """Binary arithmetic: floats in float64, ints in int64 wrapped to int32."""

    def ref(operands, optional, attrs):
        x, y = operands
        if x.dtype.kind == "f":
            out = fn(x.astype(np.float64), y.astype(np.float64))
        else:
            out = fn(x.astype(np.int64), y.astype(np.int64))
        return [np.asarray(out).astype(x.dtype)]

    return ref


def _int_pow(x: np.ndarray, e: np.ndarray) -> np.ndarray:
    x, e = np.broadcast_arrays(x.astype(np.int64), e.astype(np.int64))
    pos = np.power(x, np.maximum(e, 0))  # wraps modulo 2**64, then to int32 below
    neg = np.where(x == 1, 1, np.where(x == -1, np.where(e % 2 == 0, 1, -1), 0))
    return np.where(e >= 0, pos, neg)


def _ref_pow(operands, optional, attrs):
    x, y = operands
    if x.dtype.kind == "f":
        out = np.power(x.astype(np.float64), y.astype(np.float64))
    else:
        out = _int_pow(x, y)
    return [np.asarray(out).astype(x.dtype)]


def _accum_dtype(dt: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dt.kind == "f" else np.dtype(np.int64)


# ---------------------------------------------------------------------------
# const


def literal_shape(value: Any) -> tuple[int, ...]:
    """The shape of a nested-list literal (``()`` for a scalar); ragged raises."""
    if not isinstance(value, (list, tuple)):
        return ()
    if not value:
        return (0,)
    inner = [literal_shape(v) for v in value]
    if any(s != inner[0] for s in inner):
        raise InferError("const value is a ragged list", "every row of a nested list needs the same length")
    return (len(value),) + inner[0]


_INT_RANGE = {DType.int32: (-(2**31), 2**31 - 1), DType.int8: (-128, 127), DType.uint8: (0, 255)}


def const_literal(value: Any, type: TensorType) -> np.ndarray:
    """The array a ``const(value=...) : type`` holds (validated).

    A scalar literal fills the whole declared shape; a nested list must have
    exactly the declared shape. Float literals are rounded to the dtype
    (values outside the fp16 range become inf: legalize reports them).
    """
    if not _is_literal(value):
        raise InferError(f"const value must be {_KIND_TEXT['literal']}, got {_show(value)}")
    shape = literal_shape(value)
    if shape != () and shape != type.shape:
        raise InferError(
            f"const value has shape {_dims(shape)} but the declared type is {type}",
            "give a scalar (it fills the shape) or a nested list of exactly the declared shape",
        )
    flat = np.asarray(value, dtype=object).reshape(-1)
    dt = type.dtype
    if dt.is_float:
        for v in flat:
            if isinstance(v, (bool, np.bool_)):
                raise InferError(f"const value {_show(v)} is not a number for a {dt} const")
            if _beyond_float(v):
                raise InferError(
                    f"const value {_digits(v)} is beyond the float range",
                    "write inf (or -inf) for an infinite value",
                )
        with np.errstate(over="ignore"):
            arr = np.asarray(value, dtype=np.float64).astype(dt.np)
    elif dt == DType.bool:
        for v in flat:
            if not (isinstance(v, (bool, np.bool_)) or (_is_int(v) and v in (0, 1))):
                raise InferError(f"const value {_show(v)} is not a bool", "write true or false")
        arr = np.asarray(value, dtype=object).astype(bool)
    else:
        lo, hi = _INT_RANGE[dt]
        for v in flat:
            if not _is_int(v):
                raise InferError(f"const value {_show(v)} is not an integer for a {dt} const")
            if not lo <= int(v) <= hi:
                raise InferError(f"const value {v} is out of range for {dt} ({lo}..{hi})")
        arr = np.asarray(value, dtype=np.int64).astype(dt.np)
    return np.broadcast_to(arr, type.shape).copy() if shape == () else arr.reshape(type.shape)


def _infer_const(operands, optional, attrs, *, declared: TensorType | None) -> list[TensorType]:
    if declared is None:
        raise InferError("const needs a declared type", "write const(...) : fp16[...] with the type")
    has_w, has_v = "weight" in attrs, "value" in attrs
    if has_w == has_v:
        raise InferError(
            "const needs exactly one of weight= or value=",
            'weight="key" names a checkpoint tensor, value=<literal> an inline constant',
        )
    if has_v:
        for k in ("perm", "slice"):
            if k in attrs:
                raise InferError(f"const attribute '{k}' applies to weight consts only")
        const_literal(attrs["value"], declared)
        return [declared]
    if not attrs["weight"]:
        raise InferError("const weight key is empty")
    perm = attrs.get("perm")
    if perm is not None and sorted(perm) != list(range(len(perm))):
        raise InferError(
            f"const perm {_dims(perm)} is not a permutation of 0..{len(perm) - 1}",
            "perm lists every axis of the stored tensor exactly once",
        )
    sl = attrs.get("slice")
    if sl is not None:
        if len(sl) != 3:
            raise InferError(f"const slice must be [axis, start, stop], got {_dims(sl)}")
        axis, start, stop = sl
        if axis < 0 or (perm is not None and axis >= len(perm)):
            raise InferError(f"const slice axis {axis} is out of range")
        if not 0 <= start < stop:
            raise InferError(f"const slice [{axis}, {start}, {stop}] needs 0 <= start < stop")
    return [declared]


def _ref_const(operands, optional, attrs, *, declared: TensorType, store=None) -> list[np.ndarray]:
    """Value consts build their literal; weight consts read ``store`` (a WeightStore)."""
    if "value" in attrs:
        return [const_literal(attrs["value"], declared)]
    from anec.weights import materialize_attrs

    return [materialize_attrs(attrs, declared, store)]


# ---------------------------------------------------------------------------
# per-op inference


def _infer_same(operands, optional, attrs):
    return [operands[0]]


def _infer_cast(operands, optional, attrs):
    return [operands[0].with_dtype(DType(attrs["dtype"]))]


def _infer_conv1x1(operands, optional, attrs):
    x, w = operands
    if x.rank != 4:
        raise InferError(
            f"conv1x1 input must be rank 4 [N, Cin, H, W], got {x}",
            "reshape activations to the ANE layout [1, C, 1, S]",
        )
    if w.rank != 4 or w.shape[2:] != (1, 1):
        raise InferError(
            f"conv1x1 weight must be [Cout, Cin, 1, 1], got {w}",
            "a 2-D [Cout, Cin] matrix can be declared as [Cout, Cin, 1, 1] with the same data",
        )
    if w.shape[1] != x.shape[1]:
        raise InferError(
            f"conv1x1 input channels differ: input has {x.shape[1]}, weight expects {w.shape[1]}",
            "the weight is [Cout, Cin, 1, 1]; Cin must equal dim 1 of the input",
        )
    _same_dtype("conv1x1", [x, w], "input and weight")
    cout = w.shape[0]
    bias = optional.get("bias")
    if bias is not None:
        if bias.shape != (1, cout, 1, 1):
            raise InferError(
                f"conv1x1 bias must be [1, {cout}, 1, 1], got {bias}",
                "declare the bias as [1, Cout, 1, 1] (the same data as a [Cout] vector)",
            )
        _same_dtype("conv1x1", [x, bias], "input and bias")
    return [TensorType(x.dtype, (x.shape[0], cout) + x.shape[2:])]


def _infer_matmul(operands, optional, attrs):
    x, y = operands
    for name, t in (("x", x), ("y", y)):
        if t.rank < 2:
            raise InferError(
                f"matmul operands must have rank >= 2, got {name}: {t}",
                "reshape a vector to [1, K] (a row) or [K, 1] (a column)",
            )
    _same_dtype("matmul", [x, y])
    m, kx = x.shape[-2:]
    if attrs["transpose_x"]:
        m, kx = kx, m
    ky, n = y.shape[-2:]
    if attrs["transpose_y"]:
        ky, n = n, ky
    if kx != ky:
        raise InferError(
            f"matmul inner dimensions differ: {kx} vs {ky}",
            f"x is {x}, y is {y} (transpose_x={_show(attrs['transpose_x'])}, "
            f"transpose_y={_show(attrs['transpose_y'])}); check the transpose flags",
        )
    batch = broadcast_shapes("matmul", x.shape[:-2], y.shape[:-2], "batch dimensions")
    return [TensorType(x.dtype, batch + (m, n))]


def _infer_binary(op: str) -> InferFn:
    def infer(operands, optional, attrs):
        x, y = operands
        dt = _same_dtype(op, [x, y])
        return [TensorType(dt, broadcast_shapes(op, x.shape, y.shape))]

    return infer


def _infer_softmax(operands, optional, attrs):
    x = operands[0]
    _axis("softmax", "axis", attrs["axis"], x.rank)
    return [x]


def _reduce_axes(op: str, axes: Sequence[int], rank: int) -> list[int]:
    if not axes:
        raise InferError(f"{op} axes must not be empty", "list the axes to reduce, e.g. axes=[1]")
    norm = [_axis(op, "axis", a, rank) for a in axes]
    if len(set(norm)) != len(norm):
        raise InferError(f"{op} axes {_dims(axes)} name the same axis twice")
    return norm


def _infer_reduce(op: str) -> InferFn:
    def infer(operands, optional, attrs):
        x = operands[0]
        axes = _reduce_axes(op, attrs["axes"], x.rank)
        if attrs["keep_dims"]:
            shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        else:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return [x.with_shape(shape)]

    return infer


def _reshape_target(x: TensorType, shape: Sequence[int]) -> tuple[int, ...]:
    if shape.count(-1) > 1:
        raise InferError(f"reshape shape {_dims(shape)} has more than one -1", "at most one dim may be -1")
    for d in shape:
        if d == 0 or d < -1:
            raise InferError(f"reshape shape {_dims(shape)} has an invalid dim {d}", "dims are positive or -1")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if x.numel % known:
            raise InferError(
                f"reshape cannot infer -1: {x.numel} elements of {x} are not divisible by {known}"
            )
        return tuple(x.numel // known if d == -1 else d for d in shape)
    if known != x.numel:
        raise InferError(
            f"reshape changes the element count: {x} has {x.numel}, shape {_dims(shape)} has {known}",
            "the product of the new dims must equal the old one",
        )
    return tuple(shape)


def _infer_reshape(operands, optional, attrs):
    x = operands[0]
    return [x.with_shape(_reshape_target(x, list(attrs["shape"])))]


def _check_perm(op: str, perm: Sequence[int], rank: int) -> None:
    if sorted(perm) != list(range(rank)):
        raise InferError(
            f"{op} perm {_dims(perm)} is not a permutation of 0..{rank - 1}",
            f"perm lists each of the {rank} axes exactly once",
        )


def _infer_transpose(operands, optional, attrs):
    x = operands[0]
    perm = list(attrs["perm"])
    _check_perm("transpose", perm, x.rank)
    return [x.with_shape(tuple(x.shape[p] for p in perm))]


def _slice_bounds(x: TensorType, attrs: Mapping[str, Any]) -> list[slice]:
    begin, end = list(attrs["begin"]), list(attrs["end"])
    stride = list(attrs["stride"]) if attrs.get("stride") is not None else [1] * x.rank
    for name, lst in (("begin", begin), ("end", end), ("stride", stride)):
        if len(lst) != x.rank:
            raise InferError(
                f"slice {name} has {len(lst)} entries but the operand has rank {x.rank}",
                "give one entry per dim",
            )
    slices = []
    for i, (b, e, s) in enumerate(zip(begin, end, stride)):
        if s <= 0:
            raise InferError(f"slice stride must be positive, got {s} in dim {i}")
        sl = slice(b, e, s)
        if len(range(*sl.indices(x.shape[i]))) == 0:
            raise InferError(
                f"slice of dim {i} is empty: begin {b}, end {e} on size {x.shape[i]}",
                "negative indices count from the end; begin must come before end",
            )
        slices.append(sl)
    return slices


def _infer_slice(operands, optional, attrs):
    x = operands[0]
    slices = _slice_bounds(x, attrs)
    return [x.with_shape(tuple(len(range(*s.indices(d))) for s, d in zip(slices, x.shape)))]


def _infer_split(operands, optional, attrs):
    x = operands[0]
    axis = _axis("split", "axis", attrs["axis"], x.rank)
    sizes = list(attrs["sizes"])
    if not sizes:
        raise InferError("split sizes must not be empty")
    if any(s <= 0 for s in sizes):
        raise InferError(f"split sizes {_dims(sizes)} must all be positive")
    if sum(sizes) != x.shape[axis]:
        raise InferError(
            f"split sizes {_dims(sizes)} sum to {sum(sizes)} but dim {axis} of {x} is {x.shape[axis]}",
            "the sizes must add up to the split dim",
        )
    return [x.with_shape(x.shape[:axis] + (s,) + x.shape[axis + 1 :]) for s in sizes]


def _infer_pad(operands, optional, attrs):
    x = operands[0]
    if x.rank == 0:
        raise InferError("pad needs an operand of rank >= 1, got a scalar", "a scalar has nothing to pad")
    before, after = list(attrs["before"]), list(attrs["after"])
    for name, lst in (("before", before), ("after", after)):
        if len(lst) != x.rank:
            raise InferError(
                f"pad {name} has {len(lst)} entries but the operand has rank {x.rank}",
                "give one entry per dim (0 for dims not padded)",
            )
        if any(p < 0 for p in lst):
            raise InferError(f"pad {name} {_dims(lst)} has a negative entry", "use slice to crop")
    return [x.with_shape(tuple(d + b + a for d, b, a in zip(x.shape, before, after)))]


def _infer_concat(operands, optional, attrs):
    first = operands[0]
    _same_dtype("concat", operands)
    for t in operands[1:]:
        if t.rank != first.rank:
            raise InferError(f"concat operands have different ranks: {first} vs {t}")
    axis = _axis("concat", "axis", attrs["axis"], first.rank)
    for t in operands[1:]:
        for i, (a, b) in enumerate(zip(first.shape, t.shape)):
            if i != axis and a != b:
                raise InferError(
                    f"concat operands differ in dim {i}: {first} vs {t}",
                    f"only dim {axis} (the concat axis) may differ",
                )
    total = sum(t.shape[axis] for t in operands)
    return [first.with_shape(first.shape[:axis] + (total,) + first.shape[axis + 1 :])]


# ---------------------------------------------------------------------------
# per-op reference semantics


def _ref_identity(operands, optional, attrs):
    return [operands[0]]


def _ref_relu(operands, optional, attrs):
    x = operands[0]
    return [np.maximum(x, np.zeros((), x.dtype))]


def _sigmoid(x, **_):
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


GELU_TANH_C = math.sqrt(2.0 / math.pi)


def _gelu(x, mode="exact", **_):
    if mode == "tanh":
        return 0.5 * x * (1.0 + np.tanh(GELU_TANH_C * (x + 0.044715 * x**3)))
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _ref_cast(operands, optional, attrs):
    x = operands[0]
    dt = DType(attrs["dtype"])
    if dt == DType.bool:
        return [x != 0]
    if dt.is_float or x.dtype.kind in "iub":
        with np.errstate(over="ignore"):
            return [x.astype(dt.np)]
    lo, hi = _INT_RANGE[dt]
    t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=hi, neginf=lo))
    return [np.clip(t, lo, hi).astype(dt.np)]


def _ref_conv1x1(operands, optional, attrs):
    x, w = operands
    n, cin, h, wd = x.shape
    acc = _accum_dtype(x.dtype)
    w2 = w.reshape(w.shape[0], cin).astype(acc)
    y = np.matmul(w2, x.reshape(n, cin, h * wd).astype(acc)).reshape(n, w.shape[0], h, wd)
    bias = optional.get("bias")
    if bias is not None:
        y = y + bias.astype(acc)
    return [y.astype(x.dtype)]


def _ref_matmul(operands, optional, attrs):
    x, y = operands
    acc = _accum_dtype(x.dtype)
    a, b = x.astype(acc), y.astype(acc)
    if attrs["transpose_x"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_y"]:
        b = np.swapaxes(b, -1, -2)
    return [np.matmul(a, b).astype(x.dtype)]


def _softmax(x, axis=-1, **_):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _ref_reduce(kind: str) -> RefFn:
    def ref(operands, optional, attrs):
        x = operands[0]
        axes = tuple(a % x.ndim for a in attrs["axes"])
        keep = bool(attrs["keep_dims"])
        if kind == "max":
            return [np.max(x, axis=axes, keepdims=keep).astype(x.dtype)]
        acc = _accum_dtype(x.dtype)
        s = np.sum(x.astype(acc), axis=axes, keepdims=keep)
        if kind == "mean":
            count = math.prod(x.shape[a] for a in axes)
            if x.dtype.kind == "f":
                s = s / count
            else:
                s = np.sign(s) * (np.abs(s) // count)
        return [np.asarray(s).astype(x.dtype)]

    return ref


def _ref_reshape(operands, optional, attrs):
    x = operands[0]
    return [x.reshape(list(attrs["shape"]))]


def _ref_transpose(operands, optional, attrs):
    return [np.transpose(operands[0], list(attrs["perm"]))]


def _ref_slice(operands, optional, attrs):
    x = operands[0]
    stride = attrs.get("stride") or [1] * x.ndim
    sl = tuple(slice(b, e, s) for b, e, s in zip(attrs["begin"], attrs["end"], stride))
    return [x[sl]]


def _ref_split(operands, optional, attrs):
    x = operands[0]
    cuts = np.cumsum(list(attrs["sizes"]))[:-1]
    return list(np.split(x, cuts, axis=attrs["axis"]))


def _ref_pad(operands, optional, attrs):
    x = operands[0]
    widths = list(zip(attrs["before"], attrs["after"]))
    return [np.pad(x, widths, mode="constant", constant_values=np.asarray(attrs["value"]).astype(x.dtype))]


def _ref_concat(operands, optional, attrs):
    return [np.concatenate(operands, axis=attrs["axis"])]


# ---------------------------------------------------------------------------
# the table

_X = (OperandDef("x"),)
_XY = (OperandDef("x"), OperandDef("y"))
SPLIT_DTYPES = frozenset({DType.fp16, DType.fp32, DType.int32, DType.bool})


def _unary(name: str, fn: Callable, doc: str, attrs: tuple[AttrDef, ...] = ()) -> OpDef:
    return OpDef(name, _X, attrs, FLOATS, _infer_same, _f64(fn), doc)


_TABLE: list[OpDef] = [
    OpDef(
        "const", (), (
            AttrDef("weight", "str", None),
            AttrDef("value", "literal", None),
            AttrDef("perm", "ints", None),
            AttrDef("slice", "ints", None),
        ),
        ALL_DTYPES, _infer_const, _ref_const,
        "a checkpoint tensor (weight=) or an inline literal (value=); the : type is required",
        declared_type=True,
    ),
    OpDef("identity", _X, (), ALL_DTYPES, _infer_same, _ref_identity, "x unchanged"),
    _unary("neg", lambda x, **_: -x, "-x"),
    _unary("exp", lambda x, **_: np.exp(x), "e ** x"),
    _unary("sqrt", lambda x, **_: np.sqrt(x), "square root (NaN below 0)"),
    _unary("rsqrt", lambda x, **_: 1.0 / np.sqrt(x), "1 / sqrt(x)"),
    OpDef("relu", _X, (), FLOATS, _infer_same, _ref_relu, "max(x, 0)"),
    _unary("tanh", lambda x, **_: np.tanh(x), "hyperbolic tangent"),
    _unary("sigmoid", _sigmoid, "1 / (1 + e ** -x)"),
    _unary(
        "gelu", _gelu,
        "x * Phi(x) with erf (exact) or the tanh approximation",
        (AttrDef("mode", "str", "exact", ("exact", "tanh")),),
    ),
    OpDef(
        "cast", _X, (AttrDef("dtype", "dtype"),), ALL_DTYPES, _infer_cast, _ref_cast,
        "convert to dtype (float to int truncates and saturates)",
    ),
    OpDef(
        "conv1x1", (OperandDef("x"), OperandDef("w"), OperandDef("bias", optional=True)), (),
        FLOATS, _infer_conv1x1, _ref_conv1x1,
        "1x1 convolution: x [N,Cin,H,W], w [Cout,Cin,1,1], bias [1,Cout,1,1]",
    ),
    OpDef(
        "matmul", _XY,
        (AttrDef("transpose_x", "bool", False), AttrDef("transpose_y", "bool", False)),
        NUMERIC, _infer_matmul, _ref_matmul,
        "batched matrix product over the last two dims; batch dims broadcast",
    ),
    OpDef("add", _XY, (), NUMERIC, _infer_binary("add"), _arith(np.add), "x + y (broadcast)"),
    OpDef("sub", _XY, (), NUMERIC, _infer_binary("sub"), _arith(np.subtract), "x - y (broadcast)"),
    OpDef("mul", _XY, (), NUMERIC, _infer_binary("mul"), _arith(np.multiply), "x * y (broadcast)"),
    OpDef("pow", _XY, (), NUMERIC, _infer_binary("pow"), _ref_pow, "x ** y (broadcast)"),
    OpDef(
        "softmax", _X, (AttrDef("axis", "int", -1),), FLOATS, _infer_softmax, _f64(_softmax),
        "exp(x - max) / sum over axis",
    ),
    *[
        OpDef(
            f"reduce_{k}", _X, (AttrDef("axes", "ints"), AttrDef("keep_dims", "bool", False)),
            NUMERIC, _infer_reduce(f"reduce_{k}"), _ref_reduce(k), f"{k} over axes",
        )
        for k in ("sum", "mean", "max")
    ],
    OpDef(
        "reshape", _X, (AttrDef("shape", "ints"),), ALL_DTYPES, _infer_reshape, _ref_reshape,
        "same elements, new shape (one dim may be -1)",
    ),
    OpDef(
        "transpose", _X, (AttrDef("perm", "ints"),), ALL_DTYPES, _infer_transpose, _ref_transpose,
        "permute dims: result dim i is x dim perm[i]",
    ),
    OpDef(
        "slice", _X,
        (AttrDef("begin", "ints"), AttrDef("end", "ints"), AttrDef("stride", "ints", None, shown_default="[1, ...]")),
        ALL_DTYPES, _infer_slice, _ref_slice,
        "python slicing per dim (negative indices, clamping; positive strides)",
    ),
    OpDef(
        "split", _X, (AttrDef("axis", "int"), AttrDef("sizes", "ints")), SPLIT_DTYPES,
        _infer_split, _ref_split, "one result per size along axis",
    ),
    OpDef(
        "pad", _X,
        (AttrDef("before", "ints"), AttrDef("after", "ints"), AttrDef("value", "float", 0.0)),
        FLOATS, _infer_pad, _ref_pad, "constant padding before/after each dim",
    ),
    OpDef(
        "concat", (OperandDef("x", variadic=True),), (AttrDef("axis", "int"),), ALL_DTYPES,
        _infer_concat, _ref_concat, "join two or more tensors along axis",
    ),
]

OPS: dict[str, OpDef] = {o.name: o for o in _TABLE}
"""Every op of the IR, in documentation order."""

UNARY = frozenset({"identity", "neg", "exp", "sqrt", "rsqrt", "relu", "tanh", "sigmoid", "gelu"})
"""One operand, result of the operand's type, elementwise."""
BINARY = frozenset({"add", "sub", "mul", "pow"})
"""Two operands, numpy broadcasting, same dtype."""
ELEMENTWISE = UNARY | BINARY | {"cast"}
REDUCTIONS = frozenset({"reduce_sum", "reduce_mean", "reduce_max"})
LINEAR = frozenset({"conv1x1", "matmul"})
"""Ops whose cost is a contraction (MACs)."""
SHAPE_OPS = frozenset({"reshape", "transpose", "slice", "split", "pad", "concat"})
"""Data movement: no arithmetic on values (pad writes a constant)."""
MULTI_RESULT = frozenset({"split"})
NOT_ON_ANE = frozenset({"gelu", "rsqrt", "concat", "neg"})
"""Legal in the IR, rejected by the ANE: legalize rewrites them (also conv1x1 bias=)."""

assert len(OPS) == 27


def get_op(op: str) -> OpDef:
    """The OpDef of ``op``, or InferError with a did-you-mean hint."""
    opdef = OPS.get(op)
    if opdef is None:
        raise InferError(f"unknown op '{op}'", did_you_mean(op, OPS) or "run `anec ops` to list the ops")
    return opdef


def infer_types(
    op: str,
    operand_types: Sequence[TensorType],
    optional_types: Mapping[str, TensorType],
    attrs: Mapping[str, Any],
    *,
    declared: TensorType | None = None,
) -> list[TensorType]:
    """Result types of ``op`` applied to these operand types and attributes.

    Checks operand count, optional operand names, attribute schema, the dtype
    domain and the op's shape rules. ``declared`` is the written ``: type``
    and is used by ``const`` only (whose type cannot be inferred).
    Raises :class:`InferError`.
    """
    opdef = get_op(op)
    operand_types = list(operand_types)
    positional = opdef.positional
    if opdef.variadic:
        if len(operand_types) < 2:
            raise InferError(
                f"{op} takes at least 2 operands, got {len(operand_types)}",
                "use identity for a single tensor" if operand_types else None,
            )
    elif len(operand_types) != len(positional):
        names = ", ".join(o.name for o in positional) or "none"
        raise InferError(
            f"{op} takes {len(positional)} operand{'s' if len(positional) != 1 else ''}, "
            f"got {len(operand_types)}",
            f"operands: {names}",
        )
    opt_names = [o.name for o in opdef.optional_operands]
    for key in optional_types:
        if key not in opt_names:
            hint = did_you_mean(key, opt_names) or (
                f"optional operands: {', '.join(opt_names)}" if opt_names else None
            )
            raise InferError(f"{op} has no optional operand '{key}'", hint)
    check_attrs(opdef, attrs)
    full = with_defaults(op, attrs)
    if opdef.declared_type:
        if declared is not None:
            _check_dtype(opdef, declared, "result")
        return list(opdef.infer(operand_types, dict(optional_types), full, declared=declared))
    for t in operand_types:
        _check_dtype(opdef, t, "operand")
    for key, t in optional_types.items():
        _check_dtype(opdef, t, f"{key} operand")
    return list(opdef.infer(operand_types, dict(optional_types), full))


def evaluate(
    op: str,
    operands: Sequence[np.ndarray],
    optional: Mapping[str, np.ndarray],
    attrs: Mapping[str, Any],
) -> list[np.ndarray]:
    """Apply the reference semantics of ``op`` (defaults filled in for you)."""
    return list(get_op(op).ref(list(operands), dict(optional), with_defaults(op, attrs)))


# ---------------------------------------------------------------------------
# listing (``anec ops``)


def _attr_text(a: AttrDef) -> str:
    if a.required:
        return a.name
    if a.shown_default is not None:
        return f"{a.name}={a.shown_default}"
    if a.default is None:
        return f"{a.name}=?"
    return f"{a.name}={_show(a.default)}"


def _dtypes_text(op: OpDef) -> str:
    if op.dtypes == ALL_DTYPES:
        return "all"
    return ",".join(d.value for d in DType if d in op.dtypes)


def op_rows() -> list[tuple[str, str, str, str, str]]:
    """(op, operands, attributes, dtypes, doc) for each op, in table order."""
    rows = []
    for op in OPS.values():
        operands = op.signature()[len(op.name) + 1 : -1] or "-"
        attrs = ", ".join(_attr_text(a) for a in op.attrs) or "-"
        rows.append((op.name, operands, attrs, _dtypes_text(op), op.doc))
    return rows


def format_table(markdown: bool = False) -> str:
    """The op table as aligned text, or as a markdown page (``docs/ops.md``)."""
    header = ("op", "operands", "attributes", "dtypes", "meaning")
    rows = op_rows()
    if markdown:
        def esc(s: str) -> str:
            return s.replace("|", "\\|")

        lines = [
            "# The anec ops",
            "",
            "<!-- generated by `anec ops --markdown`; do not edit by hand -->",
            "",
            "Operands marked `=?` are optional keyword operands; attributes without a",
            "default are required, `=?` marks an optional attribute with no default.",
            "Binary ops broadcast numpy-style and need equal dtypes. `const` takes its",
            "type from the written `: type`. The semantics behind each line are the",
            "numpy reference in `anec/ir/ops.py`.",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        for r in rows:
            cells = [f"`{r[0]}`", esc(r[1]), f"`{esc(r[2])}`" if r[2] != "-" else "-", r[3], esc(r[4])]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
    lines = []
    for r in [header, *rows]:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return "\n".join(line.rstrip() for line in lines) + "\n"
