"""The host work of a training step in one pass per tensor: the C kernels of csrc/rt_host.c.

Each function computes exactly (bit for bit) what the numpy code beside it
computes, the same fp32/fp64 operations in the same order, in one pass over
memory instead of a pass per operation; the numpy code runs when the runtime
is not built or an array is not contiguous fp32.

* :func:`adamw_into`: one tensor's AdamW step (clipping factor, moments, bias
  correction, decay, update, fp16-range check, the new values in fp16);
* :func:`sum_squares`: the float64 sum of squares, in numpy's pairwise order;
* :func:`add_scaled`: a weight gradient (fp16 or fp32) times the inverse loss
  scale, into an fp32 accumulator;
* :func:`to_fp16`: fp32 -> fp16, round to nearest even.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from anec.runtime import native


def adamw_into(p: np.ndarray, g: np.ndarray, m: np.ndarray | None, v: np.ndarray | None, pn: np.ndarray,
            mn: np.ndarray, vn: np.ndarray, half: np.ndarray | None, coef: dict[str, Any],
            scratch: dict[tuple[int, ...], np.ndarray]) -> bool:
    """One tensor's AdamW step into ``pn, mn, vn`` (and ``half``); False when a new value fails
    ``coef['limit']``. The C kernel for contiguous fp32 arrays, else :func:`_adamw_numpy`."""
    if half is not None and (half.dtype != np.float16 or half.shape != p.shape or not half.flags.c_contiguous
                             or not half.flags.writeable):
        raise ValueError(f"half: a writable contiguous fp16 array of shape {p.shape}")
    ins = [a for a in (p, g, m, v) if a is not None]
    if native.available() and all(a.dtype == np.float32 and a.flags.c_contiguous and a.shape == p.shape
                                  for a in ins):
        ffi, lib = native.ffi, native.lib
        fp = lambda a: ffi.from_buffer("float[]", a) if a is not None else ffi.NULL  # noqa: E731
        out = lambda a: ffi.from_buffer("float[]", a, require_writable=True)  # noqa: E731
        h = ffi.NULL if half is None else ffi.from_buffer("uint16_t[]", half.view(np.uint16), require_writable=True)
        c = ffi.new("anec_adamw_coef *", {k: (float(x) if isinstance(x, np.floating) else int(x))
                                            for k, x in coef.items()})
        rc = lib.anec_adamw_f32(fp(p), fp(g), fp(m), fp(v), out(pn), out(mn), out(vn), h, p.size, c)
        if rc < 0:
            raise native.failure(rc, "anec_adamw_f32")
        return rc == 0
    tmp = scratch.get(p.shape)
    if tmp is None:
        tmp = scratch[p.shape] = np.empty(p.shape, np.float32)
    return _adamw_numpy(p, g, m, v, pn, mn, vn, half, coef, tmp)


def _adamw_numpy(p: np.ndarray, g: np.ndarray, m: np.ndarray | None, v: np.ndarray | None, pn: np.ndarray,
                 mn: np.ndarray, vn: np.ndarray, half: np.ndarray | None, coef: dict[str, Any],
                 tmp: np.ndarray) -> bool:
    """:func:`adamw_into` in numpy: the same fp32 operations in the same order, a pass each."""
    c = coef
    if c["scale_grad"]:
        g = g * c["grad_scale"]
    np.multiply(g, c["one_minus_beta1"], out=mn)
    if m is not None:
        np.multiply(m, c["beta1"], out=tmp)
        mn += tmp
    np.multiply(g, g, out=vn)
    vn *= c["one_minus_beta2"]
    if v is not None:
        np.multiply(v, c["beta2"], out=tmp)
        vn += tmp
    np.multiply(vn, c["inv_bias2"], out=tmp)
    np.sqrt(tmp, out=tmp)
    tmp += c["eps"]
    np.divide(mn, tmp, out=tmp)
    tmp *= c["step_size"]
    if c["decay"]:
        np.multiply(p, c["decay_factor"], out=pn)
    else:
        np.copyto(pn, p)
    pn -= tmp
    if c["check"] and not (np.isfinite(pn).all() and float(np.max(np.abs(pn), initial=0.0)) <= c["limit"]):
        return False
    if half is not None:
        half[...] = pn
    return True


def sum_squares(g: np.ndarray) -> float:
    """The float64 sum of the squares of ``g``: ``np.square(g, dtype=np.float64).sum()``, bit for bit
    (the C kernel sums in numpy's pairwise order, without the float64 temporary)."""
    g = np.asarray(g)
    if native.available() and g.dtype == np.float32 and g.flags.c_contiguous:
        return float(native.lib.anec_sum_squares(native.ffi.from_buffer("float[]", g), g.size))
    return float(np.square(g, dtype=np.float64).sum())


def add_scaled(dst: np.ndarray, src: Any, scale: np.float32, accumulate: bool) -> bool:
    """``dst = (dst if accumulate else 0) + src * scale`` in fp32, ``src`` fp16 or fp32 with
    ``dst``'s number of elements in the same order; False (``dst`` untouched) when the C kernel
    cannot take the arrays, and the caller adds them itself."""
    src = np.asarray(src)
    if (not native.available() or src.dtype not in (np.float16, np.float32) or not src.flags.c_contiguous
            or dst.dtype != np.float32 or not dst.flags.c_contiguous or src.size != dst.size):
        return False
    rc = native.lib.anec_add_scaled(native.ffi.from_buffer("float[]", dst, require_writable=True),
                                    native.ffi.from_buffer("uint8_t[]", src.reshape(-1).view(np.uint8)),
                                    src.itemsize, float(scale), dst.size, int(accumulate))
    if rc != 0:
        raise native.failure(rc, "anec_add_scaled")
    return True


def to_fp16(a: np.ndarray) -> np.ndarray:
    """``a`` rounded to fp16 (nearest even, as numpy's astype)."""
    if native.available():
        return native.f32_to_f16(a)
    return np.asarray(a).astype(np.float16)


__all__ = ["adamw_into", "add_scaled", "sum_squares", "to_fp16"]
