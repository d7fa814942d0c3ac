"""The LM head over a vocabulary above the conv channel limit, consumed chunk by chunk.

The head returns one fp16 output per vocabulary chunk (each within the target's
ANE-CONV-CHANNELS limit) and :mod:`anec.models.sampling` picks tokens from the
chunks where they are. Checked here: greedy tokens equal to transformers fp32
with the head in several chunks (a test profile with a small channel limit, and
the real limit with a tiny hidden size); greedy picks bit-identical to
``np.argmax`` over the concatenation; sampled tokens equal to a plain numpy
sampler over the concatenated float64 logits on the same seed; and the sampler's
own allocations stay within about one chunk in float64.
"""

from __future__ import annotations

import dataclasses
import tracemalloc

import numpy as np
import pytest

from anec.models.buckets import vocab_chunks
from anec.models.common import ModelError
from anec.models.generate import CausalLM, decoder_frontend, sample
from anec.models.hf import load_checkpoint
from anec.models.sampling import argmax_chunks, sample_chunks
from anec.targets import get_target
from tests.models.conftest import BACKEND, PROMPT, _save, hf_greedy, hf_model, torch, transformers

SMALL_LIMIT = 256
"""A test profile's conv channel limit: the 1100-entry vocabulary becomes 5 chunks."""


def reference_sample(logits: np.ndarray, temperature: float, top_k: int, rng: np.random.Generator) -> int:
    """The straightforward sampler over the whole (concatenated) logits vector, float64."""
    z = np.asarray(logits, dtype=np.float64).reshape(-1)
    if temperature <= 0:
        return int(np.argmax(z))
    z = z / temperature
    if 0 < top_k < z.size:
        kth = np.partition(z, -top_k)[-top_k]
        z = np.where(z >= kth, z, -np.inf)
    p = np.exp(z - z.max())
    p /= p.sum()
    return int(rng.choice(z.size, p=p))


def split(logits: np.ndarray, limit: int) -> list[np.ndarray]:
    return [logits[a:b] for a, b in vocab_chunks(logits.size, limit)]


@pytest.fixture(scope="module")
def wide_llama(tmp_path_factory):
    """A Llama whose vocabulary (1100) is above the small profile's limit (256)."""
    torch.manual_seed(5)
    cfg = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=1100,
                                   max_position_embeddings=256, initializer_range=0.1)
    return _save(transformers.LlamaForCausalLM(cfg).eval(), tmp_path_factory.mktemp("wide_llama"))


@pytest.fixture(scope="module")
def small_limit_lm(wide_llama):
    target = dataclasses.replace(get_target("m4"), max_conv_out_channels=SMALL_LIMIT)
    lm = CausalLM(decoder_frontend(load_checkpoint(wide_llama), 49152), backend=BACKEND, target=target)
    yield lm
    lm.close()


def test_head_chunks_within_the_limit_and_tokens_equal_transformers(wide_llama, small_limit_lm):
    lm = small_limit_lm
    want = hf_greedy(hf_model(wide_llama), PROMPT, 24)
    assert lm.generate(PROMPT, max_new_tokens=24) == want
    assert len(set(want)) >= 6, "the reference only repeats itself; the check would say little"
    head = lm.programs.graphs[lm.fe.lm_head_name(lm.fe.width)]
    widths = [v.type.shape[1] for v in head.outputs]
    assert [v.name for v in head.outputs] == [f"logits_c{i}" for i in range(5)]
    assert sum(widths) == 1100 and max(widths) <= SMALL_LIMIT
    assert all(str(v.type.dtype) == "fp16" for v in head.outputs)


def test_sampled_generation_equals_materialized_sampling(small_limit_lm):
    """lm.generate with temperature/top-k (chunks) == the reference sampler fed the
    concatenated fp32 logits of lm.prefill/lm.decode, on the same seed."""
    lm = small_limit_lm
    for temperature, top_k, seed in ((0.8, 0, 3), (1.3, 40, 11), (0.5, 5, 7)):
        got = lm.generate(PROMPT, max_new_tokens=12, temperature=temperature, top_k=top_k, seed=seed)
        rng = np.random.default_rng(seed)
        want = [reference_sample(lm.prefill(PROMPT, lm.cache.t), temperature, top_k, rng)]
        while len(want) < 12:
            want.append(reference_sample(lm.decode(want[-1]), temperature, top_k, rng))
        assert got == want, (temperature, top_k, seed)


def test_real_channel_limit_with_a_tiny_hidden_size(tmp_path):
    """A GPT-2 of hidden 32 with 20000 tokens: two chunks under the real m4 limit (16384)."""
    torch.manual_seed(3)
    cfg = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=20000, n_positions=64,
                                  initializer_range=0.1, bos_token_id=0, eos_token_id=0)
    path = _save(transformers.GPT2LMHeadModel(cfg).eval(), tmp_path / "gpt2")
    lm = CausalLM(decoder_frontend(load_checkpoint(path), 49152), backend=BACKEND, target="m4")
    try:
        got = lm.generate(PROMPT, max_new_tokens=8)
        head = lm.programs.graphs[lm.fe.lm_head_name(lm.fe.width)]
    finally:
        lm.close()
    assert [v.type.shape[1] for v in head.outputs] == [10000, 10000]
    assert got == hf_greedy(hf_model(path), PROMPT, 8)


def _logits_with_ties(rng: np.random.Generator, vocab: int) -> np.ndarray:
    x = (rng.standard_normal(vocab) * 3).astype(np.float16)
    x[rng.integers(0, vocab, 20)] = x.max()  # ties for the maximum, some across chunk boundaries
    return x


def test_greedy_pick_bit_identical_to_argmax_over_the_concatenation():
    rng = np.random.default_rng(0)
    for trial in range(50):
        x = _logits_with_ties(rng, 3001)
        for limit in (64, 1000, 3001):
            assert argmax_chunks(split(x, limit)) == int(np.argmax(x.astype(np.float32))), (trial, limit)
    x = np.arange(300, dtype=np.float16)
    x[[7, 250]] = np.nan
    assert argmax_chunks(split(x, 100)) == int(np.argmax(x)) == 7


def test_sampling_chunk_by_chunk_equals_the_numpy_reference_on_the_same_seed():
    rng = np.random.default_rng(1)
    for trial in range(40):
        x = _logits_with_ties(rng, 2500)
        temperature = float(rng.choice([0.3, 0.7, 1.0, 1.7]))
        top_k = int(rng.choice([0, 1, 3, 50, 2499, 5000]))
        seed = int(rng.integers(1 << 30))
        for limit in (97, 2500):
            ra, rb = np.random.default_rng(seed), np.random.default_rng(seed)
            got = [sample_chunks(split(x, limit), temperature, top_k, ra) for _ in range(20)]
            want = [reference_sample(x.astype(np.float32), temperature, top_k, rb) for _ in range(20)]
            assert got == want, (trial, limit, temperature, top_k)
        assert ra.random() == rb.random(), "one uniform draw per token, as rng.choice"
    assert sample(x.astype(np.float32), 0.7, 3, np.random.default_rng(5)) == \
        reference_sample(x, 0.7, 3, np.random.default_rng(5))


def test_non_finite_logits_are_a_clear_error():
    x = np.zeros(300, np.float16)
    x[123] = np.inf
    with pytest.raises(ModelError, match="not finite"):
        sample_chunks(split(x, 100), 0.8, 0, np.random.default_rng(0))


def test_sampling_holds_at_most_one_chunk_in_float64():
    """Vocabulary 151936 (a 152k tokenizer) in the head's chunks under the m4 limit: the
    sampler's peak allocation is one chunk in float64 (122 KB) plus a mask, below 1.5 chunks
    (two chunks at once, or any whole-vocabulary copy, 608 KB in fp32, would exceed it)."""
    vocab = 151936
    x = np.random.default_rng(2).standard_normal(vocab).astype(np.float16)
    chunks = split(x, get_target("m4").max_conv_out_channels)
    assert len(chunks) == 10
    for temperature, top_k in ((0.0, 0), (0.8, 0), (0.8, 50)):
        tracemalloc.start()
        try:
            sample_chunks(chunks, temperature, top_k, np.random.default_rng(0))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 1.5 * max(c.size for c in chunks) * 8, (temperature, top_k, peak)
