"""Weight storage: the checkpoint tensors a module's ``const(weight="key")`` nodes name.

The IR names checkpoint tensors by key; their values never appear in the IR
or in MIL text. A :class:`WeightStore` maps keys to the arrays as stored in a
checkpoint (.safetensors or .npz, :func:`load_weights`) or generated
(:func:`anec.ir.weight_binding.random_weights`). A .safetensors file is read
by :class:`SafetensorsFile`, the one safetensors reader of anec: the header is
parsed once and checked before any view (:func:`read_safetensors_header`), the
tensors are views of a private memory map. :func:`touch_pages` maps the pages
of arrays ahead of their first reader.

How a const views its stored tensor (perm, slice, reshape, cast), random
weights and the checks of a module against a store are the binding to the
graph: :mod:`anec.ir.weight_binding`.
"""

from __future__ import annotations

import math
import mmap
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

from anec.diagnostics import AnecError, WeightError
from anec.fsutil import parse_json

RANDOM_HINT = "pass --random-weights SEED to run without a checkpoint"


class WeightStore(Mapping[str, np.ndarray]):
    """Checkpoint key -> stored array (read-only mapping) plus where they came from."""

    def __init__(self, tensors: Mapping[str, np.ndarray] | None = None, source: str = "<memory>",
                 origins: Mapping[str, str] | None = None) -> None:
        self._tensors: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in (tensors or {}).items()}
        self.source = source
        """Human description: a file name, ``random(seed=0)``, or a ``+``-joined list."""
        self.origins: dict[str, str] = dict(origins) if origins else {k: source for k in self._tensors}
        """Per key: the source it came from (for messages)."""

    def __getitem__(self, key: str) -> np.ndarray:
        return self._tensors[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __repr__(self) -> str:
        return f"<WeightStore {self.source}: {len(self)} tensors>"

    @staticmethod
    def merge(stores: Iterable["WeightStore"]) -> "WeightStore":
        """One store holding every key of ``stores``; a key in two of them is an error."""
        tensors: dict[str, np.ndarray] = {}
        origins: dict[str, str] = {}
        sources = []
        for s in stores:
            sources.append(s.source)
            for k in s:
                if k in tensors:
                    raise WeightError(
                        f"weight '{k}' is in both {origins[k]} and {s.origins.get(k, s.source)}",
                        hint="each key must come from one weight file",
                    )
                tensors[k] = s[k]
                origins[k] = s.origins.get(k, s.source)
        return WeightStore(tensors, " + ".join(sources) if sources else "<no weights>", origins)


# ---------------------------------------------------------------------------
# loading


ST_HEADER_MAX = 100 << 20
"""The largest safetensors header read (the format's own limit: the ``safetensors``
package refuses headers above 100 MB)."""
ST_MAX_RANK = 32

ST_ITEMSIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}
"""Every dtype a safetensors header may name, with its size in bytes."""

ST_NUMPY = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
    "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?",
}
"""The dtypes numpy holds as stored (not BF16 nor the F8 formats)."""


@dataclass(frozen=True)
class StEntry:
    """One tensor of a safetensors header: dtype name, shape, byte range in the data section."""

    dtype: str
    shape: tuple[int, ...]
    start: int
    stop: int


@dataclass(frozen=True)
class StHeader:
    """A checked safetensors header: the data section starts at ``base`` and is ``data_bytes`` long."""

    base: int
    data_bytes: int
    tensors: dict[str, StEntry]
    """In header order."""
    metadata: dict[str, str]


def _pread_exactly(fd: int, n: int, offset: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.pread(fd, min(n - got, 1 << 30), offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_safetensors_header(fd: int, name: str, size: int | None = None) -> StHeader:
    """The checked header of the safetensors file open as ``fd`` (``name`` for messages).

    The one parser of safetensors headers in anec (:class:`SafetensorsFile` uses it). The
    header length is bounded by the file size and :data:`ST_HEADER_MAX` before a
    byte of it is read; the header is strict JSON (no NaN, no duplicate keys, bounded
    nesting); every entry has exactly ``dtype`` (a known one), ``shape`` (at most 32
    non-negative integers) and ``data_offsets`` (two integers ``begin <= end`` inside
    the data section, ``end - begin == prod(shape) * itemsize``); no two tensors
    overlap; ``__metadata__`` maps strings to strings. Anything else is a
    :class:`WeightError` naming the file and the tensor, never quoting file content
    beyond a shortened key."""
    def bad(why: str) -> WeightError:
        return WeightError(f"{name}: cannot read safetensors file: {why}")

    def not_st(why: str) -> WeightError:
        return WeightError(f"{name}: not a safetensors file ({why})")

    try:
        if size is None:
            size = os.fstat(fd).st_size
        head = _pread_exactly(fd, 8, 0)
        if len(head) != 8:
            raise not_st("shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise not_st(f"header length {n} runs past the end of the file ({size} bytes)")
        if n > ST_HEADER_MAX:
            raise not_st(f"header length {n} is above the limit of {ST_HEADER_MAX} bytes")
        raw = _pread_exactly(fd, n, 8)
    except OSError as e:
        raise WeightError(f"{name}: cannot read safetensors file: {e.strerror}") from None
    if len(raw) != n:
        raise not_st("the file is shorter than its header length (truncated)")
    try:
        header = parse_json(raw, name, "safetensors header")
    except AnecError as e:
        raise not_st(f"unreadable header: {e.message.removeprefix(name + ': ')}") from None
    if not isinstance(header, dict):
        raise not_st("the header is not a table")
    base, data_bytes = 8 + n, size - 8 - n
    tensors: dict[str, StEntry] = {}
    metadata: dict[str, str] = {}
    for key, info in header.items():
        shown = _short(key)
        if key == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise bad("__metadata__ is not a table of strings")
            metadata = dict(info)
            continue
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise bad(f"tensor {shown} has a malformed entry (it needs exactly dtype, shape and data_offsets)")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype, str) or dtype not in ST_ITEMSIZE:
            raise bad(f"tensor {shown} has unsupported dtype {_short(dtype)}")
        if (not isinstance(shape, list) or len(shape) > ST_MAX_RANK
                or not all(type(d) is int and d >= 0 for d in shape)):
            raise bad(f"tensor {shown} has a malformed shape (at most {ST_MAX_RANK} non-negative integers)")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets):
            raise bad(f"tensor {shown} has malformed data_offsets (two integers)")
        start, stop = offsets
        nbytes = math.prod(shape) * ST_ITEMSIZE[dtype]  # Python integers: no overflow
        if not 0 <= start <= stop <= data_bytes or stop - start != nbytes:
            raise bad(f"tensor {shown}: data_offsets {_short(offsets)} do not hold {dtype}{_short(shape)} "
                      f"inside the {data_bytes}-byte data section")
        tensors[key] = StEntry(dtype, tuple(shape), start, stop)
    spans = sorted((e.start, e.stop, k) for k, e in tensors.items() if e.stop > e.start)
    for (_, end, k1), (start, _, k2) in zip(spans, spans[1:]):
        if start < end:
            raise bad(f"tensors {_short(k1)} and {_short(k2)} overlap")
    return StHeader(base, data_bytes, tensors, metadata)


def _short(value: Any, limit: int = 60) -> str:
    """A value from a hostile file, quoted and shortened for a message."""
    s = repr(value)
    return s if len(s) <= limit else s[: limit - 3] + "..."


class SafetensorsFile:
    """A ``.safetensors`` file over a private memory map: ``keys()``, ``shape(key)``,
    ``dtype(key)``, ``view(key)``, ``get(key)``, ``stored(key)``, ``rows(key, index)``,
    ``drop_pages(key)``.

    The one reader of safetensors files in anec: every header is checked by
    :func:`read_safetensors_header` (each tensor's bytes lie inside the data section,
    match its dtype and shape, and no two overlap), so a hostile file is a WeightError,
    never an out-of-bounds view. Nothing is read or copied up front: a tensor's pages
    are read from the file (or the page cache) when first touched, and a write to a
    view copies only the pages written, never the file (copy-on-write). The file is
    opened without blocking and must be a regular file; give ``fd`` (an open
    descriptor, which is closed here) to read a file reached beneath a directory.
    """

    def __init__(self, path: str | os.PathLike, fd: int | None = None) -> None:
        self.path = Path(path)
        if fd is None:
            try:
                fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
            except OSError as e:
                raise WeightError(f"cannot read safetensors file {self.path}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise WeightError(f"cannot read safetensors file {self.path}: it is not a regular file")
            self.header = read_safetensors_header(fd, str(self.path), st.st_size)
            self.metadata = self.header.metadata
            self._map: "mmap.mmap | bytearray | None" = None
            if any(e.stop > e.start for e in self.header.tensors.values()):
                try:
                    self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
                except (OSError, ValueError):  # a file system without mmap, or no address space left
                    self._map = bytearray(_pread_exactly(fd, st.st_size, 0))
                if len(self._map) != st.st_size:
                    raise WeightError(f"{self.path}: cannot read safetensors file: the file changed while it was read")
        except OSError as e:
            raise WeightError(f"cannot read safetensors file {self.path}: {e.strerror}") from None
        finally:
            os.close(fd)

    def keys(self) -> list[str]:
        return list(self.header.tensors)

    def __contains__(self, key: str) -> bool:
        return key in self.header.tensors

    def shape(self, key: str) -> tuple[int, ...]:
        return self.header.tensors[key].shape

    def dtype(self, key: str) -> str:
        """The safetensors dtype name (``F32``, ``BF16``...)."""
        return self.header.tensors[key].dtype

    def view(self, key: str) -> np.ndarray:
        """The tensor ``key`` as stored: an array over the map (no copy). BF16 and the F8
        formats, which numpy cannot hold, are a WeightError."""
        e = self.header.tensors[key]
        if e.dtype not in ST_NUMPY:
            raise WeightError(f"{self.path}: cannot read safetensors file: tensor {_short(key)} has unsupported "
                              f"dtype {e.dtype} here", hint="convert the checkpoint to fp16 or fp32 first")
        dt = np.dtype(ST_NUMPY[e.dtype])
        if self._map is None:
            return np.zeros(e.shape, dt)
        return np.frombuffer(self._map, dtype=dt, count=(e.stop - e.start) // dt.itemsize,
                             offset=self.header.base + e.start).reshape(e.shape)

    def get(self, key: str) -> np.ndarray:
        """The tensor ``key`` as a new numpy array (bf16 widened to fp32)."""
        e = self.header.tensors.get(key)
        if e is None:
            raise WeightError(f"tensor '{key}' is not in {self.path}")
        if e.dtype == "BF16":
            if self._map is None or e.stop == e.start:
                return np.zeros(e.shape, np.float32)
            raw = np.frombuffer(self._map, dtype="<u2", count=(e.stop - e.start) // 2,
                                offset=self.header.base + e.start)
            return (raw.astype(np.uint32) << 16).view(np.float32).reshape(e.shape)
        if e.dtype not in ST_NUMPY:
            raise WeightError(f"tensor '{key}' in {self.path} has unsupported dtype {e.dtype}")
        return np.array(self.view(key))


    def stored(self, key: str) -> np.ndarray:
        """The tensor ``key`` without a copy where numpy holds its dtype (:meth:`view`); BF16
        widened into a new fp32 array (:meth:`get`)."""
        return self.get(key) if self.header.tensors[key].dtype == "BF16" else self.view(key)

    def rows(self, key: str, index: Any) -> np.ndarray:
        """Rows ``index`` of the tensor's first axis as a new fp32 array (BF16 widened): only
        those rows' pages are read (an embedding lookup that never maps the whole table)."""
        e = self.header.tensors[key]
        if e.dtype != "BF16":
            return np.asarray(self.view(key)[index], np.float32)
        if self._map is None or e.stop == e.start:
            return np.zeros(e.shape, np.float32)[index]
        raw = np.frombuffer(self._map, dtype="<u2", count=(e.stop - e.start) // 2,
                            offset=self.header.base + e.start).reshape(e.shape)[index]
        return (raw.astype(np.uint32) << 16).view(np.float32)

    def drop_pages(self, key: str) -> None:
        """Give the pages of tensor ``key`` back to the kernel (``MADV_DONTNEED``): a streaming
        reader's resident memory then stays near one tensor, not the file. The views stay
        valid: a later read maps the pages from the file again. For readers only: a value
        written through a view of these pages is lost."""
        e = self.header.tensors[key]
        if not isinstance(self._map, mmap.mmap) or e.stop == e.start or not hasattr(self._map, "madvise"):
            return
        page = mmap.PAGESIZE
        start = (self.header.base + e.start) // page * page
        stop = min(len(self._map), -(-(self.header.base + e.stop) // page) * page)
        try:
            self._map.madvise(mmap.MADV_DONTNEED, start, stop - start)
        except (OSError, ValueError, AttributeError):  # a hint: a platform without it keeps the pages
            pass


def map_safetensors(path: str) -> dict[str, np.ndarray]:
    """Every tensor of a .safetensors file as an array over a private memory map of it
    (:class:`SafetensorsFile`: nothing read up front, copy-on-write, the header checked)."""
    f = SafetensorsFile(path)
    return {key: f.view(key) for key in f.keys()}


def touch_pages(arrays: Iterable[np.ndarray]) -> None:
    """Read one byte of every memory page of each C-contiguous array of ``arrays``.

    Over a memory-mapped checkpoint this maps the pages now (from the page
    cache, or the file), in address order. :func:`anec.compiler.compile_module`
    runs it on a worker thread while it clones the module and runs the first passes, so
    that the first pass to read every weight (legalize's fp16 range check)
    takes no page faults on the compiling thread. Reading leaves a private
    mapping's pages shared with the file: only a write copies a page.
    """
    step = mmap.PAGESIZE
    held = [a for a in arrays if a.flags.c_contiguous and a.nbytes > step]
    for a in sorted(held, key=lambda a: a.__array_interface__["data"][0]):
        int(a.reshape(-1).view(np.uint8)[::step].max())  # a numpy reduction: the GIL is let go


def load_weights(path: str | os.PathLike) -> WeightStore:
    """Read a .safetensors or .npz file into a WeightStore (safetensors memory-mapped:
    see :func:`map_safetensors`)."""
    path = str(path)
    if not os.path.exists(path):
        raise WeightError(f"weight file '{path}' does not exist", hint=RANDOM_HINT)
    ext = Path(path).suffix.lower()
    if ext == ".safetensors":
        f = SafetensorsFile(path)
        dtypes = {k: f.dtype(k) for k in f.keys()}
        unsupported = sorted(k for k, d in dtypes.items() if d in ("BF16", "F8_E4M3", "F8_E5M2"))
        if unsupported:
            raise WeightError(
                f"{path}: tensor '{unsupported[0]}' is {dtypes[unsupported[0]].lower()}, which numpy cannot hold"
                + (f" ({len(unsupported) - 1} more)" if len(unsupported) > 1 else ""),
                hint="convert the checkpoint to fp16 or fp32 first (e.g. tensor.half() in PyTorch)",
            )
        tensors = {key: f.view(key) for key in f.keys()}
    elif ext == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                tensors = {k: z[k] for k in z.files}
        except Exception as e:  # zipfile/pickle/value errors all mean a bad file
            raise WeightError(f"{path}: cannot read npz file: {e}") from None
    else:
        raise WeightError(f"unsupported weight file '{path}'", hint="use a .safetensors or .npz file")
    return WeightStore(tensors, path)
