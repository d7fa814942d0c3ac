"""ATen lowerings of shape and data-movement ops: views, slicing, joining, indexing.

View ops (``view``, ``reshape``, ``permute``, ``transpose``, ``unsqueeze``,
``squeeze``, ``expand``) emit no IR: the :class:`~anec.frontends.tensor_views.View`
records them, with a ``reshape`` only where a logical dim splits a physical
axis. Slices and splits slice the dim's physical axis; ``cat`` pads each piece
to the full size and adds (the ANE rejects concat); indexing with constant
indices is a reshape or slice for a range, else a matmul by a one-hot matrix;
embedding lookups of a model input's ids run on the host.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from anec.frontends.aten.context import Lowering
from anec.frontends.aten.table import Family
from anec.frontends.aten.values import Args, Const, HostValue, InputRef, Lowered, Operand, dim_list, kind_of, shape_of
from anec.frontends.tensor_views import (
    Expanded,
    View,
    align_view,
    as_view,
    fp16_values,
    materialize,
    natural,
    permute_view,
    reshape_view,
    single_axis,
)
from anec.ir.nodes import Value

SHAPES = Family("shapes and data movement")


def _resolve_shape(shape: Sequence[int], numel: int) -> tuple[int, ...]:
    shape = [int(d) for d in shape]
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    return tuple(shape)


@SHAPES.op("view.default", "_unsafe_view.default", "reshape.default", "view_copy.default",
      ir="(none: the layout records it); a reshape where a dim splits a physical axis")
def lower_view(lw: Lowering, a: Args) -> Lowered:
    x = a["self"]
    shape = _resolve_shape(a.get("size", a.get("shape")), math.prod(shape_of(x)))
    return _reshape_any(lw, x, shape)


def _reshape_any(lw: Lowering, x: Operand, shape: tuple[int, ...]) -> InputRef | HostValue | View:
    if isinstance(x, InputRef):
        return InputRef(x.name, x.shape, x.dtype, shape)
    if isinstance(x, HostValue):
        return x.then({"op": "reshape", "shape": list(shape)}, shape)
    return reshape_view(lw.em, lw.dev(x), shape)


@SHAPES.op("unsqueeze.default", ir="(none)")
def lower_unsqueeze(lw: Lowering, a: Args) -> Lowered:
    x = a["self"]
    s = list(shape_of(x))
    d = a["dim"] % (len(s) + 1)
    s.insert(d, 1)
    return _reshape_any(lw, x, tuple(s))


@SHAPES.op("squeeze.default", "squeeze.dim", "squeeze.dims", ir="(none)")
def lower_squeeze(lw: Lowering, a: Args) -> Lowered:
    x = a["self"]
    s = shape_of(x)
    dims = a.get("dim", a.get("dims"))
    dims = dim_list(dims, len(s)) if dims is not None else list(range(len(s)))
    return _reshape_any(lw, x, tuple(d for i, d in enumerate(s) if not (i in dims and d == 1)))


@SHAPES.op("permute.default", ir="(none: the layout records it)")
def lower_permute(lw: Lowering, a: Args) -> Lowered:
    x = lw.dev(a["self"])
    v = as_view(lw.em, x)
    dims = [d % len(v.shape) for d in a["dims"]]
    return permute_view(v, dims)


@SHAPES.op("transpose.int", ir="(none: the layout records it)")
def lower_transpose(lw: Lowering, a: Args) -> Lowered:
    v = lw.view(a["self"])
    dims = list(range(len(v.shape)))
    d0, d1 = a["dim0"] % len(dims), a["dim1"] % len(dims)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute_view(v, dims)


@SHAPES.op("t.default", ir="(none)")
def lower_t(lw: Lowering, a: Args) -> Lowered:
    v = lw.view(a["self"])
    return permute_view(v, list(reversed(range(len(v.shape)))))


@SHAPES.op("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default",
      "contiguous.default", "dropout.default", ir="(none)")
def lower_identity(lw: Lowering, a: Args) -> Lowered:
    if a.get("train"):
        raise lw.fail("dropout in training mode", "call model.eval() before importing")
    return a.get("self", a.get("input"))


@SHAPES.op("native_dropout.default", ir="(none) in eval mode")
def lower_native_dropout(lw: Lowering, a: Args) -> Lowered:
    if a.get("train") is not False:
        raise lw.fail("dropout in training mode", "call model.eval() before importing")
    return (a["input"], None)


@SHAPES.op("expand.default", "expand_copy.default", ir="(none: binary ops broadcast); add of zeros "
      "where a tensor must hold the copies")
def lower_expand(lw: Lowering, a: Args) -> Lowered:
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


@SHAPES.op("repeat.default", ir="expand over interleaved unit dims, then a reshape")
def lower_repeat(lw: Lowering, a: Args) -> Lowered:
    v = lw.view(a["self"])
    reps = [int(r) for r in a["repeats"]]
    s = (1,) * (len(reps) - len(v.shape)) + v.shape
    inter = tuple(x for d in s for x in (1, d))
    big = tuple(x for r, d in zip(reps, s) for x in (r, d))
    e = Expanded(reshape_view(lw.em, v, inter), big)
    return reshape_view(lw.em, e, tuple(r * d for r, d in zip(reps, s)))


def _slice_view(lw: Lowering, x: Operand, dim: int, start: int | None, end: int | None, step: int) -> View:
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


@SHAPES.op("slice.Tensor", "slice_copy.Tensor", ir="slice on the dim's physical axis")
def lower_slice(lw: Lowering, a: Args) -> Lowered:
    end = a.get("end")
    if end is not None and end > 2**62:
        end = None
    return _slice_view(lw, a["self"], a.get("dim", 0), a.get("start"), end, a.get("step", 1))


@SHAPES.op("select.int", ir="slice + (none)")
def lower_select(lw: Lowering, a: Args) -> Lowered:
    x = a["self"]
    s = shape_of(x)
    dim = a["dim"] % len(s)
    i = a["index"] % s[dim]
    v = _slice_view(lw, x, dim, i, i + 1, 1)
    return reshape_view(lw.em, v, s[:dim] + s[dim + 1:])


@SHAPES.op("split_with_sizes.default", "split.Tensor", "split_with_sizes_copy.default",
      ir="one slice per piece")
def lower_split(lw: Lowering, a: Args) -> Lowered:
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


@SHAPES.op("unbind.int", ir="one slice per index")
def lower_unbind(lw: Lowering, a: Args) -> Lowered:
    x = a["self"]
    s = shape_of(x)
    dim = a.get("dim", 0) % len(s)
    return tuple(reshape_view(lw.em, _slice_view(lw, x, dim, i, i + 1, 1), s[:dim] + s[dim + 1:])
                 for i in range(s[dim]))


@SHAPES.op("cat.default", "concat.default", ir="pad each piece to the full size, then add "
      "(the ANE rejects concat); constant pieces folded into one const")
def lower_cat(lw: Lowering, a: Args) -> Lowered:
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


@SHAPES.op("constant_pad_nd.default", ir="pad on the physical axes (value = the pad value)")
def lower_pad(lw: Lowering, a: Args) -> Lowered:
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


@SHAPES.op("index.Tensor", ir="with constant indices: a reshape/slice when they are a range, else a "
      "matmul by a constant one-hot matrix")
def lower_index(lw: Lowering, a: Args) -> Lowered:
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


def _gather(lw: Lowering, x: Operand, idx: list[Const | None]) -> View:
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


@SHAPES.op("index_select.default", ir="as index.Tensor with one constant index")
def lower_index_select(lw: Lowering, a: Args) -> Lowered:
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


@SHAPES.op("embedding.default", ir="host lookup when the ids are a model input; a weight slice for "
      "constant ids (positions)")
def lower_embedding(lw: Lowering, a: Args) -> Lowered:
    w, ids = a["weight"], a["indices"]
    if not isinstance(w, Const):
        raise lw.fail("embedding with a table computed in the model")
    if isinstance(ids, InputRef):
        return lw.host_input(w, ids)
    raise lw.fail("embedding lookup of ids computed in the model",
                  "the IR has no gather; only lookups of a model input's ids run (on the host)")


@SHAPES.op("full_like.default", "zeros_like.default", "ones_like.default", "empty_like.default",
      "new_zeros.default", "new_ones.default", "new_full.default", "new_empty.default",
      ir="a constant (only the operand's shape matters)")
def lower_like(lw: Lowering, a: Args) -> Lowered:
    import torch

    val = lw.node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise lw.fail("the result's shape is not known", "export with static shapes")
    name = str(lw.node.target).split(".")[1]
    fill = {"zeros_like": 0, "empty_like": 0, "new_zeros": 0, "new_empty": 0, "ones_like": 1,
            "new_ones": 1}.get(name, a.get("fill_value", 0))
    return Const(torch.full(tuple(int(d) for d in val.shape), fill, dtype=val.dtype))
