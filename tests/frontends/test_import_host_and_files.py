"""Host work around the program, the saved directory, and the ``anec import`` CLI.

* embedding lookups of an integer input run on the host; argmax, topk and
  sampling at the outputs run on the host; the runner applies them and takes
  and returns the arrays the torch module does;
* ``ImportedModel.save`` writes a directory that ``anec compile`` compiles with
  no options, whose IR ``anec fmt`` leaves unchanged, and that loads back;
* ``anec import FILE.pt2 -o DIR`` does the same from a saved torch.export program.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import anec
from anec.cli import main
from anec.frontends import TorchImportError
from anec.frontends.torch.imported import ImportedModel
from anec.ir.printer import format_text
from tests.frontends.conftest import assert_close, reference

torch = pytest.importorskip("torch")
nn = torch.nn


class TinyLM(nn.Module):
    """Embedding, a hidden layer, an LM head; returns the logits and the greedy tokens."""

    def __init__(self, vocab=64, d=32):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(16, d)
        self.hidden = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        h = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        logits = self.head(torch.tanh(self.hidden(h)))
        return {"logits": logits, "tokens": logits.argmax(-1)}


def _tiny_lm():
    torch.manual_seed(0)
    m = TinyLM().eval()
    ids = torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(1))
    return m, ids


def test_embedding_and_argmax_run_on_the_host():
    m, ids = _tiny_lm()
    im = anec.import_torch(m, (ids,))
    assert im.input_names == ["ids"] and im.output_names == ["logits", "tokens"]
    (step,) = im.host_steps
    assert step["kind"] == "embedding" and step["weight"] == "emb.weight" and step["input"] == "ids"
    assert [v.name for v in im.func.inputs] == [step["output"]]
    tokens = next(o for o in im.outputs if o["name"] == "tokens")
    assert tokens["kind"] == "host" and tokens["ops"][0]["op"] == "argmax"
    assert tokens["source"] == "logits"  # the host reads the program output the model returns anyway
    assert [v.name for v in im.func.outputs] == ["logits"]
    ref = reference(m, (ids,))
    with im.runner(backend="sim") as run:
        logits, toks = run(ids)
    assert_close([logits], [ref[0]], ["logits"], "sim")
    assert toks.dtype == np.int64 and toks.shape == (1, 8)
    np.testing.assert_array_equal(toks, logits.argmax(-1))
    top2 = np.sort(ref[0], -1)[..., -2:]
    sure = (top2[..., 1] - top2[..., 0]) > 0.05
    np.testing.assert_array_equal(toks[sure], ref[1][sure])


def test_runner_checks_ids_and_shapes():
    m, ids = _tiny_lm()
    im = anec.import_torch(m, (ids,))
    run = im.runner(backend="interp")
    with pytest.raises(anec.AnecError, match="outside"):
        run(torch.full((1, 8), 99))
    with pytest.raises(anec.AnecError, match="static shapes"):
        run(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(anec.AnecError, match="no input"):
        run(idz=ids)
    with pytest.raises(anec.AnecError, match="missing input"):
        run()


def test_topk_and_sampling_at_the_outputs():
    class Sampler(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 32)

        def forward(self, x):
            probs = torch.softmax(self.lin(x), -1)
            top = torch.topk(probs, 3, dim=-1)
            return top.values, top.indices, torch.multinomial(probs[0], 2, replacement=True)

    torch.manual_seed(3)
    m = Sampler().eval()
    x = torch.randn(1, 4, 16)
    im = anec.import_torch(m, (x,))
    assert {o["kind"] for o in im.outputs} == {"host"}
    # the program returns what the host reads: the probabilities (and their first row)
    assert [v.type.shape for v in im.func.outputs] == [(4, 32), (1, 4, 32)]
    ref = reference(m, (x,))
    with im.runner(backend="sim", seed=0) as run:
        values, indices, samples = run(x)
    np.testing.assert_allclose(values, ref[0], atol=5e-3)
    assert indices.dtype == np.int64 and indices.shape == (1, 4, 3)
    assert samples.shape == (4, 2) and samples.min() >= 0 and samples.max() < 32
    probs = im.runner(backend="interp").program({"x": x.numpy()})
    p = probs["multinomial_in"]
    assert np.all(p[np.arange(4)[:, None], samples] > 0)


def test_integer_mask_input_on_the_device():
    class Masked(nn.Module):
        def forward(self, q, mask):
            return torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=mask.bool()[:, None, None, :])

    q = torch.randn(1, 2, 8, 16, generator=torch.Generator().manual_seed(4))
    mask = torch.ones(1, 8, dtype=torch.int32)
    mask[0, 6:] = 0
    im = anec.import_torch(Masked(), (q, mask))
    (entry,) = [e for e in im.inputs if e["name"] == "mask"]
    assert entry["program_input"] == "mask" and entry["dtype"] == "int32"
    assert any("mask" in n and "fp32 on the device" in n for n in im.notes)
    with im.runner(backend="sim") as run:
        (out,) = run(q, mask)
    assert_close([out], reference(Masked(), (q, mask)), ["output"], "sim")


def test_save_compiles_alone_formats_stably_and_loads(tmp_path):
    m, ids = _tiny_lm()
    im = anec.import_torch(m, (ids,))
    out = im.save(tmp_path / "lm")
    text = (out / "model.ir").read_text()
    assert text.startswith("// Imported from PyTorch")
    assert 'weights "weights.safetensors"' in text
    assert format_text(text, "model.ir") == text  # anec fmt leaves it unchanged
    res = CliRunner().invoke(main, ["fmt", "--check", str(out / "model.ir")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["compile", str(out / "model.ir"), "-o", str(tmp_path / "build")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "build" / "main" / "model.mil").is_file()
    meta = json.loads((out / "import.json").read_text())
    assert meta["format"] == "anec-torch-import/1" and meta["host_steps"] == im.host_steps
    back = ImportedModel.load(out)
    assert back.module == im.module and set(back.weights) == set(im.weights)
    a = im.runner(backend="interp")(ids)
    b = back.runner(backend="interp")(ids)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_save_refuses_to_replace_other_directories(tmp_path):
    m, ids = _tiny_lm()
    im = anec.import_torch(m, (ids,))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("mine")
    with pytest.raises(TorchImportError, match="refusing"):
        im.save(tmp_path / "data")
    assert (tmp_path / "data" / "keep.txt").read_text() == "mine"
    im.save(tmp_path / "imp")
    im.save(tmp_path / "imp")  # an import directory is replaced
    with pytest.raises(TorchImportError, match="not an import directory"):
        ImportedModel.load(tmp_path / "data")


def test_cli_import_pt2_compile_and_run(tmp_path):
    torch.manual_seed(6)
    m = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 16)).eval()
    x = torch.randn(2, 8, 32)
    ep = torch.export.export(m, (x,))
    torch.export.save(ep, str(tmp_path / "mlp.pt2"))
    runner = CliRunner()
    res = runner.invoke(main, ["import", str(tmp_path / "mlp.pt2"), "-o", str(tmp_path / "imp")])
    assert res.exit_code == 0, res.output
    assert "program input %input" in res.output and "anec compile" in res.output
    res = runner.invoke(main, ["compile", str(tmp_path / "imp" / "model.ir"), "-o", str(tmp_path / "build")])
    assert res.exit_code == 0, res.output
    np.save(tmp_path / "x.npy", x.numpy())
    res = runner.invoke(main, ["run", str(tmp_path / "build" / "main"), "--input", f"input={tmp_path / 'x.npy'}",
                               "-o", str(tmp_path / "y.npz")])
    assert res.exit_code == 0, res.output
    y = np.load(tmp_path / "y.npz")["output"]
    assert_close([y], reference(m, (x,)), ["output"], "cli")


def test_cli_lists_the_supported_ops():
    res = CliRunner().invoke(main, ["import", "--ops"])
    assert res.exit_code == 0
    for op in ("aten.addmm.default", "aten.scaled_dot_product_attention.default", "aten.embedding.default"):
        assert op in res.output


def test_docs_torch_md_lists_every_supported_op():
    from anec.frontends.lowerings import HANDLERS, format_table
    from tests.conftest import ROOT

    text = (ROOT / "docs" / "torch.md").read_text()
    assert format_table(markdown=True) in text, "regenerate: anec import --ops --markdown (docs/torch.md)"
    for name in HANDLERS:
        _, op, overload = name.split(".")
        getattr(getattr(torch.ops.aten, op), overload)  # every row is a real ATen overload


def test_io_names_mil_cannot_spell_are_renamed_in_the_program_only():
    class Keywords(nn.Module):
        def forward(self, tensor, string):
            return {"bool": tensor * 2, "x": string + tensor}

    a, b = torch.randn(2, 8), torch.randn(2, 8)
    im = anec.import_torch(Keywords(), (a, b))
    assert im.input_names == ["tensor", "string"] and im.output_names == ["bool", "x"]
    assert [v.name for v in im.func.inputs] == ["tensor_in", "string_in"]
    assert [v.name for v in im.func.outputs] == ["bool_out", "x"]
    assert im.stats["transposes"] == 0  # nothing reads the channel layout: inputs stay as they are
    with im.runner(backend="sim") as run:
        out = run.run(tensor=a, string=b)
    np.testing.assert_allclose(out["bool"], (a * 2).numpy(), atol=1e-2)
    np.testing.assert_allclose(out["x"], (a + b).numpy(), atol=1e-2)
