"""The JSON anec writes: :func:`format_json` lays it out, :func:`jsonable` makes values JSON.

Manifests, output indexes and import links are written with
:func:`format_json`: 2-space indents, but lists of numbers and small flat
dicts on one line (the layout the emitted-bytes pins hold). :func:`jsonable`
turns graph metadata and rewrite records (dtypes, tensor types, spans, numpy
values, sets, non-finite floats) into plain JSON values.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np

from anec.diagnostics import Span
from anec.ir.types import DType, TensorType


def jsonable(obj: Any) -> Any:
    """Graph metadata and rewrite records as plain JSON values."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=str) if isinstance(obj, (set, frozenset)) else obj
        return [jsonable(v) for v in items]
    if isinstance(obj, DType):
        return obj.value
    if isinstance(obj, TensorType):
        return str(obj)
    if isinstance(obj, Span):
        return obj.location
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)


_ONE_LINE = (", ", ": ")


def format_json(obj: Any, indent: int = 0) -> str:
    """JSON with 2-space indents, but lists of numbers and small flat dicts on one line.

    Shapes such as ``[1, 768, 1, 64]`` stay readable instead of taking a line
    per dimension; the result is ordinary JSON (``json.loads`` reads it).
    """
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        if all(not isinstance(v, (dict, list)) or _scalar_list(v) for v in obj.values()):
            one = json.dumps(obj, separators=_ONE_LINE)  # what the pieces below join to, in C
            if len(one) <= 120:
                return one
        items = [f"{inner}{json.dumps(k)}: {format_json(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        if _scalar_list(obj):
            return json.dumps(obj, separators=_ONE_LINE)
        return "[\n" + ",\n".join(inner + format_json(v, indent + 1) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj)


def _scalar_list(v: Any) -> bool:
    return isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v)
