"""The IR language as a user writes it: odd but valid files parse, verify, print and format.

The files in ``ir/`` were written from the syntax description alone (DESIGN and
docs/ir.md): free spacing, comments everywhere, types left out, several funcs
and ``weights`` directives, unusual names, scalars, every op, multi-result
split, optional ``bias=``, literals such as ``1e-5``, ``-inf`` and nested lists.
"""

from __future__ import annotations

import math
import re

import pytest

from anec.ir import parse, parse_file, print_module, verify_all
from anec.ir.ops import OPS
from anec.ir.printer import format_text
from anec.ir.types import DType, TensorType

from .acc_util import ACCEPTANCE_IR, CORPUS, HERE, cli, cli_process


def _ids(p):
    return p.name


@pytest.mark.parametrize("path", CORPUS, ids=_ids)
def test_file_parses_verifies_and_round_trips(path):
    module = parse_file(path)
    assert verify_all(module) == []
    text = print_module(module)
    again = parse(text)
    assert again == module  # parse(print(m)) == m
    assert print_module(again) == text  # printing is a fixed point


@pytest.mark.parametrize("path", CORPUS, ids=_ids)
def test_fmt_is_idempotent_and_keeps_every_comment(path):
    source = path.read_text("utf-8")
    formatted = format_text(source, str(path))
    assert format_text(formatted, str(path)) == formatted
    assert parse(formatted) == parse(source)
    for comment in re.findall(r"//[^\n]*", source):
        assert comment.rstrip() in formatted, comment


def test_fmt_cli_check_and_in_place(tmp_path):
    src = HERE / "ir" / "weird_layout.ir"
    work = tmp_path / "model.ir"
    work.write_text(src.read_text())
    printed = cli("fmt", work)
    assert printed.exit_code == 0 and printed.output == format_text(src.read_text(), str(work))
    check = cli("fmt", "--check", work)
    assert check.exit_code == 1 and "not in canonical form" in check.output
    assert cli("fmt", "-i", work).exit_code == 0
    assert work.read_text() == printed.output
    assert cli("fmt", "--check", work).exit_code == 0
    assert cli("fmt", "-", input=src.read_text()).output == printed.output


def test_crlf_and_tabs_format_like_the_lf_file():
    src = (HERE / "ir" / "weird_layout.ir").read_text()
    crlf = src.replace("\n", "\r\n").replace("    ", "\t")
    assert format_text(crlf) == format_text(src)
    assert parse(crlf) == parse(src)


def test_fmt_and_check_as_a_subprocess():
    path = HERE / "ir" / "literals_and_layout.ir"
    fmt = cli_process("fmt", path)
    assert fmt.returncode == 0 and fmt.stdout == format_text(path.read_text(), str(path))
    check = cli_process("check", path)
    assert "Traceback" not in check.stderr
    assert check.stdout.startswith(f"{path}: ok (2 funcs, 10 nodes)\n")  # valid IR...
    assert "warning: %u is never used (dce removes 'const')" in check.stderr
    # ... but a bool output is not a program the ANE runs: check says so and fails
    assert "REJECTED [ANE-IO-TENSORS] output %o is bool (bool[2, 2])" in check.stdout
    assert check.returncode == 1


def test_every_op_with_inferred_types():
    g = parse_file(HERE / "ir" / "every_op_inferred.ir").func()
    assert {n.op for n in g.nodes} == set(OPS)
    types = {r.name: r.type for n in g.nodes for r in n.results}
    assert types["cv"] == TensorType(DType.fp16, (1, 16, 1, 4))
    assert types["rshp"] == TensorType(DType.fp16, (16, 4))  # shape=[16, -1]
    assert types["rmean"] == TensorType(DType.fp16, (1, 1, 1, 1))  # keep_dims=true
    assert types["rmax"] == TensorType(DType.fp16, (1, 16, 1))
    assert (types["p"], types["q"]) == (TensorType(DType.fp16, (3, 16)),
                                        TensorType(DType.fp16, (5, 16)))
    assert types["pd"] == TensorType(DType.fp16, (4, 18))
    assert types["sl2"] == TensorType(DType.fp16, (8, 16))
    assert types["cc3"] == TensorType(DType.fp16, (13, 48))
    assert types["ii"] == TensorType(DType.int32, (2, 3))
    pad = next(n for n in g.nodes if n.results[0].name == "pd")
    assert pad.attrs["value"] == -math.inf
    conv = next(n for n in g.nodes if n.results[0].name == "cv")
    assert conv.optional["bias"].name == "bias"
    assert "bias" not in next(n for n in g.nodes if n.results[0].name == "cv2").optional


def test_layout_literals_and_directives():
    m = parse_file(HERE / "ir" / "weird_layout.ir")
    assert [w.path for w in m.weight_sources] == ["first.safetensors", "sub/second.npz"]
    assert list(m.funcs) == ["Block_0", "second"]
    g = m.funcs["Block_0"]
    consts = {n.results[0].name: n for n in g.nodes if n.op == "const"}
    assert consts["eps"].attrs["value"] == 1e-5 and consts["eps"].results[0].type.shape == ()
    assert consts["ninf"].attrs["value"] == -math.inf
    assert consts["m"].attrs["value"] == [[0.0, -10000.0], [1.5, 2]]
    assert g.inputs[1].type == TensorType(DType.fp16, ())  # %scale: fp16[]
    assert g.output_names() == ["a", "b2"]

    m = parse_file(HERE / "ir" / "literals_and_layout.ir")
    g = m.funcs["noinputs"]
    values = {n.results[0].name: n.attrs["value"] for n in g.nodes if n.op == "const"}
    assert values["k"] is True and values["s"] == -128 and values["pi"] == 3.5
    assert math.isnan(values["n"]) and values["inf"] == math.inf and values["big"] == -2.5e16
    split = m.funcs["_under"].nodes[0]
    assert [r.name for r in split.results] == ["a", "b"]
    assert split.annotations == {"note": "user ann", "spill": True, "x": [1, [2, 3]],
                                 "z": -math.inf}
    # the directive between the funcs is printed first (canonical form)
    assert print_module(m).startswith('weights "between.safetensors"\n\nfunc noinputs() {\n')

    m = parse_file(HERE / "ir" / "multi_func_names.ir")
    assert [w.path for w in m.weight_sources] == ["a.safetensors", "b/c.npz", "late.npz"]
    assert m.funcs["f_0"].inputs[0].name == "0" and m.funcs["_"].output_names() == ["a", "b", "q"]


def test_acceptance_corpus_is_complete():
    names = {p.name for p in ACCEPTANCE_IR}
    assert {"weird_layout.ir", "every_op_inferred.ir", "literals_and_layout.ir",
            "multi_func_names.ir", "returned_values.ir", "legal_after_rewrites.ir"} <= names
