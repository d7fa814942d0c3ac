"""Pipelines on the sim: a func cut into stages runs as one program, computes exactly what the
uncut func computes on the same device, reloads by key across stages all-or-nothing, and is
safe to call from several threads.

Reference: the same func compiled as one program (a target with a budget it fits) run on the
same sim. Both store every value in fp16 and run the same kernels, so outputs are compared
bit for bit; the interpreter (fp16 mode) is the independent reference, within the
differential tolerance of test_rt_differential.py (5e-3 relative to max(1, max|ref|)).
"""

from __future__ import annotations

import json
import os
import shutil
import threading

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings

from anec.cli import main
from anec.compiler import compile_module
from anec.diagnostics import ArtifactError, WeightError
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.mil.pipeline import PipelineArtifact, load_any
from anec.runtime import Runtime
from anec.runtime.pipeline import PipelineProgram
from anec.targets import get_target
from anec.weights import random_weights
from tests.passes.test_partition import dags, chain

TOL = 5e-3


def target(blobs: int):
    return get_target("m4").replace(max_blob_tensors=blobs)


def close(got, ref, tol=TOL):
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert g.shape == r.shape
    assert np.max(np.abs(g - r), initial=0.0) <= tol * max(1.0, float(np.max(np.abs(r), initial=0.0)))


def inputs_for(graph, seed=3):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in graph.inputs}


def both(m, store, blobs, **kw):
    """(pipeline artifact at ``blobs`` per program, the one-program artifact) of the only func."""
    name = next(iter(m.funcs))
    piped = compile_module(m, weights=store, target=target(blobs), **kw).artifacts[name]
    whole = compile_module(m, weights=store, target=target(64), **kw).artifacts[name]
    return piped, whole


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=dags())
def test_random_pipelines_compute_what_one_program_computes(tmp_path_factory, text):
    m = parse(text, "g.ir")
    store = random_weights(m, 0)
    piped, whole = both(m, store, 2)
    x = inputs_for(m.funcs["g"])
    ref = interpret(m.funcs["g"], x, store, mode="fp16")
    with Runtime("sim", temp_root=tmp_path_factory.mktemp("rt")) as rt:
        a = rt.load(piped)(**x)
        b = rt.load(whole)(**x)
    for name in ref:
        np.testing.assert_array_equal(a[name], b[name])
        close(a[name], ref[name])


def test_a_forty_layer_chain_runs_as_one_call_with_no_copies(tmp_path):
    m = parse(chain(40), "c.ir")
    store = random_weights(m, 0)
    piped, whole = both(m, store, 16)
    assert isinstance(piped, PipelineArtifact) and len(piped.stages) == 3
    x = inputs_for(m.funcs["f"])
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        assert isinstance(p, PipelineProgram) and p.input_names == ["x"]
        y = p(**x)
        np.testing.assert_array_equal(y["h39"], rt.load(whole)(**x)["h39"])
        st = p.stats
        assert st["calls"] == 1 and st["zero_copy_edges"] == 2 and st["copied_edges"] == 0
        assert [s["evaluations"] for s in st["stages"]] == [1, 1, 1]


def transformer_like(layers: int) -> str:
    """Residual blocks of identical shape: every stage of a cut at block boundaries is the same MIL."""
    lines = ["func t(%x: fp16[1, 8, 1, 16]) {"]
    prev = "%x"
    for i in range(layers):
        lines += [f'  %a{i} = const(weight="b{i}.up") : fp16[16, 8, 1, 1]',
                  f"  %u{i} = conv1x1({prev}, %a{i})",
                  f"  %g{i} = relu(%u{i})",
                  f'  %d{i} = const(weight="b{i}.down") : fp16[8, 16, 1, 1]',
                  f"  %c{i} = conv1x1(%g{i}, %d{i})",
                  f"  %r{i} = add(%c{i}, {prev})"]
        prev = f"%r{i}"
    lines.append(f"  return {prev}\n}}\n")
    return "\n".join(lines)


def test_identical_stages_share_mil_and_the_compile(tmp_path):
    m = parse(transformer_like(8), "t.ir")
    store = random_weights(m, 0)
    piped, whole = both(m, store, 4)
    entries = piped.manifest["stages"]
    assert len(entries) == 4 and [e["same_as"] for e in entries] == [None, 0, 0, 0]
    assert len({a.mil_text for a in piped.stages}) == 1
    x = inputs_for(m.funcs["t"])
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        np.testing.assert_array_equal(p(**x)["r7"], rt.load(whole)(**x)["r7"])


def test_reload_routes_each_key_to_its_stage_and_matches_a_fresh_compile(tmp_path):
    m = parse(chain(40), "c.ir")
    s0, s1 = random_weights(m, 0), random_weights(m, 1)
    piped = compile_module(m, weights=s0, target=target(16)).artifacts["f"]
    holder = {w["key"]: k for k, a in enumerate(piped.stages) for w in a.manifest["weights"]}
    x = inputs_for(m.funcs["f"])
    new = {"l3.w": s1["l3.w"], "l37.w": s1["l37.w"]}
    with Runtime("sim", temp_root=tmp_path / "rt") as rt:
        p = rt.load(piped)
        y0 = p(**x)["h39"]
        before = [s["reloads"] for s in p.stats["stages"]]
        p.reload_weights(new)
        after = [s["reloads"] for s in p.stats["stages"]]
        touched = {holder["l3.w"], holder["l37.w"]}
        assert [a - b for a, b in zip(after, before)] == [int(k in touched) for k in range(3)]
        y1 = p(**x)["h39"]
    fresh = compile_module(m, weights={**s0, **new}, target=target(16)).artifacts["f"]
    with Runtime("sim", temp_root=tmp_path / "fresh") as rt:
        np.testing.assert_array_equal(y1, rt.load(fresh)(**x)["h39"])
    assert not np.array_equal(y0, y1)


def test_a_bad_reload_changes_no_stage(tmp_path):
    m = parse(chain(40), "c.ir")
    s0, s1 = random_weights(m, 0), random_weights(m, 1)
    piped = compile_module(m, weights=s0, target=target(16)).artifacts["f"]
    x = inputs_for(m.funcs["f"])
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        y0 = p(**x)["h39"]
        with pytest.raises(WeightError, match="l39.w"):  # the last stage's key has the wrong shape
            p.reload_weights({"l0.w": s1["l0.w"], "l39.w": np.zeros((3, 3), np.float16)})
        with pytest.raises(WeightError, match="did you mean"):
            p.reload_weights({"l0.w": s1["l0.w"], "l0.weight": s1["l0.w"]})
        np.testing.assert_array_equal(p(**x)["h39"], y0)


def test_weights_as_inputs_in_a_pipeline_reload_by_surface_write(tmp_path):
    m = parse(chain(40), "c.ir")
    s0, s1 = random_weights(m, 0), random_weights(m, 1)
    piped = compile_module(m, weights=s0, target=target(16), weights_as_inputs=["all"]).artifacts["f"]
    x = inputs_for(m.funcs["f"])
    ref = interpret(m.funcs["f"], x, s1, mode="fp16")["h39"]
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        assert p.input_names == ["x"]
        before = rt.stats
        p.reload_weights(dict(s1))
        st = rt.stats
        assert st["compiles"] == before["compiles"] and st["loads"] == before["loads"]
        close(p(**x)["h39"], ref)


def test_threads_calling_one_pipeline_each_get_their_own_answer(tmp_path):
    m = parse(chain(40), "c.ir")
    store = random_weights(m, 0)
    piped, whole = both(m, store, 16)
    xs = [inputs_for(m.funcs["f"], seed) for seed in range(6)]
    with Runtime("sim", temp_root=tmp_path) as rt:
        ref = [rt.load(whole)(**x)["h39"] for x in xs]
        p = rt.load(piped)
        bad: list[str] = []

        def worker(t: int) -> None:
            for i in range(20):
                k = (t + i) % len(xs)
                if not np.array_equal(p(**xs[k])["h39"], ref[k]):
                    bad.append(f"thread {t} call {i}")

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not bad
        assert p.stats["calls"] == 80


def test_close_closes_every_stage(tmp_path):
    m = parse(chain(40), "c.ir")
    piped = compile_module(m, weights=random_weights(m, 0), target=target(16)).artifacts["f"]
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        stages = p.stages
        p.close()
        assert p.closed and all(s.closed for s in stages)
        with pytest.raises(Exception, match="closed"):
            p(**inputs_for(m.funcs["f"]))


def test_written_pipelines_load_and_tampering_is_refused(tmp_path):
    m = parse(chain(40), "c.ir")
    piped = compile_module(m, weights=random_weights(m, 0), target=target(16),
                           out_dir=tmp_path / "out").artifacts["f"]
    d = tmp_path / "out" / "f"
    again = load_any(d)
    assert isinstance(again, PipelineArtifact) and again.mil_text == piped.mil_text
    with Runtime("sim", temp_root=tmp_path / "rt") as rt:
        x = inputs_for(m.funcs["f"])
        np.testing.assert_array_equal(rt.load(str(d))(**x)["h39"], rt.load(piped)(**x)["h39"])

    def tampered(edit):
        bad = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
        shutil.copytree(d, bad)
        man = json.loads((bad / "manifest.json").read_text())
        edit(man, bad)
        (bad / "manifest.json").write_text(json.dumps(man))
        with pytest.raises(ArtifactError) as ei:
            load_any(bad)
        return str(ei.value)

    def later_stage(man, _):
        man["stages"][0]["inputs"][0]["from"] = {"stage": 2, "output": "out0"}

    def escape(man, _):
        man["stages"][1]["dir"] = "../../etc"

    def other_mil(man, bad):
        man["stages"][1]["mil_sha256"] = "0" * 64

    def huge_surface(man, _):
        man["surface_bytes"] = 1 << 62

    def linked_stage(man, bad):  # a stage directory that is a link to another place
        shutil.move(str(bad / "stages" / "s01"), str(bad.parent / f"{bad.name}_s01"))
        os.symlink(bad.parent / f"{bad.name}_s01", bad / "stages" / "s01")

    def linked_weights(man, bad):  # a weight file of a stage that is a link
        wdir = bad / "stages" / "s02" / "weights"
        f = sorted(wdir.iterdir())[0]
        shutil.move(str(f), str(bad.parent / f"{bad.name}_w.bin"))
        os.symlink(bad.parent / f"{bad.name}_w.bin", f)

    assert "symbolic link" in tampered(linked_stage)
    assert "symbolic link" in tampered(linked_weights)
    assert "an output of an earlier stage" in tampered(later_stage)
    assert "outside the artifact directory" in tampered(escape)
    assert "not the program the pipeline manifest names" in tampered(other_mil)
    assert "surface_bytes" in tampered(huge_surface)


def test_cli_compiles_checks_and_runs_a_pipeline(tmp_path):
    src = tmp_path / "c.ir"
    src.write_text(chain(40))
    r = CliRunner()
    out = r.invoke(main, ["check", str(src), "--target", "m4"])
    assert out.exit_code == 0, out.output
    res = r.invoke(main, ["compile", str(src), "-o", str(tmp_path / "out"), "--random-weights", "0"])
    assert res.exit_code == 0, res.output
    assert os.path.isdir(tmp_path / "out" / "f" / "stages" / "s00")
    run = r.invoke(main, ["run", str(tmp_path / "out" / "f"), "--random-inputs", "1", "--compare-interp"])
    assert run.exit_code == 0, run.output
