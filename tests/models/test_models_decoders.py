"""GPT-2 and Llama on the sim: logits, KV-cache decode and greedy generation vs transformers.

Tolerances (tests/tolerances.py): logits of magnitude ~5 within LOGIT_ULPS fp16
ulps of the output's scale (fp16 storage with fp32 accumulation through 2 layers).
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.passes.legalize import blob_tensors
from anec.models.generate import CausalLM, decoder_frontend
from anec.models.hf import load_checkpoint
from tests.models.conftest import BACKEND, LOGIT_ULPS, PROMPT, hf_greedy, hf_logits, hf_model
from tolerances import assert_close



@pytest.fixture(scope="module", params=["gpt2", "llama"])
def case(request, gpt2_dir, llama_dir):
    path = gpt2_dir if request.param == "gpt2" else llama_dir
    lm = CausalLM(decoder_frontend(load_checkpoint(path), 49152), backend=BACKEND)
    yield request.param, path, lm, hf_model(path)
    lm.close()


def test_prefill_logits_match_transformers(case):
    kind, _, lm, ref = case
    got = lm.logits(PROMPT)
    want = hf_logits(ref, PROMPT)
    assert got.shape == want.shape
    assert_close(got, want, f"models/{kind}:prefill-logits", LOGIT_ULPS)


def test_kv_cache_decode_logits_match_full_forward(case):
    kind, _, lm, ref = case
    cont = [11, 250, 3, 77, 100]
    want = hf_logits(ref, PROMPT + cont)
    got = [lm.prefill(PROMPT, cache_len=lm.fe.buckets[0])]
    for t in cont:
        got.append(lm.decode(t))
    assert_close(np.stack(got), want[len(PROMPT) - 1:], f"models/{kind}:decode-logits", LOGIT_ULPS)
    assert lm.pos == len(PROMPT) + len(cont)


def test_greedy_generation_identical_to_transformers(case):
    _, _, lm, ref = case
    want = hf_greedy(ref, PROMPT, 32)
    got = lm.generate(PROMPT, max_new_tokens=32)
    assert got == want
    assert len(set(got)) >= 8, "the reference model only repeats itself; the check would say little"


def test_greedy_generation_with_token_zero_in_the_prompt(case):
    # token 0 is the pad token of the reference's generation config: the reference
    # must still attend to it (explicit attention mask), as the model does
    _, _, lm, ref = case
    prompt = [0, 5, 17, 0, 300, 42, 0, 7]
    want = hf_greedy(ref, prompt, 16)
    assert lm.generate(prompt, max_new_tokens=16) == want
    cur = list(prompt)  # the reference itself, checked against greedy decoding by full forwards
    for _ in range(4):
        cur.append(int(np.argmax(hf_logits(ref, cur)[-1])))
    assert cur[len(prompt):] == want[:4]


def test_programs_compile_once_per_bucket(case):
    _, _, lm, _ = case
    lm.generate(PROMPT, max_new_tokens=4)
    before = lm.stats()
    lm.generate(PROMPT[:3], max_new_tokens=6, temperature=0.9, top_k=5, seed=3)
    after = lm.stats()
    assert after["compiles"] == before["compiles"]
    assert after["programs"] == before["programs"]
    assert after["evaluations"] > before["evaluations"]


def test_every_program_stays_under_the_blob_budget(case):
    kind, _, lm, _ = case
    fe, w = lm.fe, lm.fe.width
    graphs = [fe.attn(0, w), fe.attn(0, w, 2 * w), fe.mlp(0, w), fe.lm_head(w)]
    # per-layer blocks: norm (2|1) + projections (4|4) + causal mask (+ RoPE rotation for Llama);
    # decode reads its new-block mask as an input (mask_new), not a weight
    assert [len(blob_tensors(g)) for g in graphs] == ([7, 6, 6, 3] if kind == "gpt2" else [7, 6, 4, 2])
    # the whole stack: both layers, one shared mask (and rotation)
    assert len(blob_tensors(fe.prefill(w))) == (25 if kind == "gpt2" else 20)
    lm.generate(PROMPT, max_new_tokens=2)
    progs = lm.programs.programs
    assert set(progs) == {fe.prefill_name(w), fe.decode_name(w, w), fe.lm_head_name(w)}
    n_programs = 0
    for name, p in progs.items():
        # over the budget: cut by the compiler into a pipeline of stages, each within it
        stages = [s.manifest for s in p.stages] if hasattr(p, "stages") else [p.manifest]
        assert (len(stages) > 1) == (name != fe.lm_head_name(w)), name
        for m in stages:
            # 16 BLOBFILE tensors, minus the scalar penalty: every program has a norm eps
            assert len(m.weights) <= 15, name
        n_programs += len(stages)
    assert n_programs <= 4 * lm.cfg.n_layer + 1  # the per-layer program set: attn + mlp, prefill + decode


def test_sampling_is_seeded_and_respects_top_k(case):
    _, _, lm, ref = case
    a = lm.generate(PROMPT, max_new_tokens=8, temperature=1.0, top_k=3, seed=7)
    b = lm.generate(PROMPT, max_new_tokens=8, temperature=1.0, top_k=3, seed=7)
    assert a == b
    # every sampled token is among the 3 best of its reference logits
    logits = hf_logits(ref, PROMPT + a)[len(PROMPT) - 1:-1]
    for tok, row in zip(a, logits):
        assert tok in np.argsort(row)[-3:]
    # top_k=1 is greedy whatever the temperature
    assert lm.generate(PROMPT, max_new_tokens=5, temperature=5.0, top_k=1, seed=1) == \
        lm.generate(PROMPT, max_new_tokens=5)


def test_prompt_and_length_errors(case):
    from anec.models.common import ModelError

    _, _, lm, _ = case
    with pytest.raises(ModelError, match="empty"):
        lm.generate([], 4)
    with pytest.raises(ModelError, match="token ids"):
        lm.generate([lm.cfg.vocab], 4)
    with pytest.raises(ModelError, match="exceed"):
        lm.generate(PROMPT, lm.cfg.max_pos)
    with pytest.raises(ModelError, match="prefill first"):
        CausalLM(lm.fe, backend=BACKEND).decode(1)


def test_target_without_fp32_io_uses_host_casts(llama_dir):
    """m1 rejects fp32 program I/O: the programs take fp16 and the host converts."""
    fe = decoder_frontend(load_checkpoint(llama_dir), 49152)
    m1, m4 = CausalLM(fe, backend=BACKEND, target="m1"), CausalLM(fe, backend=BACKEND, target="m4")
    try:
        np.testing.assert_array_equal(m1.logits(PROMPT), m4.logits(PROMPT))
        manifest = next(iter(m1.programs.programs.values())).manifest
    finally:
        m1.close()
        m4.close()
    assert manifest.target == "m1"
    assert all(i.dtype == "fp16" for i in manifest.inputs)
