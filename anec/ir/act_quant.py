"""int8 activations recorded on a node, and their arithmetic (W8A8, docs/compression.md).

The quantize-activations pass decides that the activation operand of a conv or matmul
goes through int8 on its way in: the emitter then writes MIL ``quantize`` (fp16 -> int8)
and ``dequantize`` (int8 -> fp16) before the op, as maderix's ``ane_int8_bench.m`` runs
between its convs. The IR op set does not change: the decision is an annotation on the
consuming node, one per quantized operand, ``int8_<operand>=<scale>``::

    %y = conv1x1(%g, %w2) : fp16[1, 2, 1, 2] @{int8_x=0.0216522216796875}

(operand ``x`` of this conv is quantized with that fp16 scale, zero point 0). Annotations
are printed and parsed, so ``program.ir`` shows it and the reference interpreter
(:func:`anec.ir.interp.interpret`) runs it: :func:`fake_quant` is that round trip, with
the arithmetic coremltools gives the two ops (``coremltools/optimize/_utils.py``:
``quantize_by_scale_and_zp`` divides in the input's dtype, rounds with ``np.around``,
half to even, and clips to the int8 range; ``dequantize_by_scale_and_zp`` multiplies in
fp32 and casts to the scale's dtype). The C simulator does the same operations
(``csrc/sim_quant.c``), so the two agree bit for bit. What the device rounds is a
hypothesis the selftest settles (ANE-INT8-ACTIVATIONS).

:func:`quantized_operands` reads and checks a node's annotations (a ``program.ir`` is
read as hostile input: a scale that is not a positive finite fp16 value, an operand the
op does not have or an op that is not a conv or a matmul is an AnecError).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from anec.diagnostics import AnecError
from anec.ir.ops import get_op
from anec.ir.types import DType

if TYPE_CHECKING:
    from anec.ir.nodes import Node

PREFIX = "int8_"
"""Annotation key prefix: ``int8_x`` quantizes operand ``x``."""

QUANT_OPS = frozenset({"conv1x1", "conv", "matmul"})
"""The ops whose activation operand may go through int8 (maderix runs conv chains)."""

INT8_MIN, INT8_MAX = -128, 127
"""The range ``quantize`` clips to (``output_dtype = "int8"``)."""

LEVELS = 127
"""A symmetric per-tensor scale maps max|x| to this level (zero point 0)."""


def annotation_key(operand: str) -> str:
    """The annotation naming operand ``operand`` quantized: ``int8_x``."""
    return PREFIX + operand


def has_quantized(node: "Node") -> bool:
    """True when ``node`` carries an ``int8_*`` annotation."""
    notes = node.annotations
    return bool(notes) and any(k.startswith(PREFIX) for k in notes)


def quantized_operands(node: "Node") -> dict[int, float]:
    """Positional operand index -> fp16 scale of every operand of ``node`` that goes through
    int8 (empty for a node without ``int8_*`` annotations). AnecError, located at the node,
    for an annotation that does not describe a valid quantize/dequantize pair."""
    if not has_quantized(node):
        return {}
    out: dict[int, float] = {}
    names = [o.name for o in get_op(node.op).positional] if node.op in QUANT_OPS else []
    for key in sorted(k for k in node.annotations if k.startswith(PREFIX)):
        operand, value = key[len(PREFIX):], node.annotations[key]
        if node.op not in QUANT_OPS:
            raise AnecError(f"annotation '{key}' on a {node.op}: only the operands of conv1x1, conv and matmul "
                            "go through int8", span=node.span,
                            hint="int8 activations are decided by the quantize-activations pass")
        if operand not in names:
            raise AnecError(f"annotation '{key}': {node.op} has no operand '{operand}'", span=node.span,
                            hint=f"its operands: {', '.join(names)}")
        index = names.index(operand)
        if node.operands[index].type.dtype != DType.fp16:
            raise AnecError(f"annotation '{key}': operand {operand} is {node.operands[index].type.dtype}; only fp16 "
                            "activations go through int8", span=node.span)
        out[index] = check_scale(value, key, node)
    return out


def check_scale(value: Any, what: str, node: "Node | None" = None) -> float:
    """``value`` as a float if it is a positive finite fp16 value, else AnecError."""
    ok = isinstance(value, (float, int, np.floating, np.integer)) and not isinstance(value, (bool, np.bool_))
    v = float(value) if ok else math.nan
    if not (ok and math.isfinite(v) and v > 0 and float(np.float16(v)) == v):
        raise AnecError(f"{what}: the scale {value!r} is not a positive finite fp16 value",
                        span=node.span if node is not None else None,
                        hint="a quantize scale is max|x| / 127 rounded to fp16, above 0")
    return v


def scale_for(max_abs: float) -> tuple[float | None, str | None]:
    """The symmetric per-tensor scale ``fp16(max_abs / 127)`` of an activation whose largest
    magnitude is ``max_abs``, or ``(None, why)`` when there is none."""
    if not math.isfinite(max_abs):
        return None, f"max|x| is {max_abs} on the calibration inputs (ANE-FP16-RANGE)"
    if max_abs <= 0:
        return None, "the activation is 0 on every calibration input (no scale)"
    scale = float(np.float16(max_abs / LEVELS))
    if not (scale > 0 and math.isfinite(scale)):
        return None, f"max|x| {max_abs:.3g} is too small for an fp16 scale"
    return scale, None


def quantize(x: np.ndarray, scale: float) -> np.ndarray:
    """MIL ``quantize(input = x, scale, output_dtype = "int8")`` of an fp16 tensor (``scale``
    rounded to fp16): the quotient in fp16, rounded half to even, clipped to -128..127 (NaN
    gives 0)."""
    xh = np.asarray(x).astype(np.float16)
    with np.errstate(all="ignore"):
        t = np.rint(xh / np.float16(scale)).astype(np.float32)
    t[np.isnan(t)] = 0
    q: np.ndarray = np.clip(t, INT8_MIN, INT8_MAX).astype(np.int8)
    return q


def dequantize(q: np.ndarray, scale: float) -> np.ndarray:
    """MIL ``dequantize(input = q, scale)`` with an fp16 scale (``scale`` rounded to one):
    ``fp16(q * scale)``."""
    out: np.ndarray = (np.asarray(q).astype(np.float32) * np.float32(np.float16(scale))).astype(np.float16)
    return out


def fake_quant(x: np.ndarray, scale: float) -> np.ndarray:
    """What the op reads of ``x`` after ``quantize`` then ``dequantize`` (fp16 values)."""
    return dequantize(quantize(x, scale), scale)


__all__ = ["INT8_MAX", "INT8_MIN", "LEVELS", "PREFIX", "QUANT_OPS", "annotation_key", "check_scale",
           "dequantize", "fake_quant", "has_quantized", "quantize", "quantized_operands", "scale_for"]
