"""BERT encoder frontend and sentence embeddings (MiniLM / all-MiniLM-L6-v2 shapes).

The encoder of one bucket is one func, ``encoder_s{S}`` (``x``, ``mask`` ->
``h``), which the compiler partitions into ANE programs (all-MiniLM-L6-v2: 96
weight tensors, 7 programs). Per layer (post-LayerNorm, as in BERT)::

    h = LayerNorm(x + dense(attention(q(x), k(x), v(x), mask)))      block L{i}_attn_s{S}
    y = LayerNorm(h + output(gelu(intermediate(h))))                  block L{i}_ffn_s{S}

(each block is also a func of its own, for comparisons).

GELU is BERT's exact (erf) form in the IR; the ANE has no erf, so legalize
replaces it with the tanh approximation (a recorded rewrite; its effect on
MiniLM embeddings is measured by ``benchmarks/bench_models.py``).

Batches. Sentences are packed side by side along the sequence axis of one
bucket (each with its own positions from 0), and the additive ``mask``
input ``[1, 1, S, S]`` is block-diagonal: a token sees only tokens of its own
sentence, never padding. One func per bucket therefore serves any batch
composition without recompiling, and the padding columns hold the [PAD]
token's embedding (finite values, like a padded batch in PyTorch).

Host side: embeddings (word + position + token type, then LayerNorm) before
the encoder; mean pooling over each sentence's tokens and L2
normalisation after the last (sentence-transformers' Pooling + Normalize).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from anec.ir.graph import Graph
from anec.ir.nodes import Value
from anec.models.blocks import ModelBuilder
from anec.models.buckets import bucket_list, min_bucket, pick_bucket
from anec.models.common import ModelError
from anec.models.layout import MASK_NEG, from_bc1s, to_bc1s
from anec.models.programs import ProgramCache
from anec.models.progress import Progress
from anec.models.config import MAX_HEADS, MAX_LAYERS, MAX_POSITIONS, MAX_VOCAB, Fields, TensorSpec, check_tensors
from anec.models.config import check_layer_bound
from anec.models.hf import Checkpoint, Tokenizer

_GELU = {"gelu": "exact", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}
_LAYER = re.compile(r"(?:bert\.)?encoder\.layer\.(\d+)\.")
_IGNORED = (re.compile(r"(?:bert\.)?embeddings\.position_ids"), re.compile(r"(?:bert\.)?pooler\..+"),
            re.compile(r"cls\..+"))
"""Buffers and heads a BERT checkpoint may hold that the encoder does not read."""


@dataclass(frozen=True)
class BertConfig:
    """The checked shape of a BERT encoder (from ``config.json``)."""

    n_layer: int
    d_model: int
    n_head: int
    d_ffn: int
    vocab: int
    max_pos: int
    type_vocab: int
    pad_id: int
    eps: float
    gelu_mode: str


def bert_config(config: dict, file: str = "config.json") -> BertConfig:
    """Read and check a BERT ``config.json`` object (CheckpointError naming the field)."""
    f = Fields(config, file)
    d = f.int("hidden_size")
    n_head = f.int("num_attention_heads", hi=MAX_HEADS)
    if d % n_head:
        raise f.fail("num_attention_heads", f"{n_head} heads do not divide the hidden size {d}")
    vocab = f.int("vocab_size", hi=MAX_VOCAB)
    pad = f.int("pad_token_id", default=0, lo=0, hi=MAX_VOCAB)
    if pad >= vocab:
        raise f.fail("pad_token_id", f"{pad} is not a token id below vocab_size {vocab}")
    if f.str("position_embedding_type", "absolute") != "absolute":
        raise f.fail("position_embedding_type", "only absolute position embeddings are supported")
    return BertConfig(
        n_layer=f.int("num_hidden_layers", hi=MAX_LAYERS), d_model=d, n_head=n_head,
        d_ffn=f.int("intermediate_size"), vocab=vocab,
        max_pos=f.int("max_position_embeddings", default=512, hi=MAX_POSITIONS),
        type_vocab=f.int("type_vocab_size", default=2, hi=MAX_VOCAB), pad_id=pad,
        eps=f.float("layer_norm_eps", default=1e-12, hi=1.0),
        gelu_mode=_GELU[f.str("hidden_act", "gelu", _GELU, "BERT activation")],
    )


class Bert:
    """BERT encoder programs and host glue for one checkpoint."""

    kind = "bert"

    def __init__(self, ckpt: Checkpoint, min_surface: int | None = None) -> None:
        self.ckpt = ckpt
        self.cfg = c = bert_config(ckpt.config, ckpt.config_file)
        self.d, self.n_head, self.n_layer, self.d_ffn = c.d_model, c.n_head, c.n_layer, c.d_ffn
        self.eps, self.vocab, self.pad_id, self.type_vocab = c.eps, c.vocab, c.pad_id, c.type_vocab
        self.gelu_mode = c.gelu_mode
        self.n_pos = self.max_len = c.max_pos
        sb = ckpt.read_json("sentence_bert_config.json")
        if sb is not None:
            where = str(ckpt.path / "sentence_bert_config.json")
            self.max_len = min(self.max_len, Fields(sb, where).int("max_seq_length", default=self.max_len,
                                                                      hi=MAX_POSITIONS))
        self.prefix = "bert." if "bert.embeddings.word_embeddings.weight" in ckpt else ""
        ckpt.find(self.prefix + "embeddings.word_embeddings.weight")
        check_layer_bound(ckpt, _LAYER, self.n_layer, "num_hidden_layers")
        self.width = min_bucket(self.d, 4, min_surface)
        self.buckets = bucket_list(self.width, self.max_len)
        self._cache: dict[str, np.ndarray] = {}

    def tensor_spec(self) -> TensorSpec:
        """Every tensor the encoder reads, with its shape as stored (Linear weights ``[out, in]``)."""
        d, f, k = self.d, self.d_ffn, self._k
        shapes = {k("embeddings.word_embeddings.weight"): (self.vocab, d),
                  k("embeddings.position_embeddings.weight"): (self.n_pos, d),
                  k("embeddings.token_type_embeddings.weight"): (self.type_vocab, d),
                  k("embeddings.LayerNorm.weight"): (d,), k("embeddings.LayerNorm.bias"): (d,)}
        for i in range(self.n_layer):
            p = f"encoder.layer.{i}."
            for m, (o, cin) in (("attention.self.query", (d, d)), ("attention.self.key", (d, d)),
                                ("attention.self.value", (d, d)), ("attention.output.dense", (d, d)),
                                ("intermediate.dense", (f, d)), ("output.dense", (d, f))):
                shapes |= {k(p + m + ".weight"): (o, cin), k(p + m + ".bias"): (o,)}
            for m in ("attention.output.LayerNorm", "output.LayerNorm"):
                shapes |= {k(p + m + ".weight"): (d,), k(p + m + ".bias"): (d,)}
        return TensorSpec(shapes, _LAYER, self.n_layer, "num_hidden_layers", _IGNORED)

    def check_tensors(self) -> None:
        """The checkpoint holds exactly the tensors this config reads, plus BERT's unused
        buffers and heads (position_ids, pooler, cls); CheckpointError otherwise."""
        check_tensors(self.ckpt, self.tensor_spec, _LAYER, self.n_layer, "num_hidden_layers")

    def _k(self, key: str) -> str:
        return self.prefix + key

    def weight(self, key: str) -> np.ndarray:
        """Tensor ``key`` in the IR layout: [C] -> [1, C, 1, 1], [out, in] -> [out, in, 1, 1]."""
        arr = self.ckpt.stored(key)  # a view of the memory-mapped file (bf16: widened), not a copy
        return arr.reshape(1, -1, 1, 1) if arr.ndim == 1 else arr.reshape(*arr.shape, 1, 1)

    # ---- programs
    @staticmethod
    def encoder_name(s: int) -> str:
        return f"encoder_s{s}"

    @staticmethod
    def attn_name(layer: int, s: int) -> str:
        return f"L{layer}_attn_s{s}"

    @staticmethod
    def ffn_name(layer: int, s: int) -> str:
        return f"L{layer}_ffn_s{s}"

    def program(self, name: str) -> Graph:
        m = re.fullmatch(r"encoder_s(\d+)", name)
        if m:
            return self.encoder(int(m.group(1)))
        m = re.fullmatch(r"L(\d+)_(attn|ffn)_s(\d+)", name)
        if not m or not 0 <= int(m.group(1)) < self.n_layer:
            raise ModelError(f"'{name}' is not a program of this model",
                             hint="programs: encoder_sS (and the per-layer building blocks L{i}_attn_sS, L{i}_ffn_sS)")
        layer, s = int(m.group(1)), int(m.group(3))
        return self.attn(layer, s) if m.group(2) == "attn" else self.ffn(layer, s)

    def encoder(self, s: int) -> Graph:
        """The whole encoder over a bucket of ``s`` positions: ``x, mask -> h``."""
        b = ModelBuilder(self.encoder_name(s))
        x = b.input("x", "fp32", [1, self.d, 1, s])
        mask = b.input("mask", "fp16", [1, 1, s, s])
        h = b.cast(x, dtype="fp16", name="xh")
        for i in range(self.n_layer):
            with b.scope(f"L{i}_"):
                h = self._ffn_block(b, self._attn_block(b, h, mask, i), i)
        b.ret(b.cast(h, dtype="fp32", name="h"))
        return b.graph

    def attn(self, layer: int, s: int) -> Graph:
        """Attention of ``layer`` as a func of its own (a building block: the model runs :meth:`encoder`)."""
        b = ModelBuilder(self.attn_name(layer, s))
        x = b.input("x", "fp32", [1, self.d, 1, s])
        mask = b.input("mask", "fp16", [1, 1, s, s])
        xh = b.cast(x, dtype="fp16", name="xh")
        b.ret(b.cast(self._attn_block(b, xh, mask, layer), dtype="fp32", name="h"))
        return b.graph

    def ffn(self, layer: int, s: int) -> Graph:
        """Feed-forward of ``layer`` as a func of its own (a building block, as :meth:`attn`)."""
        b = ModelBuilder(self.ffn_name(layer, s))
        x = b.input("x", "fp32", [1, self.d, 1, s])
        xh = b.cast(x, dtype="fp16", name="xh")
        b.ret(b.cast(self._ffn_block(b, xh, layer), dtype="fp32", name="h"))
        return b.graph

    def _attn_block(self, b: ModelBuilder, xh: Value, mask: Value, layer: int) -> Value:
        """``LayerNorm(x + dense(attention(q(x), k(x), v(x), mask)))`` in fp16."""
        p = self._k(f"encoder.layer.{layer}.attention")
        q = b.linear(xh, f"{p}.self.query.weight", self.d, f"{p}.self.query.bias", "q")
        k = b.linear(xh, f"{p}.self.key.weight", self.d, f"{p}.self.key.bias", "k")
        v = b.linear(xh, f"{p}.self.value.weight", self.d, f"{p}.self.value.bias", "v")
        qs = b.mul(q, b.scalar((self.d // self.n_head) ** -0.5), name="qs")
        ctx = b.attention(b.to_heads(qs, self.n_head, "q"), b.to_heads(k, self.n_head, "k"),
                          b.to_heads(v, self.n_head, "v"), mask)
        o = b.linear(ctx, f"{p}.output.dense.weight", self.d, f"{p}.output.dense.bias", "o")
        r = b.add(xh, o, name="ra")
        return b.layer_norm(r, f"{p}.output.LayerNorm.weight", f"{p}.output.LayerNorm.bias", self.eps, "ln1")

    def _ffn_block(self, b: ModelBuilder, xh: Value, layer: int) -> Value:
        """``LayerNorm(x + output(gelu(intermediate(x))))`` in fp16."""
        p = self._k(f"encoder.layer.{layer}")
        h = b.linear(xh, f"{p}.intermediate.dense.weight", self.d_ffn, f"{p}.intermediate.dense.bias", "fc")
        a = b.gelu(h, mode=self.gelu_mode, name="act")
        o = b.linear(a, f"{p}.output.dense.weight", self.d, f"{p}.output.dense.bias", "proj")
        r = b.add(xh, o, name="rf")
        return b.layer_norm(r, f"{p}.output.LayerNorm.weight", f"{p}.output.LayerNorm.bias", self.eps, "ln2")

    # ---- host side
    def _table(self, name: str) -> np.ndarray:
        key = "host." + name
        if key not in self._cache:
            self._cache[key] = self.ckpt.get_f32(self._k(name))
        return self._cache[key]

    def embed(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Embedding rows ``[n, C]`` (fp32): word + position + token type 0, LayerNorm."""
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab):
            raise ModelError(f"token ids must be in [0, {self.vocab})")
        e = (self._table("embeddings.word_embeddings.weight")[ids]
             + self._table("embeddings.position_embeddings.weight")[np.asarray(positions)]
             + self._table("embeddings.token_type_embeddings.weight")[0])
        mu = e.mean(axis=1, keepdims=True)
        var = ((e - mu) ** 2).mean(axis=1, keepdims=True)
        n = (e - mu) / np.sqrt(var + self.eps)
        return (n * self._table("embeddings.LayerNorm.weight")
                + self._table("embeddings.LayerNorm.bias")).astype(np.float32)

    # ---- export
    def export_funcs(self, buckets: list[int] | None = None) -> tuple[dict[str, list[Graph]], dict[str, Any]]:
        """What ``anec models export`` writes: one ``.ir`` per bucket (the encoder func)
        and the ``model.json`` fields that describe them."""
        self.check_tensors()
        buckets = buckets or [self.buckets[min(1, len(self.buckets) - 1)]]
        for s in buckets:
            if s not in self.buckets:
                raise ModelError(f"bucket {s} is not one of {self.buckets}")
        groups = {self.encoder_name(s): [self.encoder(s)] for s in buckets}
        info = {
            "model": self.kind, "checkpoint": str(self.ckpt.path),
            "config": {"n_layer": self.n_layer, "d_model": self.d, "n_head": self.n_head,
                       "d_ffn": self.d_ffn, "vocab": self.vocab, "max_len": self.max_len, "eps": self.eps},
            "buckets": {"encoder": buckets, "all": self.buckets},
            "host": ["embeddings + LayerNorm", "mean pooling", "L2 normalisation"],
        }
        return groups, info


def pack(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Group sequence indexes into rows of total length <= ``capacity`` (in order, first fit)."""
    rows: list[list[int]] = []
    used: list[int] = []
    for i, n in enumerate(lengths):
        if n > capacity:
            raise ModelError(f"a sequence of {n} tokens does not fit {capacity} positions")
        for r, u in enumerate(used):
            if u + n <= capacity:
                rows[r].append(i)
                used[r] += n
                break
        else:
            rows.append([i])
            used.append(n)
    return rows


def block_mask(lengths: Sequence[int], s: int) -> np.ndarray:
    """``[1, 1, s, s]`` additive mask: tokens attend within their own segment only.

    Padding columns form one more segment, so their rows are not all masked."""
    seg = np.full(s, len(lengths), np.int64)
    pos = 0
    for i, n in enumerate(lengths):
        seg[pos:pos + n] = i
        pos += n
    same = seg[:, None] == seg[None, :]
    return np.where(same, 0.0, MASK_NEG).astype(np.float16).reshape(1, 1, s, s)


class SentenceEncoder:
    """Sentence embeddings from a BERT checkpoint on ANE programs (or the interpreter)."""

    def __init__(self, bert: Bert, backend: str = "auto", target: str | None = None,
                 progress: Progress | None = None, tokenizer: Tokenizer | None = None,
                 normalize: bool = True, compress: Any = None, compress_gate: Any = None,
                 compress_form: str | None = None) -> None:
        self.bert = bert
        self.tokenizer = tokenizer
        self.normalize = normalize
        self.progress = progress or Progress(False)
        self.programs = ProgramCache(bert.weight, backend=backend, target=target, compress=compress,
                                     compress_gate=compress_gate, compress_form=compress_form)

    def tokenize(self, sentences: Iterable[str]) -> list[list[int]]:
        if self.tokenizer is None:
            from anec.models.hf import load_tokenizer

            self.tokenizer = load_tokenizer(self.bert.ckpt.path)
        out = []
        for s in sentences:
            ids = self.tokenizer.encode(s)
            if len(ids) > self.bert.max_len:  # truncate, keeping the final [SEP]
                ids = ids[: self.bert.max_len - 1] + ids[-1:]
            out.append(ids)
        return out

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """``[len(sentences), C]`` sentence embeddings (L2-normalised by default)."""
        return self.encode_ids(self.tokenize(sentences))

    def _run(self, name: str, **inputs: Any) -> dict[str, np.ndarray]:
        prog = self.programs.get(name, lambda: self.bert.program(name))
        return prog(**inputs)

    def hidden_states(self, ids: Sequence[int], s: int | None = None) -> np.ndarray:
        """Last hidden state ``[n, C]`` of one sequence (for testing against the reference)."""
        return self._forward([list(ids)], s)[0]

    def _forward(self, segs: list[list[int]], s: int | None = None) -> list[np.ndarray]:
        lengths = [len(x) for x in segs]
        total = sum(lengths)
        s = s or pick_bucket(total, self.bert.buckets, "batch row")
        ids = np.full(s, self.bert.pad_id, np.int64)
        positions = np.zeros(s, np.int64)
        pos = 0
        for seg in segs:
            ids[pos:pos + len(seg)] = seg
            positions[pos:pos + len(seg)] = np.arange(len(seg))
            pos += len(seg)
        x = to_bc1s(self.bert.embed(ids, positions), s)
        mask = block_mask(lengths, s)
        self.compile(s)
        x = self._run(self.bert.encoder_name(s), x=x, mask=mask)["h"]
        rows = from_bc1s(x, total)
        out, pos = [], 0
        for n in lengths:
            out.append(rows[pos:pos + n])
            pos += n
        return out

    def compile(self, s: int) -> None:
        """Build, compile and load the encoder of bucket ``s`` now (with a progress bar)."""
        self.programs.get_all([self.bert.encoder_name(s)], self.bert.program, self.progress)

    def encode_ids(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        """Embeddings of token-id sequences: packed into buckets, mean-pooled, normalised."""
        segs = [list(map(int, b)) for b in batch]
        if not segs or any(len(x) == 0 for x in segs):
            raise ModelError("every sentence needs at least one token")
        for x in segs:
            if len(x) > self.bert.max_len:
                raise ModelError(f"a sequence of {len(x)} tokens exceeds the model's {self.bert.max_len}")
        capacity = pick_bucket(max(len(x) for x in segs), self.bert.buckets)
        out = np.zeros((len(segs), self.bert.d), np.float32)
        for row in pack([len(x) for x in segs], capacity):
            states = self._forward([segs[i] for i in row])
            for i, h in zip(row, states):
                out[i] = h.mean(axis=0)
        if self.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out

    def stats(self) -> dict[str, Any]:
        return self.programs.stats()

    def close(self) -> None:
        self.programs.close()


def cosine_matrix(e: np.ndarray) -> np.ndarray:
    n = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12)
    return n @ n.T


def load_sentence_encoder(checkpoint: str, backend: str = "auto", target: str | None = None,
                          progress: Progress | None = None, compress: Any = None,
                          compress_gate: Any = None, compress_form: str | None = None) -> SentenceEncoder:
    from anec.models.buckets import target_limits
    from anec.models.hf import load_checkpoint

    ckpt = load_checkpoint(checkpoint)
    if ckpt.model_type != "bert":
        raise ModelError(f"'{checkpoint}' is a {ckpt.model_type or 'unknown'} checkpoint, not bert",
                         hint="anec embed takes a BERT-family sentence-embedding checkpoint (e.g. all-MiniLM-L6-v2)")
    _, min_surface = target_limits(target)
    bert = Bert(ckpt, min_surface)
    bert.check_tensors()
    return SentenceEncoder(bert, backend=backend, target=target, progress=progress, compress=compress,
                           compress_gate=compress_gate, compress_form=compress_form)

