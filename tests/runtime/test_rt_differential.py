"""Differential tests: the reference interpreter vs the sim executing the emitted MIL.

Tolerances (stated once, used everywhere): for every output,
``max|sim - ref| <= TOL * max(1, max|ref|)`` with TOL = 5e-3 against the
interpreter in fp16 mode (both round every op to fp16; they differ only in
summation order and libm) and against the fp32 mode (the sim stores fp16).
Generated graphs chain up to 8 ops, so they get 3e-2.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

compiler = pytest.importorskip("anec.compiler")
from anec.ir.interp import interpret, random_inputs  # noqa: E402
from anec.ir.parser import parse, parse_file  # noqa: E402
from anec.runtime import Runtime  # noqa: E402
from anec.weights import resolve_weights  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.ir")))
TOL = 5e-3


def check_close(got: np.ndarray, ref: np.ndarray, tol: float, what: str) -> None:
    assert got.shape == ref.shape, what
    g, r = got.astype(np.float64), ref.astype(np.float64)
    assert np.all(np.isfinite(g)) == np.all(np.isfinite(r)), what
    err = np.max(np.abs(g - r))
    assert err <= tol * max(1.0, float(np.max(np.abs(r)))), f"{what}: max abs error {err:.3g}"


def compile_run(rt, module, store, func, inputs):
    res = compiler.compile_module(module, store)
    prog = rt.load(res.artifacts[func])
    try:
        return prog(**inputs), res.artifacts[func]
    finally:
        prog.close()


@pytest.mark.parametrize("path", EXAMPLES, ids=[os.path.basename(p) for p in EXAMPLES])
def test_examples_match_the_interpreter(rt, path):
    module = parse_file(path)
    store = resolve_weights(module, None, 0)
    res = compiler.compile_module(module, store)
    for name, art in res.artifacts.items():
        graph = module.funcs[name]
        x = random_inputs(graph, 1)
        prog = rt.load(art)
        got = prog(**x)
        prog.close()
        assert list(got) == [v.name for v in graph.outputs]
        for mode in ("fp16", "fp32"):
            ref = interpret(graph, x, store, mode)
            for k in ref:
                assert got[k].dtype == graph.outputs[[v.name for v in graph.outputs].index(k)].type.dtype.np
                check_close(got[k], ref[k], TOL, f"{os.path.basename(path)}:{name}:{k} vs interp {mode}")


def test_reload_on_emitted_artifacts_equals_a_fresh_compile(tmp_path):
    """multi_func: a matmul legalized to a conv stores its weight transposed (perm)."""
    module = parse_file(os.path.join(ROOT, "examples", "multi_func.ir"))
    w0 = resolve_weights(module, None, 0)
    w1 = resolve_weights(module, None, 1)
    res0 = compiler.compile_module(module, w0, out_dir=tmp_path / "a0")
    res1 = compiler.compile_module(module, w1)
    expected_compiles = 0
    with Runtime("sim", temp_root=tmp_path / "rt") as rt:
        for name in res0.artifacts:
            graph = module.funcs[name]
            x = random_inputs(graph, 2)
            prog = rt.load(tmp_path / "a0", func=name)
            expected_compiles += 2 if prog.reload_info["strategy"] == "recompile" else 1
            before = prog(**x)
            keys = {w["key"] for w in prog.manifest["weights"]}
            prog.reload_weights({k: w1[k] for k in keys})
            after = prog(**x)
            fresh = rt.load(res1.artifacts[name])
            expect = fresh(**x)
            for k in after:
                np.testing.assert_array_equal(after[k], expect[k])
                assert not np.array_equal(after[k], before[k])
        st = rt.stats
        assert st["compiles"] == expected_compiles and st["reloads"] == 2
        # the new artifacts were a cache hit: same MIL, same weight paths, the weights the
        # reloaded programs now compute with
        assert st["cache_hits"] == 2


# ---- generated graphs ------------------------------------------------------------

STEP = st.sampled_from(["relu", "tanh", "sigmoid", "neg", "gelu", "scalar_add", "scalar_mul", "conv", "norm",
                        "softmax", "transpose", "residual"])


def build_ir(c: int, s: int, steps: list[str], widths: list[int]) -> str:
    lines = [f"func g(%x: fp16[1, {c}, 1, {s}]) {{"]
    cur, shape, n = "%x", [1, c, 1, s], 0
    prev: dict[tuple, str] = {tuple(shape): cur}

    def new(expr: str, out_shape: list[int]) -> None:
        nonlocal cur, n, shape
        n += 1
        lines.append(f"  %v{n} = {expr}")
        cur, shape = f"%v{n}", out_shape
        prev.setdefault(tuple(shape), cur)

    for i, step in enumerate(steps):
        if step in ("relu", "tanh", "sigmoid", "neg", "gelu"):
            new(f"{step}({cur})", shape)
        elif step.startswith("scalar"):
            lines.append(f"  %c{i} = const(value={0.5 + i / 8}) : fp16[]")
            new(f"{step[7:]}({cur}, %c{i})", shape)
        elif step == "conv":
            cout = widths[i % len(widths)]
            lines.append(f'  %w{i} = const(weight="w{i}") : fp16[{cout}, {shape[1]}, 1, 1]')
            new(f"conv1x1({cur}, %w{i})", [1, cout, 1, shape[3]])
        elif step == "norm":
            sq = f"%sq{i}"
            lines += [f"  {sq} = mul({cur}, {cur})", f"  %m{i} = reduce_mean({sq}, axes=[1], keep_dims=true)",
                      f"  %e{i} = const(value=0.001) : fp16[]", f"  %me{i} = add(%m{i}, %e{i})",
                      f"  %r{i} = rsqrt(%me{i})"]
            new(f"mul({cur}, %r{i})", shape)
        elif step == "softmax":
            new(f"softmax({cur}, axis=1)", shape)
        elif step == "transpose":
            new(f"transpose({cur}, perm=[0, 3, 2, 1])", [1, shape[3], 1, shape[1]])
        elif step == "residual":
            other = prev.get(tuple(shape), cur)
            new(f"add({cur}, {other})", shape)
    lines.append(f"  return {cur}")
    lines.append("}")
    return "\n".join(lines) + "\n"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(c=st.integers(2, 24), s=st.integers(1, 12), steps=st.lists(STEP, min_size=1, max_size=8),
       widths=st.lists(st.integers(2, 32), min_size=1, max_size=3), seed=st.integers(0, 1000))
def test_generated_graphs_match_the_interpreter(rt, c, s, steps, widths, seed):
    text = build_ir(c, s, steps, widths)
    module = parse(text, "gen.ir")
    store = resolve_weights(module, None, seed)
    graph = module.funcs["g"]
    x = random_inputs(graph, seed)
    got, _ = compile_run(rt, module, store, "g", x)
    ref = interpret(graph, x, store, "fp16")
    for k in ref:
        check_close(got[k], ref[k], 3e-2, f"generated graph\n{text}")


@pytest.mark.parametrize("target", ["m1", "m5"])
def test_other_targets_dialects_and_host_casts(rt, target):
    """m1: the ios16 dialect and fp16-only I/O (the host casts fp32 in and out); m5: 128-byte surfaces."""
    module = parse_file(os.path.join(ROOT, "examples", "gpt2_mlp.ir"))
    store = resolve_weights(module, None, 0)
    art = compiler.compile_module(module, store, target=target, host_casts=True).artifacts["mlp"]
    graph = module.funcs["mlp"]
    x = random_inputs(graph, 3)
    prog = rt.load(art)
    assert prog._native.input_surface_bytes == art.manifest["input_alloc_bytes"]
    got = prog(**x)
    prog.close()
    assert got["y"].dtype == np.float32
    check_close(got["y"], interpret(graph, x, store, "fp16")["y"], TOL, f"gpt2_mlp on {target}")


def test_chunked_output_and_sliced_weight_reload(rt):
    """A conv above the channel limit is chunked: pieces reassembled, a reload fills every slice."""
    text = ('func big(%x: fp16[1, 8, 1, 4]) {\n  %w = const(weight="big.weight") : fp16[16400, 8, 1, 1]\n'
            '  %y = conv1x1(%x, %w)\n  return %y\n}\n')
    module = parse(text, "big.ir")
    s0, s1 = resolve_weights(module, None, 0), resolve_weights(module, None, 1)
    art = compiler.compile_module(module, s0).artifacts["big"]
    assert art.manifest["logical_outputs"][0]["axis"] == 1
    assert sorted(w["slice"][1] for w in art.manifest["weights"]) == [0, 8200]
    graph = module.funcs["big"]
    x = random_inputs(graph, 1)
    prog = rt.load(art)
    got = prog(**x)["y"]
    assert got.shape == (1, 16400, 1, 4)
    check_close(got, interpret(graph, x, s0, "fp16")["y"], TOL, "chunked conv")
    compiles = prog.stats["compiles"]
    assert prog.reload_info["strategy"] == "recompile"  # two BLOBFILEs: the compiled data is opaque
    prog.reload_weights({"big.weight": s1["big.weight"]})
    check_close(prog(**x)["y"], interpret(graph, x, s1, "fp16")["y"], TOL, "chunked conv after reload")
    assert prog.stats["blobs_patched"] == 2 and prog.stats["compiles"] == compiles + 1
    prog.close()
