"""The decoder-only transformer frontend shared by GPT-2 and Llama.

A model is a set of ANE programs, one func each, named by what they compute
and their bucket:

``L{i}_attn_p{S}``      prefill attention of layer i over S positions
                        in:  x fp32[1, C, 1, S] (+ RoPE tables)
                        out: h fp32[1, C, 1, S], k, v fp16[1, KV, S, D]
``L{i}_attn_d{W}_t{T}`` decode attention: W new positions (the token in
                        column 0), a KV cache of T past positions
                        in:  x, kc/vc fp16[1, KV, T, D], mask fp16[1, 1, W, T]
                        out: h, k, v (the new block's keys and values)
``L{i}_mlp_s{S}``       the feed-forward half of layer i
``lm_head_s{S}``        final norm + LM head (a 1x1 conv with vocab output
                        channels; legalize chunks it past the target's
                        maximum conv output channels)

K and V leave the programs already in the cache layout ``[1, KV, S, D]``, so
the host only copies rows into its cache. The embedding lookup, the KV cache
and sampling stay on the host. The causal mask of a block is a generated
weight (``anec.mask.causal.S``): the masks and other generated tensors are
added to the exported weights next to the checkpoint tensors.

Subclasses say what differs: the norm, the q/k/v projections and positions
(GPT-2 learned positions; Llama RoPE), the MLP, and the weight layout.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from anec.ir.graph import Graph, Value
from anec.ir.ops import is_weight_const
from anec.models.blocks import ModelBuilder
from anec.models.buckets import bucket_list, min_bucket
from anec.models.common import ModelError
from anec.models.layout import causal_mask
from anec.fsutil import write_text_atomic
from anec.models.hf import Checkpoint, save_safetensors

_NAME = re.compile(r"(?:L(\d+)_)?(attn|mlp|lm_head)_(?:p(\d+)|d(\d+)_t(\d+)|s(\d+))\Z")


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
            raise ModelError(f"hidden size {cfg.d_model} is not heads ({cfg.n_head}) x head_dim ({cfg.head_dim})")
        if cfg.n_head % cfg.n_kv_head:
            raise ModelError(f"{cfg.n_head} attention heads do not divide into {cfg.n_kv_head} KV heads")
        self.width = min_bucket(cfg.d_model, 4, min_surface)
        """Decode block width W (and the smallest prefill bucket)."""
        self.buckets = bucket_list(self.width, cfg.max_pos)
        self._cache: dict[str, np.ndarray] = {}

    # ---- weights ---------------------------------------------------------------
    def weight(self, key: str) -> np.ndarray:
        """The tensor for ``key`` in the layout the IR declares (fp32)."""
        arr = self._cache.get(key)
        if arr is None:
            arr = self._generated(key) if key.startswith("anec.") else self._layout(key, self.ckpt.get_f32(key))
            self._cache[key] = arr
        return arr

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
    def program(self, name: str) -> Graph:
        """Build the func called ``name`` (see the module docstring)."""
        m = _NAME.match(name)
        if not m:
            raise ModelError(f"'{name}' is not a program of this model")
        layer, what, p, dw, dt, s = m.groups()
        if what == "lm_head":
            if layer is not None or s is None:
                raise ModelError(f"'{name}' is not a program of this model")
            return self.lm_head(int(s))
        if layer is None or not 0 <= int(layer) < self.cfg.n_layer:
            raise ModelError(f"'{name}': no such layer (the model has {self.cfg.n_layer})")
        i = int(layer)
        if what == "mlp":
            if s is None:
                raise ModelError(f"'{name}' is not a program of this model")
            return self.mlp(i, int(s))
        if p is not None:
            return self.attn(i, int(p))
        if dw is not None:
            return self.attn(i, int(dw), int(dt))
        raise ModelError(f"'{name}' is not a program of this model")

    @staticmethod
    def attn_name(layer: int, s: int, t: int | None = None) -> str:
        return f"L{layer}_attn_p{s}" if t is None else f"L{layer}_attn_d{s}_t{t}"

    @staticmethod
    def mlp_name(layer: int, s: int) -> str:
        return f"L{layer}_mlp_s{s}"

    @staticmethod
    def lm_head_name(s: int) -> str:
        return f"lm_head_s{s}"

    def attn(self, layer: int, s: int, t: int | None = None) -> Graph:
        """Attention half of ``layer``: prefill (``t`` None) or decode against a cache of ``t``."""
        c = self.cfg
        b = ModelBuilder(self.attn_name(layer, s, t))
        x = b.input("x", "fp32", [1, c.d_model, 1, s])
        pos_in = self._position_input_values(b, s)
        if t is not None:
            kc = b.input("kc", "fp16", [1, c.n_kv_head, t, c.head_dim])
            vc = b.input("vc", "fp16", [1, c.n_kv_head, t, c.head_dim])
            mask = b.input("mask", "fp16", [1, 1, s, t])
        xh = b.cast(x, dtype="fp16", name="xh")
        n = self._norm(b, xh, self._attn_norm_keys(layer), "ln1")
        q, k, v = self._qkv(b, n, layer)
        q = b.mul(q, b.scalar(c.head_dim ** -0.5), name="qs")
        qh, kh = self._positions(b, q, k, pos_in)
        vh = b.to_heads(v, c.n_kv_head, "v", out="v")
        causal = b.weight(f"anec.mask.causal.{s}", [1, 1, s, s], "causal")
        if t is None:
            ctx = b.attention(qh, kh, vh, causal)
        else:
            ctx = b.attention_cached(qh, kc, vc, mask, kh, vh, causal)
        o = self._out_proj(b, ctx, layer)
        r = b.add(xh, o, name="r")
        h = b.cast(r, dtype="fp32", name="h")
        b.ret(h, kh, vh)
        return b.graph

    def mlp(self, layer: int, s: int) -> Graph:
        """Feed-forward half of ``layer`` with its residual connection."""
        b = ModelBuilder(self.mlp_name(layer, s))
        x = b.input("x", "fp32", [1, self.cfg.d_model, 1, s])
        xh = b.cast(x, dtype="fp16", name="xh")
        n = self._norm(b, xh, self._mlp_norm_keys(layer), "ln2")
        o = self._mlp_body(b, n, layer)
        r = b.add(xh, o, name="r")
        b.ret(b.cast(r, dtype="fp32", name="h"))
        return b.graph

    def lm_head(self, s: int) -> Graph:
        """Final norm and the LM head: logits fp32[1, vocab, 1, s]."""
        c = self.cfg
        b = ModelBuilder(self.lm_head_name(s))
        x = b.input("x", "fp32", [1, c.d_model, 1, s])
        xh = b.cast(x, dtype="fp16", name="xh")
        n = self._norm(b, xh, self._final_norm_keys(), "lnf")
        logits = b.linear(n, self._lm_head_key(), c.vocab, None, "head")
        b.ret(b.cast(logits, dtype="fp32", name="logits"))
        return b.graph

    # ---- per-architecture hooks ------------------------------------------------------
    def _position_input_values(self, b: ModelBuilder, s: int) -> dict[str, Value]:
        return {}

    def _positions(self, b: ModelBuilder, q: Value, k: Value, pos_in: dict[str, Value]) -> tuple[Value, Value]:
        """Queries and keys to heads (applying positions if the model rotates them)."""
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
    def program_names(self, prefill: list[int], decode: list[int], head: list[int] | None = None) -> dict[str, list[str]]:
        """Program names grouped by .ir file for the given prefill and cache buckets."""
        c, w = self.cfg, self.width
        groups: dict[str, list[str]] = {}
        mlp_widths = sorted(set(prefill) | ({w} if decode else set()))
        for s in prefill:
            groups[f"prefill_s{s}"] = [self.attn_name(i, s) for i in range(c.n_layer)]
        for t in decode:
            groups[f"decode_w{w}_t{t}"] = [self.attn_name(i, w, t) for i in range(c.n_layer)]
        for s in mlp_widths:
            groups[f"mlp_s{s}"] = [self.mlp_name(i, s) for i in range(c.n_layer)]
        heads = sorted(set(head if head is not None else [w]))
        groups["lm_head"] = [self.lm_head_name(s) for s in heads]
        return groups

    def export(self, out_dir: str | Path, prefill: list[int] | None = None,
               decode: list[int] | None = None) -> dict[str, Any]:
        """Write ``*.ir`` (one file per program group), ``weights.safetensors`` and ``model.json``."""
        from anec.ir.graph import Module, WeightSource
        from anec.ir.printer import print_module
        from anec.ir.verifier import verify

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        prefill = prefill or [self.buckets[min(2, len(self.buckets) - 1)]]
        decode = decode or [self.buckets[min(3, len(self.buckets) - 1)]]
        for s in prefill + decode:
            if s not in self.buckets:
                raise ModelError(f"bucket {s} is not one of {self.buckets}")
        groups = self.program_names(prefill, decode)
        files: dict[str, list[str]] = {}
        keys: dict[str, None] = {}
        for group, names in groups.items():
            module = Module()
            module.weight_sources.append(WeightSource("weights.safetensors"))
            for n in names:
                g = self.program(n)
                module.add_func(g)
                for node in g.nodes:
                    if is_weight_const(node):
                        keys.setdefault(node.attrs["weight"], None)
            verify(module)
            text = f"// {self.kind} programs '{group}', generated by `anec models export`.\n" + print_module(module)
            write_text_atomic(out / f"{group}.ir", text)
            files[f"{group}.ir"] = names
        tensors = {k: self.weight(k).astype(np.float16) for k in keys}
        save_safetensors(out / "weights.safetensors", tensors, {"format": "anec-weights", "model": self.kind})
        info = {
            "format": "anec-model/1",
            "model": self.kind,
            "checkpoint": str(self.ckpt.path),
            "config": asdict(self.cfg),
            "decode_width": self.width,
            "buckets": {"prefill": prefill, "decode_cache": decode, "all": self.buckets},
            "files": files,
            "weights": "weights.safetensors",
        }
        write_text_atomic(out / "model.json", json.dumps(info, indent=2) + "\n")
        return info
