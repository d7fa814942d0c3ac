"""The manifest schema: ``manifest.json`` is validated here, once, before anything reads it.

A manifest (format ``anec-artifact/1``, fields in docs/mil.md) may come from
anywhere, so :func:`parse_manifest` reads its bytes as strict JSON (UTF-8; no
duplicate keys, NaN/Infinity or numbers beyond 20 digits; bounded nesting) and
:func:`validate_manifest` checks every field the compiler writes and the
runtime reads: types, ranges, paths that stay inside the artifact, and the
cross references (bindings, byte sizes, logical outputs made of existing
outputs with compatible shapes, weight inputs naming real inputs). A
malformed field is an :class:`~anec.diagnostics.ArtifactError` naming the
field and what was expected::

    out/mlp/manifest.json: field 'weights[0].offset': expected an integer in [64, 2^62], got '64'

Fields the code only reports (``rewrites``, ``anec_version``, most of
``sram``) are only bounded; unknown fields are ignored, so newer manifests stay readable.
Optional fields older artifacts lack (``logical_inputs``, ``logical_outputs``,
``weight_inputs``, ``limits``, ``target``, ``mil.dialect``, ``concat``) may be absent, and
so may those of features not used (``compression``, ``activations``).
The writer validates what it writes with the same function. Readers get the
typed :class:`~anec.mil.manifest_types.Manifest` (:func:`parse_manifest`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Mapping

from anec.diagnostics import ArtifactError
from anec.fsutil import json_depth, parse_json
from anec.mil.manifest_types import MODEL_PATH, Manifest

FORMAT = "anec-artifact/1"
MANIFEST_MAX_BYTES = 16 << 20
MAX_ENTRIES = 1 << 16
"""Inputs, outputs, weights ... per program."""
MAX_RANK = 8
MAX_DIM = (1 << 31) - 1
MAX_NUMEL = 1 << 34
MAX_BYTES = 1 << 40
MAX_NAME = 256

DTYPES = ("fp16", "fp32", "int32", "bool", "int8", "uint8")
BLOB_DTYPES = ("fp16", "fp32", "uint8", "int8")
PART_DTYPES = BLOB_DTYPES + ("uint1", "uint2", "uint3", "uint4", "uint6", "int4")
"""Also the sub-byte payloads of compressed weights (docs/compression.md)."""
ITEMSIZE = {"fp16": 2, "fp32": 4, "int32": 4, "bool": 1, "int8": 1, "uint8": 1}
WEIGHTS_DIR = "weights"
WEIGHT_INPUTS_DIR = "inputs"

_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_MIL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class ManifestFieldError(Exception):
    """A manifest field that is not what the schema expects (turned into an ArtifactError)."""

    def __init__(self, path: str, expected: str, got: Any = None, show_got: bool = True) -> None:
        super().__init__(path)
        self.path, self.expected, self.got, self.show_got = path, expected, got, show_got


def _show(value: Any) -> str:
    """A value from the manifest, shortened for a message (never more than 60 characters)."""
    if isinstance(value, (dict, list)):
        s = json.dumps(value) if json_depth(value) <= 2 else ""
        if s and len(s) <= 60:
            return s
        return f"a JSON {'object' if isinstance(value, dict) else 'array'} of {len(value)} items"
    s = json.dumps(value) if isinstance(value, str) else repr(value)
    return s if len(s) <= 60 else s[:57] + "..."


def parse_manifest(data: bytes, where: str) -> Manifest:
    """The manifest in the bytes of ``manifest.json``, validated and typed (``where`` names it
    in errors): the one parser every reader goes through."""
    return Manifest.of(validate_manifest(parse_json(data, where), where))


# ---- checkers: (value, path) -> value, raising ManifestFieldError ---------------------------

Check = Callable[[Any, str], Any]


def integer(lo: int, hi: int, what: str | None = None) -> Check:
    def check(v: Any, path: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ManifestFieldError(path, what or f"an integer in [{_bound(lo)}, {_bound(hi)}]", v)
        return v
    return check


def _bound(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n > 1 << 20 and n & (n - 1) == 0 else str(n)


def boolean(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise ManifestFieldError(path, "true or false", v)
    return v


def string(max_len: int = MAX_NAME, pattern: re.Pattern | None = None, what: str | None = None) -> Check:
    def check(v: Any, path: str) -> str:
        if not isinstance(v, str) or not 0 < len(v) <= max_len or "\0" in v or (pattern and not pattern.match(v)):
            raise ManifestFieldError(path, what or f"a non-empty string of at most {max_len} characters", v)
        return v
    return check


def one_of(*values: str) -> Check:
    def check(v: Any, path: str) -> str:
        if v not in values or not isinstance(v, str):
            raise ManifestFieldError(path, "one of " + ", ".join(json.dumps(x) for x in values), v)
        return v
    return check


def number(v: Any, path: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ManifestFieldError(path, "a number", v)
    return v


def hex64(v: Any, path: str) -> str:
    if not isinstance(v, str) or not _HEX64.match(v):
        raise ManifestFieldError(path, "a sha256 (64 lowercase hex digits)", v)
    return v


def rel_path(under: str | None = None) -> Check:
    """A relative path with plain components (optionally below directory ``under``)."""
    def check(v: Any, path: str) -> str:
        what = "a relative path inside the artifact" + (f", below {under}/" if under else "")
        if not isinstance(v, str) or not v or len(v) > 1024 or "\\" in v or "\0" in v or v.startswith("/"):
            raise ManifestFieldError(path, what, v)
        parts = v.split("/")
        if any(p in ("", ".", "..") for p in parts) or (under and (len(parts) < 2 or parts[0] != under)):
            raise ManifestFieldError(path, what + " (plain names, no '..')", v)
        return v
    return check


def nullable(check: Check) -> Check:
    def inner(v: Any, path: str) -> Any:
        return None if v is None else check(v, path)
    return inner


def array(item: Check, max_len: int = MAX_ENTRIES, min_len: int = 0) -> Check:
    def check(v: Any, path: str) -> list:
        if not isinstance(v, list):
            raise ManifestFieldError(path, "an array", v)
        if not min_len <= len(v) <= max_len:
            raise ManifestFieldError(path, f"an array of {min_len} to {max_len} items", f"{len(v)} items", show_got=False)
        return [item(x, f"{path}[{i}]") for i, x in enumerate(v)]
    return check


def shape(min_dim: int = 1) -> Check:
    def check(v: Any, path: str) -> list[int]:
        dims = array(integer(min_dim, MAX_DIM, f"a dimension in [{min_dim}, 2^31)"), MAX_RANK)(v, path)
        if math.prod(dims) > MAX_NUMEL:
            raise ManifestFieldError(path, "a shape of at most 2^34 elements", v)
        return dims
    return check


def obj(required: Mapping[str, Check], optional: Mapping[str, Check] = {}) -> Check:  # noqa: B006 - read only
    """A JSON object with these fields (unknown fields are kept and ignored)."""
    def check(v: Any, path: str) -> dict:
        if not isinstance(v, dict):
            raise ManifestFieldError(path, "an object", v)
        for key, c in required.items():
            if key not in v:
                raise ManifestFieldError(_join(path, key), "a value (the field is missing)", show_got=False)
            c(v[key], _join(path, key))
        for key, c in optional.items():
            if key in v:
                c(v[key], _join(path, key))
        return v
    return check


def any_json(v: Any, path: str) -> Any:
    return v  # parse_json bounds size and depth


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


# ---- the schema ------------------------------------------------------------------------

_name = string(1024)
_mil_name = string(MAX_NAME, _MIL_NAME, "a MIL identifier ([A-Za-z_][A-Za-z0-9_]*)")
_func = string(MAX_NAME, re.compile(r"[^./\\\0][^/\\\0]*\Z"),
               "a func name (no '/', not starting with '.')")
IO_ENTRY = obj({"name": _mil_name, "dtype": one_of(*DTYPES), "shape": shape(), "binding": integer(0, MAX_ENTRIES),
                "bytes": integer(0, MAX_BYTES)})
"""The check of one ``inputs``/``outputs`` entry, in either layout's manifest."""
_perm = nullable(array(integer(0, MAX_RANK - 1), MAX_RANK))
_slice = nullable(array(integer(-MAX_RANK, MAX_DIM), 3, 3))
_part = obj({"of": _name, "role": one_of("q", "scale", "zero_point", "indices", "lut", "values", "mask"),
             "format": string(64), "axis": integer(0, MAX_RANK - 1), "shape": shape()},
            {"packed": boolean})
_weight = obj({"key": _name, "file": rel_path(WEIGHTS_DIR), "offset": integer(64, 1 << 62),
               "dtype": one_of(*PART_DTYPES), "shape": shape(), "sha256": hex64},
              {"const": nullable(_name), "path": nullable(string(1100)), "perm": _perm, "slice": _slice,
               "part": nullable(_part)})
WEIGHT_INPUT_ENTRY = obj({"key": _name, "input": _mil_name, "file": rel_path(WEIGHT_INPUTS_DIR),
                          "offset": integer(64, 1 << 62), "dtype": one_of(*BLOB_DTYPES), "shape": shape(),
                          "sha256": hex64},
                         {"perm": _perm, "slice": _slice})
"""The check of one ``weight_inputs`` entry (a weight compiled as an input), in either layout's manifest."""
_INT = (1 << 31) - 1
_limits = obj({}, {"max_blob_tensors": integer(0, _INT), "scalar_penalty": integer(0, _INT),
                   "max_conv_out_channels": integer(1, _INT), "min_surface_bytes": integer(0, 1 << 26),
                   "allow_fp32_io": boolean, "surface_alignment": integer(0, 1 << 20),
                   "sram_bytes": integer(0, MAX_BYTES)})
LOGICAL_INPUT_ENTRY = obj({"name": _mil_name, "dtype": one_of(*DTYPES), "shape": shape()})
LOGICAL_OUTPUT_ENTRY = obj({"name": _name, "pieces": array(_mil_name, MAX_ENTRIES, 1)},
                      {"dtype": one_of(*DTYPES), "shape": nullable(shape(0)), "axis": nullable(integer(-MAX_RANK,
                                                                                                       MAX_RANK - 1))})
SRAM_REPORT = nullable(obj({}, {"peak_bytes": integer(0, 1 << 62), "spill_nodes": array(any_json)}))
"""The check of ``sram``: the fields a reader counts with (the rest is only reported)."""
HOST_CAST_ENTRY = obj({"name": _name, "kind": one_of("input", "output"), "host_dtype": one_of(*DTYPES)})
ACTIVATIONS = obj({"dtype": one_of("int8"), "tensors": array(obj(
    {"value": _name, "dtype": one_of("int8", "fp16")},
    {"consumers": array(_name), "scale": nullable(number), "max_abs": nullable(number), "rel_l2": nullable(number),
     "reason": nullable(string(2000))}))},
    {"min_cosine": number, "samples": integer(0, (1 << 31) - 1),
     "outputs": array(obj({"output": _name}, {"cosine": number, "max_rel": number}))})
"""The check of ``activations``, the int8 activation report (only reported: the MIL is what runs)."""


def _dialects() -> tuple[str, ...]:
    from anec.mil.emitter import DIALECTS

    return tuple(DIALECTS)


def _schema() -> Check:
    return obj(
        {
            "format": one_of(FORMAT),
            "func": _func,
            "mil": obj({"file": rel_path(), "sha256": hex64}, {"dialect": one_of(*_dialects())}),
            "program_ir": obj({"file": rel_path(), "sha256": hex64}),
            "inputs": array(IO_ENTRY),
            "outputs": array(IO_ENTRY),
            "input_alloc_bytes": integer(1, MAX_BYTES),
            "output_alloc_bytes": integer(1, MAX_BYTES),
            "weights": array(_weight),
        },
        {
            "anec_version": string(64),
            "target": string(64),
            "limits": _limits,
            "logical_inputs": array(LOGICAL_INPUT_ENTRY),
            "logical_outputs": array(LOGICAL_OUTPUT_ENTRY),
            "weight_inputs": array(WEIGHT_INPUT_ENTRY),
            "compression": array(obj({"const": _name, "key": _name, "format": string(64)})),
            "activations": ACTIVATIONS,
            "sram": SRAM_REPORT,
            "rewrites": array(any_json),
            "host_casts": array(HOST_CAST_ENTRY),
            "concat": obj({"reading": one_of("rewrite", "native"), "why": string(1000)}),
        },
    )


def validate_manifest(manifest: Any, where: str = "manifest.json") -> dict:
    """``manifest`` itself if it is a well-formed manifest, else ArtifactError naming the field."""
    try:
        if not isinstance(manifest, dict):
            raise ManifestFieldError("", "a JSON object", manifest)
        if manifest.get("format") != FORMAT:  # checked first: another format gets a clear message
            if "format" not in manifest:
                raise ManifestFieldError("format", f"{json.dumps(FORMAT)} (the field is missing)", show_got=False)
            raise ManifestFieldError("format", json.dumps(FORMAT), manifest.get("format"))
        _schema()(manifest, "")
        _cross_check(manifest)
    except ManifestFieldError as e:
        field = f"field '{e.path}'" if e.path else "the manifest"
        got = f", got {_show(e.got)}" if e.show_got else (f" ({e.got})" if e.got else "")
        raise ArtifactError(f"{where}: {field}: expected {e.expected}{got}",
                            hint="the artifact is damaged or was not written by anec; recompile it") from None
    return manifest


def _cross_check(m: dict) -> None:
    """The references between fields (each error names the field that is wrong)."""
    for direction in ("inputs", "outputs"):
        entries = m[direction]
        names = [e["name"] for e in entries]
        order = {n: i for i, n in enumerate(sorted(names))}
        for i, e in enumerate(entries):
            path = f"{direction}[{i}]"
            if names.count(e["name"]) > 1:
                raise ManifestFieldError(f"{path}.name", f"a name used once in {direction}", e["name"])
            if e["binding"] != order[e["name"]]:
                raise ManifestFieldError(f"{path}.binding", f"{order[e['name']]} (the index of {_show(e['name'])} in "
                           "alphabetical order)", e["binding"])
            want = math.prod(e["shape"]) * ITEMSIZE[e["dtype"]]
            if e["bytes"] != want:
                raise ManifestFieldError(f"{path}.bytes", f"{want} (elements x {e['dtype']} size)", e["bytes"])
        alloc = m[f"{direction[:-1]}_alloc_bytes"]
        biggest = max((e["bytes"] for e in entries), default=0)
        if alloc < biggest:
            raise ManifestFieldError(f"{direction[:-1]}_alloc_bytes", f"at least {biggest} (the largest {direction[:-1]})", alloc)
    inputs = {e["name"]: e for e in m["inputs"]}
    outputs = {e["name"]: e for e in m["outputs"]}
    for i, e in enumerate(m.get("logical_inputs", [])):
        path = f"logical_inputs[{i}]"
        if e["name"] not in inputs:
            raise ManifestFieldError(f"{path}.name", "the name of an input", e["name"])
        if math.prod(e["shape"]) != math.prod(inputs[e["name"]]["shape"]):
            raise ManifestFieldError(f"{path}.shape", f"a shape of {math.prod(inputs[e['name']]['shape'])} elements "
                       "(the input's)", e["shape"])
    used: set[str] = set()
    logical_names: set[str] = set()
    for i, lo in enumerate(m.get("logical_outputs", [])):
        path = f"logical_outputs[{i}]"
        if lo["name"] in logical_names:
            raise ManifestFieldError(f"{path}.name", "a name used once in logical_outputs", lo["name"])
        logical_names.add(lo["name"])
        _check_logical_output(lo, path, outputs, used)
    for i, e in enumerate(m["outputs"]):
        logical = e.get("logical")
        if logical is not None and (not isinstance(logical, str) or (logical_names and logical not in logical_names)):
            raise ManifestFieldError(f"outputs[{i}].logical", "the name of a logical output", logical)
    for i, w in enumerate(m["weights"]):
        if w.get("path") is not None and w["path"] != MODEL_PATH + w["file"]:
            raise ManifestFieldError(f"weights[{i}].path", json.dumps(MODEL_PATH + w["file"]) + " (@model_path/ + file)", w["path"])
        _check_view(w, f"weights[{i}]")
    seen: set[str] = set()
    for i, w in enumerate(m.get("weight_inputs", [])):
        path = f"weight_inputs[{i}]"
        spec = inputs.get(w["input"])
        if spec is None:
            raise ManifestFieldError(f"{path}.input", "the name of an input", w["input"])
        if w["input"] in seen:
            raise ManifestFieldError(f"{path}.input", "an input given one initial value", w["input"])
        seen.add(w["input"])
        if math.prod(w["shape"]) != math.prod(spec["shape"]):
            raise ManifestFieldError(f"{path}.shape", f"a shape of {math.prod(spec['shape'])} elements (input "
                       f"{_show(w['input'])})", w["shape"])
        _check_view(w, path)
    for i, h in enumerate(m.get("host_casts", [])):
        known = inputs.keys() if h["kind"] == "input" else outputs.keys() | logical_names
        if h["name"] not in known:
            raise ManifestFieldError(f"host_casts[{i}].name", f"the name of an {h['kind']}", h["name"])


def _check_logical_output(lo: dict, path: str, outputs: Mapping[str, dict], used: set[str]) -> None:
    pieces = lo["pieces"]
    for j, p in enumerate(pieces):
        if p not in outputs:
            raise ManifestFieldError(f"{path}.pieces[{j}]", "the name of an output", p)
        if p in used:
            raise ManifestFieldError(f"{path}.pieces[{j}]", "an output that belongs to one logical output", p)
        used.add(p)
    shapes = [outputs[p]["shape"] for p in pieces]
    axis = lo.get("axis")
    if axis is None:
        if len(pieces) != 1:
            raise ManifestFieldError(f"{path}.axis", "an axis (the output has several pieces)", None)
    else:
        rank = len(shapes[0])
        if not -rank <= axis < rank:
            raise ManifestFieldError(f"{path}.axis", f"an axis in [{-rank}, {rank - 1}] (the pieces have rank {rank})", axis)
        a = axis % rank
        for j, s in enumerate(shapes[1:], 1):
            if len(s) != rank or any(x != y for k, (x, y) in enumerate(zip(s, shapes[0])) if k != a):
                raise ManifestFieldError(f"{path}.pieces[{j}]", f"an output whose shape matches {shapes[0]} except on axis {axis}",
                           s)
    total = sum(math.prod(s) for s in shapes)
    if lo.get("shape") is not None and math.prod(lo["shape"]) != total:
        raise ManifestFieldError(f"{path}.shape", f"a shape of {total} elements (its pieces)", lo["shape"])
    dtypes = {outputs[p]["dtype"] for p in pieces}
    if len(dtypes) != 1:
        raise ManifestFieldError(f"{path}.pieces", "outputs of one dtype", sorted(dtypes))


def _check_view(w: dict, path: str) -> None:
    """``perm`` is a permutation; ``slice`` is [axis, start, stop] with 0 <= start < stop."""
    perm = w.get("perm")
    if perm and sorted(perm) != list(range(len(perm))):
        raise ManifestFieldError(f"{path}.perm", f"a permutation of 0..{len(perm) - 1}", perm)
    sl = w.get("slice")
    if sl:
        _axis, start, stop = sl
        if not 0 <= start < stop:
            raise ManifestFieldError(f"{path}.slice", "[axis, start, stop] with 0 <= start < stop", sl)
