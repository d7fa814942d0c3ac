"""Llama-family frontend (Llama 2/3 shapes, Stories110M, TinyLlama).

Per layer: RMSNorm, q/k/v projections, rotary positions (RoPE), grouped-query
attention, o_proj; then RMSNorm and the SwiGLU MLP
``down(silu(gate(x)) * up(x))``. Linear weights ``[out, in]`` become convs
``[out, in, 1, 1]``; keys stay the checkpoint's
(``model.layers.0.self_attn.q_proj.weight``).

RoPE follows Hugging Face's rotate-half convention::

    q' = q * cos + rotate_half(q) * sin,   rotate_half([a, b]) = [-b, a]

per head, with ``cos``/``sin`` of ``position * theta ** (-2i / D)`` repeated
over both halves. ``rotate_half`` is a concat of two slices, and concat is
illegal on the ANE unless it feeds a conv. We write it instead as a constant
linear map: ``rotate_half(x) = P x`` with ``P [D, D]`` a permutation with signs
(``P[i, i + D/2] = -1``, ``P[i + D/2, i] = 1``), applied as a 1x1 conv over the
head dimension. To make that a conv over exactly D channels, the heads are
moved into a spatial axis first::

    [1, H*D, 1, S] -reshape-> [1, H, D, S] -transpose-> [1, D, H, S] -reshape-> [1, D, 1, H*S]
    r = conv1x1(x, P)                                      # rotate_half, exact (entries are +-1)
    q' = x * cos + r * sin                                 # cos/sin inputs [1, D, 1, S], broadcast over heads
    [1, D, H, S] -transpose(0, 2, 3, 1)-> [1, H, S, D]     # the attention layout

``P`` is one generated weight (``anec.rope.rotate_half.D``) shared by q and k of every layer;
the ``cos``/``sin`` tables are program inputs computed by the host for the
block's positions, so one decode program serves every position.

Grouped-query attention (fewer KV heads than query heads) never repeats K/V:
the G query heads sharing a KV head are reshaped into the rows of one matmul
(see :meth:`ModelBuilder.attention`).
"""

from __future__ import annotations

import re

import numpy as np

from anec.ir.graph import Value
from anec.models.blocks import ModelBuilder
from anec.models.common import ModelError
from anec.models.decoder import DecoderConfig, DecoderFrontend
from anec.models.hf import Checkpoint, cfg_get


def llama_config(config: dict) -> DecoderConfig:
    d = int(cfg_get(config, "hidden_size", "dim"))
    h = int(cfg_get(config, "num_attention_heads", "n_heads"))
    return DecoderConfig(
        n_layer=int(cfg_get(config, "num_hidden_layers", "n_layers")),
        d_model=d, n_head=h,
        n_kv_head=int(config.get("num_key_value_heads") or h),
        head_dim=int(config.get("head_dim") or d // h),
        d_ffn=int(cfg_get(config, "intermediate_size")),
        vocab=int(cfg_get(config, "vocab_size")),
        # Mistral's sliding window equals full attention up to the window: cap the context there
        max_pos=min(int(cfg_get(config, "max_position_embeddings", default=2048)),
                    int(config.get("sliding_window") or 1 << 30)),
        eps=float(cfg_get(config, "rms_norm_eps", default=1e-6)),
    )


def rope_theta(config: dict) -> float:
    """The RoPE base, rejecting scaled variants we do not implement."""
    scaling = config.get("rope_scaling")
    params = config.get("rope_parameters")
    for spec in (scaling, params):
        if isinstance(spec, dict):
            kind = spec.get("rope_type", spec.get("type", "default"))
            if kind not in ("default", None):
                raise ModelError(f"RoPE scaling '{kind}' is not supported", hint="only plain RoPE (rope_type default)")
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(config.get("rope_theta", 10000.0))


def rotate_half_matrix(d: int) -> np.ndarray:
    """``P [d, d]`` with ``P @ [a, b] = [-b, a]`` (halves of length d/2)."""
    h = d // 2
    p = np.zeros((d, d), np.float32)
    p[np.arange(h), np.arange(h) + h] = -1.0
    p[np.arange(h) + h, np.arange(h)] = 1.0
    return p


class Llama(DecoderFrontend):
    """Llama programs and host glue for one checkpoint."""

    kind = "llama"

    def __init__(self, ckpt: Checkpoint, min_surface: int | None = None) -> None:
        super().__init__(ckpt, llama_config(ckpt.config), min_surface)
        cfg = ckpt.config
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ModelError(f"Llama activation '{act}' is not supported", hint="only SwiGLU with silu")
        if self.cfg.head_dim % 2:
            raise ModelError(f"RoPE needs an even head dim, got {self.cfg.head_dim}")
        self.theta = rope_theta(cfg)
        self.attn_bias = bool(cfg.get("attention_bias", False))
        self.mlp_bias = bool(cfg.get("mlp_bias", False))
        tied = bool(cfg.get("tie_word_embeddings", False)) or "lm_head.weight" not in ckpt
        self.head_key = "model.embed_tokens.weight" if tied else "lm_head.weight"
        ckpt.find("model.embed_tokens.weight")

    def _generated(self, key: str) -> np.ndarray:
        m = re.fullmatch(r"anec\.rope\.rotate_half\.(\d+)", key)
        if m:
            return rotate_half_matrix(int(m.group(1))).reshape(int(m.group(1)), int(m.group(1)), 1, 1)
        return super()._generated(key)

    # ---- host side
    def embed(self, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= self.cfg.vocab):
            raise ModelError(f"token ids must be in [0, {self.cfg.vocab})")
        key = "host.embed"
        if key not in self._cache:
            self._cache[key] = self.ckpt.get_f32("model.embed_tokens.weight")
        return self._cache[key][ids].astype(np.float32)

    def rope_tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``cos, sin [len(positions), D]`` in fp32, as Hugging Face computes them."""
        d = self.cfg.head_dim
        inv = 1.0 / (self.theta ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float32) / d))
        f = np.asarray(positions, np.float32)[:, None] * inv[None, :]
        emb = np.concatenate([f, f], axis=1)
        return np.cos(emb), np.sin(emb)

    def position_inputs(self, positions: np.ndarray, width: int) -> dict[str, np.ndarray]:
        cos, sin = self.rope_tables(positions)
        d = self.cfg.head_dim
        return {"cos": cos.T.reshape(1, d, 1, width).astype(np.float16),
                "sin": sin.T.reshape(1, d, 1, width).astype(np.float16)}

    # ---- hooks
    def _position_input_values(self, b: ModelBuilder, s: int) -> dict[str, Value]:
        d = self.cfg.head_dim
        return {"cos": b.input("cos", "fp16", [1, d, 1, s]), "sin": b.input("sin", "fp16", [1, d, 1, s])}

    def _rotation(self, b: ModelBuilder) -> Value:
        d = self.cfg.head_dim
        return b.weight(f"anec.rope.rotate_half.{d}", [d, d, 1, 1], "rot")  # one const per func

    def _shared(self, b: ModelBuilder, s: int) -> dict[str, Value]:
        shared = super()._shared(b, s)
        shared["rot"] = self._rotation(b)
        return shared

    def _positions(self, b: ModelBuilder, q: Value, k: Value, pos_in: dict[str, Value]) -> tuple[Value, Value]:
        p = self._rotation(b)
        return (self._rope(b, q, self.cfg.n_head, p, pos_in, "q", "qh"),
                self._rope(b, k, self.cfg.n_kv_head, p, pos_in, "k", "k"))

    def _rope(self, b: ModelBuilder, x: Value, heads: int, p: Value, pos_in: dict[str, Value],
              name: str, out: str) -> Value:
        d = self.cfg.head_dim
        s = x.type.shape[3]
        x4 = b.reshape(x, shape=[1, heads, d, s], name=f"{name}4")
        xd = b.transpose(x4, perm=[0, 2, 1, 3], name=f"{name}d")          # [1, D, H, S]
        xf = b.reshape(xd, shape=[1, d, 1, heads * s], name=f"{name}f")   # conv layout
        rf = b.conv1x1(xf, p, name=f"{name}rf")                            # rotate_half
        rd = b.reshape(rf, shape=[1, d, heads, s], name=f"{name}rd")
        xc = b.mul(xd, pos_in["cos"], name=f"{name}cos")
        rs = b.mul(rd, pos_in["sin"], name=f"{name}sin")
        xe = b.add(xc, rs, name=f"{name}e")
        return b.transpose(xe, perm=[0, 2, 3, 1], name=out)               # [1, H, S, D]

    def _norm(self, b: ModelBuilder, x: Value, keys: tuple[str, str | None], name: str) -> Value:
        return b.rms_norm(x, keys[0], self.cfg.eps, name)

    def _attn_norm_keys(self, layer: int) -> tuple[str, str | None]:
        return f"model.layers.{layer}.input_layernorm.weight", None

    def _mlp_norm_keys(self, layer: int) -> tuple[str, str | None]:
        return f"model.layers.{layer}.post_attention_layernorm.weight", None

    def _final_norm_keys(self) -> tuple[str, str | None]:
        return "model.norm.weight", None

    def _lm_head_key(self) -> str:
        return self.head_key

    def _proj(self, b: ModelBuilder, x: Value, module: str, cout: int, bias: bool, name: str) -> Value:
        return b.linear(x, f"{module}.weight", cout, f"{module}.bias" if bias else None, name)

    def _qkv(self, b: ModelBuilder, n: Value, layer: int) -> tuple[Value, Value, Value]:
        c, p = self.cfg, f"model.layers.{layer}.self_attn"
        q = self._proj(b, n, f"{p}.q_proj", c.n_head * c.head_dim, self.attn_bias, "q")
        k = self._proj(b, n, f"{p}.k_proj", c.d_kv, self.attn_bias, "kp")
        v = self._proj(b, n, f"{p}.v_proj", c.d_kv, self.attn_bias, "vp")
        return q, k, v

    def _out_proj(self, b: ModelBuilder, ctx: Value, layer: int) -> Value:
        return self._proj(b, ctx, f"model.layers.{layer}.self_attn.o_proj", self.cfg.d_model, self.attn_bias, "o")

    def _mlp_body(self, b: ModelBuilder, n: Value, layer: int) -> Value:
        c, p = self.cfg, f"model.layers.{layer}.mlp"
        g = self._proj(b, n, f"{p}.gate_proj", c.d_ffn, self.mlp_bias, "gate")
        u = self._proj(b, n, f"{p}.up_proj", c.d_ffn, self.mlp_bias, "up")
        a = b.mul(b.silu(g, "silu"), u, name="gated")
        return self._proj(b, a, f"{p}.down_proj", c.d_model, self.mlp_bias, "down")
