"""compile_module and the `anec compile` / `anec mil` commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.compiler import compile_module, format_timings
from anec.diagnostics import AnecError, ConstraintError, WeightError
from anec.ir import Builder
from anec.ir.parser import parse_file
from anec.mil.artifact import Artifact
from anec.mil.blobfile import BlobReader
from anec.targets import get_target
from anec.ir.weight_binding import resolve_weights

from .graphs import small_mlp
from .milcheck import check_mil

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "gpt2_mlp.ir"
MULTI = ROOT / "examples" / "multi_func.ir"


def _module(graph):
    return Builder.module(graph)


def test_compile_module_writes_one_dir_per_func(tmp_path):
    module = parse_file(str(MULTI))
    before = module.structure()
    result = compile_module(module, random_seed=0, out_dir=tmp_path / "out")
    assert module.structure() == before  # the caller's module is not touched
    assert sorted(result.paths) == ["classify", "encode"]
    for func, path in result.paths.items():
        assert path == tmp_path / "out" / func
        art = Artifact.load(path)
        assert art.mil_text == result.artifacts[func].mil_text
        assert {w["file"] for w in art.manifest.document["weights"]} == set(art.blobs)
    assert {r["func"] for r in result.rewrites} == {"encode", "classify"}
    enc = result.artifacts["encode"].manifest.document
    assert [r["constraint"] for r in enc["rewrites"]] == ["ANE-SPLIT", "ANE-NEG"]


def test_compile_module_reports_and_prints(tmp_path):
    result = compile_module(_module(small_mlp()), random_seed=0, print_ir_after="dce,emit-mil", timing=True,
                            out_dir=tmp_path)
    assert len(result.printed_ir) == 3  # dce runs twice in the default pipeline
    assert "IR after emit-mil" in result.printed_ir[-1]
    stages = [s for _, s, _ in result.timings]
    assert stages[0] == "resolve-weights" and stages[-1] == "write" and "legalize" in stages
    table = format_timings(result.timings)
    assert "emit-mil" in table and table.splitlines()[-1].startswith("total")


def test_compile_module_errors():
    with pytest.raises(WeightError, match="l0.w1"):
        compile_module(_module(small_mlp()))  # no weights at all
    with pytest.raises(AnecError, match="unknown pass 'dec'"):
        compile_module(_module(small_mlp()), random_seed=0, passes="dec,emit-mil")
    with pytest.raises(AnecError, match="unknown target"):
        compile_module(_module(small_mlp()), random_seed=0, target="m9")
    with pytest.raises(AnecError, match="cannot be written"):
        compile_module(_module(small_mlp()), with_weights=False, out_dir="x")


def test_pipeline_without_emit_mil_has_no_artifacts():
    result = compile_module(_module(small_mlp()), random_seed=0, passes="dce,fuse-casts")
    assert result.artifacts == {} and [s for _, s, _ in result.timings] == ["dce", "fuse-casts"]


def test_host_casts_on_m1(tmp_path):
    with pytest.raises(ConstraintError) as e:
        compile_module(_module(small_mlp()), random_seed=0, target="m1")
    assert e.value.constraint == "ANE-FP32-IO"
    result = compile_module(_module(small_mlp()), random_seed=0, target="m1", host_casts=True)
    art = result.artifacts["mlp"]
    m = art.manifest.document
    assert m["target"] == "m1" and m["inputs"][0]["dtype"] == "fp16" and m["host_casts"]
    assert art.mil_text.startswith("program(1.3)\n") and m["mil"]["dialect"] == "ios18"
    check_mil(art.mil_text, art.blobs)


@pytest.mark.parametrize("target", ["m1", "m2", "m3", "m4", "m5"])
@pytest.mark.constraint("ANE-MIL-DIALECT")
def test_dialect_option(target, tmp_path):
    """ios18 by default on every chip; ios16 only when asked for, and the manifest says which."""
    module = parse_file(str(MULTI))
    default = compile_module(module, target=target, with_weights=False, host_casts=True)
    old = compile_module(module, target=target, dialect="ios16", random_seed=0, out_dir=tmp_path,
                         host_casts=True)
    for func in module.funcs:
        new_art, old_art = default.artifacts[func], Artifact.load(tmp_path / func)
        assert new_art.mil_text.startswith("program(1.3)\n") and "func main<ios18>" in new_art.mil_text
        assert new_art.manifest.document["mil"]["dialect"] == "ios18"
        assert old_art.mil_text.startswith("program(1.0)\n") and "func main<ios16>" in old_art.mil_text
        assert old_art.manifest.document["mil"]["dialect"] == "ios16" and old_art.manifest.document["target"] == target
    assert old.target.mil_dialect == "ios16" and old.target.name == target
    for func in module.funcs:  # last: it needs coremltools
        old_art = Artifact.load(tmp_path / func)
        check_mil(old_art.mil_text, old_art.blobs)


def test_dialect_option_errors(runner, tmp_path):
    with pytest.raises(AnecError, match="unknown MIL dialect 'ios17'") as e:
        compile_module(parse_file(str(MULTI)), with_weights=False, dialect="ios17")
    assert e.value.hint == "did you mean 'ios18'?"
    res = runner.invoke(main, ["compile", str(MLP), "--random-weights", "0", "--dialect", "ios15",
                               "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "ios15" in res.stderr and "Traceback" not in res.output
    res = runner.invoke(main, ["compile", str(MLP), "--random-weights", "0", "--dialect", "ios16",
                               "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "o" / "mlp" / "manifest.json").read_text())
    assert manifest["mil"]["dialect"] == "ios16"
    assert (tmp_path / "o" / "mlp" / "model.mil").read_text().startswith("program(1.0)\n")


def test_chunked_output_artifact(tmp_path):
    """A conv wider than the target allows, returned: legalize chunks it; the manifest reassembles it."""
    b = Builder("head")
    x = b.input("x", "fp16", [1, 8, 1, 4])
    w = b.const_weight("proj", "fp16[40, 8, 1, 1]", name="w")
    logits = b.conv1x1(x, w, name="logits")
    b.ret(logits)
    target = get_target("m4").replace(max_conv_out_channels=16)
    compile_module(_module(b.graph), random_seed=3, target=target, out_dir=tmp_path)
    art = Artifact.load(tmp_path / "head")
    m = art.manifest.document
    pieces = [o["name"] for o in m["outputs"]]
    assert pieces == ["logits__c0", "logits__c1", "logits__c2"]
    assert all(o["logical"] == "logits" for o in m["outputs"])
    assert [o["binding"] for o in m["outputs"]] == [0, 1, 2]
    widths = [o["shape"][1] for o in m["outputs"]]
    assert sum(widths) == 40 and max(widths) <= 16
    assert m["logical_outputs"] == [{"name": "logits", "dtype": "fp16", "shape": [1, 40, 1, 4], "axis": 1,
                                     "pieces": pieces}]
    assert m["output_alloc_bytes"] == 49152
    # each chunk's weight file holds the right rows of the checkpoint tensor
    proj = resolve_weights(_module(b.graph), random_seed=3)["proj"].astype(np.float16)
    rows = np.concatenate([BlobReader(art.blobs[w["file"]]).read(w["offset"], np.float16).reshape(w["shape"])
                           for w in m["weights"]], axis=0)
    np.testing.assert_array_equal(rows, proj)
    check_mil(art.mil_text, art.blobs)


# ---- CLI -----------------------------------------------------------------------


@pytest.fixture
def runner():
    return CliRunner()


def test_cli_compile_default_output_dir(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(main, ["compile", str(MLP), "--random-weights", "0"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "out" / "gpt2_mlp" / "mlp"
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "model.mil", "program.ir", "weights"]
    assert res.stdout.startswith("mlp: ") and "6 weights" in res.stdout and "peak SRAM" in res.stdout
    assert "out/gpt2_mlp/mlp" in res.stdout
    golden = (Path(__file__).parent / "golden" / "gpt2_mlp__mlp.mil").read_text()
    assert (out / "model.mil").read_text() == golden
    assert json.loads((out / "manifest.json").read_text())["func"] == "mlp"


def test_cli_compile_options(runner, tmp_path):
    res = runner.invoke(main, ["compile", str(MLP), "--random-weights", "1", "-o", str(tmp_path / "o"),
                               "--pack-weights", "--timing", "--print-ir-after", "legalize"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (tmp_path / "o" / "mlp" / "weights").iterdir()) == ["weight.bin"]
    assert "// ----- IR after legalize (func mlp) -----" in res.stderr
    assert "IR after" not in res.stdout
    assert "emit-mil" in res.stdout and "total" in res.stdout


def test_cli_compile_partial_pipeline_prints_ir(runner, tmp_path):
    res = runner.invoke(main, ["compile", str(MLP), "--passes", "dce,fuse-casts", "-o", str(tmp_path / "o"),
                               "--random-weights", "0"])
    assert res.exit_code == 0, res.output
    assert "func mlp(" in res.stdout and "nothing written" in res.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--random-weights", "0", "--passes", "dce", "--pipeline", "default"], "not both"),
        ([], "hint: pass --random-weights SEED"),
        (["--random-weights", "0", "--target", "m7"], "unknown target 'm7'"),
        (["--random-weights", "0", "--passes", "dce,legalise"], "did you mean 'legalize'"),
        (["--random-weights", "0", "--target", "m1"], "[ANE-FP32-IO]"),
    ],
)
def test_cli_compile_errors(runner, tmp_path, args, message):
    res = runner.invoke(main, ["compile", str(MLP), "-o", str(tmp_path / "o"), *args])
    assert res.exit_code in (1, 2)
    assert message in res.stderr
    assert "Traceback" not in res.output


def test_cli_mil_without_weights(runner):
    res = runner.invoke(main, ["mil", str(MLP)])
    assert res.exit_code == 0, res.output
    golden = (Path(__file__).parent / "golden" / "gpt2_mlp__mlp.mil").read_text()
    assert res.stdout == golden
    with_weights = runner.invoke(main, ["mil", str(MLP), "--random-weights", "5"])
    assert with_weights.stdout == golden


def test_cli_mil_funcs_and_targets(runner):
    res = runner.invoke(main, ["mil", str(MULTI)])
    assert res.exit_code == 1 and "2 funcs: encode, classify" in res.stderr and "--func" in res.stderr
    res = runner.invoke(main, ["mil", str(MULTI), "--func", "encod"])
    assert res.exit_code == 1 and "did you mean 'encode'" in res.stderr
    res = runner.invoke(main, ["mil", str(MULTI), "--func", "classify"])
    assert res.stdout == (Path(__file__).parent / "golden" / "multi_func__classify.mil").read_text()
    res = runner.invoke(main, ["mil", str(MULTI), "--func", "encode", "--target", "m2"])
    assert res.exit_code == 0 and res.stdout.startswith("program(1.3)\n")  # ios18 on every chip
    res = runner.invoke(main, ["mil", str(MULTI), "--func", "encode", "--target", "m2", "--dialect", "ios16"])
    assert res.exit_code == 0 and res.stdout.startswith("program(1.0)\n")
    assert "func main<ios16>" in res.stdout


def test_cli_mil_checks_weights_when_given(runner, tmp_path):
    bad = tmp_path / "w.npz"
    np.savez(bad, **{"h.0.mlp.c_fc.weight": np.zeros((3, 3), np.float32)})
    res = runner.invoke(main, ["mil", str(MLP), "--weights", str(bad), "--random-weights", "0"])
    assert res.exit_code == 1 and "h.0.mlp.c_fc.weight" in res.stderr


def test_module_clone_is_structural_and_handles_long_chains():
    module = parse_file(str(MULTI))
    twin = module.clone()
    assert twin == module and twin.funcs["encode"] is not module.funcs["encode"]
    b = Builder("deep")
    v = b.input("x", "fp16", [1, 4])
    for _ in range(3000):  # deeper than the interpreter's recursion limit allows deepcopy to go
        v = b.relu(v)
    b.ret(v)
    deep = Builder.module(b.graph)
    twin = deep.clone()
    assert twin == deep
    g = twin.funcs["deep"]
    assert all(len(r.uses) == 1 for n in g.nodes[:-1] for r in n.results)
    assert g.nodes[0].operands[0] is g.inputs[0]


def test_cli_mil_on_a_file_without_funcs_says_so(runner, tmp_path):
    empty = tmp_path / "empty.ir"
    empty.write_text("// nothing here\n")
    res = runner.invoke(main, ["mil", str(empty)])
    assert res.exit_code == 1
    assert "empty.ir:1:1: error: the file defines no func" in res.stderr


def test_compile_maps_the_pages_of_exactly_the_weights_the_module_reads(monkeypatch):
    """compile_module hands touch_pages every array a weight const reads (and no other) on the
    hash workers, before the passes."""
    import anec.compiler as compiler_mod
    import anec.weight_store as weights_mod

    class Workers:  # the hash workers, run in place: what was submitted is known on return
        def submit(self, fn, *args):
            fn(*args)

    seen: list[list[np.ndarray]] = []
    monkeypatch.setattr(compiler_mod, "hash_pool", Workers)
    monkeypatch.setattr(weights_mod, "touch_pages", lambda arrays: seen.append(list(arrays)))
    store = resolve_weights(_module(small_mlp()), random_seed=0)
    extra = {"not.used": np.ones((4, 4), np.float16)}
    compile_module(_module(small_mlp()), weights={**store, **extra})
    assert len(seen) == 1
    assert sorted(a.shape for a in seen[0]) == sorted(store[k].shape for k in ("l0.w1", "l0.w2"))
    assert all(any(np.shares_memory(a, store[k]) for k in ("l0.w1", "l0.w2")) for a in seen[0])


def test_the_coremltools_type_check_skips_without_coremltools(monkeypatch):
    """check_mil without coremltools is a skip naming it (a failure under ANEC_REQUIRE_REFS=1),
    not an ImportError that fails the test."""
    art = compile_module(_module(small_mlp()), random_seed=0, target="m4").artifacts["mlp"]
    monkeypatch.setitem(sys.modules, "coremltools", None)  # import coremltools: ModuleNotFoundError
    with pytest.raises(pytest.skip.Exception, match="could not import 'coremltools'"):
        check_mil(art.mil_text, art.blobs)
