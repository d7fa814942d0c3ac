"""int8 activations (W8A8): the request, the calibration samples, the gate's figures.

``anec compile model.ir --activations int8 --calibration inputs.npz`` makes the
quantize-activations pass (:mod:`anec.passes.quantize_activations`) give the activation
operand of every conv and matmul that reads a weight an int8 round trip with a per-tensor
scale measured on the calibration inputs, then drop it again from the activations that
cost the most accuracy until the program's outputs stay within the gate. This module
holds what that pass and the compiler share and what reads no graph: the request
(:class:`ActivationSpec`, :func:`parse_activations`), the calibration inputs cut into
samples (:func:`calibration_samples`), the output comparison (:func:`agreement`, also
``--compress-check``'s) and the lines ``anec compile`` prints (:func:`activation_summary`,
:func:`activation_lines`). Which dialect has the ops, and why the device question is open:
docs/compression.md, ANE-INT8-ACTIVATIONS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from anec.diagnostics import AnecError, did_you_mean

ACTIVATION_DTYPES = ("int8",)
"""What ``--activations`` accepts."""

QUANT_DIALECTS = ("ios18",)
"""The MIL dialects with ``quantize``/``dequantize`` (iOS17 ops: coremltools
``ops/defs/iOS17/quantization_ops.py``; ios16 predates them)."""

DEFAULT_MIN_COSINE = 0.999


@dataclass(frozen=True)
class ActivationSpec:
    """An int8 activation request: the calibration inputs and the gate."""

    dtype: str
    calibration: Mapping[str, np.ndarray] = field(repr=False)
    """One array per func input, by name: the input's shape (one sample) or that shape
    with a leading axis of samples."""
    min_cosine: float = DEFAULT_MIN_COSINE
    """The least cosine each output may keep against the unquantized program, on every sample."""


def parse_activations(activations: str | None, calibration: Mapping[str, Any] | None, dialect: str,
                      min_cosine: float = DEFAULT_MIN_COSINE) -> ActivationSpec | None:
    """The request of ``compile_module(activations=..., calibration=...)`` (None: none).
    AnecError for an unknown dtype, missing calibration inputs or a dialect without the ops."""
    if activations is None:
        if calibration is not None:
            raise AnecError("calibration inputs were given without --activations",
                            hint="add --activations int8 (calibration only decides int8 activation scales)")
        return None
    if activations not in ACTIVATION_DTYPES:
        raise AnecError(f"unknown --activations '{activations}'",
                        hint=did_you_mean(str(activations), ACTIVATION_DTYPES)
                        or f"known: {', '.join(ACTIVATION_DTYPES)}")
    if calibration is None:
        raise AnecError(f"--activations {activations} needs calibration inputs to measure each activation's scale",
                        hint="give --calibration INPUTS.npz (compile_module(calibration=...)): one array per func "
                             "input by name, optionally with a leading axis of samples")
    if dialect not in QUANT_DIALECTS:
        raise AnecError(f"--activations {activations}: the {dialect} MIL dialect has no quantize/dequantize "
                        "(they are iOS17 ops)",
                        hint=f"compile with --dialect {QUANT_DIALECTS[0]} (the default), or without --activations")
    if not (isinstance(min_cosine, (int, float)) and -1.0 <= float(min_cosine) <= 1.0):
        raise AnecError(f"the activation gate's cosine {min_cosine!r} is not in [-1, 1]",
                        hint="e.g. --activations-min-cosine 0.999")
    arrays = {}
    for name, arr in calibration.items():
        a = np.asarray(arr)
        if a.dtype.kind not in "fiub":
            raise AnecError(f"calibration input '{name}' has dtype {a.dtype}, not numbers")
        arrays[str(name)] = a
    return ActivationSpec(activations, arrays, float(min_cosine))


def calibration_samples(calibration: Mapping[str, np.ndarray], inputs: Sequence[tuple[str, tuple[int, ...]]],
                        func: str) -> list[dict[str, np.ndarray]]:
    """The calibration inputs as a list of feeds, one per sample, for a func whose inputs are
    ``(name, shape the caller passes)``: an array of that shape is one sample, one with a
    leading axis is that many. Every input must be given with the same number of samples."""
    counts: dict[str, int] = {}
    for name, shape in inputs:
        if name not in calibration:
            raise AnecError(f"the calibration inputs have no '{name}' for func '{func}'",
                            hint=f"give one array per input of {func} by name: {', '.join(n for n, _ in inputs)}")
        a = calibration[name]
        if tuple(a.shape) == tuple(shape) or (a.size == math.prod(shape) and a.ndim != len(shape) + 1):
            counts[name] = 0
        elif a.ndim == len(shape) + 1 and tuple(a.shape[1:]) == tuple(shape) and a.shape[0] > 0:
            counts[name] = a.shape[0]
        else:
            raise AnecError(f"calibration input '{name}' has shape {list(a.shape)}; func '{func}' takes "
                            f"{list(shape)}", hint=f"give {list(shape)} (one sample) or [S, {', '.join(map(str, shape))}]"
                                                    " (S samples)")
    many = {n for n, c in counts.items() if c}
    sizes = {counts[n] for n in many}
    if len(sizes) > 1:
        raise AnecError(f"the calibration inputs of func '{func}' have different numbers of samples "
                        f"({', '.join(f'{n}: {counts[n]}' for n in sorted(many))})",
                        hint="give every input the same leading axis of samples")
    n = sizes.pop() if sizes else 1
    out = []
    for k in range(n):
        out.append({name: (calibration[name][k] if counts[name] else calibration[name]).reshape(shape)
                    for name, shape in inputs})
    return out


def agreement(got: Any, ref: Any) -> tuple[float, float]:
    """``(cosine, max_rel)`` of ``got`` against ``ref``: max_rel is the largest absolute
    difference over ``ref``'s largest magnitude (``--compress-check``'s figures)."""
    r = np.asarray(ref, np.float64).ravel()
    v = np.asarray(got, np.float64).ravel()
    den = float(np.linalg.norm(v) * np.linalg.norm(r))
    cos = float(v @ r / den) if den > 0 else float(np.array_equal(v, r))
    top = float(np.max(np.abs(r))) if r.size else 0.0
    diff = float(np.max(np.abs(v - r))) if r.size else 0.0
    return cos, (diff / top if top > 0 else float(diff > 0))


def activation_summary(report: Any) -> str:
    """``activations int8 3 of 4 tensors, worst output cosine 0.999912 (gate 0.999), 1 kept fp16``
    from the manifest's report (:class:`anec.mil.manifest_types.Activations`)."""
    tensors = list(report.tensors)
    kept = sum(1 for t in tensors if t.dtype == report.dtype)
    outs = [o.cosine for o in report.outputs if o.cosine is not None]
    worst = f", worst output cosine {min(outs):.6f} (gate {report.min_cosine:g})" if outs else ""
    rest = len(tensors) - kept
    return (f"activations {report.dtype} {kept} of {len(tensors)} tensors{worst}"
            + (f", {rest} kept fp16" if rest else ""))


def activation_lines(report: Any) -> list[str]:
    """``fp16: activation %x (why)`` for each activation kept fp16."""
    return [f"fp16: activation %{t.value} ({t.reason})" for t in report.tensors if t.dtype != report.dtype]


__all__ = ["ACTIVATION_DTYPES", "DEFAULT_MIN_COSINE", "QUANT_DIALECTS", "ActivationSpec", "activation_lines",
           "activation_summary", "agreement", "calibration_samples", "parse_activations"]
