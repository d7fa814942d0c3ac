"""Linear quantization: integer payloads with a scale (and zero point) per channel or block.

:func:`quantize_linear_numpy` is the arithmetic of coremltools'
``linear_quantize_weights`` in numpy (byte-stable); :func:`quantize_linear`
takes the C kernel's result for an 8-bit fp16 tensor when the extension is
built (:mod:`anec.c_extension`: the same bytes, and the gate's error sums in
the same pass), numpy's otherwise.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anec import c_extension
from anec.compress.formats import Format, input_axis, scale_shape


def quantize_linear(w: np.ndarray, axis: int, fmt: Format) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(q, scale, zero_point)`` per output channel along ``axis`` (:func:`quantize_linear_numpy`;
    an fp16 tensor in one C pass when the runtime extension is built, with the same result)."""
    got = quantize_linear_kernel(w, axis, fmt)
    if got is not None:
        return got[0]
    return quantize_linear_numpy(w, axis, fmt)


_QUANT_MODES = {("int8", False): 0, ("int8", True): 1, ("uint8", True): 2}
"""(storage, affine) -> the C kernel's ANEC_QUANT_* mode."""


def quantize_linear_kernel(w: Any, axis: int, fmt: Format
                           ) -> "tuple[tuple[np.ndarray, np.ndarray, np.ndarray | None], dict] | None":
    """:func:`quantize_linear_numpy` of an fp16 tensor by the C kernel (csrc/host_compress.c,
    :func:`anec.c_extension.quantize_linear8`), with the gate's error sums:
    ``((q, scale, zero_point), stats)``; None without the extension, for another dtype or
    format, or for what the kernel leaves to numpy (NaN or infinite weights, a scale below
    fp16's range)."""
    w = np.asarray(w)
    mode = _QUANT_MODES.get((fmt.storage, fmt.affine))
    if w.dtype != np.float16 or mode is None or fmt.block or w.size == 0 or w.ndim == 0:
        return None
    return c_extension.quantize_linear8(w, axis, mode, fmt.signed, fmt.affine)


def errors_kernel(w: np.ndarray, d: np.ndarray, axis: int) -> dict | None:
    """The gate's error sums of the decompressed ``d`` against ``w`` (both fp16) by the C
    kernel, summed as :func:`quantize_linear_kernel` sums them; None without the extension,
    for another dtype, or for non-finite weights (numpy decides those)."""
    if w.dtype != np.float16 or d.dtype != np.float16 or w.size == 0 or w.ndim == 0:
        return None
    return c_extension.dense_errors(w, d, axis)


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
