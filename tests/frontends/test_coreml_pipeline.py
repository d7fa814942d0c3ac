"""``anec export-coreml`` of a pipeline artifact: one Core ML package whose ``main`` runs every stage.

The package is read back with coremltools and compared, independently of the
exporter's own verification, with the stages' model.mil (op for op, stage k's
names ``sNN_<name>``, stage inputs bound to their sources as the top manifest
wires them, func outputs under the func's names), every BLOBFILE weight bit for
bit, and the manifest's I/O. Core ML cannot run a package on Linux and
coremltools has no MIL interpreter there, so the numerics are anec's
interpreter: the stages' program.ir chained by the wiring equals the whole
func's program.ir bit for bit (fp16 mode), and for imported models it matches
PyTorch (the acceptance tolerances of tests/frontends/conftest.py).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.compiler import compile_module
from anec.frontends import CoreMLExportError
from anec.frontends.coreml import export_coreml
from anec.frontends.coreml_mil import mil_statements
from anec.frontends.coreml_verify import read_package, verify_package
from anec.ir.interp import interpret
from anec.ir.parser import parse
from anec.mil.artifact import artifact_weights
from anec.mil.blobfile import BlobReader
from anec.mil.multi_program import PipelineArtifact, load_any
from anec.targets import get_target
from tests.frontends.conftest import assert_close
from tests.passes.test_partition import chain, unet

pytest.importorskip("coremltools")


def compiled(tmp_path_factory, text: str, blobs: int | None = None) -> PipelineArtifact:
    out = tmp_path_factory.mktemp("build")
    tgt = get_target("m4") if blobs is None else get_target("m4").replace(max_blob_tensors=blobs)
    res = compile_module(parse(text, "p.ir"), random_seed=0, target=tgt, out_dir=out)
    (name,) = res.artifacts
    return out / name


@pytest.fixture(scope="module")
def chain40(tmp_path_factory):
    """40 conv+relu layers at the m4 budget of 16 BLOBFILE tensors: 3 stages, and its package."""
    d = compiled(tmp_path_factory, chain(40))
    return d, export_coreml(d, tmp_path_factory.mktemp("pkg") / "chain.mlpackage")


@pytest.fixture(scope="module")
def skips(tmp_path_factory):
    """A U-Net-like DAG at 2 tensors per program: 4 stages; %d1 feeds stages 1 and 3 (a skip
    over two cuts), %d0 feeds stage 3, and %d2 is a func output that stage 2 also reads."""
    d = compiled(tmp_path_factory, unet(4), blobs=2)
    return d, export_coreml(d, tmp_path_factory.mktemp("pkg") / "unet.mlpackage")


# ---------------------------------------------------------------------------
# independent readings of the package and the pipeline


def package_name(pipe: PipelineArtifact, k: int, name: str) -> str:
    """The documented naming: a func output keeps the func's name, a stage input is its
    source's name, every other value of stage k is ``sKK_<name>``."""
    m = pipe.manifest.document
    for out, src in m["outputs_from"].items():
        if src["stage"] == k and src["output"] == name:
            return out
    for i in m["stages"][k]["inputs"]:
        if i["name"] == name:
            f = i["from"]
            return f["input"] if "input" in f else package_name(pipe, f["stage"], f["output"])
    return f"s{k:02d}_{name}"


def expected_ops(pipe: PipelineArtifact) -> list[tuple[str, list[str], dict[str, str]]]:
    """(op, result names, arguments) of every stage's model.mil statement, renamed, in stage order."""
    ops = []
    for k, art in enumerate(pipe.stages):
        _, stmts, _ = mil_statements(art.mil_text)
        for st in stmts:
            ops.append((st.op, [package_name(pipe, k, n) for _, n in st.results],
                        {a: package_name(pipe, k, v) for a, v in st.args.items()}))
    return ops


def package_ops(path) -> list[tuple[str, list[str], dict[str, str]]]:
    _, prog = read_package(path)
    return [(op.op_type, [o.name for o in op.outputs],
             {a: v.name for a, v in op.inputs.items()} if op.op_type != "const" else {})
            for op in prog.functions["main"].operations]


def run_stages(pipe: PipelineArtifact, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Interpret every stage's program.ir in order, each input bound as the top manifest wires it."""
    produced = {}
    for k, (entry, art) in enumerate(zip(pipe.manifest.document["stages"], pipe.stages)):
        feed = {}
        for i in entry["inputs"]:
            f = i["from"]
            feed[i["name"]] = inputs[f["input"]] if "input" in f else produced[(f["stage"], f["output"])]
        out = interpret(art.program_module().func(art.func), feed, artifact_weights(art), mode="fp16")
        produced.update({(k, name): np.asarray(a) for name, a in out.items()})
    return {name: produced[(s["stage"], s["output"])] for name, s in pipe.manifest.document["outputs_from"].items()}


def random_inputs(pipe: PipelineArtifact, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {e["name"]: rng.standard_normal(e["shape"]).astype(np.dtype({"fp16": np.float16, "fp32": np.float32}[e["dtype"]]))
            for e in pipe.manifest.document["inputs"]}


def io_adapters(pipe: PipelineArtifact) -> tuple[list, dict[str, str], list]:
    """The documented I/O adapters: an input ``x`` whose logical shape is not its device shape
    is read by ``x_device = reshape(x, shape=x_device_shape)``; an output ``y`` is
    ``y = reshape(y_device, shape=y_shape)`` of the program's value, renamed ``y_device``."""
    man = pipe.manifest.document
    logical_in = {e["name"]: e["shape"] for e in man.get("logical_inputs", [])}
    before, inner, after = [], {}, []
    for e in man["inputs"]:
        if logical_in.get(e["name"], e["shape"]) != e["shape"]:
            inner[e["name"]] = d = f"{e['name']}_device"
            before += [("const", [f"{d}_shape"], {}), ("reshape", [d], {"x": e["name"], "shape": f"{d}_shape"})]
    for lo in man.get("logical_outputs", []):
        if lo["shape"] != next(e["shape"] for e in man["outputs"] if e["name"] == lo["name"]):
            inner[lo["name"]] = d = f"{lo['name']}_device"
            after += [("const", [f"{lo['name']}_shape"], {}),
                      ("reshape", [lo["name"]], {"x": d, "shape": f"{lo['name']}_shape"})]
    return before, inner, after


def check_package(path, pipe: PipelineArtifact) -> None:
    """The package is the pipeline: op for op, weights bit for bit, I/O, and the numerics."""
    before, inner, after = io_adapters(pipe)
    body = [(op, [inner.get(n, n) for n in names], {a: inner.get(v, v) for a, v in args.items()} if op != "const" else {})
            for op, names, args in expected_ops(pipe)]
    assert package_ops(path) == before + body + after
    spec, prog = read_package(path)
    consts = {op.outputs[0].name: op.val.val for op in prog.functions["main"].operations if op.op_type == "const"}
    n = 0
    for k, art in enumerate(pipe.stages):
        for w in art.manifest.document["weights"]:
            want = BlobReader(art.blobs[w["file"]]).read(w["offset"], np.float16).reshape(w["shape"])
            got = np.asarray(consts[package_name(pipe, k, w["const"])])
            np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
            n += 1
    assert n > 0
    io = [(f.name, list(f.type.multiArrayType.shape)) for f in [*spec.description.input, *spec.description.output]]
    logical = {e["name"]: e["shape"] for e in [*pipe.manifest.document.get("logical_inputs", []),
                                               *pipe.manifest.document.get("logical_outputs", [])]}
    assert io == [(e["name"], logical.get(e["name"], e["shape"]))
                  for e in [*pipe.manifest.document["inputs"], *pipe.manifest.document["outputs"]]]
    x = random_inputs(pipe)
    whole = interpret(pipe.program_module().func(pipe.func), x, pipe.interp_weights(), mode="fp16")
    staged = run_stages(pipe, x)
    assert sorted(staged) == sorted(whole)
    for name in whole:
        np.testing.assert_array_equal(staged[name].reshape(np.shape(whole[name])), whole[name])


# ---------------------------------------------------------------------------
# the package is the whole func


def test_a_chain_of_three_stages_is_one_function(chain40):
    d, rep = chain40
    pipe = load_any(d)
    assert isinstance(pipe, PipelineArtifact) and len(pipe.stages) == rep.stages == 3
    check_package(rep.path, pipe)
    total = sum(len(mil_statements(a.mil_text)[1]) for a in pipe.stages)
    assert rep.ops + rep.consts == total and rep.weights == 40
    ops = [(op, names, args) for op, names, args in package_ops(rep.path) if op != "const"]
    # stage 1 starts from stage 0's output; the last op is the func output under its own name
    first_of_s01 = next(o for o in ops if o[1][0].startswith("s01_"))
    assert first_of_s01[2]["x"] == "s00_out0"
    assert ops[-1][1] == ["h39"] and ops[-1][2]["x"] == "s02_v14"
    assert any("3 stages wired as the manifest says" in c for c in rep.checks)


def test_a_dag_with_skips_and_shared_crossings(skips):
    d, rep = skips
    pipe = load_any(d)
    wires = {(k, i["name"]): i["from"] for k, e in enumerate(pipe.manifest.document["stages"]) for i in e["inputs"]}
    # the shape this test is about: a skip over two cuts, one value read by several later stages,
    # and a func output that a later stage reads too
    assert wires[(3, "in1")] == {"stage": 0, "output": "out1"} == wires[(1, "in0")]
    assert pipe.manifest.document["outputs_from"]["d2"] == {"stage": 1, "output": "out0"} == wires[(2, "in1")]
    check_package(rep.path, pipe)
    args = {names[0]: a for op, names, a in package_ops(rep.path) if op != "const"}
    assert args["s03_v1"] == {"x": "s03_v0", "y": "s00_out1"}  # the skip from stage 0 into stage 3
    assert args["s02_out0"] == {"x": "s02_v2", "y": "d2"}  # the func output read by stage 2
    spec, _ = read_package(rep.path)
    assert [o.name for o in spec.description.output] == ["u3", "d2"]


@pytest.mark.parametrize("name", ["encoder", "gpt2"])
def test_an_imported_whole_model_exports_as_one_package(imported_cases, tmp_path, name):
    im, _, args, ref = imported_cases(name)
    im.save(tmp_path / "imp")
    res = CliRunner().invoke(main, ["compile", str(tmp_path / "imp" / "model.ir"), "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    pipe = load_any(tmp_path / "b" / "main")
    assert isinstance(pipe, PipelineArtifact) and len(pipe.stages) >= 2
    res = CliRunner().invoke(main, ["export-coreml", str(tmp_path / "b"), "-o", str(tmp_path / "m.mlpackage")])
    assert res.exit_code == 0, res.output
    assert f"the {len(pipe.stages)} stages wired as the manifest says" in res.output
    check_package(tmp_path / "m.mlpackage", pipe)
    # the stages chained as the package chains them compute what the torch module computes
    run = im.runner(backend="interp")
    dev = {e["name"]: e for e in pipe.manifest.document["inputs"]}

    def program(feed):
        x = {k: np.asarray(v, np.dtype(dev[k]["dtype"].replace("fp", "float"))).reshape(dev[k]["shape"])
             for k, v in feed.items()}
        out = run_stages(pipe, x)
        return {v.name: out[v.name].reshape(v.type.shape).astype(np.float32) for v in im.func.outputs}

    run.program = program
    assert_close(run(*args), ref, im.output_names, f"{name} stages chained")


def test_verify_package_checks_any_package_against_any_pipeline(chain40, skips):
    (c, crep), (u, _) = chain40, skips
    assert verify_package(crep.path, load_any(c)).stages == 3
    with pytest.raises(CoreMLExportError, match="operations"):
        verify_package(crep.path, load_any(u))
    pipe = load_any(c)
    art = pipe.stages[2]
    w = art.manifest.document["weights"][3]
    data = bytearray(art.blobs[w["file"]])
    data[-2] ^= 0x7F  # flip bits in the last payload value of stage 2's w3
    art.blobs[w["file"]] = bytes(data)
    with pytest.raises(CoreMLExportError, match=r"stage 2 \(stages/s02/model.mil\): const 's02_w3' differs"):
        verify_package(crep.path, pipe)


# ---------------------------------------------------------------------------
# tampered pipelines are refused, and nothing is written


def tamper(src, tmp_path, edit) -> str:
    """A copy of the pipeline at ``src`` whose top manifest ``edit`` changed; the CLI's output."""
    d = tmp_path / "art"
    shutil.copytree(src, d)
    m = json.loads((d / "manifest.json").read_text())
    edit(m)
    (d / "manifest.json").write_text(json.dumps(m))
    res = CliRunner().invoke(main, ["export-coreml", str(d), "-o", str(tmp_path / "out" / "t.mlpackage")])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    return res.output


def test_a_tampered_stage_is_refused(skips, tmp_path):
    d = tmp_path / "art"
    shutil.copytree(skips[0], d)
    mil = d / "stages" / "s02" / "model.mil"
    mil.write_text(mil.read_text().replace("add(x = v2, y = in1)", "add(x = v2, y = in0)"))
    res = CliRunner().invoke(main, ["export-coreml", str(d), "-o", str(tmp_path / "t.mlpackage")])
    assert res.exit_code == 1 and "sha256" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "t.mlpackage").exists()


def test_a_stage_replaced_by_another_program_with_its_hash_is_refused(chain40, tmp_path_factory, tmp_path):
    # stage 2 (8 conv+relu layers, in0 -> out0) replaced by a program with the same I/O whose
    # last layer is tanh; the top manifest's sha256 is updated, so every load-time check passes
    text = chain(8).replace("func f", "func f_s02").replace("%x", "%in0").replace("%h7", "%out0")
    other = compiled(tmp_path_factory, text.replace("%out0 = relu", "%out0 = tanh"))
    d = tmp_path / "art"
    shutil.copytree(chain40[0], d)
    shutil.rmtree(d / "stages" / "s02")
    shutil.copytree(other, d / "stages" / "s02")
    m = json.loads((d / "manifest.json").read_text())
    m["stages"][2]["mil_sha256"] = json.loads((other / "manifest.json").read_text())["mil"]["sha256"]
    (d / "manifest.json").write_text(json.dumps(m))
    assert len(load_any(d).stages) == 3  # a loadable pipeline
    res = CliRunner().invoke(main, ["export-coreml", str(d), "-o", str(tmp_path / "t.mlpackage")])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "stage 2 (stages/s02) output out0 does not compute %h39 of the func" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["art"]


def test_rewiring_to_another_stage_output_is_refused(skips, tmp_path):
    def edit(m):
        m["stages"][3]["inputs"][1]["from"] = {"stage": 0, "output": "out0"}  # %d0 where %d1 belongs

    out = tamper(skips[0], tmp_path, edit)
    assert "stage 3 (stages/s03) input in1 is wired to stage 0 out0, which is not %d1 of the func" in out


def test_rewiring_with_a_matching_value_name_is_still_refused(skips, tmp_path):
    def edit(m):
        m["stages"][3]["inputs"][1]["from"] = {"stage": 0, "output": "out0"}
        m["stages"][3]["inputs"][1]["value"] = "d0"

    out = tamper(skips[0], tmp_path, edit)
    assert "stage 3 (stages/s03) output out0 does not compute %u3" in out


def test_swapped_func_outputs_are_refused(skips, tmp_path):
    def edit(m):
        of = m["outputs_from"]
        of["u3"], of["d2"] = of["d2"], of["u3"]

    out = tamper(skips[0], tmp_path, edit)
    assert "func output 'u3' is wired to stage 1 out0, which does not compute it" in out


@pytest.mark.parametrize("edit,message", [
    (lambda m: m["stages"][1]["inputs"][0].update(name="in7"), "the manifest wires inputs ['in7']"),
    (lambda m: m["stages"][2]["inputs"][0]["from"].update(output="out5"), "stage 1 has no output 'out5'"),
    (lambda m: m["stages"][2]["outputs"].clear(), "the manifest lists outputs []"),
    (lambda m: m["outputs_from"].pop("d2"), "outputs_from names ['u3']"),
    (lambda m: m["outputs_from"].update(d2=m["outputs_from"]["u3"]), "both come from stage 3 out0"),
    (lambda m: m["stages"][2]["outputs"][0].pop("value"), "malformed manifest wiring"),
    (lambda m: m["inputs"][0].update(shape=[1, 8, 16, 1]), "is wired to func input 'x'"),
], ids=["input-name", "no-such-output", "outputs", "outputs-from", "one-output-twice", "malformed", "shape"])
def test_inconsistent_wiring_is_refused(skips, tmp_path, edit, message):
    out = tamper(skips[0], tmp_path, edit)
    assert message in out and "recompile" in out


def test_a_func_input_named_like_a_stage_value_is_an_error(tmp_path_factory, tmp_path):
    d = compiled(tmp_path_factory, chain(17).replace("%x", "%s00_x"))
    with pytest.raises(CoreMLExportError, match="I/O name 's00_x' has the form"):
        export_coreml(d, tmp_path / "x.mlpackage")
    assert list(tmp_path.iterdir()) == []


def test_a_stage_directory_still_exports_as_one_program(chain40, tmp_path):
    rep = export_coreml(chain40[0] / "stages" / "s01", tmp_path / "s01.mlpackage")
    assert rep.stages == 1
    _, prog = read_package(rep.path)
    assert [o.outputs[0].name for o in prog.functions["main"].operations][-1] == "out0"


def test_a_stage_program_ir_with_other_inputs_is_refused(skips, tmp_path):
    import hashlib

    d = tmp_path / "art"
    shutil.copytree(skips[0], d)
    ir = d / "stages" / "s02" / "program.ir"
    text = ir.read_text().replace("%in1", "%in9")
    ir.write_text(text)
    sm = json.loads((d / "stages" / "s02" / "manifest.json").read_text())
    sm["program_ir"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    (d / "stages" / "s02" / "manifest.json").write_text(json.dumps(sm))
    res = CliRunner().invoke(main, ["export-coreml", str(d), "-o", str(tmp_path / "t.mlpackage")])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert "stage 2 (stages/s02): program.ir's inputs and outputs" in res.output
    assert not (tmp_path / "t.mlpackage").exists()
