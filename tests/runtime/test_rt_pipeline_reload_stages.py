"""A pipeline's reload reaches its stages, or changes none of them.

A pipeline with weights as inputs: two of the chain's weights are program inputs and the other
four BLOBFILE consts, two per program, so the func is cut into stages and each weight input
feeds the stage that holds its layer (a chain whose weights are all inputs has no BLOBFILE to
split by and stays one program). The weights are scaled to unit gain (He scaling for relu: the
activations stay O(1) through the layers), so new weights visibly change the output; after the
reload the pipeline must compute exactly what a fresh compile of it with the new weights
computes (same program shape, same kernels: bit for bit), with no compile and no load.

A reload that needs more compiles than the budget has left is refused before any stage changes.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.compiler import compile_module
from anec.diagnostics import RuntimeFailure
from anec.ir.parser import parse
from anec.runtime import Runtime
from anec.targets import get_target
from anec.ir.weight_binding import random_weights
from tests.passes.test_partition import chain

LAYERS = 6
AS_INPUTS = ["l1.w", "l4.w"]  # one in each stage


def unit_gain(store) -> dict[str, np.ndarray]:
    """Each [out, in, 1, 1] weight scaled to mean square 2 / in (the relu chain keeps its scale)."""
    out = {}
    for key in store.keys():
        w = np.asarray(store[key], np.float32)
        out[key] = (w * np.sqrt(2.0 / (w.shape[1] * np.mean(w * w)))).astype(np.float16)
    return out


def test_reload_changes_the_output_and_equals_a_fresh_compile(tmp_path):
    m = parse(chain(LAYERS), "c.ir")
    s0, s1 = unit_gain(random_weights(m, 0)), unit_gain(random_weights(m, 1))
    target = get_target("m4").replace(max_blob_tensors=2)
    piped = compile_module(m, weights=s0, target=target, weights_as_inputs=AS_INPUTS).artifacts["f"]
    fresh = compile_module(m, weights={**s0, **{k: s1[k] for k in AS_INPUTS}}, target=target,
                           weights_as_inputs=AS_INPUTS).artifacts["f"]
    x = {"x": np.random.default_rng(3).standard_normal(m.funcs["f"].inputs[0].type.shape).astype(np.float16)}
    with Runtime("sim", temp_root=tmp_path / "rt") as rt:
        p = rt.load(piped)
        assert len(p.stages) == 2 and p.input_names == ["x"]
        y0 = p(**x)[f"h{LAYERS - 1}"]
        before = rt.stats
        p.reload_weights({k: s1[k] for k in AS_INPUTS})
        after = rt.stats
        y1 = p(**x)[f"h{LAYERS - 1}"]
        assert after["compiles"] == before["compiles"] and after["loads"] == before["loads"]
    with Runtime("sim", temp_root=tmp_path / "fresh") as rt:
        want = rt.load(fresh)(**x)[f"h{LAYERS - 1}"]
    assert np.abs(y0.astype(np.float32)).mean() > 0.1  # O(1) activations: the check below can fail
    np.testing.assert_array_equal(y1, want)
    assert not np.array_equal(y0, y1)


def test_a_reload_the_budget_cannot_pay_changes_no_stage(tmp_path):
    """Stages of two BLOBFILE tensors each have opaque compiled data: a reload recompiles them.
    With one compile left, a reload of two stages is refused before any stage changes."""
    m = parse(chain(LAYERS), "c.ir")
    s0, s1 = unit_gain(random_weights(m, 0)), unit_gain(random_weights(m, 1))
    piped = compile_module(m, weights=s0, target=get_target("m4").replace(max_blob_tensors=2)).artifacts["f"]
    x = {"x": np.random.default_rng(3).standard_normal(m.funcs["f"].inputs[0].type.shape).astype(np.float16)}
    with Runtime("sim", temp_root=tmp_path, compile_budget=len(piped.stages) + 1) as rt:
        p = rt.load(piped)
        assert len(p.stages) == 3 and rt.stats["compile_budget_left"] == 1
        y0 = p(**x)[f"h{LAYERS - 1}"]
        with pytest.raises(RuntimeFailure, match=r"this reload needs 2 compiles .* 1 are left; nothing was changed"):
            p.reload_weights({"l0.w": s1["l0.w"], "l5.w": s1["l5.w"]})
        assert rt.stats["compile_budget_left"] == 1
        np.testing.assert_array_equal(p(**x)[f"h{LAYERS - 1}"], y0)
