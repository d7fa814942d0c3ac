"""``anec export-coreml`` on the import of every model family the project imports.

The package must load in coremltools with the model's logical I/O shapes, and
verification must accept exactly coremltools' backend rewrites (silu fusion...)
while still refusing a package that differs from the artifact.
"""

from __future__ import annotations

import pytest

from anec.compiler import compile_module
from anec.frontends import CoreMLExportError
from anec.frontends import coreml_fusions
from anec.frontends.coreml import export_coreml
from anec.frontends.coreml_verify import read_package, verify_package
from anec.mil.multi_program import load_any
from tests.frontends.conftest import CASES, assert_close, torch

pytest.importorskip("coremltools")

FAMILIES = ["llama", "gpt2", "bert", "vit", "t5_encoder", "mlp"]
CNN_FAMILIES = ["resnet_block", "mobilenet_block", "convnext_block", "audio_frontend", "unet_up", "yolo_head",
                "vit_patch16"]
"""The convolutional families of tests/frontends/test_import_spatial.py (native conv, pool and
upsample ops in the package), and ViT-B/16's patch embedding (stride 16: beyond the native
conv's limits, one conv over the patches)."""


def _t5():
    import transformers

    torch.manual_seed(6)
    cfg = transformers.T5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    return transformers.T5EncoderModel(cfg).eval(), (torch.randint(0, 256, (1, 8)),)


def build(name, tmp_path):
    import anec

    if name in CNN_FAMILIES:
        from tests.frontends.test_import_spatial import PatchEmbed, _models

        torch.manual_seed(8)
        module, args = (PatchEmbed(16).eval(), (torch.randn(1, 3, 32, 32),)) if name == "vit_patch16" \
            else _models()[name]
    else:
        module, args = _t5() if name == "t5_encoder" else CASES[name]()
    im = anec.import_torch(module, args)
    out = tmp_path / "b"
    compile_module(im.module, weights=im.weights, out_dir=out)
    return im, out / im.name, module


@pytest.mark.parametrize("name", FAMILIES + CNN_FAMILIES)
def test_every_family_exports_with_logical_io(name, tmp_path):
    im, art_dir, module = build(name, tmp_path)
    rep = export_coreml(art_dir, tmp_path / "m.mlpackage")
    spec, prog = read_package(rep.path)
    program = {v.name: list(v.type.shape) for v in im.func.inputs}
    # the package takes the program's inputs and returns torch's outputs, in their logical shapes
    assert [(i.name, list(i.type.multiArrayType.shape)) for i in spec.description.input] == \
        [(v.name, program[v.name]) for v in im.func.inputs]
    want_out = [(o["program_output"], o["shape"]) for o in im.outputs if o.get("kind") == "device"]
    assert [(o.name, list(o.type.multiArrayType.shape)) for o in spec.description.output] == want_out
    ops = [op.op_type for op in prog.functions["main"].operations]
    if name in ("llama", "mlp"):  # SiLU models: coremltools fused mul(x, sigmoid(x)) into silu
        assert "silu" in ops and "sigmoid" not in ops
        assert any("silu(x) x" in c for c in rep.checks)
    if name in CNN_FAMILIES:  # the native spatial ops, one per torch layer, as in model.mil
        from tests.frontends.test_import_spatial import NATIVE_MIL, torch_native_counts

        assert {op: ops.count(op) for op in NATIVE_MIL} == torch_native_counts(module)


def test_prediction_where_coremltools_can_run_it(tmp_path):
    import numpy as np

    import coremltools as ct

    try:  # coremltools predicts through Core ML, which its Linux wheels do not include
        import coremltools.libcoremlpython  # noqa: F401
    except ImportError:
        pytest.skip("coremltools cannot predict on this platform (no coremltools.libcoremlpython)")
    im, art_dir, _ = build("mlp", tmp_path)
    export_coreml(art_dir, tmp_path / "m.mlpackage")
    model = ct.models.MLModel(str(tmp_path / "m.mlpackage"))
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    got = np.asarray(model.predict({"input": x})["output"])
    with im.runner(backend="interp", mode="fp16") as run:
        (want,) = run(x)
    assert got.shape == want.shape == (4, 10)
    assert_close([got], [want], ["output"], "Core ML vs the fp16 interpreter")


def test_without_the_fusion_table_a_silu_model_is_refused_with_a_hint(tmp_path, monkeypatch):
    _, art_dir, _ = build("mlp", tmp_path)
    monkeypatch.setattr(coreml_fusions, "FUSIONS", ())
    with pytest.raises(CoreMLExportError) as e:
        export_coreml(art_dir, tmp_path / "m.mlpackage")
    assert "1 more 'silu'" in str(e.value) and "1 fewer 'sigmoid'" in str(e.value)
    assert "FUSIONS" in e.value.hint


def test_a_package_of_another_model_is_refused_by_op_kind(tmp_path):
    _, silu_dir, _ = build("mlp", tmp_path / "a")
    torch.manual_seed(5)
    relu = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    import anec

    im = anec.import_torch(relu, (torch.randn(4, 64),))
    compile_module(im.module, weights=im.weights, out_dir=tmp_path / "r")
    rep = export_coreml(silu_dir, tmp_path / "silu.mlpackage")
    with pytest.raises(CoreMLExportError) as e:
        verify_package(rep.path, load_any(tmp_path / "r" / "main"))
    assert "'relu'" in str(e.value) and "'silu'" in str(e.value)


def test_the_backend_passes_are_the_ones_coremltools_runs_under_empty():
    """Derived from coremltools: the backend passes that survive PassPipeline.EMPTY are exactly
    the ones anec accounts for (a new rewriting pass in a coremltools upgrade fails here)."""
    import coremltools as ct
    from coremltools.converters.mil.converter import _construct_other_pipelines

    _, backend = _construct_other_pipelines(ct.PassPipeline.EMPTY, "milinternal", "mlprogram")
    assert list(backend.passes) == list(coreml_fusions.BACKEND_PASSES)
    fusing = {p for p, what in coreml_fusions.BACKEND_PASSES.items() if what == "FUSIONS"}
    assert fusing == {f.pass_name for f in coreml_fusions.FUSIONS}


def test_anec_models_llama_programs_export(tmp_path):
    """anec's own Llama path (`anec models export llama`): every program, SiLU fused."""
    import transformers
    from click.testing import CliRunner

    from anec.cli import main

    torch.manual_seed(5)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                   max_position_embeddings=256)
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(tmp_path / "ckpt")

    def run(*args):
        res = CliRunner().invoke(main, [str(a) for a in args])
        assert res.exit_code == 0, res.output
        return res.output

    run("models", "export", "llama", tmp_path / "ckpt", "-o", tmp_path / "exp", "--prefill", "256", "--cache", "256")
    run("models", "compile", tmp_path / "exp", "-o", tmp_path / "build")
    funcs = sorted(p.name for p in (tmp_path / "build").iterdir() if (p / "manifest.json").is_file())
    assert len(funcs) == 3
    for func in funcs:
        out = run("export-coreml", tmp_path / "build", "--func", func, "-o", tmp_path / f"{func}.mlpackage")
        _, prog = read_package(tmp_path / f"{func}.mlpackage")
        ops = [op.op_type for op in prog.functions["main"].operations]
        if func != "lm_head_s256":
            assert "silu(x) x1" in out and ops.count("silu") == 1 and "sigmoid" not in ops


WIDE = """func wide(%x: fp32[2, 32]) {
  %xh = cast(%x, dtype=fp16) : fp16[2, 32]
  %xt = reshape(%xh, shape=[1, 2, 1, 32]) : fp16[1, 2, 1, 32]
  %xp = transpose(%xt, perm=[0, 3, 2, 1]) : fp16[1, 32, 1, 2]
  %w = const(weight="w") : fp16[16400, 32, 1, 1]
  %y = conv1x1(%xp, %w) : fp16[1, 16400, 1, 2]
  %z = relu(%y) : fp16[1, 16400, 1, 2]
  return %z
}
"""


def test_a_chunked_output_is_one_package_output(tmp_path):
    """An output legalize returns in pieces (ANE-CONV-CHANNELS) is their concat in the package,
    and an input of rank 2 is reshaped inside it."""
    from anec.ir.parser import parse

    out = tmp_path / "b"
    compile_module(parse(WIDE), random_seed=0, out_dir=out)
    art = load_any(out / "wide")
    assert [e["name"] for e in art.manifest.document["outputs"]] == ["z__c0", "z__c1"]
    rep = export_coreml(out, tmp_path / "w.mlpackage")
    spec, prog = read_package(rep.path)
    assert [(f.name, list(f.type.multiArrayType.shape)) for f in [*spec.description.input, *spec.description.output]] \
        == [("x", [2, 32]), ("z", [1, 16400, 1, 2])]
    ops = list(prog.functions["main"].operations)
    first = next(op for op in ops if op.op_type != "const")
    assert first.op_type == "reshape" and first.outputs[0].name == "x_device" and first.x.name == "x"
    assert ops[-1].op_type == "concat" and ops[-1].outputs[0].name == "z"
    assert [v.name for v in ops[-1].values] == ["z__c0", "z__c1"]
