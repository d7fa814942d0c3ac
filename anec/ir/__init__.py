"""The anec IR: types, graphs, the op table, the builder, text and validity.

Everything a user of the IR needs is importable from here::

    from anec.ir import Builder, DType, TensorType, OPS, parse, verify

Types, graph, ops and builder are imported eagerly. The text tools (``parse``,
``parse_file``, ``print_module``, ``verify``, ...) are looked up lazily in
``anec.ir.parser``, ``anec.ir.printer`` and ``anec.ir.verifier`` on first use,
which keeps ``import anec.ir`` light and free of import cycles (those modules
import the op table themselves).
"""

from __future__ import annotations

from anec._lazy import lazy_exports
from anec.ir.builder import Builder, as_type
from anec.ir.graph import Graph, Module, WeightSource
from anec.ir.nodes import Node, Value
from anec.ir.ops import (
    BINARY,
    ELEMENTWISE,
    LINEAR,
    MULTI_RESULT,
    NOT_ON_ANE,
    OPS,
    REDUCTIONS,
    REQUIRED,
    SHAPE_OPS,
    UNARY,
    AttrDef,
    InferError,
    OpDef,
    OperandDef,
    infer_types,
    with_defaults,
)
from anec.ir.types import ALL_DTYPES, FLOATS, NUMERIC, DType, TensorType, parse_dtype

_LAZY = {
    "parse": "anec.ir.parser",
    "parse_file": "anec.ir.parser",
    "parse_with_layout": "anec.ir.parser",
    "print_module": "anec.ir.printer",
    "print_graph": "anec.ir.printer",
    "format_text": "anec.ir.printer",
    "verify": "anec.ir.verifier",
    "verify_all": "anec.ir.verifier",
}
"""Text tools resolved on first use: name -> defining module."""

__all__ = [  # noqa: PLE0604 - _LAZY is a dict: its keys, the names
    "ALL_DTYPES", "AttrDef", "BINARY", "Builder", "DType", "ELEMENTWISE", "FLOATS", "Graph",
    "InferError", "LINEAR", "MULTI_RESULT", "Module", "NOT_ON_ANE", "NUMERIC", "Node", "OPS",
    "OpDef", "OperandDef", "REDUCTIONS", "REQUIRED", "SHAPE_OPS", "TensorType", "UNARY", "Value",
    "WeightSource", "as_type", "infer_types", "parse_dtype", "with_defaults", *_LAZY,
]


__getattr__, __dir__ = lazy_exports("anec.ir", _LAZY, globals())
