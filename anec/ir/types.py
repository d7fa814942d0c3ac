"""Element dtypes (spelled as in MIL) and tensor types.

A tensor type prints as ``fp16[1, 768, 1, 64]``; a rank-0 (scalar) tensor
prints as ``fp32[]``.
"""

from __future__ import annotations

import builtins
import enum
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import numpy.typing as npt


class DType(enum.Enum):
    """The element types of the IR; ``str(d)`` is the MIL spelling."""

    fp16 = "fp16"
    fp32 = "fp32"
    int32 = "int32"
    bool = "bool"
    int8 = "int8"
    uint8 = "uint8"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"DType.{self.value}"

    @property
    def np(self) -> np.dtype[Any]:
        """The numpy dtype holding values of this type."""
        return np.dtype(_NP[self])

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.value]

    @property
    def is_float(self) -> builtins.bool:
        return self in (DType.fp16, DType.fp32)

    @property
    def is_int(self) -> builtins.bool:
        return self in (DType.int32, DType.int8, DType.uint8)

    @staticmethod
    def from_np(dt: npt.DTypeLike) -> "DType":
        dt = np.dtype(dt)
        for k, v in _NP.items():
            if np.dtype(v) == dt:
                return k
        raise ValueError(f"no anec dtype for numpy dtype {dt}")


_NP = {
    DType.fp16: "float16",
    DType.fp32: "float32",
    DType.int32: "int32",
    DType.bool: "bool",
    DType.int8: "int8",
    DType.uint8: "uint8",
}

_ITEMSIZE = {d.value: np.dtype(n).itemsize for d, n in _NP.items()}
"""Bytes per element, by dtype name (a str key hashes in C; a DType's hash is Python code)."""

DTYPE_NAMES = tuple(d.value for d in DType)
FLOATS = frozenset({DType.fp16, DType.fp32})
FP16_MAX = float(np.finfo(np.float16).max)
"""The largest finite fp16 value (65504): the ANE's range (ANE-FP16-RANGE)."""
NUMERIC = frozenset({DType.fp16, DType.fp32, DType.int32})
ALL_DTYPES = frozenset(DType)


_ALIASES = {
    "float16": DType.fp16, "half": DType.fp16, "f16": DType.fp16, "float": DType.fp32,
    "float32": DType.fp32, "f32": DType.fp32, "single": DType.fp32, "int": DType.int32,
    "i32": DType.int32, "i8": DType.int8, "u8": DType.uint8, "boolean": DType.bool,
}
"""Spellings from numpy, PyTorch and C that users type for an anec dtype (hints only)."""


def dtype_hint(word: str) -> str | None:
    """``"did you mean 'fp16'?"`` for a misspelt or foreign dtype name (``float16``,
    ``FP16``, ``fp61``), or None when ``word`` looks like no dtype."""
    from anec.diagnostics import did_you_mean

    low = word.lower()
    if low in DTYPE_NAMES:
        return f"did you mean '{low}'? (dtype names are lowercase)"
    if low in _ALIASES:
        return f"did you mean '{_ALIASES[low]}'? (anec spells dtypes as MIL does)"
    return did_you_mean(low, DTYPE_NAMES)


def parse_dtype(name: str) -> DType | None:
    """The dtype spelled ``name``, or None."""
    try:
        return DType(name)
    except ValueError:
        return None


@dataclass(frozen=True)
class TensorType:
    """A tensor type: element dtype and static shape.

    Immutable, so the hash and the byte size are computed once per instance
    (a 100k-node pipeline asks for them hundreds of thousands of times);
    they live in the instance ``__dict__`` and take no part in equality.
    """

    dtype: DType
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.dtype, self.shape))  # the dataclass hash, computed once
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if other.__class__ is not TensorType:
            return NotImplemented
        return self.dtype is other.dtype and self.shape == other.shape

    def __getstate__(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "shape": self.shape}  # not the cached hash (str hashes vary by process)

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, v)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        n = self.__dict__.get("_nbytes")
        if n is None:
            n = math.prod(self.shape) * _ITEMSIZE[self.dtype.value]
            object.__setattr__(self, "_nbytes", n)
        return n

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(dtype, self.shape)

    def with_shape(self, shape: tuple[int, ...]) -> "TensorType":
        return TensorType(self.dtype, tuple(shape))

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"

    def __repr__(self) -> str:
        return f"TensorType({self})"


def device_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """The rank-4 ``[1, C, 1, S]`` shape of a func input or output of logical ``shape``.

    Rank 4 stays as it is; rank >= 2 becomes ``[1, prod(shape[:-1]), 1,
    shape[-1]]`` (the last axis is the sequence axis S, everything before it
    folds into channels), rank 1 ``[1, 1, 1, n]``, a scalar ``[1, 1, 1, 1]``.
    The element count and the row-major byte order are unchanged.
    """
    shape = tuple(shape)
    if len(shape) == 4:
        return shape
    if not shape:
        return (1, 1, 1, 1)
    return (1, math.prod(shape[:-1]), 1, shape[-1])
