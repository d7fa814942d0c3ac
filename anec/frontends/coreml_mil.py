"""anec's MIL text read back as statements, for the Core ML export and its verification.

:func:`mil_statements` parses ``model.mil`` (the ios18 and ios16 dialects anec
writes) into its inputs, :class:`MilStatement` s (results, op, arguments, and
a const's value: an array, a string, or a ``BLOBFILE`` reference) and outputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from anec.frontends import CoreMLExportError


@dataclass
class MilStatement:
    """One statement of anec's MIL text: results, op, arguments, const value."""

    results: list[tuple[str, str]]  # (type text, name)
    op: str
    args: dict[str, str]
    value: Any = None  # const: numpy value / str / ("BLOBFILE", path, offset)


_STMT = re.compile(r"^\s+(?P<res>.+?) = (?P<op>\w+)\((?P<args>[^)]*)\)\[(?P<attrs>.*)\];$")
_RES = re.compile(r"(tensor<[^>]*>|\w+) (\w+)")
_NUM = r"[+-]?(?:0x[0-9a-fA-F.]+p[+-]?\d+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|inf|nan)"


def mil_statements(text: str) -> tuple[list[tuple[str, str]], list[MilStatement], list[str]]:
    """``(inputs, statements, outputs)`` of anec's MIL text (ios18 and ios16 dialects)."""
    lines = text.splitlines()
    head = next((ln for ln in lines if ln.strip().startswith("func main")), None)
    if head is None:
        raise CoreMLExportError("model.mil has no func main")
    params = head[head.index("(") + 1: head.rindex(")")]
    inputs = _RES.findall(params)
    stmts = []
    outputs: list[str] = []
    for ln in lines:
        s = ln.strip()
        if s.startswith("} -> ("):
            outputs = [o.strip() for o in s[len("} -> ("):s.rindex(")")].split(",") if o.strip()]
            continue
        m = _STMT.match(ln)
        if not m:
            continue
        results = _RES.findall(m.group("res"))
        args = {}
        for part in filter(None, (p.strip() for p in m.group("args").split(","))):
            k, v = (t.strip() for t in part.split("=", 1))
            args[k] = v
        value = None
        attrs = m.group("attrs")
        if m.group("op") == "const":
            vtext = attrs[attrs.index("val = ") + len("val = "):]
            value = _literal(vtext)
        stmts.append(MilStatement(results, m.group("op"), args, value))
    return inputs, stmts, outputs


def _literal(text: str) -> Any:
    text = text.strip()
    m = re.match(r'(?:tensor<[^>]*>|\w+)\(BLOBFILE\(path = (?:tensor<string, \[\]>|string)\("([^"]*)"\), '
                 r'offset = (?:tensor<uint64, \[\]>|uint64)\((\d+)\)\)\)$', text)
    if m:
        return ("BLOBFILE", m.group(1), int(m.group(2)))
    m = re.match(r'(?:tensor<string, \[\]>|string)\("((?:[^"\\]|\\.)*)"\)$', text)
    if m:
        return m.group(1).replace('\\"', '"').replace("\\\\", "\\")
    m = re.match(r"tensor<(\w+), \[([0-9, ]*)\]>\((.*)\)$", text)
    if m:
        dtype, dims, body = m.group(1), m.group(2), m.group(3)
        shape = [int(d) for d in dims.replace(" ", "").split(",") if d]
        return _values(dtype, body, shape)
    m = re.match(r"(\w+)\((.*)\)$", text)
    if m:
        return _values(m.group(1), m.group(2), [])
    raise CoreMLExportError(f"model.mil: unreadable constant '{text[:60]}'")


def _values(dtype: str, body: str, shape: list[int]) -> Any:
    if dtype == "bool":
        vals = [t == "true" for t in re.findall(r"true|false", body)]
    elif dtype in ("fp16", "fp32"):
        vals = [float.fromhex(t) if "0x" in t else float(t) for t in re.findall(_NUM, body)]
    else:
        vals = [int(t) for t in re.findall(r"[+-]?\d+", body)]
    np_dt = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": np.bool_,
             "int8": np.int8, "uint8": np.uint8, "uint64": np.uint64}.get(dtype, np.float64)
    arr = np.asarray(vals, dtype=np_dt)
    return arr.reshape(shape) if shape else arr.reshape(())
