"""Weights compiled as program inputs: a reload is a surface write (no compile, no unload, no load),
and the program still computes exactly what a fresh compile with the new weights computes.

Every reload is checked by :func:`milkit.assert_reloaded` (equal to a fresh compile bit for bit,
changed by O(1)); test_reload_tests_fail_when_the_reload_does_nothing replaces the native
reload with a no-op and asserts that check fails. Comparisons with the interpreter go
through the tolerance policy (tests/tolerances.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.compiler import compile_module
from anec.diagnostics import WeightError
from anec.ir.interp import interpret
from anec.ir.parser import parse, parse_file
from anec.runtime import Runtime, native
from anec.ir.weight_binding import random_weights, resolve_weights
from tests.runtime import milkit as mk
from tolerances import assert_close

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FFN = """\
func ffn(%x: fp32[1, 64, 1, 32]) {
  %xh = cast(%x, dtype=fp16)
  %w1 = const(weight="l.fc.weight") : fp16[128, 64, 1, 1]
  %b1 = const(weight="l.fc.bias") : fp16[1, 128, 1, 1]
  %h = conv1x1(%xh, %w1, bias=%b1)
  %a = relu(%h)
  %w2 = const(weight="l.proj.weight") : fp16[64, 128, 1, 1]
  %o = conv1x1(%a, %w2)
  %y = cast(%o, dtype=fp32)
  return %y
}
"""


def _compile(store, patterns, tmp_path=None):
    m = parse(FFN, "ffn.ir")
    return m, compile_module(m, weights=store, weights_as_inputs=patterns,
                             out_dir=tmp_path).artifacts["ffn"]


def reload_inputs(tmp_path, patterns) -> dict:
    """Load FFN with the keys matching ``patterns`` compiled as inputs, reload those keys, and check
    the reload took effect (:func:`milkit.assert_reloaded`). Returns the runtime stats before and
    after the reload, the keys compiled as inputs and the program's reload info."""
    m = parse(FFN, "ffn.ir")
    s0, s1 = random_weights(m, 0), random_weights(m, 1)
    _, art = _compile(s0, patterns)
    as_inputs = {w["key"] for w in art.manifest.document["weight_inputs"]}
    x = np.random.default_rng(5).standard_normal((1, 64, 1, 32)).astype(np.float32)
    with Runtime("sim", temp_root=tmp_path / "rt") as rt:
        p = rt.load(art)
        assert p.input_names == ["x"]  # weights are filled by the runtime
        y0 = p(x=x)["y"]
        mk.assert_order_one(y0, "FFN output")
        assert_close(y0, interpret(m.funcs["ffn"], {"x": x}, s0, mode="fp16")["y"], "weight-inputs/ffn:y:interp-fp16",
                     4, str(patterns))
        before = rt.stats
        p.reload_weights({k: s1[k] for k in as_inputs})
        after = rt.stats
        y1 = p(x=x)["y"]
        info = p.reload_info
    # equal to a fresh compile of the same program with the new weights
    _, art1 = _compile({**s0, **{k: s1[k] for k in as_inputs}}, patterns)
    with Runtime("sim", temp_root=tmp_path / "fresh") as fresh:
        y_fresh = fresh.load(art1)(x=x)["y"]
    mk.assert_reloaded(y0, y1, y_fresh, f"reload of the inputs {sorted(as_inputs)}")
    return {"before": before, "after": after, "as_inputs": as_inputs, "all": set(s0), "info": info}


@pytest.mark.parametrize("patterns", [["all"], ["l.fc.*"], ["l.proj.weight"]])
@pytest.mark.constraint("ANE-CONV-CONST-WEIGHT")
def test_weights_as_inputs_reload_without_compile_or_load(tmp_path, patterns):
    got = reload_inputs(tmp_path, patterns)
    before, st = got["before"], got["after"]
    assert st["compiles"] == before["compiles"] and st["loads"] == before["loads"]
    assert st["unloads"] == before["unloads"] and st["reloads_inputs"] == 1
    if got["as_inputs"] == got["all"]:
        assert got["info"]["strategy"] == "inputs"


def mixed_reload(tmp_path) -> dict:
    """FFN with l.fc.weight compiled as an input and the rest as BLOBFILEs; reload every key
    (checked by :func:`milkit.assert_reloaded`); the runtime stats after the reload."""
    m = parse(FFN, "ffn.ir")
    s0, s1 = random_weights(m, 0), random_weights(m, 1)
    _, art = _compile(s0, ["l.fc.weight"])
    x = np.ones((1, 64, 1, 32), np.float32)
    with Runtime("sim", temp_root=tmp_path / "rt") as rt:
        p = rt.load(art)
        y0 = p(x=x)["y"]
        p.reload_weights(dict(s1))
        got = p(x=x)["y"]
        st = rt.stats
    _, art1 = _compile(s1, ["l.fc.weight"])
    with Runtime("sim", temp_root=tmp_path / "fresh") as fresh:
        mk.assert_reloaded(y0, got, fresh.load(art1)(x=x)["y"], "mixed reload")
    return st


def test_mixed_reload_touches_inputs_and_blobfiles(tmp_path):
    st = mixed_reload(tmp_path)
    assert st["reloads_inputs"] == 1 and st["reloads_data_patch"] + st["reloads_recompile"] == 1


def test_programs_differing_only_in_input_weights_share_one_compile(tmp_path):
    m = parse(FFN, "ffn.ir")
    arts = [_compile(random_weights(m, s), ["all"])[1] for s in range(4)]
    assert len({a.mil_text for a in arts}) == 1
    x = np.ones((1, 64, 1, 32), np.float32)
    with Runtime("sim", temp_root=tmp_path) as rt:
        progs = [rt.load(a) for a in arts]
        outs = [p(x=x)["y"] for p in progs]
        assert rt.stats["compiles"] == 1 and rt.stats["cache_hits"] == 3
    assert len({o.tobytes() for o in outs}) == 4


def test_bad_values_are_rejected_before_anything_changes(tmp_path):
    m = parse(FFN, "ffn.ir")
    s0 = random_weights(m, 0)
    _, art = _compile(s0, ["all"])
    x = np.ones((1, 64, 1, 32), np.float32)
    with Runtime("sim", temp_root=tmp_path) as rt:
        p = rt.load(art)
        y0 = p(x=x)["y"]
        for bad, err in (({"l.fc.weight": np.full((128, 64, 1, 1), np.nan)}, "non-finite"),
                         ({"l.fc.weight": np.zeros((64, 64, 1, 1))}, "expects"),
                         ({"l.proj.weight": np.full((64, 128, 1, 1), 1e6)}, "fp16 range"),
                         ({"l.nope": np.zeros(3)}, "unknown weight")):
            with pytest.raises(WeightError, match=err):
                p.reload_weights(bad)
        np.testing.assert_array_equal(p(x=x)["y"], y0)
        assert rt.stats["reloads"] == 0
        # the check above can notice a change: a valid reload of one key changes the output by O(1)
        p.reload_weights({"l.fc.weight": random_weights(m, 1)["l.fc.weight"]})
        assert mk.rms(p(x=x)["y"] - y0) >= 0.1


def test_cli_compile_and_run_with_weights_as_inputs(tmp_path):
    out = tmp_path / "out"
    mlp = os.path.join(ROOT, "examples", "gpt2_mlp.ir")
    r = CliRunner().invoke(main, ["compile", mlp, "--random-weights", "0",
                                  "-o", str(out), "--weights-as-inputs", "*.c_fc.weight,*.c_proj.weight"])
    assert r.exit_code == 0, r.output
    art_dir = out / "mlp"
    assert sorted(os.listdir(art_dir / "inputs")) and (art_dir / "inputs").is_dir()
    x = np.random.default_rng(0).standard_normal((1, 768, 1, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = CliRunner().invoke(main, ["run", str(art_dir), "--input", f"x={tmp_path / 'x.npy'}", "--compare-interp",
                                  "-o", str(tmp_path / "y.npz")])
    assert r.exit_code == 0, r.output
    assert [line.split()[:2] for line in r.output.splitlines() if line.strip().startswith("fp16")] == [["fp16", "y"]]
    module = parse_file(mlp)
    with np.load(tmp_path / "y.npz") as saved:
        y = saved["y"]
    mk.assert_order_one(y, "the CLI's output")
    ref = interpret(module.funcs["mlp"], {"x": x}, resolve_weights(module, random_seed=0), mode="fp16")["y"]
    assert_close(y, ref, "weight-inputs/cli-gpt2_mlp:y:interp-fp16", 4)
    bad = CliRunner().invoke(main, ["compile", mlp, "--random-weights",
                                    "0", "-o", str(tmp_path / "o2"), "--weights-as-inputs", "nothing.*"])
    assert bad.exit_code != 0 and "matches no weight" in bad.output


def test_an_example_module_with_every_weight_as_an_input_matches_the_interpreter(tmp_path):
    module = parse_file(os.path.join(ROOT, "examples", "gpt2_mlp.ir"))
    store = random_weights(module, 2)
    art = compile_module(module, weights=store, weights_as_inputs="all").artifacts["mlp"]
    x = np.random.default_rng(1).standard_normal((1, 768, 1, 64)).astype(np.float32)
    with Runtime("sim", temp_root=tmp_path) as rt:
        got = rt.load(art)(x=x)["y"]
    ref = interpret(module.funcs["mlp"], {"x": x}, store, mode="fp16")["y"]
    mk.assert_order_one(ref, "gpt2_mlp output")
    assert_close(got, ref, "weight-inputs/gpt2_mlp-all-inputs:y:interp-fp16", 4)


TWO_VIEWS = """\
func tv(%x: fp16[1, 8, 1, 16]) {
  %w = const(weight="w") : fp16[8, 8, 1, 1]
  %wt = const(weight="w", perm=[1, 0, 2, 3]) : fp16[8, 8, 1, 1]
  %a = conv1x1(%x, %w)
  %b = conv1x1(%a, %wt)
  return %b
}
"""


def two_views_reload(tmp_path) -> None:
    """TWO_VIEWS with its weight as inputs; reload "w" (checked by :func:`milkit.assert_reloaded`)."""
    m = parse(TWO_VIEWS, "tv.ir")
    s0, s1 = random_weights(m, 0), random_weights(m, 1)
    art = compile_module(m, weights=s0, weights_as_inputs=["all"]).artifacts["tv"]
    assert len(art.manifest.document["weight_inputs"]) == 2
    x = np.random.default_rng(3).standard_normal((1, 8, 1, 16)).astype(np.float16)
    with Runtime("sim", temp_root=tmp_path / "rt") as rt:
        p = rt.load(art)
        y0 = p(x=x)["b"]
        p.reload_weights({"w": s1["w"]})
        got = p(x=x)["b"]
    fresh = compile_module(m, weights=s1, weights_as_inputs=["all"]).artifacts["tv"]
    with Runtime("sim", temp_root=tmp_path / "fresh") as rt:
        mk.assert_reloaded(y0, got, rt.load(fresh)(x=x)["b"], "reload of a key read under two views")


def test_a_key_read_under_two_views_reloads_both(tmp_path):
    """A weight and its transpose (as backward programs read them) are two inputs of one key:
    a reload fills both."""
    two_views_reload(tmp_path)


def _noop_input_reload(set_inputs):
    def patched(self, inputs, reload):
        if not reload:  # the first fill at load stays
            set_inputs(self, inputs, reload)
    return patched


def _noop(*_args, **_kw):
    return None


RELOAD_CASES = {
    # case -> (scenario, the native entry points a no-op replaces)
    # (fp16/fp32 arrays go by reload_input_views, other values by set_inputs)
    "inputs": (lambda t: reload_inputs(t, ["all"]), ["set_inputs", "reload_input_views"]),
    "mixed:inputs": (mixed_reload, ["set_inputs", "reload_input_views"]),
    "mixed:blobfiles": (mixed_reload, ["reload", "reload_arrays"]),
    "two-views": (two_views_reload, ["set_inputs", "reload_input_views"]),
}


@pytest.mark.parametrize("case", list(RELOAD_CASES))
def test_reload_tests_fail_when_the_reload_does_nothing(tmp_path, monkeypatch, case):
    """The reload tests above can fail: with the native reload replaced by a no-op (the inputs'
    surface write, or the BLOBFILE reload of the mixed program), their check raises."""
    scenario, entries = RELOAD_CASES[case]
    for name in entries:
        orig = getattr(native.NativeProgram, name)
        monkeypatch.setattr(native.NativeProgram, name, _noop_input_reload(orig) if name == "set_inputs" else _noop)
    with pytest.raises(AssertionError, match="|".join(mk.RELOAD_FAILURES)):
        scenario(tmp_path)
