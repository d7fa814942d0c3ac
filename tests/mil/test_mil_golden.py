"""Golden MIL for every example, and the properties the runtime relies on.

The goldens are the byte-exact ``model.mil`` of each func of each example
after the default pipeline for m4. Rewrite them with ``pytest --update-goldens``
after an intended change and review the diff.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

from anec.compiler import compile_module
from anec.ir.parser import parse_file

from .conftest import GOLDEN_DIR
from .milcheck import parse_mil

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))
FORBIDDEN = ("gelu(", "rsqrt(", "concat(", "neg(")


@lru_cache(maxsize=None)
def compiled(path: Path, seed: int | None, target: str = "m4", host_casts: bool = False,
             dialect: str | None = None):
    return compile_module(parse_file(str(path)), random_seed=seed, target=target, host_casts=host_casts,
                          with_weights=seed is not None, dialect=dialect)


def _ids(p: Path) -> str:
    return p.stem


def test_examples_exist():
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("example", EXAMPLES, ids=_ids)
def test_golden_mil(example, update_goldens):
    result = compiled(example, None)
    assert result.artifacts, "the default pipeline must emit every func"
    for func, art in result.artifacts.items():
        golden = GOLDEN_DIR / f"{example.stem}__{func}.mil"
        if update_goldens:
            GOLDEN_DIR.mkdir(exist_ok=True)
            golden.write_text(art.mil_text, encoding="utf-8")
            continue
        assert golden.exists(), f"missing {golden.name}: run pytest --update-goldens"
        assert art.mil_text == golden.read_text(encoding="utf-8"), (
            f"MIL of {example.name}:{func} differs from {golden.name} (pytest --update-goldens if intended)")


def test_no_stale_goldens():
    expected = {f"{e.stem}__{f}.mil" for e in EXAMPLES for f in parse_file(str(e)).funcs}
    assert {p.name for p in GOLDEN_DIR.glob("*.mil")} == expected


@pytest.mark.parametrize("example", EXAMPLES, ids=_ids)
def test_mil_independent_of_weight_values(example):
    a, b, text_only = compiled(example, 0), compiled(example, 1), compiled(example, None)
    for func in text_only.artifacts:
        assert a.artifacts[func].mil_text == b.artifacts[func].mil_text == text_only.artifacts[func].mil_text
        if a.artifacts[func].blobs:
            assert a.artifacts[func].blobs != b.artifacts[func].blobs
        wa = [{k: v for k, v in w.items() if k != "sha256"} for w in a.artifacts[func].manifest.document["weights"]]
        wb = [{k: v for k, v in w.items() if k != "sha256"} for w in b.artifacts[func].manifest.document["weights"]]
        assert wa == wb


@pytest.mark.parametrize("example", EXAMPLES, ids=_ids)
def test_io_names_preserved(example):
    module = parse_file(str(example))
    result = compiled(example, None)
    for func, graph in module.funcs.items():
        art = result.artifacts[func]
        ins = [v.name for v in graph.inputs]
        outs = [v.name for v in graph.outputs]
        assert [e["name"] for e in art.manifest.document["inputs"]] == ins
        assert [e["logical"] for e in art.manifest.document["outputs"]] == outs
        mil = parse_mil(art.mil_text)
        assert [name for _, name in mil.inputs] == ins
        assert mil.outputs == [e["name"] for e in art.manifest.document["outputs"]]
        by_binding = sorted(art.manifest.document["inputs"], key=lambda e: e["binding"])
        assert [e["name"] for e in by_binding] == sorted(ins)


@pytest.mark.parametrize("example", EXAMPLES, ids=_ids)
def test_no_rejected_ops_emitted(example):
    for art in compiled(example, None).artifacts.values():
        for bad in FORBIDDEN:
            assert not re.search(r"\b" + re.escape(bad), art.mil_text), bad
        for line in art.mil_text.splitlines():
            if " = conv(" in line:
                assert "bias" not in line


def test_deterministic_across_runs():
    example = ROOT / "examples" / "gpt2_attention.ir"
    first = compile_module(parse_file(str(example)), with_weights=False)
    second = compile_module(parse_file(str(example)), with_weights=False)
    assert {k: a.mil_text for k, a in first.artifacts.items()} == {k: a.mil_text for k, a in second.artifacts.items()}
