"""Text → :class:`~anec.ir.graph.Module`.

``grammar.lark`` specifies the text. A fast path (:mod:`anec.ir.scanner`: one
regex scanner and a recursive-descent recognizer) reads the texts the grammar
accepts into a plain syntax form with positions; on anything it declines, Lark
(LALR) parses the text instead, so syntax errors are Lark's and read the same,
and its tree becomes the same syntax form. A builder turns the syntax form
into a Module, giving every node the span of its op name, every value the span
of its ``%name``, every func the span of its name and ``graph.return_span``
the span of its ``return`` statement.

The grammar only knows the generic statement shape. This module adds what
needs no op table (literal words, dtype names, value-name syntax, duplicate
keywords, SSA name resolution) and infers the type of a statement written
without ``: type`` with the op table's per-node checks
(:func:`anec.ir.ops.infer_node_types`, which the verifier uses too), so errors
read the same whether a type was written or inferred. Everything else is the verifier's
job: ``parse`` accepts ``%y = add(%x, %x) : fp32[7]`` and ``verify`` rejects it.

Every problem becomes a :class:`~anec.diagnostics.ParseError` (syntax) or a
:class:`~anec.diagnostics.VerifyError` (names, inference) with a span and,
where a fix is likely, a hint. Lark exceptions never escape.
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from anec.diagnostics import AnecError, ParseError, Source, Span, VerifyError, did_you_mean
from anec.ir.graph import Graph, Module, Node, Value, WeightSource, no_cyclic_gc
from anec.ir.lexical import MAX_LIST_DEPTH
from anec.ir.ops import TARGET_OPS, infer_node_types
from anec.ir.scanner import scan
from anec.ir.types import DTYPE_NAMES, TensorType, dtype_hint, parse_dtype

__all__ = ["Comment", "Layout", "parse", "parse_file", "parse_with_layout"]

_WORDS: dict[str, Any] = {"true": True, "false": False, "inf": math.inf, "nan": math.nan}


# ---- the Lark parser, built once on first use ---------------------------------

_lock = threading.Lock()
_lark: Lark | None = None
_comments = threading.local()


def _on_comment(tok: Token) -> Token:
    sink = getattr(_comments, "sink", None)
    if sink is not None:
        sink.append(tok)
    return tok


def _get_lark() -> Lark:
    global _lark
    with _lock:
        if _lark is None:
            grammar = resources.files("anec.ir").joinpath("grammar.lark").read_text("utf-8")
            _lark = Lark(
                grammar,
                parser="lalr",
                propagate_positions=True,
                maybe_placeholders=True,
                lexer_callbacks={"COMMENT": _on_comment},
            )
        return _lark


# ---- layout: where comments and blank lines were (used by `anec fmt`) ---------


@dataclass
class Comment:
    """A ``//`` comment: its text, position and whether code precedes it on its line."""

    text: str
    start: int
    line: int
    trailing: bool
    blank_before: bool
    """An empty line directly precedes this comment's line."""


@dataclass
class Layout:
    """Source layout the IR does not model: comments and blank lines.

    Items are top-level directives, func headers, statements, returns and
    closing braces, keyed by object identity (see :func:`item_key`), so a
    layout is meant for the module it was parsed with, unchanged. The
    formatter re-attaches each own-line comment before the item that follows
    it, and each trailing comment after the item on whose line it stands.
    """

    leading: dict[tuple[Any, ...], list[Comment]] = field(default_factory=dict)
    trailing: dict[tuple[Any, ...], list[Comment]] = field(default_factory=dict)
    blank_before: set[tuple[Any, ...]] = field(default_factory=set)


def item_key(kind: str, obj: Any = None) -> tuple[Any, ...]:
    """Key of a layout item: ``("weights", ws)``, ``("func", g)``, ``("node", n)``,
    ``("return", g)``, ``("close", g)`` or ``("eof",)``."""
    return (kind,) if obj is None else (kind, id(obj))


# ---- public API -----------------------------------------------------------------


def parse(text: str, filename: str = "<string>", *, target_forms: bool = False) -> Module:
    """Parse IR text into a Module (not yet verified: call ``verify``).

    ``target_forms`` also accepts the target-level forms (``conv``, ``max_pool``, ...:
    :data:`anec.ir.ops.TARGET_OPS`) that compilation writes; they are not part of the
    core-op IR and user text using them is refused with a hint."""
    with no_cyclic_gc():
        return _parse(text, filename, layout=False, target_forms=target_forms)  # type: ignore[return-value]


def parse_file(path: str | Path, *, target_forms: bool = False) -> Module:
    """Read and parse a ``.ir`` file; ``module.path`` is set to ``path``."""
    text = read_text(path)
    module = parse(text, str(path), target_forms=target_forms)
    module.path = str(path)
    return module


IR_MAX_BYTES = 1 << 30
"""Largest IR file read (1 GiB; a 100,000-node graph is about 10 MB)."""


def read_text(path: str | Path) -> str:
    """A file's text as UTF-8; unreadable or undecodable files are AnecErrors."""
    from anec.fsutil import read_regular

    data = read_regular(path, IR_MAX_BYTES, "IR file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise AnecError(
            f"{path}: not valid UTF-8 (byte {e.start}, line {line})",
            hint="IR files are UTF-8 text",
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def parse_with_layout(text: str, filename: str = "<string>", *,
                      target_forms: bool = False) -> tuple[Module, Layout]:
    """Parse and also return the comment/blank-line layout for the formatter."""
    with no_cyclic_gc():
        return _parse(text, filename, layout=True, target_forms=target_forms)  # type: ignore[return-value]


def _parse(text: str, filename: str, layout: bool, target_forms: bool = False) -> Module | tuple[Module, Layout]:
    source = Source(filename, text)
    scanned = scan(text)
    items, comments = scanned if scanned is not None else _lark_syntax(source)
    builder = _Builder(source, layout, target_forms)
    module = builder.module(items)
    if not layout:
        return module
    return module, _layout(source, builder.items, comments)


# ---- Lark: syntax errors, and the texts the fast path declines ------------------------


def _lark_syntax(source: Source) -> tuple[list[Any], list[tuple[str, int]]]:
    """The syntax form (see :mod:`anec.ir.scanner`) of Lark's tree, or the ParseError."""
    comments: list[Token] = []
    _comments.sink = comments
    try:
        tree = _get_lark().parse(source.text)
    except UnexpectedInput as e:
        raise _syntax_error(e, source) from None
    except LarkError as e:  # anything else lark may raise on odd input
        raise ParseError(f"cannot parse: {e}", Span(source, 0, 0)) from None
    finally:
        _comments.sink = None
    return [_lark_item(t) for t in tree.children], [(str(t), t.start_pos) for t in comments]


def _tok(tok: Token) -> tuple[str, int, int]:
    return (str(tok), tok.start_pos, tok.end_pos)


def _lark_item(tree: Tree) -> tuple[Any, ...]:
    meta = tree.meta
    if tree.data == "weights":
        return ("weights", _tok(tree.children[0]), meta.start_pos, meta.end_pos)
    name, *rest = tree.children
    params, stmts, ret = [], [], None
    for c in rest:
        if not isinstance(c, Tree):
            continue
        if c.data == "param":
            params.append((_tok(c.children[0]), _lark_type(c.children[1])))
        elif c.data == "stmt":
            stmts.append(_lark_stmt(c))
        elif c.data == "ret":
            values = [_tok(v) for v in c.children if v is not None]
            ret = (c.meta.start_pos, c.meta.end_pos, values)
    return ("func", _tok(name), meta.start_pos, meta.end_pos, params, stmts, ret)


def _lark_type(tree: Tree) -> tuple[Any, ...]:
    dtype, *dims = tree.children
    return (_tok(dtype), [_tok(d) for d in dims if d is not None])


def _lark_stmt(tree: Tree) -> tuple[Any, ...]:
    results, op, *rest = tree.children
    args: list[Any] = []
    types = entries = None
    for c in rest:
        if c is None:
            continue
        if c.data == "types":
            types = (c.meta.start_pos, c.meta.end_pos, [_lark_type(t) for t in c.children])
        elif c.data == "annotations":
            entries = [
                (_tok(e.children[0]), _lark_literal(e.children[1], 0))
                for e in c.children
                if e is not None
            ]
        elif c.data == "operand":
            args.append(("operand", _tok(c.children[0])))
        elif c.data == "keyword_operand":
            args.append(("keyword_operand", _tok(c.children[0]), _tok(c.children[1])))
        else:
            args.append(("attr", _tok(c.children[0]), _lark_literal(c.children[1], 0)))
    meta = tree.meta
    return (meta.start_pos, meta.end_pos, [_tok(t) for t in results.children], _tok(op), args,
            types, entries)


def _lark_literal(x: Tree, depth: int) -> tuple[Any, ...]:
    if x.data == "list":
        # below the depth limit only the span matters (the list is rejected there)
        children = [] if depth > MAX_LIST_DEPTH else x.children
        items = [_lark_literal(c, depth + 1) for c in children if c is not None]
        return ("list", x.meta.start_pos, x.meta.end_pos, items)
    return (x.data, _tok(x.children[0]))


# ---- syntax form → Module ------------------------------------------------------------


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


class _Builder:
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


# ---- layout ----------------------------------------------------------------------


def _blank_before(text: str, pos: int) -> bool:
    """Whether the line holding ``pos`` is directly preceded by an empty line."""
    line_start = text.rfind("\n", 0, pos) + 1
    if line_start == 0:
        return False
    prev_start = text.rfind("\n", 0, line_start - 1) + 1
    return text[prev_start : line_start - 1].strip() == ""


def _layout(
    source: Source, items: list[tuple[int, int, tuple[Any, ...]]], comments: list[tuple[str, int]]
) -> Layout:
    text = source.text
    layout = Layout()
    items = sorted(items, key=lambda it: (it[0], it[1]))
    for start, _end, key in items:
        if key[0] not in ("eof", "close") and _blank_before(text, start):
            layout.blank_before.add(key)
    j = 0
    for comment_text, pos in comments:
        line_start = text.rfind("\n", 0, pos) + 1
        trailing = text[line_start:pos].strip() != ""
        comment = Comment(
            comment_text.rstrip(), pos, source.line_col(pos)[0], trailing, _blank_before(text, pos)
        )
        while j < len(items) and items[j][0] <= pos:
            j += 1
        if trailing and j > 0:
            layout.trailing.setdefault(items[j - 1][2], []).append(comment)
        else:
            key = items[j][2] if j < len(items) else item_key("eof")
            layout.leading.setdefault(key, []).append(comment)
    return layout


# ---- syntax errors ------------------------------------------------------------------


_NAMES = {
    "VALUE": "a value name like %x",
    "NAME": "a name",
    "NUMBER": "a number",
    "NEG_INF": "-inf",
    "STRING": "a string",
    "$END": "end of file",
    "FUNC": "'func'",
    "RETURN": "'return'",
    "WEIGHTS": "'weights'",
}
_ORDER = [
    "RPAR",
    "COMMA",
    "EQUAL",
    "COLON",
    "LBRACE",
    "RBRACE",
    "LSQB",
    "RSQB",
    "AT",
    "VALUE",
    "NAME",
    "NUMBER",
    "NEG_INF",
    "STRING",
    "FUNC",
    "WEIGHTS",
    "RETURN",
    "LPAR",
    "$END",
]


def _human(term: str) -> str:
    if term in _NAMES:
        return _NAMES[term]
    lark = _get_lark()
    for t in lark.terminals:
        if t.name == term and t.pattern.type == "str":
            return f"'{t.pattern.value}'"
    return term.lower()


def _expected(terms: set[str]) -> str:
    names = sorted(terms, key=lambda t: (_ORDER.index(t) if t in _ORDER else len(_ORDER), t))
    human = [_human(t) for t in names]
    if len(human) == 1:
        return human[0]
    if len(human) == 2:
        return f"{human[0]} or {human[1]}"
    return "one of " + ", ".join(human)


def _tokens_before(text: str, pos: int) -> list[Token]:
    """The tokens before ``pos`` (the lexer succeeded on them already)."""
    out: list[Token] = []
    try:
        for tok in _get_lark().lex(text[:pos]):
            out.append(tok)
    except LarkError:
        pass
    return out


def _describe(tok: Token) -> str:
    if tok.type == "$END":
        return "end of file"
    value = str(tok)
    if len(value) > 20:
        value = value[:17] + "..."
    return f"'{value}'"


def _open_func(tokens: list[Token]) -> str | None:
    """The name of the func whose body is open at the end of ``tokens``, if any."""
    name, depth = None, 0
    for i, t in enumerate(tokens):
        if t.type == "FUNC" and depth == 0:
            name = (
                str(tokens[i + 1]) if i + 1 < len(tokens) and tokens[i + 1].type == "NAME" else None
            )
        elif t.type == "LBRACE" and not (i > 0 and tokens[i - 1].type == "AT"):
            depth += 1
        elif t.type == "RBRACE":
            depth = max(0, depth - 1)
    return name if depth > 0 else None


def _unclosed_paren(tokens: list[Token]) -> Token | None:
    stack: list[Token] = []
    for t in tokens:
        if t.type in ("LPAR", "LSQB"):
            stack.append(t)
        elif t.type in ("RPAR", "RSQB") and stack:
            stack.pop()
        elif t.type in ("LBRACE", "RBRACE"):
            stack = []
    return stack[-1] if stack else None


def _syntax_error(e: UnexpectedInput, source: Source) -> ParseError:
    text = source.text
    if isinstance(e, UnexpectedCharacters):
        return _bad_character(e, source)
    if not isinstance(e, UnexpectedToken):
        pos = getattr(e, "pos_in_stream", None) or 0
        return ParseError("unexpected input", Span(source, pos, pos + 1))
    tok = e.token
    expected = set(e.expected) - {"COMMENT", "WS"}
    if tok.type == "$END":
        before = _tokens_before(text, len(text))
        end = before[-1].end_pos if before else 0
        span = Span(source, end, end)
        func = _open_func(before)
        paren = _unclosed_paren(before)
        if paren is not None:
            return ParseError(
                "unexpected end of file: unclosed '" + str(paren) + "'",
                span,
                hint=f"the '{paren}' at {Span(source, paren.start_pos, paren.end_pos).location}"
                " is never closed",
            )
        if func is not None:
            return ParseError(
                f"unexpected end of file inside func '{func}'",
                span,
                hint="end the func with 'return %value' and a closing '}'",
            )
        return ParseError(f"unexpected end of file; expected {_expected(expected)}", span,
                          hint=_context_hint(before))

    span = Span(source, tok.start_pos, tok.end_pos)
    before = _tokens_before(text, tok.start_pos)
    prev = before[-1] if before else None
    got = _describe(tok)
    word = str(tok)

    early = _line_ended_early(source, tok, before)
    if early is not None:
        return early

    # `add(x, %y)`: a bare name where an operand was meant (lark then wants '=')
    if (
        "EQUAL" in expected
        and tok.type in ("COMMA", "RPAR")
        and prev is not None
        and prev.type == "NAME"
        and len(before) >= 2
        and before[-2].type in ("LPAR", "COMMA")
    ):
        return ParseError(
            f"'{prev}' is neither a value nor a keyword argument",
            Span(source, prev.start_pos, prev.end_pos),
            hint=f"value names start with '%': write '%{prev}'; attributes are written key=value",
        )
    if tok.type == "NAME" and "COLON" in expected and parse_dtype(word) is not None:
        return ParseError(
            f"missing ':' before the type '{word}'",
            span,
            hint=f"result types follow a ':', e.g. ': {word}[1, 768, 1, 64]'",
        )
    if tok.type == "NAME" and "VALUE" in expected and "NAME" not in expected:
        if "RETURN" in expected and did_you_mean(word, ["return"]):
            return ParseError(
                f"expected a statement or 'return', got {got}", span, hint="did you mean 'return'?"
            )
        return ParseError(
            f"expected {_NAMES['VALUE']}, got {got}",
            span,
            hint=f"value names start with '%': write '%{word}'",
        )
    if tok.type == "NAME" and expected >= {"EQUAL", "COMMA"}:
        return ParseError(
            f"expected '=' after the result names, got {got}",
            span,
            hint=f"a statement is written '%y = {word}(...)'",
        )
    if tok.type == "RBRACE" and "RETURN" in expected:
        func = _open_func(before)
        return ParseError(
            f"func '{func}' has no 'return'" if func else "missing 'return'",
            span,
            hint="end every func with 'return %value' before its '}'",
        )
    if tok.type == "RBRACE" and "FUNC" in expected:
        return ParseError(
            "unexpected '}' outside a func",
            span,
            hint="braces are unbalanced: this '}' closes nothing",
        )
    if tok.type == "FUNC" and ("RBRACE" in expected or "RETURN" in expected):
        func = _open_func(before)
        return ParseError(
            f"func '{func}' is not closed before the next 'func'"
            if func
            else f"expected {_expected(expected)} before 'func'",
            span,
            hint="end every func with 'return %value' and a closing '}'",
        )
    if tok.type == "VALUE" and expected <= {"COMMA", "RBRACE"} and _after_return(before):
        return ParseError(
            f"expected ',' or '}}' after the returned values, got {got}",
            span,
            hint="'return' must be the last statement of a func",
        )
    if expected <= {"FUNC", "WEIGHTS", "$END"} and tok.type == "NAME":
        return ParseError(
            f"expected 'func' or 'weights', got {got}",
            span,
            hint=did_you_mean(word, ["func", "weights"])
            or "a file holds 'weights \"file\"' directives and 'func' definitions",
        )
    hint = None
    paren = _unclosed_paren(before)
    if (
        paren is not None
        and ("RPAR" in expected or "RSQB" in expected)
        and tok.type not in ("RPAR", "RSQB")
    ):
        where = Span(source, paren.start_pos, paren.end_pos).location
        hint = f"the '{paren}' at {where} is not closed"
    elif tok.type == "COLON" and prev is not None and prev.type == "RPAR" and "AT" in expected:
        hint = "write the types of all results after a single ':', separated by ','"
    if (
        tok.type == "NUMBER"
        and word.startswith("-")
        and prev is not None
        and prev.type in ("VALUE", "NAME")
        and prev.end_pos == tok.start_pos
    ):
        hint = (f"names use letters, digits and '_' only: write '{prev}_{word[1:]}' "
                f"(a '-' is not part of a name)")
    elif tok.type == "NUMBER" and prev is not None and prev.type == "FUNC":
        hint = "a func name starts with a letter or '_': func f_1(...)"
    elif "LSQB" in expected and prev is not None and prev.type == "NAME":
        hint = _SHAPES["type"]
    return ParseError(f"expected {_expected(expected)}, got {got}", span,
                      hint=hint or _context_hint(before))


_BOUNDARIES = {"RETURN", "RBRACE", "FUNC", "WEIGHTS", "$END"}
"""Tokens that may start a new item: when the parser would accept one, a statement
could have ended at the line break, and the error is the next token's."""
_ITEM_WORDS = ("return", "func", "weights")
_MAX_LINES_BACK = 16
"""How many line breaks an unfinished statement is looked for across (each look reparses)."""


def _expected_at(text: str, pos: int) -> set[str] | None:
    """What the parser expects when the text ends at ``pos`` (None if it would not end there)."""
    try:
        _get_lark().parse(text[:pos])
    except UnexpectedToken as e:
        return set(e.expected) - {"COMMENT", "WS"} if e.token.type == "$END" else None
    except LarkError:
        return None
    return None


def _starts_item(text: str, pos: int) -> bool:
    """Whether the line starting with the token at ``pos`` starts a new item: a statement
    (``%y =`` / ``%a,``), ``return``, ``}`` or a top-level ``func`` / ``weights``."""
    toks = []
    try:
        for t in _get_lark().lex(text[pos:]):
            toks.append(t)
            if len(toks) == 2:
                break
    except LarkError:
        pass
    if not toks:
        return False
    first = toks[0]
    if first.type in ("RETURN", "RBRACE", "FUNC", "WEIGHTS") or str(first) in _ITEM_WORDS:
        return True
    return first.type == "VALUE" and len(toks) == 2 and toks[1].type in ("EQUAL", "COMMA")


def _line_ended_early(source: Source, tok: Token, before: list[Token]) -> ParseError | None:
    """The error at the end of a line whose statement is unfinished when the next line
    starts a new one (``%y = relu(%x`` then ``return %y``), or None.

    Walking back over line breaks: while the line after a break starts a new item
    and the text cannot end before that break, the break is where the statement
    was cut short; the earliest such break is reported.
    """
    text = source.text

    def line_of(pos: int) -> int:
        return source.line_col(pos)[0]

    line = line_of(tok.start_pos)
    found: tuple[Token, set[str], int] | None = None
    k = len(before)
    for _ in range(_MAX_LINES_BACK):
        first = k
        while first > 0 and line_of(before[first - 1].start_pos) == line:
            first -= 1
        if first == 0:
            break
        start = before[first].start_pos if first < len(before) else tok.start_pos
        if not _starts_item(text, start):
            break
        last = before[first - 1]
        expected = _expected_at(text, last.end_pos)
        if expected is None or expected & _BOUNDARIES:
            break
        found = (last, expected, first)
        k, line = first, line_of(last.start_pos)
    if found is None:
        return None
    last, expected, first = found
    head = before[:first]
    what = "a type (e.g. fp16[1, 64, 1, 64], or fp16 for a scalar)" if last.type == "COLON" \
        else _expected(expected)
    paren = _unclosed_paren(head)
    if paren is not None and expected & {"RPAR", "RSQB"}:
        hint = f"the '{paren}' at {Span(source, paren.start_pos, paren.end_pos).location} is not closed"
    else:
        hint = _context_hint(head)
    return ParseError(f"expected {what} before the end of the line",
                      Span(source, last.end_pos, last.end_pos), hint=hint)


def _after_return(tokens: list[Token]) -> bool:
    for t in reversed(tokens):
        if t.type == "RETURN":
            return True
        if t.type not in ("VALUE", "COMMA"):
            return False
    return False


def _bad_character(e: UnexpectedCharacters, source: Source) -> ParseError:
    text = source.text
    pos = e.pos_in_stream
    ch = text[pos] if pos < len(text) else ""
    span = Span(source, pos, pos + 1)
    if ch == '"':
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        return ParseError(
            "unterminated string",
            Span(source, pos, max(pos + 1, end)),
            hint="close the string with '\"' on the same line",
        )
    if ch == "%":
        return ParseError(
            "'%' must be followed by a value name",
            span,
            hint="a value name is '%' and letters, digits or '_': %x, %h_0, %3",
        )
    if ch in "#;":
        return ParseError(
            f"unexpected character '{ch}'",
            span,
            hint="comments start with '//'"
            if ch == "#"
            else "statements need no terminator; remove the ';'",
        )
    if ch == "/":
        return ParseError("unexpected character '/'", span, hint="comments start with '//'")
    shown = ch if ch.isprintable() and ch != "" else ascii(ch)[1:-1]
    allowed = set(e.allowed or ()) - {"COMMENT", "WS"}
    msg = f"unexpected character '{shown}'"
    if allowed:
        msg += f"; expected {_expected(allowed)}"
    before = _tokens_before(text, pos)
    if ch == "." and before and before[-1].end_pos == pos and before[-1].type == "NUMBER":
        hint = "a float is written with digits on both sides of the '.': 1.5, 0.25, 1e-05"
    elif ch == "." and text[pos + 1:pos + 2].isdigit():
        hint = "a float starts with a digit: write 0.5, not .5"
    elif ch == "-" and not (before and before[-1].end_pos == pos):
        hint = ("'-' only starts a negative number; ops are written by name, e.g. "
                "neg(%x) or sub(%a, %b)")
    else:
        hint = _context_hint(before)
    return ParseError(msg, span, hint=hint)


_SHAPES = {
    "params": "func inputs are written %name: dtype[shape], separated by ',': "
              "func f(%x: fp16[1, 64, 1, 64], %m: fp16[1, 1, 64, 64])",
    "args": "inside an op's parentheses: operands first, then key=value: "
            "softmax(%x, axis=-1), conv1x1(%x, %w, bias=%b)",
    "type": "a type is a dtype and its dims: fp16[1, 768, 1, 64] (a scalar: fp16 or fp16[])",
    "list": "a list literal is [1, 2] or [[0.0, 1.0], [2.0, 3.0]]",
    "annotations": "annotations are written @{key=literal, ...} after the type",
    "return": "the last statement of a func is 'return %a, %b' (then '}')",
    "body": "a statement is written '%y = op(%x, key=value) : type' (the type is optional)",
    "top": "a file holds 'weights \"file\"' directives and 'func name(...) { ... }' definitions",
}


def _context_hint(before: list[Token]) -> str:
    """How the construct being written when the parser gave up is spelled."""
    stack: list[int] = []  # indexes of open '(' '[' '{'
    for i, t in enumerate(before):
        if t.type in ("LPAR", "LSQB", "LBRACE"):
            stack.append(i)
        elif t.type in ("RPAR", "RSQB", "RBRACE") and stack:
            stack.pop()
    if not stack:
        return _SHAPES["top"]
    i = stack[-1]
    opener = before[i]
    prev = before[i - 1] if i > 0 else None
    if opener.type == "LBRACE":
        if prev is not None and prev.type == "AT":
            return _SHAPES["annotations"]
        tail = before[i + 1:]
        if any(t.type == "RETURN" for t in tail):
            return _SHAPES["return"]
        return _SHAPES["body"]
    if opener.type == "LPAR":
        is_header = i >= 2 and before[i - 2].type == "FUNC"
        return _SHAPES["params" if is_header else "args"]
    # '[': a type's dims follow a dtype name after ':'; anything else is a list literal
    if prev is not None and prev.type == "NAME" and i >= 2 and before[i - 2].type in (
            "COLON", "COMMA") and parse_dtype(str(prev)) is not None:
        return _SHAPES["type"]
    return _SHAPES["list"]
