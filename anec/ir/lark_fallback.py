"""The Lark (LALR) parser of ``grammar.lark``: the texts the fast path declines, and syntax errors.

:mod:`anec.ir.scanner` reads the texts the grammar accepts; on anything it declines,
:func:`lark_syntax` parses the text with Lark and turns its tree into the same syntax form
(see :mod:`anec.ir.scanner`), collecting ``//`` comments on the way. When Lark refuses the
text, :func:`syntax_error` turns its exception into a :class:`~anec.diagnostics.ParseError`
with a span and, where a fix is likely, a hint (what was expected, which bracket is unclosed,
where a statement was cut short, how the construct being written is spelled). Lark exceptions
never escape.
"""

from __future__ import annotations

import threading
from importlib import resources
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from anec.diagnostics import ParseError, Source, Span, did_you_mean
from anec.ir.lexical import MAX_LIST_DEPTH
from anec.ir.types import parse_dtype

__all__ = ["lark_syntax", "syntax_error"]

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


def lark_syntax(source: Source) -> tuple[list[Any], list[tuple[str, int]]]:
    """The syntax form (see :mod:`anec.ir.scanner`) of Lark's tree, or the ParseError."""
    comments: list[Token] = []
    _comments.sink = comments
    try:
        tree = _get_lark().parse(source.text)
    except UnexpectedInput as e:
        raise syntax_error(e, source) from None
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


# ---- syntax errors --------------------------------------------------------------


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


def syntax_error(e: UnexpectedInput, source: Source) -> ParseError:
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
