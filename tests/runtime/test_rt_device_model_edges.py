"""The sim's device model at edges the other runtime tests do not reach.

A request binding another number of outputs than the program returns, and a surface of the
minimum size that is still smaller than its packed tensor, fail like the device (status
0x1d); a cache hit on a device that keeps weights in memory (load=memory) computes with the
weights its donor's compile baked; compiled data holding a weight file more than the network
reads does not load. The runtime core sizes output surfaces by the outputs, and counts the
compiles left against both its own cap and the process's device budget; anec_call refuses a
caller array of another size than its tensor.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

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


def test_compiled_data_with_a_file_more_than_the_network_reads_does_not_load(fresh_rt):
    """The sim's container of several weight files (magic, u32 version, u32 count, then per file
    u32 path length, path, u64 length, bytes) must hold exactly the files the network reads."""
    ws = [np.full((8, 8, 1, 1), v, np.float16) for v in (0.5, -0.25)]
    body = [mk.const_blob("a", "fp16", (8, 8, 1, 1), "a.bin"), mk.const_blob("b", "fp16", (8, 8, 1, 1), "b.bin"),
            mk.op("c", "fp16", S, "conv", weight="a", x="x"), mk.op("y", "fp16", S, "conv", weight="b", x="c")]
    blobs = {f"@model_path/weights/{n}.bin": mk.blobfile(w) for n, w in zip("ab", ws)}
    p = fresh_rt.compile(mk.program([("x", "fp16", S)], body, ["y"]), blobs)
    try:
        data_path = os.path.join(p.dir, "data")
        data = open(data_path, "rb").read()
        assert data[:8] == b"ANESIMCT" and struct.unpack_from("<I", data, 12)[0] == 2
        pl = struct.unpack_from("<I", data, 16)[0]
        fl = struct.unpack_from("<Q", data, 20 + pl)[0]
        first = data[16:16 + 12 + pl + fl]  # the first file's entry, once more
        tampered = data[:12] + struct.pack("<I", 3) + data[16:] + first
        p.unload()
        with open(data_path, "wb") as f:
            f.write(tampered)
        with pytest.raises(RuntimeFailure, match="holds 3 weight files, the network reads 2"):
            p.load()
        with open(data_path, "wb") as f:
            f.write(data)
        p.load()  # the untouched container loads
    finally:
        p.close()


def test_output_surfaces_are_sized_by_the_outputs(rt):
    """Inputs and outputs each get their own uniform size: an output larger than the minimum
    and than every input gets surfaces of its size (rounded to the alignment)."""
    out = (1, 8, 1, 4096)  # 65536 bytes
    body = [mk.const_ints("p", [0, 4096 - 16]), mk.op("y", "fp16", out, "pad", pad="p", x="x")]
    p = rt.compile(mk.program([("x", "fp16", S)], body, ["y"]))
    try:
        assert p._native.input_surface_bytes == MIN and p._native.output_surface_bytes == 65536
        x = np.full(S, 3.0, np.float16)
        y = p(x=x)["y"]
        assert (y[..., :16] == 3).all() and (y[..., 16:] == 0).all()
    finally:
        p.close()


def test_compile_budget_left_is_the_smaller_of_the_cap_and_the_process_budget(tmp_path):
    """A runtime's cap and the process's device budget both bound the compiles left. Run in a
    process of its own: the smallest process budget given stays for the process."""
    code = (
        "from anec.runtime.native import NativeRuntime\n"
        "rt = NativeRuntime('sim', 50, process_budget=5)\n"
        "st = rt.stats()\n"
        "print(st['compile_budget_left'], st['compile_budget'])\n"
        "rt.shutdown()\n"
    )
    import anec

    # the anec this process imported (and its extension), not whichever the path finds first
    here = str(Path(anec.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    # run outside the project: `python -c` looks in its working directory first
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["5", "5"]


def test_a_caller_array_of_another_size_is_refused_at_the_c_boundary(rt):
    """anec_call copies exactly the tensor's bytes: an input or output array of the same dtype
    but another size (larger or smaller) is refused by name, not truncated or overrun."""
    from anec.runtime.native import lib

    p = rt.compile(mk.program([("x", "fp16", S)], [mk.op("y", "fp16", S, "relu", x="x")], ["y"]))
    try:
        n = int(np.prod(S))
        ok_in, ok_out = np.ones(n, np.float16), np.zeros(n, np.float16)
        for bad in (np.ones(2 * n, np.float16), np.ones(n - 1, np.float16)):
            with pytest.raises(RuntimeFailure, match=rf"input 'x' is fp16 of {2 * n} bytes; got {bad.nbytes} bytes"):
                p._native.call([(lib.ANEC_DTYPE_FP16, bad)], [ok_out])
            with pytest.raises(RuntimeFailure, match=rf"output 'y' is fp16 of {2 * n} bytes; got {bad.nbytes} bytes"):
                p._native.call([(lib.ANEC_DTYPE_FP16, ok_in)], [np.zeros_like(bad)])
        p._native.call([(lib.ANEC_DTYPE_FP16, ok_in)], [ok_out])
        assert (ok_out == 1).all()
    finally:
        p.close()
