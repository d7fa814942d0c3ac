"""Chip profiles: what each ANE generation accepts, with where each number comes from.

Every limit the compiler or the runtime enforces lives here, in one
:class:`Target` per chip family (``m1`` .. ``m5``), never as a constant
scattered through the code. ``sources`` maps each field to its evidence:

* a published on-device measurement (the Orion paper's catalog, measured on
  M4 Max; maderix/ANE benchmark reports),
* a community report (an issue or an unmerged pull request), or
* ``anec assumption`` when nothing was measured for that chip and we
  extrapolate from a neighbour. Assumptions are stated as such, so a reader
  with a device knows which numbers to check first.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from anec.diagnostics import AnecError, did_you_mean

MiB = 1024 * 1024


@dataclass(frozen=True)
class Target:
    """Limits of one ANE generation (see ``sources`` for the evidence)."""

    name: str
    """``"m1"`` .. ``"m5"``."""
    sram_bytes: int
    """On-chip SRAM; working sets above it spill to DRAM (~30% slower)."""
    max_blob_tensors: int
    """BLOBFILE-backed const tensors one program may reference."""
    scalar_penalty: int
    """The BLOBFILE cap drops by this much if any elementwise op takes a scalar const."""
    max_conv_out_channels: int
    """Largest conv channel count anec emits (larger convs are chunked)."""
    min_surface_bytes: int
    """Smallest I/O surface that evaluates; smaller ones fail at eval."""
    fp32_io: bool
    """Whether program inputs and outputs may be fp32 (cast on the device)."""
    one_file_per_weight: bool
    """Whether every BLOBFILE must hold exactly one tensor."""
    surface_alignment: int
    """I/O surface allocations are rounded up to a multiple of this (bytes)."""
    mil_dialect: str
    """``"ios18"`` (``program(1.3)``, every target's default) or ``"ios16"`` (``program(1.0)``,
    verbose scalars: the fallback chosen with ``--dialect ios16``)."""
    softmax_pow2_only: bool
    """Reject softmax over an axis whose size is not a power of two (reported claim)."""
    reduce_mean_as_sum: bool = True
    """Lower ``reduce_mean`` to ``reduce_sum`` times 1/N (reported claim)."""
    process_compile_budget: int = 119
    """Compiles the device accepts per process (ANE-COMPILE-BUDGET); the runtime refuses the
    next one, and the sim's device model fails it."""
    concat: str = "rewrite"
    """How concat is compiled (ANE-CONCAT, contested): ``"rewrite"`` (partial convs, else an
    error; the conservative reading and every profile's default) or ``"native"`` (a MIL
    concat: chosen with ``--concat native``, or from this Mac's selftest verdict)."""
    streamed_weights: tuple[str, ...] = ("lut", "int8", "sparse")
    """Compressed weight kinds the chip is reported to read natively (stream) rather than
    decompress at load (ANE-COMPRESSED-STREAMING): ``lut`` (constexpr_lut_to_dense),
    ``int8`` (8-bit linear as constexpr_affine_dequantize), ``sparse``
    (constexpr_sparse_to_dense; ANE-COMPRESSED-SPARSE), ``sparse-joint`` (sparse int8/LUT
    values through an iOS18 sparse-to-sparse op; on no profile), ``blockwise``
    (constexpr_blockwise_shift_scale: 4-bit and per-block linear; on no profile, as it is
    reported dequantized in the program). ``--compress auto`` picks from these; a format
    outside them still compiles, with a warning (a smaller file, no bandwidth saved)."""
    int8_form: str = "affine"
    """The MIL op an 8-bit linear weight is written with in the ios18 dialect
    (ANE-COMPRESSED-WEIGHTS): ``"affine"`` (``constexpr_affine_dequantize``, the form a
    published program runs in ``program(1.3)``; every profile's default) or ``"blockwise"``
    (``constexpr_blockwise_shift_scale``, iOS18's own op, reported not routable as a matmul
    weight). ``--compress-form`` picks the other; ios16 has only the affine op."""
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)
    """Field name -> where the value comes from."""

    def replace(self, **changes) -> "Target":
        """A copy with some fields changed (e.g. to try a reported switch)."""
        return dataclasses.replace(self, **changes)

    def blob_cap(self, has_scalar_operand: bool) -> int:
        """The BLOBFILE tensor cap for a program (with or without inline scalars)."""
        return self.max_blob_tensors - (self.scalar_penalty if has_scalar_operand else 0)

    def runtime_limits(self) -> dict[str, int | bool]:
        """The limits the runtime and the simulator enforce for a program of this target,
        as the artifact manifest's ``limits`` records them (the C ``anec_limits`` fields,
        plus ``sram_bytes``)."""
        return {
            "max_blob_tensors": self.max_blob_tensors,
            "scalar_penalty": self.scalar_penalty,
            "max_conv_out_channels": self.max_conv_out_channels,
            "min_surface_bytes": self.min_surface_bytes,
            "allow_fp32_io": self.fp32_io,
            "surface_alignment": self.surface_alignment,
            "sram_bytes": self.sram_bytes,
        }


# ---- evidence strings, shared by the profiles ---------------------------------------

_ORION_SRAM = (
    "Orion pass_sram (32 MB for M4) and the maderix hardware table; sram_probe on M4 Max "
    "first spills at 32 MB of weights (maderix PR #25)"
)
_ASSUME_SRAM = "anec assumption: no published measurement for this chip; same 32 MB as M4"
_BLOB = (
    "Orion community issue mechramc/Orion#3, measured on M4: 17 BLOBFILE tensors fail "
    "with InvalidMILProgram"
)
_ASSUME_BLOB = "anec assumption: measured on M4 only (mechramc/Orion#3); assumed the same"
_PENALTY = (
    "Orion community issue mechramc/Orion#3, measured on M4: a pow/add/mul with an inline "
    "scalar lowers the cap to 15 (does not stack)"
)
_ASSUME_PENALTY = _ASSUME_BLOB
_CHANNELS = (
    "anec assumption: 16384. Orion paper constraint 16 reports a 32K-channel conv rejected; "
    "maderix compiled a 32000-output-channel conv on M4 and saw 32000 input channels "
    "rejected. 16384 is the largest power of two safely below both reports, so it holds "
    "whichever report generalizes"
)
_SURFACE = (
    "Orion paper constraint 4 (T100), measured on M4 Max: surfaces below ~49 KB fail "
    "with status 0x1d"
)
_ASSUME_SURFACE = (
    "anec assumption: measured on M4 Max only (Orion constraint 4); assumed the same"
)
_FP32_IO_M1 = (
    "Orion repo, later revision (community report): fp32 program I/O rejected on "
    "M1-generation ANEs"
)
_FP32_IO_M2 = (
    "reported: maderix PR #6 (unmerged) says cast is unsupported on M1/M2, so I/O must be fp16"
)
_FP32_IO_OK = (
    "maderix benchmarks and Orion run fp32 I/O with device casts on M4; anec assumption "
    "for M3/M5"
)
_ONE_FILE_M1 = (
    "maderix benchmark report (issue #3 community results): multi-tensor single-blob weight "
    "files FAIL on M1; per-matrix blobs work"
)
_ONE_FILE_OK = (
    "maderix benchmark report: single-blob weights work on M3/M4/M5 (anec assumption for M2)"
)
_ALIGN_M5 = "reported: maderix PR #35 (unmerged) needs 128-byte IOSurface alignment on M5"
_ALIGN = "anec assumption: no alignment requirement reported; 64 bytes (a cache line) is harmless"
_DIALECT_NEW = (
    "maderix and Orion emit program(1.3)/<ios18>; the maderix compatibility matrix lists it "
    "for M3/M4/M5"
)
_DIALECT_M1M2 = (
    "maderix community results (benchmark report, issue #3): the static Stories110M training "
    "pipeline, whose kernels are program(1.3)/<ios18> with one BLOBFILE per matrix, ran on M1 Pro "
    "(macOS 15.0) and M1 Max (macOS 15.6.1) at 143-167 ms/step; the report's matrix marks "
    "program(1.3) PARTIAL on M1 (its standalone benchmarks failed). No M2 data: anec assumption, "
    "same as M1. maderix PR #6 (unmerged, reported) says M1/M2 need program(1.0)/<ios16> with "
    "verbose scalars: that dialect is an explicit fallback (--dialect ios16), probed on a Mac by "
    "python -m anec.selftest"
)
_DIALECT_M5 = (
    _DIALECT_NEW + "; maderix PR #35 (reported) uses program(1.5) for static weights on M5, "
    "not adopted"
)
_CHANNELS_M3 = (
    _CHANNELS + " (maderix: the M3 Pro peak benchmark compiled only 512-channel conv chains; "
    "not applied, it looks benchmark-specific)"
)
_SOFTMAX = (
    "contested (ANE-SOFTMAX-POW2): hollance/neural-engine#44 says softmax over a non-power-of-2 "
    "axis gives InvalidMILProgram; maderix's train_large_ane runs softmax over 32000 channels; "
    "off by default"
)
_BUDGET = (
    "reported (ANE-COMPILE-BUDGET): about 119 per process (maderix README, Orion paper constraint 5); "
    "119-132 on M4 (maderix PR #23, unmerged); the lowest count, taken over by the other chips"
)
_CONCAT = (
    "contested (ANE-CONCAT): Orion's catalog reports concat rejected (M4 Max), maderix's training "
    "kernels compile and run it (M1 Pro to M5); rewrite until python -m anec.selftest on the Mac "
    "finds it accepted and correct (anec compile --concat)"
)
_STREAMED = (
    "reported: ANEForge's per-family table (A14/M2 and later stream int4-LUT, int8 and sparse); maderix's "
    "ane_int8_bench runs constexpr_affine_dequantize int8 weights on M4 at 1.85-1.88x fp16 (W8A8, "
    "activations int8 too, so weight streaming alone is not isolated); LUT widths other than 4 bits "
    "are a hypothesis"
)
_STREAMED_M1 = (
    "reported: ANEForge's per-family table: A13 (M1) streams int4-LUT (2.37x measured there) and "
    "sparse, and folds int8 (decompressed at load: a smaller file, no bandwidth saved)"
)
_INT8_FORM = (
    "demonstrated: maderix's ane_int8_bench compiles and runs conv weights written as "
    "constexpr_affine_dequantize over an int8 BLOBFILE inside program(1.3) on M4; reported: "
    "ANEForge writes int8 the same way (per-row scale) and calls constexpr_blockwise_shift_scale "
    "not routable as a matmul weight; no published program runs the blockwise form on the "
    "in-memory path (python -m anec.selftest, check compressed, settles it on a Mac)"
)
_REDUCE_MEAN = (
    "reported: hollance/neural-engine#44 says reduce_mean is absent in raw MIL text; Orion's "
    "RMSNorm uses reduce_sum x 1/N (its LayerNorm emits reduce_mean, so the claim is "
    "contested). On by default: the rewrite only costs the rounding of 1/N"
)


def _derive(base: Target, name: str, sources: dict[str, str], **changes) -> Target:
    """``base`` renamed to ``name`` with ``changes``; ``sources`` replaces the evidence of
    the fields it names (every changed field must name its new evidence)."""
    unsourced = set(changes) - set(sources)
    if unsourced:
        raise ValueError(f"target {name}: no source for {sorted(unsourced)}")
    return dataclasses.replace(base, name=name, sources={**base.sources, **sources}, **changes)


# M4 is the measured chip; the other generations are M4 plus what is known to differ.
_M4 = Target(
    name="m4", sram_bytes=32 * MiB, max_blob_tensors=16, scalar_penalty=1,
    max_conv_out_channels=16384, min_surface_bytes=49152, fp32_io=True,
    one_file_per_weight=False, surface_alignment=64, mil_dialect="ios18",
    softmax_pow2_only=False,
    sources={
        "sram_bytes": _ORION_SRAM, "max_blob_tensors": _BLOB,
        "scalar_penalty": _PENALTY, "max_conv_out_channels": _CHANNELS,
        "min_surface_bytes": _SURFACE, "fp32_io": _FP32_IO_OK,
        "one_file_per_weight": _ONE_FILE_OK, "surface_alignment": _ALIGN,
        "mil_dialect": _DIALECT_NEW, "softmax_pow2_only": _SOFTMAX,
        "reduce_mean_as_sum": _REDUCE_MEAN, "process_compile_budget": _BUDGET,
        "concat": _CONCAT, "streamed_weights": _STREAMED,
        "int8_form": _INT8_FORM,
    },
)
# The M4 measurements, taken over unmeasured by the other chips.
_AS_M4 = {
    "sram_bytes": _ASSUME_SRAM, "max_blob_tensors": _ASSUME_BLOB,
    "scalar_penalty": _ASSUME_PENALTY, "min_surface_bytes": _ASSUME_SURFACE,
}
_M2 = _derive(
    _M4, "m2", {**_AS_M4, "fp32_io": _FP32_IO_M2, "mil_dialect": _DIALECT_M1M2},
    fp32_io=False,
)

TARGETS: dict[str, Target] = {t.name: t for t in (
    _derive(_M2, "m1", {"fp32_io": _FP32_IO_M1, "one_file_per_weight": _ONE_FILE_M1,
                        "streamed_weights": _STREAMED_M1},
            one_file_per_weight=True, streamed_weights=("lut", "sparse")),
    _M2,
    _derive(_M4, "m3", {**_AS_M4, "max_conv_out_channels": _CHANNELS_M3}),
    _M4,
    _derive(_M4, "m5", {**_AS_M4, "surface_alignment": _ALIGN_M5, "mil_dialect": _DIALECT_M5},
            surface_alignment=128),
)}
"""Target name -> profile, m1 .. m5."""

DEFAULT_TARGET = _M4.name
"""The profile used when none is named: the measured chip."""


def get_target(name: str | Target | None = None) -> Target:
    """The profile called ``name`` (default :data:`DEFAULT_TARGET`); ``AnecError`` with a
    suggestion otherwise."""
    if isinstance(name, Target):
        return name
    if name is None:
        name = DEFAULT_TARGET
    key = str(name).strip().lower()
    if key in TARGETS:
        return TARGETS[key]
    hint = did_you_mean(key, TARGETS) or f"known targets: {', '.join(TARGETS)}"
    raise AnecError(f"unknown target '{name}'", hint=hint)


def target_for_chip(chip: str | None) -> str | None:
    """The target profile for a chip name ("Apple M2 Pro" -> "m2"), or None."""
    m = re.search(r"\bM(\d)\b", chip or "")
    name = f"m{m.group(1)}" if m else None
    return name if name in TARGETS else None
