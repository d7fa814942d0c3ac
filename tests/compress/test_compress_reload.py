"""Reloading a compressed program: new weights are compressed with the recorded scheme.

The MIL stays the same (the same ops over payloads of the same shapes); only the payload
BLOBFILEs change. The outputs must change, and equal a fresh compile of the new weights
bit for bit (the same program on the same payloads).
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.diagnostics import WeightError
from anec.ir.interp import random_inputs
from anec.ir.weight_binding import resolve_weights


@pytest.mark.parametrize("spec,dialect", [("int8", "ios18"), ("uint8-affine", "ios16"), ("lut4>fp16", "ios18"),
                                          ("lut6>fp16", "ios16"), ("lut2/g8>fp16", "ios18"),
                                          ("int4-affine/b16>fp16", "ios18"), ("int8", "ios16"),
                                          ("sparse50>fp16", "ios18"), ("sparse90>fp16", "ios16"),
                                          ("sparse50+int8>fp16", "ios18"), ("sparse50+lut4>fp16", "ios18")])
def test_reload_recompresses_with_the_recorded_scheme(rt, small, spec, dialect):
    old = resolve_weights(small, None, 0)
    new = resolve_weights(small, None, 1)
    keys = ["blk.0.w", "blk.1.w", "head.w", "norm.g"]  # compressed and plain together
    x = random_inputs(small.funcs["f"], 3)
    art = compile_module(small, old, compress=spec, dialect=dialect).artifacts["f"]
    fresh = compile_module(small, new, compress=spec, dialect=dialect).artifacts["f"]
    assert fresh.mil_text == art.mil_text
    _reload_equals_fresh(rt, art, fresh, x, {k: np.asarray(new[k]) for k in keys})


def _reload_equals_fresh(rt, art, fresh, x, new) -> None:
    """``art`` reloaded with ``new`` computes other outputs than before, the outputs of
    ``fresh`` (the new weights compiled) bit for bit: the same program and payloads."""
    prog = rt.load(art)
    ref = rt.load(fresh)
    try:
        before = prog(**x)
        prog.reload_weights(new)
        after = prog(**x)
        want = ref(**x)
    finally:
        prog.close()
        ref.close()
    for k in after:
        assert not np.array_equal(after[k], before[k])
        assert np.array_equal(after[k], want[k]), k


def test_a_reload_that_does_not_dequantize_to_fp16_is_refused(rt, small):
    art = compile_module(small, resolve_weights(small, None, 0), compress="int8").artifacts["f"]
    prog = rt.load(art)
    try:
        bad = np.full((64, 48, 1, 1), np.nan, np.float32)
        with pytest.raises(WeightError, match="blk.0.w.*non-finite"):
            prog.reload_weights({"blk.0.w": bad})
    finally:
        prog.close()


@pytest.mark.parametrize("dialect", ["ios18", "ios16"])
def test_a_sparse_reload_keeps_the_count_whatever_the_new_values(rt, small, dialect):
    """The number of values a sparse weight keeps is fixed by its size: new weights with
    70% exact zeros (coremltools' percentile rule would prune them all, a shorter
    nonzero_data) are pruned to the recorded count, zeros kept as values, so the MIL is
    the same as the old program's and as a fresh compile's, whose outputs the reload equals."""
    from anec.compress.sparse import kept_count

    old = resolve_weights(small, None, 0)
    rng = np.random.default_rng(5)
    keys = ("blk.0.w", "blk.1.w", "head.w")
    new = {**old, **{k: np.where(rng.random(np.shape(old[k])) < 0.7, 0, np.asarray(old[k], np.float32) * 2
                                 ).astype(np.float16) for k in keys}}
    x = random_inputs(small.funcs["f"], 3)
    art = compile_module(small, old, compress="sparse50>fp16", dialect=dialect).artifacts["f"]
    fresh = compile_module(small, new, compress="sparse50>fp16", dialect=dialect).artifacts["f"]
    assert fresh.mil_text == art.mil_text and f"tensor<fp16, [{kept_count(64 * 48, 50)}]>" in art.mil_text
    _reload_equals_fresh(rt, art, fresh, x, {k: new[k] for k in keys})
