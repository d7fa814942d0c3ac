"""Logical torch tensors held in physical IR values, and the emitter that builds them.

The importer keeps every activation in the layout that suits the ANE and
records how the tensor PyTorch means (the *logical* tensor, torch's shape)
sits in it. A :class:`View` is a physical IR value ``phys`` plus

``order``
    the axes of ``phys`` whose size is not 1, outermost first, in the order
    the logical tensor walks them;
``shape``
    the logical (torch) shape.

so that ``logical = reshape(transpose(phys, order + unit axes), shape)``. The
invariant: every logical dim of size > 1 is a run of consecutive ``order``
entries (its *group*), never a part of one physical axis. Then

* ``permute`` reorders groups and ``view``/``reshape``/``unsqueeze`` change
  ``shape``: no IR at all (a reshape of ``phys`` only when a logical dim
  splits a physical axis, e.g. channels into heads);
* elementwise ops, reductions over whole groups, softmax and slices along a
  one-axis group apply to ``phys`` directly;
* a linear layer wants channels in dim 1 (:func:`to_channels`): a reshape
  when ``phys`` already is channel-major, else one transpose;
* anything else :func:`materialize` s the logical tensor (one transpose when
  ``order`` is not ascending, plus a reshape).

Transposes are the only data movement layouts cost; :class:`Emitter` counts
them (``stats``) with the bytes they move. The emitter also folds layout ops
as it builds (``reshape(reshape(x))``, ``transpose(transpose(x))``, a
transpose that only moves unit axes is a reshape, identities vanish) and
reuses identical nodes (CSE), so layout conversions requested twice cost once.

The linear layers' outputs are *channel views*: ``phys = [1, C, 1, M]`` with
``M`` the product of the leading logical dims (``[B, S, C]`` -> ``[1, C, 1,
B*S]``), the ANE layout the hand-written frontends use.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from anec.diagnostics import Span
from anec.ir.builder import Builder
from anec.ir.nodes import Value
from anec.ir.types import DType, TensorType

MAX_PHYS_RANK = 4
"""Unit axes of a physical value are dropped (one reshape) beyond this rank."""

INLINE_MAX = 1024
"""Constants up to this many elements are inline literals (``const(value=...)``),
which do not count against the program's BLOBFILE budget; larger ones are weights."""

MASK_VALUE = 1e4
"""Magnitude that replaces -inf / finfo.min in constants (masks): fp16 cannot
hold them, and -inf - -inf is NaN. exp(-1e4) underflows to 0 like exp(-inf)."""

SENTINEL = 1e30
"""Constants at or beyond this magnitude (or infinite) are masking sentinels."""

FP16_MAX = 65504.0



# ---------------------------------------------------------------------------
# the emitter


def _freeze(obj: Any) -> Any:
    if isinstance(obj, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return tuple(_freeze(v) for v in obj)
    if isinstance(obj, float):
        return ("f", obj)
    if isinstance(obj, bool):
        return ("b", obj)
    return obj


def _sanitize(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "v"
    return out if not out[0].isdigit() else "v" + out


class Emitter:
    """Appends ops to one func through a :class:`Builder`, folding layout ops.

    ``hint`` (the FX node being lowered) names new values; ``span`` (its
    Python source line) becomes their span. ``reserved`` names (the func's
    outputs) are never given to internal values.
    """

    def __init__(self, name: str, reserved: Iterable[str] = ()) -> None:
        self.builder = Builder(name)
        self.graph = self.builder.graph
        self.reserved = set(reserved)
        self.hint = "v"
        self.span: Span | None = None
        self._cse: dict[tuple, Value] = {}
        self._pinned: set[int] = set()
        """Values of statements emitted with ``cse=False``: layout folding never looks through
        them (a canonical form keeps its own reshapes and transposes)."""
        self.materialized: dict[tuple, Value] = {}
        """(id(phys), order, shape) -> the value holding that logical tensor as it is."""
        self.stats: Counter[str] = Counter()
        """``transposes`` and ``transpose_bytes`` (fp16 elements moved x 2), ``reshapes``."""

    # ---- names and bookkeeping -------------------------------------------
    def fresh(self, suffix: str | None = None) -> str:
        base = _sanitize(self.hint if not suffix else f"{self.hint}_{suffix}")
        return self.graph.fresh_name(base, exclude=self.reserved)

    def _mark(self, v: Value) -> None:
        node = v.producer
        if node is not None and node.span is None:
            node.span = self.span
            for r in node.results:
                r.span = self.span

    def input(self, name: str, type: TensorType) -> Value:
        v = self.builder.input(name, type)
        v.span = self.span
        return v

    # ---- ops ----------------------------------------------------------------
    def op(self, opname: str, *operands: Value, suffix: str | None = None, cse: bool = True,
           **kw: Any) -> Value:
        """``opname(*operands, **kw)`` (one result), reused if the same node exists already
        (``cse=False``: always a new node, which is then not offered for reuse either: the
        statements of a spatial layer's canonical form belong to that layer alone)."""
        key = (opname, tuple(id(o) for o in operands),
               _freeze({k: (id(v) if isinstance(v, Value) else v) for k, v in kw.items()}))
        hit = self._cse.get(key) if cse else None
        if hit is not None:
            return hit
        out = self.builder.op(opname, *operands, name=self.fresh(suffix), **kw)
        self._mark(out)
        if opname == "transpose":
            t = operands[0].type
            self.stats["transposes"] += 1
            self.stats["transpose_bytes"] += t.nbytes
        elif opname == "reshape":
            self.stats["reshapes"] += 1
        if cse:
            self._cse[key] = out
        else:
            self._pinned.add(id(out))
        return out

    def named(self, opname: str, name: str, *operands: Value, **kw: Any) -> Value:
        """An op whose result gets exactly ``name`` (a func output)."""
        out = self.builder.op(opname, *operands, name=name, **kw)
        self._mark(out)
        return out

    def const(self, attrs: dict, type: TensorType, suffix: str = "c", cse: bool = True) -> Value:
        key = ("const", _freeze(attrs), type)
        hit = self._cse.get(key) if cse else None
        if hit is not None:
            return hit
        if "weight" in attrs:
            extra = {k: v for k, v in attrs.items() if k != "weight"}
            name = self.graph.fresh_name(_sanitize(suffix), exclude=self.reserved)
            v = self.builder.const_weight(attrs["weight"], type, name=name, **extra)
        else:
            v = self.builder.const_value(attrs["value"], type, name=self.fresh(suffix))
        self._mark(v)
        if cse:
            self._cse[key] = v
        return v

    def scalar(self, value: float) -> Value:
        """An fp16 scalar const (sentinels clamped; see :func:`fp16_values`)."""
        v = float(fp16_values(np.asarray(value, dtype=np.float64)))
        return self.const({"value": v}, TensorType(DType.fp16, ()), suffix="c")

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        shape = tuple(int(d) for d in shape)
        if x.type.shape == shape:
            return x
        p = x.producer
        if p is not None and p.op == "reshape" and id(x) not in self._pinned:
            x = p.operands[0]
        if x.type.shape == shape:
            return x
        return self.op("reshape", x, shape=list(shape), suffix="r")

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        perm = [int(p) for p in perm]
        p = x.producer
        if p is not None and p.op == "transpose" and id(x) not in self._pinned:
            inner = list(p.attrs["perm"])
            x, perm = p.operands[0], [inner[q] for q in perm]
        shape = x.type.shape
        if perm == sorted(perm):
            return x
        moved = [i for i in perm if shape[i] != 1]
        if moved == sorted(moved):
            return self.reshape(x, [shape[i] for i in perm])
        return self.op("transpose", x, perm=perm, suffix="t")


def fp16_values(arr: np.ndarray) -> np.ndarray:
    """Float values as the device can hold them: masking sentinels (infinite, or
    at least 1e30 in magnitude: -inf, finfo.min) become +-1e4; NaN is kept."""
    a = np.asarray(arr, dtype=np.float64)
    big = np.isinf(a) | (np.abs(a) >= SENTINEL)
    if big.any():
        a = np.where(big, np.sign(a) * MASK_VALUE, a)
    return a


# ---------------------------------------------------------------------------
# views


@dataclass(frozen=True, eq=False)
class View:
    """A logical tensor of ``shape`` held in ``phys`` (see the module docstring).

    ``kind`` says what its fp16 values mean: any float, integers (exact up to
    2048), or booleans held as 0/1."""

    phys: Value
    order: tuple[int, ...]
    shape: tuple[int, ...]
    kind: str = "float"

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def groups(self) -> list[tuple[int, ...]]:
        """The physical axes of each logical dim (empty for dims of size 1)."""
        sizes = self.phys.type.shape
        out, j = [], 0
        for d in self.shape:
            if d == 1:
                out.append(())
                continue
            g, prod = [], 1
            while prod < d:
                a = self.order[j]
                j += 1
                g.append(a)
                prod *= sizes[a]
            if prod != d:  # pragma: no cover - the invariant says it cannot happen
                raise AssertionError(f"view {self} breaks the group invariant")
            out.append(tuple(g))
        return out

    def with_kind(self, kind: str) -> "View":
        return View(self.phys, self.order, self.shape, kind)

    def __repr__(self) -> str:
        return f"View(%{self.phys.name}: {self.phys.type}, order={self.order}, shape={self.shape}, {self.kind})"


@dataclass(frozen=True, eq=False)
class Expanded:
    """``torch.expand`` kept lazy: ``src`` broadcasts (right-aligned) to ``shape``.

    Binary ops broadcast ``src`` themselves; anything else materializes it
    with one broadcasting ``add`` of zeros (:func:`materialize_expanded`)."""

    src: View
    shape: tuple[int, ...]

    @property
    def kind(self) -> str:
        return self.src.kind


def ascending(seq: Sequence[int]) -> bool:
    """Whether ``seq`` strictly increases (an ``order`` that needs no transpose)."""
    return all(a < b for a, b in zip(seq, seq[1:]))


def natural(v: Value, kind: str = "float", shape: Sequence[int] | None = None) -> View:
    """A view of ``v`` as it is (``shape`` defaults to its own)."""
    shape = tuple(v.type.shape if shape is None else shape)
    if shape != v.type.shape:
        raise AssertionError("natural() needs the value's own shape")
    return View(v, tuple(i for i, d in enumerate(shape) if d != 1), shape, kind)


def _squeeze_phys(em: Emitter, phys: Value, order: tuple[int, ...]) -> tuple[Value, tuple[int, ...]]:
    """Drop unit axes (from the back) while ``phys`` is above MAX_PHYS_RANK."""
    shape = list(phys.type.shape)
    drop = set()
    for a in reversed(range(len(shape))):
        if len(shape) - len(drop) <= MAX_PHYS_RANK:
            break
        if shape[a] == 1:
            drop.add(a)
    if not drop:
        return phys, order
    keep = [a for a in range(len(shape)) if a not in drop]
    new_index = {a: i for i, a in enumerate(keep)}
    return em.reshape(phys, [shape[a] for a in keep]), tuple(new_index[a] for a in order)


def refine(em: Emitter, phys: Value, order: Sequence[int], shape: Sequence[int],
           kind: str = "float") -> View | None:
    """A view of ``logical = reshape(transpose(phys, order), shape)`` that keeps the
    invariant, splitting physical axes with a reshape where a logical dim needs
    part of one; None when the two factorizations do not refine each other."""
    order, shape = tuple(order), tuple(int(d) for d in shape)
    psizes = [phys.type.shape[a] for a in order]
    lsizes = [d for d in shape if d != 1]
    if math.prod(psizes) != math.prod(lsizes):
        raise AssertionError(f"refine: {phys.type} order {order} does not hold {shape}")
    cuts: set[int] = set()
    for sizes in (psizes, lsizes):
        c = 1
        for s in sizes:
            c *= s
            cuts.add(c)
    prev = 1
    for b in sorted(cuts):
        if b % prev:
            return None
        prev = b
    split: dict[int, list[int]] = {}
    c = 1
    for a, s in zip(order, psizes):
        lo, hi = c, c * s
        pieces, last = [], lo
        for b in sorted(x for x in cuts if lo < x <= hi):
            pieces.append(b // last)
            last = b
        split[a] = pieces
        c = hi
    if all(len(p) == 1 for p in split.values()):
        return View(phys, order, shape, kind)
    new_shape: list[int] = []
    axes_of: dict[int, list[int]] = {}
    for a, size in enumerate(phys.type.shape):
        pieces = split.get(a, [size])
        axes_of[a] = list(range(len(new_shape), len(new_shape) + len(pieces)))
        new_shape.extend(pieces)
    new_order = tuple(x for a in order for x in axes_of[a])
    p2, o2 = _squeeze_phys(em, em.reshape(phys, new_shape), new_order)
    v = View(p2, o2, shape, kind)
    return _compact(em, v) if p2.type.rank > MAX_PHYS_RANK else v


def _compact(em: Emitter, v: View) -> View:
    """Merge physical axes that one logical dim walks in a row and that are adjacent
    in ``phys`` (one reshape): splits accumulated over many views are undone."""
    sizes = list(v.phys.type.shape)
    runs: list[list[int]] = []
    for g in v.groups():
        for a in g:
            if runs and runs[-1][-1] + 1 == a and runs[-1][0] in g:
                runs[-1].append(a)
            else:
                runs.append([a])
    merge = {r[0]: r for r in runs if len(r) > 1}
    if not merge:
        return v
    new_shape: list[int] = []
    index: dict[int, int] = {}
    a = 0
    while a < len(sizes):
        index[a] = len(new_shape)
        if a in merge:
            new_shape.append(math.prod(sizes[x] for x in merge[a]))
            a = merge[a][-1] + 1
        else:
            new_shape.append(sizes[a])
            a += 1
    order = tuple(index[a] for a in v.order if a in index)
    phys, order = _squeeze_phys(em, em.reshape(v.phys, new_shape), order)
    return View(phys, order, v.shape, v.kind)


def materialize(em: Emitter, v: "View | Expanded") -> Value:
    """The logical tensor as an IR value of the logical shape."""
    if isinstance(v, Expanded):
        return materialize_expanded(em, v)
    key = (id(v.phys), v.order, v.shape)
    hit = em.materialized.get(key)
    if hit is not None:
        return hit
    if ascending(v.order):
        out = em.reshape(v.phys, v.shape)
    else:
        rank = v.phys.type.rank
        perm = list(v.order) + [a for a in range(rank) if a not in v.order]
        out = em.reshape(em.transpose(v.phys, perm), v.shape)
    em.materialized[key] = out
    return out


def materialize_expanded(em: Emitter, e: Expanded) -> Value:
    """``expand``: the source plus a zeros const that has the expanded dims (broadcast add)."""
    x = materialize(em, e.src)
    rank = len(e.shape)
    xs = (1,) * (rank - x.type.rank) + x.type.shape
    x = em.reshape(x, xs)
    zshape = [d if xd == 1 and d != 1 else 1 for xd, d in zip(xs, e.shape)]
    if math.prod(zshape) == 1:
        return em.reshape(x, e.shape)
    zeros = em.const({"value": 0.0}, TensorType(x.type.dtype, tuple(zshape)), suffix="zeros")
    return em.op("add", x, zeros, suffix="expand")


def as_view(em: Emitter, v: "View | Expanded") -> View:
    """A plain view (expansions materialized)."""
    if isinstance(v, Expanded):
        return natural(materialize_expanded(em, v), v.kind)
    return v


def reshape_view(em: Emitter, v: "View | Expanded", shape: Sequence[int]) -> View:
    """``view``/``reshape``/``unsqueeze``/``squeeze``/``flatten``: free unless the
    factorizations clash (then one materialization)."""
    shape = tuple(int(d) for d in shape)
    if isinstance(v, Expanded):
        if math.prod(v.shape) == v.src.numel:  # expanded only unit dims: a reshape
            return reshape_view(em, v.src, shape)
        return natural(em.reshape(materialize_expanded(em, v), shape), v.kind)
    r = refine(em, v.phys, v.order, shape, v.kind)
    if r is not None:
        return r
    return natural(em.reshape(materialize(em, v), shape), v.kind)


def permute_view(v: View, dims: Sequence[int]) -> View:
    """``permute``: reorder the groups (no IR)."""
    g = v.groups()
    order = tuple(a for d in dims for a in g[d])
    return View(v.phys, order, tuple(v.shape[d] for d in dims), v.kind)


def merge_group(em: Emitter, v: View, dim: int) -> View | None:
    """``v`` with logical ``dim``'s group merged into one physical axis (a reshape),
    or None when its axes are not adjacent and ascending in ``phys``."""
    g = v.groups()[dim]
    if len(g) <= 1:
        return v
    sizes = v.phys.type.shape
    for a, b in zip(g, g[1:]):
        if b <= a or any(sizes[x] != 1 for x in range(a + 1, b)):
            return None
    lo, hi = g[0], g[-1]
    new_shape = list(sizes[:lo]) + [math.prod(sizes[lo:hi + 1])] + list(sizes[hi + 1:])
    shift = hi - lo
    order: list[int] = []
    for a in v.order:
        if a == lo:
            order.append(lo)
        elif lo < a <= hi:
            continue
        else:
            order.append(a - shift if a > hi else a)
    return View(em.reshape(v.phys, new_shape), tuple(order), v.shape, v.kind)


def single_axis(em: Emitter, v: View, dim: int) -> tuple[View, int | None]:
    """``(view, axis)`` with logical ``dim`` held by one physical axis (None for a
    dim of size 1); materializes when the group cannot be merged."""
    g = v.groups()[dim]
    if not g:
        return v, None
    if len(g) > 1:
        m = merge_group(em, v, dim)
        v = m if m is not None else natural(materialize(em, v), v.kind)
        g = v.groups()[dim]
    return v, g[0]


def to_channels(em: Emitter, v: "View | Expanded") -> Value:
    """``[..., K]`` as ``[1, K, 1, M]`` (K channels, M = product of the leading dims)."""
    v = as_view(em, v)
    k = v.shape[-1] if v.shape else 1
    m = v.numel // k
    if k == 1:
        return em.reshape(materialize(em, v), [1, 1, 1, m])
    v, a = single_axis(em, v, len(v.shape) - 1)
    seq = [a] + [x for x in v.order if x != a]
    if ascending(seq):
        return em.reshape(v.phys, [1, k, 1, m])
    rank = v.phys.type.rank
    perm = seq + [x for x in range(rank) if x not in seq]
    return em.reshape(em.transpose(v.phys, perm), [1, k, 1, m])


def channel_view(em: Emitter, y: Value, shape: Sequence[int], kind: str = "float") -> View:
    """The view of a ``[1, N, 1, M]`` value holding the logical ``shape`` (``[..., N]``)."""
    _, n, _, m = y.type.shape
    order = tuple(([3] if m > 1 else []) + ([1] if n > 1 else []))
    r = refine(em, y, order, shape, kind)
    if r is None:  # pragma: no cover - [M..., N] always refines [M, N]
        raise AssertionError(f"channel view of {y.type} as {shape}")
    return r


# ---------------------------------------------------------------------------
# placing one operand in another's physical frame


def broadcast_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(out)


def frame_plan(leader: View, other_shape: Sequence[int],
               sizes: dict[int, int] | None = None) -> tuple[list[int], list[int], list[int]]:
    """How a tensor of ``other_shape`` (broadcasting to ``leader.shape``) maps into
    ``leader.phys``'s frame: ``(split_shape, kept_axes, aligned_shape)``.

    ``split_shape`` is ``other`` with each non-unit dim split into the sizes
    of the leader's group (unit dims dropped), ``kept_axes`` the physical axes
    of those pieces in that order, ``aligned_shape`` the physical shape (1 on
    axes ``other`` broadcasts over). ``sizes`` overrides physical axis sizes
    (a concat operand differs from the leader along the concat axis).
    """
    out = leader.shape
    groups = leader.groups()
    phys = list(leader.phys.type.shape)
    if sizes:
        for a, s in sizes.items():
            phys[a] = s
    ob = (1,) * (len(out) - len(other_shape)) + tuple(other_shape)
    aligned = [1] * len(phys)
    kept: list[int] = []
    split: list[int] = []
    for i, d in enumerate(ob):
        if d == 1:
            continue
        for a in groups[i]:
            aligned[a] = phys[a]
            kept.append(a)
            split.append(phys[a])
    return split, kept, aligned


def align_array(arr: np.ndarray, leader: View, sizes: dict[int, int] | None = None) -> np.ndarray:
    """A constant broadcasting to ``leader.shape``, laid out in ``leader``'s frame."""
    split, kept, aligned = frame_plan(leader, arr.shape, sizes)
    a = np.asarray(arr).reshape(split) if split else np.asarray(arr).reshape(())
    if kept:
        a = np.transpose(a, np.argsort(kept))
    return a.reshape(aligned)


def align_view(em: Emitter, other: "View | Expanded", leader: View,
               sizes: dict[int, int] | None = None) -> Value:
    """An IR value holding ``other`` in ``leader``'s physical frame (broadcastable).

    The regrouping is done on views (reshape, permute) and materialized once,
    so it costs at most one transpose, none when ``other``'s physical order
    already matches the frame."""
    if isinstance(other, Expanded):
        other = other.src
    split, kept, aligned = frame_plan(leader, other.shape, sizes)
    if other.phys.type.shape == tuple(aligned) and other.order == tuple(kept):
        return other.phys
    v = reshape_view(em, other, split)
    if kept:
        v = permute_view(v, [int(i) for i in np.argsort(kept)])
    return materialize(em, reshape_view(em, v, aligned))


def same_frame(a: View, b: View) -> bool:
    return (a.phys.type.shape == b.phys.type.shape and a.order == b.order
            and a.shape == b.shape)


def channel_major(v: View) -> bool:
    """Whether the last logical dim sits in physical axis 1 (the conv layout)."""
    g = v.groups()
    return bool(g) and g[-1] == (1,)
