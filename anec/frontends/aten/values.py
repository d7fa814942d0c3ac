"""The values an FX node has while the ATen lowerings run, and the types handlers use.

Every node of the exported graph is, once lowered, one of:

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
  module's outputs;
* a device tensor (:data:`Device`: a :class:`~anec.frontends.tensor_views.View`
  or an :class:`~anec.frontends.tensor_views.Expanded`), a Python number, or a
  :class:`Deferred` result lowered only when used.

Booleans live on the device as 0/1 and integers as exact fp16 integers (view
``kind``). :data:`Operand`, :data:`Args` and :data:`Lowered` name what a
handler takes and returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence, Union

import numpy as np

from anec.frontends.tensor_views import Expanded, View
from anec.ir.types import DType

if TYPE_CHECKING:
    import torch

FP16 = DType.fp16
FP16_EXACT_INT = 2048
"""Integers up to this magnitude are exact in fp16."""


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

    value: torch.Tensor
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
    dtype: torch.dtype
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

    make: Callable[[], Lowered]
    node: torch.fx.Node


def shape_of(x: object) -> tuple[int, ...]:
    """The logical shape of a tensor value; () for anything else (numbers, None)."""
    if isinstance(x, (View, Expanded, Const, InputRef, HostValue)):
        return tuple(x.shape)
    return ()


def kind_of(x: object) -> str:
    """``float``, ``int`` (integer-valued) or ``bool`` (0/1): what a value holds."""
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


def dim_list(dim: int | Sequence[int] | None, rank: int) -> list[int]:
    """The dims an op's ``dim`` argument names, sorted and non-negative (None or [] is every dim)."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(rank))
    if isinstance(dim, int):
        dim = [dim]
    return sorted({d % rank for d in dim}) if rank else []


Tensor = Union[View, Expanded, Const, InputRef, HostValue]
"""A tensor value of a node."""

Operand = Union[Tensor, int, float, bool]
"""What a handler's tensor arguments hold: a tensor value or a Python number."""

Args = dict[str, Any]
"""An op's arguments by schema name, FX nodes replaced by their values."""

Lowered = Union[Operand, Deferred, None, tuple[Any, ...]]
"""What a handler returns: the node's value (a tuple for a multi-result op)."""
