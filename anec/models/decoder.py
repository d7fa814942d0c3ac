"""The decoder-only transformer frontend shared by GPT-2 and Llama.

A model is one func per bucket for the whole layer stack, plus the LM head;
the compiler cuts each func into a pipeline of ANE programs within the
target's budgets (:mod:`anec.passes.partition`), and the runtime runs a
pipeline as one program:

``prefill_s{S}``        the prompt through every layer, S positions
                        in:  x fp32[1, C, 1, S] (+ cos, sin for RoPE)
                        out: h fp32[1, C, 1, S], L{i}_k, L{i}_v fp16[1, KV, S, D]
``decode_w{W}_t{T}``    W new positions (the token in column 0) against a KV
                        cache of T past positions
                        in:  x, mask fp16[1, 1, W, T], mask_new fp16[1, 1, W, W],
                             L{i}_kc, L{i}_vc fp16[1, KV, T, D]
                        out: h, L{i}_k, L{i}_v (the new block's keys and values)
``lm_head_s{S}``        final norm + LM head: one 1x1 conv per vocabulary
                        chunk within the target's conv channel limit
                        out: logits_c0, logits_c1, ... fp16[1, V_i, 1, S]

K and V leave the programs already in the cache layout ``[1, KV, S, D]``, so
a decode step writes its new row straight into the decode program's cache
inputs, which keep the cache between steps (anec.models.generate). The
embedding lookup and sampling stay on the host. The causal mask of a prefill block is a
generated weight (``anec.mask.causal.S``), one const per func (each program of the
pipeline holds a copy); generated tensors are added to the exported weights
next to the checkpoint tensors. A decode func's new-block mask is its ``mask_new``
input instead: a one-token step (the token in column 0, padding after it) passes the
step mask (:func:`~anec.models.layout.step_mask`: every row opens column 0 alone), so
the padding columns, given equal inputs, stay equal at every layer and the sim computes
each product's padding once (2 distinct columns instead of W) while column 0 computes
what the causal mask gives; a block of several real tokens passes the causal mask.

The LM head stays its own func, shared by every bucket, rather than joining
the bucket funcs. By cost (GPT-2 small; ``benchmarks/bench_partition.py``
measures the decode case, results in ``benchmarks/results/partition.md``):

* only the last position's logits are needed, and the host already holds the
  final hidden state: the head runs on a W-wide block (W = 16: 1.2 GFLOP)
  instead of over the S prefill columns (S = 64: 4.9 GFLOP, 45% of the layer
  stack's 10.9 GFLOP);
* the head's weight (the 77 MB tied embedding, split into 4 chunks) would be
  held, and compiled, once per bucket func instead of once;
* when a pipeline gave every surface of every stage one allocation size, the
  logits pieces (``[1, 50257, 1, S]`` fp32 in 4 chunks) set that size for every
  KV cache and residual surface of the body: the decode pipeline's surfaces grew
  from 11.7 MiB (body and head) to 72.9 MiB, the prefill pipeline's from 20 MiB
  to 187 MiB (surfaces are now sized per stage, so only the head's stage would
  be that large).

A joined head adds no program (it fits the last stage's BLOBFILE budget) and
saves one host round trip per step: measured on the sim, the same CPU time per
token (0.159 s) and 10% less wall time, for 6x the surface memory (measured
with one surface size per pipeline).

The per-layer funcs (``L{i}_attn_p{S}``, ``L{i}_attn_d{W}_t{T}``,
``L{i}_mlp_s{S}``) are the same layer code as funcs of their own: building
blocks to compare the partitioned stack with (the hand split of earlier
versions). Subclasses say what differs: the norm, the q/k/v projections and
positions (GPT-2 learned positions; Llama RoPE), the MLP, and the weight
layout.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from anec.ir.graph import Graph
from anec.ir.nodes import Value
from anec.models.blocks import ModelBuilder
from anec.models.buckets import bucket_list, head_channel_limit, min_bucket, vocab_chunks
from anec.models.common import ModelError
from anec.models.layout import causal_mask
from anec.models.hf import Checkpoint, CheckpointError

_NAME = re.compile(r"(?:prefill_s(\d+)|decode_w(\d+)_t(\d+)|lm_head_s(\d+))\Z")
_LAYER = re.compile(r"L(\d+)_(?:attn_(?:p(\d+)|d(\d+)_t(\d+))|mlp_s(\d+))\Z")


@dataclass(frozen=True)
class DecoderConfig:
    """The shape of a decoder-only model."""

    n_layer: int
    d_model: int
    n_head: int
    n_kv_head: int
    head_dim: int
    d_ffn: int
    vocab: int
    max_pos: int
    eps: float

    @property
    def d_kv(self) -> int:
        return self.n_kv_head * self.head_dim


class DecoderFrontend(ABC):
    """Base class: program builders, weight export and host-side embedding."""

    kind = "decoder"

    def __init__(self, ckpt: Checkpoint, cfg: DecoderConfig, min_surface: int | None = None) -> None:
        self.ckpt = ckpt
        self.cfg = cfg
        if cfg.d_model != cfg.n_head * cfg.head_dim:
            raise CheckpointError(f"{ckpt.config_file}: hidden size {cfg.d_model} is not heads ({cfg.n_head}) x "
                                  f"head_dim ({cfg.head_dim})")
        if cfg.n_head % cfg.n_kv_head:
            raise CheckpointError(f"{ckpt.config_file}: {cfg.n_head} attention heads do not divide into "
                                  f"{cfg.n_kv_head} KV heads")
        self.width = min_bucket(cfg.d_model, 4, min_surface)
        """Decode block width W (and the smallest prefill bucket)."""
        self.buckets = bucket_list(self.width, cfg.max_pos)
        self._cache: dict[str, np.ndarray] = {}

    @abstractmethod
    def check_tensors(self) -> None:
        """Hold the checkpoint's tensors against the config: every tensor the model reads present
        with its shape and a float dtype, no other tensor (CheckpointError otherwise)."""

    # ---- weights ---------------------------------------------------------------
    def weight(self, key: str) -> np.ndarray:
        """The tensor for ``key`` in the layout the IR declares: a checkpoint tensor is a view of
        the memory-mapped file in its stored dtype (bf16 widened to fp32), so no copy of the
        model is ever held; a generated tensor (``anec.*``) is made once."""
        if not key.startswith("anec."):
            return self._layout(key, self.ckpt.stored(key))
        arr = self._cache.get(key)
        if arr is None:
            arr = self._cache[key] = self._generated(key)
        return arr

    def release_pages(self) -> None:
        """Give the checkpoint's mapped pages back to the kernel (after a compile has copied
        what it needs): views stay valid and read their pages again when used."""
        for key in self.ckpt.keys():
            self.ckpt.drop_pages(key)

    def _layout(self, key: str, arr: np.ndarray) -> np.ndarray:
        """Checkpoint layout -> IR layout: vectors to [1, C, 1, 1], matrices [out, in] to [out, in, 1, 1]."""
        if arr.ndim == 1:
            return arr.reshape(1, -1, 1, 1)
        if arr.ndim == 2:
            return arr.reshape(arr.shape[0], arr.shape[1], 1, 1)
        return arr

    def _generated(self, key: str) -> np.ndarray:
        m = re.fullmatch(r"anec\.mask\.causal\.(\d+)", key)
        if m:
            return causal_mask(int(m.group(1))).astype(np.float32)
        raise ModelError(f"unknown generated tensor '{key}'")

    # ---- host side ---------------------------------------------------------------
    @abstractmethod
    def embed(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``[n, C]`` fp32 input rows for tokens ``ids`` at ``positions``."""

    def position_inputs(self, positions: np.ndarray, width: int) -> dict[str, np.ndarray]:
        """Extra program inputs that depend on positions (RoPE tables)."""
        return {}

    # ---- programs ------------------------------------------------------------------
    def program(self, name: str, head_limit: int | None = None) -> Graph:
        """Build the func called ``name`` (see the module docstring); ``head_limit`` is the LM
        head's chunk size (:meth:`lm_head`)."""
        m = _NAME.match(name) or _LAYER.match(name)
        if not m:
            raise ModelError(f"'{name}' is not a program of this model",
                             hint="programs: prefill_sS, decode_wW_tT, lm_head_sS (and the per-layer "
                                  "building blocks L{i}_attn_pS, L{i}_attn_dW_tT, L{i}_mlp_sS)")
        nums = [None if g is None else int(g) for g in m.groups()]
        layer, *sizes = nums if m.re is _LAYER else [None, *nums]
        if 0 in sizes:
            raise ModelError(f"'{name}': a bucket must hold at least one position")
        if layer is None:
            s, w, t, h = sizes
            return self.prefill(s) if s is not None else self.decode(w, t) if w is not None else self.lm_head(h, head_limit)
        if not 0 <= layer < self.cfg.n_layer:
            raise ModelError(f"'{name}': no such layer (the model has {self.cfg.n_layer})")
        p, dw, dt, ms = sizes
        if ms is not None:
            return self.mlp(layer, ms)
        return self.attn(layer, p) if p is not None else self.attn(layer, dw, dt)

    @staticmethod
    def prefill_name(s: int) -> str:
        return f"prefill_s{s}"

    @staticmethod
    def decode_name(w: int, t: int) -> str:
        return f"decode_w{w}_t{t}"

    @staticmethod
    def lm_head_name(s: int) -> str:
        return f"lm_head_s{s}"

    @staticmethod
    def attn_name(layer: int, s: int, t: int | None = None) -> str:
        return f"L{layer}_attn_p{s}" if t is None else f"L{layer}_attn_d{s}_t{t}"

    @staticmethod
    def mlp_name(layer: int, s: int) -> str:
        return f"L{layer}_mlp_s{s}"

    def prefill(self, s: int) -> Graph:
        """The whole layer stack over ``s`` positions: ``x -> h`` and every layer's K, V."""
        return self._stack(self.prefill_name(s), s, None)

    def decode(self, w: int, t: int) -> Graph:
        """The whole layer stack for a block of ``w`` new positions against a KV cache of ``t``."""
        return self._stack(self.decode_name(w, t), w, t)

    def _stack(self, name: str, s: int, t: int | None) -> Graph:
        c = self.cfg
        b = ModelBuilder(name)
        x = b.input("x", "fp32", [1, c.d_model, 1, s])
        shared = self._shared(b, s, t is not None)
        caches: list[tuple[Value, Value] | None] = [None] * c.n_layer
        if t is not None:
            mask = b.input("mask", "fp16", [1, 1, s, t])
            shared["causal"] = b.input("mask_new", "fp16", [1, 1, s, s])
            caches = [(b.input(f"L{i}_kc", "fp16", [1, c.n_kv_head, t, c.head_dim]),
                       b.input(f"L{i}_vc", "fp16", [1, c.n_kv_head, t, c.head_dim])) for i in range(c.n_layer)]
        h = b.cast(x, dtype="fp16", name="xh")
        kv: list[Value] = []
        for i in range(c.n_layer):
            with b.scope(f"L{i}_"):
                cache = None if t is None else (*caches[i], mask)
                h, k, v = self._attn_block(b, h, i, shared, cache)
                h = self._mlp_block(b, h, i)
            kv += [k, v]
        b.ret(b.cast(h, dtype="fp32", name="h"), *kv)
        return b.graph

    def attn(self, layer: int, s: int, t: int | None = None) -> Graph:
        """Attention half of ``layer`` as a func of its own: prefill (``t`` None) or decode
        against a cache of ``t``. A building block: the models run :meth:`prefill` / :meth:`decode`."""
        c = self.cfg
        b = ModelBuilder(self.attn_name(layer, s, t))
        x = b.input("x", "fp32", [1, c.d_model, 1, s])
        shared = self._shared(b, s, t is not None)
        cache = None
        if t is not None:
            cache = (b.input("kc", "fp16", [1, c.n_kv_head, t, c.head_dim]),
                     b.input("vc", "fp16", [1, c.n_kv_head, t, c.head_dim]),
                     b.input("mask", "fp16", [1, 1, s, t]))
            shared["causal"] = b.input("mask_new", "fp16", [1, 1, s, s])
        xh = b.cast(x, dtype="fp16", name="xh")
        r, k, v = self._attn_block(b, xh, layer, shared, cache)
        b.ret(b.cast(r, dtype="fp32", name="h"), k, v)
        return b.graph

    def mlp(self, layer: int, s: int) -> Graph:
        """Feed-forward half of ``layer`` as a func of its own (a building block, as :meth:`attn`)."""
        b = ModelBuilder(self.mlp_name(layer, s))
        x = b.input("x", "fp32", [1, self.cfg.d_model, 1, s])
        xh = b.cast(x, dtype="fp16", name="xh")
        r = self._mlp_block(b, xh, layer)
        b.ret(b.cast(r, dtype="fp32", name="h"))
        return b.graph

    def lm_head(self, s: int, limit: int | None = None) -> Graph:
        """Final norm and the LM head, the vocabulary in chunks of at most ``limit`` channels
        (default: the default target's conv channel limit): outputs ``logits_c0``,
        ``logits_c1``, ... fp16 ``[1, V_i, 1, s]`` in vocabulary order
        (:func:`~anec.models.buckets.vocab_chunks`). Each chunk is a 1x1 conv over a row
        slice of the head matrix, so no chunk reaches ANE-CONV-CHANNELS and the host reads
        the chunks where they land (:mod:`anec.models.sampling`): the logits are never
        concatenated, and stay fp16 (a cast to fp32 would not change a value)."""
        c = self.cfg
        b = ModelBuilder(self.lm_head_name(s))
        x = b.input("x", "fp32", [1, c.d_model, 1, s])
        xh = b.cast(x, dtype="fp16", name="xh")
        n = self._norm(b, xh, self._final_norm_keys(), "lnf")
        key, outs = self._lm_head_key(), []
        for i, (o0, o1) in enumerate(vocab_chunks(c.vocab, limit or head_channel_limit(None))):
            w = b.const_weight(key, f"fp16[{o1 - o0}, {c.d_model}, 1, 1]", name=f"head_w{i}",
                               slice=[0, o0, o1])
            outs.append(b.conv1x1(n, w, name=f"logits_c{i}"))
        b.ret(*outs)
        return b.graph

    # ---- layers (fp16 residual stream in, out) ---------------------------------------
    def _shared(self, b: ModelBuilder, s: int, decode: bool) -> dict[str, Value]:
        """What every layer of a func reads: the position inputs and, for prefill, the
        block's causal mask (a generated weight; a decode func's new-block mask is its
        ``mask_new`` input, which the caller adds as ``"causal"``). Built once per func, so a
        stage of the partitioned func holds one copy whatever layers it covers."""
        shared = self._position_input_values(b, s)
        if not decode:
            shared["causal"] = b.weight(f"anec.mask.causal.{s}", [1, 1, s, s], "causal")
        return shared

    def _attn_block(self, b: ModelBuilder, xh: Value, layer: int, shared: dict[str, Value],
                    cache: tuple[Value, Value, Value] | None) -> tuple[Value, Value, Value]:
        """Attention of ``layer`` with its residual: ``(xh + attn(norm(xh)), k, v)``;
        ``cache`` is ``(kc, vc, mask)`` for decode, None for prefill."""
        c = self.cfg
        n = self._norm(b, xh, self._attn_norm_keys(layer), "ln1")
        q, k, v = self._qkv(b, n, layer)
        q = b.mul(q, b.scalar(c.head_dim ** -0.5), name="qs")
        qh, kh = self._positions(b, q, k, shared)
        vh = b.to_heads(v, c.n_kv_head, "v", out="v")
        if cache is None:
            ctx = b.attention(qh, kh, vh, shared["causal"])
        else:
            kc, vc, mask = cache
            ctx = b.attention_cached(qh, kc, vc, mask, kh, vh, shared["causal"])
        o = self._out_proj(b, ctx, layer)
        return b.add(xh, o, name="ra"), kh, vh

    def _mlp_block(self, b: ModelBuilder, xh: Value, layer: int) -> Value:
        """Feed-forward of ``layer`` with its residual: ``xh + mlp(norm(xh))``."""
        n = self._norm(b, xh, self._mlp_norm_keys(layer), "ln2")
        o = self._mlp_body(b, n, layer)
        return b.add(xh, o, name="rm")

    # ---- per-architecture hooks ------------------------------------------------------
    def _position_input_values(self, b: ModelBuilder, s: int) -> dict[str, Value]:
        return {}

    def _positions(self, b: ModelBuilder, q: Value, k: Value, pos_in: dict[str, Value]) -> tuple[Value, Value]:
        """Queries and keys to heads (applying positions if the model rotates them); ``pos_in``
        holds at least the values of :meth:`_position_input_values`."""
        return b.to_heads(q, self.cfg.n_head, "q"), b.to_heads(k, self.cfg.n_kv_head, "k", out="k")

    @abstractmethod
    def _norm(self, b: ModelBuilder, x: Value, keys: tuple[str, str | None], name: str) -> Value:
        """The model's normalization (LayerNorm or RMSNorm) with weight keys ``keys``."""

    @abstractmethod
    def _qkv(self, b: ModelBuilder, n: Value, layer: int) -> tuple[Value, Value, Value]:
        """Queries ``[1, C, 1, S]``, keys and values ``[1, KV*D, 1, S]`` from the normed input."""

    @abstractmethod
    def _out_proj(self, b: ModelBuilder, ctx: Value, layer: int) -> Value:
        """The attention output projection."""

    @abstractmethod
    def _mlp_body(self, b: ModelBuilder, n: Value, layer: int) -> Value:
        """The feed-forward network applied to the normed input (no residual)."""

    @abstractmethod
    def _attn_norm_keys(self, layer: int) -> tuple[str, str | None]:
        """(scale, bias or None) keys of the norm before attention."""

    @abstractmethod
    def _mlp_norm_keys(self, layer: int) -> tuple[str, str | None]:
        """(scale, bias or None) keys of the norm before the MLP."""

    @abstractmethod
    def _final_norm_keys(self) -> tuple[str, str | None]:
        """(scale, bias or None) keys of the final norm."""

    @abstractmethod
    def _lm_head_key(self) -> str:
        """Key of the ``[vocab, C]`` LM head matrix (the embedding when tied)."""

    # ---- export ----------------------------------------------------------------------------
    def program_names(self, prefill: list[int], decode: list[int],
                      head: list[int] | None = None) -> dict[str, list[str]]:
        """Program names grouped by .ir file for the given prefill and cache buckets."""
        w = self.width
        groups: dict[str, list[str]] = {}
        for s in prefill:
            groups[self.prefill_name(s)] = [self.prefill_name(s)]
        for t in decode:
            groups[self.decode_name(w, t)] = [self.decode_name(w, t)]
        groups["lm_head"] = [self.lm_head_name(s) for s in sorted(set(head if head is not None else [w]))]
        return groups

    def export_funcs(self, prefill: list[int] | None = None, decode: list[int] | None = None
                     ) -> tuple[dict[str, list[Graph]], dict[str, Any]]:
        """What ``anec models export`` writes: the funcs per ``.ir`` file (one per bucket,
        and the LM head) and the ``model.json`` fields that describe them."""
        self.check_tensors()
        prefill = prefill or [self.buckets[min(2, len(self.buckets) - 1)]]
        decode = decode or [self.buckets[min(3, len(self.buckets) - 1)]]
        for s in prefill + decode:
            if s not in self.buckets:
                raise ModelError(f"bucket {s} is not one of {self.buckets}")
        groups = {name: [self.program(n) for n in names]
                  for name, names in self.program_names(prefill, decode).items()}
        info = {
            "model": self.kind,
            "checkpoint": str(self.ckpt.path),
            "config": asdict(self.cfg),
            "decode_width": self.width,
            "buckets": {"prefill": prefill, "decode_cache": decode, "all": self.buckets},
        }
        return groups, info
