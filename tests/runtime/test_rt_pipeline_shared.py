"""Programs shared across repeated layers, and the compile planner (ANE-COMPILE-BUDGET).

A func cut into stages whose layers repeat: with sharing the cuts fall on layer boundaries,
the stages of repeated layers have the same MIL, and their weights become program inputs,
so they are one compile however deep the func is. Checked on the sim:

- shared and unshared artifacts of one func compute the same outputs, bit for bit (a
  conv1x1 over an input weight is a matmul with the same fp32 accumulation in the same
  order on the sim; both store every value in fp16);
- doubling the layers leaves the number of compiles unchanged;
- the planner's count is what loading the artifacts then compiles (a runtime with no
  reload strategy verified, the device's state until the selftest verifies one);
- over the budget, "auto" shares; still over, the compile fails before anything is
  written with a located ANE-COMPILE-BUDGET error;
- a reload by key reaches the weight inputs of the stage holding the key, and equals a
  fresh compile with the new weights;
- hostile manifests: the new fields are bounded and checked.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from anec.compiler import compile_module, count_programs, fewest_programs
from anec.diagnostics import ArtifactError, ConstraintError
from anec.ir.parser import parse
from anec.mil.multi_program import PipelineArtifact, load_any
from anec.runtime import Runtime
from anec.ir.weight_binding import random_weights
from tests.runtime.test_rt_pipeline import inputs_for, residual_chain, target


def chain(layers: int):
    m = parse(residual_chain(layers), "chain.ir")
    return m, random_weights(m, 0)


def build(m, store, share, **kw):
    return compile_module(m, weights=store, target=target(16), share_programs=share, **kw)


def run(art, x, rt):
    p = rt.load(art)
    return p(**x), p


def test_shared_stages_compute_the_unshared_outputs_bit_for_bit():
    m, store = chain(40)
    x = inputs_for(m.funcs["f"])
    out = "h39"
    plain, shared = build(m, store, "never"), build(m, store, "always")
    sa = shared.artifacts["f"]
    assert isinstance(sa, PipelineArtifact) and shared.shared
    entries = sa.manifest.document["stages"]
    assert any(e["shares"] is not None for e in entries) and any(e["weight_inputs"] for e in entries)
    with Runtime("sim", reload_verified=[]) as rt:
        y0, _ = run(plain.artifacts["f"], x, rt)
        assert rt.stats["compiles"] == plain.programs
    with Runtime("sim", reload_verified=[]) as rt:
        y1, p1 = run(sa, x, rt)
        assert rt.stats["compiles"] == shared.programs == sa.manifest.document["programs"] < plain.programs
        assert p1.stats["resident_inputs"] == sum(e["weight_inputs"] for e in entries)
    assert np.array_equal(y0[out], y1[out])  # bit for bit
    assert np.abs(y0[out]).max() > 0.1


def test_doubling_the_layers_keeps_the_number_of_compiles():
    counts = {}
    for layers in (40, 80):
        m, store = chain(layers)
        r = build(m, store, "always")
        counts[layers] = r.programs
        stages = r.artifacts["f"].stages
        assert len(stages) > r.programs  # stages do grow with depth
    assert counts[80] == counts[40] <= 3


def wide_chain(layers: int, c: int = 64):
    """Residual layers whose conv1x1 weight (c x c fp16) is 4x an activation (c x 16)."""
    lines = [f"func f(%x: fp16[1, {c}, 1, 16]) {{", "  %k = const(value=0.25) : fp16[]"]
    prev = "%x"
    for i in range(layers):
        lines += [f"  %a{i} = relu({prev})", f'  %w{i} = const(weight="l{i}.w") : fp16[{c}, {c}, 1, 1]',
                  f"  %c{i} = conv1x1(%a{i}, %w{i})", f"  %s{i} = mul(%c{i}, %k)", f"  %h{i} = add({prev}, %s{i})"]
        prev = f"%h{i}"
    m = parse("\n".join([*lines, f"  return {prev}", "}"]), "wide.ir")
    return m, random_weights(m, 0)


def test_a_shared_stage_whose_input_weights_overflow_the_sram_is_still_shared():
    # ANE-SRAM is soft: a stage whose weights, once inputs, keep more bytes live than the
    # SRAM is one program with a spill risk, not a reason to give up sharing (a 1B model's
    # 32 MiB projections made every layer its own compile and the model over the budget)
    m, store = wide_chain(24)
    x = inputs_for(m.funcs["f"])
    small = target(4).replace(sram_bytes=24 * 1024)  # the activations fit; a weight input does not
    plain = compile_module(m, weights=store, target=small, share_programs="never")
    shared = compile_module(m, weights=store, target=small, share_programs="always")
    assert plain.programs >= 3 and shared.shared and shared.programs <= 3 < plain.programs
    with Runtime("sim", reload_verified=[]) as rt:
        y0 = rt.load(plain.artifacts["f"])(**x)["h23"]
        y1 = rt.load(shared.artifacts["f"])(**x)["h23"]
    assert np.array_equal(y0, y1) and np.abs(y0).max() > 0.1


@pytest.mark.constraint("ANE-COMPILE-BUDGET")
def test_the_planner_count_is_what_the_runtime_compiles():
    for layers in (20, 40):
        m, store = chain(layers)
        for share in ("never", "always"):
            r = build(m, store, share)
            with Runtime("sim", reload_verified=[]) as rt:
                rt.load(r.artifacts["f"])
                assert rt.stats["compiles"] == r.programs == count_programs(r.artifacts.values())


@pytest.mark.constraint("ANE-COMPILE-BUDGET")
def test_auto_shares_over_the_budget_and_fails_located_when_still_over(tmp_path):
    m, store = chain(40)
    unshared = build(m, store, "never").programs
    assert unshared >= 3
    fits = build(m, store, "auto")
    assert not fits.shared and fits.programs == unshared  # within the budget: nothing changes
    auto = build(m, store, "auto", compile_budget=unshared - 1)
    assert auto.shared and auto.programs < unshared
    # written: the first plan's weight hashes are dropped, the shared plan's written (and
    # checked against the weight files when loaded)
    written = build(m, store, "auto", compile_budget=unshared - 1, out_dir=tmp_path / "shared")
    assert written.shared and written.programs == auto.programs
    x = inputs_for(m.funcs["f"])
    with Runtime("sim", reload_verified=[]) as rt:
        y0 = rt.load(load_any(tmp_path / "shared" / "f"))(**x)["h39"]
        y1 = rt.load(auto.artifacts["f"])(**x)["h39"]
    assert np.array_equal(y0, y1) and np.abs(y0).max() > 0.1
    with pytest.raises(ConstraintError) as ei:
        build(m, store, "auto", compile_budget=1, out_dir=tmp_path / "out")
    e = ei.value
    assert e.constraint == "ANE-COMPILE-BUDGET" and "chain.ir:1:" in e.render()
    assert "even with programs shared" in str(e) and e.hint
    assert not (tmp_path / "out").exists()  # nothing written
    with pytest.raises(ConstraintError, match="without sharing programs") as ei:
        build(m, store, "never", compile_budget=2)
    assert "--share-programs" in ei.value.hint


@pytest.mark.constraint("ANE-COMPILE-BUDGET")
def test_auto_counts_the_plans_first_and_emits_once_when_they_are_over_the_budget():
    """The plans' bound (distinct weight sets over every program) never exceeds what the
    unshared artifacts compile; when the bound alone is over the budget, "auto" goes
    straight to sharing: emit-mil runs once per func, for the shared plan only."""
    m, store = chain(40)
    unshared = build(m, store, "never")
    assert 3 <= fewest_programs(unshared.module) <= unshared.programs
    auto = build(m, store, "auto", compile_budget=fewest_programs(unshared.module) - 1, timing=True)
    assert auto.shared and auto.programs < unshared.programs
    assert sum(t[1] == "emit-mil" for t in auto.timings) == 1
    assert sum(t[1] == "partition" for t in auto.timings) == 2  # both plans were made
    # two funcs in one module, no weight in common: their programs add up
    two = parse(residual_chain(6) + "\n" + residual_chain(6).replace("func f(", "func g(").replace(
        '"l', '"m'), "two.ir")
    r = build(two, random_weights(two, 0), "never")
    assert fewest_programs(r.module) == r.programs == 2


def test_a_reload_of_a_shared_stage_equals_a_fresh_compile():
    m, store = chain(40)
    x = inputs_for(m.funcs["f"])
    new = {k: np.asarray(v) * -1.5 for k, v in store.items() if k in ("l3.w", "l21.w")}
    changed = dict(store.items())
    changed.update(new)
    with Runtime("sim", reload_verified=[]) as rt:
        p = rt.load(build(m, store, "always").artifacts["f"])
        before = p(**x)["h39"]
        compiles = rt.stats["compiles"]
        reloads = rt.stats["reloads_inputs"]
        p.reload_weights(new)
        assert rt.stats["compiles"] == compiles  # a surface write, no compile
        assert rt.stats["reloads_inputs"] == reloads + 1  # both stages in one locked call
        after = p(**x)["h39"]
        fresh = rt.load(build(m, changed, "never").artifacts["f"])(**x)["h39"]
    assert not np.array_equal(before, after)
    assert np.array_equal(after, fresh)  # bit for bit


def test_hostile_sharing_fields_are_refused(tmp_path):
    m, store = chain(40)
    d = tmp_path / "out" / "f"
    build(m, store, "always", out_dir=tmp_path / "out")
    man0 = json.loads((d / "manifest.json").read_text())
    shared = [k for k, e in enumerate(man0["stages"]) if e["shares"] is not None]
    k = shared[-1]

    def tampered(edit):
        bad = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
        shutil.copytree(d, bad)
        man = json.loads((bad / "manifest.json").read_text())
        edit(man, bad)
        (bad / "manifest.json").write_text(json.dumps(man))
        with pytest.raises(ArtifactError) as ei:
            load_any(bad)
        return str(ei.value)

    def shares_later(man, _):
        man["stages"][0]["shares"] = k

    def shares_other_mil(man, _):
        other = next(j for j, e in enumerate(man["stages"]) if e["mil_sha256"] != man["stages"][k]["mil_sha256"])
        man["stages"][max(other, k)]["shares"] = min(other, k)

    def many_inputs(man, _):
        man["stages"][k]["weight_inputs"] = 1 << 40

    def programs(man, _):
        man["programs"] = len(man["stages"]) + 1

    def stage_weight_shape(man, bad):  # the stage's own manifest: a weight input of another size
        sm = json.loads((bad / man["stages"][k]["dir"] / "manifest.json").read_text())
        sm["weight_inputs"][0]["shape"] = [1, 1, 1, 3]
        (bad / man["stages"][k]["dir"] / "manifest.json").write_text(json.dumps(sm))

    def stage_weight_bytes(man, bad):  # a weight input's file changed after compiling
        f = sorted((bad / man["stages"][k]["dir"] / "inputs").iterdir())[0]
        data = bytearray(f.read_bytes())
        data[-2] ^= 0xFF
        f.write_bytes(bytes(data))

    assert "stages[0].shares" in tampered(shares_later)
    assert ".shares" in tampered(shares_other_mil)
    assert f"stages[{k}].weight_inputs" in tampered(many_inputs)
    assert "'programs'" in tampered(programs)
    assert "weight_inputs[0].shape" in tampered(stage_weight_shape)
    assert "sha256" in tampered(stage_weight_bytes)


def test_a_stage_input_with_no_source_is_refused_at_load(tmp_path):
    m, store = chain(40)
    d = tmp_path / "out" / "f"
    build(m, store, "always", out_dir=tmp_path / "out")
    man = json.loads((d / "manifest.json").read_text())
    k = next(j for j, e in enumerate(man["stages"]) if e["weight_inputs"])
    man["stages"][k]["inputs"] = []
    (d / "manifest.json").write_text(json.dumps(man))
    with Runtime("sim") as rt, pytest.raises(ArtifactError, match=f"stage {k} input 'in0' has no source"):
        rt.load(str(d))


def test_the_c_pipeline_writes_only_resident_inputs_and_checks_all_first():
    m, store = chain(40)
    x = inputs_for(m.funcs["f"])
    with Runtime("sim") as rt:
        p = rt.load(build(m, store, "always").artifacts["f"])
        before = p(**x)["h39"]
        k = next(j for j, e in enumerate(p.manifest.document["stages"]) if e["weight_inputs"])
        stage = p.stages[k]
        fed = next(s for s in stage.inputs if s["name"] not in stage._weight_inputs)
        weight = next(s for s in stage.inputs if s["name"] in stage._weight_inputs)
        items = [None] * len(stage.inputs)
        items[weight["binding"]] = stage._host_input(weight, np.zeros(weight["shape"], np.float16))
        items[fed["binding"]] = stage._host_input(fed, np.zeros(fed["shape"], np.float16))
        per = [None] * len(p.stages)
        per[k] = items
        with pytest.raises(Exception, match=f"stage {k} input '{fed['name']}' is not resident"):
            p._native.pipe.set_stage_inputs(per, reload=True)
        assert np.array_equal(p(**x)["h39"], before)  # the resident input was not written either


def test_a_core_ml_export_of_a_shared_pipeline_is_refused_with_the_flag_to_use(tmp_path):
    pytest.importorskip("coremltools")
    from anec.frontends import CoreMLExportError
    from anec.frontends.coreml import export_coreml

    m, store = chain(40)
    build(m, store, "always", out_dir=tmp_path / "out")
    with pytest.raises(CoreMLExportError, match="weights as program inputs") as ei:
        export_coreml(tmp_path / "out" / "f", tmp_path / "f.mlpackage")
    assert "--share-programs never" in ei.value.hint
