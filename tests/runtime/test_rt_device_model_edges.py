"""The sim's device model at edges the other runtime tests do not reach.

A request binding another number of outputs than the program returns, and a surface of the
minimum size that is still smaller than its packed tensor, fail like the device (status
0x1d); a cache hit on a device that keeps weights in memory (load=memory) computes with the
weights its donor's compile baked.
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.diagnostics import RuntimeFailure
from anec.runtime import Runtime
from tests.runtime import milkit as mk

S = (1, 8, 1, 16)
MIN = 49152


def test_a_request_with_another_output_count_is_refused(rt):
    p = rt.compile(mk.program([("x", "fp16", S)], [mk.op("y", "fp16", S, "relu", x="x")], ["y"]))
    try:
        with pytest.raises(RuntimeFailure) as ei:
            p.evaluate_raw([np.zeros(MIN, np.uint8)], [np.zeros(MIN, np.uint8)] * 2)
        assert "status=0x1d" in ei.value.message and "the request binds 1 and 2" in ei.value.message
        out = [np.zeros(MIN, np.uint8)]
        p.evaluate_raw([np.zeros(MIN, np.uint8)], out)  # the right count runs
    finally:
        p.close()


def test_a_minimum_size_surface_smaller_than_its_tensor_is_refused(rt):
    big = (1, 8, 1, 4096)  # 65536 bytes of fp16: above the 49152-byte minimum
    p = rt.compile(mk.program([("x", "fp16", big)], [mk.op("y", "fp16", big, "relu", x="x")], ["y"]))
    try:
        with pytest.raises(RuntimeFailure) as ei:
            p.evaluate_raw([np.zeros(MIN, np.uint8)], [np.zeros(MIN, np.uint8)])
        assert "status=0x1d" in ei.value.message and "the packed tensor needs 65536" in ei.value.message
        x = np.zeros(65536, np.uint8)
        x.view(np.float16)[:] = -1.5
        x.view(np.float16)[:8] = 2.0
        out = [np.zeros(65536, np.uint8)]
        p.evaluate_raw([x], out)
        assert (out[0].view(np.float16)[:8] == 2).all() and (out[0].view(np.float16)[8:] == 0).all()
    finally:
        p.close()


def test_a_cache_hit_on_a_memory_device_computes_with_the_baked_weights(tmp_path):
    w = np.random.default_rng(5).standard_normal((8, 8, 1, 1)).astype(np.float16)
    body = [mk.const_blob("w", "fp16", w.shape, "w.bin"), mk.op("y", "fp16", S, "conv", weight="w", x="x")]
    mil = mk.program([("x", "fp16", S)], body, ["y"])
    blobs = {"@model_path/weights/w.bin": mk.blobfile(w)}
    x = np.random.default_rng(6).standard_normal(S).astype(np.float16)
    with Runtime("sim", temp_root=tmp_path, sim_device="load=memory") as rt:
        first = rt.compile(mil, blobs)
        y0 = first(x=x)["y"]
        second = rt.compile(mil, blobs)  # same MIL, paths and weights: served from the cache
        assert rt.stats["compiles"] == 1 and rt.stats["cache_hits"] == 1
        np.testing.assert_array_equal(second(x=x)["y"], y0)
    assert np.abs(y0.astype(np.float32)).max() > 0.1  # the weights matter: zeros would differ
