"""New weight values -> new BLOBFILE bytes for a delta reload.

A manifest ``weights[]`` entry says where each checkpoint tensor lives in the
program: ``file``/``path`` of its BLOBFILE, ``offset`` of its 64-byte
metadata record, the stored ``dtype`` and ``shape``, and the ``perm`` /
``slice`` legalize applied (a weight transposed into a conv kernel, a chunk of
a large weight). :func:`patched_blobs` applies the same transform to a new
array, checks it, and writes the payload into a copy of the current file at
the same place: the MILBlob v2 layout (header, metadata, alignment) is kept
byte for byte, so a reloaded program is bit-identical to a fresh compile with
the new weights.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, Mapping

import numpy as np

from anec.diagnostics import WeightError, did_you_mean
from anec.ir.types import FP16_MAX, DType, TensorType
from anec.mil.blobfile import CODE_NAMES, METADATA_BYTES, SENTINEL, dtype_code
from anec.weights import view_stored


def materialize(key: str, value: Any, entry: Mapping[str, Any]) -> np.ndarray:
    """The payload array of one manifest entry from a checkpoint-shaped array."""
    try:
        arr = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - any conversion failure is a user error here
        raise WeightError(f"weight '{key}': cannot convert {type(value).__name__} to an array ({e})") from None
    if arr.dtype.kind not in "fiub":
        raise WeightError(f"weight '{key}' has dtype {arr.dtype}; expected a numeric array")
    dtype = DType(entry["dtype"])
    if dtype.is_float and arr.dtype.kind == "f":
        finite = np.isfinite(arr)
        if not finite.all():
            bad = int(np.argmin(finite.reshape(-1)))
            raise WeightError(f"weight '{key}' has a non-finite value (NaN or Inf) at flat index {bad}",
                              hint="the program keeps its old weights")
    stored = TensorType(dtype, tuple(int(d) for d in entry["shape"]))
    a = view_stored(key, arr, entry.get("perm") or None, entry.get("slice") or None, stored, "the program",
                    hint="pass an array of the shape the model was compiled with", wants="expects")
    if dtype == DType.fp16:
        if a.size and max(float(np.max(a)), -float(np.min(a))) > FP16_MAX:
            raise WeightError(f"weight '{key}' has values beyond the fp16 range (+-{FP16_MAX:g})",
                              constraint="ANE-FP16-RANGE", hint="scale the weights or keep this tensor in fp32")
    elif dtype in (DType.int8, DType.uint8):
        info = np.iinfo(dtype.np)
        if arr.dtype.kind == "f" or a.min() < info.min or a.max() > info.max:
            raise WeightError(f"weight '{key}' must hold {dtype} integers")
    if dtype == DType.fp16 and a.dtype == np.float32:
        from anec.runtime import native

        if native.available():
            return native.f32_to_f16(a)  # F16C; same rounding as numpy
    return np.ascontiguousarray(a.astype(dtype.np))


def _patch(buf: bytearray, file: str, offset: int, payload: bytes, dtype: str, key: str) -> None:
    if offset + METADATA_BYTES > len(buf):
        raise WeightError(f"{file}: metadata offset {offset} of weight '{key}' is outside the file")
    sentinel, code, size, data_off = struct.unpack_from("<IIQQ", buf, offset)
    if sentinel != SENTINEL or code != dtype_code(DType(dtype).np) or size != len(payload) \
            or data_off + size > len(buf):
        found = CODE_NAMES.get(code, code)
        raise WeightError(f"{file}: the blob of weight '{key}' at offset {offset} does not match the manifest "
                          f"({found}, {size} bytes vs {dtype}, {len(payload)} bytes)")
    buf[data_off:data_off + size] = payload


def patched_blobs(manifest: Mapping[str, Any], current: Mapping[str, bytes],
                  new: Mapping[str, Any]) -> dict[str, bytes]:
    """MIL path -> new file bytes for every file touched by ``new`` (key -> array).

    ``current`` maps the MIL path of each weight file to its present bytes.
    Raises WeightError (naming the key) for unknown keys and bad arrays before
    anything is returned.
    """
    entries = manifest.get("weights", [])
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    for e in entries:
        by_key.setdefault(e["key"], []).append(e)
    for key in new:
        if key not in by_key:
            known = sorted(by_key)
            hint = did_you_mean(key, known) or (f"weights of this program: {', '.join(known[:8])}"
                                                + (" ..." if len(known) > 8 else "") if known else
                                                "this program has no weights")
            raise WeightError(f"unknown weight '{key}' for program '{manifest.get('func', '?')}'", hint=hint)
    payloads = [(e, materialize(key, value, e)) for key, value in new.items() for e in by_key[key]]
    out: dict[str, bytearray] = {}
    for e, arr in payloads:
        path = e.get("path") or "@model_path/" + e["file"]
        if path not in out:
            if path not in current:
                raise WeightError(f"weight '{e['key']}': file {path} is not part of the program")
            out[path] = bytearray(current[path])
        _patch(out[path], path, int(e["offset"]), arr.tobytes(), e["dtype"], e["key"])
    return {p: bytes(b) for p, b in out.items()}


def weight_input_values(entries: Iterable[Mapping[str, Any]], weights: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Input name -> new value of every weight compiled as an input whose key is in ``weights``
    (a key read under several views, e.g. a weight and its transpose, fills each view's input)."""
    return {w["input"]: materialize(w["key"], weights[w["key"]], w) for w in entries if w["key"] in weights}

