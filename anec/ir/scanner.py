"""The fast path of the IR parser: one regex scanner and a recursive-descent recognizer.

``grammar.lark`` stays the specification of the text format. This module
accepts exactly the texts the grammar accepts, written the usual way, and
turns them into the plain *syntax form* below, which
:mod:`anec.ir.parser` builds a Module from. On anything it does not accept
it returns None, and the parser runs Lark instead: Lark then either reports
the syntax error (so errors read the same) or accepts a text this module
declined (e.g. ``funcf(...)``, which Lark's contextual lexer reads as
``func f(...)``), and its tree is turned into the same syntax form.

Syntax form (positions are character offsets; ``tok`` is ``(text, start, end)``)::

    item    = ("weights", string_tok, start, end)
            | ("func", name_tok, start, end, [param], [stmt], ret)
    param   = (value_tok, type)
    type    = (dtype_tok, [dim_tok])
    stmt    = (start, end, [result_tok], op_tok, [arg], types | None, [entry] | None)
    arg     = ("operand", value_tok)
            | ("keyword_operand", key_tok, value_tok)
            | ("attr", key_tok, literal)
    types   = (start, end, [type])
    entry   = (key_tok, literal)
    literal = ("number" | "neg_inf" | "string" | "word", tok) | ("list", start, end, [literal])
    ret     = (start, end, [value_tok])

Lists nested deeper than ``MAX_LIST_DEPTH`` are declined (the parser rejects
them with the span of the list at that depth, which Lark's tree gives too).
"""

from __future__ import annotations

import re
import string
from itertools import accumulate, chain
from operator import itemgetter
from typing import Any

from anec.ir.lexical import MAX_LIST_DEPTH

__all__ = ["scan"]

# The terminals of grammar.lark, each after optional whitespace (WS there): findall
# gives (whitespace, token) pairs, and the lengths give every position.
_TOKEN = re.compile(
    r"([ \t\f\r\n]*)("
    r"%[A-Za-z0-9_]+"  # VALUE
    r"|[A-Za-z_][A-Za-z0-9_]*"  # NAME (and the words func, weights, return)
    r"|[+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"  # NUMBER
    r"|-inf"  # NEG_INF
    r'|"(?:[^"\\\n\r]|\\.)*"'  # STRING
    r"|[(),=:\[\]{}@]"
    r"|//[^\n]*"  # COMMENT
    r")"
)
_TRAILING_WS = re.compile(r"[ \t\f\r\n]*\Z")

# A token's kind by its first character: "v" VALUE, "n" NAME, "d" NUMBER, "-" NUMBER
# or NEG_INF, "s" STRING, "/" COMMENT, punctuation itself. Other characters (a
# NUMBER may start with any Unicode digit) have no kind, and the text is declined.
_KIND = {
    "%": "v",
    **dict.fromkeys(string.ascii_letters + "_", "n"),
    **dict.fromkeys(string.digits + "+", "d"),
    "-": "-",
    '"': "s",
    "/": "/",
    **{c: c for c in "(),=:[]{}@"},
}


class _Decline(Exception):
    """The fast path does not accept the text (Lark decides)."""


def scan(text: str) -> tuple[list[Any], list[tuple[str, int]]] | None:
    """The syntax form of ``text`` and its comments ``(text, start)``, or None."""
    pairs = _TOKEN.findall(text)
    texts = list(map(itemgetter(1), pairs))
    ends = list(accumulate(map(len, chain.from_iterable(pairs))))
    starts = ends[::2]  # a token starts where the whitespace before it ends
    if _TRAILING_WS.match(text, ends[-1] if ends else 0) is None:
        return None  # findall skipped a character no terminal starts with
    kinds = list(map(_KIND.get, map(itemgetter(0), texts)))
    comments: list[tuple[str, int]] = []
    if "/" in kinds:
        keep = [i for i, k in enumerate(kinds) if k != "/"]
        comments = [(texts[i], starts[i]) for i, k in enumerate(kinds) if k == "/"]
        kinds = [kinds[i] for i in keep]
        texts = [texts[i] for i in keep]
        starts = [starts[i] for i in keep]
    kinds.append("$")  # sentinel: no rule accepts it
    texts.append("")
    starts.append(len(text))
    try:
        items = _Recognizer(kinds, texts, starts).module()
    except _Decline:
        return None
    return items, comments


class _Recognizer:
    """Recursive descent over the token lists; raises _Decline on anything unexpected."""

    def __init__(self, kinds: list[str | None], texts: list[str], starts: list[int]) -> None:
        self.k = kinds
        self.x = texts
        self.s = starts
        self.i = 0

    def tok(self, i: int) -> tuple[str, int, int]:
        x, s = self.x[i], self.s[i]
        return (x, s, s + len(x))

    def end(self, i: int) -> int:
        """End offset of token ``i``."""
        return self.s[i] + len(self.x[i])

    def expect(self, kind: str) -> int:
        i = self.i
        if self.k[i] != kind:
            raise _Decline
        self.i = i + 1
        return i

    def module(self) -> list[Any]:
        k, x = self.k, self.x
        items: list[Any] = []
        while k[self.i] != "$":
            i = self.i
            if k[i] == "n" and x[i] == "weights" and k[i + 1] == "s":
                items.append(("weights", self.tok(i + 1), self.s[i], self.end(i + 1)))
                self.i = i + 2
            elif k[i] == "n" and x[i] == "func":
                items.append(self.func())
            else:
                raise _Decline
        return items

    def func(self) -> tuple[Any, ...]:
        k, x = self.k, self.x
        first = self.i
        self.i += 1
        name = self.tok(self.expect("n"))
        self.expect("(")
        params = []
        if k[self.i] == "v":
            while True:
                v = self.tok(self.i)
                self.i += 1
                self.expect(":")
                params.append((v, self.type()))
                if k[self.i] != ",":
                    break
                self.i += 1
                if k[self.i] != "v":
                    raise _Decline
        self.expect(")")
        self.expect("{")
        stmts = []
        stmt = self.stmt
        while k[self.i] == "v":
            stmts.append(stmt())
        i = self.i
        if k[i] != "n" or x[i] != "return":
            raise _Decline
        values = []
        last = i
        i += 1
        if k[i] == "v":
            while True:
                values.append(self.tok(i))
                last = i
                i += 1
                if k[i] != ",":
                    break
                i += 1
                if k[i] != "v":
                    raise _Decline
        ret = (self.s[self.i], self.end(last), values)
        if k[i] != "}":
            raise _Decline
        self.i = i + 1
        return ("func", name, self.s[first], self.end(i), params, stmts, ret)

    def type(self) -> tuple[Any, ...]:
        k = self.k
        dtype = self.tok(self.expect("n"))
        dims = []
        if k[self.i] == "[":
            i = self.i + 1
            if k[i] != "]":
                while True:
                    if not (k[i] == "d" or k[i] == "-" and self.x[i] != "-inf"):
                        raise _Decline
                    dims.append(self.tok(i))
                    i += 1
                    if k[i] != ",":
                        break
                    i += 1
            if k[i] != "]":
                raise _Decline
            self.i = i + 1
        return (dtype, dims)

    def stmt(self) -> tuple[Any, ...]:
        k, x, s = self.k, self.x, self.s
        i = first = self.i
        results = []
        while True:  # k[i] == "v" here
            xi = x[i]
            results.append((xi, s[i], s[i] + len(xi)))
            i += 1
            if k[i] == "=":
                break
            if k[i] != "," or k[i + 1] != "v":
                raise _Decline
            i += 1
        if k[i + 1] != "n" or k[i + 2] != "(":
            raise _Decline
        xi = x[i + 1]
        op = (xi, s[i + 1], s[i + 1] + len(xi))
        i += 3
        args: list[Any] = []
        if k[i] != ")":
            while True:
                ki = k[i]
                xi = x[i]
                if ki == "v":
                    args.append(("operand", (xi, s[i], s[i] + len(xi))))
                    i += 1
                elif ki == "n" and k[i + 1] == "=":
                    key = (xi, s[i], s[i] + len(xi))
                    i += 2
                    if k[i] == "v":
                        xi = x[i]
                        args.append(("keyword_operand", key, (xi, s[i], s[i] + len(xi))))
                        i += 1
                    else:
                        self.i = i
                        args.append(("attr", key, self.literal(0)))
                        i = self.i
                else:
                    raise _Decline
                if k[i] != ",":
                    break
                i += 1
            if k[i] != ")":
                raise _Decline
        last = i
        i += 1
        self.i = i
        types = entries = None
        if k[i] == ":":
            self.i = i + 1
            start = s[self.i]
            ts = [self.type()]
            while k[self.i] == ",":
                self.i += 1
                ts.append(self.type())
            last = self.i - 1
            types = (start, self.end(last), ts)
        if k[self.i] == "@":
            i = self.i + 1
            if k[i] != "{":
                raise _Decline
            i += 1
            entries = []
            if k[i] == "n":
                while True:
                    if k[i] != "n" or k[i + 1] != "=":
                        raise _Decline
                    key = self.tok(i)
                    self.i = i + 2
                    entries.append((key, self.literal(0)))
                    i = self.i
                    if k[i] != ",":
                        break
                    i += 1
            if k[i] != "}":
                raise _Decline
            last = i
            self.i = i + 1
        return (s[first], self.end(last), results, op, args, types, entries)

    def literal(self, depth: int) -> Any:
        i = self.i
        kind = self.k[i]
        if kind == "[":
            if depth > MAX_LIST_DEPTH:
                raise _Decline
            self.i = i + 1
            items = []
            if self.k[self.i] != "]":
                while True:
                    items.append(self.literal(depth + 1))
                    if self.k[self.i] != ",":
                        break
                    self.i += 1
            close = self.expect("]")
            return ("list", self.s[i], self.end(close), items)
        self.i = i + 1
        if kind == "d":
            return ("number", self.tok(i))
        if kind == "n":
            return ("word", self.tok(i))
        if kind == "s":
            return ("string", self.tok(i))
        if kind == "-":
            return ("neg_inf" if self.x[i] == "-inf" else "number", self.tok(i))
        raise _Decline
