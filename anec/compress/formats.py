"""The compressed formats: :class:`Format`, the registry :data:`FORMATS` and the name parser.

A format is ``int8``, ``int8-affine``, ``uint8-affine``, ``int4``, ``int4-affine``,
``uint4-affine`` (linear: an integer payload and a scale, and zero point, per
output channel; ``FORMAT/bB`` per block of B input channels too), ``lut1`` ..
``lut8`` (palettization: indices into a table of 2^n fp16 entries, ``lutN/gG``
one table per G output channels), ``sparseP`` (magnitude pruning: P% of the
elements zero, a 1-bit mask and the fp16 values kept; ``sparseP+int8`` and
``sparseP+lutN`` store the values kept as int8 or LUT indices) or ``fp16`` (no
compression). The table of
formats is docs/compression.md; the shapes of a linear format's scale are
:func:`scale_shape` (on the :func:`input_axis` for per-block scales).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from anec.diagnostics import AnecError, did_you_mean

FP16_MAX = 65504.0


@dataclass(frozen=True)
class Format:
    """One compressed form: ``kind`` ``linear`` (int8/uint8 + scale [+ zero point]), ``lut``
    or ``sparse`` (a 1-bit mask and the fp16 values it keeps)."""

    name: str
    kind: str
    """``linear``, ``lut`` or ``none`` (fp16)."""
    bits: int = 16
    signed: bool = True
    affine: bool = False
    group: int = 0
    """lut: output channels per table (0: one table for the tensor)."""
    block: int = 0
    """linear: input channels per scale (0: one scale per output channel)."""
    sparsity: int = 0
    """sparse: the percentage of elements pruned (1..99); ``bits`` is the mask's (1)."""
    joint: str = ""
    """sparse: the format of the values kept (``int8`` or ``lutN``; ``bits`` is then its
    width), or empty for fp16 values."""

    @property
    def blockwise(self) -> bool:
        """Scales of the weight's rank (per block, or 4-bit): only ios18's blockwise op holds them."""
        return self.kind == "linear" and (self.block > 0 or self.bits == 4)

    @property
    def storage(self) -> str:
        """The BLOBFILE dtype of the payload (``int8``, ``uint8``, ``uint4``, ...)."""
        if self.kind == "linear":
            return f"{'' if self.signed else 'u'}int{self.bits}"
        if self.kind == "lut" or self.joint.startswith("lut"):
            return f"uint{self.bits}"
        if self.joint:
            return "int8"
        return "fp16"  # none; sparse: the values (the mask is uint1)


_LUT_BITS = (1, 2, 4, 6, 8)

FORMATS: dict[str, Format] = {
    "fp16": Format("fp16", "none"),
    "int8": Format("int8", "linear", 8, True, False),
    "int8-affine": Format("int8-affine", "linear", 8, True, True),
    "uint8-affine": Format("uint8-affine", "linear", 8, False, True),
    "int4": Format("int4", "linear", 4, True, False),
    "int4-affine": Format("int4-affine", "linear", 4, True, True),
    "uint4-affine": Format("uint4-affine", "linear", 4, False, True),
    **{f"lut{b}": Format(f"lut{b}", "lut", b) for b in _LUT_BITS},
}
"""The formats by name (grouped LUTs ``lutN/gG`` are made by :func:`get_format`)."""

DEFAULT_FALLBACK: dict[str, tuple[str, ...]] = {
    "lut": ("int8", "fp16"),
    "sparse": ("int8", "fp16"),
    "linear": ("fp16",),
    "none": (),
}

_LUT_NAME = re.compile(r"lut(\d+)(?:/g(\d+))?\Z")
_SPARSE_NAME = re.compile(r"sparse(\d+)(?:\+(int8|lut(\d+)))?\Z")
_BLOCK_NAME = re.compile(r"((?:u?int)[48](?:-affine)?)/b(\d+)\Z")


def get_format(name: str) -> Format:
    """The format called ``name`` (``int8``, ``lut4``, ``lut4/g16``, ``sparse50``, ...); AnecError
    otherwise."""
    name = name.strip()
    if name in FORMATS:
        return FORMATS[name]
    sp = _SPARSE_NAME.match(name)
    if sp:
        pct = int(sp.group(1))
        if not 1 <= pct <= 99 or sp.group(1) != str(pct):
            raise AnecError(f"unknown compression format '{name}'",
                            hint="sparseP prunes P percent of the elements, P a whole number from 1 to 99 "
                                 "(e.g. sparse50)")
        if sp.group(3) and int(sp.group(3)) not in _LUT_BITS:
            raise AnecError(f"unknown compression format '{name}'",
                            hint=f"a LUT has 1, 2, 4, 6 or 8 bits per index (lut{sp.group(3)} is not one)")
        joint = sp.group(2) or ""
        bits = 8 if joint == "int8" else int(sp.group(3)) if joint else 1
        return Format(name, "sparse", bits, joint == "int8", sparsity=pct, joint=joint)
    m = _LUT_NAME.match(name)
    if m and int(m.group(1)) in _LUT_BITS and m.group(2) and int(m.group(2)) > 0:
        return Format(name, "lut", int(m.group(1)), group=int(m.group(2)))
    b = _BLOCK_NAME.match(name)
    if b and b.group(1) in FORMATS and int(b.group(2)) > 0:
        base = FORMATS[b.group(1)]
        return Format(name, "linear", base.bits, base.signed, base.affine, block=int(b.group(2)))
    known = [*FORMATS, "lutN/gG", "int4/bB", "sparseP", "sparseP+int8", "sparseP+lutN"]
    hint = did_you_mean(name, [*FORMATS, "sparse50"]) or f"formats: {', '.join(known)}"
    if m and int(m.group(1)) not in _LUT_BITS:
        hint = f"a LUT has 1, 2, 4, 6 or 8 bits per index (lut{m.group(1)} is not one)"
    raise AnecError(f"unknown compression format '{name}'", hint=hint)


def format_of(part: Mapping[str, Any]) -> Format:
    """The format a manifest ``part`` record names."""
    return get_format(part["format"])


def scale_shape(fmt: Format, axis: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The shape of a linear format's scale (and zero point): ``[C]`` per output channel, or
    the weight's rank for 4-bit and per-block formats (``C`` on ``axis``, the blocks on the
    input axis, 1 elsewhere)."""
    shape = tuple(int(n) for n in shape)
    if not fmt.blockwise:
        return (shape[axis],)
    ia = input_axis(axis, len(shape))
    return tuple(n if d == axis else n // (fmt.block or n) if d == ia else 1 for d, n in enumerate(shape))


def input_axis(axis: int, rank: int) -> int:
    """The input-channel axis of a weight whose output channels are on ``axis``: 1 for a
    conv weight (and a ``transpose_y`` matmul weight of rank 2), else the other of the last
    two axes (a matmul's ``y``)."""
    if axis == 0:
        return 1
    return rank - 2 if axis == rank - 1 else rank - 1
