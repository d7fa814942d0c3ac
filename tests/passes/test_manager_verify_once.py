"""Without verify_each, one change log spans a pipeline of tracked passes: the check at the end
re-checks what any pass changed, and gives the error a full verify gives."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from anec.diagnostics import PassError, VerifyError
from anec.ir import verifier
from anec.ir.parser import parse
from anec.ir.printer import print_module
from anec.ir.verifier import verify
from anec.passes import DeadCodeElimination, FuseCasts, Pass, PassContext, manager, run_pipeline
from anec.passes.pipelines import OPTIMIZE

from .passes_util import parse_func
from .test_manager_verify_changes import BREAKERS, TEXT, _tracked_pass

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.ir"))


def _once() -> PassContext:
    ctx = PassContext.default(host_casts=True)
    ctx.verify_each = False
    return ctx


@pytest.mark.parametrize("kind", sorted(BREAKERS))
@pytest.mark.parametrize("at", ["first", "last"])
def test_the_pipeline_log_finds_what_a_full_verify_of_the_result_finds(kind, at, monkeypatch):
    """A broken tracked pass, first (dce may then remove the damage: the result is valid) or
    last: the check at the end raises exactly what verifying the result whole raises."""
    broken = _tracked_pass(f"broken-{kind}", BREAKERS[kind])
    passes = ((broken, DeadCodeElimination(), FuseCasts()) if at == "first"
              else (DeadCodeElimination(), FuseCasts(), broken))
    reference = parse_func(TEXT)
    try:
        for p in passes:
            p.run(reference, _once())
    except ValueError as crash:  # a later pass refuses the damaged graph: so does the pipeline
        with pytest.raises(ValueError, match=re.escape(str(crash))):
            run_pipeline(parse_func(TEXT), passes, _once())
        return
    try:
        verify(reference)
        expected = None
    except VerifyError as e:
        expected = e
    seen = []

    def incremental(graph, changes):
        seen.append(verifier._changes_ok(graph, changes))
        return verifier.verify_changes(graph, changes)

    monkeypatch.setattr(manager, "verify_changes", incremental)
    if expected is None:
        run_pipeline(parse_func(TEXT), passes, _once())
        assert seen == [True]
        return
    with pytest.raises(PassError) as info:
        run_pipeline(parse_func(TEXT), passes, _once())
    names = ", ".join(p.name for p in passes)
    assert info.value.message == f"the pipeline ({names}) left func 'f' invalid: {expected.message}"
    assert getattr(info.value.span, "location", None) == getattr(expected.span, "location", None)
    assert info.value.hint == expected.hint
    assert seen == [False]  # one check, at the end, and the log itself saw the damage


def test_a_broken_last_pass_is_always_caught():
    """Every breaker, run last, leaves an invalid result (the test above is not vacuous)."""
    for kind, edit in BREAKERS.items():
        g = parse_func(TEXT)
        for p in (DeadCodeElimination(), FuseCasts()):
            p.run(g, _once())
        edit(g)
        with pytest.raises(VerifyError):
            verify(g)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_valid_programs_are_checked_once_from_the_log_and_match_verify_each(path, monkeypatch):
    fallbacks = []

    def full(target, **kw):
        fallbacks.append(target)
        return verify(target, **kw)

    each = parse(path.read_text(), str(path))
    run_pipeline(each, OPTIMIZE, PassContext.default(host_casts=True))
    monkeypatch.setattr(verifier, "verify", full)  # verify_changes falls back through this name
    once = parse(path.read_text(), str(path))
    ctx = _once()
    run_pipeline(once, OPTIMIZE, ctx)
    assert fallbacks == []
    assert print_module(once) == print_module(each)
    assert all(g.changes is None for g in once.funcs.values())  # the log is closed


@dataclass(frozen=True)
class _Untracked(Pass):
    """A pass that may edit behind the graph's back (it does not).

    Before: a valid graph. After: the same graph.
    """

    name: ClassVar[str] = "untracked"

    def run(self, graph, ctx) -> None:
        pass


def test_an_untracked_pass_in_the_pipeline_means_a_full_check(monkeypatch):
    logs = []
    monkeypatch.setattr(manager, "verify_changes", lambda g, c: logs.append(c))
    run_pipeline(parse_func(TEXT), (DeadCodeElimination(), _Untracked(), FuseCasts()), _once())
    assert logs == []  # verified whole
    run_pipeline(parse_func(TEXT), (DeadCodeElimination(), FuseCasts()), _once())
    assert len(logs) == 1
