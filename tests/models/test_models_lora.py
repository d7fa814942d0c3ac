"""LoRA adapters as program inputs: numerics vs peft and numpy, hot swap without compiles or reloads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from anec.ir.builder import Builder
from anec.models.common import ModelError
from anec.models.programs import ProgramCache
from anec.models.generate import CausalLM, LoraSpec, decoder_frontend
from anec.models.hf import load_checkpoint
from anec.models.lora import AdapterError, LoraAdapter, apply_lora
from tests.models.conftest import BACKEND, LOGIT_ULPS, PROMPT, hf_logits, hf_model, torch
from tolerances import assert_close

peft = pytest.importorskip("peft")
pytestmark = pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")


def _make_adapter(base_dir, out, seed, r, targets, alpha=8.0):
    torch.manual_seed(seed)
    model = hf_model(base_dir)
    cfg = peft.LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets), init_lora_weights=False,
                          fan_in_fan_out="c_attn" in targets)  # GPT-2's Conv1D stores [in, out]
    peft.get_peft_model(model, cfg).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def adapters(llama_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    return [_make_adapter(llama_dir, root / "a", 1, 4, ("q_proj", "v_proj")),
            _make_adapter(llama_dir, root / "b", 2, 2, ("q_proj", "v_proj"), alpha=16.0)]


def _peft_logits(base_dir, adapter_dir, ids):
    model = peft.PeftModel.from_pretrained(hf_model(base_dir), adapter_dir).eval()
    return hf_logits(model, ids)


def test_adapters_match_peft_and_swap_without_compiles_or_reloads(llama_dir, adapters):
    lm = CausalLM(decoder_frontend(load_checkpoint(llama_dir), 49152), backend=BACKEND,
                  lora=LoraSpec(("q_proj", "v_proj"), 4))
    try:
        base = lm.logits(PROMPT)
        assert_close(base, hf_logits(hf_model(llama_dir), PROMPT), "models/llama:lora-base-logits", LOGIT_ULPS)
        before = lm.stats()
        outs = []
        for path in adapters:
            lm.set_adapter(LoraAdapter.load(path))
            got = lm.logits(PROMPT)
            assert_close(got, _peft_logits(llama_dir, path, PROMPT), "models/llama:lora-logits", LOGIT_ULPS)
            outs.append(got)
        lm.set_adapter(None)
        again = lm.logits(PROMPT)
        after = lm.stats()
    finally:
        lm.close()
    assert np.abs(outs[0] - base).max() > 0.5 and np.abs(outs[1] - outs[0]).max() > 0.5
    np.testing.assert_array_equal(again, base)
    assert after["compiles"] == before["compiles"]
    assert after["reloads"] == before["reloads"] == 0
    assert after["loads"] == before["loads"]
    assert after["evaluations"] > before["evaluations"]


def test_lora_on_gpt2_fused_c_attn_matches_peft(gpt2_dir, tmp_path):
    path = _make_adapter(gpt2_dir, tmp_path / "g", 3, 4, ("c_attn",))
    assert json.loads((path / "adapter_config.json").read_text())["fan_in_fan_out"] is True
    lm = CausalLM(decoder_frontend(load_checkpoint(gpt2_dir), 49152), backend=BACKEND,
                  lora=LoraSpec(("c_attn",), 4))
    try:
        lm.set_adapter(LoraAdapter.load(path))
        got = lm.logits(PROMPT)
    finally:
        lm.close()
    assert_close(got, _peft_logits(gpt2_dir, path, PROMPT), "models/gpt2:lora-logits", LOGIT_ULPS)


def test_single_projection_matches_numpy():
    """y = W x + (alpha / r) B (A x) on one conv, checked against numpy directly."""
    cin, cout, s, r, alpha = 64, 96, 128, 4, 6.0
    b = Builder("proj")
    x = b.input("x", "fp16", [1, cin, 1, s])
    w = b.const_weight("layer.q_proj.weight", f"fp16[{cout}, {cin}, 1, 1]", name="w")
    b.ret(b.conv1x1(x, w, name="y"))
    g = b.graph
    (slot,) = apply_lora(g, ["q_proj"], r)
    assert [v.name for v in g.inputs] == ["x", "lora_q_proj_A", "lora_q_proj_B"]
    assert g.output_names() == ["y"]
    rng = np.random.default_rng(0)
    W = rng.standard_normal((cout, cin)).astype(np.float32) / 8
    A = rng.standard_normal((r, cin)).astype(np.float32) / 8
    B = rng.standard_normal((cout, r)).astype(np.float32) / 8
    X = rng.standard_normal((1, cin, 1, s)).astype(np.float32)
    cache = ProgramCache(lambda k: W.reshape(cout, cin, 1, 1), backend=BACKEND)
    try:
        prog = cache.get("proj", lambda: g)
        a_in, b_in = LoraAdapter.from_arrays({"layer.q_proj": (A, B)}, alpha).inputs_for(slot)
        y = prog(x=X, lora_q_proj_A=a_in, lora_q_proj_B=b_in)["y"]
    finally:
        cache.close()
    xs = X[0, :, 0, :].astype(np.float16).astype(np.float64)           # [cin, s]
    want = W.astype(np.float16) @ xs + (alpha / r) * (B @ (A @ xs))
    assert_close(y[0, :, 0, :], want, "models/lora:single-projection", 2)  # measured 0.66


def test_adapter_errors(llama_dir, adapters, tmp_path):
    lm = CausalLM(decoder_frontend(load_checkpoint(llama_dir), 49152), backend=BACKEND,
                  lora=LoraSpec(("q_proj",), 2))
    with pytest.raises(AdapterError, match="v_proj"):
        lm.set_adapter(LoraAdapter.load(adapters[0]))
    small = CausalLM(lm.fe, backend=BACKEND, lora=LoraSpec(("q_proj", "v_proj"), 2))
    with pytest.raises(AdapterError, match="rank 4"):
        small.set_adapter(LoraAdapter.load(adapters[0]))
    with pytest.raises(AdapterError, match="not a PEFT adapter"):
        LoraAdapter.load(tmp_path)
    plain = CausalLM(lm.fe, backend=BACKEND)
    with pytest.raises(ModelError, match="without LoRA"):
        plain.set_adapter(LoraAdapter.load(adapters[1]))


def test_lora_inputs_of_a_whole_stack_are_named_by_their_layer(llama_dir):
    fe = decoder_frontend(load_checkpoint(llama_dir), 49152)
    one, whole = fe.attn(1, fe.width), fe.prefill(fe.width)
    assert [s.a_input for s in apply_lora(one, ["q_proj"], 2)] == ["lora_q_proj_A"]
    slots = apply_lora(whole, ["q_proj", "v_proj"], 2)
    assert [s.a_input for s in slots] == [f"lora_layers_{i}_self_attn_{p}_A"
                                          for i in (0, 1) for p in ("q_proj", "v_proj")]
    assert [s.module for s in slots][1] == "model.layers.0.self_attn.v_proj"
    # a module applied twice in one func takes one adapter, read by both paths
    b = Builder("twice")
    x = b.input("x", "fp16", [1, 8, 1, 64])
    w = b.const_weight("enc.query.weight", "fp16[8, 8, 1, 1]", name="w")
    b.ret(b.conv1x1(b.conv1x1(x, w, name="y1"), w, name="y2"))
    g = b.graph
    twice = apply_lora(g, ["query"], 2)
    assert [s.a_input for s in twice] == ["lora_query_A", "lora_query_A"]
    assert [v.name for v in g.inputs] == ["x", "lora_query_A", "lora_query_B"]
