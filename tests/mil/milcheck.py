"""Type-check anec's MIL text against coremltools' own op definitions.

coremltools has no parser for MIL text, so this test helper has a small one
(:func:`parse_mil`), written from the text syntax only and independent of the
emitter. :func:`check_mil` then rebuilds the program op by op with
coremltools' MIL builder for the iOS18 opset (``mb.<op>(...)``): consts are fed
as numpy values (BLOBFILE consts are read from the artifact's weight files with
coremltools' own ``_BlobStorageReader`` when given), and every declared result
type must equal the type coremltools infers. Unknown ops, unknown argument
names and wrong operand types fail inside coremltools.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import pytest

# ---------------------------------------------------------------------------
# a small MIL text parser

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<num>[+-]?(?:0x[0-9a-fA-F.]+p[+-]?\d+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|(?:inf|nan)(?![A-Za-z0-9_])))
      | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<arrow>->)
      | (?P<p>[()\[\]{}<>,=;])
    )""",
    re.VERBOSE,
)


class MilSyntaxError(ValueError):
    pass


def tokenize(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise MilSyntaxError(f"bad character at {pos}: {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()


@dataclass
class MilType:
    dtype: str
    shape: tuple[int, ...] | None  # None: a scalar written without tensor<>

    @property
    def dims(self) -> tuple[int, ...]:
        return self.shape or ()


@dataclass
class Literal:
    type: MilType | str  # str for dict types
    value: Any  # python scalar, list, or ("BLOBFILE", path, offset)


@dataclass
class Stmt:
    results: list[tuple[MilType, str]]
    op: str
    args: dict[str, str]
    name: Literal
    val: Literal | None
    arg_order: list[str] = field(default_factory=list)


@dataclass
class MilText:
    version: str
    build_info: Literal
    func: str
    opset: str
    inputs: list[tuple[MilType, str]]
    stmts: list[Stmt]
    outputs: list[str]


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = tokenize(text)
        self.i = 0

    def peek(self, k: int = 0) -> tuple[str, str] | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def next(self) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise MilSyntaxError("unexpected end of text")
        t = self.toks[self.i]
        self.i += 1
        return t

    def expect(self, value: str) -> None:
        t = self.next()
        if t[1] != value:
            raise MilSyntaxError(f"expected {value!r}, got {t[1]!r} (token {self.i})")

    def ident(self) -> str:
        kind, v = self.next()
        if kind != "id":
            raise MilSyntaxError(f"expected a name, got {v!r}")
        return v

    def type(self) -> MilType | str:
        word = self.ident()
        if word == "dict":
            self.expect("<")
            k = self.type()
            self.expect(",")
            v = self.type()
            self.expect(">")
            return f"dict<{k}, {v}>"
        if word != "tensor":
            return MilType(word, None)
        self.expect("<")
        dtype = self.ident()
        self.expect(",")
        self.expect("[")
        dims = []
        while self.peek()[1] != "]":
            dims.append(int(self.next()[1]))
            if self.peek()[1] == ",":
                self.next()
        self.expect("]")
        self.expect(">")
        return MilType(dtype, tuple(dims))

    def atom(self) -> Any:
        kind, v = self.next()
        if kind == "str":
            return bytes(v[1:-1], "utf-8").decode("unicode_escape")
        if kind == "num":
            if v.lstrip("+-").startswith("0x"):
                return float.fromhex(v)
            if v.lstrip("+-") in ("inf", "nan"):
                return float(v)
            return float(v) if any(c in v for c in ".eE") else int(v)
        if kind == "id" and v in ("true", "false"):
            return v == "true"
        if v == "[":
            items = []
            while self.peek()[1] != "]":
                items.append(self.atom())
                if self.peek()[1] == ",":
                    self.next()
            self.expect("]")
            return items
        if v == "{":
            items = []
            while self.peek()[1] != "}":
                items.append(self.atom())
                if self.peek()[1] == ",":
                    self.next()
            self.expect("}")
            return tuple(items)
        raise MilSyntaxError(f"unexpected {v!r} in a literal")

    def literal(self) -> Literal:
        t = self.type()
        self.expect("(")
        if self.peek()[1] == "BLOBFILE":
            self.next()
            self.expect("(")
            fields = {}
            for _ in range(2):
                key = self.ident()
                self.expect("=")
                fields[key] = self.literal().value
                if self.peek()[1] == ",":
                    self.next()
            self.expect(")")
            value: Any = ("BLOBFILE", fields["path"], fields["offset"])
        else:
            value = self.atom()
        self.expect(")")
        return Literal(t, value)

    def typed_name(self) -> tuple[MilType, str]:
        t = self.type()
        return t, self.ident()

    def stmt(self) -> Stmt:
        results = [self.typed_name()]
        while self.peek()[1] == ",":
            self.next()
            results.append(self.typed_name())
        self.expect("=")
        op = self.ident()
        self.expect("(")
        args: dict[str, str] = {}
        order = []
        while self.peek()[1] != ")":
            k = self.ident()
            self.expect("=")
            kind, v = self.next()
            if kind != "id":
                raise MilSyntaxError(f"argument {k} of {op} is an inline literal {v!r}, not a named value")
            if k in args:
                raise MilSyntaxError(f"argument {k} given twice")
            args[k] = v
            order.append(k)
            if self.peek()[1] == ",":
                self.next()
        self.expect(")")
        self.expect("[")
        attrs = {}
        while self.peek()[1] != "]":
            k = self.ident()
            self.expect("=")
            attrs[k] = self.literal()
            if self.peek()[1] == ",":
                self.next()
        self.expect("]")
        self.expect(";")
        if set(attrs) - {"name", "val"} or "name" not in attrs:
            raise MilSyntaxError(f"bad attribute block {sorted(attrs)}")
        return Stmt(results, op, args, attrs["name"], attrs.get("val"), order)

    def program(self) -> MilText:
        self.expect("program")
        self.expect("(")
        version = self.next()[1]
        self.expect(")")
        self.expect("[")
        self.expect("buildInfo")
        self.expect("=")
        build_info = self.literal()
        self.expect("]")
        self.expect("{")
        self.expect("func")
        fname = self.ident()
        self.expect("<")
        opset = self.ident()
        self.expect(">")
        self.expect("(")
        inputs = []
        while self.peek()[1] != ")":
            inputs.append(self.typed_name())
            if self.peek()[1] == ",":
                self.next()
        self.expect(")")
        self.expect("{")
        stmts = []
        while self.peek()[1] != "}":
            stmts.append(self.stmt())
        self.expect("}")
        self.expect("->")
        self.expect("(")
        outputs = []
        while self.peek()[1] != ")":
            outputs.append(self.ident())
            if self.peek()[1] == ",":
                self.next()
        self.expect(")")
        self.expect(";")
        self.expect("}")
        if self.peek() is not None:
            raise MilSyntaxError(f"text after the program: {self.peek()}")
        return MilText(version, build_info, fname, opset, inputs, stmts, outputs)


def parse_mil(text: str) -> MilText:
    return _Parser(text).program()


# ---------------------------------------------------------------------------
# rebuilding with coremltools


_SUBBYTE = ("uint1", "uint2", "uint3", "uint4", "uint6", "int4")


def _np_dtype(dtype: str) -> np.dtype:
    if dtype in _SUBBYTE:  # coremltools' numpy dtypes for packed types (compressed weights)
        from coremltools.converters.mil.mil.types.type_mapping import nptype_from_builtin, string_to_builtin

        return np.dtype(nptype_from_builtin(string_to_builtin(dtype)))
    return np.dtype({"fp16": "float16", "fp32": "float32", "int32": "int32", "int8": "int8",
                     "uint8": "uint8", "bool": "bool", "uint32": "uint32"}[dtype])


def _const_value(lit: Literal, blob_reader) -> Any:
    t = lit.type
    assert isinstance(t, MilType)
    v = lit.value
    if isinstance(v, tuple) and v and v[0] == "BLOBFILE":
        _, path, offset = v
        arr = blob_reader(path, int(offset), t.dtype)
        if arr is None:
            arr = np.zeros(t.dims, _np_dtype(t.dtype))
        return arr.reshape(t.dims)
    if t.dtype == "string":
        return str(v)
    if t.shape is None or t.shape == ():
        if t.dtype == "bool":
            return bool(v)
        return _np_dtype(t.dtype).type(v)
    arr = np.asarray(v, dtype=_np_dtype(t.dtype))
    return arr.reshape(t.dims)


def _ct_type(var) -> tuple[str, tuple[int, ...]]:
    from coremltools.converters.mil.mil.types.type_mapping import builtin_to_string

    return builtin_to_string(var.dtype), tuple(int(d) for d in var.shape)


def _coreml_blob_reader(blobs: Mapping[str, bytes] | None):
    """Reads BLOBFILE consts with coremltools' own reader (files written to a temp dir, which
    goes when the reader does)."""
    from coremltools import libmilstoragepython as ms

    cache: dict[str, Any] = {}
    tmp = tempfile.TemporaryDirectory(prefix="milcheck-") if blobs is not None else None

    def read(path: str, offset: int, dtype: str):
        if blobs is None or tmp is None:
            return None
        rel = path.removeprefix("@model_path/")
        if rel not in blobs:
            raise AssertionError(f"BLOBFILE {path} is not in the artifact")
        if rel not in cache:
            p = os.path.join(tmp.name, rel.replace("/", "_"))
            with open(p, "wb") as f:
                f.write(blobs[rel])
            cache[rel] = ms._BlobStorageReader(p)
        r = cache[rel]
        if dtype == "fp16":
            return np.asarray(r.read_fp16_data(offset)).view(np.float16)
        if dtype in _SUBBYTE:
            return np.asarray(getattr(r, f"read_{dtype}_data")(offset)).astype(_np_dtype(dtype))
        fn = {"fp32": r.read_float_data, "int8": r.read_int8_data, "uint8": r.read_uint8_data,
              "int32": r.read_int32_data}[dtype]
        return np.asarray(fn(offset))

    return read


def check_mil(text: str, blobs: Mapping[str, bytes] | None = None):
    """Rebuild ``text`` with coremltools (iOS18 op definitions) and compare types.

    Returns the coremltools ``Program``. Raises AssertionError (or a
    coremltools ValueError/TypeError) on the first disagreement. Without
    coremltools the calling test skips (``pytest.importorskip``: a failure under
    ``ANEC_REQUIRE_REFS=1``, see tests/conftest.py); tests call it after their
    own checks, so those still run.
    """
    pytest.importorskip("coremltools")
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function, Program
    from coremltools.converters.mil.mil.types.type_mapping import string_to_builtin

    mil = parse_mil(text)
    assert mil.func == "main", mil.func
    opset = {"ios18": ct.target.iOS18, "ios16": ct.target.iOS16}[mil.opset]
    read_blob = _coreml_blob_reader(blobs)
    specs = {name: mb.TensorSpec(t.dims, string_to_builtin(t.dtype)) for t, name in mil.inputs}
    env: dict[str, Any] = {}
    seen_names: set[str] = set()
    with Function(specs, opset_version=opset) as func:
        for _, name in mil.inputs:
            env[name] = func.inputs[name]
            seen_names.add(name)
        for st in mil.stmts:
            opname = st.name.value
            assert st.arg_order == sorted(st.arg_order), f"{opname}: arguments not sorted: {st.arg_order}"
            for _, rname in st.results:
                assert rname not in seen_names, f"name {rname} defined twice"
                seen_names.add(rname)
            if st.op == "const":
                assert not st.args and st.val is not None and len(st.results) == 1
                (rtype, rname), = st.results
                assert rname == opname, f"const {rname} has op name {opname}"
                value = _const_value(st.val, read_blob)
                assert st.val.type == rtype or (
                    rtype.dims == () and st.val.type.dims == () and rtype.dtype == st.val.type.dtype
                ), f"const {rname}: declared {rtype}, value {st.val.type}"
                var = mb.const(val=value, name=rname)
                outs = [var]
            else:
                assert st.val is None, f"{opname}: only const takes val"
                if not hasattr(mb, st.op):
                    raise AssertionError(f"unknown MIL op {st.op!r}")
                kwargs = {}
                for k, v in st.args.items():
                    if v not in env:
                        raise AssertionError(f"{opname}: argument {k} = {v} is not defined before use")
                    kwargs[k] = env[v]
                res = getattr(mb, st.op)(**kwargs, name=opname)
                outs = list(res) if isinstance(res, (list, tuple)) else [res]
            assert len(outs) == len(st.results), f"{opname}: {len(outs)} results, {len(st.results)} declared"
            for var, (rtype, rname) in zip(outs, st.results):
                got = _ct_type(var)
                want = (rtype.dtype, rtype.dims)
                assert got == want, f"{rname} = {st.op}(...): declared {want}, coremltools infers {got}"
                env[rname] = var
        for o in mil.outputs:
            assert o in env, f"returned {o} is not defined"
        func.set_outputs([env[o] for o in mil.outputs])
    prog = Program()
    prog.add_function("main", func)
    return prog


# ---------------------------------------------------------------------------
# the MIL subset the on-device references use

_HEX = re.compile(r"\b0x[0-9a-fA-F]")


def assert_proven(text: str, dialect: str = "ios18") -> None:
    """``text`` uses only what maderix/ANE and Orion feed the device: decimal float
    literals, single-result ops (slices, never ``split``), rank-4 inputs and outputs,
    and ``program(1.3)``/``<ios18>`` unless the older dialect was asked for."""
    mil = parse_mil(text)
    if dialect == "ios18":
        assert text.startswith("program(1.3)\n") and mil.opset == "ios18"
    assert not _HEX.search(text), "hex float literal"
    assert "split(" not in text
    for st in mil.stmts:
        assert len(st.results) == 1, f"multi-result {st.op} {[n for _, n in st.results]}"
    for t, name in mil.inputs:
        assert len(t.dims) == 4, f"input {name} is {t}"
    declared = {n: t for st in mil.stmts for t, n in st.results}
    for name in mil.outputs:
        assert len(declared[name].dims) == 4, f"output {name} is {declared[name]}"
