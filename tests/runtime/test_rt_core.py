"""Runtime core: binding order, surfaces, cache, compile budget, program directories, and a
program's reload by each strategy the sim offers (checked against a fresh compile bit for bit,
and shown to fail when the native reload does nothing)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from anec.diagnostics import RuntimeFailure
from anec.runtime import Runtime, backend_available, native
from tests.runtime import milkit as mk
from tolerances import assert_close

S = (1, 8, 1, 16)


def two_io_program():
    """Inputs declared (z, a), outputs returned (y, b): y = z - a, b = z + a."""
    body = [mk.op("y", "fp16", S, "sub", x="z", y="a"), mk.op("b", "fp16", S, "add", x="z", y="a")]
    return mk.program([("z", "fp16", S), ("a", "fp16", S)], body, ["y", "b"])


def weighted_program(file="w.bin"):
    body = [mk.const_blob("w", "fp16", (8, 8, 1, 1), file), mk.op("y", "fp16", S, "conv", weight="w", x="x")]
    return mk.program([("x", "fp16", S)], body, ["y"])


def wblob(seed):
    w = np.random.default_rng(seed).standard_normal((8, 8, 1, 1)).astype(np.float16)
    return w, {"@model_path/weights/w.bin": mk.blobfile(w)}


@pytest.mark.constraint("ANE-IO-ORDER")
def test_binding_tables_are_alphabetical(rt):
    p = rt.compile(two_io_program())
    assert [i["name"] for i in p.inputs] == ["a", "z"]
    assert [o["name"] for o in p.outputs] == ["b", "y"]
    assert [i["decl_index"] for i in p.inputs] == [1, 0]
    assert p.input_names == ["z", "a"] and p.output_names == ["y", "b"]
    z = np.full(S, 3, np.float16)
    a = np.full(S, 1, np.float16)
    out = p(z=z, a=a)
    assert np.all(out["y"] == 2) and np.all(out["b"] == 4)
    p.close()


@pytest.mark.constraint("ANE-IO-ORDER")
def test_declaration_order_binding_gives_wrong_results_like_the_device(rt):
    p = rt.compile(two_io_program())
    nbytes = 49152
    z = np.zeros(nbytes, np.uint8)
    a = np.zeros(nbytes, np.uint8)
    z[:256].view(np.float16)[:] = 3
    a[:256].view(np.float16)[:] = 1
    outs = [np.zeros(nbytes, np.uint8), np.zeros(nbytes, np.uint8)]
    # declaration order (z, a): the device binds buffer 0 to 'a' -> y = a - z
    p.evaluate_raw([z, a], outs)
    assert np.all(outs[1][:256].view(np.float16) == -2)
    # alphabetical order (a, z) is right; outputs come back as (b, y)
    p.evaluate_raw([a, z], outs)
    assert np.all(outs[0][:256].view(np.float16) == 4) and np.all(outs[1][:256].view(np.float16) == 2)
    p.close()


@pytest.mark.constraint("ANE-UNIFORM-SURFACES", "ANE-MIN-SURFACE", "ANE-PACKED-READ")
def test_surface_rules(rt):
    p = rt.compile(two_io_program())
    assert p._native.input_surface_bytes == 49152 and p._native.output_surface_bytes == 49152
    outs = [np.zeros(49152, np.uint8), np.zeros(49152, np.uint8)]
    with pytest.raises(RuntimeFailure) as ei:
        p.evaluate_raw([np.zeros(49152, np.uint8), np.zeros(65536, np.uint8)], outs)
    assert ei.value.constraint == "ANE-UNIFORM-SURFACES" and "status=0x1d" in ei.value.message
    assert ei.value.code == native.lib.ANEC_EEVAL
    with pytest.raises(RuntimeFailure) as ei:
        p.evaluate_raw([np.zeros(49152, np.uint8)] * 2, [np.zeros(49152, np.uint8), np.zeros(4096, np.uint8)])
    assert ei.value.constraint == "ANE-UNIFORM-SURFACES"
    with pytest.raises(RuntimeFailure) as ei:
        p.evaluate_raw([np.zeros(256, np.uint8)] * 2, [np.zeros(256, np.uint8)] * 2)
    assert ei.value.constraint == "ANE-MIN-SURFACE"
    with pytest.raises(RuntimeFailure) as ei:
        p.evaluate_raw([np.zeros(49152, np.uint8)], outs)
    assert "status=0x1d" in ei.value.message
    # oversized uniform surfaces are fine: the tensor is read packed from byte 0
    big = [np.zeros(1 << 17, np.uint8), np.zeros(1 << 17, np.uint8)]
    big[0][:256].view(np.float16)[:] = 5
    big[1][:256].view(np.float16)[:] = 7
    outs = [np.zeros(1 << 17, np.uint8), np.zeros(1 << 17, np.uint8)]
    p.evaluate_raw(big, outs)
    assert np.all(outs[0][:256].view(np.float16) == 12) and np.all(outs[1][:256].view(np.float16) == 2)
    p.close()


@pytest.mark.constraint("ANE-MIN-SURFACE", "ANE-SURFACE-ALIGN")
def test_surface_alignment_and_minimum_from_limits(rt):
    p = rt.compile(two_io_program(), limits=mk.limits(min_surface_bytes=1000, surface_alignment=128))
    assert p._native.input_surface_bytes == 1024
    p.close()


def test_input_errors_name_the_input(rt):
    p = rt.compile(two_io_program())
    with pytest.raises(RuntimeFailure, match=r"input 'a' has shape \[8, 16\], the program expects \[1, 8, 1, 16\]"):
        p(z=np.zeros(S), a=np.zeros((8, 16)))
    with pytest.raises(RuntimeFailure, match="missing input 'z'"):
        p(a=np.zeros(S))
    with pytest.raises(RuntimeFailure, match="no input 'q'") as ei:
        p(a=np.zeros(S), z=np.zeros(S), q=1)
    assert ei.value.hint is None or "did you mean" in ei.value.hint
    p.close()
    with pytest.raises(RuntimeFailure, match="closed"):
        p(a=np.zeros(S), z=np.zeros(S))


def test_any_float_array_is_converted(rt):
    p = rt.compile(two_io_program())
    z = np.arange(128, dtype=np.float64).reshape(S) / 7
    a = np.ones(S, np.float32)
    out = p(z=z, a=a)
    np.testing.assert_array_equal(out["y"], (z.astype(np.float16).astype(np.float32) - 1).astype(np.float16))
    p.close()


def test_cache_hit_costs_no_compile_and_shares_the_directory(fresh_rt):
    rt = fresh_rt
    w, blobs = wblob(1)
    p1 = rt.compile(weighted_program(), blobs)
    p2 = rt.compile(weighted_program(), blobs)
    st = rt.stats
    assert st["compiles"] == 1 and st["cache_hits"] == 1 and st["compile_budget_left"] == 118
    assert p1.dir == p2.dir and st["dirs_live"] == 1
    assert p2.stats["cache_hits"] == 1 and p2.stats["compiles"] == 0
    # same MIL, other weight bytes: no compile, its own directory, its own results
    w3, blobs3 = wblob(2)
    p3 = rt.compile(weighted_program(), blobs3)
    assert rt.stats["compiles"] == 1 and p3.dir != p1.dir
    x = np.random.default_rng(0).standard_normal(S).astype(np.float16)
    y1, y3 = p1(x=x)["y"], p3(x=x)["y"]
    ref1 = np.einsum("oi,bihw->bohw", w[:, :, 0, 0].astype(np.float32), x.astype(np.float32))
    ref3 = np.einsum("oi,bihw->bohw", w3[:, :, 0, 0].astype(np.float32), x.astype(np.float32))
    assert_close(y1, ref1, "rt-core/same-mil-other-weights:y:numpy", 2, "weights 1")
    assert_close(y3, ref3, "rt-core/same-mil-other-weights:y:numpy", 2, "weights 2")
    assert mk.rms(y1.astype(np.float64) - y3) >= 0.1  # the two weight sets give other outputs


def test_shared_directory_survives_releasing_one_program(fresh_rt):
    rt = fresh_rt
    _, blobs = wblob(3)
    p1 = rt.compile(weighted_program(), blobs)
    p2 = rt.compile(weighted_program(), blobs)
    x = np.ones(S, np.float16)
    before = p2(x=x)["y"]
    d = p2.dir
    p1.close()
    assert os.path.isfile(os.path.join(d, "weights", "w.bin"))
    p2.unload()
    p2.load()  # reads the weight files again
    np.testing.assert_array_equal(p2(x=x)["y"], before)
    p2.close()
    # the cache still holds the compiled template (and its directory)
    assert rt.stats["programs_live"] == 0


def affine_program(files: str) -> tuple[str, dict]:
    """MIL + manifest of y = conv(w, x) (+ b). ``files``: "one" (w alone, one BLOBFILE with one
    tensor), "two" (w and b in two BLOBFILEs), "packed" (w and b in one BLOBFILE)."""
    at = {"w": ("w.bin", 64), "b": ("b.bin", 64)}
    if files == "packed":
        at = {"w": ("wb.bin", 64), "b": ("wb.bin", PACKED_B)}
    body = [mk.const_blob("w", "fp16", (8, 8, 1, 1), *at["w"]), mk.op("y" if files == "one" else "h", "fp16", S, "conv",
                                                                     weight="w", x="x")]
    entries = [mk.weight_entry("w", *at["w"], (8, 8, 1, 1))]
    if files != "one":
        body += [mk.const_blob("b", "fp16", (1, 8, 1, 1), *at["b"]), mk.op("y", "fp16", S, "add", x="h", y="b")]
        entries.append(mk.weight_entry("b", *at["b"], (1, 8, 1, 1)))
    return mk.program([("x", "fp16", S)], body, ["y"]), {"func": files, "weights": entries}


PACKED_B = 64 + 64 + 8 * 8 * 2 + (-(64 + 64 + 8 * 8 * 2)) % 64
"""Offset of b's metadata record in the packed file (after w's record and padded payload)."""


def affine_weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": (rng.standard_normal((8, 8, 1, 1)) / np.sqrt(8)).astype(np.float16),
            "b": rng.standard_normal((1, 8, 1, 1)).astype(np.float16)}


def affine_blobs(files: str, ws: dict[str, np.ndarray]) -> dict[str, bytes]:
    if files == "packed":
        return {"@model_path/weights/wb.bin": mk.blobfile(ws["w"], ws["b"])}
    out = {"@model_path/weights/w.bin": mk.blobfile(ws["w"])}
    if files == "two":
        out["@model_path/weights/b.bin"] = mk.blobfile(ws["b"])
    return out


PROGRAM_RELOADS = {
    # case -> (weight files, sim device, reload_verified (None: the sim's own), via, the strategy it uses)
    "data-patch": ("one", "", None, "reload_weights", "data-patch"),
    "data-patch:packed": ("packed", "data=file", None, "reload_weights", "data-patch"),
    "data-patch:reload_blobs": ("one", "", None, "reload_blobs", "data-patch"),
    "recompile": ("two", "", None, "reload_weights", "recompile"),
    "recompile:unverified": ("one", "", [], "reload_weights", "recompile"),
    "recompile:reload_blobs": ("two", "", None, "reload_blobs", "recompile"),
    # the other readings of what a load reads (docs/runtime.md, "The sim's device model")
    "data-patch:load=weights": ("one", "load=weights", None, "reload_weights", "data-patch"),
    "new-object:load=memory": ("one", "load=memory", None, "reload_weights", "new-object"),
    "new-object:load=memory:reload_blobs": ("one", "load=memory", None, "reload_blobs", "new-object"),
    "recompile:load=memory-shared": ("one", "load=memory-shared", None, "reload_weights", "recompile"),
}


def reload_a_program(tmp_path, case: str) -> tuple[dict, dict]:
    """Compile the affine program of ``case`` with weight set 0, reload set 1 by the case's
    strategy and check it took effect (:func:`milkit.assert_reloaded`); the program's stats and
    the runtime's stats, each (before, after) the reload."""
    files, device, verified, via, strategy = PROGRAM_RELOADS[case]
    mil, manifest = affine_program(files)
    w0, w1 = affine_weights(0), affine_weights(1)
    x = np.random.default_rng(7).standard_normal(S).astype(np.float16)
    with Runtime("sim", temp_root=tmp_path / "rt", sim_device=device, reload_verified=verified) as rt:
        p = rt.compile(mil, affine_blobs(files, w0), manifest=manifest)
        assert p.reload_info["strategy"] == strategy
        y0 = p(x=x)["y"]
        mk.assert_order_one(y0, f"{case}: output")
        before = (p.stats, rt.stats)
        if via == "reload_blobs":
            p.reload_blobs(affine_blobs(files, w1))
        else:
            p.reload_weights({"w": w1["w"]} if files == "one" else dict(w1))
        after = (p.stats, rt.stats)
        y1 = p(x=x)["y"]
    with Runtime("sim", temp_root=tmp_path / "fresh", sim_device=device, reload_verified=verified) as rt:
        y_fresh = rt.compile(mil, affine_blobs(files, w1), manifest=manifest)(x=x)["y"]
    mk.assert_reloaded(y0, y1, y_fresh, f"reload by {case}")
    return before, after


@pytest.mark.parametrize("case", list(PROGRAM_RELOADS))
def test_a_reload_by_each_strategy_equals_a_fresh_compile(tmp_path, case):
    (p0, rt0), (p1, rt1) = reload_a_program(tmp_path, case)
    strategy = PROGRAM_RELOADS[case][4]
    counter = f"reloads_{strategy.replace('-', '_')}"
    assert p1["reloads"] - p0["reloads"] == 1 and rt1[counter] - rt0[counter] == 1
    assert rt1["compiles"] - rt0["compiles"] == (strategy == "recompile")


def _noop(*_args, **_kw):
    return None


def native_reload_of(case: str) -> str:
    """The NativeProgram method that applies ``case``'s reload: a data patch or a new object by
    key streams the arrays (reload_arrays); whole files, and every recompile, go through reload."""
    _, _, _, via, strategy = PROGRAM_RELOADS[case]
    return "reload_arrays" if via == "reload_weights" and strategy in ("data-patch", "new-object") else "reload"


@pytest.mark.parametrize("case", list(PROGRAM_RELOADS))
def test_program_reload_tests_fail_when_the_reload_does_nothing(tmp_path, monkeypatch, case):
    """The reload test above can fail: with the native call that applies the case's reload
    replaced by a no-op, its check raises."""
    monkeypatch.setattr(native.NativeProgram, native_reload_of(case), _noop)
    with pytest.raises(AssertionError, match="|".join(mk.RELOAD_FAILURES)):
        reload_a_program(tmp_path, case)


@pytest.mark.constraint("ANE-COMPILE-BUDGET")
def test_compile_budget_exhaustion_and_cache(tmp_path):
    with Runtime("sim", compile_budget=2, temp_root=tmp_path) as rt:
        progs = [rt.compile(mk.program([("x", "fp16", S)], [mk.op("y", "fp16", S, op, x="x")], ["y"]))
                 for op in ("relu", "exp")]
        with pytest.raises(RuntimeFailure) as ei:
            rt.compile(mk.program([("x", "fp16", S)], [mk.op("y", "fp16", S, "tanh", x="x")], ["y"]))
        e = ei.value
        assert e.code == native.lib.ANEC_EBUDGET and e.constraint == "ANE-COMPILE-BUDGET"
        assert "2 of 2" in e.message and "delta reload" in e.message and "cache" in e.message
        # repeated loads of the same programs are served by the cache, even after freeing them
        for p in progs:
            p.close()
        for _ in range(5):
            rt.compile(mk.program([("x", "fp16", S)], [mk.op("y", "fp16", S, "relu", x="x")], ["y"])).close()
        st = rt.stats
        assert st["compiles"] == 2 and st["cache_hits"] == 5 and st["compile_budget_left"] == 0


def test_stats_count_every_phase(fresh_rt):
    rt = fresh_rt
    p = rt.compile(two_io_program())
    p(z=np.zeros(S), a=np.zeros(S))
    p.unload()
    p.load()
    p(z=np.zeros(S), a=np.zeros(S))
    st = rt.stats
    assert (st["loads"], st["unloads"], st["evaluations"]) == (2, 1, 2)
    for k in ("ns_compile", "ns_load", "ns_evaluate"):
        assert st[k] > 0
    assert p.stats["evaluations"] == 2


def test_unloaded_program_cannot_run(fresh_rt):
    p = fresh_rt.compile(two_io_program(), load=False)
    with pytest.raises(RuntimeFailure, match="not loaded") as ei:
        p(z=np.zeros(S), a=np.zeros(S))
    assert ei.value.code == native.lib.ANEC_ESTATE


def test_close_removes_program_directories(tmp_path):
    rt = Runtime("sim", temp_root=tmp_path / "root")
    _, blobs = wblob(4)
    p = rt.compile(weighted_program(), blobs)
    d = p.dir
    assert os.path.isdir(d) and d.startswith(str(tmp_path / "root"))
    assert os.path.isfile(os.path.join(d, "model.mil"))
    rt.close()
    assert not os.path.exists(d) and p.closed
    rt2 = Runtime("sim")
    d2 = rt2.compile(weighted_program(), blobs).dir
    root = os.path.dirname(d2)
    rt2.close()
    assert not os.path.exists(root)


def test_backends():
    ok, why = backend_available("sim")
    assert ok
    with Runtime("auto") as rt:
        assert rt.backend in ("sim", "ane")
    ane_ok, why = backend_available("ane")
    if not ane_ok:
        assert why
        with pytest.raises(RuntimeFailure) as ei:
            Runtime("ane")
        assert ei.value.code == native.lib.ANEC_EUNAVAIL
    with pytest.raises(RuntimeFailure, match="unknown backend"):
        Runtime("gpu")


def test_fp16_conversion_helpers_match_numpy():
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    h = bits.view(np.float16)
    f = native.f16_to_f32(h)
    finite = np.isfinite(h)
    np.testing.assert_array_equal(f[finite], h[finite].astype(np.float32))
    assert np.all(np.isnan(f[~finite & np.isnan(h)]))
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(10000).astype(np.float32) * s for s in (1e-6, 1e-3, 1, 100, 7e4)])
    x = np.concatenate([x, np.float32([65504, 65519.99, 65520, -65520, 2 ** -25, 2 ** -24 * 1.5, np.inf, -np.inf, 0, -0.0])])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(native.f32_to_f16(x).view(np.uint16), x.astype(np.float16).view(np.uint16))


def test_dropped_programs_are_freed(fresh_rt):
    import gc

    for _ in range(3):
        fresh_rt.compile(two_io_program())
    gc.collect()
    assert fresh_rt.stats["programs_live"] == 0


BUDGET_SCRIPT = """
import sys
from anec.diagnostics import RuntimeFailure
from anec.runtime import native
from tests.runtime import milkit as mk
S = (1, 8, 1, 16)
def distinct(i):
    body = [mk.const_scalar("k", "fp16", 1.0 + i / 256), mk.op("y", "fp16", S, "mul", x="x", y="k")]
    return mk.program([("x", "fp16", S)], body, ["y"])
budget = int(sys.argv[1])
rt = native.NativeRuntime("sim", temp_root=sys.argv[2], process_budget=budget)
made = 0
try:
    for i in range(budget + 5 if budget else 130):
        rt.compile(distinct(i).encode(), {}, None).close()
        made += 1
except RuntimeFailure as e:
    print(made, e.constraint, rt.stats()["compile_budget_left"])
else:
    print(made, "none", rt.stats()["compile_budget_left"])
rt.shutdown()
rt.release()
"""


@pytest.mark.parametrize("budget,expect", [(5, "5 ANE-COMPILE-BUDGET 0"), (0, "130 none")])
@pytest.mark.constraint("ANE-COMPILE-BUDGET")
def test_the_process_budget_is_the_targets_field(tmp_path, budget, expect):
    """The budget is a target's field given to the runtime, not a number in the C core: a
    device that allows 5 compiles refuses the sixth; an unknown budget (0) refuses none."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", BUDGET_SCRIPT, str(budget), str(tmp_path)], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(expect)


@pytest.mark.constraint("ANE-COMPILE-BUDGET")
def test_the_compile_budget_belongs_to_the_process(tmp_path):
    """~119 compiles per process, as on the device: three runtimes share one budget."""
    def distinct(i):  # a different MIL text each time: no cache hit
        body = [mk.const_scalar("k", "fp16", 1.0 + i / 256), mk.op("y", "fp16", S, "mul", x="x", y="k")]
        return mk.program([("x", "fp16", S)], body, ["y"])

    runtimes = [Runtime("sim", temp_root=tmp_path / f"r{i}") for i in range(3)]
    try:
        made = 0
        with pytest.raises(RuntimeFailure) as ei:
            for i in range(200):
                runtimes[i % 3].compile(distinct(i), load=False).close()
                made += 1
        assert made == 119 and ei.value.constraint == "ANE-COMPILE-BUDGET"
        assert "this process already made 119 compiles" in ei.value.message
        assert native.process_compiles("sim") == 119
        assert all(r.stats["compile_budget_left"] == 0 for r in runtimes)
        assert sum(r.stats["compiles"] for r in runtimes) == 119
        # served from the cache: still possible
        runtimes[0].compile(distinct(0), load=False).close()
    finally:
        for r in runtimes:
            r.close()
