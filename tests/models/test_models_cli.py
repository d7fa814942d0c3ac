"""`anec models export`, `anec generate`, `anec embed`, and the shipped tiny GPT-2 script."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from anec.cli import main
from anec.compiler import compile_module
from anec.ir.parser import parse_file
from anec.models.generate import decoder_frontend
from anec.models.hf import load_checkpoint
from anec.runtime import Runtime
from tests.conftest import ROOT
from tests.models.conftest import hf_greedy, hf_model


def run(*args: str, ok: bool = True):
    res = CliRunner().invoke(main, [str(a) for a in args])
    if ok:
        assert res.exit_code == 0, res.output
    return res


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("make_tiny_gpt2", ROOT / "examples" / "make_tiny_gpt2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path_factory.mktemp("tiny-gpt2")
    mod.make(out)
    return out


def test_export_gpt2_files_compile_and_match_the_frontend(gpt2_dir, tmp_path):
    out = tmp_path / "gpt2"
    res = run("models", "export", "gpt2", gpt2_dir, "-o", out, "--prefill", "128", "--cache", "256")
    assert "wrote 7 programs in 4 files" in res.output  # the MLP of width 128 serves both
    info = json.loads((out / "model.json").read_text())
    assert info["buckets"]["prefill"] == [128] and info["buckets"]["decode_cache"] == [256]
    assert sorted(p.name for p in out.glob("*.ir")) == sorted(info["files"])
    text = (out / "prefill_s128.ir").read_text()
    assert 'weights "weights.safetensors"' in text
    assert 'const(weight="transformer.h.0.attn.c_attn.weight") : fp16[384, 128, 1, 1]' in text
    # the exported file compiles on its own (weights directive) and computes what the engine does
    module = parse_file(out / "prefill_s128.ir")
    art = compile_module(module).artifacts["L0_attn_p128"]
    fe = decoder_frontend(load_checkpoint(gpt2_dir), 49152)
    mem = compile_module(fe_module(fe.attn(0, 128)), weights={k: fe.weight(k) for k in _keys(fe.attn(0, 128))})
    x = np.random.default_rng(0).standard_normal((1, 128, 1, 128)).astype(np.float32)
    with Runtime(backend="sim") as rt:
        a = rt.load(art)(x=x)
        b = rt.load(mem.artifacts["L0_attn_p128"])(x=x)
    for k in ("h", "k", "v"):
        np.testing.assert_array_equal(a[k], b[k])


def fe_module(graph):
    from anec.ir.builder import Builder

    return Builder.module(graph)


def _keys(graph):
    from anec.models.programs import weight_keys

    return weight_keys(graph)


def test_export_llama_with_lora_inputs_and_bert(llama_dir, minilm_dir, tmp_path):
    run("models", "export", "llama", llama_dir, "-o", tmp_path / "l", "--lora", "q_proj,v_proj", "--lora-rank", "4")
    info = json.loads((tmp_path / "l" / "model.json").read_text())
    assert info["lora"]["rank"] == 4
    slots = info["lora"]["inputs"]["L0_attn_p256"]
    assert [s["a_input"] for s in slots] == ["lora_q_proj_A", "lora_v_proj_A"]
    g = parse_file(tmp_path / "l" / "prefill_s256.ir").funcs["L0_attn_p256"]
    assert str(g.value("lora_v_proj_B").type) == "fp16[1, 1, 64, 4]"
    res = run("models", "export", "bert", minilm_dir, "-o", tmp_path / "b", "--prefill", "32,64")
    assert "wrote 24 programs in 2 files" in res.output
    assert len(parse_file(tmp_path / "b" / "encoder_s32.ir").funcs) == 12


def test_generate_with_the_tiny_gpt2_script(tiny_gpt2):
    ids = list(b"Hello")
    res = run("generate", tiny_gpt2, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", "20",
              "--backend", "sim", "-q")
    got = [int(t) for t in res.output.strip().split(",")]
    assert got == hf_greedy(hf_model(tiny_gpt2), ids, 20)
    pytest.importorskip("tokenizers")
    res = run("generate", tiny_gpt2, "--prompt", "Hello", "--max-new-tokens", "8", "--backend", "sim", "-q")
    assert res.output.startswith("Hello") and len(res.output.rstrip("\n")) > len("Hello")
    sampled = run("generate", tiny_gpt2, "--prompt", "Hi", "--temperature", "1.0", "--top-k", "5",
                  "--seed", "3", "--backend", "sim", "-q").output
    assert sampled == run("generate", tiny_gpt2, "--prompt", "Hi", "--temperature", "1.0", "--top-k", "5",
                          "--seed", "3", "--backend", "sim", "-q").output


def test_embed_prints_similarities_and_vectors(minilm_dir):
    pytest.importorskip("tokenizers")
    res = run("embed", minilm_dir, "A man is eating food.", "A man is eating bread.", "The movie was great.",
              "--backend", "sim", "-q")
    rows = [line.split()[:3] for line in res.output.strip().splitlines()]
    sim = np.array(rows, dtype=float)
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-3)
    assert sim[0, 1] > 0.5 > sim[0, 2]
    res = run("embed", minilm_dir, "hello", "--backend", "sim", "-q")
    vec = json.loads(res.output)
    assert vec["sentence"] == "hello" and len(vec["embedding"]) == 384


def test_cli_errors_are_diagnostics(tmp_path, gpt2_dir, monkeypatch):
    res = run("generate", tmp_path / "nope", "--prompt-ids", "1", ok=False)
    assert res.exit_code == 1 and "does not exist" in res.output and "Traceback" not in res.output
    res = run("models", "export", "bert", gpt2_dir, "-o", tmp_path / "x", ok=False)
    assert res.exit_code == 1 and "not bert" in res.output
    res = run("generate", gpt2_dir, "--prompt", "hi", "--prompt-ids", "1", ok=False)
    assert res.exit_code == 1 and "exactly one" in res.output
    res = run("generate", gpt2_dir, "--prompt-ids", "1,x", ok=False)
    assert res.exit_code == 2
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    res = run("generate", gpt2_dir, "--prompt", "hi", ok=False)
    assert res.exit_code == 1 and "needs the 'tokenizers' package" in res.output
    assert "--prompt-ids" in res.output


def test_progress_bar_only_on_a_terminal():
    import io

    from anec.models.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    for stream, shown in ((io.StringIO(), False), (Tty(), True)):
        p = Progress(stream=stream)
        p.start("compile", 3)
        for name in ("a", "b", "c"):
            p.step(name)
        p.finish()
        assert bool(stream.getvalue()) is shown
    tty = Tty()
    Progress(enabled=False, stream=tty).start("generate", 2)  # --quiet
    assert tty.getvalue() == ""
    p = Progress(stream=(tty := Tty()))
    p.start("generate", 4)
    p.step()
    assert "[######" in tty.getvalue() and "1/4" in tty.getvalue()
