"""Every pass docstring's examples run: parse Before, run the pass, compare with After.

A docstring shows its pass by indented IR blocks after a paragraph starting
``Before:`` (then ``After:``, what the pass makes of it) or ``Unchanged:`` (a
program the pass must leave exactly as it is). A block may start with IR
comments that set up the run::

    // pass: keys=("*.c_fc.weight",)         the pass's options (Python literals)
    // context: target="m1", host_casts=True  PassContext.default(target, **options)
    // target: reduce_mean_as_sum=False       fields changed on the context's target

The pass runs through the manager (verified before and after); the result is
compared with After in canonical printed form. An After that starts with
``program(`` is the emitted MIL text of the func.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap

import pytest

from anec.ir.parser import parse
from anec.ir.printer import print_module
from anec.passes import ALL_PASSES, PassContext, run_pipeline

_HEAD = re.compile(r"^(Before|After|Unchanged)\b[^:]*:{1,2}(\s.*)?$")
_SETUP = re.compile(r"^//\s*(pass|context|target):(.*)$")


def _blocks(doc: str) -> list[tuple[str, str]]:
    """(kind, dedented block) for each ``Before:`` / ``After:`` / ``Unchanged:`` in ``doc``."""
    lines = doc.splitlines()
    out = []
    i = 0
    while i < len(lines):
        m = _HEAD.match(lines[i].strip())
        if not m or lines[i].startswith(" "):
            i += 1
            continue
        i += 1
        while i < len(lines) and lines[i].strip() and not lines[i].startswith(" "):
            i += 1  # the header's sentence goes on
        body = []
        while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
            body.append(lines[i])
            i += 1
        out.append((m.group(1), textwrap.dedent("\n".join(body)).strip() + "\n"))
    return out


def examples(cls) -> list[tuple[str, str | None]]:
    """(before, after) pairs of a pass docstring; after is None for an ``Unchanged`` program."""
    out: list[tuple[str, str | None]] = []
    blocks = _blocks(cls.documentation())
    for k, (kind, text) in enumerate(blocks):
        if kind == "Unchanged":
            out.append((text, None))
        elif kind == "Before":
            nxt = blocks[k + 1] if k + 1 < len(blocks) else None
            assert nxt is not None and nxt[0] == "After", f"{cls.name}: a Before block needs its After"
            out.append((text, nxt[1]))
    return out


def _kwargs(text: str) -> dict:
    call = ast.parse(f"f({text})", mode="eval").body
    assert isinstance(call, ast.Call) and not call.args, text
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}


def _setup(before: str) -> tuple[dict, dict, dict]:
    found = {"pass": {}, "context": {}, "target": {}}
    for line in before.splitlines():
        m = _SETUP.match(line.strip())
        if m:
            found[m.group(1)].update(_kwargs(m.group(2)))
    return found["pass"], found["context"], found["target"]


def _run(cls, before: str):
    pass_kw, ctx_kw, target_kw = _setup(before)
    module = parse(before, f"{cls.name}.ir")
    ctx = PassContext.default(ctx_kw.pop("target", None), **ctx_kw)
    if target_kw:
        ctx.target = ctx.target.replace(**target_kw)
    run_pipeline(module, (cls(**pass_kw),), ctx)
    return module, ctx


CASES = [(cls, i, before, after) for cls in ALL_PASSES for i, (before, after) in enumerate(examples(cls))]


def test_every_pass_shows_a_change_and_a_program_it_leaves_alone():
    for cls in ALL_PASSES:
        kinds = [after is None for _, after in examples(cls)]
        assert False in kinds, f"{cls.name}: no Before/After example"
        if cls.name != "emit-mil":  # emit-mil never changes the program: its After is MIL
            assert True in kinds, f"{cls.name}: no Unchanged example (a case where it must not fire)"


@pytest.mark.parametrize("cls,i,before,after", CASES, ids=[f"{c.name}-{i}" for c, i, _, _ in CASES])
def test_docstring_example(cls, i, before, after):
    module, ctx = _run(cls, before)
    if after is not None and after.startswith("program("):
        (art,) = ctx.artifacts.values()
        assert art.mil_text == after
        return
    expected = print_module(parse(after if after is not None else before, "after.ir", target_forms=True))
    assert print_module(module) == expected


def test_the_example_reader():
    doc = """Summary.

    Before:
        func f(%x: fp16[1]) {
          %y = relu(%x)
          return %y
        }
    After:
        func f(%x: fp16[1]) {
          %y = relu(%x) : fp16[1]
          return %y
        }

    Unchanged::

        // context: target="m1"
        func g(%x: fp16[1]) {
          %y = relu(%x)
          return %y
        }
    """

    class P:
        name = "p"

        @classmethod
        def documentation(cls):
            return inspect.cleandoc(doc)

    (b, a), (u, none) = examples(P)
    assert b.startswith("func f(") and a.endswith("}\n") and none is None
    assert _setup(u) == ({}, {"target": "m1"}, {})


def test_a_pass_with_an_empty_docstring_has_empty_documentation():
    from anec.passes.base import Pass

    class Quiet(Pass):
        ""

        name = "quiet"

        def run(self, graph, ctx):
            return None

    class Loud(Quiet):
        """First line.

        More."""

    assert Quiet.documentation() == "" and Quiet.summary() == ""
    assert Loud.summary() == "First line." and Loud.documentation() == "First line.\n\nMore."
