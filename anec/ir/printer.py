"""Module → canonical text.

The canonical form is deterministic and round-trips exactly:
``parse(print_module(m)) == m`` for every valid module, and printing is a
fixed point (``print(parse(print(m))) == print(m)``). Its rules:

* ``weights`` directives first (in order), then the funcs in order, one
  blank line before each func; two-space indentation; a final newline;
* every statement carries its result types (``: fp16[1, 768, 1, 64]``, several
  separated by ``,``);
* inside the parentheses: positional operands, then optional operands
  (``bias=%b``), then attributes; optional operands and attributes in op-table
  order, names the table does not know after them, sorted;
* attributes are printed exactly as stored on the node: the printer never
  adds defaults nor drops attributes equal to their default, so
  ``softmax(%x, axis=-1)`` and ``softmax(%x)`` stay distinct, as they are in
  memory (``ops.with_defaults`` gives the effective values);
* floats print with ``repr`` (``1e-05``, ``0.125``, ``inf``, ``-inf``, ``nan``),
  so they read back bit-exactly; ints never look like floats; strings use JSON
  escapes;
* annotations (``@{in_bytes=98304, spill=true}``) are sorted by key.

``print_module(m, layout)`` with the :class:`~anec.ir.parser.Layout` from
``parse_with_layout`` also puts back comments and (single) blank lines: this
is what ``anec fmt`` does.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from anec.ir import ops
from anec.ir.graph import Graph, Module
from anec.ir.nodes import Node
from anec.ir.text_layout import Comment, Layout, item_key
from anec.ir.types import DType

__all__ = ["format_literal", "format_text", "print_graph", "print_module"]

INDENT = "  "


def print_module(module: Module, layout: Layout | None = None,
                 attrs: Mapping[int, dict[str, Any]] | None = None) -> str:
    """The canonical text of ``module`` (with comments when ``layout`` is given); ``attrs``
    as for :func:`print_graph`."""
    out = _Out(layout)
    for ws in module.weight_sources:
        out.item(item_key("weights", ws), f"weights {_quote(ws.path)}", 0)
    for graph in module.funcs.values():
        _graph(out, graph, blank=True, attrs=attrs or {})
    out.item(item_key("eof"), None, 0)
    return out.text()


def print_graph(graph: Graph, attrs: Mapping[int, dict[str, Any]] | None = None) -> str:
    """The canonical text of one func; ``attrs`` (``id(node)`` -> attributes) prints those
    nodes with other attributes, as if they had been set on a copy of the func."""
    out = _Out(None)
    _graph(out, graph, blank=False, attrs=attrs or {})
    return out.text()


def format_text(text: str, filename: str = "<string>") -> str:
    """Parse ``text`` and print it canonically, keeping comments (``anec fmt``)."""
    from anec.ir.parser import parse_with_layout

    module, layout = parse_with_layout(text, filename)
    return print_module(module, layout)


def format_literal(value: Any) -> str:
    """An attribute or annotation value as IR text."""
    if isinstance(value, DType):
        return value.value
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return "nan" if math.isnan(value) else repr(float(value))
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_literal(v) for v in value) + "]"
    if isinstance(value, np.ndarray):
        return format_literal(value.tolist())
    return f"<{value!r}>"  # not IR: the verifier rejects such attributes


# ---- internals ------------------------------------------------------------------


def _graph(out: _Out, g: Graph, blank: bool, attrs: Mapping[int, dict[str, Any]]) -> None:
    params = ", ".join(f"%{v.name}: {v.type}" for v in g.inputs)
    out.item(item_key("func", g), f"func {g.name}({params}) {{", 0, blank=blank)
    out.open_block()
    for node in g.nodes:
        out.item(item_key("node", node), _node(node, attrs.get(id(node), node.attrs)), 1)
    ret = "return " + ", ".join(f"%{v.name}" for v in g.outputs) if g.outputs else "return"
    out.item(item_key("return", g), ret, 1)
    out.item(item_key("close", g), "}", 0, indent_comments=1)


def _node(n: Node, attrs: dict[str, Any]) -> str:
    opdef = ops.lookup_op(n.op)
    args = [f"%{v.name}" for v in n.operands]
    known_opt = [o.name for o in opdef.optional_operands] if opdef else []
    for key in _ordered(n.optional, known_opt):
        args.append(f"{key}=%{n.optional[key].name}")
    known_attrs = [a.name for a in opdef.attrs] if opdef else []
    for key in _ordered(attrs, known_attrs):
        args.append(f"{key}={format_literal(attrs[key])}")
    results = ", ".join(f"%{r.name}" for r in n.results)
    text = f"{results} = {n.op}({', '.join(args)})"
    if n.results:
        text += " : " + ", ".join(str(r.type) for r in n.results)
    if n.annotations:
        entries = ", ".join(
            f"{k}={format_literal(n.annotations[k])}" for k in sorted(n.annotations)
        )
        text += f" @{{{entries}}}"
    return text


def _ordered(mapping: dict[str, Any], known: list[str]) -> list[str]:
    return [k for k in known if k in mapping] + sorted(k for k in mapping if k not in known)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _quote(s: str) -> str:
    """A JSON-style string literal; control characters, line separators and
    (in invalid modules only) lone surrogates become ``\\uXXXX``."""
    out = ['"']
    for ch in s:
        cp = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif cp < 0x20 or cp == 0x7F or ch in "\u2028\u2029\x85" or 0xD800 <= cp <= 0xDFFF:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


class _Out:
    """Line sink that re-inserts comments and blank lines from a Layout."""

    def __init__(self, layout: Layout | None) -> None:
        self.layout = layout
        self.lines: list[str] = []
        self.block_start = True

    def open_block(self) -> None:
        self.block_start = True

    def _line(self, text: str, blank: bool) -> None:
        if blank and not self.block_start and self.lines and self.lines[-1] != "":
            self.lines.append("")
        self.lines.append(text)
        self.block_start = False

    def item(
        self,
        key: tuple[Any, ...],
        text: str | None,
        indent: int,
        blank: bool = False,
        indent_comments: int | None = None,
    ) -> None:
        lay = self.layout
        lead: list[Comment] = lay.leading.get(key, []) if lay else []
        trail: list[Comment] = lay.trailing.get(key, []) if lay else []
        cpad = INDENT * (indent if indent_comments is None else indent_comments)
        own_blank = lay is not None and key in lay.blank_before and key[0] != "close"
        for i, c in enumerate(lead):
            self._line(cpad + c.text, c.blank_before or (i == 0 and blank))
        if text is None:
            return
        line = INDENT * indent + text
        if trail:
            line += "  " + " ".join(c.text for c in trail)
        self._line(line, own_blank if lead else (own_blank or blank))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n" if self.lines else ""
