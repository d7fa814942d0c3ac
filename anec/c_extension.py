"""The anec C extension (cffi): finding and loading it, and the host compression kernels.

The extension is built by ``python anec/runtime/_ffi_build.py`` (or ``pip
install``) next to the runtime's code, as ``anec/runtime/_native*.so``, and is
imported under its name ``anec.runtime._native``. It is loaded here from that
file, without importing the runtime package, so that the layers below the
runtime (:mod:`anec.compress`) can call its host kernels and the runtime
(:mod:`anec.runtime.native`) its entry points through one loaded module:
:data:`ffi` and :data:`lib` (None when it is not built; :data:`load_error` then
says why).

The kernels of csrc/host_compress.c are wrapped here for the compressor: the
per-channel 8-bit linear quantizer, the gate's error sums and the exact 1-D
k-means. Each returns None without the extension (or for input the kernel
leaves to numpy), and its caller falls back to numpy with the same result.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import math
import os
import sys
from typing import Any

import numpy as np

EXTENSION = "anec.runtime._native"
"""The extension's module name (the build's, anec/runtime/_ffi_build.py)."""


def _load() -> Any:
    """The extension module, loaded from its file next to the runtime's code."""
    loaded = sys.modules.get(EXTENSION)
    if loaded is not None:
        return loaded
    where = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(where, "_native" + suffix)
        if os.path.isfile(path):
            break
    else:
        raise ModuleNotFoundError(f"No module named '{EXTENSION}'", name=EXTENSION)
    spec = importlib.util.spec_from_file_location(EXTENSION, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a file of an extension suffix always has one
        raise ImportError(f"cannot load '{path}'", name=EXTENSION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[EXTENSION] = module
    return module


try:  # pragma: no cover - exercised by every runtime test
    _module = _load()
except ImportError as _e:  # pragma: no cover - only without a built extension
    ffi: Any = None
    lib: Any = None
    load_error: ImportError | None = _e
else:
    ffi, lib = _module.ffi, _module.lib
    load_error = None


def available() -> bool:
    """True when the C extension is built."""
    return lib is not None


# ---------------------------------------------------------------------------
# host compression kernels (csrc/host_compress.c)


def quantize_linear8(w: np.ndarray, axis: int, mode: int, signed: bool, affine: bool
                     ) -> "tuple[tuple[np.ndarray, np.ndarray, np.ndarray | None], dict] | None":
    """Per-channel (along ``axis``) 8-bit linear quantization of the fp16 array ``w`` in one
    C pass, with the gate's error sums: ``((q, scale, zero_point), stats)``; ``mode`` is the
    kernel's ANEC_QUANT_* mode. None without the extension, or for what the kernel leaves to
    numpy (NaN or infinite weights, a scale below fp16's range)."""
    if not available():
        return None
    w = np.ascontiguousarray(w)
    c = w.shape[axis]
    outer, inner = math.prod(w.shape[:axis]), math.prod(w.shape[axis + 1:])
    q = np.empty(w.shape, np.int8 if signed else np.uint8)
    scale = np.empty(c, np.float16)
    zp = np.empty(c, q.dtype) if affine else None
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


def dense_errors(w: np.ndarray, d: np.ndarray, axis: int) -> dict | None:
    """The gate's error sums of the decompressed ``d`` against ``w`` (both fp16, channels
    along ``axis``), summed as :func:`quantize_linear8` sums them; None without the
    extension, or for non-finite weights (numpy decides those)."""
    if not available():
        return None
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


def kmeans_1d_exact(groups: list[tuple[np.ndarray, np.ndarray]], k: int) -> list[np.ndarray] | None:
    """The ``k`` centroids of the exact 1-D k-means of each (sorted distinct values, weights)
    group (the same arithmetic and search as the compressor's numpy program, so the same
    centroids); None without the extension."""
    if not available():
        return None
    res = []
    for v, w in groups:
        v, w = np.ascontiguousarray(v, np.float64), np.ascontiguousarray(w, np.float64)
        c = np.empty(k, np.float64)
        rc = lib.anec_kmeans_1d(ffi.from_buffer("double[]", v), ffi.from_buffer("double[]", w), v.size, k,
                                ffi.from_buffer("double[]", c, require_writable=True))
        if rc != 0:
            return None
        res.append(c)
    return res
