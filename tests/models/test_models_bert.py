"""all-MiniLM-L6-v2 with its real weights on the sim vs sentence-transformers.

The IR says GELU exact (BERT's erf form); legalize replaces it with the tanh
approximation for the ANE, so these numbers include that approximation as well
as fp16 storage. Required, per sentence: cosine >= MIN_COSINE = 0.99998, i.e.
1 - cosine <= 2e-5, 5.5x the worst measured (3.6e-6); a 10% error in the
attention scale gives 1 - cosine >= 8e-4 (40x the bar). Element by element
(tests/tolerances.py): embeddings within 8 fp16 ulps (measured 3.5; the 10%
scale error: 115), last hidden states within 4 (measured 1.9; the error: 43).
"""

from __future__ import annotations

import numpy as np
import pytest

from anec.models.bert import Bert, SentenceEncoder, block_mask, pack
from anec.models.common import ModelError
from anec.models.layout import MASK_NEG
from anec.models.hf import load_checkpoint
from tests.models.conftest import BACKEND
from tolerances import assert_close, assert_cosine

MIN_COSINE = 0.99998
EMBEDDING_ULPS = 8
HIDDEN_ULPS = 4

SENTENCES = [
    "ANE",
    "Hello world.",
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the river bank on a sunny afternoon.",
    "Compilers translate programs written in one language into another, checking, optimizing "
    "and lowering them step by step until the hardware can run them; " * 3,
]


@pytest.fixture(scope="module")
def encoder(minilm_dir):
    enc = SentenceEncoder(Bert(load_checkpoint(minilm_dir)), backend=BACKEND)
    yield enc
    enc.close()


@pytest.fixture(scope="module")
def reference(minilm_dir):
    st = pytest.importorskip("sentence_transformers")
    return st.SentenceTransformer(str(minilm_dir), device="cpu")


def _cos(a, b):
    return float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))


def test_embeddings_match_sentence_transformers(encoder, reference):
    lengths = [len(x) for x in encoder.tokenize(SENTENCES)]
    assert lengths[0] < 8 and lengths[-1] > 64  # several buckets and a packed row
    got = encoder.encode(SENTENCES)
    want = reference.encode(SENTENCES, convert_to_numpy=True)
    for s, a, b in zip(SENTENCES, got, want):
        assert_cosine(a, b, "models/minilm:embedding-cosine", MIN_COSINE, s)
    assert_close(got, want, "models/minilm:embeddings", EMBEDDING_ULPS)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_packed_batch_equals_one_sentence_at_a_time(encoder):
    together = encoder.encode(SENTENCES[:4])
    alone = np.stack([encoder.encode([s])[0] for s in SENTENCES[:4]])
    for a, b in zip(together, alone):
        assert _cos(a, b) >= 0.9999


def test_hidden_states_match_transformers(encoder, minilm_dir):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    ids = encoder.tokenize([SENTENCES[3]])[0]
    got = encoder.hidden_states(ids)
    model = transformers.BertModel.from_pretrained(minilm_dir).eval()
    with torch.no_grad():
        want = model(torch.tensor([ids])).last_hidden_state[0].numpy()
    assert_close(got, want, "models/minilm:hidden-states", HIDDEN_ULPS)
    assert np.abs(got - want).mean() < 5e-3


def test_truncation_keeps_the_final_sep(encoder):
    ids = encoder.tokenize(["word " * 400])[0]
    assert len(ids) == encoder.bert.max_len == 256
    assert ids[0] == 101 and ids[-1] == 102  # [CLS] ... [SEP]


def test_pack_and_block_mask():
    assert pack([5, 3, 4, 2], 8) == [[0, 1], [2, 3]]
    assert pack([8, 1], 8) == [[0], [1]]
    with pytest.raises(ModelError):
        pack([9], 8)
    m = block_mask([2, 3], 8)[0, 0]
    assert m.shape == (8, 8)
    assert (m[:2, :2] == 0).all() and (m[2:5, 2:5] == 0).all()
    assert (m[:2, 2:] == np.float16(MASK_NEG)).all()
    assert (m[2:5, :2] == np.float16(MASK_NEG)).all() and (m[2:5, 5:] == np.float16(MASK_NEG)).all()
    assert (m[5:, 5:] == 0).all()  # padding attends to padding only: no all-masked rows


def test_bad_inputs(encoder):
    with pytest.raises(ModelError, match="at least one token"):
        encoder.encode_ids([[]])
    with pytest.raises(ModelError, match="token ids"):
        encoder.encode_ids([[10 ** 6]])



INT8_MIN_COSINE = 0.999
"""The compressed-weights claim for this checkpoint: conv/matmul weights stored as int8 (per
output channel, symmetric) under the default accuracy gate keep each sentence's embedding
within cosine 0.999 of sentence-transformers' fp32. The gate keeps the weights whose outlier
channels int8 would blur in fp16 (12 of 36 here); with every weight forced to int8 a short
sentence drops to 0.9990 (docs/compression.md)."""


@pytest.mark.skipif(BACKEND == "interp", reason="compression is a compile decision")
def test_int8_weights_keep_the_embeddings(minilm_dir, reference):
    enc = SentenceEncoder(Bert(load_checkpoint(minilm_dir)), backend=BACKEND, compress="int8")
    try:
        got = enc.encode(SENTENCES[:4])
    finally:
        enc.close()
    reports = enc.programs.compression
    formats = [r.format for r in reports]
    assert len(formats) == 36 and formats.count("int8") >= 18, formats  # 6 layers x 6 linears
    assert set(formats) <= {"int8", "fp16"}
    dense = sum(r.dense_bytes for r in reports)
    assert sum(r.bytes for r in reports) <= 0.85 * dense
    want = reference.encode(SENTENCES[:4], convert_to_numpy=True)
    for s, a, b in zip(SENTENCES[:4], got, want):
        assert_cosine(a, b, "models/minilm:int8-embedding-cosine", INT8_MIN_COSINE, s)
