"""BLOBFILE: the MILBlob storage v2 file that holds a program's weights.

A MIL ``const`` refers to a tensor stored in a weight file with
``BLOBFILE(path = string("@model_path/weights/w.bin"), offset = uint64(M))``.
The bytes are the format coremltools' ``_BlobStorageWriter`` produces (and
Apple's compiler reads); :class:`BlobWriter` output is byte-identical to it.
All integers are little-endian::

    file header (64 bytes)      u32 count, u32 version = 2, 56 zero bytes
    per blob, at offset M:
      metadata (64 bytes)       u32 0xDEADBEEF, u32 dtype code, u64 payload size,
                                u64 payload offset (= M + 64), u64 padding bits,
                                32 zero bytes
      payload                   ``size`` bytes, row-major
    next metadata at align64(payload offset + size); no padding after the last payload

The ``offset`` a MIL program writes is ``M``, the metadata record, never the
payload: pointing at the payload reads garbage on the device (constraint
``ANE-BLOBFILE-OFFSET``). The writer rewrites the header count after every
append, like coremltools, so a file is valid after each :meth:`BlobWriter.add`.

Run ``python -m anec.mil.blobfile FILE`` to list the blobs of a file.
"""

from __future__ import annotations

import hashlib
import mmap
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from anec.diagnostics import AnecError, ArtifactError

VERSION = 2
SENTINEL = 0xDEADBEEF
HEADER_BYTES = 64
METADATA_BYTES = 64
ALIGNMENT = 64

_HEADER = struct.Struct("<II")
_METADATA = struct.Struct("<IIQQQ")

DTYPE_CODES: dict[str, int] = {
    "float16": 1,
    "float32": 2,
    "uint8": 3,
    "int8": 4,
    "int16": 6,
    "uint16": 7,
    "int32": 14,
    "uint32": 15,
}
"""numpy dtype name -> MILBlob ``BlobDataType`` code (the byte-sized types)."""

SUBBYTE_CODES: dict[str, int] = {"int4": 8, "uint1": 9, "uint2": 10, "uint4": 11, "uint3": 12, "uint6": 13}
"""Sub-byte MIL dtype -> BlobDataType code: payloads packed LSB first (element 0 in the low
bits of byte 0), the unused bits of the last byte counted in the record's padding field.
Compressed weights (:mod:`anec.compress`) write them; they are read unpacked (uint8/int8)."""

SUBBYTE_BITS: dict[str, int] = {"int4": 4, "uint1": 1, "uint2": 2, "uint4": 4, "uint3": 3, "uint6": 6}

CODE_NAMES: dict[int, str] = {**{v: k for k, v in DTYPE_CODES.items()}, **{v: k for k, v in SUBBYTE_CODES.items()}}


def pack_bits(values: np.ndarray, bits: int) -> tuple[bytes, int]:
    """``values`` (unsigned, < 2^bits; signed ones as two's complement) packed LSB-first;
    returns the bytes and the unused bits of the last byte."""
    v = np.asarray(values).reshape(-1).astype(np.uint8) & np.uint8((1 << bits) - 1)
    if bits == 8:
        return v.tobytes(), 0
    n = v.size
    pad = (-(n * bits)) % 8
    if 8 % bits == 0:  # 1, 2, 4: whole values per byte, combined by shifts
        per = 8 // bits
        w = np.zeros(-(-n // per) * per, np.uint8)
        w[:n] = v
        w = w.reshape(-1, per)
        out = w[:, 0].copy()
        for j in range(1, per):
            out |= w[:, j] << np.uint8(j * bits)
        return out.tobytes(), pad
    bitarr = np.unpackbits(v[:, None], axis=1, bitorder="little")[:, :bits].reshape(-1)
    return np.packbits(bitarr, bitorder="little").tobytes(), pad


def unpack_bits(data: bytes | np.ndarray, bits: int, count: int, signed: bool = False) -> np.ndarray:
    """The inverse of :func:`pack_bits`: ``count`` values (uint8, or int8 when ``signed``)."""
    raw = np.frombuffer(bytes(data), np.uint8)
    if bits == 8:
        out = raw[:count].copy()
    elif 8 % bits == 0:
        per = 8 // bits
        mask = np.uint8((1 << bits) - 1)
        out = np.stack([(raw >> np.uint8(j * bits)) & mask for j in range(per)], axis=1).reshape(-1)[:count].copy()
    else:
        b = np.unpackbits(raw, bitorder="little")[: count * bits].reshape(count, bits)
        full = np.zeros((count, 8), np.uint8)
        full[:, :bits] = b
        out = np.packbits(full, axis=1, bitorder="little").reshape(-1)
    if signed:
        v = out.astype(np.int16)
        return np.where(v >= 1 << (bits - 1), v - (1 << bits), v).astype(np.int8)
    return out


def payload_bytes(dtype: str, count: int) -> int:
    """Bytes of a payload of ``count`` elements of ``dtype`` (a numpy or sub-byte name)."""
    if dtype in SUBBYTE_BITS:
        return (count * SUBBYTE_BITS[dtype] + 7) // 8
    return count * np.dtype(_NP_NAMES.get(dtype, dtype)).itemsize


_NP_NAMES = {"fp16": "float16", "fp32": "float32"}
_SHORT = {"float16": "fp16", "float32": "fp32"}


def align(n: int, to: int = ALIGNMENT) -> int:
    """``n`` rounded up to a multiple of ``to``."""
    return (n + to - 1) // to * to


def next_offset(metadata_offset: int, nbytes: int) -> int:
    """Where the metadata record after a blob of ``nbytes`` at ``metadata_offset`` starts."""
    return align(metadata_offset + METADATA_BYTES + nbytes)


def plan_offsets(sizes: list[int]) -> list[int]:
    """Metadata offsets of blobs of these payload sizes appended to an empty file.

    The emitter uses this to write ``offset = uint64(M)`` before any value
    exists; :class:`BlobWriter` follows the same arithmetic.
    """
    out, m = [], HEADER_BYTES
    for n in sizes:
        out.append(m)
        m = next_offset(m, n)
    return out


def dtype_code(dtype: np.dtype | str) -> int:
    """The BlobDataType code of a numpy dtype (ValueError if not storable)."""
    name = np.dtype(dtype).name
    if name not in DTYPE_CODES:
        storable = ", ".join(DTYPE_CODES)
        raise ValueError(f"dtype {name} cannot be stored in a BLOBFILE (storable: {storable})")
    return DTYPE_CODES[name]


class BlobWriter:
    """Builds a BLOBFILE, one tensor at a time.

    Payloads are not copied when added: the writer keeps the (contiguous,
    little-endian) array and copies it once, into :meth:`to_bytes` or straight
    into a file with :meth:`write_to`. Do not modify an array after adding it.
    Once :meth:`write_to` has written a whole file, the writer maps that file
    and lets go of the arrays: the bytes are then the file's.
    """

    def __init__(self) -> None:
        self._parts: list[bytes | memoryview] = []
        self._count = 0
        self._end = HEADER_BYTES
        self._file: mmap.mmap | None = None

    def add(self, arr: np.ndarray, dtype: str | None = None, packed: tuple[np.ndarray, int] | None = None) -> int:
        """Append ``arr`` (row-major, little-endian) and return its metadata offset.

        ``dtype`` a sub-byte type (``uint4``, ``uint1``, ``int4``, ...): ``arr`` holds the
        values unpacked (uint8/int8), which are packed LSB first, as coremltools does; or
        ``packed`` gives them packed already (the bytes as uint8, the padding bits)."""
        if self._file is not None:
            raise ValueError("this BLOBFILE has been written; it takes no more tensors")
        a = np.asarray(arr)
        padding = 0
        if dtype is not None and dtype in SUBBYTE_CODES and packed is not None:
            code = SUBBYTE_CODES[dtype]
            a, padding = np.ascontiguousarray(packed[0], np.uint8), int(packed[1])
        elif dtype is not None and dtype in SUBBYTE_CODES:
            code = SUBBYTE_CODES[dtype]
            bits = SUBBYTE_BITS[dtype]
            v = a.reshape(-1).astype(np.int64)
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if dtype.startswith("int") else (0, (1 << bits) - 1)
            if v.size and (v.min() < lo or v.max() > hi):
                raise ValueError(f"values out of the {dtype} range [{lo}, {hi}]")
            raw, padding = pack_bits(v, bits)
            a = np.frombuffer(raw, np.uint8)
        else:
            code = dtype_code(a.dtype)
            a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"), copy=False))
        m = align(self._end)
        data = m + METADATA_BYTES
        meta = bytearray(m - self._end + METADATA_BYTES)  # alignment padding, then the record
        _METADATA.pack_into(meta, m - self._end, SENTINEL, code, a.nbytes, data, padding)
        self._parts.append(bytes(meta))
        self._parts.append(memoryview(a.reshape(-1)).cast("B"))
        self._end = data + a.nbytes
        self._count += 1
        return m

    @property
    def count(self) -> int:
        return self._count

    @property
    def size(self) -> int:
        """Bytes of the file (not padded after the last payload)."""
        return self._end

    def _header(self) -> bytes:
        return _HEADER.pack(self._count, VERSION) + bytes(HEADER_BYTES - _HEADER.size)

    def to_bytes(self) -> bytes:
        """The file contents."""
        if self._file is not None:
            return self._file[:]
        return b"".join([self._header(), *self._parts])

    def write_to(self, f) -> int:
        """Write the file contents to the binary file object ``f`` (nothing copied on the
        way: each payload goes from its array to the file); returns the bytes written."""
        if self._file is not None:
            f.write(self._file)
            return self._end
        f.write(self._header())
        for part in self._parts:
            f.write(part)
        return self._end

    def written(self, fd: int) -> None:
        """Take the bytes from now on from the file open for reading as ``fd``, which holds
        exactly what :meth:`write_to` wrote (a read-only mapping), and drop the arrays."""
        if self._file is not None:
            return
        try:
            self._file = mmap.mmap(fd, self._end, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # a file system without mmap: keep the arrays
            return
        self._parts = []


class BlobFiles(Mapping[str, bytes]):
    """Weight file -> BLOBFILE bytes, each file's bytes built when first read.

    A compile holds each weight file as its :class:`BlobWriter` (payloads
    still views of the weights): writing the artifact streams it to disk from
    :meth:`source` without building its bytes (the one copy of each weight),
    after which the writer reads the file it wrote. Reading a file through
    the mapping builds its bytes once (:meth:`pin` builds them all).
    """

    def __init__(self, files: Mapping[str, "bytes | BlobWriter"] | None = None) -> None:
        self._files: dict[str, bytes | BlobWriter] = dict(files or {})

    def __getitem__(self, rel: str) -> bytes:
        data = self._files[rel]
        if isinstance(data, BlobWriter):
            data = self._files[rel] = data.to_bytes()
        return data

    def __contains__(self, rel: object) -> bool:
        return rel in self._files

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def __repr__(self) -> str:
        return f"<BlobFiles {sorted(self._files)}>"

    def source(self, rel: str) -> "bytes | BlobWriter":
        """What writes file ``rel``: its bytes, or the writer that streams them."""
        return self._files[rel]

    def pin(self) -> None:
        """Build every file's bytes now (the weights they came from may then change)."""
        for rel in self._files:
            self[rel]


@dataclass(frozen=True)
class BlobEntry:
    """The metadata record of one blob."""

    offset: int
    """Metadata offset (the value MIL refers to)."""
    dtype: str
    """numpy dtype name of the payload."""
    size: int
    """Payload bytes."""
    data_offset: int
    """Absolute offset of the payload."""
    padding_bits: int

    @property
    def count(self) -> int:
        """Number of elements."""
        if self.dtype in SUBBYTE_BITS:
            return (self.size * 8 - self.padding_bits) // SUBBYTE_BITS[self.dtype]
        return self.size // np.dtype(self.dtype).itemsize


class BlobReader:
    """Reads and validates a BLOBFILE (bytes or a path).

    Every inconsistency is an :class:`~anec.diagnostics.ArtifactError` naming
    the file and the offset: wrong version, a missing sentinel, an unknown
    dtype code, a payload running past the end of the file.
    """

    def __init__(self, data: bytes | bytearray | str | Path, name: str | None = None) -> None:
        if isinstance(data, (str, Path)):
            self.name = name or str(data)
            try:
                data = Path(data).read_bytes()
            except OSError as e:
                raise ArtifactError(f"cannot read weight file {self.name}: {e.strerror}") from None
        else:
            self.name = name or "<bytes>"
        self.data = bytes(data)
        if len(self.data) < HEADER_BYTES:
            raise ArtifactError(
                f"{self.name}: {len(self.data)} bytes is too short for a BLOBFILE (header is 64 bytes)"
            )
        self.header_count, version = _HEADER.unpack_from(self.data, 0)
        if version != VERSION:
            raise ArtifactError(
                f"{self.name}: BLOBFILE version {version}, expected {VERSION}",
                hint="the file is not a MILBlob storage v2 weight file",
            )

    def entry(self, offset: int) -> BlobEntry:
        """The validated metadata record at ``offset``."""
        where = f"{self.name} offset {offset}"
        if offset < HEADER_BYTES or offset % ALIGNMENT:
            raise ArtifactError(
                f"{where}: a blob offset must be a multiple of 64 and at least 64",
                constraint="ANE-BLOBFILE-OFFSET",
            )
        hint = None
        if offset >= HEADER_BYTES + METADATA_BYTES and self._has_sentinel(offset - METADATA_BYTES):
            hint = (
                f"offset {offset} is a payload; MIL must reference the metadata record at "
                f"{offset - METADATA_BYTES}"
            )
        if offset + METADATA_BYTES > len(self.data):
            raise ArtifactError(f"{where}: past the end of the file ({len(self.data)} bytes)", hint=hint,
                                constraint="ANE-BLOBFILE-OFFSET")
        sentinel, code, size, data_offset, padding = _METADATA.unpack_from(self.data, offset)
        if sentinel != SENTINEL:
            raise ArtifactError(
                f"{where}: no blob metadata here (sentinel 0x{sentinel:08X}, expected 0x{SENTINEL:08X})",
                hint=hint,
                constraint="ANE-BLOBFILE-OFFSET",
            )
        if code not in CODE_NAMES:
            raise ArtifactError(f"{where}: unsupported blob dtype code {code}")
        if data_offset < offset + METADATA_BYTES or data_offset + size > len(self.data):
            raise ArtifactError(
                f"{where}: payload [{data_offset}, {data_offset + size}) is outside the file "
                f"({len(self.data)} bytes)"
            )
        name = CODE_NAMES[code]
        if name in SUBBYTE_BITS:
            if padding >= 8 or (size == 0 and padding):
                raise ArtifactError(f"{where}: {padding} padding bits in a {name} payload (at most 7)")
        else:
            itemsize = np.dtype(name).itemsize
            if size % itemsize:
                raise ArtifactError(f"{where}: payload size {size} is not a multiple of {itemsize}")
        return BlobEntry(offset, CODE_NAMES[code], size, data_offset, padding)

    def _has_sentinel(self, offset: int) -> bool:
        return offset + 4 <= len(self.data) and struct.unpack_from("<I", self.data, offset)[0] == SENTINEL

    def entries(self) -> list[BlobEntry]:
        """Every blob in file order (also checks the header count)."""
        out, m = [], HEADER_BYTES
        while m < len(self.data):
            e = self.entry(m)
            out.append(e)
            m = align(e.data_offset + e.size)
        if len(out) != self.header_count:
            raise ArtifactError(
                f"{self.name}: header says {self.header_count} blobs, the file holds {len(out)}"
            )
        return out

    def read(self, offset: int, expect_dtype: np.dtype | str | None = None) -> np.ndarray:
        """The 1-D array stored at metadata ``offset`` (a read-only view)."""
        e = self.entry(offset)
        want = None if expect_dtype is None else (
            expect_dtype if isinstance(expect_dtype, str) and expect_dtype in SUBBYTE_BITS
            else np.dtype(_NP_NAMES.get(expect_dtype, expect_dtype) if isinstance(expect_dtype, str)
                          else expect_dtype).name)
        if want is not None and want != e.dtype:
            raise ArtifactError(
                f"{self.name} offset {offset}: blob holds {e.dtype}, expected {want}"
            )
        if e.dtype in SUBBYTE_BITS:
            return unpack_bits(self.data[e.data_offset:e.data_offset + e.size], SUBBYTE_BITS[e.dtype], e.count,
                               signed=e.dtype.startswith("int"))
        dt = np.dtype(e.dtype).newbyteorder("<")
        return np.frombuffer(self.data, dtype=dt, count=e.count, offset=e.data_offset)

    def payload(self, offset: int) -> bytes:
        """The raw payload bytes of the blob at ``offset``."""
        e = self.entry(offset)
        return self.data[e.data_offset : e.data_offset + e.size]


def dump(path: str | Path) -> str:
    """A human-readable listing of a BLOBFILE."""
    r = BlobReader(path)
    entries = r.entries()
    lines = [f"{r.name}: {len(r.data)} bytes, version {VERSION}, {len(entries)} blob(s)"]
    lines.append(f"{'offset':>10}  {'dtype':<7} {'count':>10} {'bytes':>10}  {'min':>12} {'max':>12}  sha256")
    for e in entries:
        arr = r.read(e.offset)
        lo = hi = "-"
        if arr.size:
            a = arr.astype(np.float64)
            lo, hi = f"{a.min():.6g}", f"{a.max():.6g}"
        digest = hashlib.sha256(r.payload(e.offset)).hexdigest()[:16]
        name = _SHORT.get(e.dtype, e.dtype)
        lines.append(f"{e.offset:>10}  {name:<7} {e.count:>10} {e.size:>10}  {lo:>12} {hi:>12}  {digest}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: python -m anec.mil.blobfile FILE", file=sys.stderr)
        return 2
    try:
        print(dump(args[0]))
    except AnecError as e:
        print(e.render(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
