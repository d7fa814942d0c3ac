"""Constant folding at import, and which checkpoint view a folded constant is.

An op whose operands are all constants (parameters, buffers, lifted
constants, and earlier folded results) is run in torch at import
(:func:`fold`): position ids, causal and padding masks built from
``arange``, rotary tables... When the folded op only views a weight
(reshape, permute, transpose, slice, select, an embedding of a range), the
result remembers which view of the stored tensor it is (a
:class:`~anec.frontends.aten.values.WeightRef`), so the IR refers to the
checkpoint key instead of a copy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from anec.frontends import TorchImportError, UnsupportedOpError
from anec.frontends.aten.values import Args, Const, Deferred, Lowered, WeightRef
from anec.frontends.fx import located_error

if TYPE_CHECKING:
    import torch

RANDOM_OPS = ("rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "bernoulli",
              "normal", "uniform", "exponential", "randperm", "native_dropout", "multinomial")

VIEW_OPS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "clone", "alias", "detach",
             "lift_fresh_copy", "contiguous", "flatten", "view_copy", "expand"}


def fold(node: torch.fx.Node, a: Args, value_of: Callable[[torch.fx.Node], Lowered],
         resolve: Callable[[Deferred], Lowered]) -> Lowered:
    """Run the op of ``node`` in torch on its constant operands (``value_of`` gives an FX
    node's value, ``resolve`` lowers a deferred one); the result as a :class:`Const`
    (a tuple of them for a multi-result op)."""
    name = str(node.target)
    base = name.split(".")[1] if name.startswith("aten.") else name
    if base in RANDOM_OPS or (base in ("dropout", "native_dropout") and a.get("train")):
        raise located_error(UnsupportedOpError, node, "a random op in the model",
                            "anec compiles deterministic programs: remove it, or sample on the host")
    args = _torch_args(node.args, value_of, resolve)
    kwargs = {k: _torch_args(v, value_of, resolve) for k, v in node.kwargs.items()}
    try:
        out = node.target(*args, **kwargs)
    except Exception as e:
        raise located_error(TorchImportError, node, f"folding this constant op failed ({e})") from None
    return _wrap_folded(node, base, a, out)


def _torch_args(x: Any, value_of: Callable[[torch.fx.Node], Lowered], resolve: Callable[[Deferred], Lowered]) -> Any:
    import torch

    if isinstance(x, torch.fx.Node):
        v = value_of(x)
        if isinstance(v, Deferred):  # pragma: no cover - deferred results are device values
            v = resolve(v)
        if isinstance(v, Const):
            return v.value
        if isinstance(v, tuple):
            return tuple(i.value if isinstance(i, Const) else i for i in v)
        return v
    if isinstance(x, (list, tuple)):
        return type(x)(_torch_args(i, value_of, resolve) for i in x)
    return x


def _wrap_folded(node: torch.fx.Node, base: str, a: Args, out: Any) -> Any:
    import torch

    if isinstance(out, (tuple, list)):
        return tuple(_wrap_folded(node, "", {}, o) for o in out)
    if not isinstance(out, torch.Tensor):
        return out
    origin = None
    src = a.get("self", a.get("input"))
    if isinstance(src, Const) and src.origin is not None and out.dtype.is_floating_point:
        origin = weight_view_of(base, a, src, out)
    if base == "embedding" and isinstance(a.get("weight"), Const) and a["weight"].origin is not None:
        origin = embedding_ref(a["weight"], a["indices"], out)
    if origin is not None and origin.final != tuple(out.shape):
        origin = None
    return Const(out.detach(), origin)


def weight_view_of(base: str, a: Args, src: Const, out: torch.Tensor) -> WeightRef | None:
    """The weight view a folded view-like op of a weight view gives, if any."""
    ref = src.origin
    if base in VIEW_OPS or base in ("_to_copy", "expand_copy"):
        if math.prod(out.shape) != math.prod(src.shape):
            return None
        return ref.reshape(tuple(out.shape))
    if base == "permute":
        return ref.permute([d % len(src.shape) for d in a["dims"]])
    if base in ("t", "transpose"):
        dims = list(range(len(src.shape)))
        if base == "transpose":
            d0, d1 = a["dim0"] % len(dims), a["dim1"] % len(dims)
        else:
            d0, d1 = 0, len(dims) - 1
        dims[d0], dims[d1] = dims[d1], dims[d0]
        return ref.permute(dims)
    if base in ("slice", "select"):
        dim = a.get("dim", 0) % len(src.shape)
        size = src.shape[dim]
        if base == "select":
            i = a["index"] % size
            r = ref.narrow(dim, i, i + 1)
        else:
            if a.get("step", 1) != 1:
                return None
            end = a.get("end")
            start, stop, _ = slice(a.get("start"), end if end is None or end < 2**62 else None).indices(size)
            r = ref.narrow(dim, start, stop)
        return r.reshape(tuple(out.shape)) if r is not None else None
    return None


def embedding_ref(w: Const, ids: Lowered, out: torch.Tensor) -> WeightRef | None:
    """``embedding(W, arange(a, b))`` is the weight slice ``W[a:b]``."""
    if not isinstance(ids, Const):
        return None
    flat = ids.value.reshape(-1)
    if flat.numel() == 0:
        return None
    first = int(flat[0])
    if not bool((flat == (first + np.arange(flat.numel()))).all()):
        import torch

        if not bool(torch.equal(flat, torch.arange(first, first + flat.numel(), dtype=flat.dtype))):
            return None
    r = w.origin.narrow(0, first, first + flat.numel())
    return r.reshape(tuple(out.shape)) if r is not None else None
