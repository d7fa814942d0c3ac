"""anec's own reader of ``torch.export`` archives (``.pt2``), for files that may be hostile.

``torch.export.load`` trusts its file: depending on what the archive holds it
unpickles with ``weights_only=False`` (legacy layouts, pickled weights and
constants, sample inputs, custom objects), loads AOTInductor shared libraries,
evaluates symbolic shape expressions with ``sympy.sympify`` (``eval``) and runs
guard code with ``exec``. :func:`read_pt2` reads and checks the archive first,
so that what torch is given afterwards can reach none of that:

1. **The file.** It must be a regular file (a FIFO, device, socket or directory
   is refused without blocking: it is opened ``O_NONBLOCK`` and checked with
   ``fstat``) of at most :data:`MAX_ARCHIVE_BYTES`, with a zip end record
   within its last 64 KiB (checked before the rest is read, so a large file of
   anything else is refused at once). It is then read **once** into memory;
   everything below looks only at those bytes.
2. **The central directory, before anything is decompressed.** At most
   :data:`MAX_MEMBERS` members; every name UTF-8, at most
   :data:`MAX_NAME_BYTES` bytes, no control character, no backslash, no empty,
   ``.`` or ``..`` component, not absolute, no duplicate, all under one
   top-level folder; compression stored or deflate; no encryption; declared
   sizes within the bound of the member's kind and :data:`MAX_TOTAL_BYTES` in
   all; a deflated member expands at most :data:`MAX_RATIO` times.
3. **The layout**, an allow-list of what ``torch.export.save`` writes (paths
   relative to the top-level folder)::

       archive_format                           "pt2"
       archive_version                          "0"
       byteorder                                "little"
       .data/version, .data/serialization_id    short ASCII
       models/model.json                        the program (strict JSON)
       data/weights/model_weights_config.json   raw tensors only
       data/constants/model_constants_config.json
       data/weights/weight_<n>, data/constants/tensor_<n>   raw tensor bytes
       data/sample_inputs/model.pt              checked, then dropped (below)
       extra/<name>                             UTF-8 text, checked, then dropped

   Anything else is refused: legacy layouts (``version``,
   ``serialized_*``, ``data/weights/model.pt``), AOTInductor and other backend
   folders (``data/aotinductor/``, ``data/executorch/``, ``data/mtia``,
   ``xl_model_weights/``), custom and opaque objects (``custom_obj_*``,
   ``opaque_obj_*``, always pickles), shared libraries (by name or by
   ELF/Mach-O/PE magic), any other name.
4. **The members**, each decompressed as a stream that stops at the size its
   header declares (a member that yields more is refused; a short one fails
   its CRC). No member but the raw tensors and the sample inputs may start
   with a pickle header (``0x80 0x02``..``0x05``) or a zip header; the configs
   and the program are strict JSON (UTF-8, no duplicate keys, no NaN, numbers
   of at most 20 digits, at most :data:`MAX_JSON_DEPTH` levels) of exactly the
   schema torch writes: every weight and constant a raw tensor (``use_pickle``
   false), a known dtype, strided, on the CPU, with static sizes whose storage
   fits in its member. The program may hold no symbolic shape expression other
   than a symbol or an integer (torch evaluates them with ``eval``) and no
   guard code (torch runs it with ``exec``).
5. **Sample inputs** are a pickle in every torch version (``torch.save``).
   Their ``data.pkl`` is disassembled with :mod:`pickletools` (never run): any
   import other than the tensor-rebuilding functions of a plain ``torch.save``
   is refused. They are then dropped: the importer does not use them.

:meth:`Pt2Archive.torch_bytes` is a new zip, built from the checked members
only (stored, under the folder ``archive``), with the sample inputs empty;
``load_pt2`` hands it to ``torch.export.load`` as a ``BytesIO``. torch never
sees the user's file, so it cannot read anything else from it (a second
central directory, a local header that disagrees, a member that was not
checked).

Every refusal is a :class:`~anec.frontends.TorchImportError` naming the file
and the member (or field), with a hint.
"""

from __future__ import annotations

import io
import json
import math
import os
import pickletools
import re
import stat
import zipfile
from dataclasses import dataclass, field
from typing import Any, Iterator

from anec.frontends import TorchImportError

# ---- bounds ------------------------------------------------------------------------

MAX_ARCHIVE_BYTES = 4 << 30
"""Largest ``.pt2`` file read (it is read into memory once)."""
MAX_TOTAL_BYTES = 4 << 30
"""Largest sum of the members' declared uncompressed sizes."""
MAX_TENSOR_BYTES = 4 << 30
"""Largest raw weight or constant member."""
MAX_PROGRAM_BYTES = 256 << 20
"""Largest ``models/model.json``."""
MAX_CONFIG_BYTES = 64 << 20
"""Largest weights or constants config."""
MAX_SAMPLE_INPUTS_BYTES = 256 << 20
"""Largest sample inputs member."""
MAX_EXTRA_BYTES = 16 << 20
"""Largest ``extra/`` file."""
MAX_SMALL_BYTES = 256
"""Largest ``archive_format``, ``archive_version``, ``byteorder``, ``.data/*``."""
MAX_MEMBERS = 65536
MAX_NAME_BYTES = 1024
MAX_RATIO = 200
"""A deflated member of more than 64 KiB may expand at most this many times."""
MAX_JSON_DEPTH = 64
MAX_INT_DIGITS = 20
MAX_TENSOR_ELEMENTS = 1 << 36
MAX_EXPR_CHARS = 64

_EOCD = b"PK\x05\x06"
_TAIL = 22 + 65535  # end record plus the longest comment
_CHUNK = 1 << 20
_HINT_SAVE = "save the program again with torch.export.save(exported_program, 'model.pt2')"
_HINT_CODE = ("anec imports archives of plain tensors and JSON only; this member could make "
              "torch run code from the file")

# dtype number of torch._export.serde.schema.ScalarType -> element size in bytes
_DTYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 16, 12: 1,
                13: 2, 28: 2, 29: 1, 30: 1, 31: 1, 32: 1, 33: 1, 34: 4, 35: 8}
_LAYOUT_STRIDED = 7

# the globals a plain torch.save of tensors (tuples, lists, dicts of them) imports
_SAMPLE_GLOBALS = {("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_parameter"),
                   ("collections", "OrderedDict"), ("torch", "device")} | {
    ("torch", f"{t}Storage") for t in ("Float", "Double", "Half", "BFloat16", "Long", "Int",
                                       "Short", "Char", "Byte", "Bool", "ComplexFloat",
                                       "ComplexDouble", "Untyped")}
_SAMPLE_OPS_REFUSED = {"INST", "OBJ", "STACK_GLOBAL", "EXT1", "EXT2", "EXT4", "PERSID"}

_NAME_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f\\]")
_EXPR_OK = re.compile(r"-?[0-9]{1,20}|[a-z]{1,4}[0-9]{1,9}")


@dataclass
class Pt2Archive:
    """A checked archive: its members (relative to the top-level folder) and their bytes."""

    path: str
    root: str
    members: dict[str, bytes] = field(default_factory=dict)
    """What torch is given, with the sample inputs already emptied."""
    dropped: list[str] = field(default_factory=list)
    """Checked members that are not given to torch (sample inputs, extra files)."""

    def torch_bytes(self) -> bytes:
        """A new zip of the checked members only, for ``torch.export.load(io.BytesIO(...))``."""
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as out:
            for name, data in self.members.items():
                info = zipfile.ZipInfo(f"archive/{name}", date_time=(1980, 1, 1, 0, 0, 0))
                out.writestr(info, data)
        return buf.getvalue()


# ---- messages ----------------------------------------------------------------------


def _show(name: str, limit: int = 120) -> str:
    """A member name for a message: escaped (no control characters reach the terminal)."""
    s = name.encode("unicode_escape", "backslashreplace").decode("ascii")
    return s if len(s) <= limit else s[: limit - 3] + "..."


class _Refusal:
    def __init__(self, path: str) -> None:
        self.path = path

    def file(self, what: str, hint: str | None = _HINT_SAVE) -> TorchImportError:
        return TorchImportError(f"'{self.path}' {what}", hint=hint)

    def member(self, name: str, what: str, hint: str | None = _HINT_SAVE) -> TorchImportError:
        return TorchImportError(f"'{self.path}': member '{_show(name)}': {what}", hint=hint)


# ---- the file ----------------------------------------------------------------------


def _read_file(path: str, max_bytes: int, bad: _Refusal) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise TorchImportError(f"no such file '{path}'") from None
    except IsADirectoryError:
        raise bad.file("is a directory, not a torch.export archive") from None
    except OSError as e:
        raise TorchImportError(f"cannot open '{path}': {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise bad.file("is a directory, not a torch.export archive")
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "not a regular file")
            raise bad.file(f"is {kind}, not a torch.export archive",
                           hint="give the path of a .pt2 file written by torch.export.save")
        size = st.st_size
        if size > max_bytes:
            raise bad.file(f"is {size} bytes, more than the {max_bytes} bytes anec reads",
                           hint="anec.frontends.pt2_archive.MAX_ARCHIVE_BYTES sets the bound")
        if size < 22 or _EOCD not in os.pread(fd, min(size, _TAIL), size - min(size, _TAIL)):
            raise bad.file("is not a torch.export archive (not a zip file)")
        parts, got = [], 0
        while True:
            chunk = os.read(fd, min(_CHUNK, size + 1 - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
            if got > size:
                raise bad.file("grew while it was read", hint="read it again once it is complete")
        if got != size:
            raise bad.file("shrank while it was read", hint="read it again once it is complete")
        return b"".join(parts)
    except OSError as e:
        raise TorchImportError(f"cannot read '{path}': {e.strerror or e}") from None
    finally:
        os.close(fd)


# ---- names and kinds ---------------------------------------------------------------


def _check_name(raw: str, info: zipfile.ZipInfo, bad: _Refusal) -> str:
    if info.flag_bits & 0x800 == 0 and not raw.isascii():
        # zipfile decoded it as cp437: the bytes are not declared UTF-8
        raise bad.member(raw, "its name is not UTF-8")
    try:
        nbytes = len(raw.encode("utf-8"))
    except UnicodeEncodeError:
        raise bad.member(raw, "its name is not UTF-8") from None
    if nbytes > MAX_NAME_BYTES:
        raise bad.member(raw, f"its name is longer than {MAX_NAME_BYTES} bytes")
    if _NAME_FORBIDDEN.search(raw):
        raise bad.member(raw, "its name holds a control character or a backslash", hint=_HINT_CODE)
    if raw.startswith("/"):
        raise bad.member(raw, "its name is an absolute path", hint=_HINT_CODE)
    parts = raw.rstrip("/").split("/") if raw.endswith("/") else raw.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise bad.member(raw, "its name has an empty, '.' or '..' component", hint=_HINT_CODE)
    return raw


_SMALL = {"archive_format", "archive_version", "byteorder", ".data/version", ".data/serialization_id"}
_WEIGHTS_CONFIG = "data/weights/model_weights_config.json"
_CONSTANTS_CONFIG = "data/constants/model_constants_config.json"
_PROGRAM = "models/model.json"
_SAMPLE_INPUTS = "data/sample_inputs/model.pt"
_LEGACY = re.compile(r"version|data\.pkl|serialized_.*|.*\.(pt|pkl|pickle|pth|bin)", re.S)
_SHARED_LIB = re.compile(r"\.(so(\.[0-9]+)*|dylib|dll|pyd)$", re.I)


def _kind(rel: str, full: str, bad: _Refusal) -> str:
    """What the member is, by its path under the top-level folder; refuses the rest."""
    if rel in _SMALL:
        return "small"
    if rel == _PROGRAM:
        return "program"
    if rel in (_WEIGHTS_CONFIG, _CONSTANTS_CONFIG):
        return "config"
    if re.fullmatch(r"data/weights/weight_[0-9]{1,9}", rel) or re.fullmatch(r"data/constants/tensor_[0-9]{1,9}", rel):
        return "tensor"
    if rel == _SAMPLE_INPUTS:
        return "sample"
    if rel.startswith("extra/"):
        if _SHARED_LIB.search(rel):
            raise bad.member(full, "a shared library, which torch may load", hint=_HINT_CODE)
        return "extra"
    if _SHARED_LIB.search(rel):
        raise bad.member(full, "a shared library, which torch may load", hint=_HINT_CODE)
    if rel.startswith("data/aotinductor/") or rel == "data/aotinductor":
        raise bad.member(full, "an AOTInductor package (compiled code torch would load)",
                         hint="anec imports the exported program, not compiled code: save it with "
                              "torch.export.save(exported_program, 'model.pt2')")
    for folder in ("data/executorch/", "data/mtia", "xl_model_weights/"):
        if rel.startswith(folder):
            raise bad.member(full, f"a {folder.strip('/')} member, which anec does not read", hint=_HINT_SAVE)
    if _LEGACY.fullmatch(rel) or rel.endswith((".pt", ".pkl", ".pickle", ".pth", ".bin")):
        raise bad.member(full, "the legacy torch.export layout (pickled, runs code when loaded)",
                         hint="re-save it with a current torch.export.save")
    if re.fullmatch(r"data/constants/(custom_obj|opaque_obj)_[0-9]+", rel):
        raise bad.member(full, "a pickled custom object, which anec does not load", hint=_HINT_CODE)
    if re.fullmatch(r"models/[^/]+\.json", rel):
        raise bad.member(full, "a second exported program (torch.export.save writes models/model.json only)")
    if re.fullmatch(r"data/(weights|constants)/[^/]+_(weights|constants)_config\.json", rel):
        raise bad.member(full, "a config of another program than 'model'")
    raise bad.member(full, "not part of a torch.export archive", hint=_HINT_SAVE)


_LIMITS = {"small": MAX_SMALL_BYTES, "program": MAX_PROGRAM_BYTES, "config": MAX_CONFIG_BYTES,
           "tensor": MAX_TENSOR_BYTES, "sample": MAX_SAMPLE_INPUTS_BYTES, "extra": MAX_EXTRA_BYTES,
           "dir": 0}


# ---- reading members ---------------------------------------------------------------


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, bad: _Refusal) -> bytes:
    """The member's bytes, never more than its declared size (the stream stops there)."""
    limit = info.file_size
    parts, got = [], 0
    try:
        with zf.open(info) as f:
            while True:
                chunk = f.read(min(_CHUNK, limit + 1 - got))
                if not chunk:
                    break
                got += len(chunk)
                if got > limit:
                    raise bad.member(info.filename, f"holds more bytes than the {limit} its header declares")
                parts.append(chunk)
    except TorchImportError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, NotImplementedError,
            RuntimeError, OverflowError, IndexError, KeyError, UnicodeDecodeError) as e:
        # zlib.error is an Exception subclass raised as such: caught below
        raise bad.member(info.filename, f"cannot be read ({type(e).__name__}: {str(e)[:160]})") from None
    except Exception as e:  # zlib.error
        if type(e).__module__ != "zlib":
            raise
        raise bad.member(info.filename, f"cannot be decompressed ({str(e)[:160]})") from None
    if got != limit:
        raise bad.member(info.filename, f"holds {got} bytes, not the {limit} its header declares")
    return b"".join(parts)


def _sniff(name: str, data: bytes, kind: str, bad: _Refusal) -> None:
    head = data[:4]
    if head == b"\x7fELF" or head in (b"\xfe\xed\xfa\xce", b"\xce\xfa\xed\xfe", b"\xfe\xed\xfa\xcf",
                                      b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe") or head[:2] == b"MZ" and kind != "tensor":
        raise bad.member(name, "a shared library or executable", hint=_HINT_CODE)
    if kind in ("tensor", "sample"):
        return
    if len(data) >= 2 and data[0] == 0x80 and 2 <= data[1] <= 5:
        raise bad.member(name, "a pickle, which anec does not load", hint=_HINT_CODE)
    if head == b"PK\x03\x04" or head == b"PK\x05\x06":
        raise bad.member(name, "a zip archive inside the archive", hint=_HINT_CODE)


# ---- JSON --------------------------------------------------------------------------


def _json(name: str, data: bytes, bad: _Refusal) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad.member(name, f"not UTF-8 (byte {e.start})") from None

    def pairs(items: list[tuple[str, Any]]) -> dict:
        out: dict = {}
        for k, v in items:
            if k in out:
                raise ValueError(f"key '{_show(k, 40)}' appears twice in one object")
            out[k] = v
        return out

    def const(s: str) -> Any:
        raise ValueError(f"{s} is not a JSON number")

    def integer(s: str) -> int:
        if len(s.lstrip("-")) > MAX_INT_DIGITS:
            raise ValueError(f"an integer of {len(s)} digits")
        return int(s)

    def number(s: str) -> float:
        if len(s) > 64:
            raise ValueError(f"a number of {len(s)} characters")
        v = float(s)
        if not math.isfinite(v):
            raise ValueError(f"number {s[:30]} is out of range")
        return v

    try:
        obj = json.loads(text, object_pairs_hook=pairs, parse_constant=const, parse_int=integer,
                         parse_float=number)
    except RecursionError:  # json's scanner counts its recursion: 10^5 brackets end here, quickly
        raise bad.member(name, f"JSON nested more than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:
        raise bad.member(name, f"not valid JSON ({str(e)[:160]})") from None
    stack = [(obj, 1)]
    while stack:  # iterative: the depth check itself cannot exhaust the stack
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > MAX_JSON_DEPTH:
                raise bad.member(name, f"JSON nested more than {MAX_JSON_DEPTH} levels")
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return obj


def _walk(obj: Any) -> Iterator[tuple[str, Any, str]]:
    """(key, value, path) of every object member, iteratively."""
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        v, p = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                yield k, x, f"{p}.{k}" if p else k
                stack.append((x, f"{p}.{k}" if p else k))
        elif isinstance(v, list):
            stack.extend((x, f"{p}[{i}]") for i, x in enumerate(v))


def _check_program(name: str, obj: Any, bad: _Refusal) -> None:
    if not isinstance(obj, dict) or not isinstance(obj.get("graph_module"), dict):
        raise bad.member(name, "not a serialized exported program (no 'graph_module' object)")
    guards = obj.get("guards_code", [])
    if guards != []:
        raise bad.member(name, "field 'guards_code': guard code (torch runs it with exec); anec "
                               "imports programs with static shapes only", hint=_HINT_CODE)
    for key, value, where in _walk(obj):
        if key == "expr_str":
            if not isinstance(value, str) or len(value) > MAX_EXPR_CHARS or not _EXPR_OK.fullmatch(value.strip()):
                raise bad.member(name, f"field '{_show(where, 100)}': a symbolic shape expression other than "
                                       "a symbol or an integer (torch evaluates it with eval); anec "
                                       "imports programs with static shapes only", hint=_HINT_CODE)


def _expect_keys(name: str, obj: Any, keys: set[str], where: str, bad: _Refusal) -> dict:
    if not isinstance(obj, dict):
        raise bad.member(name, f"field '{_show(where, 100)}': expected an object")
    if set(obj) != keys:
        extra = sorted(set(obj) - keys)
        missing = sorted(keys - set(obj))
        what = f"unexpected key '{_show(extra[0], 40)}'" if extra else f"missing key '{missing[0]}'"
        raise bad.member(name, f"field '{_show(where, 100)}': {what}")
    return obj


def _as_int(name: str, v: Any, where: str, lo: int, hi: int, bad: _Refusal) -> int:
    if not isinstance(v, dict) or set(v) != {"as_int"}:
        raise bad.member(name, f"field '{_show(where, 100)}': expected {{\"as_int\": n}} (a static size); "
                               "anec imports programs with static shapes only")
    n = v["as_int"]
    if isinstance(n, bool) or not isinstance(n, int) or not lo <= n <= hi:
        raise bad.member(name, f"field '{_show(where, 100)}.as_int': expected an integer in [{lo}, {hi}]")
    return n


def _check_config(name: str, obj: Any, prefix: str, tensors: dict[str, int], bad: _Refusal) -> None:
    """A weights or constants config; records in ``tensors`` the bytes each path_name must hold."""
    cfg = _expect_keys(name, obj, {"config"}, "", bad)["config"]
    if not isinstance(cfg, dict):
        raise bad.member(name, "field 'config': expected an object")
    for fqn, meta in cfg.items():
        where = f"config.{fqn}"
        if len(fqn) > 1024:
            raise bad.member(name, f"field '{_show(where, 100)}': a name longer than 1024 characters")
        meta = _expect_keys(name, meta, {"path_name", "is_param", "use_pickle", "tensor_meta"}, where, bad)
        if meta["use_pickle"] is not False:
            raise bad.member(name, f"field '{_show(where, 100)}.use_pickle': '{_show(fqn, 60)}' is stored as a "
                                   "pickled object, which anec does not load",
                             hint="only archives of plain tensors are imported (pickle can run code)")
        if not isinstance(meta["is_param"], bool):
            raise bad.member(name, f"field '{_show(where, 100)}.is_param': expected true or false")
        pn = meta["path_name"]
        if not isinstance(pn, str) or not re.fullmatch(prefix + r"[0-9]{1,9}", pn):
            raise bad.member(name, f"field '{_show(where, 100)}.path_name': expected '{prefix}<n>'",
                             hint="only archives of plain tensors are imported (pickle can run code)")
        tm = _expect_keys(name, meta["tensor_meta"],
                          {"dtype", "sizes", "requires_grad", "device", "strides", "storage_offset", "layout"},
                          f"{where}.tensor_meta", bad)
        w = f"{where}.tensor_meta"
        dt = tm["dtype"]
        if type(dt) is not int or dt not in _DTYPE_SIZES:
            raise bad.member(name, f"field '{_show(w, 100)}.dtype': not a dtype anec knows")
        if type(tm["layout"]) is not int or tm["layout"] != _LAYOUT_STRIDED:
            raise bad.member(name, f"field '{_show(w, 100)}.layout': only strided (dense) tensors are imported")
        if not isinstance(tm["requires_grad"], bool):
            raise bad.member(name, f"field '{_show(w, 100)}.requires_grad': expected true or false")
        dev = _expect_keys(name, tm["device"], {"type", "index"}, f"{w}.device", bad)
        if dev["type"] != "cpu" or not (dev["index"] is None or (type(dev["index"]) is int and 0 <= dev["index"] < 1024)):
            raise bad.member(name, f"field '{_show(w, 100)}.device': only CPU tensors are imported",
                             hint="move the program to the CPU before torch.export.save")
        sizes, strides = tm["sizes"], tm["strides"]
        if not isinstance(sizes, list) or not isinstance(strides, list) or len(sizes) != len(strides) or len(sizes) > 16:
            raise bad.member(name, f"field '{_show(w, 100)}': sizes and strides must be lists of one length (<= 16)")
        dims = [_as_int(name, s, f"{w}.sizes[{i}]", 0, 1 << 40, bad) for i, s in enumerate(sizes)]
        steps = [_as_int(name, s, f"{w}.strides[{i}]", 0, 1 << 40, bad) for i, s in enumerate(strides)]
        offset = _as_int(name, tm["storage_offset"], f"{w}.storage_offset", 0, 1 << 40, bad)
        numel = math.prod(dims)
        if numel > MAX_TENSOR_ELEMENTS:
            raise bad.member(name, f"field '{_show(w, 100)}.sizes': more than 2^36 elements")
        extent = 0 if numel == 0 else (offset + sum((d - 1) * s for d, s in zip(dims, steps)) + 1) * _DTYPE_SIZES[dt]
        if extent > MAX_TENSOR_BYTES:
            raise bad.member(name, f"field '{_show(w, 100)}': a tensor of more than {MAX_TENSOR_BYTES} bytes")
        key = ("weights/" if prefix == "weight_" else "constants/") + pn
        need, size = tensors.get(key, (0, _DTYPE_SIZES[dt]))
        tensors[key] = (max(need, extent), max(size, _DTYPE_SIZES[dt]))


def _check_sample_inputs(name: str, data: bytes, bad: _Refusal) -> None:
    """The sample inputs: a torch.save zip whose data.pkl imports only tensor rebuilders."""
    refuse = bad.member(name, "its sample inputs are not plain tensors (a pickle that imports other code)",
                        hint="only archives of plain tensors are imported (pickle can run code)")
    if not data:
        return
    try:
        inner = zipfile.ZipFile(io.BytesIO(data))
        pkls = [i for i in inner.infolist() if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"]
        if len(pkls) != 1 or pkls[0].file_size > MAX_SAMPLE_INPUTS_BYTES or pkls[0].compress_type not in (0, 8) \
                or pkls[0].flag_bits & 0x1:
            raise refuse
        if pkls[0].compress_type == 8 and pkls[0].file_size > 65536 and \
                pkls[0].file_size > MAX_RATIO * max(pkls[0].compress_size, 1):
            raise refuse
        pkl = _read_member(inner, pkls[0], bad)
    except TorchImportError:
        raise refuse from None
    except Exception:  # not a zip: torch would unpickle it directly
        pkl = data
    try:
        for op, arg, _pos in pickletools.genops(pkl):
            if op.name in _SAMPLE_OPS_REFUSED:
                raise refuse
            if op.name == "GLOBAL":
                mod, _, attr = str(arg).partition(" ")
                if (mod, attr) not in _SAMPLE_GLOBALS:
                    raise refuse
    except TorchImportError:
        raise
    except Exception:
        raise refuse from None


# ---- the archive -------------------------------------------------------------------


def read_pt2(path: str | os.PathLike, *, max_bytes: int = MAX_ARCHIVE_BYTES,
             max_total: int = MAX_TOTAL_BYTES) -> Pt2Archive:
    """Read and check a ``.pt2`` file (see the module docstring); :class:`TorchImportError` if refused."""
    spath = os.fspath(path)
    bad = _Refusal(spath)
    data = _read_file(spath, max_bytes, bad)
    return check_pt2_bytes(data, spath, max_total=max_total)


def check_pt2_bytes(data: bytes, path: str = "<bytes>", *, max_total: int = MAX_TOTAL_BYTES) -> Pt2Archive:
    """:func:`read_pt2` on bytes already read (``path`` names them in messages)."""
    bad = _Refusal(path)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
        infos = zf.infolist()
    except Exception as e:  # zipfile raises many kinds on hostile directories
        raise bad.file(f"is not a torch.export archive ({type(e).__name__}: {str(e)[:160]})") from None
    if not infos:
        raise bad.file("is not a torch.export archive (an empty zip file)")
    if len(infos) > MAX_MEMBERS:
        raise bad.file(f"has {len(infos)} members, more than the {MAX_MEMBERS} anec reads")

    # 1. the central directory: names, kinds, declared sizes; nothing decompressed yet
    seen: set[str] = set()
    root = None
    plan: list[tuple[zipfile.ZipInfo, str, str]] = []
    total = 0
    for info in infos:
        full = _check_name(info.orig_filename, info, bad)  # zipfile cuts .filename at a NUL
        if full in seen:
            raise bad.member(full, "appears twice in the archive", hint=_HINT_CODE)
        seen.add(full)
        top, _, rel = full.partition("/")
        if full.endswith("/") and (root is None or top == root):  # a directory entry (zip -r writes them)
            if info.file_size != 0:
                raise bad.member(full, "a directory entry with content")
            root = top if root is None else root
            plan.append((info, rel.rstrip("/"), "dir"))
            continue
        if not rel and _LEGACY.fullmatch(full):
            raise bad.member(full, "the legacy torch.export layout (pickled, runs code when loaded)",
                             hint="re-save it with a current torch.export.save")
        if root is None:
            root = top
        if top != root or not rel:
            raise bad.member(full, f"not under the archive's top-level folder '{_show(root, 60)}'", hint=_HINT_SAVE)
        if info.flag_bits & 0x41:
            raise bad.member(full, "encrypted", hint=_HINT_SAVE)
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise bad.member(full, f"compression method {info.compress_type} (only stored and deflate are read)")
        kind = _kind(rel, full, bad)
        if info.file_size > _LIMITS[kind]:
            raise bad.member(full, f"declares {info.file_size} bytes, more than the {_LIMITS[kind]} "
                                   f"anec reads for this member")
        if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
            raise bad.member(full, "a stored member whose sizes disagree")
        if info.compress_type == zipfile.ZIP_DEFLATED and info.file_size > 65536 and \
                info.file_size > MAX_RATIO * max(info.compress_size, 1):
            raise bad.member(full, f"expands more than {MAX_RATIO} times (a zip bomb?)",
                             hint="torch.export.save stores members uncompressed; save it again")
        total += info.file_size
        if total > max_total:
            raise bad.file(f"declares more than {max_total} bytes of content in all (at member "
                           f"'{_show(full)}')", hint="anec.frontends.pt2_archive.MAX_TOTAL_BYTES sets the bound")
        plan.append((info, rel, kind))
    assert root is not None
    rels = {rel: kind for _, rel, kind in plan}
    for required in ("archive_format", "archive_version", _PROGRAM, _WEIGHTS_CONFIG, _CONSTANTS_CONFIG):
        if required not in rels:
            if required == _PROGRAM:
                raise bad.file("holds no exported program (no models/model.json)", hint=_HINT_SAVE)
            raise bad.file(f"is not a torch.export archive (no '{root}/{required}')", hint=_HINT_SAVE)

    # 2. the members, each read with a hard bound
    out = Pt2Archive(path, root)
    tensors_need: dict[str, tuple[int, int]] = {}
    tensor_sizes: dict[str, tuple[str, int]] = {}
    for info, rel, kind in plan:
        full = info.filename
        if kind == "dir":
            out.dropped.append(rel)
            continue
        body = _read_member(zf, info, bad)
        _sniff(full, body, kind, bad)
        if kind == "small":
            ok = {"archive_format": rb"pt2", "archive_version": rb"0", "byteorder": rb"little",
                  ".data/version": rb"[0-9]{1,4}\n?", ".data/serialization_id": rb"[0-9A-Za-z_-]{0,64}"}[rel]
            if not re.fullmatch(ok, body):
                raise bad.member(full, f"expected {ok.decode()!r}, got {len(body)} other bytes")
            out.members[rel] = body
        elif kind == "program":
            _check_program(full, _json(full, body, bad), bad)
            out.members[rel] = body
        elif kind == "config":
            prefix = "weight_" if rel == _WEIGHTS_CONFIG else "tensor_"
            _check_config(full, _json(full, body, bad), prefix, tensors_need, bad)
            out.members[rel] = body
        elif kind == "tensor":
            key = rel.split("/")[1] + "/" + rel.rsplit("/", 1)[1]
            tensor_sizes[key] = (full, len(body))
            out.members[rel] = body
        elif kind == "sample":
            _check_sample_inputs(full, body, bad)
            out.members[rel] = b""
            out.dropped.append(rel)
        elif kind == "extra":
            try:
                body.decode("utf-8")
            except UnicodeDecodeError as e:
                raise bad.member(full, f"an extra file that is not UTF-8 text (byte {e.start})") from None
            out.dropped.append(rel)
    # 3. every raw tensor member referenced and large enough for its views
    for key, (full, n) in tensor_sizes.items():
        if key not in tensors_need:
            raise bad.member(full, "a tensor no config refers to")
        need, elsize = tensors_need[key]
        if n < need or n % elsize:
            raise bad.member(full, f"holds {n} bytes; its config needs {need} (a multiple of {elsize})")
    for key, (need, _) in tensors_need.items():
        if key not in tensor_sizes:
            folder = "weights" if key.startswith("weights/") else "constants"
            raise bad.member(f"{root}/data/{folder}/{key.split('/', 1)[1]}",
                             "missing: a config refers to it")
    return out
