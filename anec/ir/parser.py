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

This module holds the public entry points; the work is done by :mod:`anec.ir.scanner` (fast
path), :mod:`anec.ir.lark_fallback` (Lark and syntax errors), :mod:`anec.ir.module_builder`
(syntax form -> Module, literal decoding, type inference) and :mod:`anec.ir.text_layout`
(comments and blank lines for the formatter).
"""

from __future__ import annotations

from pathlib import Path

from anec.diagnostics import AnecError, Source
from anec.ir.graph import Module
from anec.ir.nogc import no_cyclic_gc
from anec.ir.lark_fallback import lark_syntax
from anec.ir.module_builder import ModuleBuilder
from anec.ir.scanner import scan
from anec.ir.text_layout import Comment, Layout, build_layout

__all__ = ["Comment", "Layout", "parse", "parse_file", "parse_with_layout"]


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
    items, comments = scanned if scanned is not None else lark_syntax(source)
    builder = ModuleBuilder(source, layout, target_forms)
    module = builder.module(items)
    if not layout:
        return module
    return module, build_layout(source, builder.items, comments)
