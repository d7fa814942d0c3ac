"""The emitted MIL uses only constructs the public on-device references feed the ANE.

maderix/ANE and Orion (the projects that run on the device) write decimal float
literals, single-result slices, rank-4 ``[1, C, 1, S]`` program I/O and
``program(1.3)``/``<ios18>``. :func:`assert_proven` checks one program text;
the tests apply it to every example on every target (test_mil_conformance applies
it to generated graphs), and run funcs whose I/O has another rank on the sim with
their logical shapes.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.compiler import compile_module
from anec.diagnostics import ArtifactError
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.mil.artifact import Artifact
from anec.runtime import Runtime, backend_available
from anec.targets import TARGETS
from anec.ir.weight_binding import resolve_weights

from .milcheck import assert_proven, check_mil
from .test_mil_golden import EXAMPLES, compiled

@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.constraint("ANE-SPLIT")
def test_examples_and_graphs_use_only_proven_constructs(target):
    """Every example on every target; the examples hold a split (gpt2_attention, multi_func),
    a rank-3 output (multi_func.classify) and fp16 literals (the range-safe LayerNorm's sqrt(eps), GELU constants).
    Generated graphs: test_mil_conformance's hypothesis test applies assert_proven too."""
    texts = [a.mil_text for e in EXAMPLES for a in compiled(e, None, target, True).artifacts.values()]
    assert len(texts) == 5
    for text in texts:
        assert_proven(text)
    joined = "\n".join(texts)
    assert "slice_by_index(" in joined and "fp16(0.003164)" in joined and "fp16(0.001302)" in joined


# ---- rank-4 I/O: other ranks compile, run on the sim, match the interpreter ---------------

RANKS = """
func r0(%s: fp16[], %v: fp16[1, 4, 1, 8]) {
  %y = mul(%v, %s) : fp16[1, 4, 1, 8]
  %t = reduce_sum(%y, axes=[0, 1, 2, 3]) : fp16[]
  return %y, %t
}

func r1(%x: fp16[24]) {
  %e = exp(%x) : fp16[24]
  %h = reshape(%e, shape=[2, 12]) : fp16[2, 12]
  return %e, %h
}

func r2(%x: fp32[6, 16], %m: fp16[1, 1, 6, 6]) {
  %xh = cast(%x, dtype=fp16) : fp16[6, 16]
  %w = const(weight="w") : fp16[16, 8]
  %p = matmul(%xh, %w) : fp16[6, 8]
  %a, %b = split(%p, axis=1, sizes=[3, 5]) : fp16[6, 3], fp16[6, 5]
  %s = softmax(%b, axis=0) : fp16[6, 5]
  %y = cast(%s, dtype=fp32) : fp32[6, 5]
  %mm = relu(%m) : fp16[1, 1, 6, 6]
  return %y, %a, %mm
}

func r3(%x: fp16[2, 3, 8], %z: fp16[2, 3, 8]) {
  %s = add(%x, %z) : fp16[2, 3, 8]
  %t = transpose(%s, perm=[1, 0, 2]) : fp16[3, 2, 8]
  %u = tanh(%t) : fp16[3, 2, 8]
  return %u
}

func r5(%x: fp16[1, 2, 3, 2, 4]) {
  %g = sigmoid(%x) : fp16[1, 2, 3, 2, 4]
  %r = reduce_max(%g, axes=[2], keep_dims=false) : fp16[1, 2, 2, 4]
  return %g, %r
}
"""


def _sim():
    ok, why = backend_available("sim")
    if not ok:
        pytest.skip(why)
    return Runtime("sim")


@pytest.mark.parametrize("target", ["m4", "m1"])
@pytest.mark.constraint("ANE-IO-RANK4")
def test_rank_n_funcs_run_on_the_sim_with_logical_shapes(target, tmp_path):
    module = parse(RANKS, "ranks.ir")
    store = resolve_weights(module, random_seed=0)
    result = compile_module(module, store, target=target, host_casts=True, out_dir=tmp_path)
    rng = np.random.default_rng(1)
    arts = []
    with _sim() as rt:
        for name, graph in module.funcs.items():
            art = Artifact.load(tmp_path / name)
            arts.append(art)
            m = art.manifest.document
            assert_proven(art.mil_text)
            # the manifest: device shapes in inputs/outputs, the IR's shapes in logical_*
            assert [e["name"] for e in m["logical_inputs"]] == [v.name for v in graph.inputs]
            assert [e["shape"] for e in m["logical_inputs"]] == [list(v.type.shape) for v in graph.inputs]
            assert [e["name"] for e in m["logical_outputs"]] == graph.output_names()
            assert [e["shape"] for e in m["logical_outputs"]] == [list(v.type.shape) for v in graph.outputs]
            assert [e["name"] for e in m["inputs"]] == [v.name for v in graph.inputs]  # names never change
            assert all(len(e["shape"]) == 4 for e in m["inputs"] + m["outputs"])
            # program.ir is the program the MIL encodes: rank-4 I/O too
            ir = art.program_module().func(name)
            assert [list(v.type.shape) for v in ir.inputs] == [e["shape"] for e in m["inputs"]]
            # the runtime takes and returns the logical shapes
            feeds = {v.name: rng.standard_normal(v.type.shape).astype(np.float32) for v in graph.inputs}
            prog = rt.load(tmp_path / name)
            assert [i["logical_shape"] for i in sorted(prog.inputs, key=lambda i: i["decl_index"])] == \
                [list(v.type.shape) for v in graph.inputs]
            got = prog(**feeds)
            want = interpret(graph, feeds, store, mode="fp16")
            assert list(got) == list(want)
            for key, ref in want.items():
                assert got[key].shape == ref.shape, (name, key)
                ref = ref.astype(np.float64)
                err = np.abs(got[key].astype(np.float64) - ref).max()
                assert err <= 5e-3 * max(1.0, np.abs(ref).max()), (name, key, err)
            with pytest.raises(Exception, match="expects"):  # the device shape is not the interface
                prog(**{k: v.reshape(-1) if v.ndim != 1 else v.reshape(1, -1) for k, v in feeds.items()})
    for art in arts:  # last: it needs coremltools
        check_mil(art.mil_text, art.blobs)
    rewrites = [r for r in result.rewrites if r["constraint"] == "ANE-IO-RANK4"]
    assert {r["func"] for r in rewrites} == {"r0", "r1", "r2", "r3", "r5"}


def test_anec_run_and_compare_interp_use_logical_shapes(tmp_path):
    src = tmp_path / "ranks.ir"
    src.write_text(RANKS)
    runner = CliRunner()
    res = runner.invoke(main, ["compile", str(src), "--random-weights", "0", "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    for args in (["run", str(tmp_path / "out"), "--func", "r3"], ["run", str(src), "--func", "r3",
                                                                   "--random-weights", "0"]):
        res = runner.invoke(main, [*args, "--random-inputs", "0", "--backend", "sim", "--compare-interp",
                                   "-o", str(tmp_path / "y.npz")])
        assert res.exit_code == 0, res.output
        assert "u  [3, 2, 8] float16" in res.output
        errs = [float(x) for x in re.findall(r"fp16  u  max_abs=(\S+)", res.output)]
        assert errs and errs[0] <= 5e-3, res.output
        assert np.load(tmp_path / "y.npz")["u"].shape == (3, 2, 8)


def test_manifest_without_logical_inputs_still_loads(tmp_path):
    """Artifacts written before logical_inputs existed (all I/O rank 4) load and run."""
    module = parse(RANKS.split("func r1")[0], "r0.ir")
    compile_module(module, random_seed=0, out_dir=tmp_path)
    path = tmp_path / "r0" / "manifest.json"
    manifest = json.loads(path.read_text())
    assert manifest["logical_inputs"][0] == {"name": "s", "dtype": "fp16", "shape": []}
    del manifest["logical_inputs"]
    for lo in manifest["logical_outputs"]:
        lo["shape"] = next(o["shape"] for o in manifest["outputs"] if o["name"] == lo["name"])
    path.write_text(json.dumps(manifest))
    with _sim() as rt:
        prog = rt.load(tmp_path / "r0")
        s, v = np.ones((1, 1, 1, 1), np.float16), np.full((1, 4, 1, 8), 2, np.float16)
        out = prog(s=s, v=v)
        assert out["t"].shape == (1, 1, 1, 1) and float(out["t"].reshape(())) == 64.0


def test_inconsistent_logical_shape_is_a_clear_error(tmp_path):
    module = parse("func f(%x: fp16[24]) {\n  %e = exp(%x) : fp16[24]\n  return %e\n}\n", "f.ir")
    compile_module(module, random_seed=0, out_dir=tmp_path)
    path = tmp_path / "f" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["logical_inputs"][0]["shape"] = [5]
    path.write_text(json.dumps(manifest))
    with _sim() as rt:  # the manifest is checked when it is loaded, before any call
        with pytest.raises(ArtifactError, match=r"field 'logical_inputs\[0\].shape': expected a shape of 24 elements "
                                                r"\(the input's\), got \[5\]"):
            rt.load(tmp_path / "f")
