"""A corpus of hostile and faulty ``.pt2`` files, generated from genuine ``torch.export.save``
archives (nothing checked in).

:func:`build_corpus` saves a small program (a linear layer, a buffer and a lifted constant
tensor, so the archive has weights, constants and sample inputs), then writes one copy per
:class:`Case`: pickles that create a marker file in every member position (the program,
configs, weights, constants, sample inputs, extra files, one and two folders deeper, under
other extensions), the legacy layout with a decoy program, AOTInductor packages with a real
shared library whose constructor creates the marker, names that escape (``..``, absolute,
backslash, NUL, control characters, not UTF-8), duplicates, zip bombs (honest and lying
sizes), damaged zips, FIFOs, devices, directories, a 2 GiB sparse file, malformed and
hostile JSON (10^5 levels, huge numbers, symbolic shapes and guards that torch evaluates).
Every case names the error anec must report and the exit code of ``anec import``.

Run ``python -m tests.frontends.pt2_corpus DIR`` to write the corpus to DIR and list it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator


@dataclass
class Case:
    name: str
    path: Path
    """What the user passes to ``anec import``."""
    expect: str
    """Substring of the error message (it also names the file)."""
    exit_code: int = 1
    """Of ``anec import PATH -o DIR``."""
    member: str | None = None
    """Substring naming the member or field in the message, when there is one."""
    cli: bool = False
    """Also run through ``anec import`` in a subprocess (the rest run in-process)."""
    limits: dict[str, int] = field(default_factory=dict)
    """Smaller bounds for ``read_pt2`` (cases of the size bounds, checked in-process)."""


# ---- payloads: each creates the marker file when it runs -------------------------------


class Exec:
    """Unpickling this runs ``code`` (``exec``)."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return (exec, (self.code,))


def marker_code(marker: Path) -> str:
    return f"open({str(marker)!r}, 'w').write('code from the .pt2 ran')"


def pickle_payload(marker: Path, protocol: int = 2) -> bytes:
    return pickle.dumps(Exec(marker_code(marker)), protocol=protocol)


def torch_save_payload(marker: Path) -> bytes:
    """A torch.save archive (zip with data.pkl) whose pickle runs code: what torch.load reads."""
    import torch

    buf = io.BytesIO()
    torch.save(((Exec(marker_code(marker)),), {}), buf)
    return buf.getvalue()


def shared_library(work: Path, marker: Path) -> bytes:
    """A real ELF shared library whose constructor creates the marker (ELF magic bytes
    when there is no C compiler)."""
    src = work / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void) {\n'
                   f'  FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("dlopen", f); fclose(f); }}\n}}\n')
    out = work / "evil.so"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc and subprocess.run([cc, "-shared", "-fPIC", "-o", str(out), str(src)],
                             capture_output=True).returncode == 0:
        return out.read_bytes()
    return b"\x7fELF\x02\x01\x01" + bytes(57)


# ---- genuine archives ----------------------------------------------------------------


def genuine_modules() -> dict[str, tuple[Any, tuple]]:
    """Small real programs: a linear layer with a buffer and a constant, an MLP, a
    transformer encoder layer."""
    import torch
    from torch import nn

    class Small(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 3)
            self.register_buffer("shift", torch.arange(3, dtype=torch.float32))
            self.scale = torch.tensor([0.5, 1.0, 2.0])  # a lifted constant tensor

        def forward(self, x):
            return self.lin(x) * self.scale + self.shift

    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    block = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True).eval()
    return {
        "small": (Small().eval(), (torch.randn(2, 4, generator=g),)),
        "mlp": (mlp, (torch.randn(2, 16, generator=g),)),
        "encoder": (block, (torch.randn(1, 5, 16, generator=g),)),
    }


def save_genuine(module: Any, args: tuple, path: Path) -> Path:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = torch.export.export(module, args)
        torch.export.save(ep, str(path))
    return path


# ---- zip surgery -----------------------------------------------------------------------

Members = list[tuple[str, bytes]]


def members(data: bytes) -> Members:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def write_zip(items: Members, compress: int = zipfile.ZIP_STORED,
              methods: dict[str, int] | None = None) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # duplicate names are the point of some cases
        with zipfile.ZipFile(buf, "w") as z:
            for name, data in items:
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = (methods or {}).get(name, compress)
                z.writestr(info, data)
    return buf.getvalue()


def central_entries(data: bytes) -> list[tuple[int, str]]:
    """(offset, name) of every central directory header."""
    out, pos = [], data.find(b"PK\x01\x02")
    while pos >= 0:
        n = struct.unpack_from("<H", data, pos + 28)[0]
        out.append((pos, data[pos + 46: pos + 46 + n].decode("utf-8", "replace")))
        pos = data.find(b"PK\x01\x02", pos + 46 + n)
    return out


def patch_central(data: bytes, name: str, **fields: int) -> bytes:
    """Set fields (flags, method, csize, usize) of one member's central directory header."""
    offsets = {"flags": (8, "<H"), "method": (10, "<H"), "csize": (20, "<I"), "usize": (24, "<I")}
    buf = bytearray(data)
    for pos, n in central_entries(data):
        if n == name:
            for k, v in fields.items():
                off, fmt = offsets[k]
                struct.pack_into(fmt, buf, pos + off, v)
            return bytes(buf)
    raise KeyError(name)


def replace(items: Members, rel: str, data: bytes) -> Members:
    hits = [i for i, (n, _) in enumerate(items) if n.split("/", 1)[1] == rel]
    assert hits, rel
    out = list(items)
    for i in hits:
        out[i] = (out[i][0], data)
    return out


def edit_json(items: Members, rel: str, fn: Callable[[Any], Any]) -> Members:
    for n, d in items:
        if n.split("/", 1)[1] == rel:
            return replace(items, rel, json.dumps(fn(json.loads(d))).encode())
    raise KeyError(rel)


def add(items: Members, rel: str, data: bytes) -> Members:
    root = items[0][0].split("/", 1)[0]
    return items + [(f"{root}/{rel}", data)]


def drop(items: Members, rel: str) -> Members:
    return [(n, d) for n, d in items if n.split("/", 1)[1] != rel]


def rename(items: Members, rel: str, new_rel: str) -> Members:
    root = items[0][0].split("/", 1)[0]
    return [(f"{root}/{new_rel}" if n.split("/", 1)[1] == rel else n, d) for n, d in items]


WEIGHTS_CFG = "data/weights/model_weights_config.json"
CONSTANTS_CFG = "data/constants/model_constants_config.json"
PROGRAM = "models/model.json"
SAMPLE = "data/sample_inputs/model.pt"


def _set_meta(key: str, value: Any, fqn: str | None = None) -> Callable[[Any], Any]:
    def fn(cfg):
        for name, meta in cfg["config"].items():
            if fqn is None or name == fqn:
                meta[key] = value
        return cfg
    return fn


def _set_tensor_meta(key: str, value: Any) -> Callable[[Any], Any]:
    def fn(cfg):
        for meta in cfg["config"].values():
            meta["tensor_meta"][key] = value
            break
        return cfg
    return fn


def _first_sym_int(program: Any, expr: str) -> Any:
    """Replace the first static size of the program's tensor values by a symbolic one."""
    values = program["graph_module"]["graph"]["tensor_values"]
    first = next(iter(values.values()))
    first["sizes"][0] = {"as_expr": {"expr_str": expr, "hint": {"as_int": 2}}}
    return program


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# ---- the corpus --------------------------------------------------------------------------


def build_corpus(work: Path, marker: Path) -> list[Case]:
    """Write every case under ``work``; ``marker`` is the file any payload would create."""
    work.mkdir(parents=True, exist_ok=True)
    mods = genuine_modules()
    base_path = save_genuine(*mods["small"], work / "genuine.pt2")
    base = base_path.read_bytes()
    items = members(base)
    root = items[0][0].split("/", 1)[0]
    pk = pickle_payload(marker)
    ts = torch_save_payload(marker)
    elf = shared_library(work, marker)
    cases: list[Case] = []

    def case(name: str, data: bytes | None, expect: str, member: str | None = None, **kw: Any) -> None:
        p = work / f"{name}.pt2"
        if data is not None:
            p.write_bytes(data)
        cases.append(Case(name, p, expect, member=member, **kw))

    pickled = "pickled object"
    code = "a pickle, which anec does not load"
    w0 = "data/weights/weight_0"
    t0 = "data/constants/tensor_0"

    # -- pickles in every member position
    case("weights_use_pickle", write_zip(edit_json(replace(items, w0, ts), WEIGHTS_CFG, _set_meta("use_pickle", True))),
         pickled, member="use_pickle", cli=True)
    # a pickle's length follows the marker's path; one a multiple of 4 and over the tensor's
    # bytes is a valid larger storage (read as raw floats, never unpickled), so pad it off 4
    odd = pk + b"\0" * ((2 - len(pk)) % 4)
    case("weights_raw_pickle", write_zip(replace(items, w0, odd)), "its config needs", member=w0)
    case("weights_torch_save", write_zip(replace(items, w0, ts)), "its config needs", member=w0)
    case("constants_use_pickle", write_zip(edit_json(replace(items, t0, ts), CONSTANTS_CFG, _set_meta("use_pickle", True))),
         pickled, member="use_pickle")
    opaque = edit_json(add(items, "data/constants/opaque_obj_0", pk), CONSTANTS_CFG,
                       lambda c: {"config": {**c["config"], "obj": {"path_name": "opaque_obj_0", "is_param": False,
                                                                     "use_pickle": True, "tensor_meta": None}}})
    case("constants_opaque_object", write_zip(opaque), "pickled custom object", member="opaque_obj_0")
    case("constants_custom_object", write_zip(add(items, "data/constants/custom_obj_0", ts)),
         "pickled custom object", member="custom_obj_0")
    case("constants_path_name_escape", write_zip(edit_json(items, CONSTANTS_CFG, _set_meta("path_name", "../weights/weight_0"))),
         "expected 'tensor_<n>'", member="path_name")
    case("sample_inputs_torch_save", write_zip(replace(items, SAMPLE, ts)), "not plain tensors", member=SAMPLE, cli=True)
    case("sample_inputs_raw_pickle", write_zip(replace(items, SAMPLE, pk)), "not plain tensors", member=SAMPLE)
    case("sample_inputs_protocol4", write_zip(replace(items, SAMPLE, pickle_payload(marker, 4))),
         "not plain tensors", member=SAMPLE)
    case("sample_inputs_garbage", write_zip(replace(items, SAMPLE, b"\x80\x02garbage")), "not plain tensors", member=SAMPLE)
    case("program_is_pickle", write_zip(replace(items, PROGRAM, pk)), code, member=PROGRAM)
    case("weights_config_is_pickle", write_zip(replace(items, WEIGHTS_CFG, pk)), code, member=WEIGHTS_CFG)
    case("constants_config_is_torch_save", write_zip(replace(items, CONSTANTS_CFG, ts)),
         "a zip archive inside the archive", member=CONSTANTS_CFG)
    case("archive_format_is_pickle", write_zip(replace(items, "archive_format", pk)), code, member="archive_format")
    case("extra_file_pickle", write_zip(add(items, "extra/notes.txt", pk)), code, member="extra/notes.txt")
    case("extra_file_pkl_name", write_zip(add(items, "extra/state.pkl", pickle_payload(marker, 5))), code,
         member="extra/state.pkl")
    case("extra_file_zip", write_zip(add(items, "extra/inner.txt", ts)), "a zip archive inside", member="extra/inner.txt")
    case("one_folder_deeper", write_zip(add(items, "data/weights/sub/weight_0", pk)), "not part of a torch.export archive",
         member="data/weights/sub/weight_0", cli=True)
    case("two_folders_deeper_pt", write_zip(add(items, "data/weights/a/b/model.pt", ts)), "legacy", member="a/b/model.pt")
    case("renamed_extension_json", write_zip(add(items, "data/constants/extra_config.json", pk)),
         "not part of a torch.export archive", member="extra_config.json")
    case("unreferenced_weight_pickle", write_zip(add(items, "data/weights/weight_7", pk)),
         "a tensor no config refers to", member="weight_7")
    case("sample_inputs_other_name", write_zip(add(items, "data/sample_inputs/evil.pt", ts)), "legacy",
         member="sample_inputs/evil.pt")
    case("second_program", write_zip(add(items, "models/evil.json", b"{}")), "a second exported program",
         member="models/evil.json")
    case("second_config", write_zip(add(items, "data/weights/evil_weights_config.json", b"{}")),
         "a config of another program", member="evil_weights_config.json")
    case("program_one_folder_deeper", write_zip(rename(items, PROGRAM, "models/model/model.json")),
         "not part of a torch.export archive", member="models/model/model.json")

    # -- legacy layouts (torch.export.load unpickles them with weights_only=False)
    legacy = [("version", b"8.20"), ("serialized_exported_program.json", b"{}"),
              ("serialized_state_dict.pt", ts), ("serialized_constants.pt", ts),
              ("serialized_example_inputs.pt", ts), ("models/x/model.json", b"{}")]
    case("legacy_layout_decoy", write_zip(legacy), "legacy torch.export layout", member="version", cli=True)
    case("legacy_in_folder", write_zip(add(items, "serialized_state_dict.pt", ts)), "legacy",
         member="serialized_state_dict.pt")
    case("legacy_weights_file", write_zip(add(items, "data/weights/model.pt", ts)), "legacy", member="data/weights/model.pt")
    case("legacy_constants_file", write_zip(add(items, "data/constants/model.pt", ts)), "legacy",
         member="data/constants/model.pt")
    case("top_level_data_pkl", write_zip(add(items, "data.pkl", pk)), "legacy", member="data.pkl")

    # -- AOTInductor packages and shared libraries
    aoti = add(add(items, "data/aotinductor/model/model.so", elf), "data/aotinductor/model/model.cpp", b"int x;")
    case("aotinductor_so", write_zip(aoti), "shared library", member="data/aotinductor/model/model.so", cli=True)
    case("aotinductor_cpp", write_zip(add(items, "data/aotinductor/model/model.cpp", b"int x;")), "AOTInductor",
         member="data/aotinductor/model/model.cpp")
    case("aotinductor_traversal", write_zip(add(items, "data/aotinductor/model/../../../../evil.so", elf)), "'..'",
         member="aotinductor/model/../..", cli=True)
    case("executorch", write_zip(add(items, "data/executorch/model.pte", b"x")), "data/executorch",
         member="data/executorch/model.pte")
    case("so_as_weight_name", write_zip(add(items, "data/weights/libevil.so.1", elf)), "shared library",
         member="libevil.so.1")
    case("dylib_in_extra", write_zip(add(items, "extra/x.dylib", elf)), "shared library", member="extra/x.dylib")
    case("elf_in_extra", write_zip(add(items, "extra/readme.txt", elf)), "shared library or executable",
         member="extra/readme.txt")
    case("elf_as_weight", write_zip(replace(items, w0, elf)), "shared library or executable", member=w0)
    case("macho_in_extra", write_zip(add(items, "extra/m.txt", b"\xcf\xfa\xed\xfe" + bytes(60))),
         "shared library or executable", member="extra/m.txt")

    # -- names
    case("traversal", write_zip(add(items, "../../evil.txt", b"x")), "'..'", member="../../evil.txt")
    case("absolute", write_zip(items + [("/tmp/evil.txt", b"x")]), "absolute path", member="/tmp/evil.txt")
    case("backslash", write_zip(items + [(f"{root}\\..\\..\\evil.txt", b"x")]), "backslash", member="evil.txt")
    nul = write_zip(add(items, "extra/aXb", b"x"))
    case("nul_in_name", nul.replace(b"extra/aXb", b"extra/a\x00b"), "control character", member="extra/a\\x00b")
    esc = write_zip(add(items, "extra/aXb", b"x"))
    case("escape_in_name", esc.replace(b"extra/aXb", b"extra/a\x1bb"), "control character", member="extra/a\\x1bb")
    case("non_utf8_name", write_zip(add(items, "extra/aXb", b"x")).replace(b"extra/aXb", b"extra/a\xffb"),
         "not UTF-8", member="extra/a")
    case("long_name", write_zip(add(items, "extra/" + "a" * 2000, b"x")), "longer than 1024 bytes", member="extra/aaa")
    case("empty_component", write_zip(add(items, "extra//x", b"x")), "empty, '.' or '..' component", member="extra//x")
    case("dot_component", write_zip(add(items, "./extra/x", b"x")), "empty, '.' or '..'", member="./extra/x")
    case("duplicate_program", write_zip(items + [(f"{root}/{PROGRAM}", b"{}")]), "appears twice", member=PROGRAM)
    case("duplicate_weight", write_zip(items + [(f"{root}/{w0}", elf)]), "appears twice", member=w0)
    case("two_roots", write_zip(items + [("other/extra/x", b"x")]), "not under the archive's top-level folder",
         member="other/extra/x")
    case("member_at_top", write_zip(items + [("notes", b"x")]), "not under the archive's top-level folder", member="notes")

    # -- zip bombs and zip structure
    zeros = bytes(64 << 20)
    case("bomb_honest_sizes", write_zip(replace(items, w0, zeros), methods={f"{root}/{w0}": 8}),
         "expands more than 200 times", member=w0, cli=True)
    small_bomb = write_zip(add(items, "extra/zeros.txt", zeros[: 1 << 20]), methods={f"{root}/extra/zeros.txt": 8})
    case("bomb_lying_size", patch_central(small_bomb, f"{root}/extra/zeros.txt", usize=1000),
         "Bad CRC-32", member="extra/zeros.txt")
    lying_big = write_zip(add(items, "extra/short.txt", b"hello" * 10), methods={f"{root}/extra/short.txt": 8})
    case("lying_size_larger", patch_central(lying_big, f"{root}/extra/short.txt", usize=5000),
         "extra/short.txt", member="extra/short.txt")
    case("bomb_extra_declared", write_zip(add(items, "extra/z.txt", zeros), methods={f"{root}/extra/z.txt": 8}),
         "declares 67108864 bytes, more than the 16777216", member="extra/z.txt")
    case("declared_too_large_small_member",
         patch_central(write_zip(items), f"{root}/archive_format", usize=1 << 20, csize=1 << 20),
         "more than the 256 anec reads", member="archive_format")
    case("total_above_bound", write_zip(items), "declares more than 4096 bytes of content", limits={"max_total": 4096})
    case("file_above_bound", write_zip(items), "more than the 1000 bytes anec reads", limits={"max_bytes": 1000})
    case("encrypted", patch_central(write_zip(items), f"{root}/{PROGRAM}", flags=0x809), "encrypted", member=PROGRAM)
    case("bzip2_member", write_zip(items, methods={f"{root}/{PROGRAM}": zipfile.ZIP_BZIP2}),
         "compression method 12", member=PROGRAM)
    case("stored_sizes_disagree", patch_central(write_zip(items), f"{root}/{PROGRAM}", csize=10),
         "sizes disagree", member=PROGRAM)
    case("crc_mismatch", write_zip(items).replace(b'"graph_module"', b'"graph_modulX"', 1), "Bad CRC",
         member=PROGRAM)
    case("truncated", base[: len(base) // 2], "not a torch.export archive")
    case("truncated_tail", base[:-10], "not a torch.export archive")
    case("not_a_zip", b"this is not a torch.export archive\n" * 10, "not a torch.export archive", cli=True)
    case("empty_file", b"", "not a torch.export archive")
    case("empty_zip", write_zip([]), "not a torch.export archive")
    case("missing_archive_format", write_zip(drop(items, "archive_format")), "no 'genuine/archive_format'")
    case("missing_program", write_zip(drop(items, PROGRAM)), "holds no exported program")
    case("missing_weight", write_zip(drop(items, w0)), "missing: a config refers to it", member=w0)
    case("wrong_archive_format", write_zip(replace(items, "archive_format", b"pt3")), "expected 'pt2'",
         member="archive_format")
    case("big_endian", write_zip(replace(items, "byteorder", b"big")), "expected 'little'", member="byteorder")
    case("short_weight", write_zip(replace(items, w0, bytes(8))), "its config needs 48", member=w0)

    # -- special files
    fifo = work / "fifo.pt2"
    os.mkfifo(fifo)
    case("fifo", None, "is a FIFO", cli=True)
    dev = work / "dev_zero_link.pt2"
    dev.symlink_to("/dev/zero")
    case("dev_zero_link", None, "is a device", cli=True)
    (work / "directory.pt2").mkdir()
    case("directory", None, "is a directory", exit_code=2, cli=True)
    sparse = work / "sparse_2g.pt2"
    with open(sparse, "wb") as f:
        f.truncate(2 << 30)
    case("sparse_2g", None, "not a zip file", cli=True)
    case("missing_file", None, "no such file")

    # -- JSON
    case("program_not_json", write_zip(replace(items, PROGRAM, b"{not json")), "not valid JSON", member=PROGRAM)
    case("program_nested_1e5", write_zip(replace(items, PROGRAM, nested(100000))), "nested more than 64 levels",
         member=PROGRAM, cli=True)
    case("config_nested_1e5", write_zip(replace(items, WEIGHTS_CFG, b'{"config": ' + nested(100000) + b"}")),
         "nested more than 64 levels", member=WEIGHTS_CFG)
    case("config_nested_65", write_zip(replace(items, WEIGHTS_CFG, b'{"config": ' + nested(64) + b"}")),
         "nested more than 64 levels", member=WEIGHTS_CFG)
    case("config_huge_number", write_zip(replace(items, WEIGHTS_CFG, b'{"config": ' + b"9" * 100000 + b"}")),
         "an integer of 100000 digits", member=WEIGHTS_CFG)
    case("config_huge_float", write_zip(replace(items, WEIGHTS_CFG, b'{"config": 1e999}')), "out of range",
         member=WEIGHTS_CFG)
    case("config_nan", write_zip(replace(items, WEIGHTS_CFG, b'{"config": NaN}')), "NaN is not a JSON number",
         member=WEIGHTS_CFG)
    case("config_duplicate_key", write_zip(replace(items, WEIGHTS_CFG, b'{"config": {}, "config": {}}')),
         "appears twice in one object", member=WEIGHTS_CFG)
    case("config_not_utf8", write_zip(replace(items, WEIGHTS_CFG, b'{"config": "\xff"}')), "not UTF-8",
         member=WEIGHTS_CFG)
    case("config_unknown_key", write_zip(edit_json(items, WEIGHTS_CFG, _set_meta("loader", "pickle"))),
         "unexpected key 'loader'", member=WEIGHTS_CFG)
    case("config_bad_dtype", write_zip(edit_json(items, WEIGHTS_CFG, _set_tensor_meta("dtype", 999))),
         "not a dtype anec knows", member="dtype")
    case("config_cuda", write_zip(edit_json(items, WEIGHTS_CFG, _set_tensor_meta("device", {"type": "cuda", "index": 0}))),
         "only CPU tensors", member="device")
    case("config_sparse_layout", write_zip(edit_json(items, WEIGHTS_CFG, _set_tensor_meta("layout", 1))),
         "only strided", member="layout")
    case("config_huge_sizes", write_zip(edit_json(items, WEIGHTS_CFG, _set_tensor_meta(
        "sizes", [{"as_int": 1 << 30}, {"as_int": 1 << 30}]))), "more than 2^36 elements", member="sizes")
    case("config_symbolic_size", write_zip(edit_json(items, WEIGHTS_CFG, _set_tensor_meta(
        "sizes", [{"as_expr": {"expr_str": "s0", "hint": None}}, {"as_int": 4}]))), "static size", member="sizes[0]")
    case("config_huge_offset", write_zip(edit_json(items, WEIGHTS_CFG, _set_tensor_meta(
        "storage_offset", {"as_int": 1 << 50}))), "expected an integer in", member="storage_offset")
    case("config_use_pickle_string", write_zip(edit_json(items, WEIGHTS_CFG, _set_meta("use_pickle", "false"))),
         pickled, member="use_pickle")
    case("program_expr_eval", write_zip(edit_json(items, PROGRAM, lambda p: _first_sym_int(p, f"__import__('builtins').exec({marker_code(marker)!r})"))),
         "symbolic shape expression", member="expr_str", cli=True)
    case("program_expr_no_quotes", write_zip(edit_json(items, PROGRAM, lambda p: _first_sym_int(
        p, "eval(chr(49)+chr(43)+chr(49))"))), "symbolic shape expression", member="expr_str")
    case("program_expr_power", write_zip(edit_json(items, PROGRAM, lambda p: _first_sym_int(p, "9**9**9**9"))),
         "symbolic shape expression", member="expr_str")
    case("program_guards_code", write_zip(edit_json(items, PROGRAM, lambda p: {**p, "guards_code": [
        f"__import__('builtins').exec({marker_code(marker)!r}) is None"]})), "guard code", member="guards_code")
    case("program_not_object", write_zip(replace(items, PROGRAM, b"[]")), "not a serialized exported program",
         member=PROGRAM)
    case("program_invalid_for_torch", write_zip(edit_json(items, PROGRAM, lambda p: {**p, "graph_module": {}})),
         "cannot load")
    return cases


class GuardTripped(Exception):
    """Raised by :func:`code_guard` when the loader reaches code that runs what a file holds."""


@contextlib.contextmanager
def code_guard() -> Iterator[list[str]]:
    """While active, every way torch has to run code from an archive raises
    :class:`GuardTripped` and is recorded in the yielded list: unpickling (``pickle.load``,
    ``pickle.loads``, ``pickle.Unpickler``, ``torch.load``, torch's C++ unpickler),
    loading a shared library (``ctypes``, ``torch.ops.load_library``, AOTInductor's
    loader, Python extension modules), evaluating a string as a shape expression
    (``sympy.sympify``) or as guards (``torch.export._unlift``), and starting a process.
    """
    import ctypes
    import importlib.machinery
    import pickle as pickle_mod

    import sympy
    import torch
    from torch.export import _unlift

    trips: list[str] = []

    def trip(what: str) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            trips.append(what)
            raise GuardTripped(what)
        return refuse

    real_sympify = sympy.sympify

    def sympify(a: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(a, str):
            trips.append("sympy.sympify(str)")
            raise GuardTripped("sympy.sympify(str)")
        return real_sympify(a, *args, **kwargs)

    targets: list[tuple[Any, str, Any]] = [
        (pickle_mod, "load", trip("pickle.load")), (pickle_mod, "loads", trip("pickle.loads")),
        (pickle_mod, "Unpickler", trip("pickle.Unpickler")), (pickle_mod, "_Unpickler", trip("pickle._Unpickler")),
        (torch, "load", trip("torch.load")), (torch.serialization, "load", trip("torch.serialization.load")),
        (torch._C, "_pickle_load_obj", trip("torch._C._pickle_load_obj")),
        (ctypes.CDLL, "__init__", trip("ctypes.CDLL")), (ctypes.cdll, "LoadLibrary", trip("ctypes.cdll.LoadLibrary")),
        (torch.ops, "load_library", trip("torch.ops.load_library")),
        (importlib.machinery.ExtensionFileLoader, "create_module", trip("extension module")),
        (sympy, "sympify", sympify), (_unlift, "_convert_guards_code_to_fn", trip("guards code")),
        (os, "system", trip("os.system")), (subprocess.Popen, "__init__", trip("subprocess")),
    ]
    aoti = getattr(torch._C, "_aoti", None)
    if aoti is not None and hasattr(aoti, "AOTIModelPackageLoader"):
        targets.append((aoti, "AOTIModelPackageLoader", trip("AOTIModelPackageLoader")))
    saved = [(obj, name, obj.__dict__[name] if isinstance(obj, type) and name in obj.__dict__
              else getattr(obj, name)) for obj, name, _ in targets]
    try:
        for obj, name, new in targets:
            setattr(obj, name, new)
        yield trips
    finally:
        for obj, name, old in saved:
            setattr(obj, name, old)


def genuine_archives(work: Path) -> dict[str, Path]:
    """Genuine archives of the real programs of :func:`genuine_modules`."""
    work.mkdir(parents=True, exist_ok=True)
    return {name: save_genuine(m, a, work / f"{name}.pt2") for name, (m, a) in genuine_modules().items()}


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "pt2_corpus")
    for c in build_corpus(out, out / "MARKER"):
        print(f"{c.name:34} exit {c.exit_code}  {c.expect}")
