"""Compressed weights: a compile decision, per weight, by glob.

``anec compile model.ir --compress 'lut4:h.*.mlp.*,int8:*'`` stores the matching
conv/matmul weights in a compressed form the device decompresses when it loads the
program (MIL ``constexpr_*`` ops over integer BLOBFILE payloads). The IR does not
change: the decision is made when the program is emitted, recorded in the manifest
(``compression``, and a ``part`` record on every BLOBFILE of a compressed weight),
and written into the MIL. Formats (docs/compression.md):

==================  =================================================================
``int8``            linear symmetric int8, one fp16 scale per output channel
                    (what coremltools' ``linear_quantize_weights`` writes for mode
                    ``linear_symmetric``, ``per_channel``: the same int8 values and scales)
``int8-affine``     int8 with a zero point per output channel (coremltools mode ``linear``)
``uint8-affine``    the same in uint8
``int4``, ``int4-affine``, ``uint4-affine``
                    4-bit linear, a scale (and zero point) per output channel; ``FORMAT/bB``
                    (any linear format): per block of B input channels as well (coremltools'
                    ``per_block``); iOS18's constexpr_blockwise_shift_scale only
``lut1`` .. ``lut8``  n-bit palettization (n in 1, 2, 4, 6, 8): one fp16 look-up table of
                    2^n entries for the whole tensor (``lutN``) or per group of G output
                    channels (``lutN/gG``); deterministic 1-D k-means, so the same tensor
                    always gives the same bytes
``fp16``            no compression (to exclude weights: ``fp16:*.ln_*,int8:*``)
==================  =================================================================

A SPEC is comma-separated ``FORMAT[>FALLBACK...]:GLOB`` items (a bare ``FORMAT`` means
``FORMAT:*``); the first item whose glob matches a weight's checkpoint key decides it.
Only weights a conv or matmul reads are compressed (norm gains, biases and the like stay
fp16). Every compressed tensor passes an accuracy gate (:class:`Gate`: relative L2 error,
max abs error relative to the tensor's max, the dequantized values finite in fp16);
a tensor that fails falls back along its chain (``lut4`` -> ``int8`` -> ``fp16`` by
default) and the report says which gate failed.
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np

from anec.diagnostics import AnecError
from anec.ir.types import DType
from anec.mil.blobfile import pack_bits, unpack_bits

if TYPE_CHECKING:
    from anec.ir.graph import Graph, Node

__all__ = [
    "FORMATS",
    "Decision",
    "Format",
    "Gate",
    "Rule",
    "Spec",
    "compress_tensor",
    "decide",
    "decompress",
    "kmeans_1d",
    "pack_bits",
    "parse_spec",
    "quantize_linear",
    "quantize_linear_numpy",
    "unpack_bits",
]

FP16_MAX = 65504.0


# ---------------------------------------------------------------------------
# formats


@dataclass(frozen=True)
class Format:
    """One compressed form: ``kind`` ``linear`` (int8/uint8 + scale [+ zero point]) or ``lut``."""

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

    @property
    def blockwise(self) -> bool:
        """Scales of the weight's rank (per block, or 4-bit): only ios18's blockwise op holds them."""
        return self.kind == "linear" and (self.block > 0 or self.bits == 4)

    @property
    def storage(self) -> str:
        """The BLOBFILE dtype of the payload (``int8``, ``uint8``, ``uint4``, ...)."""
        if self.kind == "linear":
            return f"{'' if self.signed else 'u'}int{self.bits}"
        if self.kind == "lut":
            return f"uint{self.bits}"
        return "fp16"


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
    "linear": ("fp16",),
    "none": (),
}

_LUT_NAME = re.compile(r"lut(\d+)(?:/g(\d+))?\Z")
_BLOCK_NAME = re.compile(r"((?:u?int)[48](?:-affine)?)/b(\d+)\Z")


def get_format(name: str) -> Format:
    """The format called ``name`` (``int8``, ``lut4``, ``lut4/g16``, ...); AnecError otherwise."""
    name = name.strip()
    if name in FORMATS:
        return FORMATS[name]
    m = _LUT_NAME.match(name)
    if m and int(m.group(1)) in _LUT_BITS and m.group(2) and int(m.group(2)) > 0:
        return Format(name, "lut", int(m.group(1)), group=int(m.group(2)))
    b = _BLOCK_NAME.match(name)
    if b and b.group(1) in FORMATS and int(b.group(2)) > 0:
        base = FORMATS[b.group(1)]
        return Format(name, "linear", base.bits, base.signed, base.affine, block=int(b.group(2)))
    from anec.diagnostics import did_you_mean

    known = [*FORMATS, "lutN/gG", "int4/bB"]
    hint = did_you_mean(name, list(FORMATS)) or f"formats: {', '.join(known)}"
    if m and int(m.group(1)) not in _LUT_BITS:
        hint = f"a LUT has 1, 2, 4, 6 or 8 bits per index (lut{m.group(1)} is not one)"
    raise AnecError(f"unknown compression format '{name}'", hint=hint)


# ---------------------------------------------------------------------------
# the spec


@dataclass(frozen=True)
class Gate:
    """The accuracy gate a compressed tensor must pass (None: the format's default)."""

    max_rel_l2: float | None = None
    """||w - w'|| / ||w||, over the tensor and over each output channel."""
    max_rel_abs: float | None = None
    """max |w - w'| / max |w|."""

    def limits(self, fmt: Format) -> tuple[float, float]:
        base = fmt.name.split("/")[0]
        rel, ab = DEFAULT_GATES[base if base in DEFAULT_GATES else f"lut{fmt.bits}"]
        return (self.max_rel_l2 if self.max_rel_l2 is not None else rel,
                self.max_rel_abs if self.max_rel_abs is not None else ab)


DEFAULT_GATES: dict[str, tuple[float, float]] = {
    # (max relative L2, max abs error / max |w|): about 2x the error of each format on a
    # normal-distributed tensor, so an ordinary weight passes and an outlier-heavy one
    # (whose range the grid must stretch over) falls back
    "int8": (0.02, 0.01),
    "int8-affine": (0.02, 0.01),
    "uint8-affine": (0.02, 0.01),
    # 4-bit linear: ~0.09 relative L2 per block of 32 normal values, each error at most half a
    # step (1/14 of the block's range)
    "int4": (0.2, 0.15),
    "int4-affine": (0.2, 0.15),
    "uint4-affine": (0.2, 0.15),
    # k-means spends its entries where the values are, so a LUT's worst element (an
    # outlier of a large tensor) is far off even when the tensor is well kept
    "lut8": (0.025, 0.3),
    "lut6": (0.06, 0.6),
    "lut4": (0.2, 0.75),
    "lut2": (0.6, 1.0),
    "lut1": (0.9, 1.0),
    "fp16": (math.inf, math.inf),
}


@dataclass(frozen=True)
class Rule:
    """``chain:glob``: the formats tried in order for the weights ``glob`` matches."""

    chain: tuple[Format, ...]
    glob: str
    auto: bool = False
    """``auto``: narrowed to the target's streamed formats (:func:`for_target`)."""

    def matches(self, key: str) -> bool:
        return fnmatch.fnmatchcase(key, self.glob)


@dataclass(frozen=True)
class Spec:
    """A parsed ``--compress`` SPEC: rules (first match wins) and the gate."""

    rules: tuple[Rule, ...]
    gate: Gate = Gate()
    text: str = ""

    def rule_for(self, key: str) -> Rule | None:
        return next((r for r in self.rules if r.matches(key)), None)


AUTO_CHAIN: tuple[str, ...] = ("lut4", "int8", "fp16")
"""``auto``: the most compact format first; :func:`for_target` keeps those the target streams."""


def streamed(fmt: Format, target: Any) -> bool:
    """Whether ``target`` is reported to read ``fmt`` natively (ANE-COMPRESSED-STREAMING); a
    linear weight written as constexpr_blockwise_shift_scale (4-bit, per block, or
    ``--compress-form blockwise``) is the kind ``blockwise``, which no profile streams."""
    kind = "lut" if fmt.kind == "lut" else "int8" if fmt.kind == "linear" else None
    if kind == "int8" and (fmt.blockwise or (getattr(target, "int8_form", "affine") == "blockwise"
                                             and getattr(target, "mil_dialect", "ios18") == "ios18")):
        kind = "blockwise"  # constexpr_blockwise_shift_scale: reported dequantized in the program
    return kind is None or kind in getattr(target, "streamed_weights", ("lut", "int8"))


def for_target(spec: "Spec | None", target: Any) -> "Spec | None":
    """``spec`` with every ``auto`` rule narrowed to the formats ``target`` streams
    (ANE-COMPRESSED-STREAMING): ``lut4 -> int8 -> fp16`` on M2 and later, ``lut4 -> fp16``
    on M1, which is reported to decompress int8 at load."""
    if spec is None or not any(r.auto for r in spec.rules):
        return spec
    rules = tuple(Rule(tuple(f for f in r.chain if streamed(f, target)), r.glob, False) if r.auto else r
                  for r in spec.rules)
    return Spec(rules, spec.gate, spec.text)


def not_streamed_warning(fmt: Format, target: Any) -> str | None:
    """The warning for a weight stored in a format ``target`` does not stream, or None."""
    if streamed(fmt, target):
        return None
    return (f"{fmt.name} is not read natively on {target.name} (ANE-COMPRESSED-STREAMING): the device is "
            "reported to decompress it when loading, so the file is smaller but no bandwidth is saved; "
            "--compress auto picks the formats this target streams")


def parse_spec(spec: "str | Spec | None", gate: Gate | None = None) -> Spec | None:
    """``'lut4:h.*.mlp.*,int8:*'`` -> :class:`Spec`; AnecError naming the bad item. ``auto``
    is ``lut4 -> int8 -> fp16`` narrowed to what the target streams (:func:`for_target`)."""
    if spec is None or isinstance(spec, Spec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise AnecError("--compress needs a SPEC", hint="e.g. --compress int8 or --compress 'lut4:h.*.mlp.*,int8:*'")
    rules = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        fmt_text, _, glob = item.partition(":")
        glob = glob.strip() or "*"
        names = [n.strip() for n in fmt_text.split(">") if n.strip()]
        if not names:
            raise AnecError(f"--compress item '{item}' names no format", hint="write FORMAT[:GLOB], e.g. int8:h.*")
        if names == ["auto"]:
            rules.append(Rule(tuple(FORMATS[n] for n in AUTO_CHAIN), glob, True))
            continue
        if "auto" in names:
            raise AnecError(f"--compress item '{item}': auto is a chain of its own",
                            hint="write auto:GLOB, or list formats: lut4>int8:GLOB")
        chain = [get_format(n) for n in names]
        if len(names) == 1:  # the default fallbacks (4-bit linear: int8 too)
            fb = DEFAULT_FALLBACK["lut" if chain[0].kind == "linear" and chain[0].bits == 4 else chain[0].kind]
            chain += [FORMATS[n] for n in fb]
        elif chain[-1].kind != "none":
            chain.append(FORMATS["fp16"])
        rules.append(Rule(tuple(chain), glob))
    if not rules:
        raise AnecError("--compress names no format", hint="e.g. --compress int8")
    return Spec(tuple(rules), gate or Gate(), spec)


# ---------------------------------------------------------------------------
# quantizers (numpy; byte-stable)


def quantize_linear(w: np.ndarray, axis: int, fmt: Format) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(q, scale, zero_point)`` per output channel along ``axis`` (:func:`quantize_linear_numpy`;
    an fp16 tensor in one C pass when the runtime extension is built, with the same result)."""
    got = _linear_native(w, axis, fmt)
    if got is not None:
        return got[0]
    return quantize_linear_numpy(w, axis, fmt)


_QUANT_MODES = {("int8", False): 0, ("int8", True): 1, ("uint8", True): 2}
"""(storage, affine) -> the C kernel's ANEC_QUANT_* mode."""


def _linear_native(w: Any, axis: int, fmt: Format) -> "tuple[tuple[np.ndarray, np.ndarray, np.ndarray | None], dict] | None":
    """:func:`quantize_linear_numpy` of an fp16 tensor by the C kernel (csrc/host_compress.c),
    with the gate's error sums: ``((q, scale, zero_point), stats)``; None without the
    runtime extension, for another dtype, or for what the kernel leaves to numpy (NaN or
    infinite weights, a scale below fp16's range)."""
    w = np.asarray(w)
    mode = _QUANT_MODES.get((fmt.storage, fmt.affine))
    if w.dtype != np.float16 or mode is None or fmt.block or w.size == 0 or w.ndim == 0:
        return None
    from anec.runtime import native

    if not native.available():
        return None
    ffi, lib = native.ffi, native.lib
    w = np.ascontiguousarray(w)
    c = w.shape[axis]
    outer, inner = math.prod(w.shape[:axis]), math.prod(w.shape[axis + 1:])
    q = np.empty(w.shape, np.int8 if fmt.signed else np.uint8)
    scale = np.empty(c, np.float16)
    zp = np.empty(c, q.dtype) if fmt.affine else None
    e2, n2 = np.empty(c, np.float64), np.empty(c, np.float64)
    mx = ffi.new("float[2]")
    rc = lib.anec_quantize_linear8(
        ffi.from_buffer("uint16_t[]", w.view(np.uint16).reshape(-1)), outer, c, inner, mode,
        ffi.from_buffer("uint8_t[]", q.reshape(-1).view(np.uint8), require_writable=True),
        ffi.from_buffer("uint16_t[]", scale.view(np.uint16), require_writable=True),
        ffi.from_buffer("uint8_t[]", zp.view(np.uint8), require_writable=True) if zp is not None else ffi.NULL,
        ffi.from_buffer("double[]", e2, require_writable=True), ffi.from_buffer("double[]", n2, require_writable=True),
        mx, mx + 1)
    if rc not in (0, 1):
        return None
    return (q, scale, zp), {"err_sq": e2, "norm_sq": n2, "max_err": float(mx[0]), "max_w": float(mx[1]),
                            "finite": rc == 0}


def _errors_native(w: np.ndarray, d: np.ndarray, axis: int) -> dict | None:
    """The gate's error sums of the decompressed ``d`` against ``w`` (both fp16) by the C
    kernel, summed as :func:`_linear_native` sums them; None without the runtime extension,
    for another dtype, or for non-finite weights (numpy decides those)."""
    if w.dtype != np.float16 or d.dtype != np.float16 or w.size == 0 or w.ndim == 0:
        return None
    from anec.runtime import native

    if not native.available():
        return None
    ffi, lib = native.ffi, native.lib
    w, d = np.ascontiguousarray(w), np.ascontiguousarray(d)
    c = w.shape[axis]
    e2, n2 = np.empty(c, np.float64), np.empty(c, np.float64)
    mx = ffi.new("float[2]")
    rc = lib.anec_dense_errors(ffi.from_buffer("uint16_t[]", w.view(np.uint16).reshape(-1)),
                               ffi.from_buffer("uint16_t[]", d.view(np.uint16).reshape(-1)),
                               math.prod(w.shape[:axis]), c, math.prod(w.shape[axis + 1:]),
                               ffi.from_buffer("double[]", e2, require_writable=True),
                               ffi.from_buffer("double[]", n2, require_writable=True), mx, mx + 1)
    if rc not in (0, 1):
        return None
    return {"err_sq": e2, "norm_sq": n2, "max_err": float(mx[0]), "max_w": float(mx[1]), "finite": rc == 0}


def quantize_linear_numpy(w: np.ndarray, axis: int, fmt: Format) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(q, scale, zero_point)`` per output channel along ``axis``, in numpy.

    The arithmetic of coremltools' ``linear_quantize_weights`` (per channel), in the
    tensor's own float dtype: symmetric int8 has range [-127, 127] and scale
    ``2 max|w| / 254`` (int4: [-7, 7]); affine has range [qmin, qmax], a range widened to
    hold 0 and a rounded, clipped zero point. A channel of zeros gets scale 1 (coremltools
    would divide by zero). 4-bit formats and ``/bB`` ones have a scale per block
    (coremltools' ``per_block``): per output channel and per ``B`` input channels
    (:func:`input_axis`); their scale and zero point have the weight's rank.
    """
    w = np.asarray(w)
    if w.dtype not in (np.float16, np.float32):
        w = w.astype(np.float32)
    shape = w.shape
    if fmt.blockwise:
        ia = input_axis(axis, w.ndim)
        blk = fmt.block or shape[ia]
        new: list[int] = []
        keep = []
        for d, n in enumerate(shape):
            if d == axis:
                keep.append(len(new))
                new.append(n)
            elif d == ia:
                keep.append(len(new))
                new += [n // blk, blk]
            else:
                new.append(n)
        w = w.reshape(new)
        axes = tuple(d for d in range(len(new)) if d not in keep)
        sshape = scale_shape(fmt, axis, shape)
    else:
        axes = tuple(d for d in range(w.ndim) if d != axis)
    dt = w.dtype
    w32 = w.astype(np.float32)  # every fp16 value exactly
    lo = np.amin(w32, axis=axes, keepdims=True).astype(dt)
    hi = np.amax(w32, axis=axes, keepdims=True).astype(dt)
    half = 1 << (fmt.bits - 1)
    if fmt.signed:
        qmin, qmax = (-half + 1, half - 1) if not fmt.affine else (-half, half - 1)
    else:
        qmin, qmax = 0, 2 * half - 1
    zp = None
    if not fmt.affine:
        m = np.maximum(np.abs(lo), np.abs(hi))
        lo, hi = -m, m
    else:
        lo = np.minimum(lo.dtype.type(0), lo)
        hi = np.maximum(hi.dtype.type(0), hi)
    # numpy's fp16 arithmetic (coremltools' on fp16 weights) is each op in fp32, rounded to
    # fp16: the same here, with the fp32 ops vectorized
    span = (hi.astype(np.float32) - lo.astype(np.float32)).astype(dt)
    scale = (span.astype(np.float32) / np.float32(qmax - qmin)).astype(dt)
    scale = np.where(span == 0, dt.type(1), scale).astype(dt)
    w32 /= scale.astype(np.float32)
    q = np.round(w32.astype(dt).astype(np.float32) if dt != np.float32 else w32, out=w32)
    if fmt.affine:
        with np.errstate(invalid="ignore", divide="ignore"):
            z = (qmin * hi - qmax * lo) / span
        z = np.clip(np.round(np.where(span == 0, 0, z)), qmin, qmax)
        q += z.astype(np.float32)  # integers below 2048: exact, as in fp16
        zp = z.reshape(-1).astype(np.int8 if fmt.signed else np.uint8)
    q = np.clip(q, qmin, qmax, out=q).astype(np.int8 if fmt.signed else np.uint8)
    if fmt.blockwise:
        return q.reshape(shape), scale.reshape(sshape).astype(np.float16), None if zp is None else zp.reshape(sshape)
    return q, scale.reshape(-1).astype(np.float16), zp


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


def kmeans_1d(values: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` centroids (float64, ascending) of the optimal 1-D k-means of ``values``:
    the partition of the sorted distinct values into ``k`` runs with the least squared error,
    by dynamic programming over the distinct values weighted by their counts (an fp16
    tensor has at most 63,488 of them). The row minima of each step are found by divide and
    conquer (the best split point never moves left as the run end moves right), vectorized
    one recursion level at a time. Exact, hence deterministic: ties take the leftmost split.
    Fewer distinct values than ``k``: each is a centroid, the rest repeat the largest."""
    return kmeans_1d_many([values], k)[0]


def kmeans_1d_many(groups: Sequence[np.ndarray], k: int, exact: bool = False) -> list[np.ndarray]:
    """:func:`kmeans_1d` of each array of ``groups``, all solved together: every step of the
    dynamic program and every level of its divide and conquer is one set of numpy calls over
    all the groups (the channel groups of a grouped LUT), whatever their number.

    The work grows with the distinct values of all the groups together. Above
    :data:`EXACT_DISTINCT` of them (channel groups of a large tensor, whose values are
    nearly all distinct) each group's values are first merged into :data:`BINS` equal-width
    bins (weighted means), the program is solved exactly on those, and Lloyd steps on the
    real values refine the result (each step lowers the error or keeps it)."""
    out: list[np.ndarray | None] = [None] * len(groups)
    big = []
    for g, values in enumerate(groups):
        v, w = _distinct(values if isinstance(values, _Weighted) else np.asarray(values))
        if v.size == 0:
            out[g] = np.zeros(k)
        elif v.size <= k:
            out[g] = np.concatenate([v, np.full(k - v.size, v[-1])])
        else:
            big.append((g, v, w.astype(np.float64)))
    if not big:
        return out  # type: ignore[return-value]
    if not exact and sum(v.size for _, v, _ in big) > EXACT_DISTINCT:
        binned = [(g, *_binned(v, w)) for g, v, w in big]
        coarse = kmeans_1d_many([_Weighted(v, w) for _, v, w in binned], k, exact=True)
        for (g, v, w), c in zip(big, coarse):
            out[g] = _lloyd(v, w, c)
        return out  # type: ignore[return-value]
    native = _kmeans_native(big, k)
    if native is not None:
        for (g, _, _), c in zip(big, native):
            out[g] = c
        return out  # type: ignore[return-value]
    return _kmeans_numpy(big, k, out)


def _kmeans_native(big: list, k: int) -> list[np.ndarray] | None:
    """The exact program of each group of ``big`` ((index, values, weights)) by the C kernel
    (csrc/host_compress.c: the same arithmetic and search, so the same centroids); None
    without the runtime extension."""
    from anec.runtime import native

    if not native.available():
        return None
    ffi, lib = native.ffi, native.lib
    res = []
    for _, v, w in big:
        v, w = np.ascontiguousarray(v, np.float64), np.ascontiguousarray(w, np.float64)
        c = np.empty(k, np.float64)
        rc = lib.anec_kmeans_1d(ffi.from_buffer("double[]", v), ffi.from_buffer("double[]", w), v.size, k,
                                ffi.from_buffer("double[]", c, require_writable=True))
        if rc != 0:
            return None
        res.append(c)
    return res


def _kmeans_numpy(big: list, k: int, out: list) -> list[np.ndarray]:
    """The exact program of :func:`kmeans_1d_many` for the groups ``big`` in numpy, all at once."""
    # slots: group g's prefixes t = 0..n_g at base_g + t (prefix sums restart in each group)
    sizes = np.array([v.size for _, v, _ in big])
    base = np.concatenate([[0], np.cumsum(sizes + 1)[:-1]])

    def prefix(f) -> np.ndarray:
        return np.concatenate([np.concatenate([[0.0], np.cumsum(f(v, w))]) for _, v, w in big])

    W = prefix(lambda v, w: w)
    S1 = prefix(lambda v, w: w * v)
    S2 = prefix(lambda v, w: w * v * v)

    def cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # squared error of run [a, b) of one group
        ww = W[b] - W[a]
        s = S1[b] - S1[a]
        with np.errstate(invalid="ignore", divide="ignore"):  # a = b (an empty run) is never chosen
            return np.maximum(S2[b] - S2[a] - s * s / ww, 0.0)

    total = W.size
    owner_base = np.repeat(base, sizes + 1)
    prev = cost(owner_base, np.arange(total))  # one run: [0, t)
    prev[base] = np.inf
    splits = []
    for j in range(1, k):
        # D_j[t] = min over m in [j, t-1] of D_{j-1}[m] + cost(m, t), for t in [j+1, n_g]
        cur = np.full(total, np.inf)
        arg = np.zeros(total, np.int64)
        lo, hi = base + j + 1, base + sizes
        olo, ohi = base + j, base + sizes - 1
        while lo.size:
            mid = (lo + hi) // 2
            top = np.minimum(ohi, mid - 1)
            cnt = top - olo + 1
            rows = np.repeat(np.arange(mid.size), cnt)
            start = np.repeat(np.cumsum(cnt) - cnt, cnt)
            m = olo[rows] + (np.arange(rows.size) - start)
            val = prev[m] + cost(m, mid[rows])
            best = np.minimum.reduceat(val, np.cumsum(cnt) - cnt)
            first = np.flatnonzero(val == best[rows])  # the leftmost minimum of each row
            keep = np.concatenate([[True], rows[first][1:] != rows[first][:-1]])
            bm = m[first[keep]]
            cur[mid] = best
            arg[mid] = bm
            left = mid - 1 >= lo
            right = mid + 1 <= hi
            lo, hi, olo, ohi = (np.concatenate([lo[left], mid[right] + 1]),
                                np.concatenate([mid[left] - 1, hi[right]]),
                                np.concatenate([olo[left], bm[right]]),
                                np.concatenate([bm[left], ohi[right]]))
        splits.append(arg)
        prev = cur
    ends = base + sizes
    bounds = [ends]
    for arg in reversed(splits):
        bounds.append(arg[bounds[-1]])
    bounds.append(base)
    b = np.stack(bounds[::-1], axis=1)  # [groups, k + 1] slots
    cents = (S1[b[:, 1:]] - S1[b[:, :-1]]) / (W[b[:, 1:]] - W[b[:, :-1]])
    for (g, _, _), c in zip(big, cents):
        out[g] = c
    return out  # type: ignore[return-value]


EXACT_DISTINCT = 1 << 17
"""Distinct values (over all the groups of one call) up to which :func:`kmeans_1d_many` is exact."""
BINS = 1024
"""Bins per group above :data:`EXACT_DISTINCT`."""


class _Weighted:
    """Distinct values with their weights, as :func:`_distinct` returns them (already merged)."""

    def __init__(self, v: np.ndarray, w: np.ndarray) -> None:
        self.v, self.w = v, w


def _binned(v: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted values ``v`` of weights ``w`` merged into at most :data:`BINS` equal-width bins
    (each the weighted mean of its values, with their total weight)."""
    if v.size <= BINS:
        return v, w
    edges = np.linspace(v[0], v[-1], BINS + 1)[1:-1]
    b = np.searchsorted(edges, v, side="right")
    starts = np.flatnonzero(np.concatenate([[True], b[1:] != b[:-1]]))
    ws = np.add.reduceat(w, starts)
    return np.add.reduceat(w * v, starts) / ws, ws


def _lloyd(v: np.ndarray, w: np.ndarray, c: np.ndarray, steps: int = 8) -> np.ndarray:
    """``steps`` Lloyd steps of centroids ``c`` on sorted values ``v`` of weights ``w``."""
    W = np.concatenate([[0.0], np.cumsum(w)])
    S = np.concatenate([[0.0], np.cumsum(w * v)])
    c = np.sort(np.asarray(c, dtype=np.float64))
    for _ in range(steps):
        cuts = np.searchsorted(v, (c[1:] + c[:-1]) / 2, side="left")
        b = np.concatenate([[0], cuts, [v.size]])
        cnt = W[b[1:]] - W[b[:-1]]
        new = np.where(cnt > 0, (S[b[1:]] - S[b[:-1]]) / np.where(cnt > 0, cnt, 1), c)
        if np.array_equal(new, c):
            break
        c = np.sort(new)
    return c


def _distinct(a: "np.ndarray | _Weighted") -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of ``a`` (ascending, float64) and their counts; fp16 by a
    histogram of the bit patterns (one pass, no sort of the tensor)."""
    if isinstance(a, _Weighted):
        return a.v, a.w
    if a.dtype == np.float16:
        counts = np.bincount(np.ascontiguousarray(a).reshape(-1).view(np.uint16), minlength=1 << 16)
        bits = np.flatnonzero(counts)
        vals = bits.astype(np.uint16).view(np.float16).astype(np.float64)
        order = np.argsort(vals, kind="stable")
        vals, cnt = vals[order], counts[bits][order]
        v, first = np.unique(vals, return_index=True)  # -0.0 and 0.0 are one value
        return v, np.add.reduceat(cnt, first)
    return np.unique(a.astype(np.float64).reshape(-1), return_counts=True)


def _lut_one(w: np.ndarray, bits: int, c: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One fp16 table of 2^bits entries for ``w`` (its k-means centroids ``c``, computed when
    not given) and each element's index (the nearest entry)."""
    k = 1 << bits
    c = np.sort((kmeans_1d(w, k) if c is None else c).astype(np.float16))  # rounding keeps the order
    cf = c.astype(np.float64)
    mids = (cf[1:] + cf[:-1]) / 2
    if w.dtype == np.float16 and w.size > 1 << 16:  # the index of every fp16 bit pattern, then a gather
        table = np.searchsorted(mids, _ALL_FP16, side="left").astype(np.uint8)
        return c, table[np.ascontiguousarray(w).view(np.uint16)].reshape(w.shape)
    idx = np.searchsorted(mids, w.astype(np.float64).reshape(-1), side="left")
    return c, idx.astype(np.uint8).reshape(w.shape)


with np.errstate(invalid="ignore"):
    _ALL_FP16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
"""Every fp16 bit pattern's value (NaN patterns never occur in a weight the gate accepts)."""


def quantize_lut(w: np.ndarray, axis: int, fmt: Format) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, lut)``: indices in ``w``'s shape (uint8 values < 2^bits); lut of shape
    ``[groups, 2^bits]`` (groups of ``fmt.group`` channels along ``axis``, or 1)."""
    w = np.asarray(w)
    if not fmt.group:
        lut, idx = _lut_one(w, fmt.bits)
        return idx, lut.reshape(1, -1)
    c = w.shape[axis]
    moved = np.moveaxis(w, axis, 0)
    g = fmt.group
    idx = np.empty(moved.shape, np.uint8)
    luts = []
    blocks = [moved[i * g:(i + 1) * g] for i in range(c // g)]
    for i, (block, cents) in enumerate(zip(blocks, kmeans_1d_many(blocks, 1 << fmt.bits))):
        lut, ix = _lut_one(block, fmt.bits, cents)
        idx[i * g:(i + 1) * g] = ix
        luts.append(lut)
    return np.moveaxis(idx, 0, axis), np.stack(luts)


# ---------------------------------------------------------------------------
# sub-byte packing (MILBlob: LSB first, element 0 in the low bits of byte 0)


# ---------------------------------------------------------------------------
# one tensor


@dataclass
class Compressed:
    """A tensor in one format: its parts (role -> array) and the error it makes."""

    fmt: Format
    axis: int
    shape: tuple[int, ...]
    parts: dict[str, np.ndarray]
    """``linear``: q (the shape), scale [C], zero_point [C] (affine); ``lut``: indices (the
    shape, values < 2^bits), lut [groups, 2^bits]."""
    rel_l2: float = 0.0
    """||w - w'|| / ||w|| over the tensor."""
    max_abs: float = 0.0
    rel_abs: float = 0.0
    """max |w - w'| / max |w|."""
    channel_rel_l2: float = 0.0
    """The worst output channel's relative L2 error (what the gate checks)."""
    worst_channel: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes of the payloads (sub-byte payloads packed)."""
        total = 0
        for role, a in self.parts.items():
            sub = role == "indices" or (role in ("q", "zero_point") and self.fmt.bits < 8)
            bits = self.fmt.bits if sub else a.dtype.itemsize * 8
            total += (a.size * bits + 7) // 8
        return total


def decompress(fmt: Format, axis: int, shape: Sequence[int], parts: Mapping[str, np.ndarray]) -> np.ndarray:
    """The fp16 tensor ``parts`` encode (numpy; the reference for the simulator's C)."""
    shape = tuple(int(d) for d in shape)
    rank = len(shape)
    bshape = [1] * rank
    bshape[axis] = shape[axis]
    if fmt.kind == "linear":
        q = np.asarray(parts["q"]).reshape(shape).astype(np.float32)
        if fmt.blockwise:  # scales of the weight's rank: each repeated over its block
            sshape = scale_shape(fmt, axis, shape)

            def expand(a: np.ndarray) -> np.ndarray:
                a = np.asarray(a).reshape(sshape)
                for d in range(rank):
                    if a.shape[d] != shape[d]:
                        a = np.repeat(a, shape[d] // a.shape[d], axis=d)
                return a.astype(np.float32)
            if "zero_point" in parts:
                q = q - expand(parts["zero_point"])
            return (q * expand(parts["scale"])).astype(np.float16)
        if "zero_point" in parts:
            q = q - np.asarray(parts["zero_point"]).astype(np.float32).reshape(bshape)
        scale = np.asarray(parts["scale"]).astype(np.float32).reshape(bshape)
        return (q * scale).astype(np.float16)
    if fmt.kind == "lut":
        lut = np.asarray(parts["lut"], dtype=np.float16)
        if lut.shape[0] == 1:  # one table: a gather
            return lut.reshape(-1)[np.asarray(parts["indices"]).reshape(shape)]
        idx = np.asarray(parts["indices"]).reshape(shape).astype(np.int64)
        groups = lut.shape[0]
        per = shape[axis] // groups
        ch = np.arange(shape[axis]) // per
        gshape = [1] * rank
        gshape[axis] = shape[axis]
        g = np.broadcast_to(ch.reshape(gshape), shape)
        return lut[g, idx]
    raise ValueError(f"format {fmt.name} is not compressed")


def compress_tensor(w: np.ndarray, fmt: Format, axis: int) -> Compressed:
    """``w`` (float) in ``fmt``, with its error against ``w``."""
    w = np.asarray(w)
    native = _linear_native(w, axis, fmt) if fmt.kind == "linear" else None
    if native is not None:  # the values and the error sums in one C pass
        (q, scale, zp), st = native
        parts = {"q": q, "scale": scale, **({"zero_point": zp} if zp is not None else {})}
        c = Compressed(fmt, axis, tuple(w.shape), parts)
        if not st["finite"]:
            c.rel_l2 = c.max_abs = c.rel_abs = c.channel_rel_l2 = math.inf
            return c
        _set_errors(c, st["err_sq"], st["norm_sq"], st["max_err"], st["max_w"])
        return c
    if fmt.kind == "linear":
        q, scale, zp = quantize_linear(w, axis, fmt)
        parts = {"q": q, "scale": scale}
        if zp is not None:
            parts["zero_point"] = zp
    elif fmt.kind == "lut":
        idx, lut = quantize_lut(w, axis, fmt)
        parts = {"indices": idx, "lut": lut}
    else:
        raise ValueError(f"format {fmt.name} is not compressed")
    c = Compressed(fmt, axis, tuple(w.shape), parts)
    d = decompress(fmt, axis, w.shape, parts)
    st = _errors_native(w, d, axis)
    if st is not None:
        if not st["finite"]:
            c.rel_l2 = c.max_abs = c.rel_abs = c.channel_rel_l2 = math.inf
        else:
            _set_errors(c, st["err_sq"], st["norm_sq"], st["max_err"], st["max_w"])
        return c
    if not np.all(np.isfinite(d)):
        c.rel_l2 = c.max_abs = c.rel_abs = c.channel_rel_l2 = math.inf
        return c
    ref = np.moveaxis(w.astype(np.float32), axis, 0).reshape(w.shape[axis], -1)
    err = np.moveaxis(d.astype(np.float32), axis, 0).reshape(ref.shape)
    err -= ref
    # per output channel sums of squares (float32 products, float64 totals)
    e_ch = np.einsum("ij,ij->i", err, err).astype(np.float64)
    n_ch = np.einsum("ij,ij->i", ref, ref).astype(np.float64)
    _set_errors(c, e_ch, n_ch, float(np.max(np.abs(err))) if err.size else 0.0,
                float(np.max(np.abs(ref))) if ref.size else 0.0)
    return c


def _set_errors(c: Compressed, e_ch: np.ndarray, n_ch: np.ndarray, max_err: float, top: float) -> None:
    """The gate's errors of ``c`` from per-channel sums of squared errors and of squared
    values, the largest absolute error and the largest |w|."""
    norm = float(np.sqrt(n_ch.sum()))
    c.rel_l2 = float(np.sqrt(e_ch.sum())) / norm if norm > 0 else float(e_ch.sum() > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel_ch = np.where(n_ch > 0, np.sqrt(e_ch / np.where(n_ch > 0, n_ch, 1)), np.where(e_ch > 0, np.inf, 0.0))
    if rel_ch.size:
        c.worst_channel = int(np.argmax(rel_ch))
        c.channel_rel_l2 = float(rel_ch[c.worst_channel])
    c.max_abs = max_err
    c.rel_abs = c.max_abs / top if top > 0 else float(c.max_abs > 0)


# ---------------------------------------------------------------------------
# per weight const


@dataclass
class Decision:
    """What the compile does with one weight const."""

    key: str
    fmt: Format
    """The format used (``fp16``: stored as it is)."""
    requested: str
    axis: int
    shape: tuple[int, ...]
    compressed: Compressed | None = None
    """The parts (None without weights, ``anec mil``, and for fp16)."""
    fallbacks: list[dict] = field(default_factory=list)
    """Each format tried and rejected: {format, reason, rel_l2, rel_abs}."""
    warning: str | None = None
    """Set when the target does not stream the format used (ANE-COMPRESSED-STREAMING)."""

    def part_types(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """(role, BLOBFILE dtype, shape) of each payload, in MIL argument order."""
        rank = len(self.shape)
        c = self.shape[self.axis]
        f = self.fmt
        if f.kind == "linear":
            sshape = scale_shape(f, self.axis, self.shape)
            out = [("q", f.storage, self.shape), ("scale", "fp16", sshape)]
            if f.affine:
                out.append(("zero_point", f.storage, sshape))
            return out
        if f.kind == "lut":
            groups = c // f.group if f.group else 1
            return [("indices", f.storage, self.shape), ("lut", "fp16", (groups, 1 << f.bits))]
        return []

    def report(self) -> dict:
        d = {"key": self.key, "format": self.fmt.name, "requested": self.requested, "axis": self.axis,
             "dense_bytes": int(math.prod(self.shape)) * 2}
        if self.compressed is not None:
            c = self.compressed
            d.update(bytes=c.nbytes, rel_l2=_num(c.rel_l2), max_abs=_num(c.max_abs), rel_abs=_num(c.rel_abs),
                     channel_rel_l2=_num(c.channel_rel_l2))
        elif self.fmt.kind == "none":
            d["bytes"] = d["dense_bytes"]
        else:  # no weights: the payload sizes follow from the format and the shape alone
            from anec.mil.blobfile import payload_bytes

            d["bytes"] = sum(payload_bytes(dt, math.prod(shape)) for _, dt, shape in self.part_types())
        if self.fallbacks:
            d["fallbacks"] = self.fallbacks
        if self.warning:
            d["warning"] = self.warning
        return d


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else str(v)


def weight_axis(graph: "Graph", node: "Node") -> int | None:
    """The output-channel axis of a weight const a conv or matmul reads, or None when no
    conv/matmul reads it (then it is not compressed)."""
    r = node.result
    rank = r.type.rank
    if rank < 2:
        return None
    axis = None
    for user in r.uses:
        if user.op.startswith("conv") and user.operands and len(user.operands) > 1 and user.operands[1] is r:
            a = 0
        elif user.op == "matmul":
            ty = bool(user.attrs.get("transpose_y", False))
            tx = bool(user.attrs.get("transpose_x", False))
            if len(user.operands) > 1 and user.operands[1] is r:
                a = rank - 2 if ty else rank - 1
            else:
                a = rank - 1 if tx else rank - 2
        else:
            return None
        if axis is not None and a != axis:
            return None
        axis = a
    return axis


def _allowed(fmt: Format, shape: tuple[int, ...], axis: int, dialect: str) -> str | None:
    """Why ``fmt`` cannot store a tensor of ``shape`` in ``dialect`` (None: it can)."""
    if fmt.blockwise:
        if dialect == "ios16":
            return "the ios16 constexpr_affine_dequantize has no 4-bit or per-block form"
        ia = input_axis(axis, len(shape))
        if fmt.block and shape[ia] % fmt.block:
            return f"{shape[ia]} input channels do not split into blocks of {fmt.block}"
    if fmt.kind == "lut" and fmt.group:
        if dialect == "ios16":
            return "the ios16 constexpr_lut_to_dense has one table per tensor (no grouped LUT)"
        if shape[axis] % fmt.group:
            return f"{shape[axis]} output channels do not split into groups of {fmt.group}"
    return None


def decide(graph: "Graph", spec: Spec, store: Mapping[str, np.ndarray] | None, dialect: str,
           materialize_fn=None, target: Any = None) -> dict[int, Decision]:
    """id(const node) -> :class:`Decision` for every weight const ``spec`` matches.

    With ``store`` every format is tried in the rule's order and the first whose
    result passes the gate is kept; without one (MIL only) the first allowed format
    is taken as it is.
    """
    from anec.ir.weight_binding import materialize

    mat = materialize_fn or materialize
    if target is not None:
        spec = for_target(spec, target)
    out: dict[int, Decision] = {}
    cache: dict[tuple, Decision] = {}
    for n in graph.nodes:
        if n.op != "const" or "weight" not in n.attrs:
            continue
        key = n.attrs["weight"]
        rule = spec.rule_for(key)
        if rule is None:
            continue
        t = n.result.type
        if t.dtype != DType.fp16:  # compressed weights decompress to fp16
            continue
        axis = weight_axis(graph, n)
        if axis is None:
            continue
        view = (key, tuple(n.attrs.get("perm") or ()), tuple(n.attrs.get("slice") or ()), t.shape, axis)
        if view in cache:
            out[id(n)] = cache[view]
            continue
        arr = None
        if store is not None:
            arr = np.asarray(mat(n, store, copy=False)).astype(np.float16)
        fallbacks: list[dict] = []
        chosen: Decision | None = None
        for fmt in rule.chain:
            why = _allowed(fmt, t.shape, axis, dialect)
            if why is not None:
                fallbacks.append({"format": fmt.name, "reason": why})
                continue
            if fmt.kind == "none":
                chosen = Decision(key, fmt, rule.chain[0].name, axis, t.shape)
                break
            if arr is None:
                chosen = Decision(key, fmt, rule.chain[0].name, axis, t.shape)
                break
            c = compress_tensor(arr, fmt, axis)
            max_rel, max_abs = spec.gate.limits(fmt)
            if not math.isfinite(c.rel_l2):
                why = "the dequantized tensor is not finite in fp16 (ANE-FP16-RANGE)"
            elif c.rel_l2 > max_rel:
                why = f"relative L2 error {c.rel_l2:.4g} > {max_rel:g}"
            elif c.channel_rel_l2 > max_rel:
                why = (f"relative L2 error of output channel {c.worst_channel} {c.channel_rel_l2:.4g} > {max_rel:g} "
                       f"(the tensor's is {c.rel_l2:.4g})")
            elif c.rel_abs > max_abs:
                why = f"max abs error {c.max_abs:.4g} is {c.rel_abs:.4g} of max|w|, > {max_abs:g}"
            else:
                chosen = Decision(key, fmt, rule.chain[0].name, axis, t.shape, c)
                break
            fallbacks.append({"format": fmt.name, "reason": why, "rel_l2": _num(c.rel_l2),
                              "rel_abs": _num(c.rel_abs)})
        if chosen is None:
            chosen = Decision(key, FORMATS["fp16"], rule.chain[0].name, axis, t.shape)
        chosen.fallbacks = fallbacks
        if target is not None:
            chosen.warning = not_streamed_warning(chosen.fmt, target)
        cache[view] = chosen
        out[id(n)] = chosen
    return out


def report_summary(reports: Iterable[Mapping[str, Any]]) -> str:
    """``4 weights (int8 2, lut4 2), 9437184 -> 3545088 bytes (0.38x), 1 fell back`` from the
    manifest ``compression`` entries."""
    rs = list(reports)
    by: dict[str, int] = {}
    dense = comp = fell = 0
    for r in rs:
        by[r["format"]] = by.get(r["format"], 0) + 1
        dense += int(r.get("dense_bytes", 0))
        comp += int(r.get("bytes", r.get("dense_bytes", 0)))
        fell += bool(r.get("fallbacks"))
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(by.items()))
    return (f"{len(rs)} weights ({kinds}), {dense} -> {comp} bytes ({comp / max(dense, 1):.2f}x)"
            + (f", {fell} fell back" if fell else ""))


def fallback_lines(reports: Iterable[Mapping[str, Any]]) -> list[str]:
    """``fallback: h.0.mlp.c_fc.weight: lut2 -> int8 (lut2: relative L2 error 0.34 > 0.3)``."""
    out = []
    for r in reports:
        fb = r.get("fallbacks") or []
        if fb:
            why = "; ".join(f"{f['format']}: {f['reason']}" for f in fb)
            out.append(f"fallback: {r['key']}: {r['requested']} -> {r['format']} ({why})")
    warned = sorted({r["warning"] for r in reports if r.get("warning")})
    out += [f"warning: {w}" for w in warned]
    return out


def parts_from_blobs(entry_parts: Mapping[str, tuple[dict, np.ndarray]]) -> dict[str, np.ndarray]:
    """role -> array from (manifest part entry, 1-D payload read from its BLOBFILE)."""
    return {role: arr.reshape(e["shape"]) for role, (e, arr) in entry_parts.items()}


def format_of(part: Mapping[str, Any]) -> Format:
    return get_format(part["format"])
