"""Pipelines on the sim: a func cut into stages runs as one program, computes exactly what the
uncut func computes on the same device, reloads by key across stages all-or-nothing, and is
safe to call from several threads.

References: the same func compiled as one program (a target with a budget it fits) run on
the same sim: both store every value in fp16 and run the same kernels, so outputs are
compared bit for bit; and the interpreter in fp16 mode, the independent reference, through
the tolerance policy (tests/tolerances.py).

The 40-layer func is a chain of pre-activation residual blocks ``h + 0.25 * conv(relu(h))``:
every layer's value stays O(1) (asserted), so a wrong stage, a lost reload or a mix of
weights changes the output by O(1). (A plain chain of conv+relu layers with random weights
shrinks to ~1e-8 in 40 layers, where every output looks alike.)
"""

from __future__ import annotations

import json
import os
import shutil
import threading

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings

from anec.cli import main
from anec.compiler import compile_module
from anec.diagnostics import ArtifactError, WeightError
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.mil.multi_program import PipelineArtifact, load_any
from anec.runtime import Runtime, native
from anec.runtime.staged_program import PipelineProgram
from anec.targets import get_target
from anec.ir.weight_binding import random_weights
from tests.passes.test_partition import dags
from tests.runtime import milkit as mk
from tolerances import assert_close

ULPS = 2
"""Allowed error of the sim against the fp16 interpreter, in fp16 ulps (tests/tolerances.py)."""
LAYERS = 40


def residual_chain(n: int) -> str:
    """n pre-activation residual layers ``h{i} = h{i-1} + 0.25 * conv1x1(relu(h{i-1}), l{i}.w)``.

    With the random weights of :func:`anec.ir.weight_binding.random_weights` (std 1/sqrt(fan in)) each
    layer adds a zero-mean branch of about a third of the value's RMS, so every layer's
    value keeps an RMS near 1 over 40 layers; changing one layer's weights changes the
    output by ~0.3 RMS."""
    lines = ["func f(%x: fp16[1, 8, 1, 16]) {", "  %k = const(value=0.25) : fp16[]"]
    prev = "%x"
    for i in range(n):
        lines += [f"  %a{i} = relu({prev})",
                  f'  %w{i} = const(weight="l{i}.w") : fp16[8, 8, 1, 1]',
                  f"  %c{i} = conv1x1(%a{i}, %w{i})",
                  f"  %s{i} = mul(%c{i}, %k)",
                  f"  %h{i} = add({prev}, %s{i})"]
        prev = f"%h{i}"
    lines.append(f"  return {prev}\n}}\n")
    return "\n".join(lines)


OUT = f"h{LAYERS - 1}"


def target(blobs: int):
    return get_target("m4").replace(max_blob_tensors=blobs)


def inputs_for(graph, seed=3):
    rng = np.random.default_rng(seed)
    return {v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype.np) for v in graph.inputs}


def values_of(graph, x, store) -> dict[str, np.ndarray]:
    """Every value the fp16 interpreter computes, by name."""
    seen: dict[str, np.ndarray] = {}

    def observe(node, results):
        for r, a in zip(node.results, results):
            seen[r.name] = np.asarray(a)

    interpret(graph, x, store, mode="fp16", observe=observe)
    return seen


def stage_outputs(p: PipelineProgram, feeds) -> dict[str, np.ndarray]:
    """Each stage program run on its own, fed as the manifest wires the stages: {value name: output}."""
    by_port: dict[tuple[int, str], np.ndarray] = {}
    named: dict[str, np.ndarray] = {}
    for k, (entry, stage) in enumerate(zip(p.manifest.document["stages"], p.stages)):
        ins = {}
        for e in entry["inputs"]:
            f = e["from"]
            ins[e["name"]] = feeds[f["input"]] if "input" in f else by_port[f["stage"], f["output"]]
        outs = stage(**ins)
        for e in entry["outputs"]:
            by_port[k, e["name"]] = named[e["value"]] = outs[e["name"]]
    return named


def both(m, store, blobs, **kw):
    """(pipeline artifact at ``blobs`` per program, the one-program artifact) of the only func."""
    name = next(iter(m.funcs))
    piped = compile_module(m, weights=store, target=target(blobs), **kw).artifacts[name]
    whole = compile_module(m, weights=store, target=target(64), **kw).artifacts[name]
    return piped, whole


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(text=dags())
def test_random_pipelines_equal_one_program_bit_for_bit_and_the_interpreter(tmp_path_factory, text):
    m = parse(text, "g.ir")
    store = random_weights(m, 0)
    x = inputs_for(m.funcs["g"])
    ref = interpret(m.funcs["g"], x, store, mode="fp16")
    assume(all(mk.rms(r) >= 0.1 for r in ref.values()))  # outputs of real values, not ~0
    piped, whole = both(m, store, 2)
    with Runtime("sim", temp_root=tmp_path_factory.mktemp("rt")) as rt:
        a = rt.load(piped)(**x)
        b = rt.load(whole)(**x)
    for name in ref:
        np.testing.assert_array_equal(a[name], b[name])
        assert_close(a[name], ref[name], "pipeline/random-dags:interp-fp16", ULPS, name)


def test_the_residual_chain_keeps_every_layer_order_one():
    """The premise of the 40-layer tests: no layer's value shrinks to ~0 or blows up, for the
    weight sets and inputs they use."""
    m = parse(residual_chain(LAYERS), "c.ir")
    for seed in (0, 1):
        store = random_weights(m, seed)
        for xs in range(6):  # the seeds of inputs_for the tests use
            values = values_of(m.funcs["f"], inputs_for(m.funcs["f"], xs), store)
            for i in range(LAYERS):
                mk.assert_order_one(values[f"h{i}"], f"weights {seed}, input {xs}: h{i}")


def test_a_forty_layer_chain_runs_as_one_call_with_no_copies(tmp_path):
    m = parse(residual_chain(LAYERS), "c.ir")
    store = random_weights(m, 0)
    piped, whole = both(m, store, 16)
    assert isinstance(piped, PipelineArtifact) and len(piped.stages) == 3
    x = inputs_for(m.funcs["f"])
    values = values_of(m.funcs["f"], x, store)
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        assert isinstance(p, PipelineProgram) and p.input_names == ["x"]
        y = p(**x)
        st = p.stats
        assert st["calls"] == 1 and st["zero_copy_edges"] == 2 and st["copied_edges"] == 0
        assert [s["evaluations"] for s in st["stages"]] == [1, 1, 1]
        np.testing.assert_array_equal(y[OUT], rt.load(whole)(**x)[OUT])
        mk.assert_order_one(y[OUT], "the pipeline's output")
        assert_close(y[OUT], values[OUT], f"pipeline/residual-chain-{LAYERS}:{OUT}:interp-fp16", ULPS)
        # every stage's output, computed by the stage alone, is O(1) and the interpreter's value
        outs = stage_outputs(p, x)
        assert len(outs) == 3
        for name, a in outs.items():
            mk.assert_order_one(a, f"stage output {name}")
            assert_close(a, values[name], f"pipeline/residual-chain-{LAYERS}:stage-outputs:interp-fp16", ULPS, name)
        np.testing.assert_array_equal(outs[OUT], y[OUT])


def transformer_like(layers: int) -> str:
    """Residual blocks of identical shape, ``r + down(relu(up(r)))``: every stage of a cut at block
    boundaries is the same MIL."""
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
    # down projections at half the random scale: the residual stream stays O(1) over 8 blocks
    store = {k: v / 2 if k.endswith(".down") else v for k, v in random_weights(m, 0).items()}
    piped, whole = both(m, store, 4)
    entries = piped.manifest.document["stages"]
    assert len(entries) == 4 and [e["same_as"] for e in entries] == [None, 0, 0, 0]
    assert len({a.mil_text for a in piped.stages}) == 1
    x = inputs_for(m.funcs["t"])
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        y = p(**x)["r7"]
        np.testing.assert_array_equal(y, rt.load(whole)(**x)["r7"])
        # the stages share MIL, not weights: each computes with its own
        for name, a in stage_outputs(p, x).items():
            mk.assert_order_one(a, f"stage output {name}")
    assert_close(y, interpret(m.funcs["t"], x, store, mode="fp16")["r7"], "pipeline/transformer-like-8:r7:interp-fp16",
                 ULPS)


RELOADED = ("l3.w", "l37.w")
"""Reloaded keys: one in the first stage, one in the last."""
PIPELINE_RELOADS = {
    # strategy -> (compile options, sim device, the NativePipeline methods that apply the reload)
    "recompile": ({}, "", ["reload"]),
    "data-patch": ({"pack_weights": True}, "data=file", ["reload"]),  # one packed BLOBFILE per stage: its data
    "inputs": ({"weights_as_inputs": list(RELOADED)}, "", ["set_inputs"]),  # the reloaded keys are inputs
    "inputs+recompile": ({"weights_as_inputs": ["l3.w"]}, "", ["set_inputs", "reload"]),  # l37.w is a BLOBFILE's
}


def reload_a_pipeline(tmp_path, strategy: str) -> dict:
    """Load the 40-layer chain compiled for ``strategy``, reload two keys, and check the reload took
    effect (:func:`milkit.assert_reloaded`: equal to a fresh compile of the new weights bit for
    bit, changed by O(1)). What the test checks besides: {"stages": (reloads per stage before,
    after), "runtime": (runtime stats before, after), "holder": key -> stage, "pipeline": p}."""
    opts, device, _ = PIPELINE_RELOADS[strategy]
    m = parse(residual_chain(LAYERS), "c.ir")
    s0, s1 = random_weights(m, 0), random_weights(m, 1)
    new = {k: s1[k] for k in RELOADED}
    piped = compile_module(m, weights=s0, target=target(16), **opts).artifacts["f"]
    assert isinstance(piped, PipelineArtifact) and len(piped.stages) == 3
    holder = {w["key"]: k for k, a in enumerate(piped.stages) for w in a.manifest.document["weights"]}
    x = inputs_for(m.funcs["f"])
    with Runtime("sim", temp_root=tmp_path / "rt", sim_device=device) as rt:
        p = rt.load(piped)
        assert p.input_names == ["x"]  # weights compiled as inputs are filled by the runtime
        if strategy in ("recompile", "data-patch"):
            assert p.reload_info["strategy"] == strategy
        y0 = p(**x)[OUT]
        stages0, rt0 = [s["reloads"] for s in p.stats["stages"]], rt.stats
        p.reload_weights(new)
        stages1, rt1 = [s["reloads"] for s in p.stats["stages"]], rt.stats
        y1 = p(**x)[OUT]
    fresh = compile_module(m, weights={**s0, **new}, target=target(16), **opts).artifacts["f"]
    with Runtime("sim", temp_root=tmp_path / "fresh", sim_device=device) as rt:
        y_fresh = rt.load(fresh)(**x)[OUT]
    mk.assert_reloaded(y0, y1, y_fresh, f"pipeline reload by {strategy}")
    return {"stages": (stages0, stages1), "runtime": (rt0, rt1), "holder": holder, "pipeline": p}


@pytest.mark.parametrize("strategy", ["recompile", "data-patch"])
def test_reload_routes_each_key_to_its_stage_and_equals_a_fresh_compile(tmp_path, strategy):
    got = reload_a_pipeline(tmp_path, strategy)
    (before, after), holder = got["stages"], got["holder"]
    touched = {holder[k] for k in RELOADED}
    assert touched == {0, 2}
    assert [a - b for a, b in zip(after, before)] == [int(k in touched) for k in range(3)]
    rt0, rt1 = got["runtime"]
    assert rt1[f"reloads_{strategy.replace('-', '_')}"] - rt0[f"reloads_{strategy.replace('-', '_')}"] == 2


def test_weights_as_inputs_in_a_pipeline_reload_by_surface_write(tmp_path):
    got = reload_a_pipeline(tmp_path, "inputs")
    p = got["pipeline"]
    assert {w["key"] for w in p.manifest.document["weight_inputs"]} == set(RELOADED)
    (before, after), (rt0, rt1) = got["stages"], got["runtime"]
    assert after == before  # no stage's BLOBFILEs changed
    assert rt1["compiles"] == rt0["compiles"] and rt1["loads"] == rt0["loads"] and rt1["unloads"] == rt0["unloads"]
    assert rt1["reloads_inputs"] - rt0["reloads_inputs"] == 1  # one surface write for the call


def test_a_pipeline_reload_of_an_input_and_a_blobfile_key_applies_both(tmp_path):
    got = reload_a_pipeline(tmp_path, "inputs+recompile")
    (before, after), (rt0, rt1) = got["stages"], got["runtime"]
    assert [a - b for a, b in zip(after, before)] == [0, 0, 1]  # l37.w's stage; l3.w is an input
    assert rt1["reloads_recompile"] - rt0["reloads_recompile"] == 1
    assert rt1["reloads_inputs"] - rt0["reloads_inputs"] == 1  # one surface write for the call


def _noop_pipeline_reload(self, per_stage):
    """NativePipeline.reload doing nothing (the stages keep their weights)."""


def _noop_input_reload(set_inputs):
    """NativePipeline.set_inputs with its reloads doing nothing (the fill at load stays)."""
    def patched(self, inputs, reload):
        if not reload:
            set_inputs(self, inputs, reload)
    return patched


NOOPS = [(strategy, entry) for strategy, (_, _, entries) in PIPELINE_RELOADS.items() for entry in entries]


@pytest.mark.parametrize("strategy,entry", NOOPS, ids=[f"{s}:{e}" for s, e in NOOPS])
def test_pipeline_reload_tests_fail_when_the_reload_does_nothing(tmp_path, monkeypatch, strategy, entry):
    """The reload tests above can fail: with the native call ``entry`` that applies (part of)
    ``strategy``'s reload replaced by a no-op, their check raises (the output is stale)."""
    if entry == "set_inputs":
        monkeypatch.setattr(native.NativePipeline, "set_inputs", _noop_input_reload(native.NativePipeline.set_inputs))
    else:
        monkeypatch.setattr(native.NativePipeline, "reload", _noop_pipeline_reload)
    with pytest.raises(AssertionError, match="|".join(mk.RELOAD_FAILURES)):
        reload_a_pipeline(tmp_path, strategy)


def test_a_bad_reload_changes_no_stage(tmp_path):
    m = parse(residual_chain(LAYERS), "c.ir")
    s0, s1 = random_weights(m, 0), random_weights(m, 1)
    piped = compile_module(m, weights=s0, target=target(16)).artifacts["f"]
    x = inputs_for(m.funcs["f"])
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        y0 = p(**x)[OUT]
        with pytest.raises(WeightError, match="l39.w"):  # the last stage's key has the wrong shape
            p.reload_weights({"l0.w": s1["l0.w"], "l39.w": np.zeros((3, 3), np.float16)})
        with pytest.raises(WeightError, match="did you mean"):
            p.reload_weights({"l0.w": s1["l0.w"], "l0.weight": s1["l0.w"]})
        np.testing.assert_array_equal(p(**x)[OUT], y0)
        # the check above can notice: the first stage's part of the refused reloads alone changes the output
        p.reload_weights({"l0.w": s1["l0.w"]})
        assert mk.rms(p(**x)[OUT].astype(np.float64) - y0) >= 0.1


def test_threads_calling_one_pipeline_each_get_their_own_answer(tmp_path):
    m = parse(residual_chain(LAYERS), "c.ir")
    store = random_weights(m, 0)
    piped, whole = both(m, store, 16)
    xs = [inputs_for(m.funcs["f"], seed) for seed in range(6)]
    with Runtime("sim", temp_root=tmp_path) as rt:
        ref = [rt.load(whole)(**x)[OUT] for x in xs]
        # the answers differ by O(1): a call given another call's input (or stage output) is noticed
        assert min(mk.rms(a.astype(np.float64) - b) for i, a in enumerate(ref) for b in ref[:i]) >= 0.1
        p = rt.load(piped)
        bad: list[str] = []

        def worker(t: int) -> None:
            for i in range(20):
                k = (t + i) % len(xs)
                if not np.array_equal(p(**xs[k])[OUT], ref[k]):
                    bad.append(f"thread {t} call {i}")

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not bad
        assert p.stats["calls"] == 80


def test_close_closes_every_stage(tmp_path):
    m = parse(residual_chain(LAYERS), "c.ir")
    piped = compile_module(m, weights=random_weights(m, 0), target=target(16)).artifacts["f"]
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(piped)
        stages = p.stages
        p.close()
        assert p.closed and all(s.closed for s in stages)
        with pytest.raises(Exception, match="closed"):
            p(**inputs_for(m.funcs["f"]))


def test_written_pipelines_load_and_tampering_is_refused(tmp_path):
    m = parse(residual_chain(LAYERS), "c.ir")
    piped = compile_module(m, weights=random_weights(m, 0), target=target(16),
                           out_dir=tmp_path / "out").artifacts["f"]
    d = tmp_path / "out" / "f"
    again = load_any(d)
    assert isinstance(again, PipelineArtifact) and again.mil_text == piped.mil_text
    with Runtime("sim", temp_root=tmp_path / "rt") as rt:
        x = inputs_for(m.funcs["f"])
        np.testing.assert_array_equal(rt.load(str(d))(**x)[OUT], rt.load(piped)(**x)[OUT])

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
    src.write_text(residual_chain(LAYERS))
    r = CliRunner()
    out = r.invoke(main, ["check", str(src), "--target", "m4"])
    assert out.exit_code == 0, out.output
    res = r.invoke(main, ["compile", str(src), "-o", str(tmp_path / "out"), "--random-weights", "0"])
    assert res.exit_code == 0, res.output
    assert os.path.isdir(tmp_path / "out" / "f" / "stages" / "s00")
    m = parse(residual_chain(LAYERS), "c.ir")
    x = inputs_for(m.funcs["f"], 1)
    np.save(tmp_path / "x.npy", x["x"])
    run = r.invoke(main, ["run", str(tmp_path / "out" / "f"), "--input", f"x={tmp_path / 'x.npy'}", "--compare-interp",
                          "-o", str(tmp_path / "y.npz")])
    assert run.exit_code == 0, run.output
    assert "fp16  h39" in run.output
    with np.load(tmp_path / "y.npz") as saved:
        y = saved[OUT]
    mk.assert_order_one(y, "the CLI's output")
    assert_close(y, interpret(m.funcs["f"], x, random_weights(m, 0), mode="fp16")[OUT],
                 f"pipeline/cli-residual-chain-{LAYERS}:{OUT}:interp-fp16", ULPS)
