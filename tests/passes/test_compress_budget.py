"""Compressed weights and the per-program BLOBFILE budget (ANE-COMPRESSED-BUDGET, a hypothesis).

Compression is decided at emit-mil, after legalize planned the programs, so the plan counts
one tensor per weight const; the sim's budget check counts a constexpr result once and its
payload BLOBFILEs not at all, so the plan and the sim agree.
"""

from __future__ import annotations

import pytest

from anec.compiler import compile_module
from anec.ir.parser import parse
from anec.targets import get_target
from anec.ir.weight_binding import resolve_weights


def _chain(n: int) -> str:
    lines = ["func f(%x: fp16[1, 16, 1, 8]) {"]
    cur = "%x"
    for i in range(n):
        lines.append(f'  %w{i} = const(weight="l.{i}.w") : fp16[16, 16, 1, 1]')
        lines.append(f"  %h{i} = conv1x1({cur}, %w{i}) : fp16[1, 16, 1, 8]")
        cur = f"%h{i}"
    lines += [f"  return {cur}", "}"]
    return "\n".join(lines) + "\n"


@pytest.mark.constraint("ANE-COMPRESSED-BUDGET")
def test_the_budget_counts_a_compressed_weight_once():
    cap = get_target("m4").max_blob_tensors
    module = parse(_chain(cap), "chain.ir")
    store = resolve_weights(module, None, 0)
    art = compile_module(module, store, compress="int8").artifacts["f"]
    assert not hasattr(art, "stages")  # one program: the plan counted `cap` tensors
    blob_consts = art.mil_text.count("BLOBFILE(")
    assert blob_consts == 2 * cap  # every weight is an int8 payload and a scale
    assert art.mil_text.count("constexpr_affine_dequantize(") == cap  # the target's int8 form
