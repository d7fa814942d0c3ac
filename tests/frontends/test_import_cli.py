"""Saved torch programs through the CLI: ``anec import`` -> ``anec compile`` -> ``anec run``.

Hugging Face models saved with ``torch.export.save`` return ``ModelOutput``
pytrees, which a fresh process has not registered with torch's pytree; the
import reads them by their keys. ``anec run`` / ``anec interp`` then take the
inputs the torch module takes (token ids) and apply the import's host steps.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.frontends.torch.imported import ImportedModel
from tests.frontends.conftest import torch
from tolerances import assert_close as tol_close  # noqa: E402

transformers = pytest.importorskip("transformers")

SEQ = 8
VOCAB = 256
SIM_VS_TORCH_ULPS = 8


def _t5():
    cfg = transformers.T5Config(vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    return transformers.T5EncoderModel(cfg)


def _qwen2():
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   use_cache=False)
    return transformers.Qwen2ForCausalLM(cfg)


def _distilbert():
    cfg = transformers.DistilBertConfig(vocab_size=VOCAB, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                                        max_position_embeddings=64)
    return transformers.DistilBertModel(cfg)


MODELS = {"t5_encoder": _t5, "qwen2": _qwen2, "distilbert": _distilbert}


def cli(*args, ok: bool = True):
    res = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert res.exit_code == 0, res.output
    return res


def save_program(module, args, path) -> None:
    with torch.no_grad():
        ep = torch.export.export(module, args, strict=False)
    torch.export.save(ep, str(path))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_saved_hugging_face_programs_import_compile_and_run(name, tmp_path):
    torch.manual_seed(7)
    model = MODELS[name]().eval()
    ids = torch.randint(0, VOCAB, (1, SEQ), generator=torch.Generator().manual_seed(3))
    save_program(model, (ids,), tmp_path / "m.pt2")
    with torch.no_grad():
        ref = model(ids)
    key = "logits" if name == "qwen2" else "last_hidden_state"
    assert type(ref).__module__.startswith("transformers")  # a ModelOutput pytree
    np.save(tmp_path / "ids.npy", ids.numpy())

    res = cli("import", tmp_path / "m.pt2", "-o", tmp_path / "imp")
    assert f"output {key}: float32[1, {SEQ}," in res.output
    cli("compile", tmp_path / "imp" / "model.ir", "-o", tmp_path / "build")
    # the build of an import runs with the module's inputs: ids in, torch's output shape out
    res = cli("run", tmp_path / "build", "--backend", "sim", "--input", f"input_ids={tmp_path / 'ids.npy'}",
              "-o", tmp_path / "out.npz")
    assert "(compiled now)" not in res.output
    got = np.load(tmp_path / "out.npz")
    want = ref[key].numpy()
    assert sorted(got.files) == [key] and got[key].shape == want.shape
    tol_close(got[key], want, f"import-cli/{name}:{key}:sim-vs-torch", SIM_VS_TORCH_ULPS)
    # the same through the import directory, the func dir of the build, and the interpreter
    res = cli("run", tmp_path / "build" / "main", "--backend", "sim", "--input", f"input_ids={tmp_path / 'ids.npy'}",
              "-o", tmp_path / "out2.npz")
    np.testing.assert_array_equal(np.load(tmp_path / "out2.npz")[key], got[key])  # bit for bit: one artifact
    res = cli("interp", tmp_path / "imp", "--input", f"input_ids={tmp_path / 'ids.npy'}", "-o", tmp_path / "i.npz")
    assert f"{key}  [1, {SEQ}, " in res.output
    tol_close(np.load(tmp_path / "i.npz")[key], want, f"import-cli/{name}:{key}:interp-vs-torch", SIM_VS_TORCH_ULPS)


@dataclasses.dataclass
class _Out:
    first: torch.Tensor
    rest: tuple


class _Nested(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = self.lin(x)
        return {"a": h, "b": (torch.relu(h), [h * 2.0])}


class _Dataclass(torch.nn.Module):
    def forward(self, x):
        return _Out(x + 1.0, (x * 3.0,))


def test_nested_and_unregistered_output_pytrees_import(tmp_path):
    from anec.frontends.torch.fx_import import import_torch
    from anec.frontends.torch.export import load_pt2

    x = torch.randn(2, 16, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    nested = _Nested().eval()
    save_program(nested, (x,), tmp_path / "nested.pt2")
    im = import_torch(load_pt2(tmp_path / "nested.pt2"))
    assert im.output_names == ["a", "b_0", "b_1_0"]
    with torch.no_grad():
        ref = nested(x)
    outs = im.runner(backend="interp", mode="fp32")(x)
    for got, want in zip(outs, [ref["a"], ref["b"][0], ref["b"][1][0]]):
        tol_close(got, want.numpy(), "import-cli/nested-pytree:interp-fp32", 4)

    torch.utils._pytree.register_dataclass(_Out, serialized_type_name="anec_tests._Out")
    try:
        save_program(_Dataclass(), (x,), tmp_path / "dc.pt2")
    finally:
        torch.utils._pytree._deregister_pytree_node(_Out)
    # a fresh process does not know the class: the outputs are read by their keys
    im = import_torch(load_pt2(tmp_path / "dc.pt2"))
    assert im.output_names == ["first", "rest_0"]
    a, b = im.runner(backend="interp", mode="fp32")(x)
    tol_close(a, x.numpy() + 1.0, "import-cli/dataclass-pytree:interp-fp32", 4)
    tol_close(b, x.numpy() * 3.0, "import-cli/dataclass-pytree:interp-fp32", 4)


def test_a_program_torch_cannot_load_reports_torchs_own_error(tmp_path, monkeypatch):
    from torch.export.pt2_archive import _package

    save_program(torch.nn.ReLU(), (torch.randn(2, 4),), tmp_path / "m.pt2")

    def broken(*args, **kwargs):
        try:
            raise NotImplementedError("Deserializing acme.Output in pytree is not registered.")
        except NotImplementedError as e:
            raise RuntimeError("We ran into an error when deserializing the saved file. "
                               "Please check the warnings above for possible errors.") from e

    monkeypatch.setattr(_package, "load_pt2", broken)
    for flags in ([], ["--traceback"]):
        res = CliRunner().invoke(main, [*flags, "import", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "imp")])
        assert res.exit_code == 1, res.output
        assert "NotImplementedError: Deserializing acme.Output in pytree is not registered." in res.output
        assert "warnings above" not in res.output
        assert "Traceback" not in res.output


def test_run_on_an_import_names_the_torch_inputs(tmp_path):
    import anec

    torch.manual_seed(0)
    emb = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 8)).eval()
    ids = torch.randint(0, 32, (1, 4))
    anec.import_torch(emb, (ids,)).save(tmp_path / "imp")
    np.save(tmp_path / "ids.npy", ids.numpy())
    res = cli("run", tmp_path / "imp", "--backend", "sim", "--input", f"ids={tmp_path / 'ids.npy'}", ok=False)
    assert res.exit_code == 1 and "no input 'ids'" in res.output and "input" in res.output
    res = cli("run", tmp_path / "imp", "--backend", "sim", "--random-inputs", "0")
    assert "(compiled now)" in res.output and "output  [1, 4, 8] float32" in res.output
    # the import's model.ir takes the looked-up rows: torch's input names point to the directory
    name = ImportedModel.load(tmp_path / "imp").input_names[0]
    np.save(tmp_path / "ids.npy", ids.numpy())
    for cmd in ("run", "interp"):
        res = cli(cmd, tmp_path / "imp" / "model.ir", "--input", f"{name}={tmp_path / 'ids.npy'}", ok=False)
        assert res.exit_code == 1 and f"anec {cmd} {tmp_path / 'imp'} --input {name}=" in res.output
    # the build refuses to run once its import is gone, with a hint
    cli("compile", tmp_path / "imp" / "model.ir", "-o", tmp_path / "b")
    (tmp_path / "imp").rename(tmp_path / "moved")
    res = cli("run", tmp_path / "b", "--backend", "sim", "--random-inputs", "0", ok=False)
    assert res.exit_code == 1 and "is gone" in res.output


def test_help_shows_whole_command_summaries_and_import_marks_output_required():
    res = cli("--help")
    commands = res.output.split("Commands:")[1]
    assert "..." not in commands
    assert "Import a saved torch.export program (FILE.pt2) as anec IR in DIR." in " ".join(commands.split())
    assert "..." not in cli("models", "--help").output.split("Commands:")[1]
    assert "[required, except with --ops]" in " ".join(cli("import", "--help").output.split())


def test_train_without_a_tokenizer_suggests_token_id_data(tmp_path):
    from anec.diagnostics import TrainingError
    from anec.training.data import load_tokens

    (tmp_path / "ckpt").mkdir()
    (tmp_path / "t.txt").write_text("some text to train on")
    with pytest.raises(TrainingError) as e:
        load_tokens(tmp_path / "t.txt", tmp_path / "ckpt", 100)
    assert "--data ids.npy" in e.value.hint and "prompt-ids" not in e.value.hint


def test_a_torch_layer_inside_sequential_is_located_in_the_users_file():
    import anec
    from anec.frontends import TorchImportError

    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.LogSoftmax(-1)))
    with pytest.raises(TorchImportError) as e:
        anec.import_torch(m.eval(), (torch.randn(2, 8),))  # the line the error points to
    err = e.value
    assert err.span is not None and err.span.source.name == __file__
    line = err.span.source.text[:err.span.start].count("\n") + 1
    with open(__file__) as f:
        assert "the line the error points to" in f.read().splitlines()[line - 1]
    assert "in module '1.1' (LogSoftmax)" in err.render()
    assert "torch's own code" in err.render()


class _DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # data-dependent control flow
            return x * 2
        return x


def test_data_dependent_control_flow_is_located_without_torchs_graph_dumps(capfd):
    import anec
    from anec.frontends import TorchImportError

    with pytest.raises(TorchImportError) as e:
        anec.import_torch(_DataDependent(), (torch.randn(2, 8),))
    out, err = capfd.readouterr()
    assert "def forward" not in out + err  # torch prints its partial graph once per export wrapper
    text = e.value.render()
    assert "GuardOnDataDependentSymNode" in text and "if x.sum() > 0:" in text
    assert e.value.span is not None and e.value.span.source.name == __file__


def test_check_reads_the_weights_an_imported_model_ir_names(tmp_path):
    import anec

    m = torch.nn.Linear(8, 8).eval()
    with torch.no_grad():
        m.weight[0, 0] = 1e6  # beyond fp16: saved as inf
    anec.import_torch(m, (torch.randn(2, 8),)).save(tmp_path / "imp")
    res = cli("check", tmp_path / "imp" / "model.ir", ok=False)
    assert res.exit_code == 1 and "ANE-FP16-RANGE" in res.output and "not checked" not in res.output
    (tmp_path / "imp" / "weights.safetensors").unlink()  # a directive naming a missing file: not checked
    res = cli("check", tmp_path / "imp" / "model.ir")
    assert "weight values: not checked" in res.output


def test_a_hostile_import_link_is_refused(tmp_path):
    """OUT/imported.json is read as a hostile file: a symbolic link, a FIFO or an oversized file
    is refused with the path named; one that is not a link object is refused too."""
    import os

    from anec.diagnostics import AnecError
    from anec.frontends.torch.imported import LINK_FILE, LINK_MAX, linked_import

    out = tmp_path / "build"
    out.mkdir()
    assert linked_import(out) is None
    real = tmp_path / "elsewhere.json"
    real.write_text('{"format": "anec-import-link/1", "import": "../imp"}')
    (out / LINK_FILE).symlink_to(real)
    with pytest.raises(AnecError, match="symbolic link"):
        linked_import(out)
    (out / LINK_FILE).unlink()
    (out / LINK_FILE).write_bytes(b" " * (LINK_MAX + 1))
    with pytest.raises(AnecError, match="more than the"):
        linked_import(out)
    (out / LINK_FILE).unlink()
    os.mkfifo(out / LINK_FILE)
    with pytest.raises(AnecError):
        linked_import(out)
    (out / LINK_FILE).unlink()
    (out / LINK_FILE).write_text("[1, 2]")
    with pytest.raises(AnecError, match="not an anec import link"):
        linked_import(out)
