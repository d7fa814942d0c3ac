"""A corpus of hostile artifacts, generated from real compiles (nothing checked in).

:func:`build_corpus` compiles a small two-weight program (once plainly, once
with a weight compiled as a program input), then writes one damaged copy per
:class:`Case`: symbolic links out of the artifact (to /etc/passwd, /dev/zero,
a secret file, an outside directory), FIFOs, sockets and directories where
files belong, files above the size bounds (sparse), non-UTF-8 and non-JSON
bytes, every kind of malformed manifest field, MIL and BLOBFILEs that get past
the manifest and must be refused by the C runtime, and damaged compile
outputs (func links, a bad output index, temporary directories). Every case
names the error the runtime must raise.

Run ``python -m tests.runtime.hostile DIR`` to write the corpus to DIR and
list it.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

FFN = """\
func ffn(%x: fp32[1, 8, 1, 4]) {
  %xh = cast(%x, dtype=fp16)
  %w1 = const(weight="l.fc.weight") : fp16[16, 8, 1, 1]
  %h = conv1x1(%xh, %w1)
  %a = relu(%h)
  %w2 = const(weight="l.proj.weight") : fp16[8, 16, 1, 1]
  %o = conv1x1(%a, %w2)
  %y = cast(%o, dtype=fp32)
  return %y
}
"""
FUNC = "ffn"
SECRET = "TOPSECRET-3f9a1c"
"""Content of the files outside the artifact: it must never appear in an error."""


@dataclass
class Case:
    name: str
    path: Path
    """What the user passes (``anec run PATH``, ``Runtime.load(PATH)``)."""
    func: str | None
    expect: str | None
    """Regex the error message must match (None: the artifact is fine and must load and run)."""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- building blocks ----------------------------------------------------------------


class Builder:
    """Writes damaged copies of the base outputs under ``root``."""

    def __init__(self, root: Path) -> None:
        from anec.compiler import compile_module
        from anec.ir.parser import parse

        self.root = root
        self.base = root / "base"
        compile_module(parse(FFN, "ffn.ir"), random_seed=0, out_dir=self.base / "plain")
        compile_module(parse(FFN, "ffn.ir"), random_seed=0, out_dir=self.base / "wai",
                       weights_as_inputs=["l.proj.weight"])
        self.outside = root / "outside"
        self.outside.mkdir()
        (self.outside / "secret.txt").write_text(SECRET + "\n" * 64)
        os.mkfifo(self.outside / "fifo")
        shutil.copytree(self.base / "plain" / FUNC / "weights", self.outside / "weights")
        shutil.copy(self.base / "plain" / FUNC / "manifest.json", self.outside / "manifest.json")
        shutil.copytree(self.base / "plain" / FUNC, self.outside / "artifact")
        self.cases: list[Case] = []
        self.sockets: list[socket.socket] = []

    # an artifact directory (one func) or a whole output
    def artifact(self, name: str, base: str = "plain") -> Path:
        d = self.root / "cases" / name
        shutil.copytree(self.base / base / FUNC, d)
        return d

    def output(self, name: str, base: str = "plain") -> Path:
        d = self.root / "cases" / name
        shutil.copytree(self.base / base, d)
        return d

    def add(self, name: str, path: Path, expect: str | None, func: str | None = None) -> None:
        self.cases.append(Case(name, path, func, expect))

    # file surgery
    @staticmethod
    def replace(path: Path, kind: str, target: str | Path | None = None) -> None:
        """Make ``path`` a symlink to ``target``, a FIFO, a directory or a socket."""
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        if kind == "symlink":
            os.symlink(target, path)
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "dir":
            path.mkdir()
        else:
            raise ValueError(kind)

    def socket_at(self, path: Path) -> None:
        path.unlink()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        self.sockets.append(s)

    @staticmethod
    def sparse(path: Path, size: int) -> None:
        path.unlink()
        with open(path, "wb") as f:
            f.truncate(size)

    @staticmethod
    def manifest(d: Path) -> dict:
        return json.loads((d / "manifest.json").read_text())

    @staticmethod
    def write_manifest(d: Path, m: Any) -> None:
        (d / "manifest.json").write_text(json.dumps(m))

    def edit(self, name: str, change: Callable[[dict], Any], expect: str, base: str = "plain") -> None:
        """A case whose manifest is ``change``d (in place)."""
        d = self.artifact(name, base)
        m = self.manifest(d)
        change(m)
        self.write_manifest(d, m)
        self.add(name, d, expect)

    def mil_case(self, name: str, edit: Callable[[str], str], expect: str) -> None:
        """A case whose model.mil is edited, with the manifest's sha256 made to match:
        the manifest is fine, the C runtime must refuse the MIL."""
        d = self.artifact(name)
        text = edit((d / "model.mil").read_text())
        (d / "model.mil").write_bytes(text.encode("utf-8", "surrogateescape"))
        m = self.manifest(d)
        m["mil"]["sha256"] = sha((d / "model.mil").read_bytes())
        self.write_manifest(d, m)
        self.add(name, d, expect)

    def blob_case(self, name: str, edit: Callable[[bytearray], None], expect: str | None, fix_sha: bool = True) -> None:
        """A case whose weights/w1.bin is edited (the payload sha256 in the manifest made to match)."""
        d = self.artifact(name)
        blob = bytearray((d / "weights" / "w1.bin").read_bytes())
        edit(blob)
        (d / "weights" / "w1.bin").write_bytes(bytes(blob))
        if fix_sha and len(blob) >= 128 + 256:
            m = self.manifest(d)
            m["weights"][0]["sha256"] = sha(bytes(blob[128:128 + 256]))
            self.write_manifest(d, m)
        self.add(name, d, expect)


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """A manifest change: set the field at ``path`` ("a.b[0].c"); ``DELETE`` removes it."""
    def change(m: dict) -> None:
        keys = [int(k) if k.isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
        obj = m
        for k in keys[:-1]:
            obj = obj[k]
        if value is DELETE:
            del obj[keys[-1]]
        else:
            obj[keys[-1]] = copy.deepcopy(value)
    return change


DELETE = object()


def _field(path: str) -> str:
    """The regex of the message naming a manifest field."""
    return r"field '" + path.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.") + "'"


# ---- the corpus ----------------------------------------------------------------------


def build_corpus(root: Path) -> list[Case]:
    """Write every case under ``root`` (an empty directory) and return them."""
    b = Builder(root)
    out = b.outside
    link = r"is a symbolic link\)"

    # --- files that are not regular files inside the artifact
    d = b.artifact("mil_link_passwd")
    b.replace(d / "model.mil", "symlink", "/etc/passwd")
    b.add("mil_link_passwd", d, r"model\.mil' \(it " + link)
    d = b.artifact("mil_link_secret")
    b.replace(d / "model.mil", "symlink", os.path.relpath(out / "secret.txt", d))
    b.add("mil_link_secret", d, r"model\.mil' \(it " + link)
    d = b.artifact("mil_link_inside")
    b.replace(d / "model.mil", "symlink", "program.ir")
    b.add("mil_link_inside", d, r"model\.mil' \(it " + link)
    d = b.artifact("weight_link_passwd")
    b.replace(d / "weights" / "w1.bin", "symlink", "/etc/passwd")
    b.add("weight_link_passwd", d, r"w1\.bin' \(it " + link)
    d = b.artifact("weight_link_zero")
    b.replace(d / "weights" / "w1.bin", "symlink", "/dev/zero")
    b.add("weight_link_zero", d, r"w1\.bin' \(it " + link)
    d = b.artifact("weights_dir_link")
    b.replace(d / "weights", "symlink", out / "weights")
    b.add("weights_dir_link", d, r"\('weights' " + link)
    d = b.artifact("manifest_link")
    b.replace(d / "manifest.json", "symlink", out / "manifest.json")
    b.add("manifest_link", d, r"manifest\.json' \(it " + link)
    d = b.artifact("program_ir_link")
    b.replace(d / "program.ir", "symlink", "/etc/passwd")
    b.add("program_ir_link", d, r"program\.ir' \(it " + link)
    d = b.artifact("weight_link_fifo_outside")
    b.replace(d / "weights" / "w1.bin", "symlink", out / "fifo")
    b.add("weight_link_fifo_outside", d, r"w1\.bin' \(it " + link)
    for name, rel in [("mil_fifo", "model.mil"), ("weight_fifo", "weights/w1.bin"),
                      ("manifest_fifo", "manifest.json"), ("program_ir_fifo", "program.ir")]:
        d = b.artifact(name)
        b.replace(d / rel, "fifo")
        b.add(name, d, r"\(it is a FIFO\); expected a regular file")
    d = b.artifact("weights_dir_fifo")
    b.replace(d / "weights", "fifo")
    b.add("weights_dir_fifo", d, r"\('weights' is a FIFO\); expected a directory")
    for name, rel in [("mil_dir", "model.mil"), ("weight_dir", "weights/w1.bin"), ("manifest_dir", "manifest.json")]:
        d = b.artifact(name)
        b.replace(d / rel, "dir")
        b.add(name, d, r"\(it is a directory\); expected a regular file")
    d = b.artifact("weights_dir_is_file")
    shutil.rmtree(d / "weights")
    (d / "weights").write_bytes(b"x")
    b.add("weights_dir_is_file", d, r"\('weights' is a file\); expected a directory")
    d = b.artifact("mil_socket")
    b.socket_at(d / "model.mil")
    b.add("mil_socket", d, r"model\.mil' \(it is a socket\)")
    d = b.artifact("mil_missing")
    (d / "model.mil").unlink()
    b.add("mil_missing", d, r"model\.mil': it is missing")
    d = b.artifact("weight_missing")
    (d / "weights" / "w2.bin").unlink()
    b.add("weight_missing", d, r"w2\.bin': it is missing")

    # --- sizes (sparse files: nothing is allocated on disk)
    d = b.artifact("manifest_too_big")
    b.sparse(d / "manifest.json", (16 << 20) + 1)
    b.add("manifest_too_big", d, r"manifest '.*' is 16777217 bytes, above the limit of 16777216 bytes")
    d = b.artifact("mil_too_big")
    b.sparse(d / "model.mil", (256 << 20) + 1)
    b.add("mil_too_big", d, r"MIL text '.*' is 268435457 bytes, above the limit")
    d = b.artifact("weight_too_big")
    b.sparse(d / "weights" / "w1.bin", (1 << 36) + 1)
    b.add("weight_too_big", d, r"weight file '.*w1\.bin' is 68719476737 bytes, above the limit")

    # --- bytes that are not a manifest
    for name, data, expect in [
        ("manifest_empty", b"", r"the manifest is not valid JSON"),
        ("manifest_not_utf8", b'{"format": "\xff\xfe"}', r"the manifest is not valid UTF-8 \(byte 12\)"),
        ("manifest_not_json", b"{not json", r"the manifest is not valid JSON"),
        ("manifest_array", b"[]", r"the manifest: expected a JSON object"),
        ("manifest_string", b'"anec-artifact/1"', r"the manifest: expected a JSON object"),
        ("manifest_deep", b"[" * 100000 + b"]" * 100000, r"nested too deeply"),
        ("manifest_deep_objects", b'{"a":' * 5000 + b"1" + b"}" * 5000, r"nested too deeply"),
        ("manifest_nan", b'{"format": "anec-artifact/1", "input_alloc_bytes": NaN}', r"NaN is not a JSON number"),
        ("manifest_infinity", b'{"format": "anec-artifact/1", "x": -Infinity}', r"-Infinity is not a JSON number"),
        ("manifest_huge_float", b'{"format": "anec-artifact/1", "x": 1e999}', r"number 1e999 is out of range"),
        ("manifest_huge_int", b'{"format": "anec-artifact/1", "x": ' + b"9" * 5000 + b"}", r"5000 digits is too large"),
        ("manifest_dup_key", b'{"format": "anec-artifact/1", "func": "a", "func": "b"}', r"key \"func\" appears twice"),
    ]:
        d = b.artifact(name)
        (d / "manifest.json").write_bytes(data)
        b.add(name, d, expect)
    d = b.artifact("manifest_deep_field")
    m = b.manifest(d)
    deep: Any = 1
    for _ in range(40):
        deep = {"a": deep}
    m["sram"] = deep
    b.write_manifest(d, m)
    b.add("manifest_deep_field", d, r"nested too deeply \(at most 32 levels\)")

    # --- malformed fields: each error names the field
    for name, path, value, expect in [
        ("format_missing", "format", DELETE, _field("format") + r": expected \"anec-artifact/1\" \(the field is missing\)"),
        ("format_other", "format", "anec-artifact/2", _field("format") + r": expected \"anec-artifact/1\", got"),
        ("func_missing", "func", DELETE, _field("func") + r": expected a value \(the field is missing\)"),
        ("func_int", "func", 7, _field("func") + r": expected a func name"),
        ("func_slash", "func", "../../etc", _field("func") + r": expected a func name"),
        ("mil_string", "mil", "model.mil", _field("mil") + r": expected an object, got \"model\.mil\""),
        ("mil_file_absolute", "mil.file", "/etc/passwd", _field("mil.file") + r": expected a relative path"),
        ("mil_file_dotdot", "mil.file", "../../outside/secret.txt", _field("mil.file") + r": expected a relative path"),
        ("mil_file_empty_part", "mil.file", "weights//w1.bin", _field("mil.file")),
        ("mil_file_backslash", "mil.file", "..\\secret", _field("mil.file")),
        ("mil_file_nul", "mil.file", "model.mil\u0000x", _field("mil.file")),
        ("mil_sha_int", "mil.sha256", 5, _field("mil.sha256") + r": expected a sha256"),
        ("mil_dialect", "mil.dialect", "ios99", _field("mil.dialect") + r": expected one of \"ios18\", \"ios16\""),
        ("program_ir_missing", "program_ir", DELETE, _field("program_ir")),
        ("limits_list", "limits", [16, 1], _field("limits") + r": expected an object, got \[16, 1\]"),
        ("limits_huge", "limits.max_blob_tensors", 1 << 40, _field("limits.max_blob_tensors")),
        ("limits_negative", "limits.min_surface_bytes", -1, _field("limits.min_surface_bytes")),
        ("limits_surface_dos", "limits.min_surface_bytes", 1 << 40, _field("limits.min_surface_bytes")),
        ("limits_alignment_overflow", "limits.surface_alignment", (1 << 64) - 1, _field("limits.surface_alignment")),
        ("limits_bool", "limits.allow_fp32_io", "yes", _field("limits.allow_fp32_io") + r": expected true or false"),
        ("limits_float", "limits.surface_alignment", 64.5, _field("limits.surface_alignment")),
        ("limits_int_as_bool", "limits.max_blob_tensors", True, _field("limits.max_blob_tensors")),
        ("inputs_object", "inputs", {"x": 1}, _field("inputs") + r": expected an array"),
        ("input_no_name", "inputs[0].name", DELETE, _field("inputs[0].name")),
        ("input_name_space", "inputs[0].name", "x y", _field("inputs[0].name") + r": expected a MIL identifier"),
        ("input_negative_dim", "inputs[0].shape[1]", -8, _field("inputs[0].shape[1]")),
        ("input_string_dim", "inputs[0].shape[1]", "8", _field("inputs[0].shape[1]")),
        ("input_rank9", "inputs[0].shape", [1] * 9, _field("inputs[0].shape") + r": expected an array of 0 to 8"),
        ("input_huge", "inputs[0].shape", [2147483647] * 4, _field("inputs[0].shape") + r": expected a shape of at most"),
        ("input_bytes", "inputs[0].bytes", 7, _field("inputs[0].bytes") + r": expected 128"),
        ("input_binding", "inputs[0].binding", 3, _field("inputs[0].binding")),
        ("input_alloc_negative", "input_alloc_bytes", -5, _field("input_alloc_bytes")),
        ("input_alloc_small", "input_alloc_bytes", 1, _field("input_alloc_bytes") + r": expected at least 128"),
        ("outputs_missing", "outputs", DELETE, _field("outputs")),
        ("weights_string", "weights", "weights/w1.bin", _field("weights") + r": expected an array"),
        ("weight_no_file", "weights[0].file", DELETE, _field("weights[0].file")),
        ("weight_no_offset", "weights[0].offset", DELETE, _field("weights[0].offset")),
        ("weight_offset_string", "weights[0].offset", "64", _field("weights[0].offset") + r": expected an integer"),
        ("weight_offset_negative", "weights[0].offset", -64, _field("weights[0].offset")),
        ("weight_offset_huge", "weights[0].offset", 1 << 63, _field("weights[0].offset")),
        ("weight_offset_float", "weights[0].offset", 64.0, _field("weights[0].offset")),
        ("weight_dtype", "weights[0].dtype", "fp64", _field("weights[0].dtype")),
        ("weight_shape_string", "weights[0].shape", "16x8", _field("weights[0].shape")),
        ("weight_file_absolute", "weights[0].file", "/etc/passwd", _field("weights[0].file")),
        ("weight_file_dotdot", "weights[0].file", "weights/../../outside/secret.txt", _field("weights[0].file")),
        ("weight_file_not_weights", "weights[0].file", "model.mil", _field("weights[0].file") + r".*below weights/"),
        ("weight_path", "weights[0].path", "@model_path/weights/other.bin", _field("weights[0].path")),
        ("weight_sha_short", "weights[0].sha256", "abc", _field("weights[0].sha256")),
        ("weight_perm", "weights[0].perm", [0, 0, 1, 1], _field("weights[0].perm") + r": expected a permutation"),
        ("weight_slice", "weights[0].slice", [0, 5, 2], _field("weights[0].slice")),
        ("weight_slice_short", "weights[0].slice", [0, 5], _field("weights[0].slice")),
        ("logical_outputs_object", "logical_outputs", {}, _field("logical_outputs") + r": expected an array"),
        ("logical_output_piece", "logical_outputs[0].pieces[0]", "nope", _field("logical_outputs[0].pieces[0]")),
        ("logical_output_no_pieces", "logical_outputs[0].pieces", [], _field("logical_outputs[0].pieces")),
        ("logical_output_axis", "logical_outputs[0].axis", "1", _field("logical_outputs[0].axis")),
        ("logical_output_axis_range", "logical_outputs[0].axis", 7, _field("logical_outputs[0].axis")),
        ("logical_output_shape", "logical_outputs[0].shape", [1, 2, 3], _field("logical_outputs[0].shape")),
        ("logical_input_name", "logical_inputs[0].name", "q", _field("logical_inputs[0].name")),
        ("logical_input_shape", "logical_inputs[0].shape", [5], _field("logical_inputs[0].shape")),
        ("output_logical", "outputs[0].logical", "q", _field("outputs[0].logical")),
        ("host_casts_string", "host_casts", "all", _field("host_casts")),
        ("host_cast_kind", "host_casts", [{"name": "x", "kind": "both", "host_dtype": "fp32"}],
         _field("host_casts[0].kind")),
        ("rewrites_object", "rewrites", {}, _field("rewrites")),
        ("target_long", "target", "m" * 1000, _field("target")),
    ]:
        b.edit(name, _set(path, value), expect)
    for name, path, value, expect in [
        ("weight_input_unknown", "weight_inputs[0].input", "q", _field("weight_inputs[0].input")),
        ("weight_input_file", "weight_inputs[0].file", "weights/w1.bin", _field("weight_inputs[0].file")),
        ("weight_input_shape", "weight_inputs[0].shape", [8, 8, 1, 1], _field("weight_inputs[0].shape")),
    ]:
        b.edit(name, _set(path, value), expect, base="wai")
    b.edit("weight_input_twice", lambda m: m["weight_inputs"].append(dict(m["weight_inputs"][0])),
           _field("weight_inputs[1].input") + r": expected an input given one initial value", base="wai")

    # --- consistent manifests that lie about the program or its files
    def rename_output(m: dict) -> None:
        m["outputs"][0]["name"] = m["outputs"][0]["logical"] = "z"
        m["logical_outputs"][0]["name"] = "z"
        m["logical_outputs"][0]["pieces"] = ["z"]
    b.edit("outputs_lie", rename_output, r"the manifest's outputs do not match the MIL program's: the manifest has "
                                         r"'z' fp32\[1, 8, 1, 4\], the program 'y' fp32\[1, 8, 1, 4\]")

    def input_fp16(m: dict) -> None:
        m["inputs"][0]["dtype"] = m["logical_inputs"][0]["dtype"] = "fp16"
        m["inputs"][0]["bytes"] = 64
    b.edit("inputs_lie", input_fp16, r"the manifest's inputs do not match the MIL program's")
    b.edit("weight_offset_payload", _set("weights[0].offset", 128), r"no blob metadata here .*\[ANE-BLOBFILE-OFFSET\]|"
                                                                     r"\[ANE-BLOBFILE-OFFSET\].*no blob metadata")
    b.edit("weight_dtype_lie", _set("weights[0].dtype", "fp32"), r"holds 256 bytes of float16, the manifest says fp32")
    b.edit("weight_sha_lie", _set("weights[0].sha256", "0" * 64), r"weight 'l\.fc\.weight' does not match its sha256")
    b.edit("mil_sha_lie", _set("mil.sha256", "0" * 64), r"model\.mil does not match the sha256")
    b.edit("program_ir_file_missing", _set("program_ir.file", "other.ir"), r"other\.ir': it is missing")

    # --- files that pass the manifest: the BLOBFILE reader and the C runtime refuse them
    b.blob_case("blob_truncated", lambda blob: blob.__delitem__(slice(200, None)), r"outside the file", fix_sha=False)
    b.blob_case("blob_version", lambda blob: blob.__setitem__(slice(4, 8), (3).to_bytes(4, "little")),
                r"BLOBFILE version 3, expected 2")
    b.blob_case("blob_count", lambda blob: blob.__setitem__(slice(0, 4), (0xFFFFFFFF).to_bytes(4, "little")),
                None)  # the header count is informational (as on the device): the program loads and runs
    b.blob_case("blob_nan", lambda blob: blob.__setitem__(slice(130, 132), (0x7E00).to_bytes(2, "little")),
                r"non-finite value \(NaN or Inf\)")
    b.blob_case("blob_inf", lambda blob: blob.__setitem__(slice(128, 130), (0x7C00).to_bytes(2, "little")),
                r"non-finite value \(NaN or Inf\)")
    b.blob_case("blob_size_field", lambda blob: blob.__setitem__(slice(72, 80), (1 << 63).to_bytes(8, "little")),
                r"payload \[.*\) is outside the file")
    b.mil_case("mil_offset_1e300", lambda t: t.replace("offset = uint64(64)", "offset = uint64(1e300)", 1),
               r"BLOBFILE offset must be an integer literal in \[0, 2\^64\)")
    b.mil_case("mil_offset_inf", lambda t: t.replace("offset = uint64(64)", "offset = uint64(inf)", 1),
               r"BLOBFILE offset must be an integer literal in \[0, 2\^64\)")
    b.mil_case("mil_blob_path_escape", lambda t: t.replace("@model_path/weights/w1.bin", "@model_path/../../etc/passwd"),
               r"must be @model_path/weights/<relative path> without '\.\.'")
    b.mil_case("mil_blob_path_absolute", lambda t: t.replace("@model_path/weights/w1.bin", "/etc/passwd"),
               r"BLOBFILE path")
    b.mil_case("mil_garbage", lambda t: "\x00\x01garbage" + t, r"model\.mil:1:1: unexpected byte 0x00")
    b.mil_case("mil_huge_tensor", lambda t: t.replace("[1, 8, 1, 4]> x", "[65536, 65536, 65536, 4]> x", 1),
               r"too many elements")
    b.mil_case("mil_deep", lambda t: t.replace("uint64(64)", "uint64(" + "(" * 10000 + "64" + ")" * 10000 + ")", 1),
               r"model\.mil:\d+:\d+: ")
    b.mil_case("mil_not_utf8", lambda t: t.replace("main", "m\udcffin", 1), r"the MIL text is not valid UTF-8")
    d = b.artifact("program_ir_not_utf8")
    (d / "program.ir").write_bytes(b"\xff\xfe")
    m = b.manifest(d)
    m["program_ir"]["sha256"] = sha(b"\xff\xfe")
    b.write_manifest(d, m)
    b.add("program_ir_not_utf8", d, r"the program IR is not valid UTF-8 \(byte 0\)")

    # --- compile outputs
    d = b.output("out_func_link")
    shutil.rmtree(d / FUNC)
    os.symlink(out / "artifact", d / FUNC)
    b.add("out_func_link", d, r"ffn' \(it " + link, FUNC)
    d = b.output("out_index_not_json")
    (d / ".anec-output.json").write_text("{")
    b.add("out_index_not_json", d, r"the output index is not valid JSON", FUNC)
    d = b.output("out_index_fifo")
    b.replace(d / ".anec-output.json", "fifo")
    b.add("out_index_fifo", d, r"\.anec-output\.json' \(it is a FIFO\)", FUNC)
    d = b.output("out_index_link")
    b.replace(d / ".anec-output.json", "symlink", "/etc/passwd")
    b.add("out_index_link", d, r"\.anec-output\.json' \(it " + link, FUNC)
    d = b.output("out_index_escape")
    (d / ".anec-output.json").write_text(json.dumps({"format": "anec-output/1", "funcs": {"..": "0" * 64}}))
    b.add("out_index_escape", d, r"func name '\.\.' cannot name a directory", "..")
    d = b.output("out_index_wrong")
    (d / ".anec-output.json").write_text(json.dumps({"format": "anec-output/1", "funcs": ["ffn"]}))
    b.add("out_index_wrong", d, r"expected \{\"format\": \"anec-output/1\", \"funcs\"", FUNC)
    d = b.output("out_func_missing")
    shutil.rmtree(d / FUNC)
    b.add("out_func_missing", d, r"ffn': it is missing", FUNC)
    d = b.output("out_mixed")  # the func directory of another compile: its manifest is not the indexed one
    m = b.manifest(d / FUNC)
    m["anec_version"] = "0.0.0"
    b.write_manifest(d / FUNC, m)
    b.add("out_mixed", d, r"is not the manifest the output index \.anec-output\.json names", FUNC)
    d = b.output("out_unknown_func")
    b.add("out_unknown_func", d, r"has no func 'nope' \(funcs: ffn\)", "nope")
    d = b.root / "cases" / "temp_parent" / ".out.anec-tmp-k2j4h5"
    shutil.copytree(b.base / "plain", d)
    b.add("temp_output", d, r"is a temporary directory of an unfinished or replaced compile", FUNC)
    b.add("temp_output_func", d / FUNC, r"is a temporary directory of an unfinished or replaced compile")
    d = b.root / "cases" / "legacy_temp"
    d.mkdir()
    shutil.copytree(b.base / "plain" / FUNC, d / ".ffn.abcd1234.tmp")
    b.add("legacy_temp_dir", d / ".ffn.abcd1234.tmp", r"is a temporary directory")
    b.add("legacy_temp_func", d, r"is not an artifact directory", ".ffn.abcd1234.tmp")
    d = b.artifact("manifest_path")  # the user names the manifest: its directory is the artifact
    b.add("manifest_path", d / "manifest.json", None)
    d = b.artifact("manifest_path_link")
    b.replace(d / "manifest.json", "symlink", out / "manifest.json")
    b.add("manifest_path_link", d / "manifest.json", r"manifest\.json' \(it " + link)
    fifo = b.root / "cases" / "not_a_dir"
    os.mkfifo(fifo)
    b.add("path_is_fifo", fifo, r"is not a directory")
    return b.cases


if __name__ == "__main__":  # pragma: no cover - a helper for looking at the corpus
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "hostile-corpus")
    target.mkdir(parents=True, exist_ok=False)
    for c in build_corpus(target):
        print(f"{c.name:32} {c.path.relative_to(target)}  {c.func or ''}")


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str):
    """A tmpfs of ``size`` (mount's syntax, e.g. ``600k``) mounted at ``where``/disk, to fill up
    (ENOSPC); the test is skipped, with the reason, where mounting is not permitted."""
    import subprocess

    import pytest

    mnt = where / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root and mount permission): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# ---- shared by the hostile-input tests: a watched load, a child that waits for its cue ----------

ROOT = Path(__file__).resolve().parents[2]


class Hang(Exception):
    """Raised by :func:`watched` when a load takes longer than its bound."""


_OPENS: list[tuple] | None = None


def _record_open(event: str, args: tuple) -> None:
    if _OPENS is not None and event == "open":
        _OPENS.append(args)


sys.addaudithook(_record_open)


@contextlib.contextmanager
def watched(seconds: int):
    """Raise :class:`Hang` if the block runs ``seconds``; yields the list of ``open`` audit
    events (path, mode, flags) the Python side raised meanwhile."""
    import signal

    global _OPENS

    def on_alarm(signum, frame):
        raise Hang()

    old = signal.signal(signal.SIGALRM, on_alarm)
    opens: list[tuple] = []
    _OPENS = opens
    signal.alarm(seconds)
    try:
        yield opens
    finally:
        signal.alarm(0)
        _OPENS = None
        signal.signal(signal.SIGALRM, old)


def opens_outside(named: set[str], opens: list[tuple]) -> list[str]:
    """The ``open`` events (from :func:`watched`) that could reach outside what the user named:
    a path other than ``named``, or a component opened without ``O_NOFOLLOW``."""
    bad = []
    for path, _mode, flags in opens:
        if isinstance(path, int):
            continue  # a descriptor already open
        p = os.fsdecode(path)
        if "/" in p:
            if p not in named:
                bad.append(f"opened by path: {p}")
        elif flags is None or not flags & os.O_NOFOLLOW:
            bad.append(f"opened without O_NOFOLLOW: {p}")
    return bad


def child_env() -> dict[str, str]:
    """The environment of a CLI child process that imports this checkout's anec."""
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def ready_child(args: list[str], preload: str, tmp: Path | None = None):
    """``anec ARGS`` in a child that has imported ``preload`` (modules, comma-separated) and
    waits for :func:`go`: so a signal timed from the go lands in the command, not in start-up.
    ``tmp``: the child's temporary directory (TMPDIR), where a child killed before it cleans up
    leaves its runtime's program directories."""
    import subprocess

    code = (f"import sys\nimport {preload}\nprint('ready', flush=True)\nsys.stdin.readline()\n"
            "anec.cli.main(sys.argv[1:], prog_name='anec')\n")
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**child_env(), **({"TMPDIR": str(tmp)} if tmp else {})})
    assert p.stdout.readline().strip() == "ready", p.stderr.read()
    return p


def go(*kids) -> None:
    """Let children started by :func:`ready_child` run their command."""
    for p in kids:
        p.stdin.write("go\n")
        p.stdin.flush()
