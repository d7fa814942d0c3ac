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
    assert "wrote 3 funcs in 3 files" in res.output  # one func per bucket, and the LM head
    info = json.loads((out / "model.json").read_text())
    assert info["format"] == "anec-model/2"
    assert info["buckets"]["prefill"] == [128] and info["buckets"]["decode_cache"] == [256]
    assert info["files"] == {"prefill_s128.ir": ["prefill_s128"], "decode_w128_t256.ir": ["decode_w128_t256"],
                             "lm_head.ir": ["lm_head_s128"]}
    assert sorted(p.name for p in out.glob("*.ir")) == sorted(info["files"])
    text = (out / "prefill_s128.ir").read_text()
    assert 'weights "weights.safetensors"' in text
    assert 'const(weight="transformer.h.1.attn.c_attn.weight") : fp16[384, 128, 1, 1]' in text
    # the exported file compiles on its own (weights directive) and computes what the engine does
    module = parse_file(out / "prefill_s128.ir")
    art = compile_module(module).artifacts["prefill_s128"]
    assert len(art.manifest.document["stages"]) == 2  # 25 weights: the compiler cuts the two layers apart
    fe = decoder_frontend(load_checkpoint(gpt2_dir), 49152)
    g = fe.prefill(128)
    mem = compile_module(fe_module(g), weights={k: fe.weight(k) for k in _keys(g)})
    x = np.random.default_rng(0).standard_normal((1, 128, 1, 128)).astype(np.float32)
    with Runtime(backend="sim") as rt:
        a = rt.load(art)(x=x)
        b = rt.load(mem.artifacts["prefill_s128"])(x=x)
    assert sorted(a) == ["L0_k", "L0_v", "L1_k", "L1_v", "h"]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_models_compile_plans_every_func_and_refuses_old_exports(gpt2_dir, tmp_path):
    out = tmp_path / "gpt2"
    run("models", "export", "gpt2", gpt2_dir, "-o", out, "--prefill", "128", "--cache", "128")
    res = run("models", "compile", out, "-o", tmp_path / "build")
    plan, *lines = res.output.strip().splitlines()
    assert plan == "5 programs to compile (budget 119 per process)"  # before the funcs: the planner
    assert [ln.split(":")[0] for ln in lines] == ["prefill_s128", "decode_w128_t128", "lm_head_s128"]
    assert "2 programs" in lines[0] and "2 programs" in lines[1] and "programs" not in lines[2]
    assert (tmp_path / "build" / "prefill_s128" / "stages" / "s01" / "model.mil").is_file()
    # the build is one output, written all or nothing: a rebuild replaces it as a whole, and
    # a folder of the user's is never taken for one
    (tmp_path / "build" / "stale_func").mkdir()
    run("models", "compile", out, "-o", tmp_path / "build")
    assert not (tmp_path / "build" / "stale_func").exists()
    assert (tmp_path / "build" / ".anec-output.json").is_file()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's\n")
    res = run("models", "compile", out, "-o", tmp_path / "mine", ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]
    # a directory from an older anec: one func per layer half, refused with the command to re-export
    info = json.loads((out / "model.json").read_text())
    old = {**info, "format": "anec-model/1",
           "files": {"prefill_s128.ir": ["L0_attn_p128", "L1_attn_p128"], "mlp_s128.ir": ["L0_mlp_s128"]}}
    (out / "mlp_s128.ir").write_text("// stale\n")
    (out / "notes.ir").write_text("// the user's\n")
    (out / "model.json").write_text(json.dumps(old))
    res = run("models", "compile", out, ok=False)
    assert res.exit_code == 1 and "Traceback" not in res.output
    assert "anec-model/1" in res.output and "older anec" in res.output
    assert f"anec models export gpt2 {gpt2_dir} -o {out}" in res.output
    # re-exporting replaces it: files the old model.json listed are gone, others stay
    run("models", "export", "gpt2", gpt2_dir, "-o", out, "--prefill", "128", "--cache", "128")
    assert not (out / "mlp_s128.ir").exists() and (out / "notes.ir").exists()
    res = run("models", "compile", tmp_path / "nothing", ok=False)
    assert res.exit_code == 1 and "no model.json" in res.output and "anec models export" in res.output


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
    slots = info["lora"]["inputs"]["prefill_s256"]
    assert [s["a_input"] for s in slots] == [f"lora_layers_{i}_self_attn_{p}_A"
                                             for i in (0, 1) for p in ("q_proj", "v_proj")]
    g = parse_file(tmp_path / "l" / "prefill_s256.ir").funcs["prefill_s256"]
    assert str(g.value("lora_layers_1_self_attn_v_proj_B").type) == "fp16[1, 1, 64, 4]"
    res = run("models", "export", "bert", minilm_dir, "-o", tmp_path / "b", "--prefill", "32,64")
    assert "wrote 2 funcs in 2 files" in res.output
    assert list(parse_file(tmp_path / "b" / "encoder_s32.ir").funcs) == ["encoder_s32"]


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


def test_embed_compresses_weights(minilm_dir):
    pytest.importorskip("tokenizers")
    res = run("embed", minilm_dir, "A man is eating food.", "A man is eating bread.", "The movie was great.",
              "--backend", "sim", "--compress", "int8")
    assert "compressed 36 weights (" in res.output and "int8" in res.output
    rows = [line.split()[:3] for line in res.output.strip().splitlines() if not line.startswith("compressed")]
    sim = np.array(rows, dtype=float)
    assert sim[0, 1] > 0.5 > sim[0, 2]
    res = run("embed", minilm_dir, "hello", "--backend", "interp", "--compress", "int8", ok=False)
    assert res.exit_code == 2 and "needs a compiled backend" in res.output


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
