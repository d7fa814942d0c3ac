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

import errno
import os
import struct
from pathlib import Path
import dataclasses
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Union

import numpy as np

from anec.diagnostics import RuntimeFailure, WeightError, did_you_mean
from anec.ir.types import FP16_MAX, DType, TensorType
from anec.mil.blobfile import CODE_NAMES, METADATA_BYTES, SENTINEL, SUBBYTE_CODES, dtype_code
from anec.ir.weight_binding import view_stored

if TYPE_CHECKING:
    from anec.mil.manifest_types import Manifest, WeightEntry, WeightInputEntry

Entry = Union["WeightEntry", "WeightInputEntry"]
"""A manifest entry storing a weight: in a BLOBFILE, or as a program input's value."""


# |x| as an unsigned bit pattern: for IEEE floats the order of magnitudes is the
# order of their sign-less bits, and NaN/Inf sort above every finite value
_MAGNITUDE = {np.dtype(np.float16): (np.uint16, 0x7FFF, 0x7C00), np.dtype(np.float32): (np.uint32, 0x7FFFFFFF, 0x7F800000)}
_FP16_MAX_BITS = {np.dtype(np.float16): 0x7BFF, np.dtype(np.float32): 0x477FE000}  # 65504 in each format
_CHUNK = 1 << 16


def _max_magnitude_bits(arr: np.ndarray) -> int:
    """The largest |x| of a contiguous fp16/fp32 array, as bits (one pass: in C
    when the runtime is built, else numpy over cache-sized chunks)."""
    from anec.runtime import native

    if native.available():
        return native.max_magnitude_bits(arr)
    return _max_magnitude_bits_numpy(arr)


def _max_magnitude_bits_numpy(arr: np.ndarray) -> int:
    udt, mask, _ = _MAGNITUDE[arr.dtype]
    flat = arr.reshape(-1).view(udt)
    tmp = np.empty(min(_CHUNK, flat.size), udt)
    top = 0
    for i in range(0, flat.size, _CHUNK):
        t = tmp[:min(_CHUNK, flat.size - i)]
        np.bitwise_and(flat[i:i + _CHUNK], mask, out=t)
        top = max(top, int(t.max()))
    return top


def _fast_valid(arr: np.ndarray, dtype: DType) -> bool:
    """True when a float array certainly passes :func:`materialize`'s value checks
    (finite; within the fp16 range for fp16 weights). False means "check the slow
    way", which also names the offending element."""
    if arr.dtype not in _MAGNITUDE or not arr.size or not arr.flags.c_contiguous or not dtype.is_float:
        return False
    top = _max_magnitude_bits(arr)
    if dtype == DType.fp16:
        return top <= _FP16_MAX_BITS[arr.dtype]
    return top < _MAGNITUDE[arr.dtype][2]


def materialize(key: str, value: Any, entry: Entry) -> np.ndarray:
    """The payload array of one manifest entry from a checkpoint-shaped array."""
    try:
        arr = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - any conversion failure is a user error here
        raise WeightError(f"weight '{key}': cannot convert {type(value).__name__} to an array ({e})") from None
    if arr.dtype.kind not in "fiub":
        raise WeightError(f"weight '{key}' has dtype {arr.dtype}; expected a numeric array")
    dtype = DType(entry.dtype)
    if _fast_valid(arr, dtype):
        # fp16/fp32 arrays: one bit-pattern pass replaces the finite and range checks
        return _cast(_view(key, arr, entry), dtype)
    if dtype.is_float and arr.dtype.kind == "f":
        finite = np.isfinite(arr)
        if not finite.all():
            bad = int(np.argmin(finite.reshape(-1)))
            raise WeightError(f"weight '{key}' has a non-finite value (NaN or Inf) at flat index {bad}",
                              hint="the program keeps its old weights")
    a = _view(key, arr, entry)
    if dtype == DType.fp16:
        if a.size and max(float(np.max(a)), -float(np.min(a))) > FP16_MAX:
            raise WeightError(f"weight '{key}' has values beyond the fp16 range (+-{FP16_MAX:g})",
                              constraint="ANE-FP16-RANGE", hint="scale the weights or keep this tensor in fp32")
    elif dtype in (DType.int8, DType.uint8):
        info = np.iinfo(dtype.np)
        if arr.dtype.kind == "f" or a.min() < info.min or a.max() > info.max:
            raise WeightError(f"weight '{key}' must hold {dtype} integers")
    return _cast(a, dtype)


def _view(key: str, arr: np.ndarray, entry: Entry) -> np.ndarray:
    """``arr`` seen as the stored tensor of ``entry`` (its perm, slice and shape; no copy
    where numpy can view); WeightError when the array does not fit."""
    stored = TensorType(DType(entry.dtype), tuple(int(d) for d in entry.shape))
    perm = list(entry.perm) if entry.perm else None
    sl = list(entry.slice) if entry.slice else None
    return view_stored(key, arr, perm, sl, stored, "the program",
                       hint="pass an array of the shape the model was compiled with", wants="expects")


def _by_key(manifest: "Manifest") -> dict[str, list["WeightEntry"]]:
    """Checkpoint key -> the manifest weight entries storing it (a key may be stored in several views)."""
    by_key: dict[str, list[WeightEntry]] = {}
    for e in manifest.weights:
        by_key.setdefault(e.key, []).append(e)
    return by_key


def _cast(a: np.ndarray, dtype: DType) -> np.ndarray:
    """The stored-dtype payload of a checked view (a contiguous array of it is used as it is)."""
    if a.dtype == dtype.np:
        return np.ascontiguousarray(a)
    if dtype == DType.fp16 and a.dtype == np.float32:
        from anec.runtime import native

        if native.available():
            return native.f32_to_f16(a)  # F16C; same rounding as numpy
    return np.ascontiguousarray(a.astype(dtype.np))


def stream_plan(manifest: "Manifest", new: Mapping[str, Any]) -> tuple[str, list[tuple[int, np.ndarray]]] | None:
    """For the C data patch from arrays (``anec_reload_arrays``): the MIL path of the
    program's one weight file and a (metadata record offset, payload source) pair per
    place a key of ``new`` is stored, each source the checked view of the array,
    contiguous, still in its own fp16/fp32 dtype (C checks, converts and writes it).

    None when that path does not apply as it is, and :func:`changed_blobs` must
    be used: several files, a dtype C does not convert, a shape or key error
    (that path raises it with the message and precedence it always has).
    """
    paths = {e.mil_path for e in manifest.weights}
    if len(paths) != 1:
        return None
    by_key = _by_key(manifest)
    out = []
    for key, value in new.items():
        if key not in by_key or not isinstance(value, np.ndarray) or value.dtype not in _MAGNITUDE:
            return None
        for e in by_key[key]:
            dtype = DType(e.dtype)
            if dtype not in (DType.fp16, DType.fp32) or (dtype == DType.fp32 and value.dtype != np.float32):
                return None
            try:
                a = _view(key, value, e)
            except WeightError:
                return None
            out.append((e.offset, np.ascontiguousarray(a)))
    return paths.pop(), out


def payloads(manifest: "Manifest", new: Mapping[str, Any]) -> list[tuple["WeightEntry", np.ndarray]]:
    """(manifest entry, payload) for every place a key of ``new`` is stored; raises
    WeightError (naming the key) for unknown keys and bad arrays."""
    by_key = _by_key(manifest)
    for key in new:
        if key not in by_key:
            known = sorted(by_key)
            hint = did_you_mean(key, known) or (f"weights of this program: {', '.join(known[:8])}"
                                                + (" ..." if len(known) > 8 else "") if known else
                                                "this program has no weights")
            raise WeightError(f"unknown weight '{key}' for program '{manifest.func}'", hint=hint)
    out = []
    for key, value in new.items():
        out += [(e, materialize(key, value, e)) for e in by_key[key] if not e.part]
        out += _recompressed(key, value, [e for e in by_key[key] if e.part])
    return out


def _recompressed(key: str, value: Any, entries: list["WeightEntry"]) -> list[tuple["WeightEntry", np.ndarray]]:
    """(entry, payload) for the payload BLOBFILEs of the compressed weights that store ``key``:
    the new value compressed with each weight's recorded scheme (its format, channel axis and
    payload shapes; docs/compression.md), so the MIL stays the same and only payloads change."""
    from anec.compress import compress_tensor, get_format
    from anec.mil.blobfile import pack_bits
    from anec.mil.blobfile import SUBBYTE_BITS

    groups: dict[str, list[WeightEntry]] = {}
    for e in entries:
        assert e.part is not None
        groups.setdefault(e.part.of, []).append(e)
    out = []
    for of, parts in groups.items():
        p = parts[0].part
        assert p is not None
        fmt = get_format(p.format)
        dense = dataclasses.replace(parts[0], dtype="fp16", shape=p.shape)  # the weight before compression
        comp = compress_tensor(materialize(key, value, dense), fmt, int(p.axis))
        if not np.isfinite(comp.rel_l2):
            raise WeightError(f"weight '{key}' in {fmt.name} does not dequantize to finite fp16 values",
                              constraint="ANE-FP16-RANGE", hint="the program keeps its old weights")
        for e in parts:
            assert e.part is not None
            arr = np.ascontiguousarray(comp.parts[e.part.role])
            if e.part.packed:
                arr = np.frombuffer(pack_bits(arr, fmt.bits)[0], np.uint8)
            elif e.dtype in SUBBYTE_BITS:
                arr = np.frombuffer(pack_bits(arr, SUBBYTE_BITS[e.dtype])[0], np.uint8)
            out.append((e, arr))
    return out


def _record(buf: bytearray | memoryview, file: str, offset: int, payload: np.ndarray, dtype: str,
            key: str) -> int:
    """The payload offset of the blob whose metadata record is at ``offset``, checked
    against the manifest entry (the record must already be in ``buf``)."""
    if offset + METADATA_BYTES > len(buf):
        raise WeightError(f"{file}: metadata offset {offset} of weight '{key}' is outside the file")
    sentinel, code, size, data_off = struct.unpack_from("<IIQQ", buf, offset)
    want = SUBBYTE_CODES[dtype] if dtype in SUBBYTE_CODES else dtype_code(DType(dtype).np)
    if sentinel != SENTINEL or code != want or size != payload.nbytes \
            or data_off + size > len(buf):
        found = CODE_NAMES.get(code, code)
        raise WeightError(f"{file}: the blob of weight '{key}' at offset {offset} does not match the manifest "
                          f"({found}, {size} bytes vs {dtype}, {payload.nbytes} bytes)")
    return data_off


def _words(b: bytearray | memoryview | np.ndarray, offset: int, size: int) -> np.ndarray:
    """``size`` bytes at ``offset`` as the widest unsigned words the size allows (fast compares)."""
    word = next(w for w in (np.uint64, np.uint32, np.uint16, np.uint8) if size % np.dtype(w).itemsize == 0)
    return np.frombuffer(b, word, size // np.dtype(word).itemsize, offset)


def _patch(buf: bytearray, file: str, offset: int, payload: np.ndarray, dtype: str, key: str) -> bool:
    """Write ``payload`` over the blob at ``offset``; False when the bytes there are the same."""
    data_off = _record(buf, file, offset, payload, dtype, key)
    new = payload.reshape(-1).view(np.uint8)
    # an unchanged key costs a compare, no write
    if np.array_equal(_words(buf, data_off, new.size), _words(new, 0, new.size)):
        return False
    buf[data_off:data_off + new.size] = new.data
    return True


def patched_blobs(manifest: "Manifest", current: Mapping[str, bytes],
                  new: Mapping[str, Any]) -> dict[str, bytes]:
    """MIL path -> new file bytes for every file touched by ``new`` (key -> array).

    ``current`` maps the MIL path of each weight file to its present bytes.
    Raises WeightError (naming the key) for unknown keys and bad arrays before
    anything is returned.
    """
    out: dict[str, bytearray] = {}
    for e, arr in payloads(manifest, new):
        path = e.mil_path
        if path not in out:
            if path not in current:
                raise WeightError(f"weight '{e.key}': file {path} is not part of the program")
            out[path] = bytearray(current[path])
        _patch(out[path], path, e.offset, arr, e.dtype, e.key)
    return {p: bytes(b) for p, b in out.items()}


def _read_into(path: Path) -> bytearray:
    """A file's bytes, read once into a buffer the caller may patch."""
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(os.fstat(f.fileno()).st_size)
        _pread(f.fileno(), memoryview(buf), 0)
    return buf


def _pread(fd: int, view: memoryview, offset: int) -> None:
    """Fill ``view`` with the file's bytes at ``offset``."""
    got = 0
    while got < len(view):
        k = os.preadv(fd, [view[got:]], offset + got)
        if not k:
            raise OSError(errno.EIO, "the file is shorter than its size")
        got += k


# bytes of a payload compared before the rest is read: a changed tensor almost
# always differs here, and then its old bytes are never read
_PROBE = 1 << 12


def _patched_file(path: Path, file: str, items: list[tuple["WeightEntry", np.ndarray]]) -> tuple[bytearray, bool]:
    """The bytes of the weight file at ``path`` with the payloads of ``items`` written
    over their blobs, and whether any byte changed. The old payload of a blob is
    read only as far as it equals the new one: a file whose every tensor changes
    costs about one write of its new bytes into the buffer, not a read of the old."""
    with open(path, "rb", buffering=0) as fh:
        fd = fh.fileno()
        buf = bytearray(os.fstat(fd).st_size)
        view = memoryview(buf)
        regions = []
        for e, arr in items:
            off = e.offset
            if off + METADATA_BYTES <= len(buf):
                _pread(fd, view[off:off + METADATA_BYTES], off)
            regions.append((_record(buf, file, off, arr, e.dtype, e.key), arr.nbytes, off, arr))
        regions.sort(key=lambda r: r[0])
        records = [(r[2], r[2] + METADATA_BYTES) for r in regions]
        spans = [(r[0], r[0] + r[1]) for r in regions]
        if any(a1 > b0 for (_, a1), (b0, _) in zip(spans, spans[1:])) or \
                any(r0 < s1 and s0 < r1 for r0, r1 in records for s0, s1 in spans):
            # payloads that overlap each other or a metadata record: the plain way
            _pread(fd, view, 0)
            changed = False
            for e, arr in items:
                changed |= _patch(buf, file, e.offset, arr, e.dtype, e.key)
            return buf, changed
        pos = 0
        for start, end in spans:  # every byte outside the new payloads, as it is
            _pread(fd, view[pos:start], pos)
            pos = end
        _pread(fd, view[pos:], pos)
        changed = False
        for data_off, size, _, arr in regions:
            new = arr.reshape(-1).view(np.uint8)
            head = min(size, _PROBE)
            _pread(fd, view[data_off:data_off + head], data_off)
            if np.array_equal(view[data_off:data_off + head], new[:head]):
                _pread(fd, view[data_off + head:data_off + size], data_off + head)
                if np.array_equal(_words(buf, data_off, size), _words(new, 0, size)):
                    continue
            view[data_off:data_off + size] = new.data
            changed = True
    return buf, changed


def changed_blobs(manifest: "Manifest", directory: str | Path,
                  new: Mapping[str, Any]) -> dict[str, bytearray]:
    """MIL path -> new file bytes for each weight file in the program ``directory``
    whose bytes ``new`` (key -> array) changes: each touched file is read (the old
    payloads of changed tensors only as far as needed to see that they changed) into
    a buffer with the new payloads, and left out when every payload equals the
    present bytes (a reload of unchanged keys then reaches neither C nor the device).

    Arrays are checked before any file is read; raises WeightError or
    RuntimeFailure (an unreadable program file).
    """
    files = {e.mil_path: e.file for e in manifest.weights}
    by_file: dict[str, list[tuple[WeightEntry, np.ndarray]]] = {}
    for e, arr in payloads(manifest, new):
        by_file.setdefault(e.mil_path, []).append((e, arr))
    out: dict[str, bytearray] = {}
    for path, items in by_file.items():
        try:
            buf, changed = _patched_file(Path(directory) / files[path], path, items)
        except OSError as err:
            raise RuntimeFailure(f"cannot read the program's weight file {files[path]}: "
                                 f"{err.strerror}") from None
        if changed:
            out[path] = buf
    return out


def weight_input_values(entries: Iterable["WeightInputEntry"], weights: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Input name -> new value of every weight compiled as an input whose key is in ``weights``
    (a key read under several views, e.g. a weight and its transpose, fills each view's input)."""
    return {w.input: materialize(w.key, weights[w.key], w) for w in entries if w.key in weights}



def strided_2d(a: np.ndarray) -> tuple[int, int, int, int] | None:
    """``a`` as (rows, cols, row stride, col stride) in elements from its first element, its
    elements read row-major (a weight's view: a transpose, a slice, unit axes); None when
    numpy's view of it is no 2-D strided walk."""
    if a.strides and any(s % a.itemsize for s in a.strides):
        return None
    dims: list[list[int]] = []
    for n, s in zip(a.shape, a.strides):
        if n == 1:
            continue
        if dims and dims[-1][1] == n * (s // a.itemsize):  # the outer axis steps over the inner one
            dims[-1] = [dims[-1][0] * n, s // a.itemsize]
        else:
            dims.append([n, s // a.itemsize])
    if len(dims) > 2:
        return None
    while len(dims) < 2:
        dims.insert(0, [1, 0])
    (rows, rs), (cols, cs) = dims
    return rows, cols, rs, cs


Walk = tuple[int, int, int, int]
"""A 2-D walk of an array's elements: (rows, cols, row stride, col stride) in elements."""


def weight_input_views(entries: Iterable["WeightInputEntry"], weights: Mapping[str, Any],
                       specs: Mapping[str, Mapping[str, Any]],
                       plans: dict[tuple[Any, ...], tuple[int, Walk, bool] | None] | None = None,
                       ) -> dict[str, tuple[np.ndarray, int, Walk]] | None:
    """Input name -> (array, byte offset of the view's first element, its 2-D walk) of every
    weight compiled as an input whose key is in ``weights``: the view taken without copying
    (the C runtime checks the values and writes them, transposed and converted, into the
    surface). None when some value is not an fp16/fp32 array whose view is a 2-D walk into an
    fp16 input (then :func:`weight_input_values` materializes the values). Shapes are checked
    here (WeightError). ``plans`` caches each view's walk by the input and the array's layout."""
    from anec.runtime import native

    if not native.available():
        return None
    plans = {} if plans is None else plans
    out = {}
    for w in entries:
        if w.key not in weights:
            continue
        arr = weights[w.key]
        if not isinstance(arr, np.ndarray) or arr.dtype not in _MAGNITUDE or not arr.size:
            return None
        sig = (w.input, arr.shape, arr.strides, arr.dtype)
        plan = plans.get(sig, False)
        if plan is False:
            plan = _view_plan(w, arr, specs[w.input])
            if plan is not None and plan[0] < 0:  # numpy copied: this array's view, not cached
                v = _view(w.key, arr, w)
                out[w.input] = (v, 0, plan[1])
                continue
            plans[sig] = plan
        if plan is None:
            return None
        offset, walk, partial = plan
        if partial and not _fast_valid(arr, DType.fp16):
            return None  # a view of part of the array: the rest is checked as materialize does
        out[w.input] = (arr, offset, walk)
    return out


def _view_plan(w: "WeightInputEntry", arr: np.ndarray, spec: Mapping[str, Any]) -> tuple[int, Walk, bool] | None:
    """(byte offset in ``arr``, 2-D walk, covers only part of ``arr``) of entry ``w``'s view of
    ``arr`` (offset -1 when numpy could only copy); None when C does not take it."""
    if spec["dtype"] != "fp16" or w.dtype != "fp16":
        return None
    v = _view(w.key, arr, w)
    walk = strided_2d(v)
    if walk is None or v.shape != tuple(spec["logical_shape"]):
        return None
    if not np.may_share_memory(v, arr):
        return -1, walk, False
    offset = v.__array_interface__["data"][0] - arr.__array_interface__["data"][0]
    return offset, walk, v.size != arr.size
