"""The hand-written frontends with a "massive activation" channel, against transformers.

Pretrained LLMs carry a few residual channels in the hundreds to thousands; x * x of such a
value overflows fp16 and, written as mean(x * x), turns a norm's output into zeros. With the
range-safe pass the GPT-2 (channel 5 of every fourth position embedding at 600), Llama (channel 5
of a quarter of the token embeddings at 3000) and BERT (MiniLM's real weights, channel 5 of
every word embedding shifted by 1000) frontends match transformers as the unmodified models
do: logits within LOGIT_ULPS, the same greedy tokens, hidden states within the MiniLM bound.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from anec.models.bert import Bert, SentenceEncoder
from anec.models.generate import CausalLM, decoder_frontend
from anec.models.hf import load_checkpoint
from tests.models.conftest import BACKEND, LOGIT_ULPS, PROMPT, hf_greedy, hf_logits, hf_model, torch, transformers
from tolerances import assert_close


def _massive(src, dest, edit):
    model = transformers.AutoModel.from_pretrained(src) if edit is None else edit[0](src)
    with torch.no_grad():
        edit[1](model)
    model.save_pretrained(dest, safe_serialization=True)
    for f in src.iterdir():
        if f.is_file() and not (dest / f.name).exists():
            shutil.copy(f, dest / f.name)
    return dest


def _lm(path):
    return transformers.AutoModelForCausalLM.from_pretrained(path).eval()


def _gpt2_edit(m):
    m.transformer.wpe.weight[::4, 5] = 600.0  # a quarter of the positions; wte is the tied LM head


def _llama_edit(m):
    m.model.embed_tokens.weight[::4, 5] = 3000.0


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def massive_case(request, gpt2_dir, llama_dir, tmp_path_factory):
    src = gpt2_dir if request.param == "gpt2" else llama_dir
    edit = _gpt2_edit if request.param == "gpt2" else _llama_edit
    path = _massive(src, tmp_path_factory.mktemp(f"massive_{request.param}"), (_lm, edit))
    lm = CausalLM(decoder_frontend(load_checkpoint(path), 49152), backend=BACKEND)
    yield request.param, lm, hf_model(path)
    lm.close()


def test_prefill_logits_with_a_massive_channel(massive_case):
    kind, lm, ref = massive_case
    prompt = PROMPT + [4, 8, 15, 16, 23, 42]
    assert_close(lm.logits(prompt), hf_logits(ref, prompt), f"models/{kind}-massive:prefill-logits", LOGIT_ULPS)


def test_greedy_generation_with_a_massive_channel(massive_case):
    _, lm, ref = massive_case
    want = hf_greedy(ref, PROMPT, 24)
    assert lm.generate(PROMPT, max_new_tokens=24) == want
    assert len(set(want)) >= 6


def test_bert_hidden_states_with_a_massive_channel(minilm_dir, tmp_path):
    def edit(m):
        m.embeddings.word_embeddings.weight[:, 5] += 1000.0

    path = _massive(minilm_dir, tmp_path / "minilm", (transformers.BertModel.from_pretrained, edit))
    enc = SentenceEncoder(Bert(load_checkpoint(path)), backend=BACKEND)
    try:
        ids = enc.tokenize(["A man is eating a piece of bread with a massive activation."])[0]
        got = enc.hidden_states(ids)
    finally:
        enc.close()
    model = transformers.BertModel.from_pretrained(path).eval()
    with torch.no_grad():
        want = model(torch.tensor([ids])).last_hidden_state[0].numpy()
    assert_close(got, want, "models/minilm-massive:hidden-states", 16)
    assert np.abs(got - want).mean() < 5e-3


def test_generate_check_ranges(gpt2_dir, tmp_path):
    """``anec generate --check-ranges``: the prefill program on the prompt, analyzed; the
    massive model fits fp16, one whose embeddings sum past 65504 is named at the input cast."""
    from click.testing import CliRunner

    from anec.cli import main

    fits = _massive(gpt2_dir, tmp_path / "fits", (_lm, _gpt2_edit))
    r = CliRunner().invoke(main, ["generate", str(fits), "--prompt-ids", "5,17,300,42", "--check-ranges",
                                  "--backend", BACKEND])
    assert r.exit_code == 0, r.output
    assert "fp16 range of func 'prefill_" in r.output and "0 overflows" in r.output or "fits fp16" in r.output

    def overflow(m):
        m.transformer.wte.weight[:, 5] = 40000.0
        m.transformer.wpe.weight[:, 5] = 40000.0  # token + position: 80000

    big = _massive(gpt2_dir, tmp_path / "big", (_lm, overflow))
    r = CliRunner().invoke(main, ["generate", str(big), "--prompt-ids", "5,17,300,42", "--check-ranges",
                                  "--backend", BACKEND])
    assert r.exit_code == 1, r.output
    assert "[ANE-FP16-RANGE]" in r.output and "reaches |x| = 8e+04" in r.output
