"""``anec export-coreml``: compiled artifacts as Core ML packages, verified on Linux.

coremltools reads every package back (spec and weights): its operations must
equal model.mil's statements one to one (types, names, arguments, constant
values; BLOBFILE constants byte-equal to weights/*.bin) and its I/O the
manifest's. Core ML cannot run a model on Linux, so this is the check.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.compiler import compile_module
from anec.frontends import CoreMLExportError, MissingExtraError, require
from anec.frontends.coreml import export_coreml
from anec.frontends.coreml_mil import mil_statements
from anec.frontends.coreml_verify import read_package, verify_package
from anec.ir.parser import parse_file
from anec.mil.artifact import Artifact
from anec.mil.blobfile import BlobReader
from tests.conftest import ROOT

pytest.importorskip("coremltools")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    compile_module(parse_file(ROOT / "examples" / "gpt2_attention.ir"), random_seed=0, out_dir=out)
    (func,) = [p for p in out.iterdir() if p.is_dir()]
    return func


def test_export_matches_the_artifact_op_for_op(built, tmp_path):
    rep = export_coreml(built, tmp_path / "attn.mlpackage")
    assert rep.path == tmp_path / "attn.mlpackage" and (rep.path / "Manifest.json").is_file()
    art = Artifact.load(built)
    _, stmts, _ = mil_statements(art.mil_text)
    assert rep.ops + rep.consts == len(stmts)
    assert rep.weights == len(art.manifest.document["weights"]) > 0
    spec, prog = read_package(rep.path)
    assert [i.name for i in spec.description.input] == [e["name"] for e in art.manifest.document["inputs"]]
    ops = [op for op in prog.functions["main"].operations if op.op_type != "const"]
    mil_ops = [s for s in stmts if s.op != "const"]
    assert [(o.op_type, o.outputs[0].name) for o in ops] == [(s.op, s.results[0][1]) for s in mil_ops]
    # every weight of the package is the artifact's blob, bit for bit
    consts = {op.outputs[0].name: op.val.val for op in prog.functions["main"].operations if op.op_type == "const"}
    for w in art.manifest.document["weights"]:
        want = BlobReader(art.blobs[w["file"]]).read(w["offset"], np.float16).reshape(w["shape"])
        np.testing.assert_array_equal(np.asarray(consts[w["const"]]).view(np.uint16), want.view(np.uint16))


def test_export_of_an_imported_torch_model(tmp_path):
    torch = pytest.importorskip("torch")
    import anec

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
    m = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    im = anec.import_torch(m, (torch.randn(1, 16, 64),))
    im.save(tmp_path / "imp")
    res = CliRunner().invoke(main, ["compile", str(tmp_path / "imp" / "model.ir"), "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["export-coreml", str(tmp_path / "b"), "-o", str(tmp_path / "enc.mlpackage")])
    assert res.exit_code == 0, res.output
    assert "verified" in res.output and "equal model.mil" in res.output
    spec, _ = read_package(tmp_path / "enc.mlpackage")
    # the package has the model's logical I/O shapes; the device's rank-4 ones are inside it
    assert [list(o.type.multiArrayType.shape) for o in spec.description.input] == [[1, 16, 64]]
    assert [list(o.type.multiArrayType.shape) for o in spec.description.output] == [[1, 16, 64]]
    man = json.loads((tmp_path / "b" / "main" / "manifest.json").read_text())
    assert [e["shape"] for e in man["outputs"]] == [[1, 16, 1, 64]]


def test_verification_catches_a_different_artifact(built, tmp_path):
    rep = export_coreml(built, tmp_path / "a.mlpackage")
    other = tmp_path / "other"
    compile_module(parse_file(ROOT / "examples" / "gpt2_mlp.ir"), random_seed=0, out_dir=other)
    with pytest.raises(CoreMLExportError):
        verify_package(rep.path, Artifact.load(other / "mlp"))


def test_verification_catches_changed_weights(built, tmp_path):
    rep = export_coreml(built, tmp_path / "a.mlpackage")
    art = Artifact.load(built)
    w = art.manifest.document["weights"][0]
    data = bytearray(art.blobs[w["file"]])
    data[-2] ^= 0x7F  # flip bits in the last payload value
    art.blobs[w["file"]] = bytes(data)
    with pytest.raises(CoreMLExportError, match="differs"):
        verify_package(rep.path, art)


def test_reexport_replaces_the_package_and_refuses_other_paths(built, tmp_path):
    out = tmp_path / "m.mlpackage"
    export_coreml(built, out)
    export_coreml(built, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.mlpackage"]  # no temp dirs left
    (tmp_path / "plain.mlpackage").mkdir()
    (tmp_path / "plain.mlpackage" / "notes.txt").write_text("keep")
    with pytest.raises(CoreMLExportError, match="refusing"):
        export_coreml(built, tmp_path / "plain.mlpackage")
    assert (tmp_path / "plain.mlpackage" / "notes.txt").read_text() == "keep"
    with pytest.raises(CoreMLExportError, match=".mlpackage"):
        export_coreml(built, tmp_path / "model.bin")


def test_choosing_the_func(tmp_path):
    out = tmp_path / "b"
    compile_module(parse_file(ROOT / "examples" / "multi_func.ir"), random_seed=0, out_dir=out)
    funcs = sorted(p.name for p in out.iterdir() if p.is_dir())
    with pytest.raises(CoreMLExportError, match="--func"):
        export_coreml(out, tmp_path / "x.mlpackage")
    rep = export_coreml(out, tmp_path / "x.mlpackage", func=funcs[0])
    assert rep.ops > 0
    res = CliRunner().invoke(main, ["export-coreml", str(out), "-o", str(tmp_path / "y.mlpackage"),
                                    "--func", "nope"])
    assert res.exit_code == 1 and "no program 'nope'" in res.output


def test_tampered_or_missing_artifacts_are_errors(built, tmp_path):
    copy = tmp_path / "art"
    shutil.copytree(built, copy)
    (copy / "model.mil").write_text((copy / "model.mil").read_text() + "\n")
    res = CliRunner().invoke(main, ["export-coreml", str(copy), "-o", str(tmp_path / "t.mlpackage")])
    assert res.exit_code == 1 and "sha256" in res.output and "Traceback" not in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CoreMLExportError, match="no compiled program"):
        export_coreml(empty, tmp_path / "e.mlpackage")
    m = json.loads((built / "manifest.json").read_text())
    assert m["format"] == "anec-artifact/1"


def test_missing_extras_name_the_pip_command(monkeypatch):
    import sys

    with pytest.raises(MissingExtraError, match=r"anec\[coreml\]"):
        require("anec_no_such_module", "coreml", "anec export-coreml")
    monkeypatch.setitem(sys.modules, "torch", None)
    import anec

    with pytest.raises(MissingExtraError, match=r"pip install 'anec\[torch\]'"):
        anec.import_torch(object(), ())
