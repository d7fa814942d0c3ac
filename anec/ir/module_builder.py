"""Syntax form -> :class:`~anec.ir.graph.Module`: the builder behind :func:`anec.ir.parser.parse`.

:class:`ModuleBuilder` turns the syntax form (see :mod:`anec.ir.scanner`) into a Module,
giving every node the span of its op name, every value the span of its ``%name``, every func
the span of its name and ``graph.return_span`` the span of its ``return`` statement. It adds
what needs no op table (literal words, dtype names, value-name syntax, duplicate keywords, SSA
name resolution), decodes attribute and annotation literals, and infers the type of a statement
written without ``: type`` with the op table's per-node checks
(:func:`anec.ir.ops.infer_node_types`). Problems are ParseErrors or VerifyErrors with spans.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from anec.diagnostics import AnecError, ParseError, Source, Span, VerifyError, did_you_mean
from anec.ir.graph import Graph, Module, WeightSource
from anec.ir.nodes import Node, Value
from anec.ir.lexical import MAX_LIST_DEPTH
from anec.ir.ops import TARGET_OPS, infer_node_types
from anec.ir.text_layout import item_key
from anec.ir.types import DTYPE_NAMES, TensorType, dtype_hint, parse_dtype

__all__ = ["ModuleBuilder"]

_WORDS: dict[str, Any] = {"true": True, "false": False, "inf": math.inf, "nan": math.nan}


@dataclass(slots=True)
class _Stmt:
    results: list[tuple[str, tuple[Any, ...]]]
    """(name, token) of each result."""
    op: str
    op_span: Span
    operands: list[tuple[str, tuple[Any, ...]]]
    keyword_operands: dict[str, tuple[str, tuple[Any, ...]]]
    attrs: dict[str, Any]
    types: list[TensorType] | None
    types_span: Span | None
    annotations: dict[str, Any]
    keywords_text: str
    """The text from the first keyword argument to the statement's end ("" if none)."""


_INT = re.compile(r"[+-]?\d+")
_DIM = re.compile(r"\+?\d+")


class ModuleBuilder:
    """Builds the Module from the syntax form; one instance per parse.

    Semantic errors come in this order, func by func: a func's params, then
    every statement's arguments, types and annotations, then the statements'
    names and inferred types in order, then its returned values. Statements
    are built in one pass: when one fails on names or types, the later ones'
    arguments, types and annotations are checked before that error is raised.
    """

    def __init__(self, source: Source, layout: bool = True, target_forms: bool = False) -> None:
        self.source = source
        self.layout = layout
        self.target_forms = target_forms
        """Accept the target-level forms (a compiled program's IR), not only the core ops."""
        self.items: list[tuple[int, int, tuple[Any, ...]]] = []
        """(start, end, item key) of every layout item, in text order (statements
        only when ``layout``)."""
        self.types: dict[tuple[Any, ...], TensorType] = {}
        """Types already read, by their (dtype, dims) text."""
        self.canonical: dict[TensorType, TensorType] = {}
        """One object per distinct type read or inferred (equal types have one id)."""
        self.inferred: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        """Inferred result types, by op, operand types and attributes (see :meth:`infer`)."""

    def span(self, tok: tuple[Any, ...]) -> Span:
        return Span(self.source, tok[1], tok[2])

    # -- top level
    def module(self, items: list[Any]) -> Module:
        module = Module(self.source)
        first_def: dict[str, Span] = {}
        for item in items:
            if item[0] == "weights":
                _, tok, start, end = item
                ws = WeightSource(self.string(tok), self.span(tok))
                module.weight_sources.append(ws)
                self.items.append((start, end, item_key("weights", ws)))
                continue
            name_tok = item[1]
            name = name_tok[0]
            if name in first_def:
                raise VerifyError(
                    f"func '{name}' is defined twice",
                    self.span(name_tok),
                    notes=[f"first defined at {first_def[name].location}"],
                    hint="give each func its own name",
                )
            first_def[name] = self.span(name_tok)
            module.add_func(self.func(item))
        end = len(self.source.text)
        self.items.append((end, end, item_key("eof")))
        return module

    def func(self, item: tuple[Any, ...]) -> Graph:
        _, name_tok, start, end, params, stmts, ret = item
        graph = Graph(name_tok[0], self.span(name_tok))
        ret_start, ret_end, returned = ret
        body_start = stmts[0][0] if stmts else ret_start
        header_end = self.source.text.rfind("{", start, body_start) + 1
        items = self.items
        items.append((start, header_end, item_key("func", graph)))

        env: dict[str, Value] = {}
        for vtok, type_ in params:
            name = vtok[0][1:]  # a VALUE token is exactly '%' and the name
            span = self.span(vtok)
            self.define(env, name, span)
            env[name] = graph.add_input(name, self.type(type_), span)

        stmt, node, layout = self.stmt, self.node, self.layout
        for i, s in enumerate(stmts):
            st = stmt(s)
            try:
                n = node(graph, env, st, stmts, i)
            except AnecError as e:
                for later in stmts[i + 1:]:
                    stmt(later)  # a later statement's own mistake is reported first
                raise e from None
            if layout:
                items.append((s[0], s[1], ("node", id(n))))

        graph.return_span = Span(self.source, ret_start, ret_end)
        items.append((ret_start, ret_end, item_key("return", graph)))
        graph.set_outputs(
            [self.lookup(env, vtok[0][1:], vtok, stmts, len(stmts)) for vtok in returned]
        )
        items.append((end - 1, end, item_key("close", graph)))
        return graph

    # -- statements
    def stmt(self, s: tuple[Any, ...]) -> _Stmt:
        _, end, results, op_tok, args, types, entries = s
        st = _Stmt([(t[0][1:], t) for t in results], op_tok[0], self.span(op_tok), [], {}, {},
                   None, None, {}, "")
        if st.op in TARGET_OPS and not self.target_forms:
            raise VerifyError(
                f"'{st.op}' is a target-level form, not one of the core IR ops",
                st.op_span,
                hint=f"write the layer in its core-op form (slice, conv1x1, mul, add, ...: docs/ops.md, "
                     f"'Target forms'); compilation selects {st.op} from it (the select-native pass). "
                     "A compiled artifact's program.ir is read through its directory: "
                     "anec run DIR --compare-interp",
            )
        seen_keyword = False
        for a in args:
            kind = a[0]
            if kind == "operand":
                if seen_keyword:
                    raise ParseError(
                        "positional operand after a keyword argument",
                        self.span(a[1]),
                        hint="write positional operands first: op(%a, %b, key=value)",
                    )
                st.operands.append((a[1][0][1:], a[1]))
                continue
            key_tok = a[1]
            if not seen_keyword:
                st.keywords_text = self.source.text[key_tok[1]:end]
                seen_keyword = True
            key = key_tok[0]
            if key in st.keyword_operands or key in st.attrs:
                raise ParseError(
                    f"'{key}' is given twice",
                    self.span(key_tok),
                    hint="give each keyword argument once",
                )
            if kind == "keyword_operand":
                st.keyword_operands[key] = (a[2][0][1:], a[2])
            else:
                st.attrs[key] = self.literal(a[2])
        if types is not None:
            st.types = [self.type(t) for t in types[2]]
            st.types_span = Span(self.source, types[0], types[1])
        if entries is not None:
            for key_tok, val in entries:
                key = key_tok[0]
                if key in st.annotations:
                    raise ParseError(f"annotation '{key}' is given twice", self.span(key_tok))
                st.annotations[key] = self.literal(val)
        return st

    def node(
        self, graph: Graph, env: dict[str, Value], st: _Stmt, stmts: list[Any], index: int
    ) -> Node:
        lookup = self.lookup
        operands = [
            env[n] if n in env else lookup(env, n, t, stmts, index) for n, t in st.operands
        ]
        optional = {
            k: env[n] if n in env else lookup(env, n, t, stmts, index)
            for k, (n, t) in st.keyword_operands.items()
        } if st.keyword_operands else {}
        if st.types is None:
            if st.op == "const":
                raise ParseError(
                    "const needs a declared type",
                    st.op_span,
                    hint="write the type after the call, e.g. `: fp16[1, 768, 1, 1]`",
                )
            types = self.infer(st, operands, optional)
            if len(types) != len(st.results):
                raise VerifyError(
                    f"'{st.op}' produces {len(types)} result{'s' * (len(types) != 1)} "
                    f"but {len(st.results)} name{'s' * (len(st.results) != 1)} "
                    f"{'are' if len(st.results) != 1 else 'is'} given",
                    st.op_span,
                    hint=f"write {len(types)} names before '='",
                )
        else:
            types = st.types
            if len(types) != len(st.results):
                raise VerifyError(
                    f"{len(st.results)} result name{'s' * (len(st.results) != 1)} "
                    f"but {len(types)} type{'s' * (len(types) != 1)}",
                    st.types_span,
                    hint="write one type per result, separated by ','",
                )
        results = []
        for (name, tok), t in zip(st.results, types, strict=True):
            span = self.span(tok)
            if name in env:
                self.define(env, name, span)
            value = Value(name, t, None, 0, [], span)
            results.append(value)
            env[name] = value
        node = Node(st.op, operands, st.attrs, results, optional, st.op_span, st.annotations)
        return graph.add_node(node)

    def infer(self, st: _Stmt, operands: list[Value], optional: dict[str, Value]) -> list[TensorType]:
        """The op table's result types. A statement like one inferred before reuses
        that answer (errors are never reused): the same op, the same text from its
        first keyword argument on (which fixes every attribute), and the same type
        objects as operands (kept alive by the entry, so their ids stay theirs)."""
        operand_types = [v.type for v in operands]
        optional_types = {k: v.type for k, v in optional.items()} if optional else {}
        key = (st.op, st.keywords_text, *map(id, operand_types), *map(id, optional_types.values()))
        known = self.inferred.get(key)
        if known is not None:
            return list(known[0])
        types = infer_node_types(st.op, operand_types, optional_types, st.attrs, st.op_span)
        types = [self.canonical.setdefault(t, t) for t in types]
        self.inferred[key] = (tuple(types), operand_types, optional_types)
        return types

    # -- names
    def define(self, env: dict[str, Value], name: str, span: Span) -> None:
        if name in env:
            first = env[name].span
            raise VerifyError(
                f"value %{name} is already defined",
                span,
                notes=[f"first defined at {first.location}"] if first is not None else [],
                hint="SSA values are defined once; pick a new name",
            )

    def lookup(
        self, env: dict[str, Value], name: str, tok: tuple[Any, ...], stmts: list[Any], index: int
    ) -> Value:
        """The value ``%name`` used by statement ``index`` of ``stmts`` (or by the return)."""
        if name in env:
            return env[name]
        if any(r[0] == "%" + name for s in stmts[index:] for r in s[2]):
            raise VerifyError(
                f"value %{name} is used before it is defined",
                self.span(tok),
                hint="statements run in order; move the definition above this use",
            )
        raise VerifyError(
            f"use of undefined value %{name}",
            self.span(tok),
            hint=did_you_mean(f"%{name}", [f"%{n}" for n in env]) or _defined_hint(env),
        )

    # -- types and literals
    def type(self, type_: tuple[Any, ...]) -> TensorType:
        dtype_tok, dims = type_
        key = (dtype_tok[0], *[d[0] for d in dims])
        known = self.types.get(key)
        if known is not None:
            return known
        dtype = parse_dtype(dtype_tok[0])
        if dtype is None:
            raise ParseError(
                f"unknown dtype '{dtype_tok[0]}'",
                self.span(dtype_tok),
                hint=dtype_hint(dtype_tok[0]) or "dtypes are " + ", ".join(DTYPE_NAMES),
            )
        shape = []
        for d in dims:
            if not _DIM.fullmatch(d[0]) or self._int(d) < 1:
                raise ParseError(
                    f"invalid dimension '{d[0]}'",
                    self.span(d),
                    hint="dimensions are positive integers; a scalar type is written fp16 or fp16[]",
                )
            shape.append(self._int(d))
        known = TensorType(dtype, tuple(shape))
        known = self.types[key] = self.canonical.setdefault(known, known)
        return known

    def literal(self, x: tuple[Any, ...], depth: int = 0) -> Any:
        kind = x[0]
        if kind == "list":
            if depth >= MAX_LIST_DEPTH:
                raise ParseError(
                    f"list literal nested deeper than {MAX_LIST_DEPTH} levels",
                    Span(self.source, x[1], x[2]),
                )
            return [self.literal(c, depth + 1) for c in x[3]]
        tok = x[1]
        if kind == "number":
            text = tok[0]
            if _INT.fullmatch(text):
                return self._int(tok)
            value = float(text)
            if math.isinf(value):  # a finite spelling no float64 holds: only `inf` means infinity
                raise ParseError(
                    f"number {text} is beyond the float range (about 1.8e308)",
                    self.span(tok),
                    hint="write inf (or -inf) for an infinite value",
                )
            return value
        if kind == "neg_inf":
            return -math.inf
        if kind == "string":
            return self.string(tok)
        word = tok[0]
        if word in _WORDS:
            return _WORDS[word]
        dtype = parse_dtype(word)
        if dtype is not None:
            return dtype
        raise ParseError(
            f"unknown word '{word}' in a literal",
            self.span(tok),
            hint=(
                dtype_hint(word)
                or did_you_mean(word, [*_WORDS])
                or f'strings are written in double quotes: "{word}"'
            ),
        )

    def string(self, tok: tuple[Any, ...]) -> str:
        try:
            value: str = json.loads(tok[0], strict=False)
        except ValueError:
            raise ParseError(
                "invalid escape in string",
                self.span(tok),
                hint=r"escapes are \" \\ \/ \b \f \n \r \t and \uXXXX",
            ) from None
        if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise ParseError(
                "unpaired surrogate escape in string",
                self.span(tok),
                hint=r"a \uD800-\uDFFF escape must be half of a pair, e.g. \ud83d\ude00",
            )
        return value

    def _int(self, tok: tuple[Any, ...]) -> int:
        try:
            return int(tok[0])
        except ValueError:  # more digits than Python converts
            raise ParseError("integer literal too large", self.span(tok)) from None



def _defined_hint(env: dict[str, Value]) -> str | None:
    if not env:
        return None
    names = list(env)
    shown = ", ".join(f"%{n}" for n in names[-5:])
    return f"defined so far: {shown}" + (" (and more)" if len(names) > 5 else "")
